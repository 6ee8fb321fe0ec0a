//! The daemon's flows between its tasks. [`wire`] makes each flow once (for
//! `serve()`) and hands each task only the ends it uses, in a struct of its
//! own ([`ProfilesEnds`], [`PodsEnds`], ...): a [`Publisher`] or a
//! [`Follower`] of a latest-value flow, a [`NewsPublisher`] or a
//! [`NewsFollower`] of a news flow, or one end of a queue (tokio's `mpsc`
//! sender or receiver). An end says which way it goes: a follower cannot
//! publish, a publisher holds no receiver. Who publishes each flow and who
//! follows it is drawn as a table in docs/architecture.md.
//!
//! Besides the flows, the tasks share three handles, which are state, not
//! flows: the [`Shared`] board (each check's latest state, the metrics and
//! the queue of rounds for the reporter, read by the main loop and HTTP),
//! the lint cache and the profiles' versions.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, mpsc, watch};

use super::state::{PodsPhase, Shared};
use crate::config::Config;
use crate::judge::versions::ProfileVersions;
use crate::observe::lint_cache::LintCache;
use crate::pods::state::LintGeneration;
use nodeproof_gpu::faults::PodFault;
use nodeproof_gpu::views::{NodeDra, NodeGpus};
use nodeproof_report::driver::RoundNews;
use nodeproof_report::reporter::NodeState;
use nodeproof_trace::SummaryRow;

/// The publishing end of a latest-value flow (a `watch` channel): it
/// replaces the value, and every follower sees the newest. A value
/// published before anyone follows, or after every follower is gone, is
/// kept (`send_replace`, not `send`, which drops it without receivers).
pub struct Publisher<T>(Arc<watch::Sender<T>>);

/// Cloned only where a flow has several publishers ([`RoundsDone`]), for
/// a task that `supervise` starts again, and for a guard that publishes
/// when its task ends (`daemon::pods`).
impl<T> Clone for Publisher<T> {
    fn clone(&self) -> Self {
        Publisher(self.0.clone())
    }
}

impl<T> Publisher<T> {
    pub fn publish(&self, value: T) {
        self.0.send_replace(value);
    }

    /// Publishes `value` only when it differs from the latest: followers
    /// are not woken for the same value again.
    pub fn publish_if_changed(&self, value: T)
    where
        T: PartialEq,
    {
        self.0.send_if_modified(|v| {
            let changed = *v != value;
            if changed {
                *v = value;
            }
            changed
        });
    }

    /// What was published last.
    pub fn latest(&self) -> watch::Ref<'_, T> {
        self.0.borrow()
    }

    /// The tokio end, for a library edge that takes one (`pods::dra`,
    /// `pods::watch`).
    pub fn sender(&self) -> Arc<watch::Sender<T>> {
        self.0.clone()
    }
}

/// A following end of a latest-value flow. Each clone is a follower of its
/// own; a clone of one that never looked sees everything published since
/// the flow was made as news, so a task started late (or again, by
/// `supervise`) misses nothing.
pub struct Follower<T>(watch::Receiver<T>);

impl<T> Clone for Follower<T> {
    fn clone(&self) -> Self {
        Follower(self.0.clone())
    }
}

impl<T> Follower<T> {
    /// Waits for a value this follower has not looked at; `false` when
    /// every publisher is gone (tokio's `changed` erring): no news will come.
    pub async fn changed(&mut self) -> bool {
        self.0.changed().await.is_ok()
    }

    /// The latest value, without marking it seen (a reader that polls).
    pub fn latest(&self) -> watch::Ref<'_, T> {
        self.0.borrow()
    }

    /// The latest value, marked seen: `changed` waits for the next one.
    pub fn take(&mut self) -> watch::Ref<'_, T> {
        self.0.borrow_and_update()
    }

    /// Waits until the value satisfies `f`; `false` if every publisher
    /// went first.
    pub async fn wait_for(&mut self, f: impl FnMut(&T) -> bool) -> bool {
        self.0.wait_for(f).await.is_ok()
    }

    /// The next `changed` returns at once (the latest value counts as news).
    pub fn mark_changed(&mut self) {
        self.0.mark_changed();
    }

    /// The tokio end, for a library edge that takes one.
    pub fn into_receiver(self) -> watch::Receiver<T> {
        self.0
    }
}

