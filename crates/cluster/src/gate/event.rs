//! The one aggregated Event on a gated pod: created once, then patched
//! (message, count, lastTimestamp) when what it says changes; never a new
//! Event per judgement. Pure: [`EventBook::next`] says what to write.

use std::collections::HashMap;
use std::time::SystemTime;

use super::pod::{PodKey, PodNeeds};

/// The Event's `reason` (kubectl describe's "Reason" column).
pub const REASON: &str = "SchedulingGated";
/// `source.component` and `reportingComponent`.
pub const COMPONENT: &str = "nodeproof-gate-controller";

/// What to write for one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventWrite {
    /// POST the Event named `name`.
    Create { name: String, message: String },
    /// Strategic-merge PATCH of `name`: message, count, lastTimestamp.
    Update {
        name: String,
        message: String,
        count: i32,
    },
}

#[derive(Debug, Clone)]
struct Written {
    name: String,
    message: String,
    count: i32,
}

/// What was written on each pod, by this process.
#[derive(Debug, Default)]
pub struct EventBook {
    written: HashMap<PodKey, Written>,
}

impl EventBook {
    /// `message` is what the pod's Event should say now; `None`: nothing to
    /// write (it already says so).
    pub fn next(&mut self, pod: &PodNeeds, message: &str) -> Option<EventWrite> {
        match self.written.get_mut(&pod.key) {
            Some(w) if w.message == message => None,
            Some(w) => {
                w.message = message.to_string();
                w.count += 1;
                Some(EventWrite::Update {
                    name: w.name.clone(),
                    message: message.to_string(),
                    count: w.count,
                })
            }
            None => {
                let name = event_name(pod);
                self.written.insert(
                    pod.key.clone(),
                    Written {
                        name: name.clone(),
                        message: message.to_string(),
                        count: 1,
                    },
                );
                Some(EventWrite::Create {
                    name,
                    message: message.to_string(),
                })
            }
        }
    }

    /// The Event already exists (written by the leader before this one):
    /// update it instead, counting on from what this process knows.
    pub fn exists(&mut self, pod: &PodKey) -> Option<EventWrite> {
        let w = self.written.get_mut(pod)?;
        w.count += 1;
        Some(EventWrite::Update {
            name: w.name.clone(),
            message: w.message.clone(),
            count: w.count,
        })
    }

    /// A write failed: try again at the next judgement.
    pub fn failed(&mut self, pod: &PodKey) {
        self.written.remove(pod);
    }

    /// The pod is released or gone.
    pub fn forget(&mut self, pod: &PodKey) {
        self.written.remove(pod);
    }
}

/// `<pod>.gate-<uid prefix>`: one per pod incarnation, so a pod deleted and
/// created again under the same name gets its own.
pub fn event_name(pod: &PodNeeds) -> String {
    let uid: String = pod.uid.chars().filter(|c| *c != '-').take(8).collect();
    format!("{}.gate-{uid}", pod.name)
}

/// The Event to create, as core/v1 JSON.
pub fn event_body(pod: &PodNeeds, name: &str, message: &str, now: SystemTime) -> serde_json::Value {
    let at = rfc3339(now);
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": pod.namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace,
                           "name": pod.name, "uid": pod.uid},
        "reason": REASON,
        "message": message,
        "type": "Normal",
        "count": 1,
        "firstTimestamp": at,
        "lastTimestamp": at,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": "",
    })
}

/// The strategic-merge patch of an update.
pub fn event_patch(message: &str, count: i32, now: SystemTime) -> serde_json::Value {
    serde_json::json!({"message": message, "count": count, "lastTimestamp": rfc3339(now)})
}

fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::config::GateConfig;
    use k8s_openapi::api::core::v1::Pod;

    fn needs() -> PodNeeds {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "ml", "name": "p", "uid": "0a1b2c3d-4e5f-6789"},
            "spec": {"containers": [], "schedulingGates": [{"name": "nodeproof.dev/gpu-driver-ready"}]}}))
        .unwrap();
        PodNeeds::of(&pod, &GateConfig::default().policy()).unwrap()
    }

    #[test]
    fn created_once_then_updated_only_when_the_message_changes() {
        let mut book = EventBook::default();
        let p = needs();
        assert_eq!(
            book.next(&p, "a"),
            Some(EventWrite::Create {
                name: "p.gate-0a1b2c3d".into(),
                message: "a".into()
            })
        );
        assert_eq!(book.next(&p, "a"), None);
        assert_eq!(
            book.next(&p, "b"),
            Some(EventWrite::Update {
                name: "p.gate-0a1b2c3d".into(),
                message: "b".into(),
                count: 2
            })
        );
        assert_eq!(book.next(&p, "b"), None);
        assert!(matches!(
            book.exists(&p.key),
            Some(EventWrite::Update { count: 3, .. })
        ));
        book.forget(&p.key);
        assert!(matches!(
            book.next(&p, "b"),
            Some(EventWrite::Create { .. })
        ));
        let body = event_body(&p, "p.gate-0a1b2c3d", "b", SystemTime::UNIX_EPOCH);
        assert_eq!(body["involvedObject"]["kind"], "Pod");
        assert_eq!(body["lastTimestamp"], "1970-01-01T00:00:00Z");
    }
}
