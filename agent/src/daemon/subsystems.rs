//! The subsystem tasks. Each reuses the library's check exactly as
//! `nodeproof check` does and publishes its conditions, its part of the
//! STATUS= line and its progress in [`Shared`]. A subsystem that cannot
//! start (no eBPF permission, no NVML, no API server) publishes a False or
//! Unknown condition with the reason and keeps going; a panicking one is
//! restarted by [`supervise`] and counted.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, watch as channel};
use tokio::task::JoinHandle;

use super::bus::{Follower, GpuEnds, ProfilesEnds, ReporterEnds, RunnerEnds, TracerEnds};
use super::state::{CheckState, Shared, Stamp};
use super::subsystem::{Scheduled, Subsystem};
use crate::config::Config;
use crate::judge::{self, profiles};
use crate::observe;
use crate::observe::lint_cache;
use crate::pods::state::LintGeneration;
use nodeproof_apiclient::client::KubeReporter;
use nodeproof_apiclient::ConnectError;
use nodeproof_findings::{Check, Condition, Reason, Status};
use nodeproof_gpu as gpu;
use nodeproof_podresources::KubeletPodResources;
use nodeproof_report::conditions::Policy;
use nodeproof_report::config::ReportConfig;
use nodeproof_report::driver::{self, LoopConfig, PodsNews, ReportLoop};
use nodeproof_seccomp::lint::ProfileReport;
use nodeproof_trace::{self as trace, EventSource};

/// Starts the profiles task, the tracer, the GPU probe and the check
/// runner, each with its ends.
pub fn spawn_checks(
    profiles_ends: ProfilesEnds,
    tracer_ends: TracerEnds,
    gpu_ends: GpuEnds,
    runner_ends: RunnerEnds,
) -> Vec<JoinHandle<()>> {
    let (board, stop) = (profiles_ends.board.clone(), profiles_ends.stop.clone());
    let profiles = tokio::spawn(supervise(Subsystem::Profiles, board, stop, move || {
        tokio::spawn(profiles(profiles_ends.clone()))
    }));
    let (board, stop) = (tracer_ends.board.clone(), tracer_ends.stop.clone());
    let tracing_task = tokio::spawn(supervise(Subsystem::Tracing, board, stop, move || {
        let ends = tracer_ends.clone();
        tokio::task::spawn_blocking(move || tracer(&ends))
    }));
    let (board, stop) = (gpu_ends.board.clone(), gpu_ends.stop.clone());
    let gpu_task = tokio::spawn(supervise(Subsystem::Gpu, board, stop, move || {
        let ends = gpu_ends.clone();
        tokio::task::spawn_blocking(move || gpu_probe(&ends))
    }));
    let (board, stop) = (runner_ends.board.clone(), runner_ends.stop.clone());
    // One runner for every scheduled check: a panic restarts them all, and
    // is counted against the first (the runner has no name of its own).
    let runner = Scheduled::all().next().map(|first| {
        tokio::spawn(supervise(
            Subsystem::Scheduled(first),
            board,
            stop,
            move || tokio::spawn(super::runner::run(runner_ends.clone())),
        ))
    });
    [profiles, tracing_task, gpu_task]
        .into_iter()
        .chain(runner)
        .collect()
}

