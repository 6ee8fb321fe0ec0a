//! The pods watcher in the agent. When API credentials are found
//! (as the reporter finds them), the pods bound to this node and the
//! RuntimeClasses are watched and judged: their part of
//! `SeccompProfilesReady` is the `pods` check (folded into the profile
//! files' condition by `state`), their Warning Events and the tracer's
//! denials resolved to them go to the reporter. Without credentials
//! nothing here runs and the agent reports as before.

use super::subsystem::Subsystem;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch as channel};
use tokio::task::JoinHandle;

use super::bus::{Follower, PodsEnds, Publisher};
use super::state::{CheckState, PodsPhase, Shared, Stamp};
use super::subsystems::supervise;
use crate::config::Config;
use crate::observe;
use crate::pods::denials::DenialAggregator;
use crate::pods::gpu_faults::GpuFaultAggregator;
use crate::pods::node::{self as pods_node, PodsOptions, PodsRunError};
use crate::pods::state::{PodsState, Round};
use crate::pods::verdict::Judge;
use crate::pods::watch::{self, DenialFeed, GpuFaultFeed, WatchOptions};
use nodeproof_report::denial_change::{DenialChange, DENIED_REASON};
use nodeproof_report::driver::PodsNews;
use nodeproof_report::events::PodEvent;

/// How often the pods are judged without an API change or a profile lint.
const RECHECK: Duration = Duration::from_secs(10);
/// How long one pod, container and syscall's denials are aggregated into one Event.
const DENIAL_INTERVAL: Duration = Duration::from_secs(60);
/// How long one pod, container, GPU and fault's repeats are aggregated into one Event.
const GPU_FAULT_INTERVAL: Duration = Duration::from_secs(60);
/// Retry delay when the Node cannot be read at start.
const NODE_RETRY: Duration = Duration::from_secs(5);

/// The watcher's settings from the config (`--seccomp-root` wins over
/// `seccomp.root`, as for the profile lint).
fn options(config: &Config, seccomp_root: Option<PathBuf>) -> PodsOptions {
    let root = seccomp_root.unwrap_or_else(|| config.seccomp.root.clone());
    crate::pods::node::PodsOptions::from_config(config, &root)
}

/// A watcher's settings and what they connected to.
#[derive(Clone)]
struct Watched {
    opts: PodsOptions,
    client: nodeproof_apiclient::Client,
    node: String,
    answered: Option<nodeproof_apiclient::client::Answered>,
}

/// Credentials and node name as the reporter finds them (locally: nothing
/// is contacted yet).
async fn connect(opts: PodsOptions) -> Result<Watched, PodsRunError> {
    let (client, node, answered) = pods_node::connect_answered(&opts).await?;
    Ok(Watched {
        opts,
        client,
        node,
        answered,
    })
}

/// Starts the watcher when credentials are found; `None` when the agent
/// runs without them (its ends dropped: the phase stays `NotWatched`).
pub async fn start(config: &Config, ends: PodsEnds) -> Option<JoinHandle<()>> {
    let first = match connect(options(config, ends.seccomp_root.clone())).await {
        Ok(w) => w,
        // The reporter said why nothing is reported; here only what that means for pods.
        Err(e @ (PodsRunError::NoNodeName | PodsRunError::NoCredentials { .. })) => {
            tracing::info!(nodeproof_check = Subsystem::Pods.as_str(), reason = %e, "pods on this node are not watched");
            return None;
        }
        Err(e) => {
            tracing::warn!(nodeproof_check = Subsystem::Pods.as_str(), error = %super::error_chain(&e), "pods on this node are not watched");
            return None;
        }
    };
    ends.board.set_check(
        Subsystem::Pods,
        CheckState {
            conditions: Vec::new(),
            summary: "pods not listed yet".into(),
            progress: None,
            period: RECHECK,
        },
    );
    ends.phase.publish(PodsPhase::Listing);
    tracing::info!(nodeproof_check = Subsystem::Pods.as_str(), k8s_node = %first.node, "watching the pods bound to this node");
    let (board, stop) = (ends.board.clone(), ends.stop.clone());
    Some(tokio::spawn(supervise(
        Subsystem::Pods,
        board,
        stop,
        move || tokio::spawn(watch_pods(ends.clone(), first.clone())),
    )))
}

