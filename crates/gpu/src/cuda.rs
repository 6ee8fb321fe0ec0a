//! The CUDA probe: what a pod does first with a GPU (cuInit, a context, a
//! small allocation), through the CUDA driver API in `libcuda.so.1` opened
//! at run time (libloading): no build- or link-time NVIDIA dependency, and a
//! missing library is a state.
//!
//! The same timeout rules as the NVML probe (see `nvml.rs`): every CUDA call
//! runs on one dedicated worker thread and the caller waits at most the
//! timeout. A worker stuck in a call (a hung cuCtxCreate on a broken GPU) is
//! left there, and every later check answers NotAnswering at once, naming
//! the call, until it returns.
//!
//! Each check creates and destroys its contexts and frees its buffers, so
//! between checks nothing is held on the GPUs. In `release` mode the library
//! itself is closed after each check too (the next check loads it and runs
//! cuInit again), so the agent keeps no open driver handle between checks.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, OsString};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::pci::normalize_bus_id;
use super::probe::{CudaDevice, CudaFailure, CudaReport, CudaResult, CudaState};
use super::worker::{lock, set_call, Progress};

/// The soname the driver installs.
pub const DEFAULT_LIBRARY: &str = "libcuda.so.1";

#[derive(Debug, thiserror::Error)]
pub enum CudaProbeError {
    #[error("cannot start the CUDA probe thread")]
    Spawn {
        #[source]
        source: std::io::Error,
    },
}

/// How a `CudaProbe` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaOptions {
    /// Soname or path of the CUDA driver library.
    pub library: OsString,
    /// A check that takes longer means the CUDA driver is not answering.
    pub timeout: Duration,
    /// Run a fresh check at most this often; between runs the last result is reused.
    pub interval: Duration,
    /// Bytes allocated (and freed) per GPU.
    pub buffer_bytes: usize,
    /// Close the library after each check instead of keeping it initialised.
    pub release: bool,
}

/// The CUDA probe, with its own worker thread.
pub struct CudaProbe {
    options: CudaOptions,
    worker: Option<Worker>,
    last: Option<(Instant, CudaReport)>,
}

/// A check asked of the worker: when it was asked (a hung call's wait is
/// counted from then, so it is never less than the caller waited) and where
/// to answer.
type Request = (Instant, SyncSender<CudaReport>);

struct Worker {
    requests: Sender<Request>,
    progress: Arc<Mutex<Progress>>,
}

impl CudaProbe {
    pub fn new(options: CudaOptions) -> CudaProbe {
        CudaProbe {
            options,
            worker: None,
            last: None,
        }
    }

    /// A fresh check when the interval has passed since the last one (or
    /// the last one did not get a result), else the last result marked not
    /// fresh. `now` is the caller's clock.
    pub fn check(&mut self, now: Instant) -> CudaReport {
        if let Some((at, report)) = &self.last {
            let settled = !matches!(report.state, CudaState::NotAnswering { .. });
            if settled && now.saturating_duration_since(*at) < self.options.interval {
                return CudaReport {
                    fresh: false,
                    ..report.clone()
                };
            }
        }
        let started = Instant::now();
        let report = self.run().unwrap_or_else(|e| CudaReport {
            state: CudaState::InitFailed {
                call: "thread spawn".into(),
                result: CudaResult {
                    code: -1,
                    name: e.to_string(),
                    text: None,
                },
            },
            devices: Vec::new(),
            elapsed: started.elapsed(),
            fresh: true,
        });
        self.last = Some((now, report.clone()));
        report
    }

    fn spawn(&mut self) -> Result<&Worker, CudaProbeError> {
        let (requests, rx) = mpsc::channel();
        let progress = Arc::new(Mutex::new(Progress::default()));
        let options = self.options.clone();
        let shared = Arc::clone(&progress);
        thread::Builder::new()
            .name("nodeproof-cuda".into())
            .spawn(move || worker(&options, &rx, &shared))
            .map_err(|source| CudaProbeError::Spawn { source })?;
        Ok(self.worker.insert(Worker { requests, progress }))
    }

    fn run(&mut self) -> Result<CudaReport, CudaProbeError> {
        let started = Instant::now();
        let not_answering = |call: String, waited: Duration| CudaReport {
            state: CudaState::NotAnswering {
                call,
                waited_ms: waited.as_millis() as u64,
            },
            devices: Vec::new(),
            elapsed: started.elapsed(),
            fresh: true,
        };
        if let Some(w) = &self.worker {
            let p = lock(&w.progress);
            if let Some(since) = p.busy_since {
                return Ok(not_answering(p.call.clone(), since.elapsed()));
            }
        }
        let (reply, answer) = mpsc::sync_channel(1);
        let timeout = self.options.timeout;
        let worker = match &self.worker {
            Some(w) if w.requests.send((started, reply.clone())).is_ok() => w,
            _ => {
                let w = self.spawn()?;
                let _ = w.requests.send((started, reply));
                w
            }
        };
        match answer.recv_timeout(timeout) {
            Ok(report) => Ok(report),
            Err(RecvTimeoutError::Timeout) => {
                let call = lock(&worker.progress).call.clone();
                Ok(not_answering(call, timeout))
            }
            Err(RecvTimeoutError::Disconnected) => {
                let call = lock(&worker.progress).call.clone();
                self.worker = None;
                Ok(CudaReport {
                    state: CudaState::InitFailed {
                        call,
                        result: CudaResult {
                            code: -1,
                            name: "the CUDA probe thread panicked".into(),
                            text: None,
                        },
                    },
                    devices: Vec::new(),
                    elapsed: started.elapsed(),
                    fresh: true,
                })
            }
        }
    }
}