/// A latest-value flow's two ends, with its first value.
pub fn latest<T>(first: T) -> (Publisher<T>, Follower<T>) {
    let (tx, rx) = watch::channel(first);
    (Publisher(Arc::new(tx)), Follower(rx))
}

/// The publishing end of a news flow (a `broadcast` channel): each item
/// reaches each follower once; one that lags the capacity behind loses the
/// oldest.
pub struct NewsPublisher<T>(broadcast::Sender<T>);

/// For a task that `supervise` starts again.
impl<T> Clone for NewsPublisher<T> {
    fn clone(&self) -> Self {
        NewsPublisher(self.0.clone())
    }
}

impl<T> NewsPublisher<T> {
    /// `false`: nobody follows (no subscription is open), the item is gone.
    pub fn send(&self, item: T) -> bool {
        self.0.send(item).is_ok()
    }
}

/// A news flow's following end: it subscribes (each subscription gets the
/// items sent after it opened) and cannot send.
pub struct NewsFollower<T>(broadcast::Sender<T>);

impl<T> Clone for NewsFollower<T> {
    fn clone(&self) -> Self {
        NewsFollower(self.0.clone())
    }
}

impl<T: Clone> NewsFollower<T> {
    pub fn subscribe(&self) -> broadcast::Receiver<T> {
        self.0.subscribe()
    }
}

/// A news flow's two ends.
pub fn news<T: Clone>(capacity: usize) -> (NewsPublisher<T>, NewsFollower<T>) {
    let tx = broadcast::channel(capacity).0;
    (NewsPublisher(tx.clone()), NewsFollower(tx))
}

/// Completed rounds so far, as a count: each subsystem that completes a
/// round adds one, and the main loop, woken, hands the queue on now rather
/// than at its next tick. Which rounds may go is the queue's to say (by
/// lint generation, [`Shared::take_rounds`]), never the order of wake-ups.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoundsDone(pub u64);

impl Publisher<RoundsDone> {
    pub fn one_more(&self) {
        self.0.send_modify(|n| n.0 += 1);
    }
}

/// The profiles' recent versions (recorded by the profiles task from each
/// edit it reads; the pods watcher's denials look up the version a
/// container started under), and the file they are kept in (`None`: memory
/// only).
#[derive(Clone, Default)]
pub struct Versions {
    pub kept: Arc<Mutex<ProfileVersions>>,
    pub file: Option<PathBuf>,
}

/// The profiles task (`subsystems::profiles`).
#[derive(Clone)]
pub struct ProfilesEnds {
    pub board: Arc<Shared>,
    pub config: Follower<Arc<Config>>,
    /// `--seccomp-root`, which wins over `seccomp.root` across reloads.
    pub seccomp_root: Option<PathBuf>,
    pub stop: Follower<bool>,
    /// Filled with each lint's reports, by (file, mode, contents).
    pub lint_cache: Arc<LintCache>,
    pub versions: Versions,
    /// Each lint of the root, numbered, published after its round is queued.
    pub linted: Publisher<LintGeneration>,
    pub round_done: Publisher<RoundsDone>,
}

/// The tracer thread (`subsystems::tracer`).
#[derive(Clone)]
pub struct TracerEnds {
    pub board: Arc<Shared>,
    pub stop: Follower<bool>,
    /// Its first load ended, loaded or not.
    pub settled: Publisher<bool>,
    /// The cumulative denial rows (each holds every count so far).
    pub pod_rows: Publisher<Vec<SummaryRow>>,
    pub round_done: Publisher<RoundsDone>,
}

/// The GPU probe thread (`subsystems::gpu_probe`).
#[derive(Clone)]
pub struct GpuEnds {
    pub board: Arc<Shared>,
    pub config: Follower<Arc<Config>>,
    pub stop: Follower<bool>,
    /// A node with NVIDIA devices: the pods watcher should read DRA.
    pub dra_wanted: Publisher<bool>,
    pub dra: Follower<NodeDra>,
    pub node_gpus: Follower<NodeGpus>,
    /// Faults on allocated devices, for the pods holding them.
    pub gpu_faults: NewsPublisher<Vec<PodFault>>,
    pub round_done: Publisher<RoundsDone>,
}