/// The watcher, started again whenever a reload changes its settings. The
/// pods' state (findings already reported) and the denial aggregator
/// (denials already reported) are kept across restarts.
async fn watch_pods(ends: PodsEnds, first: Watched) {
    // However the watcher ends (stopped, panicked), no lint's round waits
    // for it; started again, it lists first.
    let _not_watched = NotWatchedOnDrop(ends.phase.clone());
    let (rows_tx, rows_rx) = mpsc::channel(1);
    let mut feed = DenialFeed::new(
        rows_rx,
        DenialAggregator::new(DENIAL_INTERVAL).with_versions(ends.versions.clone()),
    );
    feed.gpu = Some(GpuFaultFeed::new(
        ends.gpu_faults.subscribe(),
        GpuFaultAggregator::new(GPU_FAULT_INTERVAL),
    ));
    let (round_tx, mut round_rx) = mpsc::channel(4);
    let mut rows = ends.pod_rows.clone();
    // Forwarding ends only with the watch: without a tracer, or once the
    // watch dropped its feed, it just waits.
    let forward = async move {
        while rows.changed().await {
            let latest = rows.take().clone();
            if rows_tx.send(latest).await.is_err() {
                break;
            }
        }
        std::future::pending::<()>().await
    };
    let publish = async {
        while let Some(round) = round_rx.recv().await {
            publish(&ends.board, round);
            ends.board
                .metrics(|m| m.profile_lints = crate::observe::lint_cache::lints_made());
            // The main loop hands the merged condition, with this round's
            // contract verdicts and Events after it, to the reporter now,
            // not at its next tick.
            ends.round_done.one_more();
        }
    };
    let watching = async {
        // Owned here: publishing ends when the watcher does.
        let round_tx = round_tx;
        let mut config = ends.config.clone();
        // A reload after a panic restart still counts: compare with the settings in use.
        config.mark_changed();
        let mut current = first;
        let mut state: Option<PodsState> = None;
        loop {
            tokio::select! {
                _ = watch_with(&ends, &current, &mut state, &mut feed, round_tx.clone()) => return,
                next = reloaded(&mut config, &ends, &current) => current = next,
            }
        }
    };
    tokio::select! {
        _ = async { tokio::join!(watching, publish) } => {}
        _ = forward => {}
    }
}

/// Publishes `PodsPhase::NotWatched` when the watcher is dropped.
struct NotWatchedOnDrop(Publisher<PodsPhase>);

impl Drop for NotWatchedOnDrop {
    fn drop(&mut self) {
        self.0.publish(PodsPhase::NotWatched);
    }
}

/// Waits for a reload that changes the watcher's settings and connects with
/// them. Settings that cannot be used are logged and the running watcher kept.
async fn reloaded(
    config: &mut Follower<std::sync::Arc<Config>>,
    ends: &PodsEnds,
    current: &Watched,
) -> Watched {
    loop {
        if !config.changed().await {
            // No more reloads (the agent is stopping).
            return std::future::pending().await;
        }
        let opts = options(&config.take(), ends.seccomp_root.clone());
        if opts == current.opts {
            continue;
        }
        let next = match connect(opts).await {
            Ok(next) => next,
            Err(e) => {
                tracing::warn!(nodeproof_check = Subsystem::Pods.as_str(), k8s_node = %current.node, error = %super::error_chain(&e), "the reloaded settings cannot be used for pods; the watcher keeps the ones it runs with");
                continue;
            }
        };
        tracing::info!(
            nodeproof_check = Subsystem::Pods.as_str(),
            k8s_node = %next.node,
            seccomp_root = %next.opts.seccomp_root.display(),
            "settings changed by a reload; watching the pods again with them"
        );
        return next;
    }
}

