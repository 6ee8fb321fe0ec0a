//! The reporting loop: folds check results into the desired state and
//! brings the API server to it when it can. Time is an argument (`now`) and
//! the loop returns when it next wants to run, so the caller owns the clock:
//! the CLI and daemon sleep on the real one, tests jump a simulated one
//! across a five-minute outage.
//!
//! Outages: only the latest desired state is kept (the tracker and the
//! event recorder), never a queue of writes; failures back off exponentially
//! with jitter, a 429's Retry-After is honoured, a 409 re-reads the Node.
//!
//! The Node's writes (status, labels, taints) and the Events back off on
//! their own schedules, so a status write never waits behind an Event; each
//! Event succeeds or fails on its own, and one the API server refused for
//! good (its namespace terminating or gone, invalid) is dropped and counted.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::conditions::{Policy, Tracker, Transition};
use crate::contract_labels::{ContractLabels, ContractVerdict, LabelTransition};
use crate::device_health::UnhealthyDevices;
use crate::events::{EventType, ObjectRef, PodEvent, Recorder, RecorderConfig};
use crate::limited::{self, Limited};
use crate::marks::{self, MarkPolicy, Taint};
use crate::ratelimit::{self, LoadPolicy, Pacing, WallWait};
use crate::reporter::{NodeState, Refusal, ReportError, Reporter};
use nodeproof_findings::{Condition, ConditionStatus};
use strum::IntoStaticStr;

#[derive(Debug, Clone)]
pub struct LoopConfig {
    pub policy: Policy,
    pub events: RecorderConfig,
    /// Opt-in labels and taints (both off by default).
    pub marks: MarkPolicy,
    /// First retry delay after a failure; doubles up to `backoff_cap`.
    pub backoff_base: Duration,
    /// Longest retry delay before jitter (+0..50 %, `ratelimit::backoff_delay`).
    /// 20 s keeps convergence after an outage under 30 s.
    pub backoff_cap: Duration,
    /// Client-side rate limit, heartbeat jitter, first-write spread
    /// (`ratelimit`). Default `UNLIMITED`; the daemon takes `ReportConfig::load()`.
    pub load: LoadPolicy,
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            policy: Policy::default(),
            events: RecorderConfig::default(),
            marks: MarkPolicy::default(),
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(20),
            load: LoadPolicy::UNLIMITED,
        }
    }
}

/// Exponential backoff with jitter, from a small deterministic PRNG (seeded
/// per process) so tests can pin it.
#[derive(Debug, Clone)]
struct Backoff {
    base: Duration,
    cap: Duration,
    attempt: u32,
    state: u64,
}

impl Backoff {
    fn next(&mut self) -> Duration {
        // xorshift64: spreads retries of many nodes after a control-plane outage.
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        let u = ratelimit::unit(self.state, u64::from(self.attempt));
        let delay = ratelimit::backoff_delay(self.base, self.cap, self.attempt, u);
        self.attempt += 1;
        delay
    }

    fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// Why a retry schedule waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WaitCause {
    /// A pacing slot or the token bucket: nothing failed.
    Hold,
    /// The server asked for it (429 `Retry-After`): kept in full.
    RetryAfter,
    /// The backoff after a failure that carried no `Retry-After`.
    Backoff,
}

/// One retry schedule: the backoff and the time before which nothing is sent.
#[derive(Debug, Clone)]
struct Retry {
    backoff: Backoff,
    not_before: Option<WallWait>,
    cause: WaitCause,
}

impl Retry {
    fn new(config: &LoopConfig, seed: u64) -> Self {
        Retry {
            backoff: Backoff {
                base: config.backoff_base,
                cap: config.backoff_cap,
                attempt: 0,
                state: seed | 1,
            },
            not_before: None,
            cause: WaitCause::Hold,
        }
    }

    fn ready(&self, now: SystemTime) -> bool {
        self.not_before.is_none_or(|w| w.over(now))
    }

    /// The pending wait, if it is not over.
    fn waiting(&self, now: SystemTime) -> Option<SystemTime> {
        self.not_before.filter(|w| !w.over(now)).map(|w| w.until())
    }

