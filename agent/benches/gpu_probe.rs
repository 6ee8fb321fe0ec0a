//! Probe cycle cost against the fake NVML (8 GPUs, through the real FFI):
//! time per snapshot, per full cycle (discovery + snapshot + policy), and the
//! process's memory. `cargo bench -p nodeproof --bench gpu_probe`.

#[path = "../tests/fake_nvml_support.rs"]
mod fake_nvml_support;

use std::time::{Duration, Instant};

use nodeproof_gpu::nvml::NvmlProbe;
use nodeproof_gpu::{self as gpu, GpuConfig, GpuProbe, PolicyState};

fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(key)?
                .trim()
                .trim_end_matches(" kB")
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

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
    let rss_before = status_kib("VmRSS:");
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
    println!(
        "memory: VmRSS before probe {} KiB, after {} KiB; VmHWM {} KiB; threads {}",
        rss_before,
        status_kib("VmRSS:"),
        status_kib("VmHWM:"),
        status_kib("Threads:")
    );
}
