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
    /// The CUDA probe's latest result, when it is enabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda: Option<CudaReport>,
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
    /// Correctable (single-bit) ECC errors since the driver loaded
    /// (usage only: correctable errors are no fault).
    pub ecc_corrected_volatile: Option<u64>,
    /// nvmlDeviceGetUtilizationRates: percent of the last sample period in
    /// which a kernel ran (`gpu`) and device memory was read or written (`memory`).
    pub utilization: Option<Utilization>,
    /// nvmlDeviceGetMemoryInfo(_v2): device memory of the whole GPU.
    pub memory: Option<MemoryUsage>,
    /// `call: error` for calls that failed other than NotSupported.
    pub errors: Vec<String>,
    /// GPU fabric registration (NVSwitch generations); `None` where NVML
    /// does not support it.
    pub fabric: Option<FabricInfo>,
    /// State of each NVLink the GPU has (empty without NVLink).
    pub nvlinks: Vec<NvLinkState>,
    /// MIG mode is on (`None`: the GPU does not support MIG or did not say).
    pub mig_enabled: Option<bool>,
    /// The MIG instances carved out of this GPU while MIG mode is on: the
    /// devices NVIDIA's device plugin offers instead of the whole GPU.
    pub mig: Vec<MigInfo>,
}

/// One MIG instance of a GPU. It has no health of its own in NVML: an XID,
/// ECC error or loss of the parent is the instance's too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct MigInfo {
    /// nvmlDeviceGetMigDeviceHandleByIndex's index on the parent.
    pub index: u32,
    /// `MIG-…`: the id the device plugin registers with the kubelet.
    pub uuid: Option<String>,
    /// e.g. `NVIDIA H100 80GB HBM3 MIG 1g.10gb`.
    pub name: Option<String>,
    /// The instance's own device memory (NVML answers it for a MIG device
    /// handle; utilization, temperature, power and ECC are the parent's).
    pub memory: Option<MemoryUsage>,
}

/// Device memory in bytes, as NVML counts it (`used` includes what the
/// driver reserves for itself on the v1 call; the v2 call leaves that out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MemoryUsage {
    pub used_bytes: u64,
    pub total_bytes: u64,
}

/// nvmlUtilization_t: percentages over the driver's last sample period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Utilization {
    pub gpu_percent: u32,
    pub memory_percent: u32,
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
            cuda: None,
        }
    }
}

/// One CUDA probe run: can a process create a context and allocate memory
/// on each GPU, as a pod would? NVML can answer while CUDA cannot (on
/// NVSwitch systems without a running fabric manager, cuInit fails with
/// CUDA_ERROR_SYSTEM_NOT_READY while every NVML query succeeds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CudaReport {
    pub state: CudaState,
    /// Per CUDA device, in CUDA's enumeration order (joined to NVML's GPUs by UUID).
    pub devices: Vec<CudaDevice>,
    /// Wall time of the run this report comes from.
    #[serde(serialize_with = "millis")]
    pub elapsed: Duration,
    /// False when this is the last run's result, reused because the probe
    /// interval has not passed.
    pub fresh: bool,
}

/// Whether the CUDA driver API answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum CudaState {
    /// cuInit and cuDeviceGetCount succeeded; see each device.
    Ready,
    /// `libcuda.so.1` could not be loaded, or lacks a driver API symbol.
    LibraryMissing { detail: String },
    /// A node-wide call (cuInit, cuDeviceGetCount) failed.
    InitFailed { call: String, result: CudaResult },
    /// A call did not return within the timeout; the CUDA worker is stuck in it.
    NotAnswering { call: String, waited_ms: u64 },
}

/// A CUresult: the code and the name the driver gives it (cuGetErrorName),
/// e.g. `CUDA_ERROR_SYSTEM_NOT_READY`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CudaResult {
    pub code: i32,
    pub name: String,
    /// cuGetErrorString's text, when the driver gives one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl CudaResult {
    /// CUDA_ERROR_SYSTEM_NOT_READY (cuda.h): "the system is not yet ready to
    /// start any CUDA work", e.g. the fabric manager has not configured NVSwitch.
    pub const SYSTEM_NOT_READY: i32 = 802;
}

/// One CUDA device's context-and-allocation check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CudaDevice {
    pub ordinal: i32,
    /// NVML's format (`GPU-xxxxxxxx-…`), from cuDeviceGetUuid.
    pub uuid: Option<String>,
    /// Normalised `dddd:bb:dd.f`, from cuDeviceGetPCIBusId.
    pub pci_bus_id: Option<String>,
    /// The first call that failed (cuCtxCreate_v2, cuMemAlloc_v2, ...), if any.
    pub failure: Option<CudaFailure>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CudaFailure {
    pub call: String,
    pub result: CudaResult,
}

/// nvmlDeviceGetGpuFabricInfo(V): whether the fabric manager has registered
/// this GPU with the NVLink fabric (NVSwitch systems, Hopper and newer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FabricInfo {
    pub state: FabricState,
    /// The registration's own result when it is not NVML_SUCCESS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub clique_id: u32,
    pub cluster_uuid: String,
    /// nvmlGpuFabricInfo_v2 and later: the health mask (degraded bandwidth,
    /// route recovery, ...); `None` from the v1 call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_mask: Option<u32>,
}

/// NVML_GPU_FABRIC_STATE_*.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FabricState {
    NotSupported,
    NotStarted,
    InProgress,
    Completed,
    Unknown(u8),
}

impl FabricState {
    pub fn from_raw(v: u8) -> FabricState {
        match v {
            0 => FabricState::NotSupported,
            1 => FabricState::NotStarted,
            2 => FabricState::InProgress,
            3 => FabricState::Completed,
            v => FabricState::Unknown(v),
        }
    }
}

impl FabricInfo {
    /// NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE in the mask's lowest
    /// field (`(mask >> SHIFT_DEGRADED_BW) & WIDTH_DEGRADED_BW`, shift 0 and
    /// width 0x3 in nvml.h).
    pub fn degraded_bandwidth(&self) -> bool {
        self.health_mask.is_some_and(|m| m & 0x3 == 1)
    }
}

/// nvmlDeviceGetNvLinkState for one link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NvLinkState {
    pub link: u32,
    pub active: bool,
}
