//! The NVML probe, on nvml-wrapper: `libnvidia-ml.so.1` is opened at run
//! time, so nodeproof has no build- or link-time NVIDIA dependency and a
//! missing library is a state.
//!
//! NVML calls can block forever on a broken driver (a GPU in a bad state, a
//! kernel module stuck in an ioctl). Every call runs on one dedicated worker
//! thread; the caller waits at most the timeout. A worker stuck in a call is
//! left there (a thread blocked in the kernel cannot be cancelled) and every
//! later snapshot answers "not answering" at once, naming the call, without
//! starting another thread, until the stuck call returns.

use std::ffi::OsString;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::{nvml_sym, nvml_try, NvmlError};
use nvml_wrapper::{Device, EventSet, Nvml};

use super::cuda::CudaProbe;
use super::pci::normalize_bus_id;
use super::probe::{
    DriverState, FabricInfo, FabricState, GpuInfo, GpuProbe, MemoryUsage, MigInfo, NvLinkState,
    RemappedRows, Snapshot, SystemInfo, Utilization, XidEvent,
};
use super::worker::{lock, set_call, Progress};

/// The soname the driver installs (the unversioned `.so` comes only with
/// development packages, so it is not what a node has).
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

/// Most XID events taken from the event set per snapshot, so an event storm
/// cannot keep the worker busy past the timeout.
const MAX_EVENTS_PER_SNAPSHOT: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum NvmlProbeError {
    #[error("cannot start the NVML probe thread")]
    Spawn {
        #[source]
        source: std::io::Error,
    },
}

/// `GpuProbe` over NVML with a per-snapshot timeout.
pub struct NvmlProbe {
    library: OsString,
    timeout: Duration,
    worker: Option<Worker>,
    /// Run after each snapshot NVML answered (`with_cuda`).
    cuda: Option<CudaProbe>,
    /// Shut NVML down after every snapshot (`releasing`).
    release: bool,
    /// Read the usage fields too (`reading_usage`).
    usage: bool,
}

struct Worker {
    requests: Sender<SyncSender<Snapshot>>,
    progress: Arc<Mutex<Progress>>,
}

impl NvmlProbe {
    /// `library` is a soname or a path (tests pass the fake library's path).
    pub fn new(library: impl Into<OsString>, timeout: Duration) -> NvmlProbe {
        NvmlProbe {
            library: library.into(),
            timeout,
            worker: None,
            cuda: None,
            release: false,
            usage: true,
        }
    }

    /// Whether each snapshot also reads the GPUs' usage (utilization,
    /// memory, correctable ECC errors; each MIG instance's memory): on by
    /// default, the `/metrics` usage families come from it. Off, the probe
    /// reads only what the health policy judges (the usage benchmark's
    /// baseline).
    pub fn reading_usage(mut self, usage: bool) -> NvmlProbe {
        self.usage = usage;
        self
    }

    /// Shuts NVML down (nvmlShutdown, dlclose) after every snapshot, so the
    /// probe holds no driver handle between cycles; the next snapshot loads
    /// and initialises it again. XID events raised between snapshots are
    /// lost: the event set lives only as long as the session.
    pub fn releasing(mut self, release: bool) -> NvmlProbe {
        self.release = release;
        self
    }

    /// Adds the CUDA probe: it runs (on its own worker thread, at its own
    /// interval) after every snapshot in which NVML answered.
    pub fn with_cuda(mut self, cuda: CudaProbe) -> NvmlProbe {
        self.cuda = Some(cuda);
        self
    }

    fn spawn(&mut self) -> Result<&Worker, NvmlProbeError> {
        let (requests, rx) = mpsc::channel();
        let progress = Arc::new(Mutex::new(Progress::default()));
        let library = self.library.clone();
        let shared = Arc::clone(&progress);
        let (release, usage) = (self.release, self.usage);
        thread::Builder::new()
            .name("nodeproof-nvml".into())
            .spawn(move || worker(&library, release, usage, &rx, &shared))
            .map_err(|source| NvmlProbeError::Spawn { source })?;
        Ok(self.worker.insert(Worker { requests, progress }))
    }