    /// Nothing before `at` (a pacing slot), without counting a failure.
    fn hold_until(&mut self, now: SystemTime, at: SystemTime) {
        if self.waiting(now).is_none() {
            self.cause = WaitCause::Hold;
        }
        let at = self.waiting(now).map_or(at, |t| t.max(at));
        self.not_before = Some(WallWait::new(now, at));
    }

    /// A pacing hold is lifted (the start spread skipped): go at once.
    fn release_hold(&mut self, now: SystemTime) {
        if self.cause == WaitCause::Hold && self.waiting(now).is_some() {
            self.not_before = None;
        }
    }

    /// The API server answered someone: a backoff after a failure ends by
    /// `at` (a retry that fails again backs off from the start). A
    /// `Retry-After` or a pacing hold is kept.
    fn server_answered(&mut self, now: SystemTime, at: SystemTime) -> bool {
        if self.cause != WaitCause::Backoff || self.waiting(now).is_none_or(|t| t <= at) {
            return false;
        }
        self.backoff.reset();
        self.not_before = Some(WallWait::new(now, at));
        true
    }

    /// Schedules the next attempt from how this one went: at once after a
    /// success; when the token bucket is empty (no request was made,
    /// nothing failed) once it refills; after a failure, the 429's
    /// Retry-After when there is one (as client-go's `checkWait` does), the
    /// backoff otherwise. Only a real failure is returned.
    fn settle(
        &mut self,
        now: SystemTime,
        result: Result<(), ReportError>,
    ) -> Result<(), ReportError> {
        match result {
            Ok(()) => {
                self.backoff.reset();
                self.not_before = None;
                Ok(())
            }
            Err(e) => match limited::deferred(&e) {
                Some(wait) => {
                    self.not_before = Some(WallWait::new(now, now + wait));
                    self.cause = WaitCause::Hold;
                    Ok(())
                }
                None => {
                    let (delay, cause) = match e.retry_after() {
                        Some(d) => (d, WaitCause::RetryAfter),
                        None => (self.backoff.next(), WaitCause::Backoff),
                    };
                    self.not_before = Some(WallWait::new(now, now + delay));
                    self.cause = cause;
                    Err(e)
                }
            },
        }
    }
}

/// Why the Node needs nodeproof's conditions written again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeDrift {
    /// A new UID: the Node was deleted and registered again.
    Recreated,
    /// A published condition is not on the Node (another client removed it).
    ConditionMissing(nodeproof_findings::ConditionType),
}

impl std::fmt::Display for NodeDrift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeDrift::Recreated => f.write_str("the Node was registered again (new UID)"),
            NodeDrift::ConditionMissing(kind) => write!(f, "{kind} is missing from the Node"),
        }
    }
}

/// What was written: the `kind` label of `nodeproof_reporter_dropped_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum WriteKind {
    /// A core/v1 Event. The Node's own writes (status, labels, taints) are
    /// never dropped: a refusal of those is a fatal error, logged and retried.
    Event,
}

impl WriteKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A write the API server refused for good, dropped instead of retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    pub kind: WriteKind,
    pub reason: Refusal,
}

/// Requests the loop made (successful ones) and failures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub node_reads: u64,
    pub status_writes: u64,
    pub event_writes: u64,
    /// PATCHes of the Node's metadata: labels, the unhealthy-devices annotation.
    pub label_writes: u64,
    pub taint_writes: u64,
    /// Events the API server refused for good (see [`Dropped`]).
    pub events_dropped: u64,
    pub failures: u64,
}

/// Labels, taints and the unhealthy-devices annotation that differ from the Node's.
struct MarksDue {
    labels: Option<BTreeMap<String, String>>,
    taints: Option<Vec<Taint>>,
    /// The annotation's new value (`Some(None)`: remove it).
    devices: Option<Option<String>>,
}

