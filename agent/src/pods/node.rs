//! `nodeproof pods`: this node's pods judged once (`--once`, printed), or
//! watched and reported (condition + pod Events) until stopped. Glue only:
//! credentials and node name as `check --report` finds them, node labels
//! from the Node, handlers from the runtime's config.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use super::denials::DenialAggregator;
use super::handlers;
use super::state::{Change, PodsState};
use super::verdict::{self, Judge, NodeContext, PodFinding};
use super::watch::{self, DenialFeed, WatchOptions};

use crate::observe;
use crate::observe::lint_cache::LintCache;
use nodeproof_apiclient::client::{Answered, KubeReporter};
use nodeproof_apiclient::identity;
use nodeproof_apiclient::read;
use nodeproof_apiclient::ConnectError;
use nodeproof_findings::Condition;
use nodeproof_gpu::views::NodeDra;
use nodeproof_report::conditions::Policy;
use nodeproof_report::config::ReportConfig;
use nodeproof_report::contract_labels::ContractVerdict;
use nodeproof_report::driver::{LoopConfig, ReportLoop};
use nodeproof_report::marks::MarkPolicy;
use nodeproof_seccomp::lint::LintOptions;
use nodeproof_trace::{
    CgroupResolver, Filter, NoPodLookup, Pump, SummaryRow, Tracer, TracerConfig,
};

#[derive(Debug, thiserror::Error)]
pub enum PodsRunError {
    #[error("no node name (set --node-name or NODE_NAME)")]
    NoNodeName,
    #[error("no API server credentials found ({credentials}); pods cannot be read")]
    NoCredentials { credentials: String },
    #[error("cannot connect to the API server")]
    Connect {
        #[source]
        source: Box<ConnectError>,
    },
    #[error("this credential is node {identity}; the Node {node} cannot be read with it")]
    NotOwnNode { identity: String, node: String },
    #[error("cannot read {what} for node {node}")]
    Read {
        what: &'static str,
        node: String,
        #[source]
        source: Box<nodeproof_apiclient::Error>,
    },
    #[error("cannot read pod {pod} with {credentials}")]
    GetPod {
        pod: String,
        credentials: String,
        #[source]
        source: Box<nodeproof_apiclient::Error>,
    },
    #[error("--pod {given:?} is not NAMESPACE/NAME")]
    PodName { given: String },
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    #[error("the API server did not answer within {after:?}")]
    Timeout { after: Duration },
}

#[derive(Debug, Clone, PartialEq)]
pub struct PodsOptions {
    pub kubeconfig: Option<PathBuf>,
    /// `kubeconfig`'s context instead of its current-context.
    pub context: Option<String>,
    pub node_name: Option<String>,
    /// `report.host-root`: where the kubelet's kubeconfig is looked for.
    pub host_root: Option<PathBuf>,
    pub seccomp_root: PathBuf,
    pub lint: LintOptions,
    /// Where the runtime's config lives (`/etc`).
    pub etc: PathBuf,
}

impl PodsOptions {
    /// The pods check's settings from the config: the reporter's
    /// credentials and node name, the profiles' lint settings, the
    /// runtime's config under `/etc`. The CLI and the daemon both start
    /// from this.
    pub fn from_config(config: &crate::config::Config, seccomp_root: &Path) -> PodsOptions {
        PodsOptions {
            kubeconfig: config.report.kubeconfig.clone(),
            context: config.report.context.clone(),
            node_name: config.report.node_name.clone(),
            host_root: config.report.host_root.clone(),
            seccomp_root: seccomp_root.to_path_buf(),
            lint: crate::observe::profiles::lint_options(&config.seccomp),
            etc: PathBuf::from("/etc"),
        }
    }
}

/// What one judgement found.
pub struct PodsOnce {
    pub node: String,
    pub pods: usize,
    pub findings: Vec<PodFinding>,
    pub condition: Condition,
    /// Every annotated RuntimeClass judged on this node.
    pub contracts: Vec<ContractVerdict>,
}

