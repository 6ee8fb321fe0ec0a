//! Opt-in labels and taints derived from the published conditions (after
//! hysteresis, so they flap no more than the conditions do). Pure.
//!
//! Labels go through the node identity: NodeRestriction lets a node set its
//! own labels outside the restricted prefixes, and `nodeproof.dev/` is not
//! one. Taints need a separate credential (NodeRestriction refuses any taint
//! change by a node); see deploy/rbac-taints.yaml.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use nodeproof_findings::{ConditionStatus, ConditionType};

use crate::conditions::NodeCondition;
use crate::contract;

/// Every label and taint key nodeproof owns starts with this.
pub const PREFIX: &str = "nodeproof.dev/";

/// What to mark the Node with: condition labels and taints off by default,
/// contract labels on (they are written only for RuntimeClasses that carry
/// the contract annotation, so a cluster without one gets none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkPolicy {
    /// `nodeproof.dev/<condition>=true|false|unknown` for every own condition.
    pub labels: bool,
    /// Condition types whose False/Unknown status taints the Node NoSchedule.
    pub taint_kinds: BTreeSet<ConditionType>,
    /// `runtimeclass.nodeproof.dev/<class>=ready|not-ready` for every
    /// annotated RuntimeClass (`report.runtimeclass-labels`).
    pub contract_labels: bool,
}

impl Default for MarkPolicy {
    fn default() -> Self {
        MarkPolicy {
            labels: false,
            taint_kinds: BTreeSet::new(),
            contract_labels: true,
        }
    }
}

/// Whether nodeproof owns this Node label (it removes it when unwanted):
/// its condition labels and the RuntimeClass contract labels.
pub fn owns_label(key: &str) -> bool {
    key.starts_with(PREFIX) || contract::is_contract_label(key)
}

impl MarkPolicy {
    /// The taints that make sense by default: a GPU that is registered but
    /// unusable should not get new GPU pods.
    pub fn default_taint_kinds() -> BTreeSet<ConditionType> {
        [ConditionType::GPUHealthy, ConditionType::GPUDriverReady]
            .into_iter()
            .collect()
    }
}

/// One taint nodeproof owns.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

impl Taint {
    pub fn to_json(&self) -> Value {
        json!({"key": self.key, "value": self.value, "effect": self.effect})
    }
}

/// `SeccompProfilesReady` -> `nodeproof.dev/seccomp-profiles-ready`.
pub fn key_for(kind: ConditionType) -> String {
    let mut out = String::from(PREFIX);
    let chars: Vec<char> = kind.as_str().chars().collect();
    for (i, c) in chars.iter().enumerate() {
        let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
        let prev_lower = i > 0 && chars[i - 1].is_lowercase();
        if c.is_uppercase() && i > 0 && (prev_lower || next_lower) {
            out.push('-');
        }
        out.extend(c.to_lowercase());
    }
    out
}

/// The labels nodeproof wants on the Node.
pub fn labels<'a>(
    policy: &MarkPolicy,
    conditions: impl IntoIterator<Item = &'a NodeCondition>,
) -> BTreeMap<String, String> {
    if !policy.labels {
        return BTreeMap::new();
    }
    conditions
        .into_iter()
        .map(|c| (key_for(c.kind), c.status.as_str().to_lowercase()))
        .collect()
}

/// The taints nodeproof wants on the Node.
pub fn taints<'a>(
    policy: &MarkPolicy,
    conditions: impl IntoIterator<Item = &'a NodeCondition>,
) -> Vec<Taint> {
    conditions
        .into_iter()
        .filter(|c| policy.taint_kinds.contains(&c.kind) && c.status != ConditionStatus::True)
        .map(|c| Taint {
            key: key_for(c.kind),
            value: c.status.to_string(),
            effect: "NoSchedule".into(),
        })
        .collect()
}

/// Strategic-merge patch of the Node's labels: ours set, our stale ones
/// (on the Node, no longer wanted) removed with null, others untouched.
pub fn label_patch(on_node: &BTreeMap<String, String>, wanted: &BTreeMap<String, String>) -> Value {
    let mut labels = Map::new();
    for key in on_node.keys().filter(|k| owns_label(k)) {
        if !wanted.contains_key(key) {
            labels.insert(key.clone(), Value::Null);
        }
    }
    for (k, v) in wanted {
        labels.insert(k.clone(), json!(v));
    }
    json!({ "metadata": { "labels": labels } })
}

