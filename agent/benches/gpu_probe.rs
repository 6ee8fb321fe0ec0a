//! Probe cycle cost against the fake NVML (8 GPUs, through the real FFI):
//! time per snapshot, per full cycle (discovery + snapshot + policy), per
//! full cycle with the kubelet's pod-resources (a fake kubelet over gRPC on a
//! unix socket: GetAllocatableResources + List, comparison, fault tracking
//! and attribution), per GPU, the same with the CUDA probe (fake libcuda:
//! context + 1 MiB allocation per GPU, every cycle), each with NVML and CUDA
//! kept or released between cycles, everything on at once (pod-resources,
//! CUDA, the DRA view), and the process's memory.
//! `cargo bench -p nodeproof --bench gpu_probe`.

#[path = "../tests/support/fake_nvml.rs"]
mod fake_nvml_support;

use std::time::{Duration, Instant};

use nodeproof::judge::gpu as gpu_check;
use nodeproof_gpu::faults::{attribute, FaultTracker};
use nodeproof_gpu::nvml::NvmlProbe;
use nodeproof_gpu::views::{DraAllocation, DraView, SliceDevice};
use nodeproof_gpu::{self as gpu, GpuConfig, GpuProbe, PolicyState};
use nodeproof_podresources::fake::{FakeKubelet, KubeletState};
use nodeproof_podresources::{ContainerAllocation, DeviceSet, PodAllocation};

#[path = "support/proc_status.rs"]
mod proc_status;
use proc_status::own_kib;

fn summary(name: &str, mut v: Vec<Duration>) {
    v.sort();
    let mean = v.iter().sum::<Duration>() / v.len() as u32;
    let p = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
    println!(
        "{name}: n={} mean={:.1}us p50={:.1}us p99={:.1}us max={:.1}us",
        v.len(),
        mean.as_secs_f64() * 1e6,
        p(0.5).as_secs_f64() * 1e6,
        p(0.99).as_secs_f64() * 1e6,
        p(1.0).as_secs_f64() * 1e6
    );
}

