//! nodeproof's edge to the API server: the one crate of the agent and its
//! tools that calls kube-rs (a test in xtask keeps it so). The edge under the
//! reporting core (`nodeproof-report`: what to write and when, the
//! `Reporter` trait, the driver loop, credentials lookup, `[report]`).
//! See docs/reporting.md.
//!
//! - `client`: `KubeReporter` (the core's `Reporter` on kube-rs, kube-rs
//!   errors mapped to the core's `ReportError`), clients that follow their
//!   credential files, kube-rs errors in words;
//! - `connect`: node name, credentials and clients from the `[report]`
//!   section;
//! - `identity`: which Node a credential is (client certificate,
//!   SelfSubjectReview);
//! - `dra`: this node's ResourceSlices and the ResourceClaims of its pods;
//! - `read`: the agent's one-shot reads (a Node, a pod, the pods bound to
//!   a node, the RuntimeClasses);
//! - `controller`, `lease`: the gate controller's and the device taints'
//!   watches and writes, and their Lease leader election;
//! - `cluster_connect`, `cluster_read`: the cluster commands' and the gate
//!   controller's clients, and `cluster check`'s reads;
//! - `list`: paged lists (500 a page, as client-go's pagers);
//! - `watch`: the agent's pods, RuntimeClasses and Node watches
//!   (kube-runtime's `watcher`, the retry delays, resuming when the API
//!   server answers again);
//! - `retry_after`: the 429 `Retry-After` header where kube-rs sees it;
//! - here: `report_once` / `report_connected`, the one-shot report of
//!   `check --report` (connect, then the core's `once::run_once_with`).

pub mod client;
pub mod cluster_connect;
pub mod cluster_read;
pub mod connect;
pub mod controller;
pub mod dra;
pub mod identity;
pub mod lease;
pub mod list;
pub mod read;
pub mod retry_after;
pub mod watch;

/// An object of a kind without a k8s-openapi type (kube-core's), as the
/// dynamic reads and watches give it.
pub use kube::api::DynamicObject;
/// The API server client the agent and its tools hold and hand back to
/// this crate's functions; only this crate calls kube-rs with it.
pub use kube::Client;
/// kube-rs's error, the source of this crate's errors (and of the
/// agent's read errors).
pub use kube::Error;
/// An object's name and metadata (kube-core's pure accessors).
pub use kube::{Resource, ResourceExt};

use std::time::Duration;

use client::KubeReporter;
use nodeproof_findings::Condition;
use nodeproof_report::config::ReportConfig;
use nodeproof_report::driver::Stats;
use nodeproof_report::events::PodEvent;
use nodeproof_report::log::LogReporter;
use nodeproof_report::once::run_once_with;
use nodeproof_report::reporter::ReportError;

pub use connect::{connect, ConnectError, Connection};

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
