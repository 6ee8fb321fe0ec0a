//! What the gate judges of a gated Pod and of RuntimeClasses. Pure.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{NodeSelector, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;

use nodeproof_report::contract;
use nodeproof_report::taints::Toleration;

use super::config::Policy;
use super::resources::{pod_extended_requests, Milli};

/// `namespace/name`.
pub type PodKey = String;

/// A pod waiting on at least one configured gate.
#[derive(Debug, Clone, PartialEq)]
pub struct PodNeeds {
    pub key: PodKey,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The version judged: guards a release that sets `spec.nodeSelector`
    /// where the pod had none (a JSON patch cannot test for absence).
    pub resource_version: String,
    pub created: Option<SystemTime>,
    /// Every gate on the pod, in order (a removal names its index).
    pub all_gates: Vec<String>,
    /// The configured ones among them, in the pod's order.
    pub gates: Vec<String>,
    pub node_selector: BTreeMap<String, String>,
    /// `spec.nodeSelector` is present (a release adds keys to it, or sets it whole).
    pub has_node_selector: bool,
    pub affinity: Option<NodeSelector>,
    pub tolerations: Vec<Toleration>,
    pub extended: BTreeMap<String, Milli>,
    pub runtime_class: Option<String>,
}

impl PodNeeds {
    /// `None` when the pod carries none of `policy`'s gates, is bound, or is
    /// being deleted: nothing to do for it.
    pub fn of(pod: &Pod, policy: &Policy) -> Option<PodNeeds> {
        let spec = pod.spec.as_ref()?;
        if spec.node_name.as_deref().is_some_and(|n| !n.is_empty())
            || pod.metadata.deletion_timestamp.is_some()
        {
            return None;
        }
        let all_gates: Vec<String> = spec
            .scheduling_gates
            .iter()
            .flatten()
            .map(|g| g.name.clone())
            .collect();
        let gates: Vec<String> = all_gates
            .iter()
            .filter(|g| policy.gate(g).is_some())
            .cloned()
            .collect();
        if gates.is_empty() {
            return None;
        }
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        Some(PodNeeds {
            key: format!("{namespace}/{name}"),
            namespace,
            name,
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            resource_version: pod.metadata.resource_version.clone().unwrap_or_default(),
            created: pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| SystemTime::from(t.0)),
            all_gates,
            gates,
            node_selector: spec.node_selector.clone().unwrap_or_default(),
            has_node_selector: spec.node_selector.is_some(),
            affinity: spec
                .affinity
                .as_ref()
                .and_then(|a| a.node_affinity.as_ref())
                .and_then(|a| {
                    a.required_during_scheduling_ignored_during_execution
                        .clone()
                }),
            tolerations: spec
                .tolerations
                .iter()
                .flatten()
                .map(Toleration::from)
                .collect(),
            extended: pod_extended_requests(spec),
            runtime_class: spec.runtime_class_name.clone().filter(|c| !c.is_empty()),
        })
    }
}

/// A RuntimeClass as the gate uses it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassFacts {
    /// `scheduling.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// `scheduling.tolerations`.
    pub tolerations: Vec<Toleration>,
    /// The contract label its pods need ready, when it declares a contract
    /// (an invalid one included: the agents never label it ready, and the
    /// pod waits, which is what it would do on any node).
    pub contract_label: Option<String>,
}

impl ClassFacts {
    pub fn of(rc: &RuntimeClass) -> ClassFacts {
        let name = rc.metadata.name.clone().unwrap_or_default();
        let annotations = rc.metadata.annotations.clone().unwrap_or_default();
        let scheduling = rc.scheduling.as_ref();
        ClassFacts {
            node_selector: scheduling
                .and_then(|s| s.node_selector.clone())
                .unwrap_or_default(),
            tolerations: scheduling
                .and_then(|s| s.tolerations.as_ref())
                .into_iter()
                .flatten()
                .map(Toleration::from)
                .collect(),
            contract_label: contract::contract_of(&name, &annotations)
                .map(|_| contract::label_key(&name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::config::GateConfig;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_unbound_pods_with_a_configured_gate_are_needs() {
        let policy = GateConfig::default().policy();
        let gated = pod(json!({
            "metadata": {"namespace": "ml", "name": "p", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
                     "schedulingGates": [{"name": "example.com/other"}, {"name": "nodeproof.dev/gpu-driver-ready"}],
                     "runtimeClassName": "vllm", "nodeSelector": {"pool": "gpu"},
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]},
        }));
        let n = PodNeeds::of(&gated, &policy).unwrap();
        assert_eq!(n.key, "ml/p");
        assert_eq!(
            n.all_gates,
            ["example.com/other", "nodeproof.dev/gpu-driver-ready"]
        );
        assert_eq!(n.gates, ["nodeproof.dev/gpu-driver-ready"]);
        assert_eq!(n.extended["nvidia.com/gpu"], 2000);
        assert_eq!(n.runtime_class.as_deref(), Some("vllm"));
        assert_eq!(n.tolerations[0].operator, "Exists");
        let foreign = pod(json!({"metadata": {"name": "q"}, "spec": {"containers": [],
            "schedulingGates": [{"name": "example.com/other"}]}}));
        assert_eq!(PodNeeds::of(&foreign, &policy), None);
        let ungated = pod(json!({"metadata": {"name": "q"}, "spec": {"containers": []}}));
        assert_eq!(PodNeeds::of(&ungated, &policy), None);
    }

    #[test]
    fn a_class_declares_its_label_only_with_a_contract() {
        let rc: RuntimeClass = serde_json::from_value(json!({
            "metadata": {"name": "vllm", "annotations": {"nodeproof.dev/localhost-profiles": "profiles/a.json"}},
            "handler": "runc",
            "scheduling": {"nodeSelector": {"runtimeclass.nodeproof.dev/vllm": "ready"},
                           "tolerations": [{"key": "k", "operator": "Exists"}]},
        }))
        .unwrap();
        let f = ClassFacts::of(&rc);
        assert_eq!(
            f.contract_label.as_deref(),
            Some("runtimeclass.nodeproof.dev/vllm")
        );
        assert_eq!(f.node_selector.len(), 1);
        assert_eq!(f.tolerations.len(), 1);
        let plain: RuntimeClass =
            serde_json::from_value(json!({"metadata": {"name": "runc"}, "handler": "runc"}))
                .unwrap();
        assert_eq!(ClassFacts::of(&plain), ClassFacts::default());
    }
}
