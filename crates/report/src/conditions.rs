//! Desired node conditions from check results: hysteresis, restart
//! continuity, heartbeat and stale cleanup. Pure: every function takes the
//! time as an argument, so tests (and the outage scenario) run on a
//! simulated clock.
//!
//! The tracker holds what nodeproof believes its conditions on the Node are
//! (or should be). It never holds a queue of writes: whatever is due is built
//! from the latest state, so after an outage one write carries the final state.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use nodeproof_findings::{Condition, ConditionStatus, ConditionType};

/// A condition as it is (or should be) on the Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCondition {
    /// Only nodeproof's own types: others' conditions are never read into one.
    pub kind: ConditionType,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
    pub last_transition: SystemTime,
    pub last_heartbeat: SystemTime,
}

impl NodeCondition {
    fn is_good(&self) -> bool {
        self.status == ConditionStatus::True
    }
}

/// How many consecutive results it takes to change a condition's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hysteresis {
    /// Consecutive bad (False/Unknown) results before a True condition turns bad.
    pub to_bad: u32,
    /// Consecutive good results before a bad condition turns True.
    pub to_good: u32,
}

impl Hysteresis {
    /// No smoothing: the latest result wins. What a one-shot run uses, since it
    /// has no history to smooth over.
    pub const IMMEDIATE: Hysteresis = Hysteresis {
        to_bad: 1,
        to_good: 1,
    };
}

impl Default for Hysteresis {
    /// Two bad results to go False (one slow check does not page anyone),
    /// three good ones to recover (a recovering GPU has to stay up).
    fn default() -> Self {
        Hysteresis {
            to_bad: 2,
            to_good: 3,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// A write refreshes `lastHeartbeatTime` at least this often; nothing is
    /// written in between unless something changed.
    pub heartbeat: Duration,
    pub hysteresis: Hysteresis,
    /// Per condition type overrides of `hysteresis`.
    pub per_kind: BTreeMap<ConditionType, Hysteresis>,
    /// The condition types the current configuration produces. Owned types
    /// found on the Node outside this set are removed.
    pub enabled: BTreeSet<ConditionType>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            heartbeat: Duration::from_secs(300),
            hysteresis: Hysteresis::default(),
            per_kind: BTreeMap::new(),
            enabled: ConditionType::ALL.into_iter().collect(),
        }
    }
}

impl Policy {
    fn hysteresis_for(&self, kind: ConditionType) -> Hysteresis {
        self.per_kind.get(&kind).copied().unwrap_or(self.hysteresis)
    }
}

/// A status change of one condition; each becomes a Node event and a journal entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub kind: ConditionType,
    /// None for the first time nodeproof sets this condition on this Node.
    pub from: Option<ConditionStatus>,
    pub to: ConditionStatus,
    pub reason: String,
    pub message: String,
    pub at: SystemTime,
}

/// One status write: the full set of own conditions, plus the stale ones to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusUpdate {
    pub conditions: Vec<NodeCondition>,
    pub remove: Vec<ConditionType>,
    pub at: SystemTime,
    generation: u64,
}

impl StatusUpdate {
    /// The strategic-merge patch for `nodes/<name>/status`. `status.conditions`
    /// merges by `type`, so other components' conditions are untouched and
    /// nothing has to be read first (a node identity may not GET the
    /// subresource); `$patch: delete` removes a stale type.
    pub fn patch_body(&self) -> Value {
        let mut list: Vec<Value> = self
            .conditions
            .iter()
            .map(|c| {
                json!({
                    "type": c.kind,
                    "status": c.status,
                    "reason": c.reason,
                    "message": c.message,
                    "lastTransitionTime": rfc3339(c.last_transition),
                    "lastHeartbeatTime": rfc3339(c.last_heartbeat),
                })
            })
            .collect();
        list.extend(
            self.remove
                .iter()
                .map(|kind| json!({ "type": kind, "$patch": "delete" })),
        );
        json!({ "status": { "conditions": list } })
    }
}

/// RFC 3339 at second precision, as `metav1.Time` serializes.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs_f64().ceil() as i64),
    };
    match k8s_openapi::jiff::Timestamp::from_second(secs) {
        Ok(ts) => ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Err(_) => "1970-01-01T00:00:00Z".into(),
    }
}

#[derive(Debug, Clone)]
struct Entry {
    published: NodeCondition,
    /// Consecutive results whose health differs from `published`.
    streak: u32,
}

/// Observations made before the Node's current conditions were read, replayed
/// on top of them so hysteresis and transition times carry across a restart.
/// Bounded: only the last few rounds can matter to hysteresis.
const PRE_RESUME_ROUNDS: usize = 16;