/// One watcher with `w`'s settings, until the agent stops. Its phase is
/// `Listing` until its first round (its lists are in), `Judging` from then.
async fn watch_with(
    ends: &PodsEnds,
    w: &Watched,
    state: &mut Option<PodsState>,
    feed: &mut DenialFeed,
    rounds: mpsc::Sender<Round>,
) {
    ends.phase.publish_if_changed(PodsPhase::Listing);
    let mut stop = ends.stop.clone();
    let node_ctx = loop {
        match pods_node::node_context(&w.client, &w.node, &w.opts).await {
            Ok(c) => break c,
            Err(e) => {
                tracing::warn!(nodeproof_check = Subsystem::Pods.as_str(), k8s_node = %w.node, error = %super::error_chain(&e), "cannot read the Node; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(NODE_RETRY) => {}
                    _ = stop.changed() => return,
                }
            }
        }
    };
    let state = match state {
        Some(s) => {
            s.restart(node_ctx);
            s
        }
        None => state.insert(PodsState::new(node_ctx, judge(ends))),
    };
    let (claims_tx, claims_rx) = channel::channel(Vec::new());
    let wopts = WatchOptions {
        recheck: RECHECK,
        lints: Some(ends.linted.clone().into_receiver()),
        node_seen: Some(ends.nodes.clone()),
        node_gpus: Some(ends.node_gpus.sender()),
        pod_claims: Some(claims_tx),
        answered: w.answered.clone(),
    };
    let interval = Duration::from_secs(ends.config.latest().daemon.gpu_interval_s);
    // The DRA reader lives as long as this watcher, with its client and node.
    let dra = crate::pods::dra::follow(
        nodeproof_apiclient::dra::DraReader::new(w.client.clone(), &w.node),
        claims_rx,
        ends.dra_wanted.clone().into_receiver(),
        ends.dra.sender(),
        interval,
    );
    // This watcher's rounds, on to `rounds`: the first one says its lists
    // are in, and from then on each lint is judged (`PodsPhase::Judging`).
    // Set here, before the round is passed on, not by whoever publishes it:
    // a round of a watcher a reload replaced must not mark its successor,
    // still listing, as judging.
    let (judged_tx, mut judged) = mpsc::channel::<Round>(1);
    let forward = async {
        while let Some(round) = judged.recv().await {
            ends.phase.publish_if_changed(PodsPhase::Judging);
            if rounds.send(round).await.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        _ = async {
            tokio::join!(
                watch::rounds(
                    w.client.clone(),
                    state,
                    &wopts,
                    ends.stop.clone().into_receiver(),
                    &w.node,
                    Some(feed),
                    judged_tx,
                ),
                forward,
            )
        } => {}
        _ = dra => {}
    }
}

/// The journal's line for a `SeccompDenied` Event: its message, and the
/// change it names as fields (what its annotations say).
fn journal_denial(e: &PodEvent) {
    let pod = format!("{}/{}", e.pod.namespace, e.pod.name);
    match DenialChange::from_annotations(&e.annotations) {
        Some(c) => tracing::warn!(
            nodeproof_check = Subsystem::Pods.as_str(),
            k8s_pod = %pod,
            seccomp_profile = %c.profile,
            seccomp_syscall = %c.syscall,
            profile_version = %c.version,
            previous_version = %c.previous,
            previous_verdict = c.previous_verdict.as_str(),
            "{}",
            e.message
        ),
        None => {
            tracing::warn!(nodeproof_check = Subsystem::Pods.as_str(), k8s_pod = %pod, "{}", e.message)
        }
    }
}

fn publish(shared: &Shared, round: Round) {
    let judged_against = round.lint_generation;
    let summary = if round.failing_pods == 0 {
        format!("pods {} watched", round.pods)
    } else {
        format!(
            "pods {} watched, {} with unusable profiles",
            round.pods, round.failing_pods
        )
    };
    if let Some(totals) = &round.denial_totals {
        shared.metrics(|m| m.pod_denials = Some(totals.clone()));
    }
    if let Some(after) = &round.denials_after_change {
        shared.metrics(|m| m.pod_denials_after_change = Some(after.clone()));
    }
    for e in round.events.iter().filter(|e| e.reason == DENIED_REASON) {
        journal_denial(e);
    }
    if let Some(totals) = &round.gpu_fault_totals {
        shared.metrics(|m| m.gpu_faults = Some(totals.clone()));
    }
    shared.metrics(|m| m.running_pods = Some(round.running_pods.clone()));
    let news = std::iter::once(PodsNews::Contracts(round.contracts))
        .chain(round.events.into_iter().map(PodsNews::Event))
        .collect();
    shared.set_round(
        Subsystem::Pods,
        CheckState {
            conditions: vec![round.condition],
            summary,
            progress: Some(Instant::now()),
            period: RECHECK,
        },
        news,
        Stamp::Pods(judged_against),
    );
}

/// The pods' judge, with the rollout guard when `[record] rollout-guard` is
/// on and there is a state directory to read recordings from.
fn judge(ends: &PodsEnds) -> Judge {
    let config = ends.config.latest();
    let judge = Judge::new(ends.lint_cache.clone(), observe::profiles::read_reference);
    if !config.record.rollout_guard {
        return judge;
    }
    match config.daemon.state_dir() {
        Some(dir) => judge.with_guard(crate::pods::rollout_guard::RolloutGuard::new(
            ends.versions.clone(),
            dir,
            crate::record::kept_recordings,
        )),
        None => {
            tracing::warn!("the rollout guard is off: no state directory to read recordings from (daemon.state-dir, or systemd's StateDirectory=)");
            judge
        }
    }
}
