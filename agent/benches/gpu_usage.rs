//! The cost of GPU usage by pod (read every 10 s) on one cycle of 8
//! GPUs through the fake NVML (real dlopen/FFI; GPUs 6 and 7 in MIG mode
//! with 3 instances each), side by side with the baseline measured in the
//! same run: the health cycle as it was (the probe not reading usage).
//!
//! - `daemon cycle before` (the baseline): discovery + snapshot + policy +
//!   metrics, usage not read, and the pod-resources read (fake kubelet over
//!   gRPC) every cycle does for the comparison;
//! - `daemon cycle with usage`: the same with the usage calls, the
//!   allocations and the usage rows, as the daemon's cycle does now;
//! - its parts: the health cycle alone without and with the usage reads,
//!   and the allocations + usage rows alone;
//! - `/metrics render`: one scrape without and with the usage rows.
//!
//! Memory: bytes allocated per cycle (a counting allocator) and the bytes
//! the usage rows keep between cycles, and the process's RSS.
//! `cargo bench -p nodeproof --bench gpu_usage`.

#[path = "../tests/support/fake_nvml.rs"]
mod fake_nvml_support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodeproof::daemon::{metrics, state::Shared};
use nodeproof::judge::gpu as gpu_check;
use nodeproof_gpu::nvml::NvmlProbe;
use nodeproof_gpu::usage::UsageRow;
use nodeproof_gpu::{self as gpu, GpuConfig, PolicyState};
use nodeproof_podresources::fake::{FakeKubelet, KubeletState};
use nodeproof_podresources::{ContainerAllocation, DeviceSet, PodAllocation};

#[path = "support/proc_status.rs"]
mod proc_status;
use proc_status::own_kib;

/// Counts the bytes allocated (cumulative), so a cycle's allocations are
/// the difference around it.
struct Counting;

