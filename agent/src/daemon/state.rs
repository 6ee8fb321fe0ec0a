//! What the subsystems last found, shared with the main loop and the HTTP
//! endpoints. Each subsystem writes only its own entry; readers take a copy.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use super::subsystem::Subsystem;
use crate::pods::denials::PodDenialTotal;
use crate::pods::state::LintGeneration;
use nodeproof_findings::{Check, Condition, ConditionType, Finding, Status};
use nodeproof_gpu::GpuMetrics;
use nodeproof_report::driver::{PodsNews, RoundNews};

#[derive(Debug, Clone)]
pub struct CheckState {
    /// The node conditions it backs (none: nothing to report, e.g. no GPU).
    pub conditions: Vec<Condition>,
    /// Its part of the `STATUS=` line.
    pub summary: String,
    /// When it last completed a round.
    pub progress: Option<Instant>,
    /// How often it is expected to: `/healthz/<check>` fails after three missed rounds.
    pub period: Duration,
}

/// The values `/metrics` encodes (`daemon::metrics`), as last written by
/// the subsystems: snapshots, not counters incremented here.
///
/// [`Metrics::set_findings`] replaces a check's part of `check_findings`.
#[derive(Debug, Default, Clone)]
pub struct Metrics {
    /// Exact in-kernel denial counts by (syscall, pod, outcome: `denied` or
    /// `intended-fallback`, `nodeproof_trace::DenialKind`), replaced on each read.
    pub denials: BTreeMap<(String, String, &'static str), u64>,
    /// Profiles by outcome (`ok`, `rejected`, ...), from the latest lint.
    pub profile_verdicts: BTreeMap<&'static str, u64>,
    /// The GPU probe's latest cycle; `None` until its first.
    pub gpu: Option<GpuMetrics>,
    /// Each device's usage by its holders, from the GPU probe's latest
    /// cycle alone (empty when that cycle's driver did not answer: never
    /// an older cycle's values).
    pub gpu_usage: Vec<nodeproof_gpu::usage::UsageRow>,
    /// `(namespace, name)` of the pods running here, as the pods watcher
    /// last judged them; `None` while pods are not watched (no API
    /// credentials): then every holder pod-resources lists is taken.
    pub running_pods: Option<std::collections::BTreeSet<(String, String)>>,
    /// Denials resolved to pods by the pods watcher's aggregator; `None`
    /// while no denials are fed to it (no API credentials).
    pub pod_denials: Option<Vec<PodDenialTotal>>,
    /// Pod denials after a profile change, by the previous version's
    /// verdict; `None` while no denials are fed (no API credentials).
    pub pod_denials_after_change:
        Option<BTreeMap<nodeproof_report::denial_change::PreviousVerdict, u64>>,
    /// GPU faults on pods by the pods watcher's aggregator; `None` while no
    /// faults are fed to it (no API credentials).
    pub gpu_faults: Option<Vec<crate::pods::gpu_faults::GpuFaultTotal>>,
    pub ebpf_dropped: u64,
    pub ebpf_strategy: Option<nodeproof_trace::Strategy>,
    pub reporter_errors: u64,
    /// Writes the API server refused for good, dropped by the reporter.
    pub reporter_dropped: BTreeMap<
        (
            nodeproof_report::driver::WriteKind,
            nodeproof_report::reporter::Refusal,
        ),
        u64,
    >,
    pub task_restarts: BTreeMap<Subsystem, u64>,
    /// Findings by their CHECK and status, from the latest round of each
    /// check that reports them here (the check runner's, the profiles',
    /// the tracer's and the GPU probe's).
    pub check_findings: BTreeMap<(Check, Status), u64>,
    pub reloads: u64,
    pub profile_revalidations: u64,
    /// Files linted by this process, the profiles check and the pods'
    /// judge together (answers from a lint cache not counted).
    pub profile_lints: u64,
}

/// Check rounds kept for the reporter between two main-loop rounds; more
/// means the main loop (or the reporter) is stuck, and then the oldest
/// rounds' conditions are dropped (later rounds say the same or newer);
/// their news is kept, moved to the next round.
const MAX_PENDING_ROUNDS: usize = 256;

#[derive(Debug, Default)]
struct Inner {
    checks: BTreeMap<Subsystem, CheckState>,
    /// What a check without conditions found, one line a finding, for its
    /// `/healthz/<check>` (the check runner's).
    said: BTreeMap<Subsystem, Vec<String>>,
    /// Every completed check round's conditions and news, oldest first,
    /// until the main loop hands them to the reporter: its hysteresis
    /// counts check results, so a result equal to the previous one still
    /// counts.
    rounds: RoundQueue,
    /// When each check first published: the start-up breakdown.
    first_rounds: BTreeMap<Subsystem, Instant>,
    metrics: Metrics,
    main_progress: Option<Instant>,
    /// The wall-clock time of the main loop's last round, for
    /// `nodeproof_heartbeat_timestamp_seconds` (Prometheus compares it with `time()`).
    heartbeat: Option<SystemTime>,
    main_period: Duration,
    ready: bool,
    stopping: bool,
    /// The API server's reach, once the reporter has credentials (without
    /// them the agent does not report, and readiness is about its checks).
    reach: Option<nodeproof_report::reach::Reach>,
    /// How long requests may keep failing before `/readyz` fails.
    unreachable_after: Duration,
}

#[derive(Debug, Default)]
pub struct Shared {
    inner: Mutex<Inner>,
}

impl Metrics {
    /// The latest round's findings of the checks named in `checks` (a
    /// check's whole vocabulary, so a status gone from the round reads 0).
    pub fn set_findings(&mut self, checks: &[Check], findings: &[Finding]) {
        for &c in checks {
            for status in [Status::Ok, Status::Warning, Status::Failed, Status::Skipped] {
                let n = findings
                    .iter()
                    .filter(|f| f.check == c && f.status == status)
                    .count();
                self.check_findings.insert((c, status), n as u64);
            }
        }
    }
}

/// What a `/metrics` scrape reads, copied under the lock at once.
#[derive(Debug, Clone)]
pub struct MetricsSnapshot {
    /// The node conditions, merged as [`Shared::conditions`] gives them.
    pub conditions: Vec<Condition>,
    pub metrics: Metrics,
    /// When the main loop last went round (wall clock); `None` before its first round.
    pub heartbeat: Option<SystemTime>,
    /// Each subsystem that has published, in [`Subsystem::all`] order, and
    /// whether it went round in time ([`on_time`], what `/healthz/<check>` says).
    pub tasks_on_time: Vec<(Subsystem, bool)>,
}

/// Whether a check completed a round within three of its periods before
/// `now`; one that has not completed any is not on time.
fn on_time(c: &CheckState, now: Instant) -> bool {
    c.progress
        .is_some_and(|t| now.saturating_duration_since(t) <= c.period * 3)
}

/// What `/healthz` and friends answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub ok: bool,
    pub body: String,
}