#[derive(Debug, Clone)]
pub struct Tracker {
    policy: Policy,
    entries: BTreeMap<ConditionType, Entry>,
    stale: BTreeSet<ConditionType>,
    resumed: bool,
    before_resume: VecDeque<(SystemTime, Vec<Condition>)>,
    dirty: bool,
    /// Bumped on every change, so a write built from an older state does not
    /// mark a newer one as written.
    generation: u64,
    last_write: Option<SystemTime>,
    /// Heartbeat jitter (`ratelimit::jittered_heartbeat`): ± this percentage
    /// of `policy.heartbeat`, drawn per beat from the seed and the time of
    /// the last write. 0: every beat exactly `policy.heartbeat` apart.
    heartbeat_jitter_pct: u32,
    heartbeat_seed: u64,
}

impl Tracker {
    pub fn new(policy: Policy) -> Self {
        Tracker {
            policy,
            entries: BTreeMap::new(),
            stale: BTreeSet::new(),
            resumed: false,
            before_resume: VecDeque::new(),
            dirty: false,
            generation: 0,
            last_write: None,
            heartbeat_jitter_pct: 0,
            heartbeat_seed: 0,
        }
    }

    /// Jitter each heartbeat period by ± `pct` %, seeded (per node) by `seed`.
    pub fn with_heartbeat_jitter(mut self, pct: u32, seed: u64) -> Self {
        self.heartbeat_jitter_pct = pct;
        self.heartbeat_seed = seed;
        self
    }

