//! The check runner: every check of `crate::checks::REGISTRY` scheduled
//! [`Schedule::Every`], run as `nodeproof check` runs it (the same
//! `NodeCheck::round`), at start, every period, and at once on a reload;
//! each published under its own name (`/healthz/<name>`, `STATUS=`,
//! `nodeproof_check_findings`). A check added to the registry with a
//! period is run here with no line of the daemon changed.

use std::time::{Duration, Instant};

use nodeproof_findings::{Finding, Status};

use super::bus::RunnerEnds;
use super::state::CheckState;
use super::subsystem::{Scheduled, Subsystem};
use crate::checks::{Command, Context, Schedule};
use crate::config::Config;

/// Runs the scheduled checks until stopped.
pub async fn run(ends: RunnerEnds) {
    let scheduled: Vec<Scheduled> = Scheduled::all().collect();
    if scheduled.is_empty() {
        return;
    }
    let mut config_rx = ends.config.clone();
    let mut stop = ends.stop.clone();
    let mut due: Vec<Instant> = vec![Instant::now(); scheduled.len()];
    loop {
        let config = config_rx.take().clone();
        let now = Instant::now();
        for (i, s) in scheduled.iter().enumerate() {
            if due[i] > now {
                continue;
            }
            let Schedule::Every(period) = s.check().schedule() else {
                continue;
            };
            let (check, ends2, config) = (*s, ends.clone(), config.clone());
            let round = tokio::task::spawn_blocking(move || once(check, &ends2, &config)).await;
            match round {
                Ok(findings) => publish(&ends, *s, &findings, period),
                // The supervisor counts it and starts the runner again.
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_) => return,
            }
            due[i] = Instant::now() + period;
        }
        let next = due.iter().min().copied().unwrap_or_else(Instant::now);
        tokio::select! {
            _ = tokio::time::sleep_until(next.into()) => {}
            changed = config_rx.changed() => {
                if changed {
                    // A reload runs every check again now.
                    due.iter_mut().for_each(|d| *d = Instant::now());
                }
            }
            _ = stop.changed() => return,
        }
    }
}

/// One round of `check`, as `run` runs it.
fn once(check: Scheduled, ends: &RunnerEnds, config: &Config) -> Vec<Finding> {
    let root = ends
        .seccomp_root
        .clone()
        .unwrap_or_else(|| config.seccomp.root.clone());
    let kubelet = crate::oneshot::kubelet_layout(config);
    let cx = Context {
        config,
        seccomp_root: &root,
        kubelet: &kubelet,
        lints: &ends.lint_cache,
        api: None,
    };
    let outcome = check.check().round(&cx, Command::Run);
    for f in &outcome.round.findings {
        if f.status == Status::Warning || f.status == Status::Failed {
            tracing::warn!(nodeproof_check = check.check().name(), path = %f.subject, reason = %f.reason, "{}", f.message);
        }
    }
    outcome.round.findings
}

fn publish(ends: &RunnerEnds, check: Scheduled, findings: &[Finding], period: Duration) {
    let c = check.check();
    ends.board
        .metrics(|m| m.set_findings(c.findings(), findings));
    ends.board.set_findings_check(
        Subsystem::Scheduled(check),
        CheckState {
            conditions: Vec::new(),
            summary: format!("{} {}", c.name(), worst(findings)),
            progress: Some(Instant::now()),
            period,
        },
        findings,
    );
    ends.round_done.one_more();
}

/// The round in one word for `STATUS=`: `FAILED`, `warning`, `ok`, or
/// `skipped` when nothing applied.
pub fn worst(findings: &[Finding]) -> &'static str {
    let has = |s: Status| findings.iter().any(|f| f.status == s);
    if has(Status::Failed) {
        Status::Failed.as_str()
    } else if has(Status::Warning) {
        Status::Warning.as_str()
    } else if has(Status::Ok) || findings.is_empty() {
        Status::Ok.as_str()
    } else {
        Status::Skipped.as_str()
    }
}
