//! Probe cycle cost against the fake NVML (8 GPUs, through the real FFI):
//! time per snapshot, per full cycle (discovery + snapshot + policy), the
//! same with the CUDA probe (fake libcuda: context + 1 MiB allocation per
//! GPU, every cycle), each with NVML and CUDA kept or released between
//! cycles, and the process's memory. `cargo bench -p nodeproof --bench gpu_probe`.

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
    let rss_nvml = status_kib("VmRSS:");
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
        let mut probe = nodeproof::checks::gpu::probe(&config);
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
        status_kib("VmRSS:")
    );
    println!(
        "memory: VmRSS before probe {} KiB, after {} KiB; VmHWM {} KiB; threads {}",
        rss_before,
        status_kib("VmRSS:"),
        status_kib("VmHWM:"),
        status_kib("Threads:")
    );
}