    /// The heartbeat period that follows a write at `last`.
    fn heartbeat_after(&self, last: SystemTime) -> Duration {
        let salt = last
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let u = crate::ratelimit::unit(self.heartbeat_seed, salt);
        crate::ratelimit::jittered_heartbeat(self.policy.heartbeat, self.heartbeat_jitter_pct, u)
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// A reloaded policy: streaks and published state carry over, so a
    /// condition half-way through its hysteresis is judged by the new one.
    pub fn set_policy(&mut self, policy: Policy) {
        self.policy = policy;
    }

    pub fn is_resumed(&self) -> bool {
        self.resumed
    }

    /// Adopt the conditions found on the Node (a GET of the Node; others'
    /// types are ignored): their transition times are kept, so a restart
    /// neither flaps nor shows a healthy gap. Results observed before this
    /// call are replayed on top; their transitions are returned.
    ///
    /// Calling it again (after a 409) re-reads: the Node's view replaces ours.
    pub fn resume(&mut self, on_node: Vec<NodeCondition>) -> Vec<Transition> {
        let mut heartbeats = Vec::new();
        self.entries.clear();
        self.stale.clear();
        for c in on_node {
            if self.policy.enabled.contains(&c.kind) {
                heartbeats.push(c.last_heartbeat);
                self.entries.insert(
                    c.kind,
                    Entry {
                        published: c,
                        streak: 0,
                    },
                );
            } else {
                self.stale.insert(c.kind);
            }
        }
        // The oldest heartbeat on the Node decides when the next one is due.
        self.last_write = heartbeats.into_iter().min();
        self.dirty = !self.stale.is_empty();
        self.generation += 1;
        self.resumed = true;
        let replay: Vec<_> = self.before_resume.drain(..).collect();
        replay
            .into_iter()
            .flat_map(|(at, observed)| self.observe(at, &observed))
            .collect()
    }

    /// Fold one round of check results in; returns the status transitions.
    pub fn observe(&mut self, now: SystemTime, observed: &[Condition]) -> Vec<Transition> {
        if !self.resumed {
            if self.before_resume.len() == PRE_RESUME_ROUNDS {
                self.before_resume.pop_front();
            }
            self.before_resume.push_back((now, observed.to_vec()));
            return Vec::new();
        }
        let mut transitions = Vec::new();
        for obs in observed {
            if !self.policy.enabled.contains(&obs.kind) {
                continue;
            }
            let hysteresis = self.policy.hysteresis_for(obs.kind);
            let good = obs.status == ConditionStatus::True;
            let Some(entry) = self.entries.get_mut(&obs.kind) else {
                // Nothing to smooth against: the first result is the state.
                self.entries.insert(
                    obs.kind,
                    Entry {
                        published: NodeCondition {
                            kind: obs.kind,
                            status: obs.status,
                            reason: obs.reason.clone(),
                            message: obs.message.clone(),
                            last_transition: now,
                            last_heartbeat: now,
                        },
                        streak: 0,
                    },
                );
                transitions.push(transition(None, obs, now));
                self.dirty = true;
                self.generation += 1;
                continue;
            };
            let published = &mut entry.published;
            if good == published.is_good() {
                entry.streak = 0;
                if published.status != obs.status {
                    // False <-> Unknown: same health, but a real status change.
                    transitions.push(transition(Some(published.status), obs, now));
                    published.status = obs.status;
                    published.last_transition = now;
                } else if published.reason == obs.reason && published.message == obs.message {
                    continue;
                }
                published.reason = obs.reason.clone();
                published.message = obs.message.clone();
            } else {
                entry.streak += 1;
                let needed = if good {
                    hysteresis.to_good
                } else {
                    hysteresis.to_bad
                };
                if entry.streak < needed.max(1) {
                    continue;
                }
                entry.streak = 0;
                transitions.push(transition(Some(published.status), obs, now));
                published.status = obs.status;
                published.reason = obs.reason.clone();
                published.message = obs.message.clone();
                published.last_transition = now;
            }
            self.dirty = true;
            self.generation += 1;
        }
        transitions
    }

    /// The write due at `now`, if any: something changed, or the heartbeat
    /// is due. Nothing before `resume` (a write then could reset transition
    /// times the Node already has).
    pub fn due(&self, now: SystemTime) -> Option<StatusUpdate> {
        if !self.resumed || (self.entries.is_empty() && self.stale.is_empty()) {
            return None;
        }
        // A clock stepped back before the last write (an NTP step, a VM
        // restored from a snapshot) makes the heartbeat due now: the API
        // server and the controllers compare it with their own clocks, and
        // waiting for ours to catch up would leave it stale for as long as
        // the step.
        let heartbeat_due = self
            .last_write
            .is_none_or(|t| now < t || now >= t + self.heartbeat_after(t));
        if !self.dirty && !heartbeat_due {
            return None;
        }
        Some(StatusUpdate {
            conditions: self
                .entries
                .values()
                .map(|e| NodeCondition {
                    last_heartbeat: now,
                    ..e.published.clone()
                })
                .collect(),
            remove: self.stale.iter().copied().collect(),
            at: now,
            generation: self.generation,
        })
    }

    /// When the next heartbeat is due (None: nothing to write yet).
    pub fn next_heartbeat(&self) -> Option<SystemTime> {
        if !self.resumed || self.entries.is_empty() {
            return None;
        }
        let last = self.last_write?;
        Some(last + self.heartbeat_after(last))
    }

    /// Record that `update` reached the API server.
    pub fn written(&mut self, update: &StatusUpdate) {
        self.last_write = Some(update.at);
        for c in &update.conditions {
            if let Some(e) = self.entries.get_mut(&c.kind) {
                e.published.last_heartbeat = update.at;
            }
        }
        for kind in &update.remove {
            self.stale.remove(kind);
        }
        if update.generation == self.generation {
            self.dirty = !self.stale.is_empty();
        }
    }

    /// The Node lost what was written (re-registered, or another client
    /// removed nodeproof's conditions): write everything again now, with
    /// the transition times kept (they describe nodeproof's findings, not
    /// the Node object).
    pub fn rewrite(&mut self) {
        if self.resumed && !self.entries.is_empty() {
            self.dirty = true;
            self.generation += 1;
        }
    }

    /// The conditions as nodeproof wants them now.
    pub fn conditions(&self) -> impl Iterator<Item = &NodeCondition> {
        self.entries.values().map(|e| &e.published)
    }
}

fn transition(from: Option<ConditionStatus>, obs: &Condition, at: SystemTime) -> Transition {
    Transition {
        kind: obs.kind,
        from,
        to: obs.status,
        reason: obs.reason.clone(),
        message: obs.message.clone(),
        at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn cond(kind: &str, ok: bool) -> Condition {
        Condition {
            kind: ConditionType::parse(kind).expect("an owned type"),
            status: ConditionStatus::from_bool(ok),
            reason: if ok {
                "ProfilesLoad"
            } else {
                "ProfileStartFails"
            }
            .into(),
            message: if ok {
                "all good"
            } else {
                "1 of 3 profiles fail"
            }
            .into(),
        }
    }

    fn resumed(policy: Policy) -> Tracker {
        let mut tr = Tracker::new(policy);
        assert!(tr.resume(Vec::new()).is_empty());
        tr
    }

    #[test]
    fn first_result_is_published_at_once_and_written() {
        let mut tr = resumed(Policy::default());
        let tx = tr.observe(t(0), &[cond("SeccompProfilesReady", false)]);
        assert_eq!(tx.len(), 1);
        assert_eq!(tx[0].from, None);
        let up = tr.due(t(0)).expect("first write");
        assert_eq!(up.conditions[0].status, ConditionStatus::False);
        assert_eq!(up.conditions[0].last_transition, t(0));
        tr.written(&up);
        assert!(tr.due(t(1)).is_none());
    }

    #[test]
    fn a_clock_stepped_back_makes_the_heartbeat_due_now_not_after_the_step() {
        let mut tr = resumed(Policy::default());
        tr.observe(t(3600), &[cond("SeccompProfilesReady", true)]);
        tr.written(&tr.due(t(3600)).unwrap());
        assert!(tr.due(t(3630)).is_none());
        // An hour back: written now, stamped with the clock as it is.
        let up = tr.due(t(30)).expect("a heartbeat right after the step");
        assert_eq!(up.conditions[0].last_heartbeat, t(30));
        tr.written(&up);
        // The period holds again from there.
        assert!(tr.due(t(60)).is_none());
        assert!(tr.due(t(400)).is_some());
    }

    #[test]
    fn heartbeat_only_when_due_and_keeps_transition_time() {
        let mut tr = resumed(Policy::default());
        tr.observe(t(0), &[cond("SeccompProfilesReady", true)]);
        tr.written(&tr.due(t(0)).unwrap());
        for s in (30..300).step_by(30) {
            tr.observe(t(s), &[cond("SeccompProfilesReady", true)]);
            assert!(tr.due(t(s)).is_none(), "no write at {s}s");
        }
        let up = tr.due(t(300)).expect("heartbeat");
        assert_eq!(up.conditions[0].last_heartbeat, t(300));
        assert_eq!(up.conditions[0].last_transition, t(0));
    }

    #[test]
    fn hysteresis_filters_flaps_and_needs_streaks() {
        let mut tr = resumed(Policy::default()); // 2 to bad, 3 to good
        tr.observe(t(0), &[cond("GPUHealthy", true)]);
        tr.written(&tr.due(t(0)).unwrap());
        // Alternating input never reaches a streak of 2.
        for i in 1..=10 {
            let tx = tr.observe(t(i * 10), &[cond("GPUHealthy", i % 2 == 0)]);
            assert!(tx.is_empty(), "flap at round {i}");
        }
        assert!(tr.due(t(105)).is_none());
        assert!(tr.observe(t(110), &[cond("GPUHealthy", false)]).is_empty());
        let tx = tr.observe(t(120), &[cond("GPUHealthy", false)]);
        assert_eq!(tx.len(), 1);
        assert_eq!(tx[0].to, ConditionStatus::False);
        let up = tr.due(t(120)).unwrap();
        assert_eq!(up.conditions[0].last_transition, t(120));
        tr.written(&up);
        for s in [130, 140] {
            assert!(tr.observe(t(s), &[cond("GPUHealthy", true)]).is_empty());
        }
        assert_eq!(tr.observe(t(150), &[cond("GPUHealthy", true)]).len(), 1);
    }

    #[test]
    fn message_change_rewrites_without_new_transition_time() {
        let mut tr = resumed(Policy::default());
        tr.observe(t(0), &[cond("SeccompProfilesReady", false)]);
        tr.written(&tr.due(t(0)).unwrap());
        let mut c = cond("SeccompProfilesReady", false);
        c.message = "2 of 3 profiles fail".into();
        assert!(tr.observe(t(30), &[c]).is_empty());
        let up = tr.due(t(30)).expect("content changed");
        assert_eq!(up.conditions[0].message, "2 of 3 profiles fail");
        assert_eq!(up.conditions[0].last_transition, t(0));
    }

    #[test]
    fn restart_keeps_transition_time_and_has_no_gap() {
        let on_node = vec![NodeCondition {
            kind: ConditionType::GPUHealthy,
            status: ConditionStatus::False,
            reason: "XidError".into(),
            message: "xid 79".into(),
            last_transition: t(0),
            last_heartbeat: t(200),
        }];
        let mut tr = Tracker::new(Policy::default());
        // Checks ran before the Node could be read: nothing is written yet.
        tr.observe(t(290), &[cond("GPUHealthy", true)]);
        assert!(tr.due(t(290)).is_none());
        // One good result does not undo a False (3 needed): no flap.
        assert!(tr.resume(on_node).is_empty());
        assert!(tr.due(t(300)).is_none(), "heartbeat due at 500");
        tr.observe(t(310), &[cond("GPUHealthy", true)]);
        let tx = tr.observe(t(320), &[cond("GPUHealthy", true)]);
        assert_eq!(tx.len(), 1);
        assert_eq!(tx[0].from, Some(ConditionStatus::False));
        let up = tr.due(t(320)).unwrap();
        assert_eq!(up.conditions.len(), 1, "others' conditions never written");
    }

    #[test]
    fn restart_with_same_status_keeps_everything() {
        let mut tr = Tracker::new(Policy::default());
        tr.resume(vec![NodeCondition {
            kind: ConditionType::SeccompProfilesReady,
            status: ConditionStatus::True,
            reason: "ProfilesLoad".into(),
            message: "all good".into(),
            last_transition: t(0),
            last_heartbeat: t(100),
        }]);
        assert!(tr
            .observe(t(120), &[cond("SeccompProfilesReady", true)])
            .is_empty());
        assert!(tr.due(t(120)).is_none());
        let up = tr.due(t(400)).unwrap();
        assert_eq!(up.conditions[0].last_transition, t(0));
    }

    #[test]
    fn disabled_owned_types_are_removed_once() {
        let mut policy = Policy::default();
        policy.enabled.remove(&ConditionType::GPUHealthy);
        let mut tr = Tracker::new(policy);
        tr.resume(vec![NodeCondition {
            kind: ConditionType::GPUHealthy,
            status: ConditionStatus::True,
            reason: "Healthy".into(),
            message: String::new(),
            last_transition: t(0),
            last_heartbeat: t(0),
        }]);
        tr.observe(t(10), &[cond("GPUHealthy", false)]);
        let up = tr.due(t(10)).expect("stale cleanup");
        assert_eq!(up.remove, vec![ConditionType::GPUHealthy]);
        assert_eq!(
            up.patch_body(),
            json!({"status":{"conditions":[{"type":"GPUHealthy","$patch":"delete"}]}})
        );
        tr.written(&up);
        assert!(tr.due(t(20)).is_none());
        assert!(tr.due(t(10_000)).is_none(), "nothing left to heartbeat");
    }

    #[test]
    fn a_write_of_an_older_state_leaves_the_newer_dirty() {
        let mut tr = resumed(Policy {
            hysteresis: Hysteresis::IMMEDIATE,
            ..Policy::default()
        });
        tr.observe(t(0), &[cond("GPUHealthy", true)]);
        let up = tr.due(t(0)).unwrap();
        tr.observe(t(1), &[cond("GPUHealthy", false)]);
        tr.written(&up);
        assert_eq!(
            tr.due(t(2)).unwrap().conditions[0].status,
            ConditionStatus::False
        );
    }

    #[test]
    fn patch_body_shape() {
        let mut tr = resumed(Policy::default());
        tr.observe(t(0), &[cond("SeccompProfilesReady", true)]);
        let body = tr.due(t(0)).unwrap().patch_body();
        assert_eq!(
            body,
            json!({"status":{"conditions":[{
                "type":"SeccompProfilesReady","status":"True","reason":"ProfilesLoad",
                "message":"all good",
                "lastTransitionTime":"2023-11-14T22:13:20Z",
                "lastHeartbeatTime":"2023-11-14T22:13:20Z"}]}})
        );
    }

    #[test]
    fn steady_healthy_node_writes_12_times_an_hour() {
        let mut tr = resumed(Policy::default());
        let mut writes = 0;
        for s in (0..3600).step_by(10) {
            tr.observe(t(s), &[cond("SeccompProfilesReady", true)]);
            if let Some(up) = tr.due(t(s)) {
                tr.written(&up);
                writes += 1;
            }
        }
        assert_eq!(writes, 12);
    }

    #[test]
    fn jittered_heartbeats_stay_in_the_band_and_average_the_period() {
        let mut tr = resumed(Policy::default()).with_heartbeat_jitter(10, 99);
        let mut writes = Vec::new();
        for s in 0..(10 * 3600) {
            if s % 10 == 0 {
                tr.observe(t(s), &[cond("SeccompProfilesReady", true)]);
            }
            if let Some(up) = tr.due(t(s)) {
                assert!(tr.next_heartbeat().is_none_or(|h| h <= t(s)));
                tr.written(&up);
                writes.push(s);
            }
        }
        let gaps: Vec<u64> = writes.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|g| (270..=331).contains(g)), "{gaps:?}");
        // Drawn per beat: not one fixed period.
        assert!(
            gaps.iter().any(|g| *g < 285) && gaps.iter().any(|g| *g > 315),
            "{gaps:?}"
        );
        // 10 hours at 300 s on average: 120 writes, give or take a few.
        assert!((114..=126).contains(&writes.len()), "{}", writes.len());
    }
}
