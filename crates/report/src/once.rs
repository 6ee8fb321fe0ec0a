//! The one-shot loop on the real clock (`check --report`): observe once,
//! flush until settled or the deadline passes. Connecting is the edge's
//! (`nodeproof_apiclient::report_once`); this runs on any `Reporter`.

use std::time::{Duration, SystemTime};

use nodeproof_findings::Condition;

use crate::conditions::{Hysteresis, Policy};
use crate::driver::{LoopConfig, ReportLoop, Stats};
use crate::events::PodEvent;
use crate::marks::MarkPolicy;
use crate::reporter::{ReportError, Reporter};

/// The one-shot loop on the real clock. A single run has no history, so
/// hysteresis is off: the results are the state.
pub async fn run_once<R: Reporter>(
    reporter: R,
    conditions: &[Condition],
    marks: MarkPolicy,
    deadline: Duration,
) -> Result<Stats, ReportError> {
    run_once_with(reporter, conditions, &[], marks, deadline).await
}

/// [`run_once`] with Events on pods, written as the agent writes them
/// (deduplicated and rate limited by the same recorder).
pub async fn run_once_with<R: Reporter>(
    reporter: R,
    conditions: &[Condition],
    events: &[PodEvent],
    marks: MarkPolicy,
    deadline: Duration,
) -> Result<Stats, ReportError> {
    let config = LoopConfig {
        policy: Policy {
            hysteresis: Hysteresis::IMMEDIATE,
            ..Policy::default()
        },
        marks,
        ..LoopConfig::default()
    };
    let seed = u64::from(std::process::id()) ^ now_nanos();
    let mut lp = ReportLoop::new(reporter, config, seed);
    let start = tokio::time::Instant::now();
    let now = SystemTime::now();
    lp.observe(now, conditions);
    for e in events {
        lp.record_pod_event(now, e);
    }
    loop {
        let now = SystemTime::now();
        match lp.flush(now).await {
            Ok(()) if lp.settled(now) => return Ok(lp.stats()),
            Ok(()) => {}
            Err(e) if e.is_fatal() || start.elapsed() >= deadline => return Err(e),
            Err(e) => tracing::warn!(error = %e, "report failed; retrying"),
        }
        if start.elapsed() >= deadline {
            return Ok(lp.stats());
        }
        let wait = lp
            .next_wake(now)
            .and_then(|t| t.duration_since(now).ok())
            .unwrap_or_default();
        let left = deadline.saturating_sub(start.elapsed());
        tokio::time::sleep(wait.min(left)).await;
    }
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
