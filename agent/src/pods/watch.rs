//! Watches the pods bound to this node (field selector `spec.nodeName`, which
//! the Node authorizer allows a node identity), the RuntimeClasses and this
//! Node itself (`metadata.name`: its labels and taints decide whether a
//! RuntimeClass runs here), judges their seccomp references on every change
//! that matters and on a recheck tick (a profile file fixed on disk makes no
//! API event), and hands the condition and new findings to the report loop.
//!
//! Each kind is followed by kube-runtime's `watcher`: it lists in pages,
//! asks for bookmarks, resumes a watch from the last resourceVersion it saw
//! and lists again when the API server answers 410 Gone; only the delay
//! between retries is chosen here (see [`forward`]).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::Stream;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::Api;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, watcher, DefaultBackoff, Event};
use kube::ResourceExt;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, Notify};
use tracing::Instrument;

use super::contract;
use super::denials::{DenialAggregator, PodDenialEvent, PodDenialTotal, PodIndex, EVENT_REASON};
use super::gpu_faults::{
    GpuFaultAggregator, GpuFaultTotal, PodGpuFaultEvent, EVENT_REASON as GPU_FAULT_REASON,
};
use super::verdict::{self, Judge, NodeContext, PodFinding, Reason, RuntimeClassInfo};
use crate::checks::lint_cache::LintCache;
use crate::checks::Subsystem;
use nodeproof_findings::Condition;
use nodeproof_gpu::faults::PodFault;
use nodeproof_kube::client::Answered;
use nodeproof_report::contract::ContractState;
use nodeproof_report::contract_labels::ContractVerdict;
use nodeproof_report::driver::ReportLoop;
use nodeproof_report::events::{EventType, ObjectRef, PodEvent};
use nodeproof_report::reporter::Reporter;
use nodeproof_trace::SummaryRow;

#[derive(Debug, thiserror::Error)]
pub enum PodsWatchError {
    /// 410 Gone: the API server no longer has the version a watch (or a
    /// list's continue token) started from; the watcher lists again.
    #[error("the {resource} watch fell too far behind; listing {resource} again")]
    Expired {
        resource: &'static str,
        #[source]
        source: watcher::Error,
    },
    #[error("cannot list or watch {resource}")]
    Interrupted {
        resource: &'static str,
        #[source]
        source: watcher::Error,
    },
}

impl PodsWatchError {
    fn new(resource: &'static str, source: watcher::Error) -> Self {
        let gone = match &source {
            // A watch from a compacted version: an ERROR event with a 410 Status.
            watcher::Error::WatchError(status) => status.code == 410,
            // A continue token older than the compaction: the page request itself is 410.
            watcher::Error::InitialListFailed(kube::Error::Api(status)) => status.code == 410,
            _ => false,
        };
        if gone {
            PodsWatchError::Expired { resource, source }
        } else {
            PodsWatchError::Interrupted { resource, source }
        }
    }
}

/// What the watches report.
#[derive(Debug)]
pub enum Change {
    Pods(Vec<Pod>),
    Pod(Pod),
    PodGone(Pod),
    Classes(Vec<RuntimeClass>),
    Class(RuntimeClass),
    ClassGone(RuntimeClass),
    /// This Node, listed (one item, or none while it is not registered).
    Nodes(Vec<Node>),
    Node(Node),
    NodeGone(Node),
}

/// One judgement of every watched pod.
#[derive(Debug, Clone)]
pub struct Evaluation {
    pub condition: Condition,
    /// Findings not in the previous evaluation (each becomes one Event).
    pub new: Vec<PodFinding>,
    /// Pods with at least one unusable reference.
    pub failing_pods: usize,
    /// Every annotated RuntimeClass, judged on this node.
    pub contracts: Vec<ContractVerdict>,
}

/// The watched pods and classes and what was last said about them.
pub struct PodsState {
    pub index: PodIndex,
    classes: HashMap<String, RuntimeClassInfo>,
    judge: Judge,
    reported: HashSet<(String, Option<String>, Reason, String)>,
    /// Both initial lists arrived. Before that a pod's RuntimeClass may just
    /// not be listed yet, and "does not exist" would be a false alarm.
    pods_listed: bool,
    classes_listed: bool,
    /// When each RuntimeClass that pods reference was first found missing.
    /// A pod and its RuntimeClass created together arrive on two watches in
    /// either order, so "does not exist" waits [`CLASS_GRACE`] before it is said.
    class_missing_since: HashMap<String, Instant>,
    pub node: NodeContext,
}

/// How long a referenced RuntimeClass may be missing before it is reported.
pub const CLASS_GRACE: Duration = Duration::from_secs(2);

impl PodsState {
    /// `lints`: where the files' lint reports are kept (the daemon's is
    /// shared with the profiles check).
    pub fn new(node: NodeContext, lints: Arc<LintCache>) -> Self {
        PodsState {
            index: PodIndex::default(),
            classes: HashMap::new(),
            judge: Judge::new(lints),
            reported: HashSet::new(),
            pods_listed: false,
            classes_listed: false,
            class_missing_since: HashMap::new(),
            node,
        }
    }

    /// Takes a change in; true when it may change a verdict (a Node's
    /// status-only update, its 10-second heartbeat, does not).
    pub fn apply(&mut self, change: Change) -> bool {
        match change {
            Change::Pods(pods) => {
                self.pods_listed = true;
                self.index = PodIndex::default();
                pods.iter().for_each(|p| self.index.upsert(p));
            }
            Change::Pod(p) => self.index.upsert(&p),
            Change::PodGone(p) => self.index.remove(&p.uid().unwrap_or_default()),
            Change::Classes(cs) => {
                self.classes_listed = true;
                self.classes = cs.iter().map(|c| (c.name_any(), c.into())).collect();
            }
            Change::Class(c) => {
                self.classes.insert(c.name_any(), (&c).into());
            }
            Change::ClassGone(c) => {
                self.classes.remove(&c.name_any());
            }
            Change::Nodes(nodes) => {
                // Not registered (yet): the labels and taints read at start stay.
                return nodes.first().is_some_and(|n| self.node.update_from(n));
            }
            Change::Node(n) => return self.node.update_from(&n),
            Change::NodeGone(n) => {
                // A Node deleted is leaving the cluster; its last labels still describe it.
                tracing::debug!(k8s_node = %n.name_any(), "the Node was deleted; keeping its last labels and taints");
                return false;
            }
        }
        true
    }