/// Runs what `start` spawns until it returns; after a panic, counts it,
/// logs it and starts it again (after a second, so a task that panics at
/// once does not spin).
pub async fn supervise<F, Fut>(
    name: Subsystem,
    shared: Arc<Shared>,
    stop: Follower<bool>,
    mut start: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), tokio::task::JoinError>>,
{
    loop {
        match start().await {
            Err(e) if e.is_panic() && !*stop.latest() => {
                let restarts = shared.metrics(|m| {
                    let n = m.task_restarts.entry(name).or_default();
                    *n += 1;
                    *n
                });
                tracing::error!(
                    nodeproof_check = name.as_str(),
                    restarts,
                    "subsystem panicked; restarting it"
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            _ => return,
        }
    }
}

/// Lint the seccomp root at start, within a second of a change (inotify),
/// on reload and every `profile-resync-s`.
async fn profiles(ends: ProfilesEnds) {
    let ProfilesEnds {
        board,
        config: mut config_rx,
        seccomp_root,
        mut stop,
        lint_cache,
        versions,
        linted,
        round_done,
    } = ends;
    let (wake_tx, mut wake_rx) = mpsc::channel(4);
    let mut watched: Option<(PathBuf, super::watch::Watcher)> = None;
    let mut verdicts: HashMap<String, &'static str> = HashMap::new();
    loop {
        let config = config_rx.take().clone();
        let root = seccomp_root
            .clone()
            .unwrap_or_else(|| config.seccomp.root.clone());
        if watched.as_ref().map(|(r, _)| r) != Some(&root) {
            watched = None;
            match super::watch::watch(&root, wake_tx.clone()) {
                Ok(w) => watched = Some((root.clone(), w)),
                Err(e) => tracing::warn!(
                    nodeproof_check = Subsystem::Profiles.as_str(),
                    error = %super::error_chain(&e),
                    "profile changes are seen at the next resync only"
                ),
            }
        }
        let opts = observe::profiles::lint_options(&config.seccomp);
        let lint_root = root.clone();
        let lints = lint_cache.clone();
        // Files linted already in this mode with these contents are not
        // linted again; the pods' judge finds what is linted here.
        let versions = versions.clone();
        let lint = move || {
            observe::profiles::lint_root_cached_with(&lint_root, &opts, &lints, |files| {
                record_versions(
                    &versions.kept,
                    versions.file.as_deref(),
                    &lint_root,
                    files,
                    &opts,
                )
            })
        };
        let reports = match tokio::task::spawn_blocking(lint).await {
            Ok(r) => r,
            // The supervisor counts it and starts the task again.
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => return,
        };
        // Numbered from the last published, so a restarted task goes on.
        let generation = linted.latest().next();
        // Queued before the generation is published: the pods' round judged
        // against it always finds the files' round it completes.
        publish_profiles(&board, &root, &reports, &mut verdicts, &config, generation);
        board.metrics(|m| m.profile_lints = lint_cache::lints_made());
        linted.publish(generation);
        round_done.one_more();
        let resync = Duration::from_secs(config.daemon.profile_resync_s);
        tokio::select! {
            _ = wake_rx.recv() => tracing::debug!("seccomp root changed"),
            _ = config_rx.changed() => {}
            _ = tokio::time::sleep(resync) => {}
            _ = stop.changed() => return,
        }
    }
}

/// The root's files, as this pass read them, into the profiles' versions:
/// each edit logged, and the versions written to the state file when any
/// changed.
fn record_versions(
    versions: &std::sync::Mutex<crate::judge::versions::ProfileVersions>,
    file: Option<&Path>,
    root: &Path,
    files: &[nodeproof_seccomp::scan::ProfileFile],
    opts: &nodeproof_seccomp::lint::LintOptions,
) {
    let mut v = versions.lock().unwrap_or_else(|p| p.into_inner());
    let before = v.len();
    let changes = super::versions::observe_files(&mut v, root, files, opts, SystemTime::now());
    for c in &changes {
        match &c.previous {
            Some(p) => {
                tracing::info!(nodeproof_check = Subsystem::Profiles.as_str(), seccomp_profile = %c.path, profile_version = %c.current.sha256, previous_version = %p.sha256, "profile changed: containers started from now on get the new version")
            }
            None => {
                tracing::debug!(nodeproof_check = Subsystem::Profiles.as_str(), seccomp_profile = %c.path, profile_version = %c.current.sha256, "profile version recorded")
            }
        }
    }
    if changes.is_empty() && v.len() == before {
        return;
    }
    if let Some(file) = file {
        if let Err(e) = super::versions::save(file, &v) {
            tracing::warn!(nodeproof_check = Subsystem::Profiles.as_str(), error = %super::error_chain(&e), "profile versions not kept for the next start");
        }
    }
}

fn publish_profiles(
    shared: &Shared,
    root: &Path,
    reports: &[ProfileReport],
    verdicts: &mut HashMap<String, &'static str>,
    config: &Config,
    generation: LintGeneration,
) {
    let mut by_outcome = std::collections::BTreeMap::new();
    let mut failing = 0;
    for r in reports {
        let outcome = r.outcome.as_str();
        *by_outcome.entry(outcome).or_insert(0u64) += 1;
        let ok = profiles::passes(r, false);
        failing += usize::from(!ok);
        // Logged on change only: a resync of an unchanged root is silent.
        if verdicts.insert(r.path.clone(), outcome) != Some(outcome) {
            let first = r
                .diagnostics
                .first()
                .map_or(String::new(), |d| format!("{}: {}", d.code, d.message));
            if !r.is_profile() {
                tracing::info!(nodeproof_check = Subsystem::Profiles.as_str(), seccomp_profile = %r.path, outcome, diagnostic = %first, "not a profile");
            } else if ok {
                tracing::info!(nodeproof_check = Subsystem::Profiles.as_str(), seccomp_profile = %r.path, outcome, "profile ok");
            } else {
                tracing::warn!(nodeproof_check = Subsystem::Profiles.as_str(), seccomp_profile = %r.path, outcome, diagnostic = %first, "profile fails");
            }
        }
    }
    verdicts.retain(|p, _| reports.iter().any(|r| &r.path == p));
    // A file that is no profile is said in its own log line, not counted.
    let judged = reports.iter().filter(|r| r.is_profile()).count();
    let summary = if failing == 0 {
        format!("profiles {judged} ok")
    } else {
        format!("profiles {} ok, {failing} failing", judged - failing)
    };
    shared.metrics(|m| {
        m.set_findings(&[Check::SECCOMP_PROFILE], &profiles::findings(reports));
        m.profile_verdicts = by_outcome;
        m.profile_revalidations += 1;
    });
    shared.set_round(
        Subsystem::Profiles,
        CheckState {
            conditions: profiles::round(root, reports).conditions,
            summary,
            progress: Some(Instant::now()),
            period: Duration::from_secs(config.daemon.profile_resync_s),
        },
        Vec::new(),
        Stamp::Files(generation),
    );
}

/// How often the tracer's counters are read into the metrics.
const TRACE_COUNTS_EVERY: Duration = Duration::from_secs(5);
const TRACE_POLL: Duration = Duration::from_millis(200);

/// Loads the eBPF programs once and streams denials into the journal until
/// stopped; dropping the tracer detaches them.
fn tracer(ends: &TracerEnds) {
    let started = trace::Tracer::start(&trace::TracerConfig::default());
    let readiness = trace::Readiness::of(started.as_ref());
    // Loading parses the kernel's BTF (tens of MiB at the peak, freed by
    // now); glibc keeps freed memory in this thread's arena unless asked to
    // give it back, which would double the agent's steady RSS.
    // SAFETY: malloc_trim only releases free heap pages.
    unsafe { libc::malloc_trim(0) };
    ends.settled.publish(true);
    ends.board.metrics(|m| {
        m.set_findings(
            &[Check::SECCOMP_TRACING],
            &[judge::tracing::finding(&readiness)],
        )
    });
    let publish = |summary: String| {
        ends.board.set_check(
            Subsystem::Tracing,
            CheckState {
                conditions: judge::tracing::round(&readiness).conditions,
                summary,
                progress: Some(Instant::now()),
                period: Duration::from_secs(1),
            },
        );
    };
    let tracer = match started {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(nodeproof_check = Subsystem::Tracing.as_str(), reason = readiness.reason.as_str(), error = %super::error_chain(&e), "seccomp tracing unavailable; the other checks go on");
            publish(format!("tracing off ({})", readiness.reason));
            ends.round_done.one_more();
            // Alive, just without eBPF: keep the check's progress fresh.
            while !*ends.stop.latest() {
                std::thread::sleep(TRACE_POLL);
                publish(format!("tracing off ({})", readiness.reason));
            }
            return;
        }
    };
    let strategy = tracer.strategy();
    tracing::info!(nodeproof_check = Subsystem::Tracing.as_str(), strategy = %strategy, "seccomp tracing attached");
    ends.board.metrics(|m| m.ebpf_strategy = Some(strategy));
    publish(format!("tracing {strategy}"));
    ends.round_done.one_more();
    let mut pump = trace::Pump::new(
        tracer,
        trace::CgroupResolver::host(),
        trace::Filter::default(),
    );
    // Exited processes' counts leave the kernel's bounded map (see
    // nodeproof_trace::retire); which pids are gone can only be told in the
    // host's PID namespace (a DaemonSet without hostPID is not).
    if trace::in_host_pid_namespace() {
        pump = pump.retire_exited(trace::process_exited);
    } else {
        tracing::warn!(nodeproof_check = Subsystem::Tracing.as_str(), "not in the host PID namespace: counts of exited processes stay in the kernel's map, which fills after 16384 process/syscall keys");
    }
    let mut last_counts = Instant::now();
    while !*ends.stop.latest() {
        let polled = pump.poll(TRACE_POLL, &trace::NoPodLookup, &mut |s| {
            let (d, a) = (s.denial, s.attribution);
            tracing::warn!(
                nodeproof_check = Subsystem::Tracing.as_str(),
                seccomp_syscall = %s.syscall,
                seccomp_action = d.action.as_str(),
                errno = d.errno,
                pid = d.pid,
                comm = %d.comm,
                k8s_pod = %pod_label(a),
                container_id = a.container_id.as_deref().unwrap_or(""),
                "seccomp denied a syscall"
            );
        });
        if let Err(e) = polled {
            tracing::warn!(nodeproof_check = Subsystem::Tracing.as_str(), error = %super::error_chain(&e), "reading denial samples failed");
            std::thread::sleep(TRACE_POLL);
        }
        if last_counts.elapsed() >= TRACE_COUNTS_EVERY {
            last_counts = Instant::now();
            read_counts(&mut pump, ends);
        }
        publish(format!("tracing {strategy}"));
    }
    drop(pump);
    tracing::info!(
        nodeproof_check = Subsystem::Tracing.as_str(),
        "eBPF programs detached"
    );
}

fn pod_label(a: &trace::Attribution) -> String {
    match (&a.pod, &a.pod_uid) {
        (Some(p), _) => format!("{}/{}", p.namespace, p.name),
        (None, Some(uid)) => uid.clone(),
        (None, None) => String::new(),
    }
}

fn read_counts(pump: &mut trace::Pump<trace::Tracer>, ends: &TracerEnds) {
    // Pod names are resolved by the pods watcher, against the pods it watches.
    let (rows, stats) = match pump.rows(&trace::NoPodLookup) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(nodeproof_check = Subsystem::Tracing.as_str(), error = %super::error_chain(&e), "reading eBPF counters failed");
            return;
        }
    };
    ends.pod_rows.publish(rows.clone());
    let mut denials = std::collections::BTreeMap::new();
    for r in rows {
        let pod = match (&r.pod, &r.pod_uid) {
            (Some(p), _) => format!("{}/{}", p.namespace, p.name),
            (None, Some(uid)) => uid.clone(),
            (None, None) => String::new(),
        };
        let outcome = r.kind().as_str();
        *denials.entry((r.syscall, pod, outcome)).or_insert(0) += r.count;
    }
    ends.board.metrics(|m| {
        m.denials = denials;
        m.ebpf_dropped = stats.dropped();
    });
}

