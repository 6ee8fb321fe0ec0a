//! `nodeproof trace`: every seccomp denial on the node, seen from eBPF, with
//! exact in-kernel counts and pod attribution, without audit or profile changes.
//!
//! Layout: `loader` is the only code that touches the kernel (behind
//! [`EventSource`]); `event` decodes the records; `attribution` maps cgroups
//! to containers and pods (`kubelet_logs` names them without an API server);
//! `summary` aggregates and renders; `names` turns
//! numbers into syscall and errno names; `intended` tells a denial libc
//! falls back from (ENOSYS on `clone3`) from a real one; `record` is the
//! syscall recorder of `nodeproof record`, a program of its own. The C programs live in `bpf/`.

pub mod abi;
pub mod attribution;
pub mod bpf;
pub mod event;
pub mod intended;
pub mod kubelet_logs;
pub mod loader;
pub mod names;
pub mod pump;
pub mod record;
pub mod retire;
pub mod summary;

pub use attribution::{Attribution, CgroupResolver, NoPodLookup, PodLookup, PodRef};
pub use event::{Action, CgroupCreated, CountKey, Denial};
pub use intended::{classify, DenialKind};
pub use kubelet_logs::KubeletLogs;
pub use loader::{FailureReason, ProbeAttempt, Tracer, TracerConfig};
pub use pump::{Pump, Sample};
pub use retire::{in_host_pid_namespace, process_exited};
pub use summary::{Filter, SummaryRow, TraceSummary};

use nodeproof_findings::reason::TracingReason;
use serde::Serialize;
use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use strum::{EnumString, IntoStaticStr};

/// How denials are detected; probed in [`Strategy::ALL`] order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, IntoStaticStr, EnumString)]
#[strum(
    serialize_all = "snake_case",
    parse_err_ty = TraceError,
    parse_err_fn = unknown_strategy
)]
pub enum Strategy {
    /// `fexit/__secure_computing`: only confined tasks pay.
    #[serde(rename = "fexit")]
    Fexit,
    /// `tp_btf/sys_enter` + `tp_btf/sys_exit` pairing with task storage.
    #[serde(rename = "tp_btf")]
    TpBtf,
    /// Classic `raw_syscalls` tracepoints, tid-keyed hash.
    #[serde(rename = "tracepoint")]
    #[strum(to_string = "tracepoint", serialize = "raw_tp")]
    Tracepoint,
}

impl Strategy {
    pub const ALL: [Strategy; 3] = [Strategy::Fexit, Strategy::TpBtf, Strategy::Tracepoint];

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `--strategy`'s error: the name no strategy has.
fn unknown_strategy(name: &str) -> TraceError {
    TraceError::UnknownStrategy {
        name: name.to_string(),
    }
}

/// Output format of `nodeproof trace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    #[default]
    Text,
    /// One JSON object per line: each sample, then the summary.
    Json,
    /// The same objects as YAML documents, each after `---`.
    Yaml,
}

/// What the CLI passes to [`run`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceOptions {
    /// Stop after this long; `None` runs until `stop` is set (SIGINT).
    pub duration: Option<Duration>,
    pub comm: Option<String>,
    pub pid: Option<u32>,
    /// Only denials in this pod (name or UID), namespace, container (name or id prefix).
    pub pod: Option<String>,
    pub namespace: Option<String>,
    pub container: Option<String>,
    pub format: OutputFormat,
    /// Force a strategy instead of probing.
    pub strategy: Option<Strategy>,
    /// Kernel BTF from this file (see [`TracerConfig::btf_path`]).
    pub btf_path: Option<std::path::PathBuf>,
}

/// The programs' own counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub samples: u64,
    pub dropped_ratelimit: u64,
    pub dropped_ringbuf: u64,
    /// Denials that found the count map full: counts are exact while this is 0.
    pub lost_counts: u64,
    /// Confined sys_exits of tasks never seen entering (filter installs, a
    /// child's first return, syscalls in flight at attach): not judged.
    pub unjudged_first_exits: u64,
    pub state_failures: u64,
    /// USER_NOTIF calls the supervisor answered with a value (emulated): not denials.
    pub notify_emulated: u64,
    /// Cgroup creations the kernel could not hand over (ring buffer full):
    /// those cgroups are attributed only while they exist.
    pub cgroup_feed_dropped: u64,
}