fn main() {
    let n = 2000;
    let s = fake_nvml_support::Scenario::new("gpus 8\n", 8);
    let rss_before = own_kib("VmRSS:");
    let mut probe = NvmlProbe::new(s.library(), Duration::from_secs(5));
    let first = Instant::now();
    let snap = probe.snapshot();
    println!(
        "first snapshot (dlopen + nvmlInit + event registration): {:?}",
        first.elapsed()
    );
    assert_eq!(snap.gpus.len(), 8);
    let times = (0..n)
        .map(|_| {
            let t = Instant::now();
            let snap = probe.snapshot();
            assert_eq!(snap.gpus.len(), 8);
            t.elapsed()
        })
        .collect();
    summary("snapshot (8 GPUs, 11 NVML calls each + event drain)", times);
    let config = GpuConfig {
        nvml_library: s.library().to_string_lossy().into_owned(),
        sysfs_root: s.sysfs(),
        ..GpuConfig::default()
    };
    let mut state = PolicyState::default();
    let times = (0..n)
        .map(|i| {
            let t = Instant::now();
            let r = gpu::cycle_at(&config, &mut probe, &mut state, i);
            assert!(r.healthy());
            let _ = r.metrics(&state);
            t.elapsed()
        })
        .collect();
    summary(
        "cycle (sysfs discovery + snapshot + policy + metrics)",
        times,
    );
    let rss_before_kubelet = own_kib("VmRSS:");
    let socket = s.dir.path().join("kubelet.sock");
    let uuids: Vec<String> = (0..8)
        .map(|i| format!("GPU-fa4e0000-0000-4000-8000-{i:012}"))
        .collect();
    let _kubelet = FakeKubelet::start(
        &socket,
        KubeletState {
            allocatable: vec![DeviceSet {
                resource: "nvidia.com/gpu".into(),
                ids: uuids.clone(),
            }],
            pods: uuids
                .iter()
                .enumerate()
                .map(|(i, id)| PodAllocation {
                    namespace: "ml".into(),
                    name: format!("vllm-{i}"),
                    containers: vec![ContainerAllocation {
                        name: "vllm".into(),
                        devices: vec![DeviceSet {
                            resource: "nvidia.com/gpu".into(),
                            ids: vec![id.clone()],
                        }],
                        claims: Vec::new(),
                    }],
                })
                .collect(),
            ..KubeletState::default()
        },
    )
    .expect("fake kubelet");
    let config = GpuConfig {
        pod_resources_socket: socket,
        ..config
    };
    let mut kubelet = nodeproof::observe::gpu::pod_resources(&config).expect("client");
    let mut tracker = FaultTracker::default();
    let mut cycle_times = Vec::new();
    let mut kubelet_times = Vec::new();
    for i in 0..n {
        let t = Instant::now();
        let mut r = gpu::cycle_at(&config, &mut probe, &mut state, i);
        let faults = tracker.observe(r.snapshot.as_ref().expect("snapshot"));
        let k = Instant::now();
        let read = nodeproof::observe::gpu::read_kubelet(&mut kubelet);
        kubelet_times.push(k.elapsed());
        gpu_check::compare(&mut r, &read, None, &nodeproof_gpu::views::NodeDra::Unread);
        let allocations = &read.as_ref().expect("pod-resources").allocations;
        let _ = attribute(&faults, allocations, |_, _| true);
        assert!(r.healthy() && r.kubelet.as_ref().is_some_and(|c| !c.offers_unhealthy()));
        let _ = r.metrics(&state);
        cycle_times.push(t.elapsed());
    }
    let per_gpu: Vec<Duration> = cycle_times.iter().map(|d| *d / 8).collect();
    summary(
        "pod-resources read (GetAllocatableResources + List, 8 pods)",
        kubelet_times,
    );
    summary(
        "cycle with pod-resources (+ comparison, faults, attribution)",
        cycle_times,
    );
    summary("  the same per GPU", per_gpu);
    println!(
        "memory with the pod-resources client: VmRSS {} KiB (+{} KiB for the client and the fake kubelet in this process)",
        own_kib("VmRSS:"),
        own_kib("VmRSS:").saturating_sub(rss_before_kubelet)
    );
    // Everything on, as the daemon runs on a GPU node of a DRA cluster:
    // pod-resources, the CUDA probe every cycle, and the DRA view (8 slice
    // devices, 8 claims) joined into the allocations faults are matched to.
    let lib = s.set_cuda("devices 8\n");
    std::fs::remove_file(s.dir.path().join("cuda-calls")).unwrap();
    let mut full = config.clone();
    full.cuda.enabled = true;
    full.cuda.library = lib.to_string_lossy().into_owned();
    full.cuda.interval_s = 0;
    let mut probe = nodeproof::observe::gpu::probe(&full);
    let mut state = PolicyState::default();
    let dra = nodeproof_gpu::views::NodeDra::Read(DraView {
        version: "v1".into(),
        devices: uuids
            .iter()
            .enumerate()
            .map(|(i, u)| SliceDevice {
                driver: "gpu.nvidia.com".into(),
                pool: "n1".into(),
                name: format!("gpu-{i}"),
                uuid: Some(u.clone()),
                parent_uuid: None,
            })
            .collect(),
        allocations: uuids
            .iter()
            .enumerate()
            .map(|(i, u)| DraAllocation {
                namespace: "ml".into(),
                pod: format!("train-{i}"),
                container: "main".into(),
                claim: format!("train-{i}-gpu"),
                driver: "gpu.nvidia.com".into(),
                pool: "n1".into(),
                device: format!("gpu-{i}"),
                uuid: Some(u.clone()),
            })
            .collect(),
        notes: Vec::new(),
    });
    let view = dra.view();
    let times: Vec<Duration> = (0..n)
        .map(|i| {
            let t = Instant::now();
            let mut r = gpu::cycle_at(&full, &mut probe, &mut state, i);
            let faults = tracker.observe(r.snapshot.as_ref().expect("snapshot"));
            let read = nodeproof::observe::gpu::read_kubelet(&mut kubelet);
            gpu_check::compare(&mut r, &read, None, &dra);
            let allocations = gpu_check::allocations(read.as_ref().ok(), view);
            assert_eq!(allocations.len(), 16);
            let _ = attribute(&faults, &allocations, |_, _| true);
            assert!(r.healthy(), "{}", r.text());
            let _ = r.metrics(&state);
            t.elapsed()
        })
        .collect();
    let per_gpu: Vec<Duration> = times.iter().map(|d| *d / 8).collect();
    summary(
        "full cycle: pod-resources + CUDA probe + DRA view (comparison, faults, attribution)",
        times,
    );
    summary("  the same per GPU", per_gpu);
    println!("memory with everything on: VmRSS {} KiB", own_kib("VmRSS:"));
    let rss_nvml = own_kib("VmRSS:");
    for (release, cuda, n) in [(false, true, n), (true, false, n / 4), (true, true, n / 4)] {
        let s = fake_nvml_support::Scenario::new("gpus 8\n", 8);
        let lib = s.set_cuda("devices 8\n");
        // Time the calls alone, not the fake's call log.
        std::fs::remove_file(s.dir.path().join("cuda-calls")).unwrap();
        let mut config = GpuConfig {
            nvml_library: s.library().to_string_lossy().into_owned(),
            sysfs_root: s.sysfs(),
            release_between_cycles: release,
            ..GpuConfig::default()
        };
        config.cuda.enabled = cuda;
        config.cuda.library = lib.to_string_lossy().into_owned();
        config.cuda.interval_s = 0;
        let mut probe = nodeproof::observe::gpu::probe(&config);
        let mut state = PolicyState::default();
        let mut cuda_ms = Vec::new();
        let times: Vec<Duration> = (0..n)
            .map(|i| {
                let t = Instant::now();
                let r = gpu::cycle_at(&config, &mut probe, &mut state, i);
                assert!(r.healthy(), "{}", r.text());
                if let Some(c) = r.snapshot.as_ref().and_then(|s| s.cuda.as_ref()) {
                    assert_eq!(c.devices.len(), 8);
                    cuda_ms.push(c.elapsed);
                }
                t.elapsed()
            })
            .collect();
        let per_gpu = times.iter().sum::<Duration>() / times.len() as u32 / 8;
        summary(
            &format!(
                "cycle, NVML {}{}",
                if release { "released" } else { "kept" },
                if cuda {
                    " + CUDA probe (8 contexts + 1 MiB allocs)"
                } else {
                    ""
                }
            ),
            times,
        );
        println!("  mean per GPU {:.1}us", per_gpu.as_secs_f64() * 1e6);
        if !cuda_ms.is_empty() {
            summary("  of which the CUDA check", cuda_ms);
        }
    }
    println!(
        "memory: VmRSS after NVML-only cycles {} KiB, after the CUDA and release cycles {} KiB",
        rss_nvml,
        own_kib("VmRSS:")
    );
    println!(
        "memory: VmRSS before probe {} KiB, after {} KiB; VmHWM {} KiB; threads {}",
        rss_before,
        own_kib("VmRSS:"),
        own_kib("VmHWM:"),
        own_kib("Threads:")
    );
}
