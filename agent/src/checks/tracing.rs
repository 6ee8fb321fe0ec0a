//! The tracer as node health: whether the eBPF programs load here, and
//! with which strategy (`SeccompTracingReady`).

use nodeproof_trace::{Readiness, Tracer, TracerConfig};

use super::Round;

/// The round for a tracer that started (or failed to).
pub fn round(readiness: &Readiness) -> Round {
    Round {
        findings: vec![readiness.finding()],
        conditions: vec![readiness.condition()],
    }
}

/// Load the programs, judge them and detach: what a one-shot `check` does
/// in place of the daemon's long-running tracer.
pub fn probe() -> Round {
    let started = Tracer::start(&TracerConfig::default());
    let readiness = Readiness::of(started.as_ref());
    drop(started);
    round(&readiness)
}