/// The API client and the Node's name, found as the reporter finds them
/// ([`nodeproof_apiclient::connect`]).
pub async fn connect(
    opts: &PodsOptions,
) -> Result<(nodeproof_apiclient::Client, String), PodsRunError> {
    let (client, node, _) = connect_answered(opts).await?;
    Ok((client, node))
}

/// [`connect`], and the successes of its API server heard by this process
/// (the watches resume on them: [`WatchOptions::answered`]).
pub async fn connect_answered(
    opts: &PodsOptions,
) -> Result<(nodeproof_apiclient::Client, String, Option<Answered>), PodsRunError> {
    let config = ReportConfig {
        kubeconfig: opts.kubeconfig.clone(),
        context: opts.context.clone(),
        node_name: opts.node_name.clone(),
        host_root: opts.host_root.clone(),
        ..ReportConfig::default()
    };
    let c = nodeproof_apiclient::connect(&config)
        .await
        .map_err(|e| match e {
            ConnectError::NoNodeName => PodsRunError::NoNodeName,
            e => PodsRunError::Connect {
                source: Box::new(e),
            },
        })?;
    let client = c.client.ok_or(PodsRunError::NoCredentials {
        credentials: c.credentials,
    })?;
    Ok((client, c.node, c.answered))
}

/// A client from the reporter's credentials (`kubeconfig`, the kubelet's,
/// in-cluster), and how they were found.
async fn api_client(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<(nodeproof_apiclient::Client, String), PodsRunError> {
    let config = ReportConfig {
        kubeconfig: kubeconfig.map(Path::to_path_buf),
        context: context.map(String::from),
        ..ReportConfig::default()
    };
    let (client, described) = nodeproof_apiclient::connect::api_client(&config)
        .await
        .map_err(|e| PodsRunError::Connect {
            source: Box::new(e),
        })?;
    let client = client.ok_or_else(|| PodsRunError::NoCredentials {
        credentials: described.clone(),
    })?;
    Ok((client, described))
}

/// One pod, `NAMESPACE/NAME`, from the API server (a node identity may read
/// the pods bound to it).
pub fn get_pod(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    key: &str,
) -> Result<Pod, PodsRunError> {
    let Some((ns, name)) = key
        .split_once('/')
        .filter(|(ns, n)| !ns.is_empty() && !n.is_empty())
    else {
        return Err(PodsRunError::PodName { given: key.into() });
    };
    runtime()?.block_on(async {
        let (client, credentials) = api_client(kubeconfig, context).await?;
        read::pod(&client, ns, name)
            .await
            .map_err(|source| PodsRunError::GetPod {
                pod: key.into(),
                credentials,
                source: Box::new(source),
            })
    })
}

/// This node as the judge needs it: labels (and taints) from the Node,
/// handlers from the runtime's config.
pub async fn node_context(
    client: &nodeproof_apiclient::Client,
    node: &str,
    opts: &PodsOptions,
) -> Result<NodeContext, PodsRunError> {
    let n = match read::node(client, node).await {
        Ok(n) => n,
        // Kubernetes 1.32+ answers 403 to a node reading another Node: say whose credential this is.
        Err(nodeproof_apiclient::Error::Api(s)) if s.code == 403 => {
            return Err(match identity::other_node(client, node).await {
                Some(identity) => PodsRunError::NotOwnNode {
                    identity,
                    node: node.into(),
                },
                None => PodsRunError::Read {
                    what: "the Node",
                    node: node.into(),
                    source: Box::new(nodeproof_apiclient::Error::Api(s)),
                },
            })
        }
        Err(source) => {
            return Err(PodsRunError::Read {
                what: "the Node",
                node: node.into(),
                source: Box::new(source),
            })
        }
    };
    let handlers = match handlers::read_handlers(opts.lint.runtime, &opts.etc) {
        Ok(h) => Some(h),
        Err(e) => {
            // Unknown handlers are not judged rather than all judged missing.
            tracing::warn!(error = %e, "runtime handlers unknown; RuntimeClass handlers not checked");
            None
        }
    };
    let (labels, taints) = verdict::labels_and_taints(&n);
    Ok(NodeContext {
        seccomp_root: opts.seccomp_root.clone(),
        labels,
        taints,
        handlers,
        lint: opts.lint.clone(),
        gpu: verdict::gpu_conditions(&n),
    })
}

fn runtime() -> Result<tokio::runtime::Runtime, PodsRunError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(PodsRunError::Runtime)
}