    fn try_snapshot(&mut self) -> Result<Snapshot, NvmlProbeError> {
        let started = Instant::now();
        if let Some(w) = &self.worker {
            let p = lock(&w.progress);
            if let Some(since) = p.busy_since {
                return Ok(Snapshot::failed(
                    DriverState::NotAnswering {
                        call: p.call.clone(),
                        waited_ms: since.elapsed().as_millis() as u64,
                    },
                    started.elapsed(),
                ));
            }
        }
        let (reply, answer) = mpsc::sync_channel(1);
        let timeout = self.timeout;
        let worker = match &self.worker {
            Some(w) if w.requests.send(reply.clone()).is_ok() => w,
            _ => {
                // First use, or the worker died (a panic inside NVML glue): start one.
                let w = self.spawn()?;
                let _ = w.requests.send(reply);
                w
            }
        };
        match answer.recv_timeout(timeout) {
            Ok(snapshot) => Ok(snapshot),
            Err(RecvTimeoutError::Timeout) => {
                let call = lock(&worker.progress).call.clone();
                Ok(Snapshot::failed(
                    DriverState::NotAnswering {
                        call,
                        waited_ms: timeout.as_millis() as u64,
                    },
                    started.elapsed(),
                ))
            }
            Err(RecvTimeoutError::Disconnected) => {
                let call = lock(&worker.progress).call.clone();
                self.worker = None;
                Ok(Snapshot::failed(
                    DriverState::InitFailed {
                        call,
                        error: "the NVML probe thread panicked".into(),
                    },
                    started.elapsed(),
                ))
            }
        }
    }
}

impl GpuProbe for NvmlProbe {
    fn snapshot(&mut self) -> Snapshot {
        let started = Instant::now();
        let mut snapshot = self.try_snapshot().unwrap_or_else(|e| {
            Snapshot::failed(
                DriverState::InitFailed {
                    call: "thread spawn".into(),
                    error: e.to_string(),
                },
                started.elapsed(),
            )
        });
        if let (Some(cuda), DriverState::Ready) = (&mut self.cuda, &snapshot.driver) {
            snapshot.cuda = Some(cuda.check(Instant::now()));
            snapshot.elapsed = started.elapsed();
        }
        snapshot
    }
}

/// The worker: initialise NVML on the first request (and again after the
/// driver stops answering as initialised), then answer snapshot requests.
fn worker(
    library: &OsString,
    release: bool,
    usage: bool,
    requests: &Receiver<SyncSender<Snapshot>>,
    progress: &Mutex<Progress>,
) {
    let mut next = requests.recv().ok();
    while let Some(reply) = next.take() {
        let started = Instant::now();
        {
            let mut p = lock(progress);
            p.busy_since = Some(started);
            p.call = "nvmlInit_v2".into();
        }
        let nvml = match Nvml::builder().lib_path(library).init() {
            Ok(nvml) => nvml,
            Err(e) => {
                lock(progress).busy_since = None;
                let _ = reply.send(Snapshot::failed(init_state(library, e), started.elapsed()));
                next = requests.recv().ok();
                continue;
            }
        };
        let mut session = Session {
            nvml: &nvml,
            progress,
            events: None,
            events_tried: false,
            registered: Vec::new(),
            usage,
        };
        let (mut reply, mut started) = (reply, started);
        let mut released = None;
        loop {
            let snapshot = session.collect(started);
            if release {
                released = Some((reply, snapshot));
                break;
            }
            let reinit = matches!(snapshot.driver, DriverState::InitFailed { .. });
            lock(progress).busy_since = None;
            let _ = reply.send(snapshot);
            let Ok(r) = requests.recv() else { return };
            started = Instant::now();
            lock(progress).busy_since = Some(started);
            if reinit {
                next = Some(r);
                break;
            }
            reply = r;
        }
        if let Some((reply, snapshot)) = released {
            // Release mode: shut NVML down (the event set first, then
            // nvmlShutdown and dlclose) before answering, still inside this
            // request's timeout: a next request must not find the worker
            // busy with the previous cycle's shutdown, and a shutdown that
            // hangs is named like any other call.
            set_call(progress, "nvmlShutdown");
            drop(session);
            drop(nvml);
            lock(progress).busy_since = None;
            let _ = reply.send(snapshot);
            next = requests.recv().ok();
        }
    }
}

