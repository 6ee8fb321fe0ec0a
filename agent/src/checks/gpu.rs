//! GPUs as node health: one probe cycle's findings and the `GPUDriverReady`
//! and `GPUHealthy` conditions.

use std::time::Duration;

use nodeproof_gpu::cuda::{CudaOptions, CudaProbe};
use nodeproof_gpu::nvml::NvmlProbe;
use nodeproof_gpu::{GpuConfig, GpuReport, PolicyState};

use super::Round;

/// The round for one GPU cycle. On a node without NVIDIA devices the GPU
/// conditions are absent, not Unknown: there is nothing to fail, and a
/// CPU node must not look degraded.
pub fn round(report: &GpuReport) -> Round {
    Round {
        findings: report.findings(),
        conditions: if report.no_gpu() {
            Vec::new()
        } else {
            report.conditions()
        },
    }
}

/// The configured NVML probe, with the CUDA probe when `[gpu.cuda]` enables it.
pub fn probe(config: &GpuConfig) -> NvmlProbe {
    let nvml = NvmlProbe::new(
        &config.nvml_library,
        Duration::from_millis(config.nvml_timeout_ms),
    )
    .releasing(config.release_between_cycles);
    let c = &config.cuda;
    if !c.enabled {
        return nvml;
    }
    nvml.with_cuda(CudaProbe::new(CudaOptions {
        library: c.library.clone().into(),
        timeout: Duration::from_millis(c.timeout_ms),
        interval: Duration::from_secs(c.interval_s),
        buffer_bytes: usize::try_from(c.buffer_bytes).unwrap_or(usize::MAX),
        release: config.release_between_cycles,
    }))
}

/// One cycle with a fresh probe and policy state (a one-shot command).
pub fn cycle_once(config: &GpuConfig) -> GpuReport {
    nodeproof_gpu::cycle(config, &mut probe(config), &mut PolicyState::default())
}