static ALLOCATED: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` `n` times; prints time and bytes allocated per run.
fn measure(name: &str, n: usize, mut f: impl FnMut()) -> Duration {
    let mut v: Vec<Duration> = Vec::with_capacity(n);
    let before = ALLOCATED.load(Ordering::Relaxed);
    for _ in 0..n {
        let t = Instant::now();
        f();
        v.push(t.elapsed());
    }
    let bytes = (ALLOCATED.load(Ordering::Relaxed) - before) / n as u64;
    v.sort();
    let mean = v.iter().sum::<Duration>() / n as u32;
    let p = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
    println!(
        "{name:<34} n={n} mean={:>8.1}us p50={:>8.1}us p99={:>8.1}us max={:>8.1}us alloc/cycle={:>7} B",
        mean.as_secs_f64() * 1e6,
        p(0.5).as_secs_f64() * 1e6,
        p(0.99).as_secs_f64() * 1e6,
        p(1.0).as_secs_f64() * 1e6,
        bytes
    );
    mean
}

fn uuid(i: u32) -> String {
    format!("GPU-fa4e0000-0000-4000-8000-{i:012}")
}

fn mig(gpu: u32, k: u32) -> String {
    format!("MIG-fa4e0000-0000-4000-80{gpu:02}-0000000000{k:02}")
}

fn holder(name: String, resource: &str, id: String) -> PodAllocation {
    PodAllocation {
        namespace: "ml".into(),
        name,
        containers: vec![ContainerAllocation {
            name: "main".into(),
            devices: vec![DeviceSet {
                resource: resource.into(),
                ids: vec![id],
            }],
            claims: Vec::new(),
        }],
    }
}

fn main() {
    let n = 2000;
    let mut scenario = String::from("gpus 8\nmig 6 3\nmig 7 3\n");
    for i in 0..6 {
        scenario.push_str(&format!(
            "util {i} {} 40\nmemory {i} {} 81920\necc-corrected {i} {i} {i}\n",
            10 * i,
            1000 * (i + 1)
        ));
    }
    let s = fake_nvml_support::Scenario::new(&scenario, 8);
    let rss_start = own_kib("VmRSS:");
    let config = GpuConfig {
        nvml_library: s.library().to_string_lossy().into_owned(),
        sysfs_root: s.sysfs(),
        ..GpuConfig::default()
    };
    let socket = s.dir.path().join("kubelet.sock");
    // Every GPU but 5 held whole, two MIG instances of each MIG GPU held.
    let mut pods: Vec<PodAllocation> = (0..5)
        .map(|i| holder(format!("vllm-{i}"), "nvidia.com/gpu", uuid(i)))
        .collect();
    for g in [6, 7] {
        for k in 0..2 {
            pods.push(holder(
                format!("small-{g}-{k}"),
                "nvidia.com/mig-1g.10gb",
                mig(g, k),
            ));
        }
    }
    let _kubelet = FakeKubelet::start(
        &socket,
        KubeletState {
            allocatable: vec![DeviceSet {
                resource: "nvidia.com/gpu".into(),
                ids: (0..6).map(uuid).collect(),
            }],
            pods,
            ..KubeletState::default()
        },
    )
    .expect("fake kubelet");
    let mut kubelet = nodeproof::observe::gpu::pod_resources(&GpuConfig {
        pod_resources_socket: socket.clone(),
        ..GpuConfig::default()
    })
    .expect("pod-resources client");

    println!(
        "8 GPUs (2 in MIG mode, 3 instances each), 9 containers holding devices; {n} cycles each"
    );
    let mut baseline_probe =
        NvmlProbe::new(s.library(), Duration::from_secs(5)).reading_usage(false);
    let mut usage_probe = NvmlProbe::new(s.library(), Duration::from_secs(5));
    let mut state = PolicyState::default();
    let mut t = 0;
    // Warm both (dlopen, nvmlInit, event registration).
    let _ = gpu::cycle_at(&config, &mut baseline_probe, &mut state, 0);
    let _ = gpu::cycle_at(&config, &mut usage_probe, &mut state, 0);
    let before = measure("daemon cycle before (baseline)", n, || {
        t += 1;
        let r = gpu::cycle_at(&config, &mut baseline_probe, &mut state, t);
        let _ = r.metrics(&state);
        let _ = nodeproof::observe::gpu::read_kubelet(&mut kubelet).expect("pod-resources");
    });
    let mut rows: Vec<UsageRow> = Vec::new();
    let full = measure("daemon cycle with usage", n, || {
        t += 1;
        let r = gpu::cycle_at(&config, &mut usage_probe, &mut state, t);
        let _ = r.metrics(&state);
        let read = nodeproof::observe::gpu::read_kubelet(&mut kubelet).expect("pod-resources");
        let allocations = gpu_check::allocations(Some(&read), None);
        rows = gpu_check::usage(r.snapshot.as_ref(), &allocations, None);
    });
    let base = measure("  health cycle, no usage reads", n, || {
        t += 1;
        let r = gpu::cycle_at(&config, &mut baseline_probe, &mut state, t);
        let _ = r.metrics(&state);
    });
    let reads = measure("  health cycle with usage reads", n, || {
        t += 1;
        let r = gpu::cycle_at(&config, &mut usage_probe, &mut state, t);
        let _ = r.metrics(&state);
    });
    let read = nodeproof::observe::gpu::read_kubelet(&mut kubelet).expect("pod-resources");
    let snapshot = gpu::cycle_at(&config, &mut usage_probe, &mut state, t + 1).snapshot;
    let join = measure("  allocations + usage rows", n, || {
        let allocations = gpu_check::allocations(Some(&read), None);
        let _ = gpu_check::usage(snapshot.as_ref(), &allocations, None);
    });
    let held = rows.iter().filter(|r| !r.holder.pod.is_empty()).count();
    assert_eq!((rows.len(), held), (12, 9), "{rows:?}");
    // What the rows keep between cycles (the Vec and each row's strings).
    let kept: usize = rows.capacity() * std::mem::size_of::<UsageRow>()
        + rows
            .iter()
            .map(|r| {
                r.uuid.capacity()
                    + r.device.capacity()
                    + r.holder.namespace.capacity()
                    + r.holder.pod.capacity()
                    + r.holder.container.capacity()
            })
            .sum::<usize>();

    // One scrape, without and with the usage rows.
    let last = gpu::cycle_at(&config, &mut usage_probe, &mut state, t + 1);
    let shared = Arc::new(Shared::default());
    shared.metrics(|m| m.gpu = Some(last.metrics(&state)));
    let registry = metrics::registry(shared.clone());
    let plain_len = metrics::render(&registry).unwrap().len();
    let render_base = measure("/metrics render (no usage rows)", n, || {
        let _ = metrics::render(&registry).unwrap();
    });
    shared.metrics(|m| m.gpu_usage = rows.clone());
    let usage_len = metrics::render(&registry).unwrap().len();
    let render_usage = measure("/metrics render (with usage rows)", n, || {
        let _ = metrics::render(&registry).unwrap();
    });
    let rss_end = own_kib("VmRSS:");

    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "daemon cycle {:.1}us -> {:.1}us ({:+.1}us, {:+.0}%): usage reads {:+.1}us, join {:.1}us; {:.4}% of one core at one cycle per 10 s",
        us(before),
        us(full),
        us(full) - us(before),
        100.0 * (us(full) - us(before)) / us(before),
        us(reads) - us(base),
        us(join),
        100.0 * full.as_secs_f64() / 10.0
    );
    println!(
        "usage rows: {} series sets ({held} held), {kept} B kept between cycles; /metrics {plain_len} -> {usage_len} B, render {:.1}us -> {:.1}us",
        rows.len(),
        us(render_base),
        us(render_usage)
    );
    println!(
        "RSS {rss_start} KiB at start, {rss_end} KiB at end (fake NVML, fake kubelet and its runtime in-process); VmHWM {} KiB",
        own_kib("VmHWM:")
    );
}