    /// Starts over with another node context (a reload changed the node,
    /// root or lint options): everything is listed again before the next
    /// judgement, and findings already reported stay reported, so a
    /// finding that still holds is not news again. The lint reports stay:
    /// they are kept by lint options, so new options lint afresh.
    pub fn restart(&mut self, node: NodeContext) {
        self.node = node;
        self.pods_listed = false;
        self.classes_listed = false;
        self.class_missing_since.clear();
    }

    pub fn synced(&self) -> bool {
        self.pods_listed && self.classes_listed
    }

    pub fn evaluate(&mut self) -> Evaluation {
        self.evaluate_at(Instant::now())
    }

    /// How soon a held-back finding is due (the caller's next wake-up).
    pub fn next_due(&self, now: Instant) -> Option<Duration> {
        self.class_missing_since
            .values()
            .map(|since| (*since + CLASS_GRACE).saturating_duration_since(now))
            .filter(|d| !d.is_zero())
            .min()
    }

    pub fn evaluate_at(&mut self, now: Instant) -> Evaluation {
        let mut pods: Vec<_> = self.index.refs().cloned().collect();
        pods.sort_by_key(|p| p.key());
        let missing: HashSet<&String> = pods
            .iter()
            .filter_map(|p| p.runtime_class.as_ref())
            .filter(|name| !self.classes.contains_key(*name))
            .collect();
        self.class_missing_since
            .retain(|name, _| missing.contains(name));
        for name in missing {
            self.class_missing_since.entry(name.clone()).or_insert(now);
        }
        let held: HashSet<String> = self
            .class_missing_since
            .iter()
            .filter(|(_, since)| now.saturating_duration_since(**since) < CLASS_GRACE)
            .map(|(name, _)| name.clone())
            .collect();
        let contracts = contract::judge_all(&mut self.judge, &self.classes, &self.node);
        let not_ready: HashMap<&str, &ContractVerdict> = contracts
            .iter()
            .filter(|v| v.state == ContractState::NotReady)
            .map(|v| (v.class.as_str(), v))
            .collect();
        let findings: Vec<PodFinding> = pods
            .iter()
            .flat_map(|p| {
                let held_class = p.runtime_class.as_ref().filter(|rc| held.contains(*rc));
                // Already bound here (the scheduler placed it before the label
                // said not-ready, or it ignores the class's nodeSelector).
                let unmet = p
                    .runtime_class
                    .as_deref()
                    .and_then(|rc| not_ready.get(rc))
                    .map(|v| PodFinding {
                        namespace: p.namespace.clone(),
                        pod: p.name.clone(),
                        uid: p.uid.clone(),
                        container: None,
                        subject: v.class.clone(),
                        reason: Reason::RuntimeClassNotReady,
                        message: format!(
                            "RuntimeClass {} is not ready on this node: {}",
                            v.class, v.cause
                        ),
                    })
                    .filter(|_| !p.finished);
                let judged = self
                    .judge
                    .judge_pod(p, &self.classes, &self.node)
                    .into_iter()
                    .filter(move |f| {
                        !(f.reason == Reason::RuntimeClassMismatch
                            && held_class
                                .is_some_and(|rc| f.message == verdict::missing_class_message(rc)))
                    });
                // The pod's own, more concrete findings lead.
                judged.chain(unmet).collect::<Vec<_>>()
            })
            .collect();
        let root = self.node.seccomp_root.display().to_string();
        let keys: HashSet<_> = findings.iter().map(|f| finding_key(f, &root)).collect();
        let new = findings
            .iter()
            .filter(|f| !self.reported.contains(&finding_key(f, &root)))
            .cloned()
            .collect();
        // Only current findings are remembered: a problem fixed and broken again is news again.
        self.reported = keys;
        let failing_pods = findings
            .iter()
            .map(|f| f.uid.as_str())
            .collect::<BTreeSet<_>>()
            .len();
        Evaluation {
            condition: verdict::condition(&findings, pods.len()),
            new,
            failing_pods,
            contracts,
        }
    }
}

/// What makes a finding news. The seccomp root is left out of the message:
/// a file missing from the root before a reload and from the new one after
/// it is the same problem, already said.
fn finding_key(f: &PodFinding, seccomp_root: &str) -> (String, Option<String>, Reason, String) {
    let message = if seccomp_root.is_empty() {
        f.message.clone()
    } else {
        f.message.replace(seccomp_root, "<seccomp root>")
    };
    (f.uid.clone(), f.container.clone(), f.reason, message)
}

/// The Event for a finding: on the pod, the first line of what is wrong.
pub fn finding_event(f: &PodFinding) -> PodEvent {
    let message = match &f.container {
        Some(c) => format!("container {c}: {}", f.message),
        None => f.message.clone(),
    };
    PodEvent {
        pod: ObjectRef {
            kind: "Pod",
            namespace: f.namespace.clone(),
            name: f.pod.clone(),
            uid: Some(f.uid.clone()),
        },
        event_type: EventType::Warning,
        reason: f.reason.event_reason(),
        message,
    }
}

/// The Event for aggregated denials (Warning, reason `SeccompDenied`, on the pod).
pub fn denial_event(e: PodDenialEvent) -> PodEvent {
    PodEvent {
        pod: e.pod,
        event_type: EventType::Warning,
        reason: EVENT_REASON,
        message: e.message,
    }
}

/// The tracer's rows (cumulative counts, as `trace::summary::aggregate`
/// builds them from `Tracer::counts`) and what aggregates them; in the
/// daemon also the GPU probe's faults on pods.
pub struct DenialFeed {
    pub rows: mpsc::Receiver<Vec<SummaryRow>>,
    pub aggregator: DenialAggregator,
    pending: Vec<Vec<SummaryRow>>,
    pub gpu: Option<GpuFaultFeed>,
}

