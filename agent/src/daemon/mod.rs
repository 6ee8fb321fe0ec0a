//! `nodeproof run`: the agent systemd supervises. One task per subsystem
//! (profiles, tracing, GPU, reporter, HTTP) on a single-threaded runtime;
//! blocking work (lint, eBPF polling, NVML) on threads of its own.
//!
//! - `bus`: every flow between the tasks, made once, each task given its ends;
//! - `notify`: the systemd edge (`sd_notify`), behind the `Notifier` trait;
//! - `state`: what each subsystem last found, read by the main loop and HTTP;
//! - `http`: `/healthz`, `/healthz/<check>`, `/readyz`, `/metrics`;
//! - `metrics`: the state as OpenMetrics text (prometheus-client);
//! - `watch`: inotify on the seccomp root;
//! - `errors`: `error_chain`, an error and its causes on one line;
//! - `subsystems`: the tasks, reusing the library's checks as `nodeproof check` does;
//! - `record`: the `[record]` section's pods recorded and written under the state directory.
//!
//! The main loop owns the notifications: READY=1 after every check finished
//! its first round, STATUS= when the summary changes, WATCHDOG=1 once per
//! iteration, so a hung main loop (or a stopped process) stops the pings
//! and systemd restarts the agent. A stuck subsystem shows in
//! `/healthz/<check>` instead: restarting everything for one slow GPU probe
//! would lose the other subsystems' state.

pub mod bus;
pub mod http;
pub mod logs;
pub mod metrics;
pub mod notify;
pub mod pods;
pub mod record;
pub mod runner;
pub mod state;
pub mod subsystem;
pub mod subsystems;
pub mod versions;
pub mod watch;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use subsystem::Subsystem;

use tokio::signal::unix::{signal, SignalKind};

use crate::config::{Config, ConfigError};
use bus::{MainEnds, Publisher};
use notify::{Notifier, NotifyError, NotifyState};

