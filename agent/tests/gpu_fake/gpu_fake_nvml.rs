//! The NVML probe through the real dlopen/dlsym/FFI path, against the fake
//! libnvidia-ml built from tests/fake-nvml/fake_nvml.c: every scenario the
//! issue names, without a GPU.

use crate::fake_nvml_support;

use nodeproof_findings::ConditionStatus;
use std::time::{Duration, Instant};

use fake_nvml_support::Scenario;
use nodeproof_gpu::nvml::NvmlProbe;
use nodeproof_gpu::policy::XidClass;
use nodeproof_gpu::{self as gpu, GpuConfig, GpuHealth, GpuProbe, GpuReport, PolicyState};

fn config(s: &Scenario) -> GpuConfig {
    GpuConfig {
        nvml_library: s.library().to_string_lossy().into_owned(),
        sysfs_root: s.sysfs(),
        nvml_timeout_ms: 5000,
        ..GpuConfig::default()
    }
}

struct Node {
    config: GpuConfig,
    probe: NvmlProbe,
    state: PolicyState,
}

impl Node {
    fn new(s: &Scenario) -> Node {
        let config = config(s);
        let probe = NvmlProbe::new(
            &config.nvml_library,
            Duration::from_millis(config.nvml_timeout_ms),
        );
        Node {
            config,
            probe,
            state: PolicyState::default(),
        }
    }

    fn cycle(&mut self, now: u64) -> GpuReport {
        gpu::cycle_at(&self.config, &mut self.probe, &mut self.state, now)
    }
}

fn conds(r: &GpuReport) -> [(String, String); 2] {
    let e = &r.evaluation;
    [
        (
            e.driver_ready.status.to_string(),
            e.driver_ready.reason.to_string(),
        ),
        (
            e.gpu_healthy.status.to_string(),
            e.gpu_healthy.reason.to_string(),
        ),
    ]
}

fn pair(a: &str, b: &str, c: &str, d: &str) -> [(String, String); 2] {
    [(a.into(), b.into()), (c.into(), d.into())]
}

#[test]
fn healthy_eight_gpu_node() {
    let s = Scenario::new("driver 550.54.15\ncuda 12040\ngpus 8\n", 8);
    let mut node = Node::new(&s);
    let r = node.cycle(0);
    assert_eq!(
        conds(&r),
        pair("True", "DriverReady", "True", "GPUsHealthy")
    );
    let snap = r.snapshot.as_ref().unwrap();
    let sys = snap.system.as_ref().unwrap();
    assert_eq!(sys.driver_version.as_deref(), Some("550.54.15"));
    assert_eq!(sys.cuda_driver_version.as_deref(), Some("12.4"));
    assert_eq!(sys.nvml_version.as_deref(), Some("12.550.54.15"));
    assert_eq!(snap.gpus.len(), 8);
    let g = &snap.gpus[7];
    assert_eq!(
        g.uuid.as_deref(),
        Some("GPU-fa4e0000-0000-4000-8000-000000000007")
    );
    assert_eq!(g.pci_bus_id.as_deref(), Some("0000:1f:00.0"));
    assert_eq!(g.persistence_mode, Some(true));
    assert_eq!(g.ecc_uncorrected_volatile, Some(0));
    assert_eq!(g.remapped_rows.map(|r| r.pending), Some(false));
    assert_eq!(g.temperature_c, Some(42));
    assert_eq!(g.power_mw, Some(77000));
    assert_eq!(g.throttle_reasons, Some(1));
    assert!(g.errors.is_empty(), "{:?}", g.errors);
    assert!(snap.notes.is_empty(), "{:?}", snap.notes);
    assert!(r.healthy());
    let m = r.metrics(&node.state);
    assert_eq!(m.driver_ready, Some(true));
    // Per GPU: `all`, then each of the eight policy checks.
    assert_eq!(m.health.len(), 8 * 9, "{m:?}");
    assert!(
        m.health.contains(&GpuHealth {
            gpu: 7,
            uuid: "GPU-fa4e0000-0000-4000-8000-000000000007".into(),
            check: "all",
            ok: true
        }),
        "{m:?}"
    );
    assert!(m.health.iter().all(|h| h.ok), "{m:?}");
}

#[test]
fn one_gpu_lost() {
    let s = Scenario::new("lost 3\n", 8);
    let r = Node::new(&s).cycle(0);
    // NVML still enumerates it, so the driver is ready; the GPU is not.
    assert_eq!(conds(&r), pair("True", "DriverReady", "False", "GPULost"));
    let msg = &r.evaluation.gpu_healthy.message;
    assert!(
        msg.starts_with("1 of 8 GPUs unhealthy: GPU 3 (uuid unknown): fallen off the bus"),
        "{msg}"
    );
    assert!(!r.healthy());
}