impl Stats {
    pub fn dropped(&self) -> u64 {
        self.dropped_ratelimit + self.dropped_ringbuf
    }
}

/// The edge between the kernel and the rest: samples, exact counts, stats.
pub trait EventSource {
    fn strategy(&self) -> Strategy;
    /// Hands every available sample to `sink`, waiting up to `timeout` when none is.
    fn poll(&mut self, timeout: Duration, sink: &mut dyn FnMut(Denial)) -> Result<(), TraceError>;
    /// Cgroup2 directories created since the last call, oldest first (none
    /// when the kernel feed is not attached), for the id → path cache.
    fn created_cgroups(&mut self, sink: &mut dyn FnMut(CgroupCreated)) -> Result<(), TraceError>;
    /// The exact in-kernel counts so far.
    fn counts(&self) -> Result<Vec<(CountKey, u64)>, TraceError>;
    /// Removes the counts of processes `exited` says are gone and returns
    /// each with its final value: the count map is bounded (16,384 keys, one
    /// per process, syscall and outcome), and one that only grows fills up
    /// on a node where short-lived processes are denied, after which new
    /// denials go uncounted. A gone process denies nothing more, so its
    /// final value is exact.
    fn retire(&mut self, exited: &dyn Fn(u32) -> bool) -> Result<Vec<(CountKey, u64)>, TraceError>;
    fn stats(&self) -> Result<Stats, TraceError>;
}

/// A borrowed source is a source: [`run_with`] pumps one it does not own.
impl<T: EventSource + ?Sized> EventSource for &mut T {
    fn strategy(&self) -> Strategy {
        (**self).strategy()
    }
    fn poll(&mut self, timeout: Duration, sink: &mut dyn FnMut(Denial)) -> Result<(), TraceError> {
        (**self).poll(timeout, sink)
    }
    fn created_cgroups(&mut self, sink: &mut dyn FnMut(CgroupCreated)) -> Result<(), TraceError> {
        (**self).created_cgroups(sink)
    }
    fn counts(&self) -> Result<Vec<(CountKey, u64)>, TraceError> {
        (**self).counts()
    }
    fn retire(&mut self, exited: &dyn Fn(u32) -> bool) -> Result<Vec<(CountKey, u64)>, TraceError> {
        (**self).retire(exited)
    }
    fn stats(&self) -> Result<Stats, TraceError> {
        (**self).stats()
    }
}

/// Errors of the trace module.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("this nodeproof was built without clang: no eBPF programs embedded")]
    NotBuilt,
    #[error(
        "no seccomp tracing strategy loads{}: {}",
        caps_hint(missing_caps),
        attempts_line(attempts)
    )]
    NoStrategy {
        /// Capabilities the process lacks (empty when it has them).
        missing_caps: Vec<&'static str>,
        attempts: Vec<ProbeAttempt>,
    },
    #[error("unknown strategy {name:?} (fexit, tp_btf, tracepoint)")]
    UnknownStrategy { name: String },
    #[error("eBPF object has no map {name}")]
    MissingMap { name: &'static str },
    #[error("eBPF map {name}")]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("polling the sample ring buffer")]
    Poll {
        #[source]
        source: std::io::Error,
    },
    #[error("decoding a kernel record")]
    Decode {
        #[source]
        source: event::DecodeError,
    },
    #[error("writing trace output")]
    Write {
        #[source]
        source: std::io::Error,
    },
}

pub(crate) fn caps_hint(missing: &[&str]) -> String {
    if missing.is_empty() {
        String::new()
    } else {
        format!(
            " (missing {}: grant CAP_BPF and CAP_PERFMON, or run as root)",
            missing.join(" and ")
        )
    }
}

pub(crate) fn attempts_line(attempts: &[ProbeAttempt]) -> String {
    attempts
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The `SeccompTracingReady` node condition for a start attempt.
///
/// `message` is what the Node shows: the strategy and, in words, why the
/// ones before it were refused ([`FailureReason::phrase`]), within
/// [`nodeproof_findings::CONDITION_MESSAGE_MAX`]. The kernel's answers (a
/// refused `BPF_PROG_LOAD` carries the verifier's whole log, ~450
/// characters on a locked-down kernel) are `detail`: logged by the loader
/// as each attempt fails, and in the finding (`check -o json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    pub ready: bool,
    pub reason: TracingReason,
    pub message: String,
    /// Every refused attempt as the kernel answered it (empty when none was).
    pub detail: String,
}

