//! The one-shot commands' drive (`check`, `gpu`, `pods --once`,
//! `preflight`): one round of the checks with the I/O they need done here
//! (the pods bound to this node listed once, the kubelet's pod-resources
//! and the DRA view read once), above `checks` (pure judgement) and
//! `pods` (the pods' judgement and the daemon's watch), so neither of
//! those reads the API server for the other.
//!
//! A [`Session`] is the one runtime and the one connection a command
//! makes: `check --report` lists the pods, reads DRA and writes its report
//! with it, instead of connecting once for each.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nodeproof_apiclient::connect::ConnectError;
use nodeproof_apiclient::{Connection, OnceError, OnceSummary};
use nodeproof_findings::{Check, Condition, Finding, NotJudged, NotJudgedCause};
use nodeproof_gpu::{GpuReport, PolicyState};
use nodeproof_report::events::PodEvent;

use crate::checks::lint_cache::LintCache;
use crate::checks::{self, gpu, profiles, Subsystem};
use crate::config::Config;
use crate::observe;
use crate::pods::node::{self, PodsOnce, PodsOptions, PodsRunError, ONCE_DEADLINE};
use nodeproof_gpu::views::NodeDra;

/// One runtime and one connection for a one-shot command.
pub struct Session {
    runtime: Option<tokio::runtime::Runtime>,
    /// `None` when connecting failed (or no runtime started): each use then
    /// connects as it did alone, to say why in its own words.
    connection: Option<Connection>,
}

impl Session {
    /// Connects with the `[report]` credentials, within the one-shot
    /// deadline (no credentials is a connection without a client: not
    /// judged, and a report only logged).
    pub fn open(config: &Config) -> Session {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok();
        let connection = runtime.as_ref().and_then(|rt| {
            rt.block_on(async {
                tokio::time::timeout(ONCE_DEADLINE, nodeproof_apiclient::connect(&config.report))
                    .await
                    .ok()?
                    .ok()
            })
        });
        Session {
            runtime,
            connection,
        }
    }

    /// The pods bound to this node judged once, or why there is none:
    /// without credentials (an offline node, nothing asked for them) and
    /// when the credentials or the API server fail (asked for, so the
    /// command fails).
    pub fn judge_pods(
        &self,
        opts: &PodsOptions,
        lints: Arc<LintCache>,
    ) -> Result<PodsOnce, NotJudged> {
        let judged =
            match (&self.runtime, &self.connection) {
                (Some(rt), Some(c)) => match &c.client {
                    Some(client) => rt.block_on(node::judge_within_deadline(
                        node::judge_connected(client.clone(), c.node.clone(), opts, lints),
                    )),
                    None => Err(PodsRunError::NoCredentials {
                        credentials: c.credentials.clone(),
                    }),
                },
                _ => node::once(opts, lints),
            };
        judged.map_err(|e| said(&e, opts))
    }

    /// This node's DRA view once.
    pub fn dra(&self, opts: &PodsOptions) -> NodeDra {
        match (&self.runtime, &self.connection) {
            (Some(rt), Some(c)) => match &c.client {
                Some(client) => rt.block_on(node::within_deadline(node::dra_connected(
                    client.clone(),
                    &c.node,
                ))),
                None => NodeDra::Unread,
            },
            _ => node::dra_once(opts),
        }
    }

    /// Writes the round as the agent would (`check --report`), with this
    /// session's connection.
    pub fn report(
        self,
        conditions: &[Condition],
        events: &[PodEvent],
        config: &Config,
        deadline: std::time::Duration,
    ) -> Result<OnceSummary, OnceError> {
        match (self.runtime, self.connection) {
            (Some(rt), Some(c)) => rt.block_on(nodeproof_apiclient::report_connected(
                c, conditions, events, deadline,
            )),
            _ => nodeproof_apiclient::report_once(conditions, events, &config.report, deadline),
        }
    }
}

/// One round of every check ([`node_round`]): the node's findings and
/// conditions, the Events the agent writes on pods for them, and what was
/// not judged and why.
#[derive(Debug, Clone, Default)]
pub struct NodeRound {
    pub findings: Vec<Finding>,
    pub conditions: Vec<Condition>,
    /// One Warning Event per pod reference found unusable, as the agent's
    /// pods watcher writes on a pod's first judgement.
    pub events: Vec<PodEvent>,
    pub not_judged: Vec<NotJudged>,
}

/// One round of every check, as the agent runs them: the profiles under
/// `seccomp_root`, the tracer (loaded, judged, detached), one GPU cycle
/// and, when credentials are found, the pods bound to this node. The
/// conditions are folded by [`node_conditions`], as the daemon folds its
/// subsystems' latest rounds.
pub fn node_round(seccomp_root: &Path, config: &Config, session: &Session) -> NodeRound {
    let (lint, runtime) = observe::profiles::lint_setup(&config.seccomp);
    // One lint per file: the pods' judge finds the root's reports here.
    let lints = Arc::new(LintCache::default());
    let mut files = profiles::round(
        seccomp_root,
        &observe::profiles::lint_root_cached(seccomp_root, &lint, &lints),
    );
    files.findings.push(runtime);
    let opts = pods_options(config, seccomp_root);
    let pods = session.judge_pods(&opts, lints);
    let tracing = observe::tracing::probe();
    let gpu = gpu::round(&gpu_cycle(config, || session.dra(&opts)));
    let mut rounds = vec![
        (Subsystem::Profiles, files),
        (Subsystem::Tracing, tracing),
        (Subsystem::Gpu, gpu),
    ];
    let mut events = Vec::new();
    let mut not_judged = Vec::new();
    match pods {
        Ok(once) => {
            events.extend(once.findings.iter().map(crate::pods::state::finding_event));
            rounds.push((Subsystem::Pods, crate::pods::round::round(&once)));
        }
        Err(n) => not_judged.push(n),
    }
    rounds.sort_by_key(|(s, _)| *s);
    NodeRound {
        conditions: checks::node_conditions(rounds.iter().map(|(s, r)| (*s, &r.conditions[..]))),
        findings: rounds.into_iter().flat_map(|(_, r)| r.findings).collect(),
        events,
        not_judged,
    }
}

