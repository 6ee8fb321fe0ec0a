//! Beyond NVML, through the real dlopen/dlsym/FFI path against the fakes:
//! the CUDA probe (fake libcuda from tests/fake-cuda/fake_cuda.c), GPU
//! fabric and NVLink state (fake NVML), and release between cycles. The
//! probe is built by the agent's own `observe::gpu::probe` from a `[gpu]`
//! config, as the daemon builds it.

use crate::fake_nvml_support;

use std::time::{Duration, Instant};

use fake_nvml_support::Scenario;
use nodeproof::judge::gpu as gpu_check;
use nodeproof::observe::gpu::probe;
use nodeproof_findings::{ConditionStatus, Status};
use nodeproof_gpu::nvml::NvmlProbe;
use nodeproof_gpu::policy::Severity;
use nodeproof_gpu::probe::CudaState;
use nodeproof_gpu::{self as gpu, GpuConfig, GpuReport, PolicyState};

struct Node {
    config: GpuConfig,
    probe: NvmlProbe,
    state: PolicyState,
}

impl Node {
    fn new(s: &Scenario, edit: impl FnOnce(&mut GpuConfig)) -> Node {
        let mut config = GpuConfig {
            nvml_library: s.library().to_string_lossy().into_owned(),
            sysfs_root: s.sysfs(),
            ..GpuConfig::default()
        };
        config.cuda.library = s
            .dir
            .path()
            .join("libcuda.so.1")
            .to_string_lossy()
            .into_owned();
        config.cuda.interval_s = 0;
        edit(&mut config);
        Node {
            probe: probe(&config),
            config,
            state: PolicyState::default(),
        }
    }

    fn cycle(&mut self, now: u64) -> GpuReport {
        gpu::cycle_at(&self.config, &mut self.probe, &mut self.state, now)
    }
}

fn cuda_on(c: &mut GpuConfig) {
    c.cuda.enabled = true;
}

fn healthy(r: &GpuReport) -> (ConditionStatus, &str) {
    let v = &r.evaluation.gpu_healthy;
    (v.status, v.reason.as_str())
}

fn count(calls: &[String], prefix: &str) -> usize {
    calls.iter().filter(|c| c.starts_with(prefix)).count()
}

#[test]
fn cuda_context_and_allocation_on_every_gpu() {
    let s = Scenario::new("gpus 8\n", 8);
    s.set_cuda("devices 8\n");
    let mut node = Node::new(&s, cuda_on);
    let r = node.cycle(0);
    assert_eq!(healthy(&r), (ConditionStatus::True, "GPUsHealthy"));
    let snap = r.snapshot.as_ref().unwrap();
    let cuda = snap.cuda.as_ref().expect("the CUDA probe ran");
    assert_eq!(cuda.state, CudaState::Ready);
    assert!(cuda.fresh);
    assert_eq!(cuda.devices.len(), 8);
    // Joined by UUID: CUDA's bytes format exactly as NVML's text.
    for (g, d) in snap.gpus.iter().zip(&cuda.devices) {
        assert_eq!(g.uuid, d.uuid);
        assert_eq!(g.pci_bus_id, d.pci_bus_id);
        assert_eq!(d.failure, None);
    }
    // Every context destroyed, every buffer freed, one cuInit.
    let calls = s.cuda_calls();
    assert_eq!(count(&calls, "cuInit"), 1, "{calls:?}");
    for call in [
        "cuCtxCreate_v2",
        "cuCtxDestroy_v2",
        "cuMemAlloc_v2",
        "cuMemFree_v2",
    ] {
        assert_eq!(count(&calls, call), 8, "{call}: {calls:?}");
    }
    let cuda_checks: Vec<_> = r.evaluation.gpus[0]
        .checks
        .iter()
        .filter(|c| c.check == "cuda")
        .collect();
    assert!(cuda_checks[0].ok, "{cuda_checks:?}");
}