/// "fexit and tp_btf were denied by the kernel (…)": the refused
/// strategies in words, those refused for one reason together.
fn refusals_in_words(refused: &[ProbeAttempt]) -> String {
    let mut groups: Vec<(FailureReason, Vec<&str>)> = Vec::new();
    for a in refused {
        match groups.iter_mut().find(|(r, _)| *r == a.reason) {
            Some((_, names)) => names.push(a.strategy.as_str()),
            None => groups.push((a.reason, vec![a.strategy.as_str()])),
        }
    }
    groups
        .iter()
        .map(|(reason, names)| {
            let verb = if names.len() == 1 { "was" } else { "were" };
            format!("{} {verb} {}", names.join(" and "), reason.phrase())
        })
        .collect::<Vec<_>>()
        .join("; ")
}

impl Readiness {
    pub fn of(result: Result<&Tracer, &TraceError>) -> Self {
        match result {
            Ok(t) => {
                let mut r = Self::loaded(t.strategy(), t.attempts());
                if let Some(off) = t.btf_free_offset() {
                    r.message
                        .push_str(" Without kernel BTF some fields are unknown.");
                    if !r.detail.is_empty() {
                        r.detail.push_str("; ");
                    }
                    r.detail.push_str(&format!(
                        "no BTF: task_struct.seccomp.mode probed at offset {off}, arch, mount namespace, notify-error and a KILL's syscall unknown"
                    ));
                }
                r
            }
            Err(e) => Self::failed(e),
        }
    }

    pub fn loaded(strategy: Strategy, refused: &[ProbeAttempt]) -> Self {
        let mut message = format!("tracing seccomp denials with {strategy}");
        if !refused.is_empty() {
            message.push_str(&format!("; {}", refusals_in_words(refused)));
        }
        message.push('.');
        Self {
            ready: true,
            reason: TracingReason::StrategyLoaded,
            message,
            detail: attempts_line(refused),
        }
    }

    pub fn failed(e: &TraceError) -> Self {
        let (reason, message) = match e {
            TraceError::NotBuilt => (FailureReason::ProgramsNotBuilt, format!("{e}.")),
            TraceError::NoStrategy {
                missing_caps,
                attempts,
            } => {
                if !missing_caps.is_empty() {
                    (
                        FailureReason::BpfPermissionDenied,
                        format!(
                            "no seccomp tracing: this process lacks {}. Grant CAP_BPF and CAP_PERFMON, or run as root.",
                            missing_caps.join(" and ")
                        ),
                    )
                } else {
                    // The reason of the last (most widely supported) strategy tried.
                    let reason = attempts
                        .last()
                        .map_or(FailureReason::LoadFailed, |a| a.reason);
                    (
                        reason,
                        format!(
                            "no seccomp tracing: {}.",
                            if attempts.is_empty() {
                                "no strategy was tried".to_string()
                            } else {
                                refusals_in_words(attempts)
                            }
                        ),
                    )
                }
            }
            _ => (
                FailureReason::LoadFailed,
                format!("no seccomp tracing: {e}."),
            ),
        };
        Self {
            ready: false,
            reason: reason.into(),
            message,
            detail: match e {
                TraceError::NoStrategy { attempts, .. } => attempts_line(attempts),
                _ => String::new(),
            },
        }
    }
}

/// `nodeproof trace`: loads, streams samples to `out` until the duration ends
/// or `stop` is set, then writes the summary of exact counts.
pub fn run(
    opts: &TraceOptions,
    out: &mut dyn Write,
    stop: &AtomicBool,
    pods: &dyn PodLookup,
) -> Result<TraceSummary, TraceError> {
    let mut tracer = Tracer::start(&TracerConfig {
        strategy: opts.strategy,
        sample_pid: opts.pid,
        btf_path: opts.btf_path.clone(),
        ..TracerConfig::default()
    })?;
    run_with(&mut tracer, opts, out, stop, CgroupResolver::host(), pods)
}

impl TraceOptions {
    pub fn filter(&self) -> Filter {
        Filter {
            pid: self.pid,
            comm: self.comm.clone(),
            pod: self.pod.clone(),
            namespace: self.namespace.clone(),
            container: self.container.clone(),
        }
    }
}