/// Where the pods watcher stands, as it publishes it (`daemon::pods`):
/// whether a lint of the profile files will be followed by the pods'
/// judgement of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PodsPhase {
    /// No pods watcher (no API credentials): nobody judges the pods, a
    /// lint's round goes alone.
    #[default]
    NotWatched,
    /// Watching, its lists not all in: it judges once they are, against
    /// the latest lint then.
    Listing,
    /// Judging: each new lint generation wakes it, and its next round says
    /// it judged against that generation (or a later one).
    Judging,
}

/// What a queued round is to the merge ([`RoundQueue`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamp {
    /// A round of its own (tracing, GPU, a reporter state).
    Alone,
    /// The profile files' round of this lint generation.
    Files(LintGeneration),
    /// The pods' round judged against this lint generation.
    Pods(LintGeneration),
}

/// A round in the queue; `awaits`: a lint's round that waits for the pods'
/// round judged against its generation (or a later one).
#[derive(Debug)]
struct Pending {
    round: RoundNews,
    awaits: Option<LintGeneration>,
}

/// The rounds for the reporter, merged by lint generation: the profile
/// files' round of lint N and the pods' round judged against N are one
/// round, so one profile edit is one result to the reporter's hysteresis
/// and one status PATCH, although both halves change the condition. A pure
/// queue: what waits is said by the generations and the pods' phase, never
/// by which task woke whom first.
#[derive(Debug, Default)]
pub struct RoundQueue {
    pending: VecDeque<Pending>,
    /// The latest generation a pods round was judged against.
    pods_judged: LintGeneration,
}

impl RoundQueue {
    /// Queues a round. A files round of generation N waits for the pods
    /// unless a pods round judged against N (or later) came already. A
    /// pods round judged against M goes into the newest waiting files
    /// round of a generation up to M and ends the wait of every one up to
    /// M; judged against an older lint than any that waits (the pods were
    /// judged while the lint was made), it goes into the newest waiting
    /// one and ends no wait: what the pods said before the judgement of
    /// the lint travels in the lint's round, before that judgement, never
    /// after it. With nothing waiting, it is a round of its own.
    pub fn push(&mut self, mut round: RoundNews, stamp: Stamp) {
        let m = match stamp {
            Stamp::Alone => return self.push_back(round, None),
            Stamp::Files(n) => return self.push_back(round, (n > self.pods_judged).then_some(n)),
            Stamp::Pods(m) => m,
        };
        self.pods_judged = self.pods_judged.max(m);
        let up_to_m = |p: &Pending| p.awaits.is_some_and(|n| n <= m);
        let waiting = |p: &Pending| p.awaits.is_some();
        let Some(target) = (self.pending.iter().rposition(up_to_m))
            .or_else(|| self.pending.iter().rposition(waiting))
        else {
            return self.push_back(round, None);
        };
        let kinds: Vec<ConditionType> = round.conditions.iter().map(|c| c.kind).collect();
        let files = &mut self.pending[target].round;
        files.conditions.retain(|c| !kinds.contains(&c.kind));
        files.conditions.append(&mut round.conditions);
        files.news.append(&mut round.news);
        for p in self.pending.iter_mut().filter(|p| up_to_m(p)) {
            p.awaits = None;
        }
    }

    fn push_back(&mut self, round: RoundNews, awaits: Option<LintGeneration>) {
        self.pending.push_back(Pending { round, awaits });
        bound(&mut self.pending);
    }

    /// The rounds the reporter gets now, oldest first: up to the first that
    /// waits, in order (a later round of the same condition must not pass
    /// it). Unless the pods are judged, nothing waits: no judgement is
    /// coming (not watched), or it comes when the lists are in, against
    /// whatever lint is latest then.
    pub fn take(&mut self, pods: PodsPhase) -> Vec<RoundNews> {
        if pods != PodsPhase::Judging {
            self.pending.iter_mut().for_each(|p| p.awaits = None);
        }
        let ready = self
            .pending
            .iter()
            .position(|p| p.awaits.is_some())
            .unwrap_or(self.pending.len());
        self.pending.drain(..ready).map(|p| p.round).collect()
    }

