//! What a GPU probe reports: plain data, so the policy and the report are
//! pure functions of it and tests can build snapshots by hand.

use std::time::Duration;

use serde::Serialize;

/// The edge that needs a driver. One call is one probe cycle; it must return
/// within the probe's own timeout even when the driver hangs.
pub trait GpuProbe {
    fn snapshot(&mut self) -> Snapshot;
}

/// One probe cycle's view of the driver and every GPU it answered for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Snapshot {
    pub driver: DriverState,
    pub system: Option<SystemInfo>,
    pub gpus: Vec<GpuInfo>,
    /// XID events received since the previous snapshot.
    pub xids: Vec<XidEvent>,
    /// What the probe could not set up (e.g. XID events unavailable).
    pub notes: Vec<String>,
    /// Wall time the probe cycle took.
    #[serde(serialize_with = "millis")]
    pub elapsed: Duration,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

/// Whether NVML answered. A missing library and a hung call are states the
/// policy reports, not errors of the probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum DriverState {
    /// NVML initialised and answered every call in time.
    Ready,
    /// `libnvidia-ml.so.1` could not be loaded (driver not installed).
    LibraryMissing { detail: String },
    /// `nvmlInit` (or a system-wide call) returned an error.
    InitFailed { call: String, error: String },
    /// A call did not return within the timeout; the probe thread is stuck in it.
    NotAnswering { call: String, waited_ms: u64 },
}

/// Per node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct SystemInfo {
    pub driver_version: Option<String>,
    /// e.g. `12.4`, from nvmlSystemGetCudaDriverVersion_v2.
    pub cuda_driver_version: Option<String>,
    pub nvml_version: Option<String>,
    /// What nvmlDeviceGetCount_v2 answered.
    pub device_count: u32,
}

/// Per GPU. `None` fields were not supported or failed; `errors` says which.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct GpuInfo {
    pub index: u32,
    pub uuid: Option<String>,
    pub name: Option<String>,
    /// Normalised `dddd:bb:dd.f`, comparable with PCI discovery.
    pub pci_bus_id: Option<String>,
    pub persistence_mode: Option<bool>,
    /// The driver answered NVML_ERROR_GPU_IS_LOST: fallen off the bus.
    pub lost: bool,
    pub ecc_uncorrected_volatile: Option<u64>,
    pub ecc_uncorrected_aggregate: Option<u64>,
    pub retired_pages_pending: Option<bool>,
    pub remapped_rows: Option<RemappedRows>,
    pub temperature_c: Option<u32>,
    /// NVML clocks-throttle-reasons bit mask (informational).
    pub throttle_reasons: Option<u64>,
    pub power_mw: Option<u32>,
    /// `call: error` for calls that failed other than NotSupported.
    pub errors: Vec<String>,
    /// MIG mode is on (`None`: the GPU does not support MIG or did not say).
    pub mig_enabled: Option<bool>,
    /// The MIG instances carved out of this GPU while MIG mode is on: the
    /// devices NVIDIA's device plugin offers instead of the whole GPU.
    pub mig: Vec<MigInfo>,
}

/// One MIG instance of a GPU. It has no health of its own in NVML: an XID,
/// ECC error or loss of the parent is the instance's too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigInfo {
    /// nvmlDeviceGetMigDeviceHandleByIndex's index on the parent.
    pub index: u32,
    /// `MIG-…`: the id the device plugin registers with the kubelet.
    pub uuid: Option<String>,
    /// e.g. `NVIDIA H100 80GB HBM3 MIG 1g.10gb`.
    pub name: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RemappedRows {
    pub correctable: u32,
    pub uncorrectable: u32,
    pub pending: bool,
    pub failed: bool,
}

/// One XID (critical error) event from the NVML event set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct XidEvent {
    pub gpu: Option<u32>,
    pub uuid: Option<String>,
    pub xid: u64,
}

impl Snapshot {
    /// A snapshot for a driver that did not get as far as listing GPUs.
    pub fn failed(driver: DriverState, elapsed: Duration) -> Snapshot {
        Snapshot {
            driver,
            system: None,
            gpus: Vec::new(),
            xids: Vec::new(),
            notes: Vec::new(),
            elapsed,
        }
    }
}