/// The pods check's settings from the config: the reporter's credentials
/// and node name, the profiles' lint settings, the runtime's config under
/// `/etc`. The CLI and the daemon both start from this.
pub fn pods_options(config: &Config, seccomp_root: &Path) -> PodsOptions {
    PodsOptions {
        kubeconfig: config.report.kubeconfig.clone(),
        context: config.report.context.clone(),
        node_name: config.report.node_name.clone(),
        host_root: config.report.host_root.clone(),
        seccomp_root: seccomp_root.to_path_buf(),
        lint: observe::profiles::lint_options(&config.seccomp),
        etc: PathBuf::from("/etc"),
    }
}

/// What `check` says of the pods when they are not judged.
pub const PODS_SUBJECT: &str = "pods";

/// Why the pods were not judged, logged once here where it is handled.
fn said(e: &PodsRunError, opts: &PodsOptions) -> NotJudged {
    let not_judged = not_judged(e, opts);
    if not_judged.fails {
        tracing::warn!(nodeproof_check = Subsystem::Pods.as_str(), error = %nodeproof_findings::errors::error_chain(e), "pods could not be judged");
    } else {
        tracing::info!(
            nodeproof_check = Subsystem::Pods.as_str(),
            "{e}; pods are not judged"
        );
    }
    not_judged
}

/// Why the pods were not judged, in one line with the remedy.
pub fn not_judged(e: &PodsRunError, opts: &PodsOptions) -> NotJudged {
    let (cause, message) = match e {
        PodsRunError::NoCredentials { .. } => {
            let lookup = nodeproof_report::credentials::lookup_here(
                opts.kubeconfig.as_deref(),
                opts.host_root.as_deref(),
            );
            let looked: Vec<String> = lookup.looked.iter().map(|l| l.describe()).collect();
            (
                NotJudgedCause::NoCredentials,
                format!(
                    "no API credentials found: looked at {}; give --kubeconfig to judge the pods bound to this node",
                    looked.join(", ")
                ),
            )
        }
        PodsRunError::NoNodeName => (
            NotJudgedCause::NoNodeName,
            "the Node's name is not known: give --node-name or set NODE_NAME".into(),
        ),
        PodsRunError::Connect { source } => match &**source {
            ConnectError::NoNodeName => (
                NotJudgedCause::NoNodeName,
                "the Node's name is not known: give --node-name or set NODE_NAME".into(),
            ),
            e @ ConnectError::NodeNameMismatch { .. } => (NotJudgedCause::OtherNode, e.to_string()),
            ConnectError::Credentials {
                credentials,
                source,
            }
            | ConnectError::TaintCredentials {
                credentials,
                source,
            } => (
                NotJudgedCause::CredentialsUnusable,
                format!(
                    "cannot use {credentials}: {}; give a readable kubeconfig with --kubeconfig",
                    innermost(&**source)
                ),
            ),
        },
        e @ PodsRunError::NotOwnNode { .. } => (
            NotJudgedCause::OtherNode,
            format!("{e}; give --node-name of the credential's Node or that Node's credentials"),
        ),
        PodsRunError::Read { what, node, source } => (
            NotJudgedCause::ApiServer,
            format!(
                "cannot read {what} for node {node}: {}; check that the API server answers and that the credential may read them (deploy/base/rbac-agent.yaml)",
                api_text(source)
            ),
        ),
        PodsRunError::Timeout { after } => (
            NotJudgedCause::ApiServer,
            format!(
                "the API server did not answer within {} s; check that it is reachable from this node",
                after.as_secs()
            ),
        ),
        e @ (PodsRunError::GetPod { .. }
        | PodsRunError::PodName { .. }
        | PodsRunError::Runtime(_)) => (
            NotJudgedCause::ApiServer,
            nodeproof_findings::errors::error_chain(e),
        ),
    };
    NotJudged::new(Check::PodProfile, PODS_SUBJECT, cause, message)
}

/// The last cause of `e`: what a person can act on (the file that is
/// missing), without the layers that repeat the path.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

/// A kube error as a sentence: the API server's own message and code,
/// never kube's `Status { .. }` dump.
fn api_text(e: &nodeproof_apiclient::Error) -> String {
    match e {
        nodeproof_apiclient::Error::Api(s) => {
            format!("the API server answered {} ({})", s.code, s.message)
        }
        e => innermost(e),
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
    gpu::compare(&mut report, &kubelet, None, &dra());
    report
}

/// [`gpu_cycle`] for a command that reads nothing else from the API
/// server (`gpu`, `preflight`): the DRA view with a connection of its own.
pub fn gpu_cycle_alone(config: &Config) -> GpuReport {
    gpu_cycle(config, || {
        node::dra_once(&pods_options(config, &config.seccomp.root))
    })
}