impl DenialFeed {
    pub fn new(rows: mpsc::Receiver<Vec<SummaryRow>>, aggregator: DenialAggregator) -> Self {
        DenialFeed {
            rows,
            aggregator,
            pending: Vec::new(),
            gpu: None,
        }
    }
}

/// GPU faults attributed to containers (by pod-resources), and what
/// resolves them against the watched pods and aggregates them.
pub struct GpuFaultFeed {
    pub faults: tokio::sync::broadcast::Receiver<Vec<PodFault>>,
    pub aggregator: GpuFaultAggregator,
    pending: Vec<PodFault>,
}

impl GpuFaultFeed {
    pub fn new(
        faults: tokio::sync::broadcast::Receiver<Vec<PodFault>>,
        aggregator: GpuFaultAggregator,
    ) -> Self {
        GpuFaultFeed {
            faults,
            aggregator,
            pending: Vec::new(),
        }
    }
}

/// The next batch of GPU faults, or never when there is no feed (or it ended).
async fn next_faults(
    faults: Option<&mut tokio::sync::broadcast::Receiver<Vec<PodFault>>>,
) -> Option<Vec<PodFault>> {
    let Some(faults) = faults else {
        return std::future::pending().await;
    };
    loop {
        match faults.recv().await {
            Ok(batch) => return Some(batch),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(
                    nodeproof_check = Subsystem::Pods.as_str(),
                    batches = n,
                    "GPU fault batches lost: the pods watcher fell behind"
                );
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                return std::future::pending().await
            }
        }
    }
}

/// The Event for aggregated GPU faults (Warning, reason `GPUFault`, on the pod).
pub fn gpu_fault_event(e: PodGpuFaultEvent) -> PodEvent {
    PodEvent {
        pod: e.pod,
        event_type: EventType::Warning,
        reason: GPU_FAULT_REASON,
        message: e.message,
    }
}