#[test]
fn nvml_sees_seven_of_eight() {
    let s = Scenario::new("gpus 8\ncount 7\n", 8);
    let r = Node::new(&s).cycle(0);
    assert_eq!(
        conds(&r),
        pair("False", "GPUsMissingFromNVML", "True", "GPUsHealthy")
    );
    assert_eq!(
        r.evaluation.driver_ready.message,
        "NVML sees 7 of 8 NVIDIA PCI devices; not seen: 0000:1f:00.0 (no driver)"
    );
}

#[test]
fn xid_79_then_recovery_with_hysteresis() {
    let s = Scenario::new("", 8);
    let mut node = Node::new(&s);
    assert!(node.cycle(0).healthy());
    s.set("xid 1 2 79\nlost 2\n");
    let r = node.cycle(60);
    assert_eq!(conds(&r), pair("True", "DriverReady", "False", "GPULost"));
    let msg = &r.evaluation.gpu_healthy.message;
    assert!(
        msg.contains("GPU 2 (GPU-fa4e0000-0000-4000-8000-000000000002): fallen off the bus"),
        "{msg}"
    );
    assert!(
        msg.contains("1 fatal XID(s) in 600s (threshold 1): XID 79"),
        "{msg}"
    );
    // The GPU is reset: it answers again, the XID is out of its window, and
    // the checks clear after three clean intervals, not at once.
    s.set("xid 1 2 79\n");
    for (t, clean) in [(700, 1), (760, 2)] {
        let r = node.cycle(t);
        assert_eq!(r.evaluation.gpu_healthy.status, ConditionStatus::False);
        assert!(
            r.evaluation
                .gpu_healthy
                .message
                .contains(&format!("(clean for {clean} of 3 intervals)")),
            "{}",
            r.evaluation.gpu_healthy.message
        );
    }
    let r = node.cycle(820);
    assert_eq!(
        conds(&r),
        pair("True", "DriverReady", "True", "GPUsHealthy")
    );
    let m = r.metrics(&node.state);
    assert_eq!(m.xid_totals.get(&(2, XidClass::Fatal)), Some(&1), "{m:?}");
}

#[test]
fn xid_13_is_counted_and_ignored() {
    let s = Scenario::new("", 8);
    let mut node = Node::new(&s);
    node.cycle(0);
    s.set("xid 1 0 13\nxid 2 0 13\nxid 3 0 13\nxid 4 0 13\n");
    let r = node.cycle(60);
    assert_eq!(
        conds(&r),
        pair("True", "DriverReady", "True", "GPUsHealthy")
    );
    assert_eq!(r.snapshot.as_ref().unwrap().xids.len(), 4);
    let m = r.metrics(&node.state);
    assert_eq!(
        m.xid_totals.into_iter().collect::<Vec<_>>(),
        vec![((0, XidClass::Ignored), 4)]
    );
}

#[test]
fn ecc_double_bit_error() {
    let s = Scenario::new("ecc 5 2 2\nremap 6 0 1 1 0\n", 8);
    let r = Node::new(&s).cycle(0);
    assert_eq!(
        conds(&r),
        pair("True", "DriverReady", "False", "UncorrectableECC")
    );
    let msg = &r.evaluation.gpu_healthy.message;
    assert!(msg.starts_with("2 of 8 GPUs unhealthy: GPU 5 (GPU-fa4e0000-0000-4000-8000-000000000005): 2 uncorrectable ECC errors since driver load (max 0); GPU 6"), "{msg}");
    assert!(
        msg.contains("1 rows remapped, a GPU reset is pending"),
        "{msg}"
    );
}

#[test]
fn init_that_hangs_is_driver_not_answering_within_the_timeout() {
    let s = Scenario::new("init hang 0\n", 8);
    let mut config = config(&s);
    config.nvml_timeout_ms = 300;
    let mut probe = NvmlProbe::new(&config.nvml_library, Duration::from_millis(300));
    let mut state = PolicyState::default();
    let started = Instant::now();
    let r = gpu::cycle_at(&config, &mut probe, &mut state, 0);
    let first = started.elapsed();
    assert_eq!(
        conds(&r),
        pair("False", "DriverNotAnswering", "Unknown", "DriverNotReady")
    );
    assert!(
        r.evaluation
            .driver_ready
            .message
            .ends_with("nvmlInit_v2 did not return within 300 ms"),
        "{}",
        r.evaluation.driver_ready.message
    );
    assert!(first < Duration::from_millis(1500), "{first:?}");
    // The worker is still stuck: the next cycle answers at once, no new thread, no wait.
    let started = Instant::now();
    let r = gpu::cycle_at(&config, &mut probe, &mut state, 60);
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(r.evaluation.driver_ready.reason, "DriverNotAnswering");
}