type CuResult = c_int;
type CuDevice = c_int;
type CuContext = *mut c_void;
type CuDevicePtr = u64;

/// The driver API entry points the probe calls (cuda.h; the `_v2` names
/// are what the `cuCtxCreate`/`cuMemAlloc` macros expand to since CUDA 3.2).
struct Api {
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    device_get_count: unsafe extern "C" fn(*mut c_int) -> CuResult,
    device_get: unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult,
    device_get_uuid: unsafe extern "C" fn(*mut [u8; 16], CuDevice) -> CuResult,
    device_get_pci_bus_id: unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult,
    ctx_create: unsafe extern "C" fn(*mut CuContext, c_uint, CuDevice) -> CuResult,
    ctx_destroy: unsafe extern "C" fn(CuContext) -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(CuDevicePtr) -> CuResult,
    error_name: Option<unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult>,
    error_string: Option<unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult>,
    /// Keeps the symbols above valid; dropped last.
    _lib: libloading::Library,
}

impl Api {
    fn load(library: &OsString) -> Result<Api, String> {
        // SAFETY: loading libcuda runs its initialisers, which is what
        // every CUDA program does; no other code in this process uses it.
        let lib = unsafe { libloading::Library::new(library) }
            .map_err(|e| format!("{}: {e}", library.to_string_lossy()))?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the type is the cuda.h prototype of this symbol.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| format!("{}: {e}", library.to_string_lossy()))?
            };
        }
        macro_rules! optional {
            ($name:literal) => {
                // SAFETY: as above.
                unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .ok()
                    .map(|s| *s)
            };
        }
        Ok(Api {
            init: sym!("cuInit"),
            device_get_count: sym!("cuDeviceGetCount"),
            device_get: sym!("cuDeviceGet"),
            device_get_uuid: sym!("cuDeviceGetUuid"),
            device_get_pci_bus_id: sym!("cuDeviceGetPCIBusId"),
            ctx_create: sym!("cuCtxCreate_v2"),
            ctx_destroy: sym!("cuCtxDestroy_v2"),
            mem_alloc: sym!("cuMemAlloc_v2"),
            mem_free: sym!("cuMemFree_v2"),
            error_name: optional!("cuGetErrorName"),
            error_string: optional!("cuGetErrorString"),
            _lib: lib,
        })
    }

    fn result(&self, code: CuResult) -> CudaResult {
        let text_of =
            |f: Option<unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult>| {
                let f = f?;
                let mut p: *const c_char = std::ptr::null();
                // SAFETY: cuGetErrorName/String write a pointer to a static
                // string (or leave it null for an unknown code); both work
                // before cuInit.
                let rc = unsafe { f(code, &mut p) };
                // SAFETY: non-null means a NUL-terminated static string.
                (rc == 0 && !p.is_null())
                    .then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            };
        CudaResult {
            code,
            name: text_of(self.error_name).unwrap_or_else(|| format!("CUresult {code}")),
            text: text_of(self.error_string),
        }
    }
}

/// The worker: load and cuInit on the first request (again after a failed
/// init, and after every check in release mode), then answer checks.
fn worker(options: &CudaOptions, requests: &Receiver<Request>, progress: &Mutex<Progress>) {
    let mut api: Option<Api> = None;
    while let Ok((asked, reply)) = requests.recv() {
        let started = Instant::now();
        {
            let mut p = lock(progress);
            p.busy_since = Some(asked);
            p.call = "dlopen".into();
        }
        let (state, devices) = match &api {
            Some(a) => check(a, options, progress),
            None => match Api::load(&options.library) {
                Err(detail) => (CudaState::LibraryMissing { detail }, Vec::new()),
                Ok(a) => {
                    set_call(progress, "cuInit");
                    // SAFETY: cuInit(0) is the documented first call.
                    let rc = unsafe { (a.init)(0) };
                    if rc != 0 {
                        let state = CudaState::InitFailed {
                            call: "cuInit".into(),
                            result: a.result(rc),
                        };
                        // Dropped: a failed cuInit is retried from dlopen next time.
                        (state, Vec::new())
                    } else {
                        let out = check(&a, options, progress);
                        api = Some(a);
                        out
                    }
                }
            },
        };
        if options.release {
            set_call(progress, "dlclose");
            api = None;
        }
        lock(progress).busy_since = None;
        let _ = reply.send(CudaReport {
            state,
            devices,
            elapsed: started.elapsed(),
            fresh: true,
        });
    }
}

