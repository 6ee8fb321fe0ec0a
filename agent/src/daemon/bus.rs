//! The daemon's bus: every flow between its tasks, one field each, made
//! once by `serve()` and handed, whole, to every task. Who publishes on a
//! field and who follows it is written on the field (and drawn as a table
//! in docs/architecture.md); nothing else connects two tasks, except the
//! rounds' path to the reporter, which the main loop owns (completed rounds
//! wait in `shared`'s queue; the main loop hands them on, in order, on the
//! reporter's one channel).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, mpsc, watch, Notify};

use super::state::Shared;
use crate::config::Config;
use crate::judge::versions::ProfileVersions;
use crate::observe::lint_cache::LintCache;
use nodeproof_gpu::faults::PodFault;
use nodeproof_gpu::views::{NodeDra, NodeGpus};
use nodeproof_report::reporter::NodeState;
use nodeproof_trace::SummaryRow;

/// A flow where only the latest value matters (a `watch` channel): its one
/// publisher replaces the value; each follower holds a receiver of its own.
/// A follower that starts late sees what was published before it as news,
/// and a value published before anyone follows is kept, not lost.
pub struct Latest<T> {
    tx: Arc<watch::Sender<T>>,
    /// Never marked seen: what every follower is cloned from.
    rx: watch::Receiver<T>,
}

impl<T> Clone for Latest<T> {
    fn clone(&self) -> Self {
        Latest {
            tx: self.tx.clone(),
            rx: self.rx.clone(),
        }
    }
}

impl<T> Latest<T> {
    pub fn new(first: T) -> Self {
        let (tx, rx) = watch::channel(first);
        Latest {
            tx: Arc::new(tx),
            rx,
        }
    }

    /// The publisher's end (`send_replace`, `send_if_modified`).
    pub fn publisher(&self) -> &Arc<watch::Sender<T>> {
        &self.tx
    }

    /// A follower's own receiver.
    pub fn follow(&self) -> watch::Receiver<T> {
        self.rx.clone()
    }

    /// The latest value, for a reader that polls.
    pub fn latest(&self) -> watch::Ref<'_, T> {
        self.rx.borrow()
    }
}

/// Every flow of `nodeproof run`. Clone it: every field is shared.
#[derive(Clone)]
pub struct Bus {
    /// Each subsystem's latest `CheckState` and metrics, and the queue of
    /// completed rounds with their news: published by every subsystem, read
    /// by the main loop, `/healthz`, `/readyz` and `/metrics` (and by the GPU
    /// probe: the pods watcher's running pods, to attribute usage to).
    pub shared: Arc<Shared>,
    /// The config in force: the main loop publishes a SIGHUP's reload;
    /// every subsystem and the reporter's policy follow it.
    pub config: Latest<Arc<Config>>,
    /// `--seccomp-root`, which wins over `seccomp.root` across reloads.
    pub seccomp_root: Option<PathBuf>,
    /// Stop now: the main loop publishes; async tasks follow it.
    pub stop: Latest<bool>,
    /// The same for blocking threads, checked between polls.
    pub stop_flag: Arc<AtomicBool>,
    /// Any subsystem that completed a round wakes the main loop, which
    /// hands the queue on now, not at its next tick.
    pub round_done: Arc<Notify>,
    /// The profiles check, after each lint of the seccomp root, wakes the
    /// pods watcher: files may have changed, judge the pods again.
    pub profiles_linted: Arc<Notify>,
    /// Set by the pods watcher once it judges (its lists arrived): from
    /// then on a lint's round waits in the queue for the pods' judgement it
    /// woke, and the watcher's round wakes the main loop for both, so one
    /// edit reaches the reporter as one round. Before, the lint's round
    /// wakes the main loop itself.
    pub pods_follow_lints: Arc<AtomicBool>,
    /// The seccomp root's lint reports, by (file, mode, contents): the
    /// profiles check fills it, the pods' judge reads it first, so one edit
    /// is linted once.
    pub lints: Arc<LintCache>,
    /// The profiles' recent versions: the profiles check records each edit
    /// it reads (and keeps them in the state directory); the pods watcher's
    /// denials look up the version a container started under.
    pub versions: Arc<Mutex<ProfileVersions>>,
    /// The file the versions are kept in (`None`: memory only).
    pub versions_file: Option<PathBuf>,
    /// The tracer's first load ended, loaded or not: published by the
    /// tracer; `serve` starts the API client after it (after the BTF parse).
    pub tracer_settled: Latest<bool>,
    /// The tracer's cumulative denial rows (each holds every count so far),
    /// followed by the pods watcher, which attributes them to pods.
    pub pod_rows: Latest<Vec<SummaryRow>>,
    /// GPU faults on allocated devices, from the GPU probe to the pods
    /// watcher, which writes them as Events on the pods holding them.
    /// News, not a latest value: each batch reaches the watcher once (one
    /// that lags 64 batches behind loses the oldest).
    pub gpu_faults: broadcast::Sender<Vec<PodFault>>,
    /// The GPU probe on a node with NVIDIA devices asks the pods watcher to
    /// read DRA.
    pub dra_wanted: Latest<bool>,
    /// This node's DRA view, read by the pods watcher, used by the GPU probe.
    pub dra: Latest<NodeDra>,
    /// The Node's allocatable NVIDIA resources as the pods watcher last saw
    /// them (`None`: not watched), compared by the GPU probe.
    pub node_gpus: Latest<NodeGpus>,
    /// The Node as the pods watcher watches it (labels, taints, conditions
    /// others wrote), to the reporter.
    pub nodes: mpsc::Sender<NodeState>,
}

/// GPU fault batches the pods watcher may lag behind.
const GPU_FAULT_BATCHES: usize = 64;
/// Nodes seen and not yet taken by the reporter.
const NODES_IN_FLIGHT: usize = 4;

impl Bus {
    /// Every flow, and the receiving end of `nodes`, for the reporter.
    pub fn new(
        config: Arc<Config>,
        seccomp_root: Option<PathBuf>,
    ) -> (Bus, mpsc::Receiver<NodeState>) {
        let (nodes, nodes_rx) = mpsc::channel(NODES_IN_FLIGHT);
        let bus = Bus {
            shared: Arc::new(Shared::default()),
            config: Latest::new(config),
            seccomp_root,
            stop: Latest::new(false),
            stop_flag: Arc::new(AtomicBool::new(false)),
            round_done: Arc::new(Notify::new()),
            profiles_linted: Arc::new(Notify::new()),
            pods_follow_lints: Arc::new(AtomicBool::new(false)),
            lints: Arc::new(LintCache::default()),
            versions: Arc::new(Mutex::new(ProfileVersions::default())),
            versions_file: None,
            tracer_settled: Latest::new(false),
            pod_rows: Latest::new(Vec::new()),
            gpu_faults: broadcast::channel(GPU_FAULT_BATCHES).0,
            dra_wanted: Latest::new(false),
            dra: Latest::new(NodeDra::Unread),
            node_gpus: Latest::new(None),
            nodes,
        };
        (bus, nodes_rx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_late_follower_sees_what_was_published_before_it() {
        let flow = Latest::new(0);
        flow.publisher().send_replace(7);
        let mut late = flow.follow();
        late.changed().await.unwrap();
        assert_eq!(*late.borrow_and_update(), 7);
        assert_eq!(*flow.latest(), 7);
    }

    #[test]
    fn a_value_published_before_anyone_follows_is_kept() {
        let flow = Latest::new(false);
        // A bare watch channel without receivers drops what `send` is given.
        assert!(flow.publisher().send(true).is_ok());
        assert!(*flow.follow().borrow());
    }
}