fn init_state(library: &OsString, e: NvmlError) -> DriverState {
    match e {
        NvmlError::LibloadingError(e) => DriverState::LibraryMissing {
            detail: format!("{}: {e}", library.to_string_lossy()),
        },
        e => DriverState::InitFailed {
            call: "nvmlInit_v2".into(),
            error: e.to_string(),
        },
    }
}

struct Session<'a> {
    nvml: &'a Nvml,
    progress: &'a Mutex<Progress>,
    events: Option<EventSet<'a>>,
    events_tried: bool,
    /// Handles registered for events, with index and UUID read while the
    /// GPU still answered: the XID that announces a lost GPU (79) comes from
    /// a device that no longer answers nvmlDeviceGetIndex.
    registered: Vec<(usize, u32, Option<String>)>,
    /// Read the usage fields (`NvmlProbe::reading_usage`).
    usage: bool,
}

impl<'a> Session<'a> {
    fn collect(&mut self, started: Instant) -> Snapshot {
        let nvml = self.nvml;
        set_call(self.progress, "nvmlSystemGetDriverVersion");
        let mut system = SystemInfo {
            driver_version: nvml.sys_driver_version().ok(),
            ..SystemInfo::default()
        };
        set_call(self.progress, "nvmlSystemGetNVMLVersion");
        system.nvml_version = nvml.sys_nvml_version().ok();
        set_call(self.progress, "nvmlSystemGetCudaDriverVersion_v2");
        system.cuda_driver_version = nvml
            .sys_cuda_driver_version()
            .ok()
            .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10));
        set_call(self.progress, "nvmlDeviceGetCount_v2");
        let count = match nvml.device_count() {
            Ok(n) => n,
            Err(e) => {
                let mut s = Snapshot::failed(
                    DriverState::InitFailed {
                        call: "nvmlDeviceGetCount_v2".into(),
                        error: e.to_string(),
                    },
                    started.elapsed(),
                );
                s.system = Some(system);
                return s;
            }
        };
        system.device_count = count;
        let gpus: Vec<GpuInfo> = (0..count).map(|i| self.gpu(i)).collect();
        let mut notes = Vec::new();
        if !self.events_tried {
            self.events_tried = true;
            match self.register_events(count) {
                Ok(set) => self.events = Some(set),
                Err(e) => notes.push(format!("XID events unavailable: {e}")),
            }
        }
        let xids = self.drain_events(&mut notes);
        Snapshot {
            driver: DriverState::Ready,
            system: Some(system),
            gpus,
            xids,
            notes,
            elapsed: started.elapsed(),
            cuda: None,
        }
    }

    fn gpu(&self, index: u32) -> GpuInfo {
        let mut info = GpuInfo {
            index,
            ..GpuInfo::default()
        };
        set_call(
            self.progress,
            format!("nvmlDeviceGetHandleByIndex_v2({index})"),
        );
        let dev = match self.nvml.device_by_index(index) {
            Ok(d) => d,
            Err(e) => {
                note(&mut info, "nvmlDeviceGetHandleByIndex_v2", e);
                return info;
            }
        };
        info.uuid = self.field(&mut info, "nvmlDeviceGetUUID", || dev.uuid());
        info.name = self.field(&mut info, "nvmlDeviceGetName", || dev.name());
        info.pci_bus_id = self
            .field(&mut info, "nvmlDeviceGetPciInfo_v3", || dev.pci_info())
            .map(|p| normalize_bus_id(&p.bus_id).unwrap_or(p.bus_id));
        info.persistence_mode = self.field(&mut info, "nvmlDeviceGetPersistenceMode", || {
            dev.is_in_persistent_mode()
        });
        info.ecc_uncorrected_volatile =
            self.field(&mut info, "nvmlDeviceGetTotalEccErrors", || {
                dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            });
        info.ecc_uncorrected_aggregate =
            self.field(&mut info, "nvmlDeviceGetTotalEccErrors", || {
                dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate)
            });
        info.retired_pages_pending =
            self.field(&mut info, "nvmlDeviceGetRetiredPagesPendingStatus", || {
                dev.are_pages_pending_retired()
            });
        info.remapped_rows = self.field(&mut info, "nvmlDeviceGetRemappedRows", || {
            remapped_rows(self.nvml, &dev)
        });
        info.temperature_c = self.field(&mut info, "nvmlDeviceGetTemperature", || {
            dev.temperature(TemperatureSensor::Gpu)
        });
        info.throttle_reasons = self
            .field(
                &mut info,
                "nvmlDeviceGetCurrentClocksThrottleReasons",
                || dev.current_throttle_reasons(),
            )
            .map(|r| r.bits());
        info.power_mw = self.field(&mut info, "nvmlDeviceGetPowerUsage", || dev.power_usage());
        if self.usage {
            // Each read on its own: NotSupported (or an older driver's
            // missing symbol) leaves that field absent, not zero, and the
            // rest of the GPU read.
            info.utilization = self
                .field(&mut info, "nvmlDeviceGetUtilizationRates", || {
                    dev.utilization_rates()
                })
                .map(|u| Utilization {
                    gpu_percent: u.gpu,
                    memory_percent: u.memory,
                });
            info.memory = self.field(&mut info, "nvmlDeviceGetMemoryInfo", || {
                memory_usage(self.nvml, &dev)
            });
            info.ecc_corrected_volatile =
                self.field(&mut info, "nvmlDeviceGetTotalEccErrors", || {
                    dev.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
                });
        }
        info.mig_enabled = self
            .field(&mut info, "nvmlDeviceGetMigMode", || dev.mig_mode())
            .map(|m| m.current != 0);
        if info.mig_enabled == Some(true) {
            info.mig = self.mig_instances(&mut info, &dev);
        }
        info.fabric = self.field(&mut info, "nvmlDeviceGetGpuFabricInfoV", || {
            fabric_info(self.nvml, &dev)
        });
        for link in 0..nvml_wrapper_sys::bindings::NVML_NVLINK_MAX_LINKS {
            let state = self.field(&mut info, "nvmlDeviceGetNvLinkState", || {
                match dev.link_wrapper_for(link).is_active() {
                    // A link number the GPU does not have.
                    Err(NvmlError::InvalidArg) => Err(NvmlError::NotSupported),
                    r => r,
                }
            });
            if let Some(active) = state {
                info.nvlinks.push(NvLinkState { link, active });
            }
        }
        info
    }

    /// The MIG devices of a GPU in MIG mode. Indices up to
    /// nvmlDeviceGetMaxMigDeviceCount may be sparse (instances destroyed
    /// out of order): NotFound at an index is a gap, not an error.
    fn mig_instances(&self, info: &mut GpuInfo, dev: &Device<'_>) -> Vec<MigInfo> {
        let Some(max) = self.field(info, "nvmlDeviceGetMaxMigDeviceCount", || {
            dev.mig_device_count()
        }) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for index in 0..max {
            set_call(
                self.progress,
                format!(
                    "nvmlDeviceGetMigDeviceHandleByIndex({}, {index})",
                    info.index
                ),
            );
            let mig = match dev.mig_device_by_index(index) {
                Ok(m) => m,
                Err(NvmlError::NotFound) => continue,
                Err(e) => {
                    note(info, "nvmlDeviceGetMigDeviceHandleByIndex", e);
                    continue;
                }
            };
            let memory = if self.usage {
                self.field(info, "nvmlDeviceGetMemoryInfo", || {
                    memory_usage(self.nvml, &mig)
                })
            } else {
                None
            };
            out.push(MigInfo {
                index,
                uuid: self.field(info, "nvmlDeviceGetUUID", || mig.uuid()),
                name: self.field(info, "nvmlDeviceGetName", || mig.name()),
                memory,
            });
        }
        out
    }

    fn field<T>(
        &self,
        info: &mut GpuInfo,
        call: &'static str,
        f: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Option<T> {
        if info.lost {
            return None;
        }
        set_call(self.progress, format!("{call}({})", info.index));
        match f() {
            Ok(v) => Some(v),
            Err(e) => {
                note(info, call, e);
                None
            }
        }
    }

    /// One event set for every GPU that supports XID events. GPUs that
    /// cannot register (lost, unsupported) are left out rather than losing
    /// XIDs for all of them.
    fn register_events(&mut self, count: u32) -> Result<EventSet<'a>, NvmlError> {
        set_call(self.progress, "nvmlEventSetCreate");
        let mut set = self.nvml.create_event_set()?;
        for i in 0..count {
            set_call(self.progress, format!("nvmlDeviceRegisterEvents({i})"));
            let Ok(dev) = self.nvml.device_by_index(i) else {
                continue;
            };
            let supported = dev.supported_event_types().unwrap_or(EventTypes::empty());
            if supported.contains(EventTypes::CRITICAL_XID_ERROR) {
                set = dev
                    .register_events(EventTypes::CRITICAL_XID_ERROR, set)
                    .map_err(|e| e.error)?;
                // SAFETY: the raw handle is only compared, never dereferenced.
                let handle = unsafe { dev.handle() } as usize;
                self.registered.push((handle, i, dev.uuid().ok()));
            }
        }
        Ok(set)
    }

    fn drain_events(&self, notes: &mut Vec<String>) -> Vec<XidEvent> {
        let mut xids = Vec::new();
        let Some(set) = &self.events else { return xids };
        set_call(self.progress, "nvmlEventSetWait_v2");
        while xids.len() < MAX_EVENTS_PER_SNAPSHOT {
            match set.wait(0) {
                Ok(event) => {
                    if !event.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
                        continue;
                    }
                    let xid = match event.event_data {
                        Some(XidError::Value(v)) => v,
                        Some(XidError::Unknown) | None => 999,
                    };
                    xids.push(self.event_of(&event.device, xid));
                }
                Err(NvmlError::Timeout) => break,
                Err(e) => {
                    notes.push(format!("nvmlEventSetWait_v2: {e}"));
                    break;
                }
            }
        }
        xids
    }

    fn event_of(&self, device: &Device<'_>, xid: u64) -> XidEvent {
        // SAFETY: the raw handle is only compared, never dereferenced.
        let handle = unsafe { device.handle() } as usize;
        match self.registered.iter().find(|(h, _, _)| *h == handle) {
            Some((_, index, uuid)) => XidEvent {
                gpu: Some(*index),
                uuid: uuid.clone(),
                xid,
            },
            None => XidEvent {
                gpu: device.index().ok(),
                uuid: device.uuid().ok(),
                xid,
            },
        }
    }
}