/// The pods watcher (`daemon::pods`), when the agent has API credentials.
#[derive(Clone)]
pub struct PodsEnds {
    pub board: Arc<Shared>,
    pub config: Follower<Arc<Config>>,
    pub seccomp_root: Option<PathBuf>,
    pub stop: Follower<bool>,
    /// Read first by the pods' judge: one lint per edit.
    pub lint_cache: Arc<LintCache>,
    pub versions: Arc<Mutex<ProfileVersions>>,
    /// Each new lint generation: judge the pods again, against it.
    pub linted: Follower<LintGeneration>,
    pub pod_rows: Follower<Vec<SummaryRow>>,
    pub gpu_faults: NewsFollower<Vec<PodFault>>,
    pub dra_wanted: Follower<bool>,
    pub dra: Publisher<NodeDra>,
    pub node_gpus: Publisher<NodeGpus>,
    /// The Node as watched, to the reporter.
    pub nodes: mpsc::Sender<NodeState>,
    /// Where the watcher stands: whether a lint's round waits for its judgement.
    pub phase: Publisher<PodsPhase>,
    pub round_done: Publisher<RoundsDone>,
}

/// The `[record]` thread (`daemon::record`).
pub struct RecordEnds {
    pub seccomp_root: Option<PathBuf>,
    pub stop: Follower<bool>,
}

/// The reporter (`subsystems::start_reporter`).
pub struct ReporterEnds {
    /// For its policy, which follows reloads.
    pub config: Follower<Arc<Config>>,
    /// The rounds the main loop hands on, each one message.
    pub rounds: mpsc::Receiver<RoundNews>,
    pub nodes: mpsc::Receiver<NodeState>,
}

/// The HTTP server (`http::serve`).
pub struct HttpEnds {
    pub board: Arc<Shared>,
    /// Stop serving: after the final report, not with the subsystems.
    pub stop: Follower<bool>,
}

/// The check runner (`runner`): the registry's scheduled checks.
#[derive(Clone)]
pub struct RunnerEnds {
    pub board: Arc<Shared>,
    pub config: Follower<Arc<Config>>,
    /// `--seccomp-root`, which wins over `seccomp.root` across reloads.
    pub seccomp_root: Option<PathBuf>,
    pub stop: Follower<bool>,
    /// The round's lints: the files the profiles task linted are not
    /// linted again.
    pub lint_cache: Arc<LintCache>,
    pub round_done: Publisher<RoundsDone>,
}

/// The main loop (`serve()`).
pub struct MainEnds {
    pub board: Arc<Shared>,
    /// A SIGHUP's reload.
    pub config: Publisher<Arc<Config>>,
    pub stop: Publisher<bool>,
    pub http_stop: Publisher<bool>,
    pub tracer_settled: Follower<bool>,
    pub round_done: Follower<RoundsDone>,
    /// Read when the queue is handed on: rounds wait for the pods' judgement
    /// only while the pods are judged.
    pub pods: Follower<PodsPhase>,
    pub rounds: mpsc::Sender<RoundNews>,
}

/// Every task's ends.
pub struct Wired {
    pub main: MainEnds,
    pub http: HttpEnds,
    pub profiles: ProfilesEnds,
    pub tracer: TracerEnds,
    pub gpu: GpuEnds,
    pub runner: RunnerEnds,
    pub pods: PodsEnds,
    pub record: RecordEnds,
    pub reporter: ReporterEnds,
}

/// GPU fault batches the pods watcher may lag behind.
const GPU_FAULT_BATCHES: usize = 64;
/// Nodes seen and not yet taken by the reporter.
const NODES_IN_FLIGHT: usize = 4;
/// Check rounds handed to the reporter and not yet read by it.
const ROUNDS_IN_FLIGHT: usize = 256;

