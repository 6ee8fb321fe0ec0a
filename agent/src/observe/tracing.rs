//! The tracer observed once: its programs loaded, judged and detached.

use nodeproof_trace::{Readiness, Tracer, TracerConfig};

use crate::judge::tracing::round;
use crate::judge::Round;

/// Load the programs, judge them and detach: what a one-shot `check` does
/// in place of the daemon's long-running tracer.
pub fn probe() -> Round {
    let started = Tracer::start(&TracerConfig::default());
    let readiness = Readiness::of(started.as_ref());
    drop(started);
    round(&readiness)
}
