//! Reporting to the API server: node conditions, events, through outages
//! and under the Node authorizer. See docs/reporting.md.
//!
//! - `conditions`: pure desired-state computation (hysteresis, continuity,
//!   heartbeat, stale cleanup);
//! - `events`: pure dedup and rate-limit recorder;
//! - `marks`: pure opt-in labels and taints from the conditions;
//! - `contract`: RuntimeClass contracts (annotations, the Node label), pure;
//! - `contract_labels`: this node's contract labels from the agent's
//!   verdicts (hysteresis, continuity, stale cleanup), pure;
//! - `credentials`: the lookup order of credentials and node name;
//! - `dra`: this node's ResourceSlices and the ResourceClaims of its pods;
//! - `device_health`: the Node annotation naming the GPUs the agent judges
//!   unhealthy (read by the cluster side's DRA device taints), pure;
//! - `identity`: which Node a credential is (client certificate, SelfSubjectReview);
//! - `client`: the `Reporter` edge (kube-rs, or a log without credentials);
//! - `driver`: the loop that brings the API server to the desired state;
//! - `ratelimit`: fleet-safe load, pure (token bucket, heartbeat jitter,
//!   first-write spread, backoff jitter);
//! - `limited`: that token bucket in front of a `Reporter`;
//! - `list`: paged lists (500 a page, as client-go's pagers);
//! - `connect`: node name, credentials and clients from the `[report]` section;
//! - `retry_after`: the 429 `Retry-After` header where kube-rs sees it;
//! - `config`: that section; `refs`/`taints`: pods' seccomp references and
//!   Kubernetes' toleration matching, pure.

pub mod client;
pub mod conditions;
pub mod config;
pub mod connect;
pub mod contract;
pub mod contract_labels;
pub mod credentials;
pub mod device_health;
pub mod dra;
pub mod driver;
pub mod events;
pub mod identity;
pub mod limited;
pub mod list;
pub mod marks;
pub mod ratelimit;
pub mod refs;
pub mod retry_after;
pub mod taints;

use std::time::{Duration, SystemTime};

use client::{KubeReporter, LogReporter, ReportError, Reporter};
use conditions::{Hysteresis, Policy};
use driver::{LoopConfig, ReportLoop, Stats};
use events::PodEvent;
use marks::MarkPolicy;

pub use connect::{connect, ConnectError, Connection};

use crate::config::ReportConfig;
use nodeproof_findings::Condition;

/// How a one-shot report went.
#[derive(Debug, Clone)]
pub struct OnceSummary {
    pub node: String,
    pub credentials: String,
    pub stats: Stats,
}

#[derive(Debug, thiserror::Error)]
pub enum OnceError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("reporting for node {node} with {credentials} failed")]
    Report {
        node: String,
        credentials: String,
        #[source]
        source: Box<ReportError>,
    },
    #[error("cannot start the reporting runtime")]
    Runtime(#[source] std::io::Error),
}

/// Write `conditions` (and their transition events) and the pods' `events`
/// once, retrying through transient failures for up to `deadline`. Runs
/// after the checks, so they never waited on the API server.
pub fn report_once(
    conditions: &[Condition],
    events: &[PodEvent],
    config: &ReportConfig,
    deadline: Duration,
) -> Result<OnceSummary, OnceError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(OnceError::Runtime)?;
    runtime.block_on(async {
        let c = connect(config).await?;
        report_connected(c, conditions, events, deadline).await
    })
}

/// [`report_once`] on a connection made already (a one-shot command that
/// read the pods with it), in the caller's runtime.
pub async fn report_connected(
    c: Connection,
    conditions: &[Condition],
    events: &[PodEvent],
    deadline: Duration,
) -> Result<OnceSummary, OnceError> {
    let span = tracing::info_span!("report", node = %c.node, credentials = %c.credentials);
    let _guard = span.enter();
    let wrap = |source| OnceError::Report {
        node: c.node.clone(),
        credentials: c.credentials.clone(),
        source: Box::new(source),
    };
    let stats = match c.client {
        Some(client) => {
            let mut reporter = KubeReporter::new(client, &c.node);
            if let Some(t) = c.taint_client {
                reporter = reporter.with_taint_client(t);
            }
            run_once_with(reporter, conditions, events, c.marks, deadline).await
        }
        None => {
            tracing::warn!("no credentials found; logging what would be written");
            let log = LogReporter::new(&c.node);
            run_once_with(log, conditions, events, c.marks, deadline).await
        }
    }
    .map_err(wrap)?;
    Ok(OnceSummary {
        node: c.node,
        credentials: c.credentials,
        stats,
    })
}

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
        lp.pod_event(now, e.pod.clone(), e.event_type, e.reason, &e.message);
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