/// The next batch of rows, or never when there is no feed (or it ended).
async fn next_rows(rows: Option<&mut mpsc::Receiver<Vec<SummaryRow>>>) -> Option<Vec<SummaryRow>> {
    match rows {
        Some(rows) => match rows.recv().await {
            Some(rows) => Some(rows),
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// Hands the denial events that are due to the report loop.
pub fn record_denials<R: Reporter>(
    lp: &mut ReportLoop<R>,
    denials: &mut DenialAggregator,
    now: SystemTime,
) -> usize {
    let due = denials.due(now);
    let n = due.len();
    for e in due.into_iter().map(denial_event) {
        lp.pod_event(now, e.pod, e.event_type, e.reason, &e.message);
    }
    n
}

/// What one judgement round says; whoever runs the watch reports it.
#[derive(Debug, Clone)]
pub struct Round {
    pub at: SystemTime,
    /// Pods bound to this node and watched.
    pub pods: usize,
    /// The pods' part of `SeccompProfilesReady` (see `verdict::combine`).
    pub condition: Condition,
    /// Findings not in the previous round, and denials due: one Event each.
    pub events: Vec<PodEvent>,
    /// Pods with an unusable reference.
    pub failing_pods: usize,
    /// `nodeproof_pod_seccomp_denials_total`, when denials are fed.
    pub denial_totals: Option<Vec<PodDenialTotal>>,
    /// `nodeproof_gpu_faults_total`, when GPU faults are fed.
    pub gpu_fault_totals: Option<Vec<GpuFaultTotal>>,
    /// Every annotated RuntimeClass judged on this node (the contract labels).
    pub contracts: Vec<ContractVerdict>,
    /// `(namespace, name)` of the pods running here (not Succeeded or
    /// Failed), for the GPU usage metrics' pod labels.
    pub running_pods: std::collections::BTreeSet<(String, String)>,
}

/// How often files are judged again without an API change, and what else
/// asks for a judgement (the daemon's seccomp-root watch).
#[derive(Debug, Clone)]
pub struct WatchOptions {
    pub recheck: Duration,
    /// Notified when the profile files may have changed: judge now.
    pub wake: Option<Arc<Notify>>,
    /// This Node as each watch event shows it, for the reporter (a Node
    /// registered again or stripped of nodeproof's conditions is rewritten).
    pub node_seen: Option<tokio::sync::mpsc::Sender<nodeproof_report::reporter::NodeState>>,
    /// This Node's allocatable NVIDIA resources as each watch event shows
    /// them, for the GPU probe's comparison.
    pub node_gpus: Option<Arc<tokio::sync::watch::Sender<crate::checks::gpu::NodeGpus>>>,
    /// The DRA claims of the pods running here, whenever they change, for
    /// the DRA reader (`pods::dra`).
    pub pod_claims: Option<tokio::sync::watch::Sender<Vec<nodeproof_kube::dra::PodClaims>>>,
    /// The successes of the watched API server (any client of this
    /// process): a watch waiting out a retry the server did not answer
    /// resumes on the next one, and `/readyz` is probed meanwhile. `None`:
    /// each retry waits its whole delay.
    pub answered: Option<Answered>,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            recheck: Duration::from_secs(10),
            wake: None,
            node_seen: None,
            node_gpus: None,
            pod_claims: None,
            answered: None,
        }
    }
}

async fn woken(wake: Option<&Arc<Notify>>) {
    match wake {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

/// Runs until `stop` turns true: watches, judges, and reports each round
/// through `lp` (`nodeproof pods`).
pub async fn run<R: Reporter>(
    lp: &mut ReportLoop<R>,
    client: kube::Client,
    state: &mut PodsState,
    opts: &WatchOptions,
    stop: tokio::sync::watch::Receiver<bool>,
    node: &str,
    denials: Option<DenialFeed>,
) {
    let (tx, mut rx) = mpsc::channel::<Round>(4);
    let report = async {
        while let Some(round) = rx.recv().await {
            lp.observe(round.at, std::slice::from_ref(&round.condition));
            lp.observe_contracts(round.at, &round.contracts);
            for e in round.events {
                lp.pod_event(round.at, e.pod, e.event_type, e.reason, &e.message);
            }
            if let Err(e) = lp.flush(round.at).await {
                tracing::warn!(error = %e, "reporting pod findings failed; retrying");
            }
        }
    };
    let mut denials = denials;
    tokio::join!(
        rounds(client, state, opts, stop, node, denials.as_mut(), tx),
        report
    );
}

/// Runs until `stop` turns true (or `out` is gone): watches, judges on
/// every change that matters, every `recheck` and every `wake`, and sends
/// each round. The feed and `state` outlive it: a watcher started again
/// (after a reload) goes on from what was already said.
pub async fn rounds(
    client: kube::Client,
    state: &mut PodsState,
    opts: &WatchOptions,
    mut stop: tokio::sync::watch::Receiver<bool>,
    node: &str,
    mut denials: Option<&mut DenialFeed>,
    out: mpsc::Sender<Round>,
) {
    let (tx, mut rx) = mpsc::channel(256);
    let pods: Api<Pod> = Api::all(client.clone());
    let classes: Api<RuntimeClass> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let resume = opts.answered.clone().map(Resume::new);
    // Aborted however this ends, including when the caller drops it to start over.
    let mut tasks = vec![
        tokio::spawn(watch_kind(
            pods,
            "pods",
            Some(format!("spec.nodeName={node}")),
            tx.clone(),
            Changes {
                reset: Change::Pods,
                upsert: Change::Pod,
                gone: Change::PodGone,
            },
            resume.clone(),
        )),
        tokio::spawn(watch_kind(
            classes,
            "runtimeclasses",
            None,
            tx.clone(),
            Changes {
                reset: Change::Classes,
                upsert: Change::Class,
                gone: Change::ClassGone,
            },
            resume.clone(),
        )),
        // The Node authorizer lets a node list and watch its own Node this way only.
        tokio::spawn(watch_kind(
            nodes,
            "nodes",
            Some(format!("metadata.name={node}")),
            tx,
            Changes {
                reset: Change::Nodes,
                upsert: Change::Node,
                gone: Change::NodeGone,
            },
            resume.clone(),
        )),
    ];
    if let Some(r) = resume {
        tasks.push(tokio::spawn(probe(client, r)));
    }
    let _tasks = AbortOnDrop(tasks);
    // A deadline, not a sleep per turn: changes that are not judged (the
    // Node's heartbeats) must not keep postponing the recheck.
    let mut recheck_at = tokio::time::Instant::now() + opts.recheck;
    loop {
        let wake_at = state.next_due(Instant::now()).map_or(recheck_at, |d| {
            recheck_at.min(tokio::time::Instant::now() + d)
        });
        let mut judge = true;
        let (rows_rx, faults_rx) = match denials.as_deref_mut() {
            Some(d) => (Some(&mut d.rows), d.gpu.as_mut().map(|g| &mut g.faults)),
            None => (None, None),
        };
        tokio::select! {
            change = rx.recv() => match change {
                Some(c) => {
                    let seen = match &c {
                        Change::Node(n) => Some(n),
                        Change::Nodes(listed) => listed.first(),
                        _ => None,
                    };
                    if let (Some(tx), Some(n)) = (&opts.node_seen, seen) {
                        // Never blocks the watch: a full channel already holds a Node to look at.
                        let _ = tx.try_send(nodeproof_kube::client::node_state(n));
                    }
                    if let (Some(tx), Some(n)) = (&opts.node_gpus, seen) {
                        tx.send_replace(Some(crate::checks::gpu::nvidia_allocatable(n)));
                    }
                    judge = state.apply(c);
                }
                None => break,
            },
            _ = tokio::time::sleep_until(wake_at) => {}
            _ = woken(opts.wake.as_ref()) => {}
            _ = stop.changed() => {}
            rows = next_rows(rows_rx) => {
                if let (Some(rows), Some(feed)) = (rows, denials.as_deref_mut()) {
                    feed.pending.push(rows);
                }
            }
            faults = next_faults(faults_rx) => {
                if let (Some(faults), Some(feed)) = (faults, denials.as_deref_mut().and_then(|d| d.gpu.as_mut())) {
                    feed.pending.extend(faults);
                }
            }
        }
        if *stop.borrow() {
            break;
        }
        // Everything already queued goes into this one judgement.
        while let Ok(c) = rx.try_recv() {
            judge |= state.apply(c);
        }
        if let Some(tx) = &opts.pod_claims {
            let claims = state.index.claims();
            tx.send_if_modified(|v| {
                let changed = *v != claims;
                if changed {
                    *v = claims;
                }
                changed
            });
        }
        if !judge || !state.synced() {
            continue;
        }
        recheck_at = tokio::time::Instant::now() + opts.recheck;
        let now = SystemTime::now();
        let eval = state.evaluate();
        let mut events: Vec<PodEvent> = eval.new.iter().map(finding_event).collect();
        let mut denial_totals = None;
        let mut gpu_fault_totals = None;
        if let Some(feed) = denials.as_deref_mut() {
            // Rows are resolved against the pods as now known, after this round's changes.
            for rows in feed.pending.drain(..) {
                feed.aggregator.observe(&rows, &state.index);
            }
            events.extend(feed.aggregator.due(now).into_iter().map(denial_event));
            denial_totals = Some(feed.aggregator.totals());
            if let Some(gpu) = feed.gpu.as_mut() {
                // Terminated pods are dropped against the pods as now known.
                let pending = std::mem::take(&mut gpu.pending);
                gpu.aggregator.observe(&pending, &state.index);
                events.extend(gpu.aggregator.due(now).into_iter().map(gpu_fault_event));
                gpu_fault_totals = Some(gpu.aggregator.totals());
            }
        }
        let round = Round {
            at: now,
            pods: state.index.len(),
            condition: eval.condition,
            events,
            failing_pods: eval.failing_pods,
            denial_totals,
            gpu_fault_totals,
            contracts: eval.contracts,
            running_pods: state.index.running_pods(),
        };
        if out.send(round).await.is_err() {
            break;
        }
    }
}

/// The list+watch tasks of one watcher.
struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.iter().for_each(|t| t.abort());
    }
}

/// Follows one kind with kube-runtime's `watcher` and hands its events on
/// as [`Change`]s, until the receiver is gone.
///
/// Why these settings: pages of 500 (`watcher::Config`'s default, the page
/// size of client-go's pager) bound what one response holds; a list without
/// `resourceVersion` (the `MostRecent` semantic) is a consistent read, so a
/// relist after a 410 cannot come from a lagging API server's cache and bring
/// back a pod deleted meanwhile (since Kubernetes 1.31 such reads are served
/// from the watch cache too: ConsistentListFromCache); bookmarks let a watch
/// resume from a recent version even when nothing it selects changed, so a
/// quiet watch is not the one that falls behind a compaction. Streaming lists
/// (`sendInitialEvents`) are not used: before the WatchList gate (beta in
/// 1.32) an API server refuses them, and this agent must work on 1.28.
async fn watch_kind<K>(
    api: Api<K>,
    resource: &'static str,
    field_selector: Option<String>,
    tx: mpsc::Sender<Change>,
    changes: Changes<K>,
    resume: Option<Resume>,
) where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut config = watcher::Config::default();
    if let Some(s) = &field_selector {
        config = config.fields(s);
    }
    let span = tracing::info_span!(
        "watch",
        resource,
        field_selector = field_selector.as_deref().unwrap_or("")
    );
    forward(
        watcher(api, config),
        resource,
        &tx,
        &changes,
        DefaultBackoff::default(),
        resume,
    )
    .instrument(span)
    .await;
}

