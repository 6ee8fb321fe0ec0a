//! `tracing`: whether the eBPF tracer loads here, and with which strategy
//! (`SeccompTracingReady`). The daemon's tracer thread keeps it loaded;
//! `check` loads, judges and detaches it.

use nodeproof_findings::{Check, ConditionType};

use super::{Command, Context, NodeCheck, Outcome, Schedule};

pub struct Tracing;

impl NodeCheck for Tracing {
    fn name(&self) -> &'static str {
        "tracing"
    }
    fn about(&self) -> &'static str {
        "Whether the eBPF seccomp-denial tracer loads on this kernel, and with which strategy"
    }
    fn findings(&self) -> &'static [Check] {
        &[Check::SECCOMP_TRACING]
    }
    fn conditions(&self) -> &'static [ConditionType] {
        &[ConditionType::SeccompTracingReady]
    }
    fn commands(&self) -> &'static [Command] {
        &[Command::Check, Command::Run]
    }
    fn schedule(&self) -> Schedule {
        Schedule::OwnTask
    }
    fn round(&self, _cx: &Context<'_>, _command: Command) -> Outcome {
        crate::observe::tracing::probe().into()
    }
}