/// [`run`] over any event source; tests drive it with a fake.
pub fn run_with(
    source: &mut dyn EventSource,
    opts: &TraceOptions,
    out: &mut dyn Write,
    stop: &AtomicBool,
    resolver: CgroupResolver,
    pods: &dyn PodLookup,
) -> Result<TraceSummary, TraceError> {
    let filter = opts.filter();
    let mut pump = Pump::new(source, resolver, filter);
    let clock_offset = realtime_minus_monotonic_ns();
    let deadline = opts.duration.map(|d| Instant::now() + d);
    let mut write_err = None;
    let mut on_sample = |s: Sample<'_>| {
        if write_err.is_some() {
            return;
        }
        let wall = (s.denial.ts_ns as i128 + clock_offset).max(0) as u64;
        let line = match opts.format {
            OutputFormat::Json => summary::sample_json(s.denial, s.syscall, s.attribution, wall),
            OutputFormat::Yaml => summary::sample_yaml(s.denial, s.syscall, s.attribution, wall),
            OutputFormat::Text => summary::sample_text(s.denial, s.syscall, s.attribution, wall),
        };
        if let Err(e) = writeln!(out, "{line}") {
            write_err = Some(e);
        }
    };
    loop {
        let now = Instant::now();
        if stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| now >= d) {
            break;
        }
        let wait = deadline.map_or(Duration::from_millis(100), |d| {
            (d - now).min(Duration::from_millis(100))
        });
        pump.poll(wait, pods, &mut on_sample)?;
    }
    // What is already in the ring buffer belongs to the run.
    pump.poll(Duration::ZERO, pods, &mut on_sample)?;
    if let Some(source) = write_err {
        return Err(TraceError::Write { source });
    }
    let (mut rows, stats) = pump.rows(pods)?;
    for r in &mut rows {
        r.change = pods.change(r);
    }
    let s = summary::summarize(rows, &stats, pump.source().strategy());
    let text = match opts.format {
        OutputFormat::Json => format!("{}\n", summary::summary_json(&s)),
        OutputFormat::Yaml => summary::summary_yaml(&s),
        OutputFormat::Text => summary::summary_text(&s),
    };
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|source| TraceError::Write { source })?;
    Ok(s)
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC, to put wall times on bpf_ktime_get_ns samples.
fn realtime_minus_monotonic_ns() -> i128 {
    use nix::time::{clock_gettime, ClockId};
    // Both clocks always exist: the error arm is never taken.
    let now = |clock| {
        clock_gettime(clock).map_or(0, |ts| {
            ts.tv_sec() as i128 * 1_000_000_000 + ts.tv_nsec() as i128
        })
    };
    now(ClockId::CLOCK_REALTIME) - now(ClockId::CLOCK_MONOTONIC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use event::AUDIT_ARCH_X86_64;

    /// A scripted source: samples in batches (each with the cgroups created
    /// before it), then fixed counts.
    struct Fake {
        batches: Vec<Vec<Denial>>,
        created: Vec<Vec<CgroupCreated>>,
        counts: Vec<(CountKey, u64)>,
        stats: Stats,
    }

    impl EventSource for Fake {
        fn strategy(&self) -> Strategy {
            Strategy::TpBtf
        }
        fn poll(
            &mut self,
            _timeout: Duration,
            sink: &mut dyn FnMut(Denial),
        ) -> Result<(), TraceError> {
            if let Some(b) = self.batches.pop() {
                b.into_iter().for_each(sink);
            }
            Ok(())
        }
        fn created_cgroups(
            &mut self,
            sink: &mut dyn FnMut(CgroupCreated),
        ) -> Result<(), TraceError> {
            if let Some(c) = self.created.pop() {
                c.into_iter().for_each(sink);
            }
            Ok(())
        }
        fn counts(&self) -> Result<Vec<(CountKey, u64)>, TraceError> {
            Ok(self.counts.clone())
        }
        fn retire(
            &mut self,
            exited: &dyn Fn(u32) -> bool,
        ) -> Result<Vec<(CountKey, u64)>, TraceError> {
            let (gone, live) = std::mem::take(&mut self.counts)
                .into_iter()
                .partition(|(k, _)| exited(k.pid));
            self.counts = live;
            Ok(gone)
        }
        fn stats(&self) -> Result<Stats, TraceError> {
            Ok(self.stats)
        }
    }

    fn denial(pid: u32, comm: &str) -> Denial {
        Denial {
            ts_ns: 1,
            cgroup_id: 0,
            pid,
            tid: pid,
            mnt_ns: 1,
            nr: 83,
            arch: AUDIT_ARCH_X86_64,
            errno: 1,
            action: Action::Errno,
            comm: comm.into(),
        }
    }

    #[test]
    fn run_with_streams_filters_and_summarizes() {
        let key = |pid, comm: &str| CountKey {
            cgroup_id: 0,
            pid,
            nr: 83,
            errno: 1,
            action: Action::Errno,
            arch: AUDIT_ARCH_X86_64,
            comm: comm.into(),
        };
        let mut fake = Fake {
            batches: vec![vec![denial(5, "a"), denial(6, "b")], vec![denial(5, "a")]],
            created: vec![],
            counts: vec![(key(5, "a"), 1000), (key(6, "b"), 4)],
            stats: Stats {
                samples: 3,
                dropped_ratelimit: 997,
                ..Stats::default()
            },
        };
        let opts = TraceOptions {
            duration: Some(Duration::from_millis(30)),
            comm: Some("a".into()),
            format: OutputFormat::Json,
            ..TraceOptions::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let resolver = CgroupResolver::new(dir.path(), dir.path());
        let mut out = Vec::new();
        let s = run_with(
            &mut fake,
            &opts,
            &mut out,
            &AtomicBool::new(false),
            resolver,
            &NoPodLookup,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        let last: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
        assert_eq!(last["summary"][0]["count"], 1000);
        assert_eq!(last["summary"].as_array().unwrap().len(), 1);
        assert_eq!(last["dropped"], 997);
        assert_eq!(last["strategy"], "tp_btf");
        assert_eq!(s.count(5, 83, 1, Action::Errno), 1000);
    }

    #[test]
    fn stop_flag_ends_a_run_without_duration() {
        let mut fake = Fake {
            batches: vec![],
            created: vec![],
            counts: vec![],
            stats: Stats::default(),
        };
        let dir = tempfile::tempdir().unwrap();
        let mut out = Vec::new();
        let s = run_with(
            &mut fake,
            &TraceOptions::default(),
            &mut out,
            &AtomicBool::new(true),
            CgroupResolver::new(dir.path(), dir.path()),
            &NoPodLookup,
        )
        .unwrap();
        assert!(s.summary.is_empty());
        assert!(String::from_utf8(out).unwrap().contains("strategy tp_btf"));
    }

    /// A cgroup announced in the same poll as its first sample (created,
    /// denied and removed between two polls) attributes the sample and the
    /// count: the pump reads creations after the samples arrive and before it
    /// resolves them. The resolver's tree is empty, as after the removal.
    #[test]
    fn cgroup_created_between_polls_attributes_samples_and_counts() {
        let uid = "8b6c7e2a-1d2f-4a5b-9c3d-0e1f2a3b4c5d";
        let id = "ab".repeat(32);
        let path = format!(
            "/kubepods.slice/kubepods-pod{}.slice/cri-containerd-{id}.scope",
            uid.replace('-', "_")
        );
        let mut d = denial(7, "short");
        d.cgroup_id = 31337;
        let mut fake = Fake {
            batches: vec![vec![d]],
            created: vec![vec![CgroupCreated {
                id: 31337,
                path: path.clone(),
            }]],
            counts: vec![(
                CountKey {
                    cgroup_id: 31337,
                    pid: 7,
                    nr: 83,
                    errno: 1,
                    action: Action::Errno,
                    arch: AUDIT_ARCH_X86_64,
                    comm: "short".into(),
                },
                3,
            )],
            stats: Stats::default(),
        };
        let dir = tempfile::tempdir().unwrap();
        let mut out = Vec::new();
        let s = run_with(
            &mut fake,
            &TraceOptions {
                duration: Some(Duration::from_millis(20)),
                format: OutputFormat::Json,
                ..TraceOptions::default()
            },
            &mut out,
            &AtomicBool::new(false),
            CgroupResolver::new(dir.path(), dir.path()),
            &NoPodLookup,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        let sample: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(sample["pod_uid"], uid, "{text}");
        assert_eq!(sample["container_id"], id.as_str());
        assert_eq!(s.summary.len(), 1);
        assert_eq!(s.summary[0].count, 3);
        assert_eq!(s.summary[0].pod_uid.as_deref(), Some(uid));
        assert_eq!(s.summary[0].container_id.as_deref(), Some(id.as_str()));
        assert_eq!(s.summary[0].cgroup.as_deref(), Some(path.as_str()));
    }

    /// Counts of exited processes leave the source and come back folded
    /// (pid 0) with the attribution they had; every total is kept.
    #[test]
    fn retiring_moves_exited_counts_out_of_the_source_keeping_sums() {
        let uid = "8b6c7e2a-1d2f-4a5b-9c3d-0e1f2a3b4c5d";
        let path = format!(
            "/kubepods.slice/kubepods-pod{}.slice/cri-containerd-{}.scope",
            uid.replace('-', "_"),
            "cd".repeat(32)
        );
        let key = |pid, nr| CountKey {
            cgroup_id: 99,
            pid,
            nr,
            errno: 1,
            action: Action::Errno,
            arch: AUDIT_ARCH_X86_64,
            comm: "uname".into(),
        };
        let fake = Fake {
            batches: vec![],
            created: vec![vec![CgroupCreated { id: 99, path }]],
            counts: vec![
                (key(10, 63), 2),
                (key(11, 63), 3),
                (key(12, 63), 4),
                (key(11, 99), 1),
            ],
            stats: Stats::default(),
        };
        fn odd_pids_exited(pid: u32) -> bool {
            pid % 2 == 1
        }
        let dir = tempfile::tempdir().unwrap();
        let mut pump = Pump::new(
            fake,
            CgroupResolver::new(dir.path(), dir.path()),
            Filter::default(),
        )
        .retire_exited(odd_pids_exited);
        let total = |rows: &[SummaryRow], nr| -> u64 {
            rows.iter().filter(|r| r.nr == nr).map(|r| r.count).sum()
        };
        let (rows, _) = pump.rows(&NoPodLookup).unwrap();
        assert_eq!((total(&rows, 63), total(&rows, 99)), (9, 1), "{rows:#?}");
        assert_eq!(
            pump.source().counts.len(),
            2,
            "pid 11's two keys left the source"
        );
        let folded: Vec<&SummaryRow> = rows.iter().filter(|r| r.pid == 0).collect();
        assert_eq!(folded.len(), 2, "{rows:#?}");
        assert!(folded.iter().all(|r| r.pod_uid.as_deref() == Some(uid)));
        // The source counts on; pid 13 comes and goes: totals only grow.
        let mut fake = pump;
        fake.source_mut().counts.push((key(13, 63), 5));
        let (rows, _) = fake.rows(&NoPodLookup).unwrap();
        assert_eq!((total(&rows, 63), total(&rows, 99)), (14, 1), "{rows:#?}");
        assert_eq!(fake.retired_rows(), 2);
    }

    #[test]
    fn readiness_and_strategy_names() {
        let e = TraceError::NoStrategy {
            missing_caps: vec!["CAP_BPF"],
            attempts: vec![ProbeAttempt {
                strategy: Strategy::Fexit,
                reason: FailureReason::BpfPermissionDenied,
                detail: "loading np_fexit_seccomp: EPERM".into(),
            }],
        };
        let r = Readiness::failed(&e);
        assert!(!r.ready);
        assert_eq!(r.reason, "BPFPermissionDenied");
        assert!(r.message.contains("CAP_BPF"), "{}", r.message);
        assert!(r.message.contains("or run as root"));
        let e = TraceError::NoStrategy {
            missing_caps: vec![],
            attempts: vec![ProbeAttempt {
                strategy: Strategy::Tracepoint,
                reason: FailureReason::KernelUnsupported,
                detail: "x".into(),
            }],
        };
        assert_eq!(Readiness::failed(&e).reason, "KernelUnsupported");
        let ok = Readiness::loaded(Strategy::TpBtf, &[]);
        assert!(ok.ready && ok.message.contains("tp_btf"));
        assert_eq!("raw_tp".parse::<Strategy>().unwrap(), Strategy::Tracepoint);
        assert!("x".parse::<Strategy>().is_err());
    }
}