/// The settings a GPU probe is built from: a reload that changes any of
/// them rebuilds the probe.
#[derive(PartialEq)]
struct ProbeKey {
    nvml_library: PathBuf,
    nvml_timeout_ms: u64,
    release_between_cycles: bool,
    cuda: Option<(String, u64, u64, u64)>,
}

impl ProbeKey {
    fn of(c: &gpu::GpuConfig) -> ProbeKey {
        ProbeKey {
            nvml_library: PathBuf::from(&c.nvml_library),
            nvml_timeout_ms: c.nvml_timeout_ms,
            release_between_cycles: c.release_between_cycles,
            cuda: c.cuda.enabled.then(|| {
                (
                    c.cuda.library.clone(),
                    c.cuda.timeout_ms,
                    c.cuda.interval_s,
                    c.cuda.buffer_bytes,
                )
            }),
        }
    }
}

/// GPU probe cycles; the policy state (XID windows, hysteresis) survives
/// reloads, the NVML probe and the pod-resources client are rebuilt only
/// when their settings change. Each cycle compares what the kubelet offers
/// with NVML and hands faults on allocated devices to the pods watcher.
fn gpu_probe(ends: &GpuEnds) {
    let mut state = gpu::PolicyState::default();
    let mut tracker = gpu::faults::FaultTracker::default();
    let mut probe: Option<(ProbeKey, gpu::nvml::NvmlProbe)> = None;
    let mut kubelet: Option<((PathBuf, u64), KubeletPodResources)> = None;
    // The last pod-resources failure said, so an absent socket is logged once.
    let mut kubelet_said: Option<String> = None;
    let node = nodeproof_report::credentials::node_name_here(
        ends.config.latest().report.node_name.as_deref(),
    )
    .unwrap_or_default();
    let mut failed: HashMap<String, Reason> = HashMap::new();
    // The unhealthy set the reporter has (sent again when it changes).
    let mut devices_sent: Option<nodeproof_report::device_health::UnhealthyDevices> = None;
    while !*ends.stop.latest() {
        let config = ends.config.latest().clone();
        let key = ProbeKey::of(&config.gpu);
        if probe.as_ref().map(|(k, _)| k) != Some(&key) {
            probe = Some((key, observe::gpu::probe(&config.gpu)));
        }
        let Some((_, p)) = probe.as_mut() else { return };
        let mut report = gpu::cycle(&config.gpu, p, &mut state);
        let faults = match &report.snapshot {
            Some(s) if s.driver == gpu::probe::DriverState::Ready => tracker.observe(s),
            _ => Vec::new(),
        };
        // Each XID the driver raised since the last cycle, once: `journalctl XID=79`.
        for x in report.snapshot.iter().flat_map(|s| &s.xids) {
            tracing::warn!(
                nodeproof_check = Subsystem::Gpu.as_str(),
                xid = x.xid,
                gpu_uuid = x.uuid.as_deref().unwrap_or(""),
                gpu_index = x.gpu,
                xid_class = config.gpu.class_of(x.xid).as_str(),
                "GPU XID event"
            );
        }
        // This cycle's usage alone: a cycle that read nothing clears the last one's.
        let mut usage = Vec::new();
        // DRA is read for the GPU probe only on a node with NVIDIA devices.
        ends.dra_wanted.publish_if_changed(!report.no_gpu());
        if !report.no_gpu() {
            let key = (
                config.gpu.pod_resources_socket.clone(),
                config.gpu.pod_resources_timeout_ms,
            );
            if kubelet.as_ref().map(|(k, _)| k) != Some(&key) {
                kubelet = None;
            }
            let read = match &mut kubelet {
                Some((_, c)) => observe::gpu::read_kubelet(c),
                None => observe::gpu::pod_resources(&config.gpu).and_then(|mut c| {
                    let read = observe::gpu::read_kubelet(&mut c);
                    kubelet = Some((key, c));
                    read
                }),
            };
            let said = read.as_ref().err().map(|e| super::error_chain(e));
            if said != kubelet_said {
                match &said {
                    Some(e) => {
                        tracing::warn!(nodeproof_check = Subsystem::Gpu.as_str(), socket = %config.gpu.pod_resources_socket.display(), error = %e, "the kubelet's pod-resources cannot be read; GPUs are compared with NVML alone")
                    }
                    None => {
                        tracing::info!(nodeproof_check = Subsystem::Gpu.as_str(), socket = %config.gpu.pod_resources_socket.display(), "reading the kubelet's pod-resources")
                    }
                }
                kubelet_said = said;
            }
            let node_allocatable = ends.node_gpus.latest().clone();
            let dra = ends.dra.latest().clone();
            judge::gpu::compare(&mut report, &read, node_allocatable, &dra);
            let view = dra.view();
            // One attribution for faults and usage: pod-resources and DRA.
            let allocations = judge::gpu::allocations(read.as_ref().ok(), view);
            usage = judge::gpu::usage(
                report.snapshot.as_ref(),
                &allocations,
                ends.board.metrics(|m| m.running_pods.clone()).as_ref(),
            );
            if !faults.is_empty() {
                let on_pods = gpu::faults::attribute(&faults, &allocations, |_, _| true);
                // No receiver: no pods watcher (no API credentials); nothing to write to.
                if !on_pods.is_empty() && !ends.gpu_faults.send(on_pods) {
                    tracing::debug!(
                        nodeproof_check = Subsystem::Gpu.as_str(),
                        "GPU faults on pods not reported: pods are not watched"
                    );
                }
            }
        }
        for f in judge::gpu::findings(&report) {
            let was = failed.get(&f.subject).copied();
            if f.status != Status::Ok && was != Some(f.reason) {
                tracing::warn!(nodeproof_check = Subsystem::Gpu.as_str(), gpu_uuid = %f.subject, reason = %f.reason, "{}", f.message);
                failed.insert(f.subject.clone(), f.reason);
            } else if f.status == Status::Ok && was.is_some() {
                tracing::info!(nodeproof_check = Subsystem::Gpu.as_str(), gpu_uuid = %f.subject, "GPU check passes again");
                failed.remove(&f.subject);
            }
        }
        let summary = if report.no_gpu() {
            "no GPU".to_string()
        } else {
            let total = report.evaluation.gpus.len();
            let healthy = report.evaluation.gpus.iter().filter(|g| g.healthy).count();
            format!("{healthy}/{total} GPUs healthy")
        };
        // The GPUs judged unhealthy, for the Node's annotation, with this
        // round when the set changed.
        let devices = judge::gpu::unhealthy_devices(&report);
        let mut news = Vec::new();
        if devices_sent.as_ref() != Some(&devices) {
            news.push(PodsNews::UnhealthyDevices(devices.clone()));
            devices_sent = Some(devices);
        }
        let mut metrics = report.metrics(&state);
        metrics.node.clone_from(&node);
        ends.board.metrics(|m| {
            m.set_findings(
                crate::checks::NodeCheck::findings(&crate::checks::gpu::Gpu),
                &judge::gpu::findings(&report),
            );
            m.gpu = Some(metrics);
            m.gpu_usage = usage;
        });
        let interval = Duration::from_secs(config.daemon.gpu_interval_s);
        ends.board.set_check_with_news(
            Subsystem::Gpu,
            CheckState {
                conditions: judge::gpu::round(&report).conditions,
                summary,
                progress: Some(Instant::now()),
                period: interval,
            },
            news,
        );
        ends.round_done.one_more();
        let until = Instant::now() + interval;
        while Instant::now() < until && !*ends.stop.latest() {
            std::thread::sleep(Duration::from_millis(100).min(until - Instant::now()));
        }
    }
}

