//! Reporting to the API server: node conditions, events, through outages
//! and under the Node authorizer. See docs/reporting.md.
//!
//! - `conditions`: pure desired-state computation (hysteresis, continuity,
//!   heartbeat, stale cleanup);
//! - `events`: pure dedup and rate-limit recorder;
//! - `marks`: pure opt-in labels and taints from the conditions;
//! - `credentials`: the lookup order of credentials and node name;
//! - `client`: the `Reporter` edge (kube-rs, or a log without credentials);
//! - `driver`: the loop that brings the API server to the desired state.

pub mod client;
pub mod conditions;
pub mod config;
pub mod credentials;
pub mod driver;
pub mod events;
pub mod marks;
pub mod refs;
pub mod taints;

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use client::{KubeReporter, LogReporter, ReportError, Reporter};
use conditions::{Hysteresis, Policy};
use driver::{LoopConfig, ReportLoop, Stats};
use marks::MarkPolicy;

use crate::config::ReportConfig;
use nodeproof_findings::Condition;

/// What `nodeproof check --report` was asked.
#[derive(Debug, Clone, Default)]
pub struct OnceOptions {
    pub kubeconfig: Option<PathBuf>,
    pub node_name: Option<String>,
    /// Opt-in `nodeproof.dev/` labels.
    pub labels: bool,
    /// Opt-in taints, with this credential.
    pub taint_kubeconfig: Option<PathBuf>,
    /// Give up retrying after this long (default 30 s).
    pub deadline: Option<Duration>,
}

impl From<&ReportConfig> for OnceOptions {
    fn from(c: &ReportConfig) -> Self {
        OnceOptions {
            kubeconfig: c.kubeconfig.clone(),
            node_name: c.node_name.clone(),
            labels: c.labels,
            taint_kubeconfig: c.taint_kubeconfig.clone(),
            deadline: None,
        }
    }
}

/// How a one-shot report went.
#[derive(Debug, Clone)]
pub struct OnceSummary {
    pub node: String,
    pub credentials: String,
    pub stats: Stats,
}

#[derive(Debug, thiserror::Error)]
pub enum OnceError {
    #[error("cannot tell which Node this is: set --node-name or NODE_NAME")]
    NoNodeName,
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

/// Write `conditions` (and their transition events) once, retrying through
/// transient failures until the deadline. Runs after the checks, so they
/// never waited on the API server.
pub fn report_once(conditions: &[Condition], opts: &OnceOptions) -> Result<OnceSummary, OnceError> {
    let node =
        credentials::node_name_here(opts.node_name.as_deref()).ok_or(OnceError::NoNodeName)?;
    let source = credentials::choose_here(opts.kubeconfig.as_deref());
    let described = source.describe();
    let span = tracing::info_span!("report", node = %node, credentials = %described);
    let _guard = span.enter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(OnceError::Runtime)?;
    let deadline = opts.deadline.unwrap_or(Duration::from_secs(30));
    let wrap = |source| OnceError::Report {
        node: node.clone(),
        credentials: described.clone(),
        source: Box::new(source),
    };
    let marks = MarkPolicy {
        labels: opts.labels,
        taint_kinds: if opts.taint_kubeconfig.is_some() {
            MarkPolicy::default_taint_kinds()
        } else {
            Default::default()
        },
    };
    let stats = runtime.block_on(async {
        match client::connect(&source).await.map_err(wrap)? {
            Some(client) => {
                let mut reporter = KubeReporter::new(client, &node);
                if let Some(path) = &opts.taint_kubeconfig {
                    let taints = credentials::Source::Kubeconfig(path.clone());
                    if let Some(c) = client::connect(&taints).await.map_err(wrap)? {
                        reporter = reporter.with_taint_client(c);
                    }
                }
                run_once(reporter, conditions, marks, deadline)
                    .await
                    .map_err(wrap)
            }
            None => {
                tracing::warn!("no credentials found; logging what would be written");
                run_once(LogReporter::new(&node), conditions, marks, deadline)
                    .await
                    .map_err(wrap)
            }
        }
    })?;
    Ok(OnceSummary {
        node,
        credentials: described,
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
    lp.observe(SystemTime::now(), conditions);
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