pub struct ReportLoop<R> {
    /// Every request spends a token of the client-side limit first.
    reporter: Limited<R>,
    tracker: Tracker,
    recorder: Recorder,
    node_uid: Option<String>,
    marks: MarkPolicy,
    /// The RuntimeClass contract labels as the verdicts want them.
    contracts: ContractLabels,
    /// Our labels and taints as last read or written.
    labels_on_node: BTreeMap<String, String>,
    taints_on_node: Vec<Taint>,
    /// The GPUs the probe last called unhealthy (`None`: no GPU probe has
    /// said yet, so the Node's annotation is left as it is).
    devices_wanted: Option<UnhealthyDevices>,
    /// The unhealthy-devices annotation as last read or written.
    devices_on_node: Option<String>,
    /// The Node's writes (read, status, labels, taints).
    node_retry: Retry,
    /// The Events, on their own schedule.
    event_retry: Retry,
    /// Dropped writes not yet taken by [`ReportLoop::take_dropped`].
    dropped: Vec<Dropped>,
    stats: Stats,
    /// Fleet-safe start and change spread (`ratelimit::Pacing`).
    pacing: Pacing,
}

impl<R: Reporter> ReportLoop<R> {
    pub fn new(reporter: R, config: LoopConfig, seed: u64) -> Self {
        let node_retry = Retry::new(&config, seed);
        let event_retry = Retry::new(&config, seed.rotate_left(32));
        let load = config.load;
        ReportLoop {
            reporter: Limited::new(reporter, load.qps, load.burst),
            tracker: Tracker::new(config.policy)
                .with_heartbeat_jitter(load.heartbeat_jitter_pct, ratelimit::mix(seed ^ 0x4842)),
            recorder: Recorder::new(config.events),
            node_uid: None,
            marks: config.marks,
            contracts: ContractLabels::default(),
            labels_on_node: BTreeMap::new(),
            taints_on_node: Vec::new(),
            devices_wanted: None,
            devices_on_node: None,
            node_retry,
            event_retry,
            dropped: Vec::new(),
            stats: Stats::default(),
            pacing: Pacing::new(&load, seed),
        }
    }

    pub fn reporter(&self) -> &R {
        self.reporter.inner()
    }

    /// Applies a reloaded policy (heartbeat, hysteresis) without losing state.
    pub fn set_policy(&mut self, policy: Policy) {
        self.tracker.set_policy(policy);
    }

