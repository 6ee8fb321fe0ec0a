//! Watches the pods bound to this node (field selector `spec.nodeName`, which
//! the Node authorizer allows a node identity), the RuntimeClasses and this
//! Node itself (`metadata.name`: its labels and taints decide whether a
//! RuntimeClass runs here), has `state` judge their seccomp references on
//! every change that matters and on a recheck tick (a profile file fixed on
//! disk makes no API event), and hands the condition and new findings to the
//! report loop.
//!
//! Each kind is followed by kube-runtime's `watcher`: it lists in pages,
//! asks for bookmarks, resumes a watch from the last resourceVersion it saw
//! and lists again when the API server answers 410 Gone; only the delay
//! between retries is chosen here (see [`forward`]).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::Stream;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::Api;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, watcher, DefaultBackoff, Event};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, Notify};
use tracing::Instrument;

use super::denials::DenialAggregator;
use super::gpu_faults::GpuFaultAggregator;
use super::state::{denial_event, finding_event, gpu_fault_event, Change, PodsState, Round};
use crate::checks::Subsystem;
use nodeproof_apiclient::client::Answered;
use nodeproof_gpu::faults::PodFault;
use nodeproof_report::driver::ReportLoop;
use nodeproof_report::events::PodEvent;
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
        lp.record_pod_event(now, &e);
    }
    n
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
    pub node_gpus: Option<Arc<tokio::sync::watch::Sender<nodeproof_gpu::views::NodeGpus>>>,
    /// The DRA claims of the pods running here, whenever they change, for
    /// the DRA reader (`pods::dra`).
    pub pod_claims: Option<tokio::sync::watch::Sender<Vec<nodeproof_apiclient::dra::PodClaims>>>,
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