/// The delays of [`forward`]'s retries are kube-runtime's `DefaultBackoff`,
/// the parameters of client-go's reflector: 0.8 s doubling to 30 s, each
/// stretched by up to as much again at random (so a fleet's nodes do not
/// retry in step), starting over once two minutes pass without an error
/// (and here also once a list completes). It never runs out; were it to,
/// this is the delay.
const RETRY_MAX: Duration = Duration::from_secs(60);

/// A list is buffered until it is complete (`InitDone`) and handed on whole:
/// a pod the relist no longer has (deleted while the watch was away) is
/// dropped with it, and nothing is judged from half a list.
///
/// Every error is waited out before the watcher is polled again, 410 Gone
/// included (client-go's reflector, too, backs off before it lists again).
/// kube-runtime's own `WatchStreamExt::default_backoff()` is not used: its
/// `StreamBackoff` starts the delay over on every item that is not an error,
/// and the watcher yields `Event::Init` before each list attempt, so against
/// an API server that is down the delay never grows past the first 0.8–1.6 s
/// (measured against the test API server: 28 attempts by the three watches
/// in 10 s, against 12 here). Here the delay starts over only when a list
/// completes and after two quiet minutes (`DefaultBackoff`'s reset timer):
/// a watch that keeps failing after a good list keeps growing.
///
/// With `resume`, a retry the API server did not answer (see [`unanswered`])
/// is waited out only until the server answers anyone again: after a
/// control-plane restart the delay may have grown to half a minute, and the
/// watch would be blind that long while every other request succeeds.
async fn forward<K, S, B>(
    stream: S,
    resource: &'static str,
    tx: &mpsc::Sender<Change>,
    changes: &Changes<K>,
    mut backoff: B,
    mut resume: Option<Resume>,
) where
    S: Stream<Item = Result<Event<K>, watcher::Error>>,
    B: Backoff,
{
    let mut stream = std::pin::pin!(stream);
    let mut listed: Vec<K> = Vec::new();
    while let Some(event) = stream.next().await {
        let change = match event {
            Ok(Event::Init) => {
                listed.clear();
                continue;
            }
            Ok(Event::InitApply(o)) => {
                listed.push(o);
                continue;
            }
            Ok(Event::InitDone) => {
                backoff.reset();
                (changes.reset)(std::mem::take(&mut listed))
            }
            Ok(Event::Apply(o)) => (changes.upsert)(o),
            Ok(Event::Delete(o)) => (changes.gone)(o),
            Err(source) => {
                let delay = backoff.next().unwrap_or(RETRY_MAX);
                let server_away = unanswered(&source);
                let e = PodsWatchError::new(resource, source);
                let retry_ms = delay.as_millis() as u64;
                if matches!(e, PodsWatchError::Expired { .. }) {
                    // Routine: compaction outran the watch; the relist follows.
                    tracing::debug!(
                        error = &e as &dyn std::error::Error,
                        retry_ms,
                        "watch expired"
                    );
                } else {
                    tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        retry_ms,
                        "watch interrupted; retrying"
                    );
                }
                match resume.as_mut().filter(|_| server_away) {
                    Some(r) => r.wait(delay).await,
                    None => tokio::time::sleep(delay).await,
                }
                continue;
            }
        };
        if tx.send(change).await.is_err() {
            return;
        }
    }
}

/// Whether the API server did not answer (refused, reset, timed out) or
/// answered that it is unwell (5xx): then a success heard from it later
/// means it is back. Any other answer is about this request (401 and 403:
/// the credential; 410: the relist that follows) and is waited out in
/// full, as is a 429, which asks for less traffic, not more.
fn unanswered(e: &watcher::Error) -> bool {
    let unwell = |code: u16| code >= 500;
    match e {
        watcher::Error::WatchError(status) => unwell(status.code),
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => match e {
            kube::Error::Api(status) => unwell(status.code),
            kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
                true
            }
            _ => false,
        },
        watcher::Error::NoResourceVersion => false,
    }
}

