//! The tracer as node health: whether the eBPF programs load here, and
//! with which strategy (`SeccompTracingReady`).

use nodeproof_trace::Readiness;

use super::Round;

/// The round for a tracer that started (or failed to).
pub fn round(readiness: &Readiness) -> Round {
    Round {
        findings: vec![readiness.finding()],
        conditions: vec![readiness.condition()],
    }
}