/// Makes every flow of `nodeproof run` once and hands out its ends.
pub fn wire(config: Arc<Config>, seccomp_root: Option<PathBuf>, versions: Versions) -> Wired {
    let board = Arc::new(Shared::default());
    let lint_cache = Arc::new(LintCache::default());
    let (config_tx, config_rx) = latest(config);
    let (stop_tx, stop_rx) = latest(false);
    let (http_stop_tx, http_stop_rx) = latest(false);
    let (round_done_tx, round_done_rx) = latest(RoundsDone::default());
    let (linted_tx, linted_rx) = latest(LintGeneration::default());
    let (phase_tx, phase_rx) = latest(PodsPhase::NotWatched);
    let (settled_tx, settled_rx) = latest(false);
    let (rows_tx, rows_rx) = latest(Vec::new());
    let (faults_tx, faults_rx) = news(GPU_FAULT_BATCHES);
    let (dra_wanted_tx, dra_wanted_rx) = latest(false);
    let (dra_tx, dra_rx) = latest(NodeDra::Unread);
    let (node_gpus_tx, node_gpus_rx) = latest(None);
    let (nodes_tx, nodes_rx) = mpsc::channel(NODES_IN_FLIGHT);
    let (rounds_tx, rounds_rx) = mpsc::channel(ROUNDS_IN_FLIGHT);
    Wired {
        profiles: ProfilesEnds {
            board: board.clone(),
            config: config_rx.clone(),
            seccomp_root: seccomp_root.clone(),
            stop: stop_rx.clone(),
            lint_cache: lint_cache.clone(),
            versions: versions.clone(),
            linted: linted_tx,
            round_done: round_done_tx.clone(),
        },
        tracer: TracerEnds {
            board: board.clone(),
            stop: stop_rx.clone(),
            settled: settled_tx,
            pod_rows: rows_tx,
            round_done: round_done_tx.clone(),
        },
        gpu: GpuEnds {
            board: board.clone(),
            config: config_rx.clone(),
            stop: stop_rx.clone(),
            dra_wanted: dra_wanted_tx,
            dra: dra_rx,
            node_gpus: node_gpus_rx,
            gpu_faults: faults_tx,
            round_done: round_done_tx.clone(),
        },
        runner: RunnerEnds {
            board: board.clone(),
            config: config_rx.clone(),
            seccomp_root: seccomp_root.clone(),
            stop: stop_rx.clone(),
            lint_cache: lint_cache.clone(),
            round_done: round_done_tx.clone(),
        },
        pods: PodsEnds {
            board: board.clone(),
            config: config_rx.clone(),
            seccomp_root: seccomp_root.clone(),
            stop: stop_rx.clone(),
            lint_cache,
            versions: versions.kept,
            linted: linted_rx,
            pod_rows: rows_rx,
            gpu_faults: faults_rx,
            dra_wanted: dra_wanted_rx,
            dra: dra_tx,
            node_gpus: node_gpus_tx,
            nodes: nodes_tx,
            phase: phase_tx,
            round_done: round_done_tx,
        },
        record: RecordEnds {
            seccomp_root,
            stop: stop_rx,
        },
        reporter: ReporterEnds {
            config: config_rx,
            rounds: rounds_rx,
            nodes: nodes_rx,
        },
        http: HttpEnds {
            board: board.clone(),
            stop: http_stop_rx,
        },
        main: MainEnds {
            board,
            config: config_tx,
            stop: stop_tx,
            http_stop: http_stop_tx,
            tracer_settled: settled_rx,
            round_done: round_done_rx,
            pods: phase_rx,
            rounds: rounds_tx,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_late_follower_sees_what_was_published_before_it() {
        let (publisher, follower) = latest(0);
        publisher.publish(7);
        let mut late = follower.clone();
        assert!(late.changed().await);
        assert_eq!(*late.take(), 7);
        assert_eq!(*follower.latest(), 7);
    }

    #[test]
    fn a_value_published_with_nobody_following_is_kept() {
        let (publisher, follower) = latest(false);
        drop(follower);
        publisher.publish(true);
        assert!(*publisher.latest());
    }

    #[tokio::test]
    async fn the_same_value_again_is_no_news() {
        let (publisher, mut follower) = latest(1);
        publisher.publish_if_changed(1);
        assert!(!follower.0.has_changed().unwrap());
        publisher.publish_if_changed(2);
        assert!(follower.changed().await);
        assert_eq!(*follower.take(), 2);
    }

    #[test]
    fn news_reaches_each_subscription_opened_before_it() {
        let (publisher, follower) = news::<u32>(4);
        assert!(!publisher.send(1), "nobody subscribed: the item is gone");
        let mut a = follower.subscribe();
        assert!(publisher.send(2));
        let mut b = follower.clone().subscribe();
        assert!(publisher.send(3));
        assert_eq!((a.try_recv(), a.try_recv()), (Ok(2), Ok(3)));
        assert_eq!(b.try_recv(), Ok(3));
    }
}
