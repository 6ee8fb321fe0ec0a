//! GPUs as node health: one probe cycle's findings and the `GPUDriverReady`
//! and `GPUHealthy` conditions.

use std::time::Duration;

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

/// The configured NVML probe.
pub fn probe(config: &GpuConfig) -> NvmlProbe {
    NvmlProbe::new(
        &config.nvml_library,
        Duration::from_millis(config.nvml_timeout_ms),
    )
}

/// One cycle with a fresh probe and policy state (a one-shot command).
pub fn cycle_once(config: &GpuConfig) -> GpuReport {
    nodeproof_gpu::cycle(config, &mut probe(config), &mut PolicyState::default())
}
