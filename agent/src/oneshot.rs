//! The one-shot commands' drive (`check`, `preflight`, `pods --once`):
//! one round of every check of `crate::checks::REGISTRY` the command runs,
//! with the API server read through this command's one connection (the
//! pods bound to this node listed once, the DRA view read once).
//!
//! A [`Session`] is the one runtime and the one connection a command
//! makes: `check --report` lists the pods, reads DRA and writes its report
//! with it, instead of connecting once for each.

use std::path::Path;
use std::sync::Arc;

use nodeproof_apiclient::connect::ConnectError;
use nodeproof_apiclient::{Connection, OnceError, OnceSummary};
use nodeproof_findings::{Check, Condition, Finding, NotJudged, NotJudgedCause};
use nodeproof_report::events::PodEvent;

use crate::checks::{ApiSession, Command, Context, REGISTRY};
use crate::config::Config;
use crate::judge;
use crate::observe::kubelet::Layout;
use crate::observe::lint_cache::LintCache;
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

/// One round of every check a command runs ([`node_round`]): the node's
/// findings and conditions, the Events the agent writes on pods for them,
/// and what was not judged and why.
#[derive(Debug, Clone, Default)]
pub struct NodeRound {
    pub findings: Vec<Finding>,
    pub conditions: Vec<Condition>,
    /// One Warning Event per pod reference found unusable, as the agent's
    /// pods watcher writes on a pod's first judgement.
    pub events: Vec<PodEvent>,
    pub not_judged: Vec<NotJudged>,
}

/// One round of every check `command` runs, in the registry's order, as
/// the agent runs them: the conditions folded by
/// [`judge::node_conditions`], as the daemon folds its checks' latest
/// rounds. `session`: the API server (`check`); `None` reads nothing from
/// it (`preflight`).
pub fn node_round(
    command: Command,
    seccomp_root: &Path,
    config: &Config,
    session: Option<&Session>,
) -> NodeRound {
    let kubelet = kubelet_layout(config);
    // One lint per file: the later checks find the root's reports here.
    let lints = Arc::new(LintCache::default());
    let api = session.map(|s| Api {
        session: s,
        opts: PodsOptions::from_config(config, seccomp_root),
    });
    let cx = Context {
        config,
        seccomp_root,
        kubelet: &kubelet,
        lints: &lints,
        api: api.as_ref().map(|a| a as &dyn ApiSession),
    };
    let mut out = NodeRound::default();
    let mut conditions = Vec::new();
    for check in REGISTRY.iter().filter(|c| c.commands().contains(&command)) {
        let o = check.round(&cx, command);
        out.findings.extend(o.round.findings);
        conditions.push((check.origin(), o.round.conditions));
        out.events.extend(o.events);
        out.not_judged.extend(o.not_judged);
    }
    out.conditions = judge::node_conditions(conditions.iter().map(|(o, c)| (*o, &c[..])));
    out
}

/// The kubelet's files on this host (under `report.host-root` when set:
/// the DaemonSet's host mount).
pub fn kubelet_layout(config: &Config) -> Layout {
    match &config.report.host_root {
        Some(host) => Layout::under(host),
        None => Layout::default(),
    }
}

/// The API server through a command's session.
struct Api<'a> {
    session: &'a Session,
    opts: PodsOptions,
}

impl ApiSession for Api<'_> {
    fn pods(&self, lints: Arc<LintCache>) -> Result<PodsOnce, NotJudged> {
        self.session.judge_pods(&self.opts, lints)
    }
    fn dra(&self) -> NodeDra {
        self.session.dra(&self.opts)
    }
}

/// What `check` says of the pods when they are not judged.
pub const PODS_SUBJECT: &str = "pods";

/// Why the pods were not judged, logged once here where it is handled.
fn said(e: &PodsRunError, opts: &PodsOptions) -> NotJudged {
    let not_judged = not_judged(e, opts);
    if not_judged.fails {
        tracing::warn!(nodeproof_check = crate::pods::CHECK_NAME, error = %nodeproof_findings::errors::error_chain(e), "pods could not be judged");
    } else {
        tracing::info!(
            nodeproof_check = crate::pods::CHECK_NAME,
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
    NotJudged::new(Check::POD_PROFILE, PODS_SUBJECT, cause, message)
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

#[cfg(test)]
mod tests {
    use super::*;
    use nodeproof_findings::Status;

    /// On a bare host every check preflight runs is listed, each skipped
    /// with why, in the registry's order.
    #[test]
    fn preflight_on_a_bare_host_lists_every_check_skipped_with_why() {
        let dir = tempfile::tempdir().unwrap();
        let (root, host) = (dir.path().join("seccomp"), dir.path().join("host"));
        let mut config =
            Config::parse(crate::config::EMBEDDED_DEFAULT, Path::new("config.toml")).unwrap();
        config.report.host_root = Some(host.clone());
        // A PCI bus with no device on it.
        std::fs::create_dir_all(host.join("bus/pci/devices")).unwrap();
        config.gpu.sysfs_root = host.clone();
        config.gpu.nvml_library = host.join("libnvidia-ml.so.1").display().to_string();
        let said = |config: &Config| -> Vec<(Check, Status, String)> {
            let findings = node_round(Command::Preflight, &root, config, None).findings;
            // Each finding names a check of the registry.
            assert!(
                findings.iter().all(|f| crate::checks::registered(f.check)),
                "{findings:?}"
            );
            findings
                .into_iter()
                .map(|f| {
                    let m = f.message.replace(&host.display().to_string(), "HOST");
                    (
                        f.check,
                        f.status,
                        m.replace(&dir.path().display().to_string(), "DIR"),
                    )
                })
                .collect()
        };
        let skipped = |check, m: &str| (check, Status::Skipped, m.to_string());
        use crate::checks::{kubelet_access, seccomp_default, static_pods};
        assert_eq!(
            said(&config),
            [
                skipped(Check::SECCOMP_PROFILE, "DIR/seccomp does not exist: nothing to check"),
                skipped(Check::GPU_DRIVER, "no NVIDIA PCI device on this node: no GPU driver to check"),
                skipped(static_pods::CHECK, "HOST/etc/kubernetes/manifests does not exist: nothing to check"),
                skipped(
                    kubelet_access::CHECK,
                    "no kubelet.service in HOST/usr/lib/systemd/system, HOST/lib/systemd/system, HOST/run/systemd/system, HOST/etc/systemd/system: no rootless kubelet to check"
                ),
                skipped(
                    seccomp_default::CHECK,
                    "no kubelet.service on this host: no kubelet whose seccompDefault to check"
                ),
            ]
        );
        // Present but empty, and a kubelet running as root with no --config.
        let layout = Layout::under(&host);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&layout.manifests).unwrap();
        std::fs::create_dir_all(&layout.unit_dirs[3]).unwrap();
        std::fs::write(
            layout.unit_dirs[3].join("kubelet.service"),
            "[Service]\nExecStart=/k\n",
        )
        .unwrap();
        let messages: Vec<String> = said(&config)
            .into_iter()
            .filter(|(c, _, _)| *c != Check::GPU_DRIVER)
            .map(|(_, _, m)| m)
            .collect();
        assert_eq!(
            messages,
            [
                "no profiles under DIR/seccomp",
                "no static pod in HOST/etc/kubernetes/manifests names a localhostProfile",
                "the kubelet runs as root (no User= in kubelet.service or its drop-ins): no rootless access to check",
                "seccompDefault is not set (the kubelet's default is false): containers that name no seccomp profile run Unconfined; start the kubelet with --seccomp-default and restart the kubelet",
            ]
        );
    }
}