/// Records a failed call. NotSupported and a symbol the library lacks (an
/// older driver) are expected on some GPUs and stay quiet.
fn note(info: &mut GpuInfo, call: &str, e: NvmlError) {
    match e {
        NvmlError::GpuLost => info.lost = true,
        NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_) => {}
        e => info.errors.push(format!("{call}: {e}")),
    }
}

/// nvml-wrapper 0.13 has no wrapper for nvmlDeviceGetRemappedRows (Ampere
/// and newer replace page retirement with row remapping), so call the
/// loaded symbol directly.
fn remapped_rows(nvml: &Nvml, dev: &Device<'_>) -> Result<RemappedRows, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetRemappedRows.as_ref())?;
    let (mut corr, mut unc, mut pending, mut failed) = (0, 0, 0, 0);
    // SAFETY: the handle comes from this Nvml, which is initialised and
    // outlives the call; the four out-pointers are valid local u32s, the
    // types the NVML header declares.
    nvml_try(unsafe { sym(dev.handle(), &mut corr, &mut unc, &mut pending, &mut failed) })?;
    Ok(RemappedRows {
        correctable: corr,
        uncorrectable: unc,
        pending: pending != 0,
        failed: failed != 0,
    })
}

/// Device memory: nvmlDeviceGetMemoryInfo_v2 (nvml-wrapper's call, R510
/// and later), else the v1 call an older driver has (nvml-wrapper 0.13
/// calls only v2, so v1 is called through the loaded symbol). A library
/// without the v2 symbol, or one answering NVML_ERROR_FUNCTION_NOT_FOUND
/// for it, gets v1.
fn memory_usage(nvml: &Nvml, dev: &Device<'_>) -> Result<MemoryUsage, NvmlError> {
    match dev.memory_info() {
        Ok(m) => {
            return Ok(MemoryUsage {
                used_bytes: m.used,
                total_bytes: m.total,
            })
        }
        Err(NvmlError::FailedToLoadSymbol(_) | NvmlError::FunctionNotFound) => {}
        Err(e) => return Err(e),
    }
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetMemoryInfo.as_ref())?;
    // SAFETY: a zeroed plain-data struct the call fills.
    let mut m: nvml_wrapper_sys::bindings::nvmlMemory_t = unsafe { std::mem::zeroed() };
    // SAFETY: the handle comes from this initialised Nvml; `m` outlives the call.
    nvml_try(unsafe { sym(dev.handle(), &mut m) })?;
    Ok(MemoryUsage {
        used_bytes: m.used,
        total_bytes: m.total,
    })
}