/// How long after the API server is heard again a waiting watch retries:
/// up to this at random, so a fleet's nodes (and this node's three watches)
/// do not list at the same instant.
const RESUME_JITTER: Duration = Duration::from_secs(1);
/// While a watch waits for the API server, `/readyz` is asked this often
/// (plus up to [`PROBE_JITTER`]): with nothing else to send (the reporter
/// writes on a change or a heartbeat), a probe is what hears it back.
const PROBE_EVERY: Duration = Duration::from_secs(2);
const PROBE_JITTER: Duration = Duration::from_secs(1);
/// A probe the server does not answer within this is a failed one.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What cuts short a watch's wait for an API server that did not answer.
#[derive(Clone)]
struct Resume {
    answered: Answered,
    /// How many watches wait for the API server: the probe runs while any does.
    waiting: Arc<tokio::sync::watch::Sender<usize>>,
}

impl Resume {
    fn new(answered: Answered) -> Self {
        Resume {
            answered,
            waiting: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }

    /// Waits `delay`, or until the server is heard again and then up to
    /// [`RESUME_JITTER`] more (never past `delay`).
    async fn wait(&mut self, delay: Duration) {
        struct Waiting<'a>(&'a tokio::sync::watch::Sender<usize>);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.send_modify(|n| *n = n.saturating_sub(1));
            }
        }
        self.waiting.send_modify(|n| *n += 1);
        let waiting = Waiting(&self.waiting);
        let deadline = tokio::time::Instant::now() + delay;
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return,
            _ = self.answered.next() => {}
        }
        drop(waiting);
        let jittered = tokio::time::Instant::now() + jitter(RESUME_JITTER);
        tokio::time::sleep_until(jittered.min(deadline)).await;
        tracing::debug!("the API server answered again; the watch resumes");
    }
}

/// Asks `/readyz` every [`PROBE_EVERY`] (jittered) while a watch waits for
/// the API server; a success is heard by every waiting watch.
async fn probe(client: kube::Client, resume: Resume) {
    let mut waiting = resume.waiting.subscribe();
    loop {
        if waiting.wait_for(|n| *n > 0).await.is_err() {
            return;
        }
        tokio::time::sleep(PROBE_EVERY + jitter(PROBE_JITTER)).await;
        if *waiting.borrow() == 0 {
            continue;
        }
        let asked = tokio::time::timeout(PROBE_TIMEOUT, nodeproof_kube::client::ready(&client));
        match asked.await {
            // The client heard it too when it is a reloading one; said here for any client.
            Ok(Ok(())) => resume.answered.heard(),
            Ok(Err(e)) => {
                tracing::debug!(
                    error = &e as &dyn std::error::Error,
                    "the API server is not back yet"
                )
            }
            Err(_) => tracing::debug!("the API server is not back yet: /readyz timed out"),
        }
    }
}

/// Up to `max`, uniformly at random (std's per-instance random hash keys:
/// no generator to seed or share).
fn jitter(max: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    max.mul_f64((bits >> 11) as f64 / (1u64 << 53) as f64)
}

/// What a list, an added/modified and a deleted object of one kind become.
struct Changes<K> {
    reset: fn(Vec<K>) -> Change,
    upsert: fn(K) -> Change,
    gone: fn(K) -> Change,
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeproof_findings::ConditionStatus;
    use nodeproof_seccomp::lint::LintOptions;