    /// Rounds taken and not handed over, back in front, waiting for nothing.
    pub fn requeue(&mut self, rounds: Vec<RoundNews>) {
        for round in rounds.into_iter().rev() {
            self.pending.push_front(Pending {
                round,
                awaits: None,
            });
        }
        bound(&mut self.pending);
    }
}

/// News kept for a stuck reporter, at most: beyond, the oldest pod Events
/// are given up (said in the journal). Before, the pods watcher waited for
/// the reporter; now the checks go on and the wait is bounded here.
const MAX_PENDING_NEWS: usize = 4096;

/// At most [`MAX_PENDING_ROUNDS`]: the oldest rounds' conditions go, their
/// news moves into the next round (an Event is news once, never resent).
/// At most [`MAX_PENDING_NEWS`] news: a contract verdict set or an
/// unhealthy-device set that a later one replaces goes first, then the
/// oldest Events.
fn bound(rounds: &mut VecDeque<Pending>) {
    while rounds.len() > MAX_PENDING_ROUNDS {
        let Some(oldest) = rounds.pop_front() else {
            return;
        };
        if let Some(next) = rounds.front_mut() {
            let mut news = oldest.round.news;
            news.append(&mut next.round.news);
            next.round.news = news;
        }
    }
    let total: usize = rounds.iter().map(|r| r.round.news.len()).sum();
    if total <= MAX_PENDING_NEWS {
        return;
    }
    // Superseded state first: only the latest of each kind matters.
    let mut later_contracts = false;
    let mut later_devices = false;
    for r in rounds.iter_mut().rev() {
        r.round.news.retain(|n| match n {
            PodsNews::Contracts(_) => !std::mem::replace(&mut later_contracts, true),
            PodsNews::UnhealthyDevices(_) => !std::mem::replace(&mut later_devices, true),
            PodsNews::Event(_) => true,
        });
    }
    let mut excess = rounds
        .iter()
        .map(|r| r.round.news.len())
        .sum::<usize>()
        .saturating_sub(MAX_PENDING_NEWS);
    let dropped = excess;
    for r in rounds.iter_mut() {
        if excess == 0 {
            break;
        }
        r.round.news.retain(|n| {
            if excess > 0 && matches!(n, PodsNews::Event(_)) {
                excess -= 1;
                false
            } else {
                true
            }
        });
    }
    if dropped > 0 {
        tracing::warn!(
            nodeproof_check = Subsystem::Reporter.as_str(),
            events = dropped,
            "reporter is behind; the oldest pod Events waiting for it were given up"
        );
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind: keep serving it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a check's state; one with conditions and progress is a
    /// completed round, queued for the reporter (see [`Shared::take_rounds`]).
    pub fn set_check(&self, name: Subsystem, state: CheckState) {
        self.set_round(name, state, Vec::new(), Stamp::Alone);
    }

    /// [`Shared::set_check`] for a check that backs no condition: its
    /// findings' lines are what its `/healthz/<check>` says.
    pub fn set_findings_check(&self, name: Subsystem, state: CheckState, findings: &[Finding]) {
        let lines = findings
            .iter()
            .map(|f| {
                format!(
                    "{} {} ({}): {}",
                    f.subject,
                    f.status.as_str(),
                    f.reason,
                    f.message
                )
            })
            .collect();
        self.lock().said.insert(name, lines);
        self.set_check(name, state);
    }

    /// [`Shared::set_check`], with what the round found for the reporter
    /// (pod Events, contract verdicts, unhealthy devices): queued in the
    /// same message as the round's conditions, after them.
    pub fn set_check_with_news(&self, name: Subsystem, state: CheckState, news: Vec<PodsNews>) {
        self.set_round(name, state, news, Stamp::Alone);
    }

    /// [`Shared::set_check_with_news`], the round stamped with the lint
    /// generation it belongs to ([`Stamp`]): the profile files' round of a
    /// lint and the pods' round judged against it go to the reporter as one.
    pub fn set_round(&self, name: Subsystem, state: CheckState, news: Vec<PodsNews>, stamp: Stamp) {
        let mut i = self.lock();
        i.first_rounds.entry(name).or_insert_with(Instant::now);
        let kinds: Vec<ConditionType> = state.conditions.iter().map(|c| c.kind).collect();
        let completed = state.progress.is_some() && !kinds.is_empty();
        i.checks.insert(name, state);
        if !completed && news.is_empty() {
            return;
        }
        // The merged view: a pods round re-observes the one
        // SeccompProfilesReady that files and pods back together.
        let conditions: Vec<Condition> = if completed {
            merged(&i.checks)
                .into_iter()
                .filter(|c| kinds.contains(&c.kind))
                .collect()
        } else {
            Vec::new()
        };
        i.rounds.push(RoundNews { conditions, news }, stamp);
    }

    /// The check rounds ready for the reporter, oldest first: all of them,
    /// but a lint's round that still waits for the pods' judgement of it
    /// while `pods` are judged, and those after it ([`RoundQueue::take`]).
    pub fn take_rounds(&self, pods: PodsPhase) -> Vec<RoundNews> {
        self.lock().rounds.take(pods)
    }

    /// Rounds the main loop could not hand over (the reporter's channel was
    /// full), back in front of the queue in their order: sent next time.
    pub fn requeue(&self, rounds: Vec<RoundNews>) {
        self.lock().rounds.requeue(rounds);
    }

    /// `profiles 12 ms, tracing 95 ms, ...`: how long after `start` each
    /// check first published, in [`Subsystem::all`] order.
    pub fn first_rounds_since(&self, start: Instant) -> String {
        let i = self.lock();
        Subsystem::all()
            .iter()
            .filter_map(|c| {
                let at = i.first_rounds.get(c)?;
                Some(format!(
                    "{c} {} ms",
                    at.saturating_duration_since(start).as_millis()
                ))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn check(&self, name: Subsystem) -> Option<CheckState> {
        self.lock().checks.get(&name).cloned()
    }

    pub fn metrics<T>(&self, f: impl FnOnce(&mut Metrics) -> T) -> T {
        f(&mut self.lock().metrics)
    }

    /// The main loop went round at `now` (`wall` on the wall clock).
    pub fn main_progress(&self, now: Instant, wall: SystemTime, period: Duration) {
        let mut i = self.lock();
        i.main_progress = Some(now);
        i.heartbeat = Some(wall);
        i.main_period = period;
    }

    pub fn set_ready(&self, ready: bool) {
        self.lock().ready = ready;
    }

    /// Readiness follows the API server's reach from now on.
    pub fn set_reach(&self, reach: nodeproof_report::reach::Reach, unreachable_after: Duration) {
        let mut i = self.lock();
        i.reach = Some(reach);
        i.unreachable_after = unreachable_after;
    }

    pub fn set_stopping(&self) {
        self.lock().stopping = true;
    }

    /// Every check that has completed at least one round.
    pub fn first_cycle_done(&self, expected: &[Subsystem]) -> bool {
        let i = self.lock();
        expected
            .iter()
            .all(|c| i.checks.get(c).is_some_and(|s| s.progress.is_some()))
    }

    /// The node conditions, one per type: the pods' `SeccompProfilesReady`
    /// is folded into the profile files' (`verdict::combine`).
    pub fn conditions(&self) -> Vec<Condition> {
        merged(&self.lock().checks)
    }

    /// The one-line `STATUS=`, in [`Subsystem::all`] order.
    pub fn status_line(&self) -> String {
        let i = self.lock();
        Subsystem::all()
            .iter()
            .filter_map(|c| i.checks.get(c))
            .map(|c| c.summary.as_str())
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `/healthz`: the main loop went round within three of its periods.
    pub fn healthz(&self, now: Instant) -> Health {
        let i = self.lock();
        match i.main_progress {
            Some(t) if now.duration_since(t) <= i.main_period * 3 => Health {
                ok: true,
                body: format!(
                    "ok: main loop {} ms ago\n",
                    now.duration_since(t).as_millis()
                ),
            },
            Some(t) => Health {
                ok: false,
                body: format!(
                    "stalled: main loop last ran {} s ago\n",
                    now.duration_since(t).as_secs()
                ),
            },
            None => Health {
                ok: false,
                body: "starting\n".into(),
            },
        }
    }

    /// `/healthz/<check>`: that subsystem went round within three of its periods.
    pub fn check_health(&self, name: Subsystem, now: Instant) -> Option<Health> {
        let i = self.lock();
        let c = i.checks.get(&name)?;
        let conditions: String = c
            .conditions
            .iter()
            .map(|c| format!("{}={} ({}): {}\n", c.kind, c.status, c.reason, c.message))
            .chain(
                i.said
                    .get(&name)
                    .into_iter()
                    .flatten()
                    .map(|l| format!("{l}\n")),
            )
            .collect();
        Some(match c.progress {
            Some(_) if on_time(c, now) => Health {
                ok: true,
                body: format!("ok: {}\n{conditions}", c.summary),
            },
            Some(t) => Health {
                ok: false,
                body: format!(
                    "stalled: last round {} s ago\n{conditions}",
                    now.duration_since(t).as_secs()
                ),
            },
            None => Health {
                ok: false,
                body: "starting\n".into(),
            },
        })
    }

    /// `/readyz`: the first full cycle is done, the agent is not stopping,
    /// and, when it reports, it can: the API server has answered, and
    /// neither its reads nor its writes have kept failing for
    /// `daemon.readiness-unreachable-s` (docs/daemon.md).
    pub fn readyz(&self, now: Instant) -> Health {
        let i = self.lock();
        let unready = |why: String| Health {
            ok: false,
            body: format!("{why}\n"),
        };
        if i.stopping {
            return unready("stopping".into());
        }
        if !i.ready {
            return unready("first check cycle not done".into());
        }
        match i
            .reach
            .as_ref()
            .map(|r| r.verdict(now, i.unreachable_after))
        {
            Some(Err(e)) => unready(format!("cannot report: {e}")),
            Some(Ok(())) => Health {
                ok: true,
                body: "ready: reporting\n".into(),
            },
            None => Health {
                ok: true,
                body: "ready\n".into(),
            },
        }
    }

    /// The conditions and metric values at this moment, for a scrape.
    /// What a scrape at `now` reads.
    pub fn metrics_snapshot(&self, now: Instant) -> MetricsSnapshot {
        let i = self.lock();
        MetricsSnapshot {
            tasks_on_time: Subsystem::all()
                .into_iter()
                .filter_map(|s| Some((s, on_time(i.checks.get(&s)?, now))))
                .collect(),
            conditions: merged(&i.checks),
            metrics: i.metrics.clone(),
            heartbeat: i.heartbeat,
        }
    }
}

/// Every check's conditions, folded as `nodeproof check` folds them. Until
/// the profile files have been judged once, there is no node
/// `SeccompProfilesReady`: the pods' half alone would say True for files
/// nobody has read yet (the soak harness saw a restart with 10,000 profiles
/// write PodProfilesReady=True for the 100 s its first lint took).
fn merged(checks: &BTreeMap<Subsystem, CheckState>) -> Vec<Condition> {
    let mut out =
        crate::judge::node_conditions(checks.iter().map(|(s, c)| (s.origin(), &c.conditions[..])));
    let files_judged = checks
        .get(&Subsystem::Profiles)
        .is_some_and(|c| c.progress.is_some());
    if !files_judged {
        out.retain(|c| c.kind != ConditionType::SeccompProfilesReady);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeproof_findings::ConditionStatus;

    fn cond(kind: &str, status: &str) -> Condition {
        Condition {
            kind: ConditionType::parse(kind).expect("an owned type"),
            status: ConditionStatus::parse(status),
            reason: "R".into(),
            message: "m".into(),
        }
    }

    /// A completed round's state with these conditions.
    fn state(conditions: Vec<Condition>) -> CheckState {
        CheckState {
            conditions,
            summary: String::new(),
            progress: Some(Instant::now()),
            period: Duration::from_secs(1),
        }
    }

    #[test]
    fn health_follows_progress_and_status_line_follows_check_order() {
        let s = Shared::default();
        let t0 = Instant::now();
        assert!(!s.healthz(t0).ok);
        s.main_progress(t0, SystemTime::UNIX_EPOCH, Duration::from_secs(1));
        assert!(s.healthz(t0 + Duration::from_secs(2)).ok);
        assert!(!s.healthz(t0 + Duration::from_secs(4)).ok);
        s.set_check(
            Subsystem::Tracing,
            CheckState {
                conditions: vec![cond("SeccompTracingReady", "True")],
                summary: "tracing tp_btf".into(),
                progress: Some(t0),
                period: Duration::from_secs(1),
            },
        );
        s.set_check(
            Subsystem::Profiles,
            CheckState {
                conditions: vec![cond("SeccompProfilesReady", "False")],
                summary: "profiles 2 ok, 1 failing".into(),
                progress: Some(t0),
                period: Duration::from_secs(1),
            },
        );
        assert_eq!(s.status_line(), "profiles 2 ok, 1 failing, tracing tp_btf");
        assert!(s.first_cycle_done(&[Subsystem::Profiles, Subsystem::Tracing]));
        assert!(!s.first_cycle_done(&[Subsystem::Profiles, Subsystem::Gpu]));
        assert!(s.check_health(Subsystem::Tracing, t0).unwrap().ok);
        assert!(
            !s.check_health(Subsystem::Tracing, t0 + Duration::from_secs(5))
                .unwrap()
                .ok
        );
        assert!(s.check_health(Subsystem::Pods, t0).is_none());
        assert_eq!(
            s.metrics_snapshot(t0).conditions,
            vec![
                cond("SeccompProfilesReady", "False"),
                cond("SeccompTracingReady", "True")
            ]
        );
        // The pods' part of the condition is folded into the files', not listed twice.
        s.set_check(
            Subsystem::Pods,
            CheckState {
                conditions: vec![Condition {
                    reason: "ProfileMissing".into(),
                    ..cond("SeccompProfilesReady", "False")
                }],
                summary: "pods 1 watched, 1 with unusable profiles".into(),
                progress: Some(t0),
                period: Duration::from_secs(10),
            },
        );
        let merged: Vec<_> = s
            .conditions()
            .into_iter()
            .filter(|c| c.kind == ConditionType::SeccompProfilesReady)
            .collect();
        assert_eq!(merged.len(), 1, "{merged:?}");
        assert_eq!(
            s.metrics_snapshot(t0)
                .conditions
                .iter()
                .filter(|c| c.kind == ConditionType::SeccompProfilesReady)
                .collect::<Vec<_>>(),
            merged.iter().collect::<Vec<_>>()
        );
        assert_eq!(merged[0].reason, "ProfileMissing");
        assert_eq!(merged[0].message, "m; node profiles: m");
        // Stalled as /healthz/<check> says: three periods without a round,
        // or none yet.
        s.set_check(
            Subsystem::Gpu,
            CheckState {
                conditions: Vec::new(),
                summary: String::new(),
                progress: None,
                period: Duration::from_secs(1),
            },
        );
        use Subsystem::{Gpu, Pods, Profiles, Tracing};
        assert_eq!(
            s.metrics_snapshot(t0).tasks_on_time,
            [
                (Profiles, true),
                (Pods, true),
                (Tracing, true),
                (Gpu, false)
            ]
        );
        assert_eq!(
            s.metrics_snapshot(t0 + Duration::from_secs(5))
                .tasks_on_time,
            [
                (Profiles, false),
                (Pods, true),
                (Tracing, false),
                (Gpu, false)
            ]
        );
        assert_eq!(
            s.status_line(),
            "profiles 2 ok, 1 failing, pods 1 watched, 1 with unusable profiles, tracing tp_btf"
        );
        assert!(!s.readyz(Instant::now()).ok);
        s.set_ready(true);
        assert!(s.readyz(Instant::now()).ok);
        s.set_stopping();
        assert!(!s.readyz(Instant::now()).ok);
    }

    #[test]
    fn when_it_reports_ready_means_the_api_server_is_reached() {
        use nodeproof_report::reach::{Outcome, Reach, RequestKind, UNREACHABLE_AFTER};
        let s = Shared::default();
        let t0 = Instant::now();
        s.set_ready(true);
        let reach = Reach::default();
        s.set_reach(reach.clone(), UNREACHABLE_AFTER);
        let r = s.readyz(t0);
        assert!(!r.ok);
        assert_eq!(
            r.body,
            "cannot report: the API server has not answered yet\n"
        );
        reach.record(t0, RequestKind::Read, &Outcome::Answered);
        assert_eq!(s.readyz(t0).body, "ready: reporting\n");
        let refused = Outcome::Failed("cannot reach the API server (connection refused)".into());
        reach.record(t0, RequestKind::Write, &refused);
        assert!(s.readyz(t0 + UNREACHABLE_AFTER / 2).ok);
        let r = s.readyz(t0 + UNREACHABLE_AFTER);
        assert!(!r.ok);
        assert_eq!(
            r.body,
            "cannot report: every write to the API server has failed for 30 s: cannot reach the API server (connection refused)\n"
        );
    }

    #[test]
    fn every_completed_round_is_queued_for_the_reporter_even_when_unchanged() {
        let s = Shared::default();
        let t0 = Instant::now();
        let gpu = |status| CheckState {
            conditions: vec![cond("GPUHealthy", status)],
            summary: String::new(),
            progress: Some(t0),
            period: Duration::from_secs(1),
        };
        s.set_check(Subsystem::Gpu, gpu("False"));
        s.set_check(Subsystem::Gpu, gpu("False"));
        // Not a round: no progress yet, or nothing to report.
        s.set_check(
            Subsystem::Pods,
            CheckState {
                progress: None,
                ..gpu("True")
            },
        );
        s.set_check(
            Subsystem::Reporter,
            CheckState {
                conditions: Vec::new(),
                ..gpu("True")
            },
        );
        let rounds = s.take_rounds(PodsPhase::NotWatched);
        assert_eq!(rounds.len(), 2, "{rounds:?}");
        assert!(rounds
            .iter()
            .all(|r| r.conditions == vec![cond("GPUHealthy", "False")]));
        assert!(s.take_rounds(PodsPhase::NotWatched).is_empty());

        // A pods round re-observes the merged SeccompProfilesReady, only it
        // (after another check's round: one after the files' travels in it).
        s.set_check(
            Subsystem::Profiles,
            CheckState {
                conditions: vec![cond("SeccompProfilesReady", "True")],
                ..gpu("True")
            },
        );
        s.set_check(Subsystem::Gpu, gpu("True"));
        assert_eq!(s.take_rounds(PodsPhase::NotWatched).len(), 2);
        s.set_check(
            Subsystem::Pods,
            CheckState {
                conditions: vec![Condition {
                    reason: "ProfileMissing".into(),
                    ..cond("SeccompProfilesReady", "False")
                }],
                ..gpu("True")
            },
        );
        let rounds = s.take_rounds(PodsPhase::NotWatched);
        assert_eq!(rounds.len(), 1, "{rounds:?}");
        assert_eq!(rounds[0].conditions.len(), 1);
        assert_eq!(rounds[0].conditions[0].status, ConditionStatus::False);
        assert_eq!(rounds[0].conditions[0].reason, "ProfileMissing");

        // A stuck main loop costs the oldest rounds, not unbounded memory.
        for _ in 0..MAX_PENDING_ROUNDS + 10 {
            s.set_check(Subsystem::Gpu, gpu("True"));
        }
        assert_eq!(
            s.take_rounds(PodsPhase::NotWatched).len(),
            MAX_PENDING_ROUNDS
        );
    }

    #[test]
    fn no_seccomp_profiles_ready_before_the_files_are_judged() {
        let s = Shared::default();
        s.set_check(
            Subsystem::Pods,
            state(vec![Condition {
                reason: crate::pods::verdict::PODS_READY.into(),
                ..cond("SeccompProfilesReady", "True")
            }]),
        );
        s.set_check(Subsystem::Gpu, state(vec![cond("GPUHealthy", "True")]));
        assert_eq!(s.conditions(), vec![cond("GPUHealthy", "True")]);
        let rounds = s.take_rounds(PodsPhase::NotWatched);
        assert!(
            rounds
                .iter()
                .flat_map(|r| &r.conditions)
                .all(|c| c.kind != ConditionType::SeccompProfilesReady),
            "{rounds:?}"
        );
        // The first lint brings the folded one.
        s.set_check(
            Subsystem::Profiles,
            state(vec![cond("SeccompProfilesReady", "False")]),
        );
        let rounds = s.take_rounds(PodsPhase::NotWatched);
        assert_eq!(rounds.len(), 1);
        assert_eq!(rounds[0].conditions.len(), 1);
        assert_eq!(
            rounds[0].conditions[0].kind,
            ConditionType::SeccompProfilesReady
        );
        assert_eq!(rounds[0].conditions[0].status, ConditionStatus::False);
    }

    /// A round as a check queues it: its conditions, and an Event naming it.
    fn round(kind: &str, status: &str, said: &str) -> RoundNews {
        use nodeproof_report::events::{EventType, ObjectRef, PodEvent};
        RoundNews {
            conditions: vec![Condition {
                reason: said.to_string(),
                ..cond(kind, status)
            }],
            news: vec![PodsNews::Event(PodEvent {
                pod: ObjectRef {
                    kind: "Pod",
                    namespace: "ml".into(),
                    name: said.to_string(),
                    uid: None,
                },
                event_type: EventType::Warning,
                reason: "SeccompProfileInvalid",
                message: String::new(),
                annotations: Default::default(),
            })],
        }
    }

    /// What the reporter gets from these rounds, queued in this order, when
    /// the main loop takes the queue after each (the pods in `phase`): for
    /// each take, each round's SeccompProfilesReady or GPUHealthy reasons
    /// and the names its Events carry.
    fn handed(
        phase: PodsPhase,
        queued: Vec<(Stamp, RoundNews)>,
    ) -> Vec<Vec<(String, Vec<String>)>> {
        let mut q = RoundQueue::default();
        let mut takes = Vec::new();
        for (stamp, r) in queued {
            q.push(r, stamp);
            let taken: Vec<_> = q
                .take(phase)
                .into_iter()
                .map(|r| {
                    let said = r.conditions.iter().map(|c| c.reason.clone()).collect();
                    let names = r
                        .news
                        .iter()
                        .map(|n| match n {
                            PodsNews::Event(e) => e.pod.name.clone(),
                            other => format!("{other:?}"),
                        })
                        .collect::<Vec<_>>();
                    (said, names)
                })
                .map(|(said, names): (Vec<String>, Vec<String>)| (said.join("+"), names))
                .collect();
            takes.push(taken);
        }
        takes
    }

    fn g(n: u64) -> LintGeneration {
        LintGeneration(n)
    }

    fn one(said: &str, names: &[&str]) -> (String, Vec<String>) {
        (
            said.to_string(),
            names.iter().map(|n| n.to_string()).collect(),
        )
    }

    #[test]
    fn a_lints_round_and_the_pods_judged_against_it_are_one_round() {
        const P: &str = "SeccompProfilesReady";
        type Takes = Vec<Vec<(String, Vec<String>)>>;
        type Case = (&'static str, Vec<(Stamp, RoundNews)>, Takes);
        let cases: [Case; 4] = [
            (
                // Lint 3's round waits for the pods judged against 3; a GPU
                // round queued meanwhile waits behind it.
                "the pods' round goes into the lint's",
                vec![
                    (Stamp::Files(g(3)), round(P, "True", "files3")),
                    (Stamp::Alone, round("GPUHealthy", "True", "gpu")),
                    (Stamp::Pods(g(3)), round(P, "False", "pods3")),
                ],
                vec![
                    vec![],
                    vec![],
                    vec![one("pods3", &["files3", "pods3"]), one("gpu", &["gpu"])],
                ],
            ),
            (
                // Pods judged against 1 (before lint 2 was published) go into
                // lint 2's waiting round without ending its wait, never after
                // the round that completes it; the pods judged against 2 end it.
                "out of order",
                vec![
                    (Stamp::Files(g(2)), round(P, "True", "files2")),
                    (Stamp::Pods(g(1)), round(P, "True", "pods1")),
                    (Stamp::Pods(g(2)), round(P, "False", "pods2")),
                    (Stamp::Pods(g(2)), round(P, "False", "pods2-again")),
                ],
                vec![
                    vec![],
                    vec![],
                    vec![one("pods2", &["files2", "pods1", "pods2"])],
                    vec![one("pods2-again", &["pods2-again"])],
                ],
            ),
            (
                // Judged against the later, it ends both waits and goes into
                // the later lint's round.
                "two lints before the pods' judgement",
                vec![
                    (Stamp::Files(g(4)), round(P, "True", "files4")),
                    (Stamp::Files(g(5)), round(P, "False", "files5")),
                    (Stamp::Pods(g(5)), round(P, "False", "pods5")),
                ],
                vec![
                    vec![],
                    vec![],
                    vec![
                        one("files4", &["files4"]),
                        one("pods5", &["files5", "pods5"]),
                    ],
                ],
            ),
            (
                // The lint's own round has nothing left to wait for.
                "the pods judged against 7 before lint 7's round was queued",
                vec![
                    (Stamp::Pods(g(7)), round(P, "True", "pods7")),
                    (Stamp::Files(g(7)), round(P, "True", "files7")),
                ],
                vec![
                    vec![one("pods7", &["pods7"])],
                    vec![one("files7", &["files7"])],
                ],
            ),
        ];
        for (case, queued, expected) in cases {
            assert_eq!(handed(PodsPhase::Judging, queued), expected, "{case}");
        }
    }

    #[test]
    fn without_the_pods_judged_a_lints_round_goes_alone() {
        const P: &str = "SeccompProfilesReady";
        for phase in [PodsPhase::NotWatched, PodsPhase::Listing] {
            assert_eq!(
                handed(
                    phase,
                    vec![
                        (Stamp::Files(g(1)), round(P, "True", "files1")),
                        (Stamp::Pods(g(1)), round(P, "False", "pods1")),
                    ]
                ),
                vec![
                    vec![one("files1", &["files1"])],
                    vec![one("pods1", &["pods1"])]
                ],
                "{phase:?}"
            );
        }
        // A lint's round queued while the pods were judged, taken once the
        // watcher is listing again (a reload restarted it): it goes.
        let mut q = RoundQueue::default();
        q.push(round(P, "True", "files1"), Stamp::Files(g(1)));
        assert!(q.take(PodsPhase::Judging).is_empty());
        assert_eq!(q.take(PodsPhase::Listing).len(), 1);
        // Pods judged on their own (a pod changed): a round of their own.
        q.push(round(P, "True", "pods1"), Stamp::Pods(g(1)));
        assert_eq!(q.take(PodsPhase::Judging).len(), 1);
    }

    #[test]
    fn the_board_merges_the_pods_round_into_the_lints_by_generation() {
        let s = Shared::default();
        let pods = || {
            state(vec![Condition {
                reason: "PodProfileInvalid".into(),
                ..cond("SeccompProfilesReady", "False")
            }])
        };
        s.set_round(
            Subsystem::Profiles,
            state(vec![cond("SeccompProfilesReady", "True")]),
            Vec::new(),
            Stamp::Files(g(1)),
        );
        assert!(s.take_rounds(PodsPhase::Judging).is_empty());
        s.set_round(Subsystem::Pods, pods(), Vec::new(), Stamp::Pods(g(1)));
        let rounds = s.take_rounds(PodsPhase::Judging);
        assert_eq!(rounds.len(), 1, "{rounds:?}");
        // The merged view, with the pods' half folded in.
        assert_eq!(rounds[0].conditions.len(), 1);
        assert_eq!(rounds[0].conditions[0].status, ConditionStatus::False);
        assert_eq!(rounds[0].conditions[0].reason, "PodProfileInvalid");
    }

    #[test]
    fn news_travels_after_its_rounds_conditions_and_is_never_dropped() {
        use nodeproof_report::device_health::UnhealthyDevices;
        let s = Shared::default();
        let devices = |n: usize| {
            let mut d = UnhealthyDevices::new();
            for i in 0..n {
                d.insert(&format!("GPU-{i}"), "XidFatal");
            }
            PodsNews::UnhealthyDevices(d)
        };
        s.set_check_with_news(
            Subsystem::Gpu,
            state(vec![cond("GPUHealthy", "False")]),
            vec![devices(1)],
        );
        let rounds = s.take_rounds(PodsPhase::NotWatched);
        assert_eq!(rounds.len(), 1);
        assert_eq!(rounds[0].conditions, vec![cond("GPUHealthy", "False")]);
        assert_eq!(rounds[0].news, vec![devices(1)]);

        // Rounds the reporter could not take come back first, in order.
        s.set_check(Subsystem::Gpu, state(vec![cond("GPUHealthy", "True")]));
        s.requeue(rounds);
        let again = s.take_rounds(PodsPhase::NotWatched);
        assert_eq!(again.len(), 2);
        assert_eq!(again[0].news, vec![devices(1)]);
        assert_eq!(again[1].conditions, vec![cond("GPUHealthy", "True")]);

        // Overflow drops the oldest conditions, not their news.
        s.set_check_with_news(
            Subsystem::Gpu,
            state(vec![cond("GPUHealthy", "False")]),
            vec![devices(2)],
        );
        for _ in 0..MAX_PENDING_ROUNDS + 3 {
            s.set_check(Subsystem::Gpu, state(vec![cond("GPUHealthy", "True")]));
        }
        let rounds = s.take_rounds(PodsPhase::NotWatched);
        assert_eq!(rounds.len(), MAX_PENDING_ROUNDS);
        let news: Vec<&PodsNews> = rounds.iter().flat_map(|r| &r.news).collect();
        assert_eq!(news, vec![&devices(2)]);
        assert_eq!(rounds[0].news, vec![devices(2)]);
    }

    #[test]
    fn a_stuck_reporters_news_is_bounded_keeping_the_latest_state() {
        use nodeproof_report::contract::ContractState;
        use nodeproof_report::contract_labels::ContractVerdict;
        use nodeproof_report::events::{EventType, ObjectRef, PodEvent};
        let event = |i: usize| {
            PodsNews::Event(PodEvent {
                pod: ObjectRef {
                    kind: "Pod",
                    namespace: "ml".into(),
                    name: format!("p{i}"),
                    uid: None,
                },
                event_type: EventType::Warning,
                reason: "SeccompProfileMissing",
                message: String::new(),
                annotations: Default::default(),
            })
        };
        let contracts = |n: usize| {
            PodsNews::Contracts(vec![
                ContractVerdict {
                    class: "vllm".into(),
                    state: ContractState::Ready,
                    cause: String::new(),
                };
                n
            ])
        };
        let mut rounds: VecDeque<Pending> = VecDeque::new();
        for i in 0..3 {
            rounds.push_back(Pending {
                round: RoundNews {
                    conditions: Vec::new(),
                    news: std::iter::once(contracts(i))
                        .chain((0..MAX_PENDING_NEWS / 2).map(|k| event(i * MAX_PENDING_NEWS + k)))
                        .collect(),
                },
                awaits: None,
            });
        }
        bound(&mut rounds);
        let news: Vec<&PodsNews> = rounds.iter().flat_map(|r| &r.round.news).collect();
        assert_eq!(news.len(), MAX_PENDING_NEWS);
        // Only the latest contract set is left, and the newest Events.
        let sets: Vec<&PodsNews> = news
            .iter()
            .copied()
            .filter(|n| matches!(n, PodsNews::Contracts(_)))
            .collect();
        assert_eq!(sets, vec![&contracts(2)]);
        assert_eq!(
            news.last(),
            Some(&&event(2 * MAX_PENDING_NEWS + MAX_PENDING_NEWS / 2 - 1))
        );
        assert!(!news.contains(&&event(0)));
    }
}