#[test]
fn a_hung_call_that_returns_recovers() {
    // Device enumeration blocks 600 ms once, past a 200 ms timeout.
    let s = Scenario::new("hang count 600\n", 8);
    let mut probe = NvmlProbe::new(s.library(), Duration::from_millis(200));
    let snap = probe.snapshot();
    assert!(
        matches!(&snap.driver, nodeproof_gpu::probe::DriverState::NotAnswering { call, .. } if call == "nvmlDeviceGetCount_v2"),
        "{:?}",
        snap.driver
    );
    s.set("");
    std::thread::sleep(Duration::from_millis(700));
    let snap = probe.snapshot();
    assert_eq!(snap.driver, nodeproof_gpu::probe::DriverState::Ready);
    assert_eq!(snap.gpus.len(), 8);
}

#[test]
fn init_that_fails_then_recovers() {
    let s = Scenario::new("init fail 9\n", 8);
    let mut node = Node::new(&s);
    let r = node.cycle(0);
    assert_eq!(
        conds(&r),
        pair("False", "NVMLInitFailed", "Unknown", "DriverNotReady")
    );
    assert!(
        r.evaluation
            .driver_ready
            .message
            .starts_with("8 NVIDIA PCI devices (no kernel driver bound) but nvmlInit_v2 failed:"),
        "{}",
        r.evaluation.driver_ready.message
    );
    s.set("");
    assert!(node.cycle(60).healthy());
}

#[test]
fn library_missing() {
    let s = Scenario::new("", 8);
    let mut config = config(&s);
    config.nvml_library = s
        .dir
        .path()
        .join("absent/libnvidia-ml.so.1")
        .to_string_lossy()
        .into_owned();
    let mut probe = NvmlProbe::new(&config.nvml_library, Duration::from_secs(5));
    let r = gpu::cycle_at(&config, &mut probe, &mut PolicyState::default(), 0);
    assert_eq!(
        conds(&r),
        pair("False", "NVMLLibraryMissing", "Unknown", "DriverNotReady")
    );
}

#[test]
fn no_nvidia_pci_device_is_nogpu_and_nvml_is_not_loaded() {
    let s = Scenario::new("init hang 0\n", 0);
    let started = Instant::now();
    let r = Node::new(&s).cycle(0);
    assert!(r.no_gpu());
    assert!(r.snapshot.is_none());
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(conds(&r), pair("Unknown", "NoGPU", "Unknown", "NoGPU"));
}

/// The CLI end to end: config file → exit code and JSON.
#[test]
fn cli_gpu_json_and_exit_codes() {
    for (scenario, code, status) in [("", 0, "Healthy"), ("lost 1\n", 1, "Unhealthy")] {
        let s = Scenario::new(scenario, 8);
        let cfg = s.dir.path().join("config.toml");
        std::fs::write(
            &cfg,
            format!(
                "[gpu]\nnvml-library = {:?}\nsysfs-root = {:?}\n",
                s.library(),
                s.sysfs()
            ),
        )
        .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_nodeproof"))
            .args(["--config"])
            .arg(&cfg)
            .args(["gpu", "-o", "json"])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["status"], status);
        assert_eq!(v["conditions"][0]["type"], "GPUDriverReady");
        assert_eq!(v["report"]["snapshot"]["gpus"].as_array().unwrap().len(), 8);
    }
}

