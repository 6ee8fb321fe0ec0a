//! `gpu`: the NVIDIA driver as NVML and the PCI bus see it, each GPU's
//! health, and what the kubelet offers (pod-resources, DRA) against it
//! (`GPUDriverReady`, `GPUHealthy`; absent on a node without NVIDIA
//! devices). The daemon's GPU probe runs it every `gpu.interval-s`.

use nodeproof_findings::reason::GpuReason;
use nodeproof_findings::{Check, ConditionType, Finding, Status};
use nodeproof_gpu::views::NodeDra;
use nodeproof_gpu::{GpuReport, PolicyState};

use super::{Command, Context, NodeCheck, Outcome, Schedule};
use crate::config::Config;
use crate::judge::gpu as judge;
use crate::observe;
use crate::pods::node::{self, PodsOptions};

pub struct Gpu;

impl NodeCheck for Gpu {
    fn name(&self) -> &'static str {
        judge::CHECK_NAME
    }
    fn about(&self) -> &'static str {
        "The NVIDIA driver and each GPU's health as NVML sees them, against what the kubelet offers"
    }
    fn findings(&self) -> &'static [Check] {
        &[Check::GPU_DRIVER, Check::GPU_HEALTH, Check::GPU_ADVERTISED]
    }
    fn conditions(&self) -> &'static [ConditionType] {
        &[ConditionType::GPUDriverReady, ConditionType::GPUHealthy]
    }
    fn commands(&self) -> &'static [Command] {
        &[Command::Check, Command::Preflight, Command::Run]
    }
    fn schedule(&self) -> Schedule {
        Schedule::OwnTask
    }
    fn round(&self, cx: &Context<'_>, command: Command) -> Outcome {
        let report = match cx.api {
            Some(api) => gpu_cycle(cx.config, || api.dra()),
            None => gpu_cycle_alone(cx.config),
        };
        if command != Command::Preflight {
            return judge::round(&report).into();
        }
        // Before the kubelet: the driver, or why there is none to check.
        let findings = if report.no_gpu() {
            let first = judge::findings(&report).into_iter().next();
            vec![Finding {
                detail: None,
                status: Status::Skipped,
                message: "no NVIDIA PCI device on this node: no GPU driver to check".into(),
                ..first.unwrap_or(Finding {
                    detail: None,
                    check: Check::GPU_DRIVER,
                    subject: "NVML".into(),
                    status: Status::Skipped,
                    reason: GpuReason::NoGpu.into(),
                    message: String::new(),
                })
            }]
        } else {
            judge::findings(&report)
        };
        crate::judge::Round {
            findings,
            conditions: Vec::new(),
        }
        .into()
    }
}

/// One cycle with a fresh probe and policy state (a one-shot command), the
/// kubelet's pod-resources when its socket is there, and on a node with
/// NVIDIA devices the DRA view `dra` reads (asked only then).
pub fn gpu_cycle(config: &Config, dra: impl FnOnce() -> NodeDra) -> GpuReport {
    let gpu = &config.gpu;
    let mut report = nodeproof_gpu::cycle(
        gpu,
        &mut observe::gpu::probe(gpu),
        &mut PolicyState::default(),
    );
    if report.no_gpu() {
        return report;
    }
    let kubelet =
        observe::gpu::pod_resources(gpu).and_then(|mut s| observe::gpu::read_kubelet(&mut s));
    judge::compare(&mut report, &kubelet, None, &dra());
    report
}

/// [`gpu_cycle`] for a command that reads nothing else from the API
/// server (`gpu`, `preflight`): the DRA view with a connection of its own.
pub fn gpu_cycle_alone(config: &Config) -> GpuReport {
    gpu_cycle(config, || {
        node::dra_once(&PodsOptions::from_config(config, &config.seccomp.root))
    })
}
