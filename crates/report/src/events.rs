//! Events like kubelet's recorder: deduplicated by (object, reason,
//! message) into one Event with a count and lastTimestamp, rate-limited per
//! key (a burst, then one write per interval), bounded in memory. Pure: the
//! time is an argument, and writing is the caller's job.
//!
//! Counts are kept even while writes are limited or failing; the next write
//! that goes out carries the accumulated count, so an outage loses nothing
//! but timeliness.
//!
//! Why not kube-runtime 5's `events::Recorder` (measured by
//! `cargo test -p nodeproof-cluster --test runtime_fit an_hour -- --nocapture`,
//! both against the test API server, which counts the requests): its
//! `publish` writes on every call, a create and then a JSON merge patch of
//! the `series`, with no rate limit (its 6-minute cache decides create or
//! patch, never whether to write). One Node's Event every 10 s for an hour
//! (360 occurrences) costs it 360 requests, this recorder 17 (the burst of
//! 5, one per 300 s, and the hour's last count), with the same count on the
//! API server. Its key also leaves the message out: a second message with
//! the same reason about the same object is patched into the first's series
//! and never written (tested there), where a `ProfileRejected` per file and
//! the gate's changing `SchedulingGated` need it kept. And it cannot carry
//! `metadata.annotations` (`PodEvent::annotations`, read back typed as
//! `denial_change::DenialChange`).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::conditions::rfc3339;
use strum::IntoStaticStr;

/// What the event is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    /// `Node` or `Pod`.
    pub kind: &'static str,
    /// Empty for a Node (its events go to `default`, as kubelet's do).
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
}

impl ObjectRef {
    pub fn node(name: &str, uid: Option<String>) -> Self {
        ObjectRef {
            kind: "Node",
            namespace: String::new(),
            name: name.into(),
            uid,
        }
    }

    /// The namespace the Event object lives in.
    pub fn event_namespace(&self) -> &str {
        if self.namespace.is_empty() {
            "default"
        } else {
            &self.namespace
        }
    }
}

/// An Event about a pod, said by another check (the pods watcher) and
/// written by the reporter with the node's own events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEvent {
    pub pod: ObjectRef,
    pub event_type: EventType,
    pub reason: &'static str,
    pub message: String,
    /// The Event's `metadata.annotations` (what a reader takes typed, as
    /// `denial_change::DenialChange`); empty for most.
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, IntoStaticStr)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventKey {
    pub object: ObjectRef,
    pub reason: String,
    pub message: String,
}

/// One core/v1 Event write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventWrite {
    /// POST `/api/v1/namespaces/{ns}/events`.
    Create {
        key: EventKey,
        name: String,
        event_type: EventType,
        count: u32,
        first: SystemTime,
        last: SystemTime,
        /// `metadata.annotations`, written with the Event (never patched:
        /// the key's message says the same).
        annotations: BTreeMap<String, String>,
    },
    /// PATCH (strategic merge) `/api/v1/namespaces/{ns}/events/{name}`.
    Update {
        key: EventKey,
        name: String,
        count: u32,
        last: SystemTime,
    },
}

impl EventWrite {
    pub fn key(&self) -> &EventKey {
        match self {
            EventWrite::Create { key, .. } | EventWrite::Update { key, .. } => key,
        }
    }

    pub fn name(&self) -> &str {
        match self {
            EventWrite::Create { name, .. } | EventWrite::Update { name, .. } => name,
        }
    }

    pub fn count(&self) -> u32 {
        match self {
            EventWrite::Create { count, .. } | EventWrite::Update { count, .. } => *count,
        }
    }

    /// The request body: a full core/v1 Event for a create, the fields that
    /// change for an update (what kubelet's recorder patches).
    pub fn body(&self, host: &str) -> Value {
        match self {
            EventWrite::Create {
                key,
                name,
                event_type,
                count,
                first,
                last,
                annotations,
            } => {
                let mut involved = json!({
                    "apiVersion": "v1",
                    "kind": key.object.kind,
                    "name": key.object.name,
                });
                if !key.object.namespace.is_empty() {
                    involved["namespace"] = json!(key.object.namespace);
                }
                if let Some(uid) = &key.object.uid {
                    involved["uid"] = json!(uid);
                }
                let mut metadata =
                    json!({ "name": name, "namespace": key.object.event_namespace() });
                if !annotations.is_empty() {
                    metadata["annotations"] = json!(annotations);
                }
                json!({
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": metadata,
                    "involvedObject": involved,
                    "reason": key.reason,
                    "message": key.message,
                    "type": event_type.as_str(),
                    "count": count,
                    "firstTimestamp": rfc3339(*first),
                    "lastTimestamp": rfc3339(*last),
                    "source": { "component": COMPONENT, "host": host },
                    "reportingComponent": COMPONENT,
                    "reportingInstance": host,
                })
            }
            EventWrite::Update { count, last, .. } => json!({
                "count": count,
                "lastTimestamp": rfc3339(*last),
            }),
        }
    }
}