fn check(
    api: &Api,
    options: &CudaOptions,
    progress: &Mutex<Progress>,
) -> (CudaState, Vec<CudaDevice>) {
    set_call(progress, "cuDeviceGetCount");
    let mut count: c_int = 0;
    // SAFETY: a valid out-pointer; cuInit succeeded.
    let rc = unsafe { (api.device_get_count)(&mut count) };
    if rc != 0 {
        return (
            CudaState::InitFailed {
                call: "cuDeviceGetCount".into(),
                result: api.result(rc),
            },
            Vec::new(),
        );
    }
    let devices = (0..count)
        .map(|ordinal| device(api, options, progress, ordinal))
        .collect();
    (CudaState::Ready, devices)
}

fn device(
    api: &Api,
    options: &CudaOptions,
    progress: &Mutex<Progress>,
    ordinal: c_int,
) -> CudaDevice {
    let mut out = CudaDevice {
        ordinal,
        uuid: None,
        pci_bus_id: None,
        failure: None,
    };
    let fail = |call: &str, rc| {
        Some(CudaFailure {
            call: format!("{call}({ordinal})"),
            result: api.result(rc),
        })
    };
    set_call(progress, format!("cuDeviceGet({ordinal})"));
    let mut dev: CuDevice = 0;
    // SAFETY: valid out-pointer, ordinal below the count the driver gave.
    let rc = unsafe { (api.device_get)(&mut dev, ordinal) };
    if rc != 0 {
        out.failure = fail("cuDeviceGet", rc);
        return out;
    }
    set_call(progress, format!("cuDeviceGetUuid({ordinal})"));
    let mut uuid = [0u8; 16];
    // SAFETY: CUuuid is 16 bytes.
    if unsafe { (api.device_get_uuid)(&mut uuid, dev) } == 0 {
        out.uuid = Some(nvml_uuid(&uuid));
    }
    set_call(progress, format!("cuDeviceGetPCIBusId({ordinal})"));
    let mut bus = [0 as c_char; 32];
    // SAFETY: the buffer and its length; the driver NUL-terminates.
    if unsafe { (api.device_get_pci_bus_id)(bus.as_mut_ptr(), bus.len() as c_int, dev) } == 0 {
        // SAFETY: NUL-terminated within the buffer (zeroed, length passed).
        let text = unsafe { CStr::from_ptr(bus.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        out.pci_bus_id = Some(normalize_bus_id(&text).unwrap_or(text));
    }
    set_call(progress, format!("cuCtxCreate_v2({ordinal})"));
    let mut ctx: CuContext = std::ptr::null_mut();
    // SAFETY: valid out-pointer, a device handle from cuDeviceGet.
    let rc = unsafe { (api.ctx_create)(&mut ctx, 0, dev) };
    if rc != 0 {
        out.failure = fail("cuCtxCreate_v2", rc);
        return out;
    }
    set_call(progress, format!("cuMemAlloc_v2({ordinal})"));
    let mut ptr: CuDevicePtr = 0;
    // SAFETY: the context created above is current on this thread.
    let rc = unsafe { (api.mem_alloc)(&mut ptr, options.buffer_bytes) };
    if rc != 0 {
        out.failure = fail("cuMemAlloc_v2", rc);
    } else {
        set_call(progress, format!("cuMemFree_v2({ordinal})"));
        // SAFETY: the pointer cuMemAlloc_v2 returned, in the current context.
        let rc = unsafe { (api.mem_free)(ptr) };
        if rc != 0 {
            out.failure = fail("cuMemFree_v2", rc);
        }
    }
    set_call(progress, format!("cuCtxDestroy_v2({ordinal})"));
    // SAFETY: the context this function created, destroyed once.
    let rc = unsafe { (api.ctx_destroy)(ctx) };
    if rc != 0 && out.failure.is_none() {
        out.failure = fail("cuCtxDestroy_v2", rc);
    }
    out
}

/// cuDeviceGetUuid's 16 bytes in NVML's text form, so CUDA devices join
/// NVML's GPUs by UUID (CUDA enumerates fastest-first unless
/// CUDA_DEVICE_ORDER=PCI_BUS_ID, so ordinals are not NVML indexes).
fn nvml_uuid(b: &[u8; 16]) -> String {
    let hex =
        |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_bytes_format_as_nvml_does() {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&[0xfa, 0x4e, 0, 0]);
        b[6] = 0x40;
        b[8] = 0x80;
        b[15] = 7;
        assert_eq!(nvml_uuid(&b), "GPU-fa4e0000-0000-4000-8000-000000000007");
    }

    #[test]
    fn a_missing_library_is_a_state() {
        let mut p = CudaProbe::new(CudaOptions {
            library: "/nonexistent/libcuda.so.1".into(),
            timeout: Duration::from_secs(5),
            interval: Duration::ZERO,
            buffer_bytes: 1 << 20,
            release: false,
        });
        let r = p.check(Instant::now());
        assert!(
            matches!(&r.state, CudaState::LibraryMissing { detail } if detail.contains("/nonexistent/libcuda.so.1")),
            "{r:?}"
        );
        assert!(r.fresh);
    }
}