    #[test]
    fn retries_back_off_to_half_a_minute() {
        // Each delay is its step (0.8 s doubling, at most 30 s) plus up to as much again.
        let delays: Vec<Duration> = DefaultBackoff::default().take(9).collect();
        let steps = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0];
        for (d, step) in delays.iter().zip(steps) {
            let d = d.as_secs_f64();
            assert!(d >= step - 1e-3 && d <= 2.0 * step + 1e-3, "{delays:?}");
        }
    }

    /// A watcher's state with lint reports of its own.
    fn fresh_state(node: NodeContext) -> PodsState {
        PodsState::new(node, Default::default())
    }

    fn class(name: &str) -> RuntimeClass {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "handler": "runc"}))
            .unwrap()
    }

    fn said(c: Change) -> String {
        let names = |cs: Vec<RuntimeClass>| {
            cs.iter()
                .map(|c| c.name_any())
                .collect::<Vec<_>>()
                .join(",")
        };
        match c {
            Change::Classes(cs) => format!("listed {}", names(cs)),
            Change::Class(c) => format!("applied {}", c.name_any()),
            Change::ClassGone(c) => format!("deleted {}", c.name_any()),
            other => format!("{other:?}"),
        }
    }

    /// A backoff that waits nothing and notes what it was asked.
    #[derive(Default)]
    struct Recorded(Arc<std::sync::Mutex<Vec<&'static str>>>);

    impl Iterator for Recorded {
        type Item = Duration;
        fn next(&mut self) -> Option<Duration> {
            self.0.lock().unwrap().push("wait");
            Some(Duration::ZERO)
        }
    }

    impl Backoff for Recorded {
        fn reset(&mut self) {
            self.0.lock().unwrap().push("reset");
        }
    }

    #[tokio::test]
    async fn a_list_is_handed_on_whole_and_each_error_waited_out() {
        let status = |code| {
            Box::new(kube::core::Status {
                code,
                message: "too old resource version: 3".into(),
                ..Default::default()
            })
        };
        let events = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(class("a"))),
            Ok(Event::InitApply(class("b"))),
            Ok(Event::InitDone),
            Ok(Event::Apply(class("c"))),
            Ok(Event::Delete(class("a"))),
            // The watch fell behind: listed again; the first page arrives, the second fails.
            Err(watcher::Error::WatchError(status(410))),
            Ok(Event::Init),
            Ok(Event::InitApply(class("b"))),
            Err(watcher::Error::InitialListFailed(kube::Error::Api(status(
                500,
            )))),
            Ok(Event::Init),
            Ok(Event::InitApply(class("b"))),
            Ok(Event::InitDone),
        ];
        let (tx, mut rx) = mpsc::channel(16);
        let changes = Changes {
            reset: Change::Classes,
            upsert: Change::Class,
            gone: Change::ClassGone,
        };
        let backoff = Recorded::default();
        let asked = backoff.0.clone();
        forward(
            futures::stream::iter(events),
            "runtimeclasses",
            &tx,
            &changes,
            backoff,
            None,
        )
        .await;
        drop(tx);
        let mut out = Vec::new();
        while let Some(c) = rx.recv().await {
            out.push(said(c));
        }
        // Half a list is never handed on; the relist drops what it no longer has (c, gone meanwhile).
        assert_eq!(
            out,
            ["listed a,b", "applied c", "deleted a", "listed b"],
            "{out:?}"
        );
        // Each error waited; the delay started over when a list completed, not on Init.
        assert_eq!(
            *asked.lock().unwrap(),
            ["reset", "wait", "wait", "reset"],
            "{asked:?}"
        );
    }

    /// A backoff whose every delay is the same.
    struct Fixed(Duration);

    impl Iterator for Fixed {
        type Item = Duration;
        fn next(&mut self) -> Option<Duration> {
            Some(self.0)
        }
    }

    impl Backoff for Fixed {
        fn reset(&mut self) {}
    }

    /// How long `forward` takes from `error` to handing on the list after
    /// it, with a retry delay of 30 s and a success heard after 200 ms.
    async fn resumed_after(error: watcher::Error, server: &str) -> Duration {
        let answered = Answered::of(server);
        let events = vec![
            Err(error),
            Ok(Event::Init),
            Ok(Event::InitApply(class("a"))),
            Ok(Event::InitDone),
        ];
        let (tx, mut rx) = mpsc::channel(4);
        let changes = Changes {
            reset: Change::Classes,
            upsert: Change::Class,
            gone: Change::ClassGone,
        };
        let heard = answered.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            heard.heard();
        });
        let start = Instant::now();
        let watching = forward(
            futures::stream::iter(events),
            "runtimeclasses",
            &tx,
            &changes,
            Fixed(Duration::from_secs(30)),
            Some(Resume::new(answered)),
        );
        // Cut at 5 s: the whole delay would be 30.
        let _ = tokio::time::timeout(Duration::from_secs(5), watching).await;
        match rx.try_recv() {
            Ok(c) => {
                assert_eq!(said(c), "listed a");
                start.elapsed()
            }
            Err(_) => Duration::MAX,
        }
    }

    #[tokio::test]
    async fn a_retry_the_server_did_not_answer_resumes_once_it_answers_anyone() {
        // Connection refused: kube's client wraps the transport's error as a service error.
        let refused = kube::Error::Service(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        let t = resumed_after(
            watcher::Error::WatchStartFailed(refused),
            "https://resume-refused.invalid/",
        )
        .await;
        // The success at 200 ms, then at most the jitter.
        assert!(
            t >= Duration::from_millis(200)
                && t <= Duration::from_millis(200) + RESUME_JITTER + Duration::from_millis(500),
            "{t:?}"
        );
    }

    #[tokio::test]
    async fn an_answered_refusal_waits_its_whole_delay() {
        let status = |code| {
            Box::new(kube::core::Status {
                code,
                ..Default::default()
            })
        };
        // 403: the server answered; another client's success says nothing about this request.
        let t = resumed_after(
            watcher::Error::InitialListFailed(kube::Error::Api(status(403))),
            "https://resume-forbidden.invalid/",
        )
        .await;
        assert_eq!(t, Duration::MAX, "resumed after {t:?}");
    }

    #[test]
    fn what_the_server_did_not_answer_is_told_from_its_answers() {
        let api = |code| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        let reset = || {
            kube::Error::Service(Box::new(std::io::Error::from(
                std::io::ErrorKind::ConnectionReset,
            )))
        };
        assert!(unanswered(&watcher::Error::InitialListFailed(reset())));
        assert!(unanswered(&watcher::Error::WatchFailed(
            kube::Error::ReadEvents(std::io::Error::from(std::io::ErrorKind::UnexpectedEof))
        )));
        assert!(unanswered(&watcher::Error::WatchStartFailed(api(503))));
        for code in [401, 403, 404, 410, 429] {
            assert!(
                !unanswered(&watcher::Error::WatchStartFailed(api(code))),
                "{code}"
            );
        }
        assert!(!unanswered(&watcher::Error::NoResourceVersion));
    }

    #[test]
    fn jitter_stays_within_its_bound_and_varies() {
        let draws: Vec<Duration> = (0..64).map(|_| jitter(RESUME_JITTER)).collect();
        assert!(draws.iter().all(|d| *d < RESUME_JITTER), "{draws:?}");
        assert!(draws.windows(2).any(|w| w[0] != w[1]), "{draws:?}");
    }

    #[test]
    fn a_410_is_told_from_other_errors() {
        let status = |code| {
            Box::new(kube::core::Status {
                code,
                ..Default::default()
            })
        };
        let expired = |e| {
            matches!(
                PodsWatchError::new("pods", e),
                PodsWatchError::Expired { .. }
            )
        };
        assert!(expired(watcher::Error::WatchError(status(410))));
        assert!(expired(watcher::Error::InitialListFailed(
            kube::Error::Api(status(410))
        )));
        assert!(!expired(watcher::Error::WatchError(status(500))));
        // A watch refused outright leaves kube's watcher watching from the same
        // version (it lists again only after a 410 ERROR event or a list's 410).
        assert!(!expired(watcher::Error::WatchStartFailed(
            kube::Error::Api(status(410))
        )));
        assert!(!expired(watcher::Error::NoResourceVersion));
    }

    #[test]
    fn nothing_is_judged_before_both_lists_and_findings_are_news_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = fresh_state(NodeContext {
            seccomp_root: dir.path().to_path_buf(),
            labels: Default::default(),
            taints: Vec::new(),
            handlers: None,
            lint: LintOptions::default(),
            gpu: Default::default(),
        });
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ml", "uid": "u"},
            "spec": {"runtimeClassName": "gvisor", "containers": [{"name": "c"}]}
        }))
        .unwrap();
        st.apply(Change::Pods(vec![pod]));
        assert!(!st.synced());
        let rc: RuntimeClass = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gvisor"}, "handler": "runsc"
        }))
        .unwrap();
        st.apply(Change::Classes(vec![rc.clone()]));
        assert!(st.synced());
        let e = st.evaluate();
        assert_eq!(e.condition.status, ConditionStatus::True);
        let t0 = Instant::now();
        st.apply(Change::ClassGone(rc.clone()));
        // Missing for less than the grace: maybe its watch event is just late.
        let e = st.evaluate_at(t0);
        assert_eq!(
            (e.condition.status, e.new.len()),
            (ConditionStatus::True, 0)
        );
        assert_eq!(st.next_due(t0), Some(CLASS_GRACE));
        let e = st.evaluate_at(t0 + CLASS_GRACE);
        assert_eq!(e.new.len(), 1);
        assert_eq!(e.new[0].reason, Reason::RuntimeClassMismatch);
        assert_eq!(e.new[0].message, "RuntimeClass gvisor does not exist");
        // Still broken: the condition stays False, but it is not news.
        let e = st.evaluate_at(t0 + CLASS_GRACE * 2);
        assert_eq!(
            (e.condition.status, e.new.len()),
            (ConditionStatus::False, 0)
        );
        // Back within the grace: never reported.
        st.apply(Change::Class(rc));
        let e = st.evaluate_at(t0 + CLASS_GRACE * 3);
        assert_eq!(e.condition.status, ConditionStatus::True);
        assert_eq!(st.next_due(t0 + CLASS_GRACE * 3), None);
    }

    #[test]
    fn a_restart_with_another_root_lists_again_and_says_nothing_twice() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        std::fs::write(
            a.path().join("there.json"),
            r#"{"defaultAction":"SCMP_ACT_ALLOW"}"#,
        )
        .unwrap();
        let context = |root: &std::path::Path| NodeContext {
            seccomp_root: root.to_path_buf(),
            labels: Default::default(),
            taints: Vec::new(),
            handlers: None,
            lint: LintOptions {
                check_listener: false,
                ..LintOptions::default()
            },
            gpu: Default::default(),
        };
        let pod = |name: &str, file: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "ml", "uid": name},
                "spec": {"containers": [{"name": "c", "securityContext": {"seccompProfile":
                    {"type": "Localhost", "localhostProfile": file}}}]}
            }))
            .unwrap()
        };
        let pods = || vec![pod("gone", "nope.json"), pod("moved", "there.json")];
        let mut st = PodsState::new(context(a.path()), Default::default());
        st.apply(Change::Pods(pods()));
        st.apply(Change::Classes(Vec::new()));
        let e = st.evaluate();
        assert_eq!(e.new.len(), 1);
        assert_eq!(e.new[0].pod, "gone");
        st.restart(context(b.path()));
        assert!(!st.synced(), "judged before the new lists");
        st.apply(Change::Pods(pods()));
        st.apply(Change::Classes(Vec::new()));
        // nope.json is missing from both roots: not news; there.json only from B: news.
        let e = st.evaluate();
        assert_eq!(e.failing_pods, 2);
        let new: Vec<_> = e.new.iter().map(|f| f.pod.as_str()).collect();
        assert_eq!(new, ["moved"]);
    }

    fn node(labels: serde_json::Value, taints: serde_json::Value, heartbeat: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": labels, "resourceVersion": heartbeat},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": "True",
                "lastHeartbeatTime": heartbeat}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_gpu_condition_status_asks_for_a_judgement_its_heartbeat_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = fresh_state(NodeContext {
            seccomp_root: dir.path().to_path_buf(),
            labels: Default::default(),
            taints: Vec::new(),
            handlers: None,
            lint: LintOptions::default(),
            gpu: Default::default(),
        });
        let gpu = |status: &str, heartbeat: &str| -> Node {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "n1"},
                "status": {"conditions": [
                    {"type": "GPUHealthy", "status": status, "lastHeartbeatTime": heartbeat},
                    {"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}]}
            }))
            .unwrap()
        };
        assert!(st.apply(Change::Node(gpu("True", "2026-11-29T20:00:00Z"))));
        assert_eq!(
            st.node.gpu,
            [(
                nodeproof_findings::ConditionType::GPUHealthy,
                ConditionStatus::True
            )]
            .into()
        );
        assert!(!st.apply(Change::Node(gpu("True", "2026-11-29T20:00:10Z"))));
        assert!(st.apply(Change::Node(gpu("False", "2026-11-29T20:00:20Z"))));
    }

    #[test]
    fn only_labels_and_taints_of_the_node_ask_for_a_judgement() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = fresh_state(NodeContext {
            seccomp_root: dir.path().to_path_buf(),
            labels: [("gpu".to_string(), "true".to_string())].into(),
            taints: Vec::new(),
            handlers: None,
            lint: LintOptions::default(),
            gpu: Default::default(),
        });
        let gpu = serde_json::json!({"gpu": "true"});
        // The same labels and taints as read at start: nothing to judge again.
        assert!(!st.apply(Change::Nodes(vec![node(
            gpu.clone(),
            serde_json::json!([]),
            "2026-11-29T20:00:00Z"
        )])));
        // Heartbeats and other status updates.
        assert!(!st.apply(Change::Node(node(
            gpu.clone(),
            serde_json::json!([]),
            "2026-11-29T20:00:10Z"
        ))));
        let taint =
            serde_json::json!([{"key": "dedicated", "value": "infer", "effect": "NoExecute"}]);
        assert!(st.apply(Change::Node(node(
            gpu.clone(),
            taint.clone(),
            "2026-11-29T20:00:20Z"
        ))));
        assert_eq!(st.node.taints[0].effect, "NoExecute");
        assert!(st.apply(Change::Node(node(
            serde_json::json!({}),
            taint.clone(),
            "2026-11-29T20:00:20Z"
        ))));
        assert!(st.node.labels.is_empty());
        // Gone, or not registered: the last labels and taints stay.
        assert!(!st.apply(Change::NodeGone(node(
            gpu,
            serde_json::json!([]),
            "2026-11-29T20:00:30Z"
        ))));
        assert!(!st.apply(Change::Nodes(Vec::new())));
        assert_eq!(st.node.taints.len(), 1);
        // Pod and class changes always ask.
        assert!(st.apply(Change::Classes(Vec::new())));
    }
}