/// `source.component` and `reportingComponent` of every Event.
pub const COMPONENT: &str = "nodeproof";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecorderConfig {
    /// Writes allowed per key at once.
    pub burst: u32,
    /// After the burst, one write per key per interval.
    pub interval: Duration,
    /// Keys remembered; the least recently seen is forgotten beyond this.
    pub max_keys: usize,
}

impl Default for RecorderConfig {
    /// Kubelet's spam filter allows 25 per source+object then 1 per 5 min;
    /// per (object, reason, message) a smaller burst is plenty.
    fn default() -> Self {
        RecorderConfig {
            burst: 5,
            interval: Duration::from_secs(300),
            max_keys: 1024,
        }
    }
}

/// How far short of a whole token `due` still writes: [`Recorder::next_due`]
/// names a time whole nanoseconds wide, so at that time the refill can fall
/// short by a rounding error, and the driver woken then would find nothing
/// to write. A millionth of a token is a third of a millisecond at the
/// default interval.
const TOKEN_SLACK: f64 = 1e-6;

#[derive(Debug, Clone)]
struct Entry {
    name: String,
    event_type: EventType,
    count: u32,
    /// The count the API server has (0: not created).
    acked: u32,
    created: bool,
    first: SystemTime,
    last: SystemTime,
    tokens: f64,
    refilled: SystemTime,
    annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
pub struct Recorder {
    config: RecorderConfig,
    entries: HashMap<EventKey, Entry>,
}

impl Recorder {
    pub fn new(config: RecorderConfig) -> Self {
        Recorder {
            config,
            entries: HashMap::new(),
        }
    }