/// How long a one-shot judgement may take: `check` and `pods --once` must
/// end on a node whose API server does not answer (kube-rs's own timeouts
/// are per request, and a list is several).
pub const ONCE_DEADLINE: Duration = Duration::from_secs(20);

/// This node's DRA view once (`nodeproof gpu`, `nodeproof check`):
/// `Unread` without credentials or a node name (nothing to read it with).
pub fn dra_once(opts: &PodsOptions) -> NodeDra {
    let text = |e: &dyn std::error::Error| nodeproof_findings::errors::error_chain(e);
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return NodeDra::Failed(text(&e)),
    };
    rt.block_on(within_deadline(async {
        let (client, node) = match connect(opts).await {
            Ok(c) => c,
            Err(PodsRunError::NoCredentials { .. } | PodsRunError::NoNodeName) => {
                return NodeDra::Unread
            }
            Err(e) => return NodeDra::Failed(text(&e)),
        };
        dra_connected(client, &node).await
    }))
}

/// The DRA read of [`dra_once`] as one future, or why it did not finish.
pub async fn within_deadline(read: impl std::future::Future<Output = NodeDra>) -> NodeDra {
    tokio::time::timeout(ONCE_DEADLINE, read)
        .await
        .unwrap_or_else(|_| {
            NodeDra::Failed(format!(
                "reading DRA did not finish within {} s",
                ONCE_DEADLINE.as_secs()
            ))
        })
}

/// This node's DRA view with a client connected already (no deadline of
/// its own: [`within_deadline`]).
pub async fn dra_connected(client: nodeproof_apiclient::Client, node: &str) -> NodeDra {
    let text = |e: &dyn std::error::Error| nodeproof_findings::errors::error_chain(e);
    {
        let pods = match read::pods_on(&client, node).await {
            Ok(p) => p,
            Err(e) => return NodeDra::Failed(text(&e)),
        };
        let mut index = crate::pods::denials::PodIndex::default();
        pods.iter().for_each(|p| index.upsert(p));
        let mut reader = nodeproof_apiclient::dra::DraReader::new(client, node);
        NodeDra::of(reader.read(&index.claims()).await.map_err(|e| text(&e)))
    }
}

/// Lists this node's pods and the RuntimeClasses once and judges them.
/// `lints`: where the profiles' lint reports are kept (a caller that
/// linted the root already passes its own, so no file is linted twice).
pub fn once(opts: &PodsOptions, lints: Arc<LintCache>) -> Result<PodsOnce, PodsRunError> {
    // The timer is made inside the runtime: it needs the runtime's clock.
    runtime()?.block_on(judge_within_deadline(async {
        let (client, node) = connect(opts).await?;
        judge_connected(client, node, opts, lints).await
    }))
}

/// A one-shot judgement as one future, ended at [`ONCE_DEADLINE`].
pub async fn judge_within_deadline(
    judge: impl std::future::Future<Output = Result<PodsOnce, PodsRunError>>,
) -> Result<PodsOnce, PodsRunError> {
    tokio::time::timeout(ONCE_DEADLINE, judge)
        .await
        .map_err(|_| PodsRunError::Timeout {
            after: ONCE_DEADLINE,
        })?
}

/// [`once`] with a client connected already (no deadline of its own:
/// [`judge_within_deadline`]).
pub async fn judge_connected(
    client: nodeproof_apiclient::Client,
    node: String,
    opts: &PodsOptions,
    lints: Arc<LintCache>,
) -> Result<PodsOnce, PodsRunError> {
    {
        let ctx = node_context(&client, &node, opts).await?;
        let read_failed = |what| {
            let node = node.clone();
            move |source| PodsRunError::Read {
                what,
                node,
                source: Box::new(source),
            }
        };
        let pods = read::pods_on(&client, &node)
            .await
            .map_err(read_failed("pods"))?;
        let classes = read::runtime_classes(&client)
            .await
            .map_err(read_failed("RuntimeClasses"))?;
        let mut state = PodsState::new(ctx, Judge::new(lints, observe::profiles::read_reference));
        state.apply(Change::Pods(pods));
        state.apply(Change::Classes(classes));
        let eval = state.evaluate();
        Ok(PodsOnce {
            node: node.clone(),
            pods: state.index.len(),
            findings: eval.new,
            condition: eval.condition,
            contracts: eval.contracts,
        })
    }
}