    pub fn tracker(&self) -> &Tracker {
        &self.tracker
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The Node as a watch of it saw it. kube-apiserver keeps no status for
    /// a Node deleted and registered again (the kubelet re-registers it with
    /// a new UID and only its own conditions), and another client may remove
    /// nodeproof's conditions; either way nothing would restore them until
    /// the next heartbeat (minutes), so a new UID or a published condition
    /// missing from the Node makes the status due now. The Node's own labels
    /// and taints are taken as read, so marks that went missing are due too.
    /// Returns why a rewrite is due, if it is.
    pub fn node_seen(&mut self, state: &NodeState) -> Option<NodeDrift> {
        if !self.tracker.is_resumed() {
            // The first read is still to come and will see this Node. A Node
            // without any of nodeproof's conditions has just joined: its
            // first write does not wait for the start spread.
            if state.conditions.is_empty() {
                let now = SystemTime::now();
                self.pacing.skip_start(now);
                self.node_retry.release_hold(now);
                self.event_retry.release_hold(now);
            }
            return None;
        }
        self.labels_on_node = state.labels.clone();
        self.taints_on_node = state.taints.clone();
        self.taints_on_node.sort();
        self.devices_on_node = state.unhealthy_devices.clone();
        let drift = if state.uid.is_some() && state.uid != self.node_uid {
            self.node_uid = state.uid.clone();
            Some(NodeDrift::Recreated)
        } else {
            self.tracker
                .conditions()
                .find(|c| !state.conditions.iter().any(|o| o.kind == c.kind))
                .map(|c| NodeDrift::ConditionMissing(c.kind))
        };
        if let Some(d) = &drift {
            // Handled here, so logged here.
            tracing::info!(node = %self.reporter.node(), drift = %d, "writing nodeproof's conditions again");
            self.tracker.rewrite();
        }
        drift
    }

    /// The writes dropped since the last call (for the daemon's metrics).
    pub fn take_dropped(&mut self) -> Vec<Dropped> {
        std::mem::take(&mut self.dropped)
    }

    /// The API server answered a request of this process (a watch's list, a
    /// probe) at `now`: writes waiting out a failure's backoff go by
    /// `now + within * u` (`u` in 0..1, this agent's draw), not after the
    /// grown delay (up to 30 s), so a change seen after an outage is written
    /// within seconds of the server's return; `within` spreads a fleet that
    /// hears it at once. True when a wait was cut short.
    pub fn server_answered(&mut self, now: SystemTime, within: Duration, u: f64) -> bool {
        let at = now + within.mul_f64(u.clamp(0.0, 1.0));
        let node = self.node_retry.server_answered(now, at);
        let events = self.event_retry.server_answered(now, at);
        node || events
    }

    /// Fold one round of check results in. Never touches the network: checks
    /// never wait for the API server.
    pub fn observe(&mut self, now: SystemTime, conditions: &[Condition]) {
        let transitions = self.tracker.observe(now, conditions);
        self.on_transitions(transitions);
    }

    /// One verdict set of the RuntimeClass contracts (every annotated
    /// class, judged on this node): the labels follow it with the
    /// conditions' hysteresis, a class turned not ready is a Node Event.
    pub fn observe_contracts(&mut self, now: SystemTime, verdicts: &[ContractVerdict]) {
        let hysteresis = self.tracker.policy().hysteresis;
        let transitions = self.contracts.observe(now, verdicts, hysteresis);
        self.on_label_transitions(transitions);
    }

    fn on_label_transitions(&mut self, transitions: Vec<LabelTransition>) {
        let node = self.reporter.node().to_string();
        for t in transitions {
            let from = t.from.map_or("none", |s| s.as_str());
            tracing::info!(node = %node, runtime_class = %t.class, from, to = %t.to, cause = %t.cause, "RuntimeClass contract");
            // Without the labels, nothing is said about them either.
            let Some((event_type, reason, message)) =
                t.event().filter(|_| self.marks.contract_labels)
            else {
                continue;
            };
            self.recorder.record(
                t.at,
                ObjectRef::node(&node, self.node_uid.clone()),
                event_type,
                reason,
                &message,
            );
        }
    }

    /// The GPUs one probe cycle judged unhealthy: the Node's annotation
    /// (`device_health::UNHEALTHY_DEVICES`) follows, written only when it
    /// changes and removed when none is. Never touches the network.
    pub fn observe_devices(&mut self, devices: UnhealthyDevices) {
        self.devices_wanted = Some(devices);
    }

    /// A finding about a pod (another check attaches it): an Event on the Pod.
    pub fn pod_event(
        &mut self,
        now: SystemTime,
        pod: ObjectRef,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) {
        self.recorder.record(now, pod, event_type, reason, message);
    }

    /// [`ReportLoop::pod_event`] of a whole [`PodEvent`], its annotations too.
    pub fn record_pod_event(&mut self, now: SystemTime, e: &PodEvent) {
        self.recorder.record_annotated(
            now,
            e.pod.clone(),
            e.event_type,
            e.reason,
            &e.message,
            &e.annotations,
        );
    }

    fn on_transitions(&mut self, transitions: Vec<Transition>) {
        let node = self.reporter.node().to_string();
        for t in transitions {
            let from = t.from.map_or("none", ConditionStatus::as_str);
            // The journal entry: written even if the API server never comes back.
            // Not `message =`: that is tracing's own field, and the journal
            // would get two MESSAGE= values (journalctl shows the condition's
            // text in place of "condition transition").
            if t.to == ConditionStatus::True {
                tracing::info!(node = %node, condition = %t.kind, from, to = %t.to, reason = %t.reason, condition_message = %t.message, "condition transition");
            } else {
                tracing::warn!(node = %node, condition = %t.kind, from, to = %t.to, reason = %t.reason, condition_message = %t.message, "condition transition");
            }
            // A condition first seen healthy is not news; anything else is.
            let event_type = match (t.from, t.to) {
                (None, ConditionStatus::True) => continue,
                (_, ConditionStatus::True) => EventType::Normal,
                _ => EventType::Warning,
            };
            let message = format!("{} is {}: {}", t.kind, t.to, t.message);
            self.recorder.record(
                t.at,
                ObjectRef::node(&node, self.node_uid.clone()),
                event_type,
                &t.reason,
                &message,
            );
        }
    }

    /// True when the API server has everything the loop wants it to have.
    pub fn settled(&self, now: SystemTime) -> bool {
        self.tracker.is_resumed()
            && self.tracker.due(now).is_none()
            && self.recorder.next_due().is_none()
            && self.marks_due().is_none()
    }

    /// Labels and taints that differ from the Node's (None: nothing to do).
    fn marks_due(&self) -> Option<MarksDue> {
        let mut labels = marks::labels(&self.marks, self.tracker.conditions());
        if self.marks.contract_labels {
            // Before the classes are judged the Node's contract labels stay as they are.
            let contracts = self.contracts.wanted().unwrap_or_else(|| {
                self.labels_on_node
                    .iter()
                    .filter(|(k, _)| crate::contract::is_contract_label(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            });
            labels.extend(contracts);
        }
        let labels = (labels != self.labels_on_node).then_some(labels);
        // Without taint kinds nothing is tainted, and nothing is untainted
        // either: that needs the taint credential, which is then absent.
        let taints = if self.marks.taint_kinds.is_empty() {
            None
        } else {
            let mut wanted = marks::taints(&self.marks, self.tracker.conditions());
            wanted.sort();
            (wanted != self.taints_on_node).then_some(wanted)
        };
        let devices = self
            .devices_wanted
            .as_ref()
            .map(UnhealthyDevices::encode)
            .filter(|v| *v != self.devices_on_node);
        (labels.is_some() || taints.is_some() || devices.is_some()).then_some(MarksDue {
            labels,
            taints,
            devices,
        })
    }

    /// When the loop next has something to do (None: nothing until new results).
    pub fn next_wake(&self, now: SystemTime) -> Option<SystemTime> {
        let node = if let Some(t) = self.node_retry.waiting(now) {
            Some(t)
        } else if !self.tracker.is_resumed()
            || self.tracker.due(now).is_some()
            || self.marks_due().is_some()
        {
            Some(now)
        } else {
            self.tracker.next_heartbeat()
        };
        // Events wait for the Node's read (their Node's UID comes from it),
        // which `node` already wakes for.
        let events = self
            .recorder
            .next_due()
            .filter(|_| self.tracker.is_resumed())
            .map(|due| self.event_retry.waiting(now).map_or(due, |t| t.max(due)));
        [node, events].into_iter().flatten().min()
    }

    /// Do what is due at `now`. On failure the loop has already scheduled
    /// its retry (see `next_wake`); the error is returned for the caller to
    /// log or, if fatal, to stop on. The Node's writes and the Events are
    /// tried independently; when both fail, the Node's error is returned
    /// (an outage fails both the same way) and the flush counts once.
    pub async fn flush(&mut self, now: SystemTime) -> Result<(), ReportError> {
        // Fleet-safe load (ratelimit.rs): the first request waits for this
        // node's slot in the start window, a status change for its slot in
        // the change window; every request spends a token (`Limited`).
        if self.node_retry.ready(now) {
            if let Some(at) = self.pacing.hold(now, || self.tracker.due(now).is_some()) {
                self.node_retry.hold_until(now, at);
                self.event_retry.hold_until(now, at);
                return Ok(());
            }
        }
        self.reporter.set_now(now);
        let node = if self.node_retry.ready(now) {
            let result = self.flush_node(now).await;
            if result.is_ok() {
                self.pacing.flushed();
            }
            self.node_retry.settle(now, result)
        } else {
            Ok(())
        };
        let events = if self.tracker.is_resumed() && self.event_retry.ready(now) {
            let result = self.flush_events(now).await;
            self.event_retry.settle(now, result)
        } else {
            Ok(())
        };
        let result = node.and(events);
        if result.is_err() {
            self.stats.failures += 1;
        }
        result
    }

    async fn read_node(&mut self) -> Result<crate::reporter::NodeState, ReportError> {
        let state = self.reporter.read_node().await?;
        self.stats.node_reads += 1;
        self.node_uid = state.uid.clone();
        self.labels_on_node = state.labels.clone();
        self.taints_on_node = state.taints.clone();
        self.taints_on_node.sort();
        self.devices_on_node = state.unhealthy_devices.clone();
        Ok(state)
    }

    async fn flush_node(&mut self, now: SystemTime) -> Result<(), ReportError> {
        if !self.tracker.is_resumed() {
            let state = self.read_node().await?;
            if !self.contracts.is_resumed() {
                let hysteresis = self.tracker.policy().hysteresis;
                let transitions = self.contracts.resume(&state.labels, hysteresis);
                self.on_label_transitions(transitions);
            }
            let transitions = self.tracker.resume(state.conditions);
            self.on_transitions(transitions);
        }
        if let Some(update) = self.tracker.due(now) {
            let result = match self.reporter.patch_status(&update).await {
                Err(ReportError::Conflict { .. }) => {
                    // Our patch carries no resourceVersion, so a 409 means the
                    // object changed under us in a way the server could not
                    // merge: re-read (the Node may have been re-created) and
                    // retry once. Our own types stay ours.
                    self.read_node().await?;
                    self.reporter.patch_status(&update).await
                }
                r => r,
            };
            result?;
            self.tracker.written(&update);
            self.stats.status_writes += 1;
        }
        if let Some(MarksDue {
            labels,
            taints,
            devices,
        }) = self.marks_due()
        {
            if let Some(labels) = labels {
                let body = marks::label_patch(&self.labels_on_node, &labels);
                self.reporter.patch_labels(&body).await?;
                self.labels_on_node = labels;
                self.stats.label_writes += 1;
            }
            if let Some(taints) = taints {
                self.reporter.set_taints(&taints).await?;
                self.taints_on_node = taints;
                self.stats.taint_writes += 1;
            }
            if let (Some(value), Some(wanted)) = (devices, &self.devices_wanted) {
                self.reporter.patch_labels(&wanted.node_patch()).await?;
                tracing::info!(
                    node = %self.reporter.node(),
                    annotation = super::device_health::UNHEALTHY_DEVICES,
                    unhealthy_devices = value.as_deref().unwrap_or(""),
                    "unhealthy GPUs published on the Node"
                );
                self.devices_on_node = value;
                self.stats.label_writes += 1;
            }
        }
        Ok(())
    }

    /// Each due Event on its own: a refusal drops that one and the rest go
    /// on; a failure that may pass (5xx, 429, timeout, connection) stops the
    /// batch, since the API server is unwell or asked us to slow down, and
    /// every unsent write stays pending for the Events' retry.
    async fn flush_events(&mut self, now: SystemTime) -> Result<(), ReportError> {
        let mut writes = self.recorder.due(now).into_iter();
        while let Some(write) = writes.next() {
            match self.reporter.write_event(&write).await {
                // A create answered 409 already exists (an earlier response was lost).
                Ok(()) | Err(ReportError::Conflict { .. }) => {
                    self.recorder.written(&write);
                    self.stats.event_writes += 1;
                }
                Err(ReportError::EventGone { .. }) => self.recorder.lost(&write, now),
                Err(e) => match e.refusal() {
                    Some(reason) => {
                        // Handled here, so logged here, once: the key is forgotten.
                        let key = write.key();
                        tracing::warn!(
                            kind = WriteKind::Event.as_str(),
                            reason = %reason,
                            namespace = key.object.event_namespace(),
                            object = %key.object.name,
                            event_reason = %key.reason,
                            error = %e,
                            "event refused by the API server for good; dropped"
                        );
                        self.recorder.dropped(&write);
                        self.stats.events_dropped += 1;
                        self.dropped.push(Dropped {
                            kind: WriteKind::Event,
                            reason,
                        });
                    }
                    None => {
                        for unsent in std::iter::once(write).chain(writes) {
                            self.recorder.failed(&unsent);
                        }
                        return Err(e);
                    }
                },
            }
        }
        Ok(())
    }
}

/// The daemon's reporter: every check round arrives on `rounds` (each one
/// counts towards hysteresis, even when equal to the one before), the API
/// server is brought up to date on the real clock; the checks never wait on
/// it (their sender uses `try_send`). What the pods watcher says (Events
/// about pods, the RuntimeClass contract verdicts) arrives on `pods` and
/// goes out with the node's; the Node as the pods
/// watcher's watch of it sees it on `nodes` (see [`ReportLoop::node_seen`]);
/// a reloaded policy on `policy`. `on_error` sees each failed flush (the loop is moved into the
/// task, so this is how the daemon counts them while it runs), `on_drop`
/// each write refused for good (already journaled). Returns the
/// loop when the rounds' sender is dropped.
pub async fn run<R: Reporter>(
    mut lp: ReportLoop<R>,
    mut rounds: tokio::sync::mpsc::Receiver<RoundNews>,
    mut nodes: Option<tokio::sync::mpsc::Receiver<NodeState>>,
    mut policy: Option<tokio::sync::watch::Receiver<Policy>>,
    mut resume: Option<Resume>,
    mut on_error: impl FnMut(&ReportError),
    mut on_drop: impl FnMut(Dropped),
) -> ReportLoop<R> {
    let mut heard_count = 0u64;
    loop {
        let now = SystemTime::now();
        let flushed = lp.flush(now).await;
        lp.take_dropped().into_iter().for_each(&mut on_drop);
        if let Err(e) = flushed {
            on_error(&e);
            // Handled here (retried on the loop's schedule), so logged here.
            if e.is_fatal() {
                tracing::error!(error = %e, "reporting failed; retrying with backoff");
            } else {
                tracing::warn!(error = %e, "reporting failed; retrying");
            }
        }
        let wait = lp
            .next_wake(now)
            .map(|t| t.duration_since(SystemTime::now()).unwrap_or_default())
            .unwrap_or(Duration::from_secs(3600));
        tokio::select! {
            round = rounds.recv() => {
                let Some(round) = round else {
                    return lp;
                };
                let now = SystemTime::now();
                // The conditions first, then what explains them.
                if !round.conditions.is_empty() {
                    lp.observe(now, &round.conditions);
                }
                for news in round.news {
                    match news {
                        PodsNews::Event(e) => lp.record_pod_event(now, &e),
                        PodsNews::Contracts(verdicts) => lp.observe_contracts(now, &verdicts),
                        PodsNews::UnhealthyDevices(devices) => lp.observe_devices(devices),
                    }
                }
            }
            Some(n) = next_node(&mut nodes) => {
                lp.node_seen(&n);
            }
            Some(p) = next_policy(&mut policy) => {
                tracing::info!(heartbeat_s = p.heartbeat.as_secs(), "reporter policy reloaded");
                lp.set_policy(p);
            }
            Some(within) = next_heard(&mut resume) => {
                heard_count += 1;
                let u = ratelimit::unit(resume.as_ref().map_or(0, |r| r.seed), heard_count);
                if lp.server_answered(SystemTime::now(), within, u) {
                    tracing::debug!("the API server answered again; the reporter's retry comes sooner");
                }
            }
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// What cuts a failed write's backoff short: the API server heard answering
/// another request of this process (a watch's list, a probe).
#[derive(Debug)]
pub struct Resume {
    /// Bumped on each success heard (`nodeproof_apiclient::client::Answered`).
    pub heard: tokio::sync::watch::Receiver<u64>,
    /// The retry goes within this of the success, at this agent's draw.
    pub within: Duration,
    /// This agent's draws.
    pub seed: u64,
}

/// The next success heard; pending forever without a source.
async fn next_heard(resume: &mut Option<Resume>) -> Option<Duration> {
    match resume {
        Some(r) => match r.heard.changed().await {
            Ok(()) => Some(r.within),
            Err(_) => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// The next reloaded policy; pending forever without a source (or once it
/// ended), so the loop never spins on a closed channel.
async fn next_policy(policy: &mut Option<tokio::sync::watch::Receiver<Policy>>) -> Option<Policy> {
    match policy {
        Some(rx) => match rx.changed().await {
            Ok(()) => Some(rx.borrow_and_update().clone()),
            Err(_) => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// The next Node seen; pending forever without a source (or once it ended).
async fn next_node(
    nodes: &mut Option<tokio::sync::mpsc::Receiver<NodeState>>,
) -> Option<NodeState> {
    match nodes {
        Some(rx) => match rx.recv().await {
            Some(n) => Some(n),
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// One message to the reporter: a check round's conditions and the news
/// found with it, applied in that order, so a pod's Event and the condition
/// it explains never arrive in either order by a race of two channels.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoundNews {
    pub conditions: Vec<Condition>,
    pub news: Vec<PodsNews>,
}

impl From<Vec<Condition>> for RoundNews {
    /// A round of conditions alone.
    fn from(conditions: Vec<Condition>) -> Self {
        RoundNews {
            conditions,
            news: Vec::new(),
        }
    }
}

/// What the pods watcher and the GPU probe hand the daemon's reporter with
/// their rounds.
#[derive(Debug, Clone, PartialEq)]
pub enum PodsNews {
    /// A finding or denials on a pod: one Event.
    Event(PodEvent),
    /// One round's verdicts of every annotated RuntimeClass.
    Contracts(Vec<ContractVerdict>),
    /// The GPUs the GPU probe judged unhealthy (sent by the probe, when the
    /// set changes): the Node's `gpu.nodeproof.dev/unhealthy-devices`.
    UnhealthyDevices(UnhealthyDevices),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let mut b = Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(20),
            attempt: 0,
            state: 42,
        };
        let delays: Vec<_> = (0..12).map(|_| b.next()).collect();
        // Attempt n in [2^n, 1.5 * 2^n] s, 2^n capped at 20 s.
        for (n, d) in delays.iter().enumerate() {
            let exp = Duration::from_secs(1 << n.min(16)).min(Duration::from_secs(20));
            assert!(*d >= exp && *d <= exp.mul_f64(1.5), "attempt {n}: {d:?}");
        }
        assert!(delays[3] >= Duration::from_secs(8));
        // Retries at the cap do not repeat one value.
        assert!(delays[6..].windows(2).any(|w| w[0] != w[1]), "{delays:?}");
        b.reset();
        assert!(b.next() <= Duration::from_millis(1500));
    }

    /// A retry pending when the clock steps back an hour is due at once,
    /// not an hour later.
    #[test]
    fn a_pending_retry_does_not_grow_by_a_clock_step_back() {
        let t = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s);
        let mut r = Retry::new(&LoopConfig::default(), 7);
        let failed = r.settle(
            t(3600),
            Err(ReportError::Timeout {
                op: "patch node status",
                node: "n".into(),
                after: Duration::from_secs(10),
            }),
        );
        assert!(failed.is_err());
        assert!(!r.ready(t(3600)));
        assert!(r.waiting(t(3600)).is_some());
        assert!(r.ready(t(10)), "stepped back an hour: due now");
        assert_eq!(r.waiting(t(10)), None);
        r.hold_until(t(10), t(40));
        assert!(!r.ready(t(20)));
        assert!(r.ready(t(40)));
    }

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s)
    }

    fn timeout() -> ReportError {
        ReportError::Timeout {
            op: "patch node status",
            node: "n".into(),
            after: Duration::from_secs(10),
        }
    }

    #[test]
    fn a_failure_backoff_ends_when_the_server_is_heard_and_starts_over() {
        let config = LoopConfig {
            backoff_cap: Duration::from_secs(20),
            ..LoopConfig::default()
        };
        let mut r = Retry::new(&config, 7);
        for _ in 0..6 {
            let _ = r.settle(t(0), Err(timeout()));
        }
        // Grown to 20..30 s.
        assert!(r.waiting(t(0)).unwrap() >= t(20));
        assert!(r.server_answered(t(1), t(3)));
        assert_eq!(r.waiting(t(1)), Some(t(3)));
        assert!(r.ready(t(3)));
        // Heard again later: never pushed back.
        assert!(!r.server_answered(t(2), t(5)));
        assert_eq!(r.waiting(t(2)), Some(t(3)));
        // A failure after that backs off from the start (1..1.5 s).
        let _ = r.settle(t(3), Err(timeout()));
        assert!(r.waiting(t(3)).unwrap() <= t(3) + Duration::from_millis(1500));
    }

    #[test]
    fn a_retry_after_and_a_pacing_hold_are_kept_when_the_server_is_heard() {
        let mut r = Retry::new(&LoopConfig::default(), 7);
        let throttled = ReportError::Throttled {
            op: "patch node status",
            node: "n".into(),
            retry_after: Some(Duration::from_secs(30)),
        };
        let _ = r.settle(t(0), Err(throttled));
        assert!(!r.server_answered(t(1), t(2)));
        assert_eq!(r.waiting(t(1)), Some(t(30)));
        let mut r = Retry::new(&LoopConfig::default(), 7);
        r.hold_until(t(0), t(25));
        assert!(!r.server_answered(t(1), t(2)));
        assert_eq!(r.waiting(t(1)), Some(t(25)));
        // A hold is what a new Node's first write skips.
        r.release_hold(t(1));
        assert!(r.ready(t(1)));
    }
}
