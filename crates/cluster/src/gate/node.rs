//! What the gate judges of a Node: labels, taints, `spec.unschedulable`,
//! allocatable extended resources, and nodeproof's own conditions with their
//! heartbeats. Pure; built from the API object once per change.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Node;

use nodeproof_findings::{ConditionStatus, ConditionType};
use nodeproof_report::marks::Taint;

use super::resources::{extended_of, Milli};

/// One of nodeproof's conditions on the Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCondition {
    pub status: ConditionStatus,
    pub reason: String,
    /// What the agent says (the pod condition at release quotes one ready
    /// node's); not judged.
    pub message: String,
    /// `lastHeartbeatTime`; none: never fresh.
    pub heartbeat: Option<SystemTime>,
}

impl NodeCondition {
    /// Whether the agent that wrote it has been silent too long: then the
    /// condition says nothing about the node any more (a node whose agent
    /// died must never release a gate).
    pub fn stale(&self, now: SystemTime, stale_after: Duration) -> bool {
        self.heartbeat
            .is_none_or(|h| now.duration_since(h).is_ok_and(|age| age > stale_after))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
    /// Allocatable extended resources only.
    pub allocatable: BTreeMap<String, Milli>,
    pub conditions: BTreeMap<ConditionType, NodeCondition>,
}

impl NodeFacts {
    pub fn of(node: &Node) -> NodeFacts {
        let spec = node.spec.as_ref();
        let status = node.status.as_ref();
        NodeFacts {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints: spec
                .and_then(|s| s.taints.as_ref())
                .into_iter()
                .flatten()
                .map(|t| Taint {
                    key: t.key.clone(),
                    value: t.value.clone().unwrap_or_default(),
                    effect: t.effect.clone(),
                })
                .collect(),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            allocatable: status
                .and_then(|s| s.allocatable.as_ref())
                .map(extended_of)
                .unwrap_or_default(),
            conditions: status
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|c| {
                    let kind = ConditionType::parse(&c.type_)?;
                    Some((
                        kind,
                        NodeCondition {
                            status: ConditionStatus::parse(&c.status),
                            reason: c.reason.clone().unwrap_or_default(),
                            message: c.message.clone().unwrap_or_default(),
                            heartbeat: c
                                .last_heartbeat_time
                                .as_ref()
                                .map(|t| SystemTime::from(t.0)),
                        },
                    ))
                })
                .collect(),
        }
    }

    /// Whether `self` and `other` judge alike at `now`: the same in all but
    /// heartbeat times, and the same conditions stale. A heartbeat-only
    /// update (most Node writes) changes no verdict.
    pub fn judged_alike(&self, other: &NodeFacts, now: SystemTime, stale_after: Duration) -> bool {
        self.labels == other.labels
            && self.taints == other.taints
            && self.unschedulable == other.unschedulable
            && self.allocatable == other.allocatable
            && self.conditions.len() == other.conditions.len()
            && self
                .conditions
                .iter()
                .zip(&other.conditions)
                .all(|((ka, a), (kb, b))| {
                    ka == kb
                        && a.status == b.status
                        && a.reason == b.reason
                        && a.stale(now, stale_after) == b.stale(now, stale_after)
                })
    }

    /// The conditions stale at `now`, as a bit set over `ConditionType::ALL`.
    pub fn stale_set(&self, now: SystemTime, stale_after: Duration) -> u8 {
        ConditionType::ALL
            .iter()
            .enumerate()
            .filter(|(_, k)| {
                self.conditions
                    .get(k)
                    .is_some_and(|c| c.stale(now, stale_after))
            })
            .fold(0, |acc, (i, _)| acc | (1 << i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn facts_of_a_node() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"pool": "gpu"}},
            "spec": {"unschedulable": true, "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
            "status": {
                "allocatable": {"cpu": "8", "nvidia.com/gpu": "4"},
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "GPUDriverReady", "status": "False", "reason": "NVMLInitFailed",
                     "lastHeartbeatTime": "2026-01-01T00:00:00Z"},
                ],
            },
        }))
        .unwrap();
        let f = NodeFacts::of(&node);
        assert!(f.unschedulable);
        assert_eq!(f.taints[0].key, "nvidia.com/gpu");
        assert_eq!(
            f.allocatable,
            BTreeMap::from([("nvidia.com/gpu".to_string(), 4000)])
        );
        assert_eq!(f.conditions.len(), 1, "only nodeproof's own conditions");
        let c = &f.conditions[&ConditionType::GPUDriverReady];
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::False, "NVMLInitFailed")
        );
        let hb = c.heartbeat.unwrap();
        let d = Duration::from_secs(900);
        assert!(!c.stale(hb + d, d));
        assert!(c.stale(hb + d + Duration::from_secs(1), d));
    }

    #[test]
    fn a_heartbeat_alone_judges_alike_until_it_goes_stale() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let d = Duration::from_secs(900);
        let cond = |hb: SystemTime| NodeCondition {
            message: String::new(),
            status: ConditionStatus::True,
            reason: "Ok".into(),
            heartbeat: Some(hb),
        };
        let mut a = NodeFacts::default();
        a.conditions.insert(ConditionType::GPUHealthy, cond(t0));
        let mut b = a.clone();
        b.conditions.insert(
            ConditionType::GPUHealthy,
            cond(t0 + Duration::from_secs(300)),
        );
        assert!(a.judged_alike(&b, t0 + Duration::from_secs(600), d));
        // At t0+1000 a's heartbeat is stale and b's is not.
        assert!(!a.judged_alike(&b, t0 + Duration::from_secs(1000), d));
        assert_eq!(a.stale_set(t0 + Duration::from_secs(1000), d), 1 << 3);
        let mut c = b.clone();
        c.labels.insert("x".into(), "y".into());
        assert!(!b.judged_alike(&c, t0, d));
    }
}