/// Watches and reports until `stop` is set (checked every 200 ms), with the
/// reporter's `policy` as `run` has it (`[report]`'s hysteresis and heartbeat)
/// and its contract labels unless `report.runtimeclass-labels = false`.
pub fn daemon(
    opts: &PodsOptions,
    policy: Policy,
    contract_labels: bool,
    stop: &'static AtomicBool,
) -> Result<(), PodsRunError> {
    runtime()?.block_on(async {
        let (client, node, answered) = connect_answered(opts).await?;
        let ctx = node_context(&client, &node, opts).await?;
        let reporter = KubeReporter::new(client.clone(), &node);
        let mut lp = ReportLoop::new(
            reporter,
            LoopConfig {
                policy,
                marks: MarkPolicy {
                    contract_labels,
                    ..MarkPolicy::default()
                },
                ..LoopConfig::default()
            },
            std::process::id().into(),
        );
        // Only the pods are judged here: no lint of the root to share.
        let mut state = PodsState::new(
            ctx,
            Judge::new(Arc::default(), observe::profiles::read_reference),
        );
        let (rows_tx, rows_rx) = tokio::sync::mpsc::channel(4);
        std::thread::spawn(move || trace_rows(rows_tx, stop));
        let feed = DenialFeed::new(rows_rx, DenialAggregator::new(Duration::from_secs(60)));
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let _ = tx.send(true);
        });
        watch::run(
            &mut lp,
            client,
            &mut state,
            &WatchOptions {
                answered,
                ..WatchOptions::default()
            },
            rx,
            &node,
            Some(feed),
        )
        .await;
        Ok(())
    })
}

/// The tracer on its own thread: every 5 s the exact counts as rows, with
/// cgroups resolved (pod names are resolved later, against the watched pods).
/// Without the privileges to trace, pods are still judged; only denials are missing.
fn trace_rows(tx: tokio::sync::mpsc::Sender<Vec<SummaryRow>>, stop: &'static AtomicBool) {
    let tracer = match Tracer::start(&TracerConfig::default()) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "no seccomp tracer: denials are not reported on pods");
            return;
        }
    };
    let mut pump = Pump::new(tracer, CgroupResolver::host(), Filter::default());
    let mut last = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        // A sample resolves its cgroup while the container still exists; the
        // counts are read later, when it may be gone.
        if let Err(e) = pump.poll(Duration::from_millis(500), &NoPodLookup, &mut |_| {}) {
            tracing::warn!(error = %e, "seccomp tracer stopped");
            return;
        }
        if last.elapsed() < Duration::from_secs(5) {
            continue;
        }
        last = Instant::now();
        let rows = match pump.rows(&NoPodLookup) {
            Ok((rows, _)) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "seccomp tracer counts unreadable");
                return;
            }
        };
        if tx.blocking_send(rows).is_err() {
            return;
        }
    }
}

/// The text `pods --once` prints.
pub fn render(r: &PodsOnce, root: &Path) -> String {
    let mut s = format!(
        "node {}: {}, seccomp root {}\n",
        r.node,
        nodeproof_findings::count(r.pods, "pod", "pods"),
        root.display()
    );
    for f in &r.findings {
        s.push_str(&format!("{} {}\n", f.reason.as_str(), f.describe()));
    }
    for v in &r.contracts {
        s.push_str(&format!("RuntimeClass {} {}", v.class, v.state));
        if !v.cause.is_empty() {
            s.push_str(&format!(": {}", v.cause));
        }
        s.push('\n');
    }
    s.push_str(&format!(
        "{} {} {}: {}\n",
        r.condition.kind, r.condition.status, r.condition.reason, r.condition.message
    ));
    s
}