/// After the API server is heard again (a watch's list, a probe), a write
/// waiting out a failure's backoff goes within this, at the agent's own draw:
/// 5,000 agents that hear the server within the same probe period spread
/// their retries over it (docs/reporting.md, the fleet simulation).
const RESUME_WITHIN: Duration = Duration::from_secs(3);

/// The running reporter: its task hands the loop back when the rounds end.
pub struct Reporter {
    task: JoinHandle<ReportLoop<KubeReporter>>,
}

fn reporter_state(summary: &str) -> CheckState {
    CheckState {
        conditions: Vec::new(),
        summary: summary.to_string(),
        progress: Some(Instant::now()),
        // Not a loop of its own when not reporting: never stale.
        period: Duration::from_secs(u64::from(u32::MAX)),
    }
}

/// Connects (locally: reads credentials, contacts nothing) and starts the
/// continuous reporter. Without credentials or a node name the agent runs
/// on, unreported, and says so in STATUS= and the journal.
pub async fn start_reporter(
    config: &Config,
    ends: ReporterEnds,
    shared: &Arc<Shared>,
) -> Option<Reporter> {
    let ReporterEnds {
        config: reloads,
        rounds,
        nodes,
    } = ends;
    let c = match nodeproof_apiclient::connect(&config.report).await {
        Ok(c) => c,
        Err(ConnectError::NoNodeName) => {
            tracing::warn!(
                nodeproof_check = Subsystem::Reporter.as_str(),
                "no node name (report.node-name, NODE_NAME, hostname); not reporting"
            );
            shared.set_check(
                Subsystem::Reporter,
                reporter_state("not reporting (no node name)"),
            );
            return None;
        }
        Err(e @ ConnectError::NodeNameMismatch { .. }) => {
            tracing::error!(nodeproof_check = Subsystem::Reporter.as_str(), error = %e, "the credential is another node's; conditions are not reported");
            shared.set_check(
                Subsystem::Reporter,
                reporter_state("not reporting (the credential is another node's)"),
            );
            return None;
        }
        Err(e) => {
            tracing::error!(nodeproof_check = Subsystem::Reporter.as_str(), error = %super::error_chain(&e), "unusable credentials; conditions are not reported");
            shared.set_check(
                Subsystem::Reporter,
                reporter_state("not reporting (bad credentials)"),
            );
            return None;
        }
    };
    let node = c.node;
    if let Some(answered) = &c.answered {
        shared.set_reach(
            answered.reach(),
            Duration::from_secs(config.daemon.readiness_unreachable_s),
        );
    }
    let Some(client) = c.client else {
        tracing::warn!(nodeproof_check = Subsystem::Reporter.as_str(), k8s_node = %node, "no credentials; conditions are not reported");
        shared.set_check(
            Subsystem::Reporter,
            reporter_state("not reporting (no credentials)"),
        );
        return None;
    };
    let mut reporter = KubeReporter::new(client, &node);
    if let Some(t) = c.taint_client {
        reporter = reporter.with_taint_client(t);
    }
    let marks = c.marks;
    let lp = ReportLoop::new(
        reporter,
        LoopConfig {
            marks,
            policy: config.report.policy(),
            // Fleet-safe load: rate limit, heartbeat jitter, start spread.
            load: config.report.load(),
            ..LoopConfig::default()
        },
        super::now_seed(),
    );
    tracing::info!(nodeproof_check = Subsystem::Reporter.as_str(), k8s_node = %node, credentials = %c.credentials, "reporting to the API server");
    shared.set_check(Subsystem::Reporter, reporter_state("reporting to API"));
    let counter = shared.clone();
    let drops = shared.clone();
    Some(Reporter {
        task: tokio::spawn(driver::run(
            lp,
            rounds,
            Some(nodes),
            Some(follow_report_policy(
                config.report.clone(),
                reloads.into_receiver(),
            )),
            c.answered.as_ref().map(|a| driver::Resume {
                heard: a.receiver(),
                within: RESUME_WITHIN,
                seed: super::now_seed(),
            }),
            move |_| counter.metrics(|m| m.reporter_errors += 1),
            move |d| {
                drops.metrics(|m| *m.reporter_dropped.entry((d.kind, d.reason)).or_default() += 1)
            },
        )),
    })
}