    /// Count one occurrence; returns the key's count so far.
    pub fn record(
        &mut self,
        now: SystemTime,
        object: ObjectRef,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> u32 {
        self.record_annotated(now, object, event_type, reason, message, &BTreeMap::new())
    }

    /// [`Recorder::record`] of an Event that carries `annotations` (the
    /// first occurrence's are written; the message, part of the key, says
    /// the same thing, so a repeat's are the same).
    pub fn record_annotated(
        &mut self,
        now: SystemTime,
        object: ObjectRef,
        event_type: EventType,
        reason: &str,
        message: &str,
        annotations: &BTreeMap<String, String>,
    ) -> u32 {
        let key = EventKey {
            object,
            reason: reason.into(),
            message: message.into(),
        };
        if !self.entries.contains_key(&key) && self.entries.len() >= self.config.max_keys {
            self.forget_oldest();
        }
        let burst = self.config.burst as f64;
        let name = (!self.entries.contains_key(&key)).then(|| self.unused_name(&key.object, now));
        let entry = self.entries.entry(key).or_insert_with(|| Entry {
            name: name.unwrap_or_default(),
            event_type,
            count: 0,
            acked: 0,
            created: false,
            first: now,
            last: now,
            tokens: burst,
            refilled: now,
            annotations: annotations.clone(),
        });
        entry.count += 1;
        entry.last = now;
        entry.count
    }

    /// kubelet's name, `<object>.<nanoseconds hex>`, made unique among the
    /// Events held: two Events about one object said at one instant (a
    /// round's transitions share its time) would otherwise share a name, and
    /// the second create, answered 409 AlreadyExists, would pass for written.
    fn unused_name(&self, object: &ObjectRef, now: SystemTime) -> String {
        let base = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        (0u128..)
            .map(|bump| format!("{}.{:x}", object.name, base + bump))
            .find(|name| {
                !self.entries.iter().any(|(k, e)| {
                    e.name == *name && k.object.event_namespace() == object.event_namespace()
                })
            })
            .unwrap_or_default()
    }

    fn forget_oldest(&mut self) {
        if let Some(oldest) = self
            .entries
            .iter()
            .min_by_key(|(_, e)| e.last)
            .map(|(k, _)| k.clone())
        {
            self.entries.remove(&oldest);
        }
    }

    /// The writes the rate limit allows at `now`; each one spends a token.
    pub fn due(&mut self, now: SystemTime) -> Vec<EventWrite> {
        let interval = self.config.interval.as_secs_f64().max(f64::EPSILON);
        let burst = self.config.burst as f64;
        let mut writes = Vec::new();
        for (key, e) in &mut self.entries {
            if e.count == e.acked {
                continue;
            }
            let elapsed = now
                .duration_since(e.refilled)
                .unwrap_or_default()
                .as_secs_f64();
            e.tokens = (e.tokens + elapsed / interval).min(burst);
            e.refilled = now;
            if e.tokens < 1.0 - TOKEN_SLACK {
                continue;
            }
            e.tokens = (e.tokens - 1.0).max(0.0);
            writes.push(if e.created {
                EventWrite::Update {
                    key: key.clone(),
                    name: e.name.clone(),
                    count: e.count,
                    last: e.last,
                }
            } else {
                EventWrite::Create {
                    key: key.clone(),
                    name: e.name.clone(),
                    event_type: e.event_type,
                    count: e.count,
                    first: e.first,
                    last: e.last,
                    annotations: e.annotations.clone(),
                }
            });
        }
        // Oldest first, so the journal and the API server see the same order.
        writes.sort_by_key(|w| match w {
            EventWrite::Create { first, .. } => *first,
            EventWrite::Update { last, .. } => *last,
        });
        writes
    }

    /// The earliest time a pending key gets a token back (None: nothing pending).
    pub fn next_due(&self) -> Option<SystemTime> {
        let interval = self.config.interval.as_secs_f64();
        self.entries
            .values()
            .filter(|e| e.count > e.acked)
            .map(|e| {
                let missing = (1.0 - e.tokens).max(0.0);
                e.refilled + Duration::from_secs_f64(missing * interval)
            })
            .min()
    }

    /// The write reached the API server.
    pub fn written(&mut self, write: &EventWrite) {
        if let Some(e) = self.entries.get_mut(write.key()) {
            e.created = true;
            e.acked = e.acked.max(write.count());
        }
    }

    /// The write did not reach the API server: give its token back, so an
    /// outage does not also cost the rate limit.
    pub fn failed(&mut self, write: &EventWrite) {
        let burst = self.config.burst as f64;
        if let Some(e) = self.entries.get_mut(write.key()) {
            e.tokens = (e.tokens + 1.0).min(burst);
        }
    }

    /// The Event to update is gone (expired after the API server's event
    /// TTL): the next write creates it again under a new name.
    pub fn lost(&mut self, write: &EventWrite, now: SystemTime) {
        if !self.entries.contains_key(write.key()) {
            return;
        }
        let name = self.unused_name(&write.key().object, now);
        if let Some(e) = self.entries.get_mut(write.key()) {
            e.created = false;
            e.acked = 0;
            e.name = name;
        }
    }

    /// The API server refused the write for good (its namespace is going or
    /// gone, the body is invalid): forget the key, so it blocks nothing and
    /// is not retried. A later occurrence starts a new Event.
    pub fn dropped(&mut self, write: &EventWrite) {
        self.entries.remove(write.key());
    }

    /// Total occurrences counted for `key`.
    pub fn count(&self, key: &EventKey) -> Option<u32> {
        self.entries.get(key).map(|e| e.count)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// `<object>.<hex nanoseconds>`, kubelet's naming.
#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    #[test]
    fn events_said_at_one_instant_about_one_object_get_their_own_names() {
        let mut r = Recorder::new(RecorderConfig::default());
        let node = ObjectRef::node("n1", None);
        for m in ["a", "b", "c"] {
            r.record(t(0), node.clone(), EventType::Warning, "R", m);
        }
        let mut names: Vec<String> = r.due(t(0)).iter().map(|w| w.name().to_string()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 3, "{names:?}");
    }

    /// An Event's annotations are written with it: the create's metadata
    /// carries them, an update (count, lastTimestamp) does not repeat them.
    #[test]
    fn annotations_go_out_with_the_create_only() {
        let mut r = Recorder::new(RecorderConfig::default());
        let a: BTreeMap<String, String> = [("example.dev/k".to_string(), "v".to_string())].into();
        r.record_annotated(t(0), node(), EventType::Warning, "R", "m", &a);
        let w = ack_all(&mut r, t(0));
        let body = w[0].body("n1");
        assert_eq!(
            body["metadata"]["annotations"]["example.dev/k"], "v",
            "{body}"
        );
        r.record_annotated(t(1), node(), EventType::Warning, "R", "m", &a);
        let w = ack_all(&mut r, t(1));
        assert!(matches!(&w[..], [EventWrite::Update { count: 2, .. }]));
        assert!(w[0].body("n1").get("metadata").is_none());
        // Without annotations, none is written.
        r.record(t(2), node(), EventType::Warning, "R", "other");
        let w = ack_all(&mut r, t(2));
        assert!(w[0].body("n1")["metadata"].get("annotations").is_none());
    }

    fn node() -> ObjectRef {
        ObjectRef::node("n1", Some("uid-1".into()))
    }

    fn ack_all(r: &mut Recorder, now: SystemTime) -> Vec<EventWrite> {
        let writes = r.due(now);
        for w in &writes {
            r.written(w);
        }
        writes
    }

    #[test]
    fn duplicates_become_one_event_with_a_count() {
        let mut r = Recorder::new(RecorderConfig::default());
        r.record(
            t(0),
            node(),
            EventType::Warning,
            "ProfileRejected",
            "a.json",
        );
        let w = ack_all(&mut r, t(0));
        assert!(matches!(&w[..], [EventWrite::Create { count: 1, .. }]));
        let name = w[0].name().to_string();
        r.record(
            t(10),
            node(),
            EventType::Warning,
            "ProfileRejected",
            "a.json",
        );
        r.record(
            t(20),
            node(),
            EventType::Warning,
            "ProfileRejected",
            "a.json",
        );
        let w = ack_all(&mut r, t(20));
        assert_eq!(
            w,
            vec![EventWrite::Update {
                key: w[0].key().clone(),
                name,
                count: 3,
                last: t(20)
            }]
        );
        assert_eq!(
            w[0].body("n1"),
            json!({"count":3,"lastTimestamp":"2023-11-14T22:13:40Z"})
        );
        assert!(r.due(t(30)).is_empty());
    }

    #[test]
    fn burst_then_one_per_interval_and_counts_kept() {
        let cfg = RecorderConfig {
            burst: 2,
            interval: Duration::from_secs(60),
            max_keys: 10,
        };
        let mut r = Recorder::new(cfg);
        let mut writes = 0;
        for s in 0..120 {
            r.record(t(s), node(), EventType::Warning, "X", "m");
            writes += ack_all(&mut r, t(s)).len();
        }
        // 2 at once, then at 60 s and 120 s-worth: 1 more by t=119.
        assert_eq!(writes, 3);
        let next = r.next_due().unwrap();
        assert!(next > t(119) && next <= t(121), "{next:?}");
        let w = ack_all(&mut r, t(120));
        assert_eq!(w[0].count(), 120, "suppressed occurrences still counted");
    }

    /// At the time `next_due` names, `due` writes: a driver that sleeps
    /// until then is not woken for nothing. One occurrence every 10 s for an
    /// hour (what the figures of the module's doc measure), then the wait.
    #[test]
    fn due_writes_at_the_time_next_due_names() {
        let mut r = Recorder::new(RecorderConfig::default());
        for i in 0..360 {
            r.record(t(i * 10), node(), EventType::Warning, "X", "m");
            ack_all(&mut r, t(i * 10));
        }
        let next = r.next_due().expect("the last occurrences wait");
        let w = ack_all(&mut r, next);
        assert_eq!(w.len(), 1, "nothing written at {next:?}");
        assert_eq!(w[0].count(), 360);
    }

    #[test]
    fn distinct_messages_are_distinct_events_and_memory_is_bounded() {
        let cfg = RecorderConfig {
            max_keys: 3,
            ..RecorderConfig::default()
        };
        let mut r = Recorder::new(cfg);
        for i in 0..10 {
            r.record(t(i), node(), EventType::Normal, "R", &format!("m{i}"));
        }
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn failed_writes_stay_pending_and_lost_events_are_recreated() {
        let mut r = Recorder::new(RecorderConfig::default());
        r.record(t(0), node(), EventType::Normal, "R", "m");
        let w = r.due(t(0));
        assert_eq!(w.len(), 1); // not acked: the API server was down
        r.record(t(5), node(), EventType::Normal, "R", "m");
        let w = ack_all(&mut r, t(5));
        assert!(matches!(&w[..], [EventWrite::Create { count: 2, .. }]));
        r.record(t(7), node(), EventType::Normal, "R", "m");
        let w = r.due(t(7));
        assert!(matches!(&w[..], [EventWrite::Update { count: 3, .. }]));
        r.lost(&w[0], t(7));
        let w = r.due(t(8));
        assert!(matches!(&w[..], [EventWrite::Create { count: 3, .. }]));
    }

    #[test]
    fn create_body_shape() {
        let mut r = Recorder::new(RecorderConfig::default());
        r.record(t(0), node(), EventType::Warning, "ProfileStartFails", "x");
        let body = r.due(t(0))[0].body("n1");
        assert_eq!(
            body["involvedObject"],
            json!({"apiVersion":"v1","kind":"Node","name":"n1","uid":"uid-1"})
        );
        assert_eq!(body["metadata"]["namespace"], "default");
        assert_eq!(body["source"], json!({"component":"nodeproof","host":"n1"}));
        assert_eq!(body["reportingComponent"], "nodeproof");
        assert_eq!(body["count"], 1);
    }
}