/// The NVSwitch case: NVML healthy, cuInit failing with "system not yet
/// initialized" because the fabric manager is not running.
#[test]
fn cuda_init_fails_while_nvml_is_fine() {
    let s = Scenario::new("gpus 8\n", 8);
    s.set_cuda("init fail 802\n");
    let mut node = Node::new(&s, cuda_on);
    let r = node.cycle(0);
    assert_eq!(r.evaluation.driver_ready.reason, "DriverReady");
    assert_eq!(healthy(&r), (ConditionStatus::False, "CudaSystemNotReady"));
    let msg = &r.evaluation.gpu_healthy.message;
    assert!(
        msg.starts_with(
            "8 of 8 GPUs unhealthy: GPU 0 (GPU-fa4e0000-0000-4000-8000-000000000000): CUDA cuInit failed: \
             CUDA_ERROR_SYSTEM_NOT_READY (802, system not yet initialized) while NVML answers: \
             on NVSwitch systems the fabric manager is not running"
        ),
        "{msg}"
    );
    // Every NVML field is still read.
    assert_eq!(r.snapshot.as_ref().unwrap().gpus.len(), 8);
    let f = gpu_check::findings(&r);
    assert_eq!(f[1].status, Status::Failed);
    assert_eq!(f[1].reason, "CudaSystemNotReady");
    // The fabric manager starts: CUDA works, the failure clears after the hysteresis.
    s.set_cuda("");
    let statuses: Vec<ConditionStatus> = (1..=3)
        .map(|t| node.cycle(t * 60).evaluation.gpu_healthy.status)
        .collect();
    assert_eq!(
        statuses,
        [
            ConditionStatus::False,
            ConditionStatus::False,
            ConditionStatus::True
        ]
    );
}

