//! `nodeproof gpu`: driver and device health.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;

use nodeproof::config::Config;
use nodeproof::judge::gpu as gpu_check;

use super::{exit, Format};

/// One GPU probe cycle with the configured NVML library and policy.
pub(crate) fn gpu_cycle(config: &Config) -> nodeproof_gpu::GpuReport {
    nodeproof::checks::gpu::gpu_cycle_alone(config)
}

pub(crate) fn gpu(config: &Config, output: Format) -> Result<ExitCode> {
    let report = gpu_cycle(config);
    let status = if report.no_gpu() {
        "NoGPU"
    } else if report.healthy() {
        "Healthy"
    } else {
        "Unhealthy"
    };
    let mut out = std::io::stdout().lock();
    match output {
        Format::Json | Format::Yaml => {
            let value = serde_json::json!({
                "status": status,
                "conditions": gpu_check::conditions(&report),
                "findings": gpu_check::findings(&report),
                "report": report,
            });
            write!(out, "{}", super::document(output, &value, false)?)?;
        }
        Format::Text => writeln!(out, "{}status: {status}", gpu_check::text(&report))?,
    }
    Ok(exit(report.no_gpu() || report.healthy()))
}