/// The Node's full taint list with ours replaced: `spec.taints` has no merge
/// key, so a patch replaces the whole list, and it is guarded by the
/// resourceVersion it was computed from (a 409 means re-read and retry).
pub fn taint_patch(resource_version: &str, on_node: &[Value], ours: &[Taint]) -> Value {
    let mut list: Vec<Value> = on_node
        .iter()
        .filter(|t| !t["key"].as_str().is_some_and(|k| k.starts_with(PREFIX)))
        .cloned()
        .collect();
    list.extend(ours.iter().map(Taint::to_json));
    json!({ "metadata": { "resourceVersion": resource_version }, "spec": { "taints": list } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn cond(kind: &str, status: &str) -> NodeCondition {
        NodeCondition {
            kind: ConditionType::parse(kind).expect("an owned type"),
            status: ConditionStatus::parse(status),
            reason: "R".into(),
            message: String::new(),
            last_transition: SystemTime::UNIX_EPOCH,
            last_heartbeat: SystemTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn keys_are_kebab_case() {
        assert_eq!(
            key_for(ConditionType::SeccompProfilesReady),
            "nodeproof.dev/seccomp-profiles-ready"
        );
        assert_eq!(
            key_for(ConditionType::GPUDriverReady),
            "nodeproof.dev/gpu-driver-ready"
        );
        assert_eq!(
            key_for(ConditionType::GPUHealthy),
            "nodeproof.dev/gpu-healthy"
        );
    }

    #[test]
    fn off_by_default() {
        let p = MarkPolicy::default();
        let cs = [cond("GPUHealthy", "False")];
        assert!(labels(&p, &cs).is_empty());
        assert!(taints(&p, &cs).is_empty());
    }

    #[test]
    fn labels_and_taints_follow_conditions() {
        let p = MarkPolicy {
            labels: true,
            taint_kinds: MarkPolicy::default_taint_kinds(),
            ..MarkPolicy::default()
        };
        let cs = [
            cond("GPUHealthy", "False"),
            cond("SeccompProfilesReady", "False"),
        ];
        let l = labels(&p, &cs);
        assert_eq!(l["nodeproof.dev/gpu-healthy"], "false");
        let t = taints(&p, &cs);
        assert_eq!(t.len(), 1, "seccomp does not taint by default");
        assert_eq!(t[0].key, "nodeproof.dev/gpu-healthy");
    }

    #[test]
    fn patches_keep_others_and_drop_our_stale_ones() {
        let on_node: BTreeMap<_, _> = [
            ("nodeproof.dev/old".to_string(), "x".to_string()),
            (
                "runtimeclass.nodeproof.dev/gone".to_string(),
                "ready".to_string(),
            ),
            ("kubernetes.io/hostname".to_string(), "n1".to_string()),
        ]
        .into();
        let wanted: BTreeMap<_, _> =
            [("nodeproof.dev/gpu-healthy".to_string(), "true".to_string())].into();
        assert_eq!(
            label_patch(&on_node, &wanted),
            json!({"metadata":{"labels":{"nodeproof.dev/old":null,"runtimeclass.nodeproof.dev/gone":null,"nodeproof.dev/gpu-healthy":"true"}}})
        );
        let theirs = json!({"key":"node.kubernetes.io/unschedulable","effect":"NoSchedule"});
        let stale =
            json!({"key":"nodeproof.dev/gpu-driver-ready","value":"False","effect":"NoSchedule"});
        let ours = [Taint {
            key: "nodeproof.dev/gpu-healthy".into(),
            value: "False".into(),
            effect: "NoSchedule".into(),
        }];
        assert_eq!(
            taint_patch("7", &[theirs.clone(), stale], &ours),
            json!({"metadata":{"resourceVersion":"7"},"spec":{"taints":[theirs, ours[0].to_json()]}})
        );
    }
}