#[test]
fn a_hung_cu_ctx_create_times_out_and_nvml_keeps_answering() {
    let s = Scenario::new("gpus 4\n", 4);
    s.set_cuda("devices 4\nctx 2 hang 0\n");
    let mut node = Node::new(&s, |c| {
        c.cuda.enabled = true;
        c.cuda.timeout_ms = 300;
    });
    let started = Instant::now();
    let r = node.cycle(0);
    let first = started.elapsed();
    assert!(first < Duration::from_millis(1500), "{first:?}");
    assert_eq!(r.evaluation.driver_ready.reason, "DriverReady");
    assert_eq!(healthy(&r), (ConditionStatus::False, "CudaNotAnswering"));
    assert!(
        r.evaluation
            .gpu_healthy
            .message
            .contains("CUDA cuCtxCreate_v2(2) did not return within 300 ms"),
        "{}",
        r.evaluation.gpu_healthy.message
    );
    // The worker is still stuck: the next cycle answers at once, naming the call.
    let started = Instant::now();
    let r = node.cycle(60);
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
    match &r.snapshot.as_ref().unwrap().cuda.as_ref().unwrap().state {
        CudaState::NotAnswering { call, waited_ms } => {
            assert_eq!(call, "cuCtxCreate_v2(2)");
            assert!(*waited_ms >= 300, "{waited_ms}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.snapshot.as_ref().unwrap().gpus.len(), 4);
}

#[test]
fn an_allocation_failure_fails_that_gpu_only_and_frees_its_context() {
    let s = Scenario::new("gpus 8\n", 8);
    s.set_cuda("alloc 5 fail 2\n");
    let mut node = Node::new(&s, cuda_on);
    let r = node.cycle(0);
    assert_eq!(healthy(&r), (ConditionStatus::False, "CudaFailed"));
    assert_eq!(
        r.evaluation.gpu_healthy.message,
        "1 of 8 GPUs unhealthy: GPU 5 (GPU-fa4e0000-0000-4000-8000-000000000005): \
         CUDA cuMemAlloc_v2(5) failed: CUDA_ERROR_OUT_OF_MEMORY (2, out of memory)"
    );
    let calls = s.cuda_calls();
    assert_eq!(count(&calls, "cuCtxDestroy_v2"), 8, "{calls:?}");
    assert_eq!(count(&calls, "cuMemFree_v2"), 7, "{calls:?}");
}

#[test]
fn cuda_checks_run_at_their_interval_and_can_warn_only() {
    let s = Scenario::new("gpus 2\n", 2);
    s.set_cuda("devices 2\nctx 1 fail 999\n");
    let mut node = Node::new(&s, |c| {
        c.cuda.enabled = true;
        c.cuda.interval_s = 3600;
        c.cuda.failure = Severity::Warn;
    });
    let r = node.cycle(0);
    assert!(r.snapshot.as_ref().unwrap().cuda.as_ref().unwrap().fresh);
    // A warning: the GPU stays healthy, its finding says why.
    assert_eq!(healthy(&r), (ConditionStatus::True, "GPUsHealthy"));
    let f = gpu_check::findings(&r);
    assert_eq!(
        (f[2].status, f[2].reason.as_str()),
        (Status::Warning, "CudaFailed")
    );
    assert_eq!(
        f[2].message,
        "CUDA cuCtxCreate_v2(1) failed: CUDA_ERROR_UNKNOWN (999, unknown error)"
    );
    let r = node.cycle(60);
    let cuda = r.snapshot.as_ref().unwrap().cuda.as_ref().unwrap();
    assert!(!cuda.fresh, "within the interval the last result is reused");
    let calls = s.cuda_calls();
    assert_eq!(count(&calls, "cuInit"), 1, "{calls:?}");
    assert_eq!(count(&calls, "cuCtxCreate_v2"), 1, "{calls:?}");
}

#[test]
fn fabric_and_nvlink_findings_with_policy_severity() {
    let s = Scenario::new(
        "gpus 5\nfabric 0 1\nfabric 1 3 0 1\nfabric 2 3 9\nnvlinks 3 18\nnvlink-down 3 7\nnvlinks 4 18\n",
        5,
    );
    let mut node = Node::new(&s, |_| {});
    let r = node.cycle(0);
    assert_eq!(healthy(&r), (ConditionStatus::False, "FabricNotReady"));
    let g = &r.snapshot.as_ref().unwrap().gpus;
    assert_eq!(g[1].fabric.as_ref().unwrap().health_mask, Some(1));
    assert_eq!(g[3].nvlinks.len(), 18);
    assert_eq!(g[4].nvlinks.iter().filter(|l| l.active).count(), 18);
    assert!(g[0].nvlinks.is_empty() && g[4].fabric.is_none());
    let f: Vec<(Status, String)> = gpu_check::findings(&r)[1..]
        .iter()
        .map(|f| (f.status, f.reason.to_string()))
        .collect();
    assert_eq!(
        f,
        [
            (Status::Failed, "FabricNotReady".into()),
            (Status::Warning, "FabricDegradedBandwidth".into()),
            (Status::Failed, "FabricRegistrationFailed".into()),
            (Status::Warning, "NvLinkInactive".into()),
            (Status::Ok, "Healthy".into()),
        ]
    );
    assert_eq!(
        gpu_check::findings(&r)[4].message,
        "NVLink 1 of 18 links inactive: 7"
    );
    // The policy decides: inactive links fail when configured so.
    let mut node = Node::new(&s, |c| c.fabric.nvlink_inactive = Severity::Fail);
    let f = gpu_check::findings(&node.cycle(0));
    assert_eq!(
        (f[4].status, f[4].reason.as_str()),
        (Status::Failed, "NvLinkInactive")
    );
}

#[test]
fn release_between_cycles_closes_cuda_and_nvml() {
    let s = Scenario::new("gpus 2\n", 2);
    s.set_cuda("devices 2\n");
    let mut node = Node::new(&s, |c| {
        c.cuda.enabled = true;
        c.release_between_cycles = true;
    });
    assert!(node.cycle(0).healthy());
    assert!(node.cycle(60).healthy());
    let calls = s.cuda_calls();
    let lifecycle: Vec<&str> = calls
        .iter()
        .map(String::as_str)
        .filter(|c| matches!(*c, "load" | "unload" | "cuInit"))
        .collect();
    assert_eq!(
        lifecycle,
        ["load", "cuInit", "unload", "load", "cuInit", "unload"],
        "{calls:?}"
    );
    // A slow nvmlShutdown belongs to its own cycle: the next cycle, right after,
    // must not find the worker busy releasing (the gpu_probe bench caught an
    // early version answering "nvmlShutdown did not return within 0 ms").
    s.set("gpus 2\nhang shutdown 100\n");
    for t in 0..3 {
        let r = node.cycle(120 + t);
        assert!(r.healthy(), "{}", r.text());
    }
    // NVML is initialised afresh each cycle: a driver that now fails init shows at once.
    s.set("gpus 2\ninit fail 9\n");
    assert_eq!(
        node.cycle(120).evaluation.driver_ready.reason,
        "NVMLInitFailed"
    );

    // Kept (the default): one initialisation, NVML's session outlives the change.
    let k = Scenario::new("gpus 2\n", 2);
    k.set_cuda("devices 2\n");
    let mut node = Node::new(&k, cuda_on);
    assert!(node.cycle(0).healthy());
    k.set("gpus 2\ninit fail 9\n");
    assert!(node.cycle(60).healthy());
    let calls = k.cuda_calls();
    assert_eq!(count(&calls, "cuInit"), 1, "{calls:?}");
    assert_eq!(count(&calls, "unload"), 0, "{calls:?}");
}