/// SIGTERM: one last status write when the API server answers within 5 s.
/// The reporter's policy as reloads change it. Credentials, node name,
/// labels and taints stay as the reporter started with (its client and its
/// reading of the Node were made from them): said once per reload.
fn follow_report_policy(
    started: ReportConfig,
    mut reloads: channel::Receiver<Arc<Config>>,
) -> channel::Receiver<Policy> {
    let (tx, rx) = channel::channel(started.policy());
    tokio::spawn(async move {
        while reloads.changed().await.is_ok() {
            let report = reloads.borrow_and_update().report.clone();
            let needs_restart = report.node_name != started.node_name
                || report.kubeconfig != started.kubeconfig
                || report.host_root != started.host_root
                || report.labels != started.labels
                || report.runtimeclass_labels != started.runtimeclass_labels
                || report.taint_kubeconfig != started.taint_kubeconfig;
            if needs_restart {
                tracing::warn!(
                    nodeproof_check = Subsystem::Reporter.as_str(),
                    "report.node-name, kubeconfig, host-root, labels, runtimeclass-labels and taint-kubeconfig change only on restart"
                );
            }
            let policy = report.policy();
            tx.send_if_modified(|p| {
                let changed = *p != policy;
                *p = policy;
                changed
            });
        }
    });
    rx
}