pub use nodeproof_findings::errors::error_chain;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot load the configuration")]
    Config(#[source] ConfigError),
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    #[error("cannot serve the health endpoints")]
    Http(#[source] http::HttpError),
    #[error("cannot install the {signal} handler")]
    Signal {
        signal: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot tell systemd the agent is ready")]
    Ready(#[source] NotifyError),
}

/// What the command line chose.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--config`; `None`: /etc/nodeproof/config.toml when present, else the built-in default.
    pub config_path: Option<PathBuf>,
    /// `--seccomp-root`, which wins over `seccomp.root` across reloads.
    pub seccomp_root: Option<PathBuf>,
}

/// The checks READY=1 waits for: every one the node alone answers (the
/// pods and the reporter never hold it back: the API server may be down
/// while the node is fine).
fn first_cycle() -> Vec<Subsystem> {
    let mut first = vec![Subsystem::Profiles, Subsystem::Tracing, Subsystem::Gpu];
    first.extend(subsystem::Scheduled::all().map(Subsystem::Scheduled));
    first
}

/// How often the main loop goes round at least: the watchdog gets a ping
/// per round, so this is at most half the watchdog period.
fn main_period(watchdog: Option<Duration>) -> Duration {
    watchdog.map_or(Duration::from_secs(1), |w| {
        (w / 2).min(Duration::from_secs(1))
    })
}

/// Runs until SIGTERM or SIGINT. The config is loaded before anything
/// starts, so a bad one fails fast (the CLI exits 64).
pub fn run(opts: &Options, notifier: Box<dyn Notifier>) -> Result<(), DaemonError> {
    let config = Config::load(opts.config_path.as_deref()).map_err(DaemonError::Config)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    runtime.block_on(serve(opts.clone(), config, notifier))
}

/// Subsystems started.
struct Running {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn signal_stream(
    kind: SignalKind,
    name: &'static str,
) -> Result<tokio::signal::unix::Signal, DaemonError> {
    signal(kind).map_err(|source| DaemonError::Signal {
        signal: name,
        source,
    })
}

/// How long the reporter waits for the tracer's first load to end.
const TRACER_SETTLE_WAIT: Duration = Duration::from_secs(10);

async fn serve(
    opts: Options,
    config: Config,
    notifier: Box<dyn Notifier>,
) -> Result<(), DaemonError> {
    let started = Instant::now();
    // Read once, at start: a restart keeps the versions a container's
    // denials are judged against (a reload does not move the file).
    let mut versions = bus::Versions {
        file: versions::state_file(&config),
        ..Default::default()
    };
    match &versions.file {
        Some(file) => versions.kept = Arc::new(std::sync::Mutex::new(versions::load(file))),
        None => tracing::info!(
            nodeproof_check = Subsystem::Profiles.as_str(),
            "no state directory (daemon.state-dir, $STATE_DIRECTORY): profile versions are kept in memory only"
        ),
    }
    let wired = bus::wire(
        Arc::new(config.clone()),
        opts.seccomp_root.clone(),
        versions,
    );
    let MainEnds {
        board: shared,
        config: config_publisher,
        stop: stop_publisher,
        http_stop,
        mut tracer_settled,
        mut round_done,
        pods: pods_phase,
        rounds: rounds_tx,
    } = wired.main;
    let mut hup = signal_stream(SignalKind::hangup(), "SIGHUP")?;
    let mut term = signal_stream(SignalKind::terminate(), "SIGTERM")?;
    let mut int = signal_stream(SignalKind::interrupt(), "SIGINT")?;
    let listener = http::bind(config.daemon.listen)
        .await
        .map_err(DaemonError::Http)?;
    let http_task = tokio::spawn(http::serve(
        listener,
        wired.http.board,
        http::Limits::default(),
        wired.http.stop.into_receiver(),
    ));
    tracing::info!(listen = %config.daemon.listen, "health endpoints up");

    let stop_on_exit = StopOnExit(stop_publisher);
    let first_cycle = first_cycle();
    let mut running = Running {
        tasks: subsystems::spawn_checks(wired.profiles, wired.tracer, wired.gpu, wired.runner),
    };
    // The API client (TLS, the first lists) starts once the tracer's load
    // has parsed and freed the kernel's BTF, not beside it: the two at once
    // made the agent's memory peak (agent_memory bench). The load takes
    // 0.1-0.5 s; a tracer that never settles holds nothing up past 10 s.
    let _ = tokio::time::timeout(
        TRACER_SETTLE_WAIT,
        tracer_settled.wait_for(|settled| *settled),
    )
    .await;
    let reporter = subsystems::start_reporter(&config, wired.reporter, &shared).await;
    if reporter.is_some() {
        running.tasks.extend(pods::start(&config, wired.pods).await);
    }
    running.tasks.extend(record::start(&config, wired.record));

    let watchdog = notify::watchdog_from_env();
    let period = main_period(watchdog);
    let mut ready = false;
    let mut last_status = String::new();
    let mut last_extend = started;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = round_done_or_never(&mut round_done) => {}
            _ = hup.recv() => {
                reload(&opts, &config_publisher, &shared, &*notifier, ready);
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
        let now = Instant::now();
        shared.main_progress(now, SystemTime::now(), period);
        let status = shared.status_line();
        if status != last_status {
            send(
                &*notifier,
                &[NotifyState::Status(&notify::status_line(&status))],
            );
            last_status = status;
        }
        if !ready {
            if shared.first_cycle_done(&first_cycle) {
                ready = true;
                shared.set_ready(true);
                notifier
                    .notify(&[
                        NotifyState::Ready,
                        NotifyState::Status(&notify::status_line(&last_status)),
                    ])
                    .map_err(DaemonError::Ready)?;
                tracing::info!(
                    ready_ms = started.elapsed().as_millis() as u64,
                    first_rounds = %shared.first_rounds_since(started),
                    status = %last_status,
                    "first check cycle done; ready"
                );
                // The start's code and freed heap leave the resident set
                // (crate::memory says why and what was measured).
                let released = crate::memory::release_start_memory();
                tracing::info!(
                    paged_out_kib = released.paged_out / 1024,
                    heap_trimmed = released.heap_trimmed,
                    error = released.error.as_deref().unwrap_or(""),
                    "start memory released"
                );
            } else if now.duration_since(last_extend) >= Duration::from_secs(1) {
                // A slow first cycle (NVML timing out, a huge seccomp root)
                // is not a hang: ask for more start time, a little at a time.
                send(&*notifier, &[NotifyState::ExtendTimeoutUsec(10_000_000)]);
                last_extend = now;
            }
        }
        // Never waits: the reporter drains between its writes. Full means
        // it is stuck; the checks go on, and what it could not take waits in
        // `shared` (its Events kept, the oldest conditions given up first).
        let mut waiting = Vec::new();
        // A lint's round waits here for the pods' judgement of it while
        // the pods are judged (daemon/state.rs, `RoundQueue`).
        let pods = *pods_phase.latest();
        for round in shared.take_rounds(pods) {
            // Closed (not reporting): nothing waits for these.
            if let Err(tokio::sync::mpsc::error::TrySendError::Full(round)) =
                rounds_tx.try_send(round)
            {
                waiting.push(round);
            }
        }
        if !waiting.is_empty() {
            tracing::warn!(
                nodeproof_check = Subsystem::Reporter.as_str(),
                rounds = waiting.len(),
                "reporter is behind; check rounds wait for it"
            );
            shared.requeue(waiting);
        }
        if watchdog.is_some() {
            send(&*notifier, &[NotifyState::Watchdog]);
        }
    }

    tracing::info!("stopping");
    send(&*notifier, &[NotifyState::Stopping]);
    shared.set_stopping();
    stop(&stop_on_exit.0, &mut running).await;
    drop(rounds_tx);
    if let Some(reporter) = reporter {
        subsystems::final_report(reporter, shared.conditions()).await;
    }
    // Served until here, so probes saw /readyz turn 503 while stopping;
    // responses in flight get the server's grace, then it closes the rest.
    http_stop.publish(true);
    if let Err(e) = http_task.await {
        tracing::error!(error = %e, "the HTTP server task failed");
    }
    tracing::info!("stopped");
    Ok(())
}

/// Publishes stop however `serve` ends (an error such as a failed
/// READY=1, a panic): the runtime's drop waits for the blocking subsystems,
/// which would otherwise poll on forever and hang the exit.
struct StopOnExit(Publisher<bool>);

impl Drop for StopOnExit {
    fn drop(&mut self) {
        self.0.publish(true);
    }
}

/// A completed round; never, once no subsystem is left to complete one.
async fn round_done_or_never(round_done: &mut bus::Follower<bus::RoundsDone>) {
    if !round_done.changed().await {
        std::future::pending::<()>().await;
    }
}

/// Tells the subsystems to stop and waits for them (the tracer detaches its
/// eBPF programs on the way out), at most a few seconds.
async fn stop(stop: &Publisher<bool>, running: &mut Running) {
    stop.publish(true);
    let all = futures_join(std::mem::take(&mut running.tasks));
    if tokio::time::timeout(Duration::from_secs(5), all)
        .await
        .is_err()
    {
        tracing::warn!("subsystems did not stop within 5 s");
    }
}

async fn futures_join(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for t in tasks {
        let _ = t.await;
    }
}

/// SIGHUP: re-read the config; a bad one is logged and the old one kept.
/// Subsystems pick the new one up on their next round and keep their state
/// (GPU policy windows, profile verdicts, the eBPF programs).
fn reload(
    opts: &Options,
    config_publisher: &Publisher<Arc<Config>>,
    shared: &state::Shared,
    notifier: &dyn Notifier,
    ready: bool,
) {
    // Before the first READY=1 a reload must not announce readiness.
    if ready {
        // sd_notify(3): MONOTONIC_USEC= goes with RELOADING=1, so systemd can
        // match the READY=1 that ends this reload (Type=notify-reload
        // requires it; this unit's Type=notify accepts it).
        match NotifyState::monotonic_usec_now() {
            Ok(now) => send(notifier, &[NotifyState::Reloading, now]),
            Err(_) => send(notifier, &[NotifyState::Reloading]),
        }
    }
    match Config::load(opts.config_path.as_deref()) {
        Ok(config) => {
            if config.daemon.listen != config_publisher.latest().daemon.listen {
                tracing::warn!(listen = %config.daemon.listen, "daemon.listen changes only on restart");
            }
            config_publisher.publish(Arc::new(config));
            shared.metrics(|m| m.reloads += 1);
            tracing::info!("configuration reloaded");
        }
        Err(e) => {
            tracing::error!(error = %crate::daemon::error_chain(&e), "reload refused; keeping the running configuration");
        }
    }
    if ready {
        send(notifier, &[NotifyState::Ready]);
    }
}

/// Best-effort notifications: losing a STATUS= must not stop the agent.
/// (READY=1 is the exception, handled by the caller.)
fn send(notifier: &dyn Notifier, states: &[NotifyState<'_>]) {
    if let Err(e) = notifier.notify(states) {
        tracing::debug!(error = %error_chain(&e), "notification not sent");
    }
}

/// Seconds since the epoch, for seeding.
fn now_seed() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn main_period_is_half_the_watchdog_at_most_a_second() {
        assert_eq!(main_period(None), Duration::from_secs(1));
        assert_eq!(
            main_period(Some(Duration::from_secs(30))),
            Duration::from_secs(1)
        );
        assert_eq!(
            main_period(Some(Duration::from_millis(600))),
            Duration::from_millis(300)
        );
    }
}