/// One change from the watches into the state, the Node's also to those
/// who follow it (the reporter, the GPU probe): whether a judgement is due.
/// Every change goes through here, whichever way the loop took it: a Node
/// list drained after another wake-up (a batch of denial rows, say) once
/// skipped the reporter, which then waited out its whole start spread on a
/// new Node while denials flooded in.
fn take(state: &mut PodsState, opts: &WatchOptions, c: Change) -> bool {
    let seen = match &c {
        Change::Node(n) => Some(n),
        Change::Nodes(listed) => listed.first(),
        _ => None,
    };
    if let (Some(tx), Some(n)) = (&opts.node_seen, seen) {
        // Never blocks the watch: a full channel already holds a Node to look at.
        let _ = tx.try_send(nodeproof_apiclient::client::node_state(n));
    }
    if let (Some(tx), Some(n)) = (&opts.node_gpus, seen) {
        tx.send_replace(Some(crate::checks::gpu::nvidia_allocatable(n)));
    }
    state.apply(c)
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
                lp.record_pod_event(round.at, &e);
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
                Some(c) => judge = take(state, opts, c),
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
            judge |= take(state, opts, c);
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
        let mut denials_after_change = None;
        let mut gpu_fault_totals = None;
        if let Some(feed) = denials.as_deref_mut() {
            // Rows are resolved against the pods as now known, after this round's changes.
            for rows in feed.pending.drain(..) {
                feed.aggregator.observe(&rows, &state.index);
            }
            events.extend(feed.aggregator.due(now).into_iter().map(denial_event));
            denial_totals = Some(feed.aggregator.totals());
            denials_after_change = Some(feed.aggregator.after_change());
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
            denials_after_change,
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
                    Some(r) => {
                        if r.wait(delay).await {
                            // The server is back: a failure now is a new
                            // one, retried after 0.8 s, not after the delay
                            // the outage grew (a restarted API server can
                            // refuse the first lists while it starts).
                            backoff.reset();
                        }
                    }
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
/// do not list at the same instant. With the probe's period (2–3 s) the
/// fleet's relists spread over about 7 s, and a pod created when the server
/// returns is still judged within 10 s. The simulated fleet of 5,000 agents
/// (`fleet_resume` in the tests below) peaks at 5,342 requests in a second
/// against 20,000 at once in step (7,204 with 1 s of jitter).
const RESUME_JITTER: Duration = Duration::from_secs(4);
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
    /// [`RESUME_JITTER`] more (never past `delay`): true when it was heard.
    async fn wait(&mut self, delay: Duration) -> bool {
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
            _ = tokio::time::sleep_until(deadline) => return false,
            _ = self.answered.next() => {}
        }
        drop(waiting);
        let jittered = tokio::time::Instant::now() + jitter(RESUME_JITTER);
        tokio::time::sleep_until(jittered.min(deadline)).await;
        tracing::debug!("the API server answered again; the watch resumes");
        true
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
        let asked =
            tokio::time::timeout(PROBE_TIMEOUT, nodeproof_apiclient::client::ready(&client));
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
    use kube::ResourceExt;

    /// The Node reaches the reporter whichever way the loop takes it: the
    /// select's branch and the drain after another wake-up both call `take`.
    #[test]
    fn every_node_change_taken_goes_to_the_reporter() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = PodsState::new(
            crate::pods::verdict::NodeContext {
                seccomp_root: dir.path().to_path_buf(),
                labels: Default::default(),
                taints: Vec::new(),
                handlers: None,
                lint: Default::default(),
                gpu: Default::default(),
            },
            crate::pods::verdict::Judge::new(
                Default::default(),
                crate::observe::profiles::read_reference,
            ),
        );
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        let opts = WatchOptions {
            node_seen: Some(tx),
            ..WatchOptions::default()
        };
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "uid": "u1"}, "status": {"conditions": []}
        }))
        .unwrap();
        take(&mut state, &opts, Change::Nodes(vec![node.clone()]));
        take(&mut state, &opts, Change::Node(node));
        for _ in 0..2 {
            let seen = rx.try_recv().expect("the Node sent to the reporter");
            assert_eq!(seen.uid.as_deref(), Some("u1"));
            assert!(seen.conditions.is_empty());
        }
        // Other changes are not the Node's.
        take(&mut state, &opts, Change::Classes(Vec::new()));
        assert!(rx.try_recv().is_err());
    }

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

    /// The fleet's return after an outage, simulated from the constants the
    /// watches and the reporter use: 5,000 agents probing `/readyz` every
    /// 2–3 s (each at its own phase) hear the API server back within one
    /// probe period; each of an agent's three watches then relists within
    /// the resume jitter, and its reporter retries a failed write within the
    /// daemon's 3 s (`RESUME_WITHIN`), each at its own draw. The most
    /// requests in one second, and when the last relist goes out.
    fn fleet_resume(resume_jitter: Duration) -> (usize, Duration) {
        const AGENTS: usize = 5_000;
        const REPORTER_WITHIN: Duration = Duration::from_secs(3);
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut uniform = || {
            // xorshift64*: a deterministic draw in [0, 1).
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
        };
        // Milliseconds after the API server answers again.
        let mut requests: Vec<u64> = Vec::new();
        let mut last_relist = Duration::ZERO;
        for _ in 0..AGENTS {
            let period = PROBE_EVERY + PROBE_JITTER.mul_f64(uniform());
            let heard = period.mul_f64(uniform());
            for _watch in 0..3 {
                let at = heard + resume_jitter.mul_f64(uniform());
                last_relist = last_relist.max(at);
                requests.push(at.as_millis() as u64);
            }
            requests.push((heard + REPORTER_WITHIN.mul_f64(uniform())).as_millis() as u64);
        }
        requests.sort_unstable();
        let mut peak = 0;
        let mut lo = 0;
        for hi in 0..requests.len() {
            while requests[hi] - requests[lo] >= 1000 {
                lo += 1;
            }
            peak = peak.max(hi - lo + 1);
        }
        (peak, last_relist)
    }

    #[test]
    fn fleet_resume_spreads_5000_agents_relists() {
        let in_step = 5_000 * 4;
        for j in [1, 2, 3, 4, 5] {
            let (peak, last) = fleet_resume(Duration::from_secs(j));
            eprintln!(
                "FIGURE fleet resume, 5000 agents, resume jitter {j} s: peak {peak} requests/s (in step: {in_step} at once), last relist {} ms after the server answered",
                last.as_millis()
            );
        }
        let (peak, last) = fleet_resume(RESUME_JITTER);
        // Under 30 % of the in-step burst in any second (1 s of jitter, the
        // setting before: 36 %).
        assert!(peak * 10 <= in_step * 3, "peak {peak}/s");
        // Every watch relisted within a probe period and the jitter, so that
        // with a list, a judgement and a write a new pod is named within 10 s.
        assert!(last <= PROBE_EVERY + PROBE_JITTER + RESUME_JITTER);
        assert!(PROBE_EVERY + PROBE_JITTER + RESUME_JITTER <= Duration::from_secs(7));
    }
}