pub async fn final_report(reporter: Reporter, conditions: Vec<Condition>) {
    let Ok(mut lp) = reporter.task.await else {
        tracing::error!(
            nodeproof_check = Subsystem::Reporter.as_str(),
            "reporter task failed; no final status write"
        );
        return;
    };
    lp.observe(SystemTime::now(), &conditions);
    let now = SystemTime::now();
    match tokio::time::timeout(Duration::from_secs(5), lp.flush(now)).await {
        Ok(Ok(())) if lp.settled(now) => {
            tracing::info!(nodeproof_check = Subsystem::Reporter.as_str(), "final status written")
        }
        // Still inside its start window, a retry's backoff or the rate limit.
        Ok(Ok(())) => tracing::warn!(
            nodeproof_check = Subsystem::Reporter.as_str(),
            "final status not written: the reporter was waiting (start spread, backoff or rate limit)"
        ),
        Ok(Err(e)) => {
            tracing::warn!(nodeproof_check = Subsystem::Reporter.as_str(), error = %super::error_chain(&e), "final status write failed")
        }
        Err(_) => tracing::warn!(
            nodeproof_check = Subsystem::Reporter.as_str(),
            "API server did not answer within 5 s; no final status write"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_task_is_restarted_and_counted() {
        let shared = Arc::new(Shared::default());
        let runs = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let r = runs.clone();
        tokio::time::pause();
        let (_stop, not_stopped) = super::super::bus::latest(false);
        supervise(Subsystem::Gpu, shared.clone(), not_stopped, move || {
            let r = r.clone();
            tokio::spawn(async move {
                if r.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 2 {
                    panic!("probe blew up");
                }
            })
        })
        .await;
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert_eq!(
            shared.metrics(|m| m.task_restarts.get(&Subsystem::Gpu).copied()),
            Some(2)
        );
    }
}