/// nvml-wrapper 0.13 has no wrapper for the GPU fabric calls either.
/// nvmlDeviceGetGpuFabricInfoV with the v2 struct (it adds the health mask;
/// R550 and later), else the v1 nvmlDeviceGetGpuFabricInfo (R525 and later).
fn fabric_info(nvml: &Nvml, dev: &Device<'_>) -> Result<FabricInfo, NvmlError> {
    use nvml_wrapper_sys::bindings as sys;
    let to_info = |state: u8, status: u32, clique: u32, uuid: &[u8; 16], mask| FabricInfo {
        state: FabricState::from_raw(state),
        error: (status != 0).then(|| match nvml_try(status) {
            Err(e) => e.to_string(),
            Ok(()) => String::new(),
        }),
        clique_id: clique,
        cluster_uuid: uuid.iter().map(|b| format!("{b:02x}")).collect(),
        health_mask: mask,
    };
    if let Ok(sym) = nvml_sym(nvml.lib().nvmlDeviceGetGpuFabricInfoV.as_ref()) {
        // SAFETY: a zeroed plain-data struct; the v3 layout is a superset of
        // v2, and `version` tells the driver which one it fills (the
        // NVML_STRUCT_VERSION macro: size | version << 24).
        let mut v: sys::nvmlGpuFabricInfoV_t = unsafe { std::mem::zeroed() };
        v.version = std::mem::size_of::<sys::nvmlGpuFabricInfo_v2_t>() as u32 | (2 << 24);
        // SAFETY: the handle comes from this initialised Nvml; `v` outlives the call.
        match nvml_try(unsafe { sym(dev.handle(), &mut v) }) {
            Ok(()) => {
                return Ok(to_info(
                    v.state,
                    v.status,
                    v.cliqueId,
                    &v.clusterUuid,
                    Some(v.healthMask),
                ))
            }
            Err(NvmlError::NotSupported) => return Err(NvmlError::NotSupported),
            Err(_) => {} // e.g. an older driver's version mismatch: try v1
        }
    }
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetGpuFabricInfo.as_ref())?;
    // SAFETY: as above, for the v1 struct.
    let mut v: sys::nvmlGpuFabricInfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    nvml_try(unsafe { sym(dev.handle(), &mut v) })?;
    Ok(to_info(v.state, v.status, v.cliqueId, &v.clusterUuid, None))
}
