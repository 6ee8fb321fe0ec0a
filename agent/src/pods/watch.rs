//! Watches the pods bound to this node (field selector `spec.nodeName`, which
//! the Node authorizer allows a node identity), the RuntimeClasses and this
//! Node itself (`metadata.name`: its labels and taints decide whether a
//! RuntimeClass runs here), has `state` judge their seccomp references on
//! every change that matters and on a recheck tick (a profile file fixed on
//! disk makes no API event), and hands the condition and new findings to the
//! report loop.
//!
//! Each kind is followed by kube-runtime's `watcher` through the API
//! server edge (`nodeproof_apiclient::watch`): it lists in pages, asks for
//! bookmarks, resumes a watch from the last resourceVersion it saw and lists
//! again when the API server answers 410 Gone; what a change means is
//! judged here.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc;

use super::denials::DenialAggregator;
use super::gpu_faults::GpuFaultAggregator;
use super::state::{
    denial_event, finding_event, gpu_fault_event, Change, LintGeneration, PodsState, Round,
};
use super::CHECK_NAME;
use nodeproof_apiclient::client::Answered;
use nodeproof_apiclient::watch::{follow, probe, Changes, Resume, Watch};
use nodeproof_apiclient::Client;
use nodeproof_gpu::faults::PodFault;
use nodeproof_report::driver::ReportLoop;
use nodeproof_report::events::PodEvent;
use nodeproof_report::reporter::Reporter;
use nodeproof_trace::SummaryRow;

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
                    nodeproof_check = CHECK_NAME,
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
    /// The daemon's lints of the seccomp root, by generation: a new one
    /// means the files may have changed, judge now; each round says the
    /// latest seen ([`Round::lint_generation`]).
    pub lints: Option<tokio::sync::watch::Receiver<LintGeneration>>,
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
            lints: None,
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
        tx.send_replace(Some(crate::judge::gpu::nvidia_allocatable(n)));
    }
    state.apply(c)
}

/// A new lint generation; pending forever without lints (or once they end).
async fn linted(lints: Option<&mut tokio::sync::watch::Receiver<LintGeneration>>) {
    if let Some(rx) = lints {
        if rx.changed().await.is_ok() {
            return;
        }
    }
    std::future::pending().await
}

/// Runs until `stop` turns true: watches, judges, and reports each round
/// through `lp` (`nodeproof pods`).
pub async fn run<R: Reporter>(
    lp: &mut ReportLoop<R>,
    client: Client,
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
/// every change that matters, every `recheck` and every new lint, and sends
/// each round. The feed and `state` outlive it: a watcher started again
/// (after a reload) goes on from what was already said.
pub async fn rounds(
    client: Client,
    state: &mut PodsState,
    opts: &WatchOptions,
    mut stop: tokio::sync::watch::Receiver<bool>,
    node: &str,
    mut denials: Option<&mut DenialFeed>,
    out: mpsc::Sender<Round>,
) {
    let (tx, mut rx) = mpsc::channel(256);
    let resume = opts.answered.clone().map(Resume::new);
    // Aborted however this ends, including when the caller drops it to start over.
    let mut tasks = vec![
        tokio::spawn(follow(
            Watch::pods_on(&client, node),
            tx.clone(),
            Changes {
                reset: Change::Pods,
                upsert: Change::Pod,
                gone: Change::PodGone,
            },
            resume.clone(),
        )),
        tokio::spawn(follow(
            Watch::runtime_classes(&client),
            tx.clone(),
            Changes {
                reset: Change::Classes,
                upsert: Change::Class,
                gone: Change::ClassGone,
            },
            resume.clone(),
        )),
        // The Node authorizer lets a node list and watch its own Node this way only.
        tokio::spawn(follow(
            Watch::node(&client, node),
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
    let mut lints = opts.lints.clone();
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
            _ = linted(lints.as_mut()) => {}
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
        // Read before judging: the lint cache holds this generation's reports.
        let lint_generation = lints
            .as_mut()
            .map_or(LintGeneration::default(), |rx| *rx.borrow_and_update());
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
            lint_generation,
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;

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
}