#[test]
fn mig_instances_are_enumerated_with_their_parent() {
    let s = Scenario::new("gpus 2\nmig 1 3 1g.10gb\n", 2);
    let r = Node::new(&s).cycle(0);
    assert!(r.healthy(), "{}", r.text());
    let snap = r.snapshot.as_ref().unwrap();
    assert_eq!(snap.gpus[0].mig_enabled, Some(false));
    assert!(snap.gpus[0].mig.is_empty());
    let g = &snap.gpus[1];
    assert_eq!(g.mig_enabled, Some(true));
    let migs: Vec<(u32, &str, &str)> = g
        .mig
        .iter()
        .map(|m| {
            (
                m.index,
                m.uuid.as_deref().unwrap_or("?"),
                m.name.as_deref().unwrap_or("?"),
            )
        })
        .collect();
    assert_eq!(
        migs,
        [
            (
                0,
                "MIG-fa4e0000-0000-4000-8001-000000000000",
                "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
            ),
            (
                1,
                "MIG-fa4e0000-0000-4000-8001-000000000001",
                "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
            ),
            (
                2,
                "MIG-fa4e0000-0000-4000-8001-000000000002",
                "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
            ),
        ]
    );
    assert!(g.errors.is_empty(), "{:?}", g.errors);
    // The kubelet offers GPU 0 whole and GPU 1's instances by profile.
    let devices = gpu::advertised::nvml_devices(snap, &r.evaluation);
    let offered: Vec<(&str, &str)> = devices
        .iter()
        .map(|d| (d.id.as_str(), d.resource.as_str()))
        .collect();
    assert_eq!(
        offered,
        [
            ("GPU-fa4e0000-0000-4000-8000-000000000000", "nvidia.com/gpu"),
            (
                "MIG-fa4e0000-0000-4000-8001-000000000000",
                "nvidia.com/mig-1g.10gb"
            ),
            (
                "MIG-fa4e0000-0000-4000-8001-000000000001",
                "nvidia.com/mig-1g.10gb"
            ),
            (
                "MIG-fa4e0000-0000-4000-8001-000000000002",
                "nvidia.com/mig-1g.10gb"
            ),
        ]
    );
}

const MIB: u64 = 1 << 20;

#[test]
fn usage_is_read_per_gpu_and_mig_instance_and_unsupported_fields_are_absent() {
    let s = Scenario::new(
        "gpus 3\nutil 0 87 31\nmemory 0 30000 81920\ntemp 0 71\npower 0 412345\n\
         ecc-corrected 0 9 120\nmig 1 2 3g.40gb\nmig-memory 1 1 2048 40960\n\
         unsupported 2 util\nunsupported 2 power\nunsupported 2 ecc\n",
        3,
    );
    let r = Node::new(&s).cycle(0);
    let snap = r.snapshot.as_ref().unwrap();
    let g = &snap.gpus[0];
    assert_eq!(
        g.utilization.map(|u| (u.gpu_percent, u.memory_percent)),
        Some((87, 31))
    );
    assert_eq!(
        g.memory.map(|m| (m.used_bytes, m.total_bytes)),
        Some((30000 * MIB, 81920 * MIB))
    );
    assert_eq!(
        (g.temperature_c, g.power_mw, g.ecc_corrected_volatile),
        (Some(71), Some(412_345), Some(9))
    );
    assert_eq!(g.ecc_uncorrected_volatile, Some(0));
    // MIG mode: no utilization from NVML; each instance's own memory.
    let g = &snap.gpus[1];
    assert_eq!(g.utilization, None);
    let mig: Vec<Option<(u64, u64)>> = g
        .mig
        .iter()
        .map(|m| m.memory.map(|m| (m.used_bytes, m.total_bytes)))
        .collect();
    assert_eq!(
        mig,
        [Some((0, 10240 * MIB)), Some((2048 * MIB, 40960 * MIB))]
    );
    // NotSupported is absent, not zero, and the rest of the GPU is read.
    let g = &snap.gpus[2];
    assert_eq!(
        (
            g.utilization,
            g.power_mw,
            g.ecc_corrected_volatile,
            g.ecc_uncorrected_volatile
        ),
        (None, None, None, None)
    );
    assert_eq!(g.temperature_c, Some(37));
    assert!(g.memory.is_some());
    assert!(g.errors.is_empty(), "{:?}", g.errors);
    // Unsupported usage fields are no health failure.
    assert!(r.healthy(), "{}", r.text());
}

#[test]
fn memory_falls_back_to_the_v1_call_and_usage_can_be_left_unread() {
    let s = Scenario::new("gpus 1\nmemory 0 100 200\nno-memory-v2\n", 1);
    let r = Node::new(&s).cycle(0);
    let g = &r.snapshot.as_ref().unwrap().gpus[0];
    assert_eq!(
        g.memory.map(|m| (m.used_bytes, m.total_bytes)),
        Some((100 * MIB, 200 * MIB))
    );
    // The health-only probe (the usage benchmark's baseline) reads none of it.
    let mut probe = NvmlProbe::new(s.library(), Duration::from_secs(5)).reading_usage(false);
    let snap = probe.snapshot();
    let g = &snap.gpus[0];
    assert_eq!(
        (g.utilization, g.memory, g.ecc_corrected_volatile),
        (None, None, None)
    );
    assert_eq!(g.temperature_c, Some(35));
}
