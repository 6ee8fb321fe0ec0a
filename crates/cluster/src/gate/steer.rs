//! Placement at release: removing a gate says "some node could host the
//! pod" and nothing tells the scheduler *which* node, so a released pod
//! lands wherever the scheduler likes, broken nodes included (seen on
//! kube-scheduler 1.36: 3 runs of 3 on the node whose GPUDriverReady was
//! False). Pure.
//!
//! The mechanism (docs/gate-controller.md, "Placement"):
//! - the controller keeps a **readiness label** per gate on each Node
//!   ([`Gate::label`], `gate.nodeproof.dev/<gate>=ready`) while every
//!   condition of the gate is True with a fresh heartbeat there, and removes
//!   it otherwise ([`wanted_labels`], [`label_patch`]);
//! - a gate is removed only once a node fitting the pod carries the label
//!   (`judge::readiness`), and in the same guarded JSON patch the pod's
//!   `nodeSelector` gets that label ([`release_patch`]). While a pod is
//!   gated, KEP-3838 ("mutable pod scheduling directives") lets a client add
//!   nodeSelector keys (`validateNodeSelectorMutation` in
//!   pkg/apis/core/validation/validation.go refuses changing or deleting
//!   one: "only additions to spec.nodeSelector are allowed"); once ungated,
//!   no change is accepted, so narrowing and removal must be one write.
//!
//! Why a label and not `matchFields metadata.name In [ready nodes]`:
//! `validateNodeFieldSelectorRequirement` allows exactly one value for `In`
//! on a field selector, so a set of nodes needs one term per node, and terms
//! can only be added where the pod had none (adding a term widens: refused);
//! a list computed at release is also frozen: a node breaking between the
//! release and the binding stays in it, and a node turning ready later is
//! never added. The label is re-evaluated by the scheduler at binding time,
//! costs the pod one nodeSelector entry whatever the pool's size, and
//! follows the node both ways.
//!
//! Why the controller and not the node agent keeps the label: readiness
//! includes the heartbeat being fresh, which only someone other than the
//! node can judge. An agent that died cannot remove its own label, and its
//! node would keep attracting released pods.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde_json::{json, Map, Value};

use super::config::{pod_condition_type, Gate, Policy, READINESS_LABEL_PREFIX, READY};
use super::judge::{ready_for, truncate, Verdict};
use super::node::NodeFacts;
use super::pod::PodNeeds;

/// The readiness labels `node` should carry at `now`: one per steering gate
/// whose conditions are all True and fresh there.
pub fn wanted_labels(
    policy: &Policy,
    node: &NodeFacts,
    now: SystemTime,
) -> BTreeMap<String, String> {
    policy
        .gates
        .iter()
        .filter_map(|g| {
            let label = g.label.as_ref()?;
            ready_for(g, node, now, policy.stale_after).then(|| (label.clone(), READY.to_string()))
        })
        .collect()
}

/// The strategic-merge patch of the Node's labels that makes its readiness
/// labels `wanted` (ours not wanted removed with null, everyone else's
/// untouched); `None` when they already are.
pub fn label_patch(
    on_node: &BTreeMap<String, String>,
    wanted: &BTreeMap<String, String>,
) -> Option<Value> {
    let mut labels = Map::new();
    for key in on_node.keys() {
        if key.starts_with(READINESS_LABEL_PREFIX) && !wanted.contains_key(key) {
            labels.insert(key.clone(), Value::Null);
        }
    }
    for (k, v) in wanted {
        if on_node.get(k) != Some(v) {
            labels.insert(k.clone(), json!(v));
        }
    }
    (!labels.is_empty()).then(|| json!({ "metadata": { "labels": labels } }))
}

/// RFC 6901: `~` → `~0`, `/` → `~1`.
fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The one guarded JSON patch that narrows the pod to the nodes ready for
/// `gates` and removes them: `test` the uid and each gate's entry; add each
/// steering gate's readiness label to `spec.nodeSelector` (a new key; where
/// the pod has no nodeSelector it is set whole, guarded by the
/// resourceVersion judged, since a JSON patch cannot test for an absent
/// member); then remove the gates, highest index first.
///
/// A concurrent change of the gates or of that nodeSelector key fails a
/// `test` (or the API server's "only additions" rule), the API server
/// answers 422 and nothing is written.
pub fn release_patch(needs: &PodNeeds, gates: &[(&Gate, usize)]) -> json_patch::Patch {
    let mut ops = vec![json!({"op": "test", "path": "/metadata/uid", "value": needs.uid})];
    let mut ordered: Vec<&(&Gate, usize)> = gates.iter().collect();
    ordered.sort_by_key(|(_, index)| std::cmp::Reverse(*index));
    for (gate, index) in &ordered {
        ops.push(json!({"op": "test", "path": format!("/spec/schedulingGates/{index}/name"), "value": gate.name}));
    }
    let labels: BTreeMap<&str, &str> = gates
        .iter()
        .filter_map(|(g, _)| g.label.as_deref())
        .filter(|l| needs.node_selector.get(*l).map(String::as_str) != Some(READY))
        .map(|l| (l, READY))
        .collect();
    if !labels.is_empty() {
        if needs.has_node_selector {
            for (label, value) in &labels {
                ops.push(json!({"op": "add", "path": format!("/spec/nodeSelector/{}", pointer_token(label)), "value": value}));
            }
        } else {
            ops.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": needs.resource_version}));
            ops.push(json!({"op": "add", "path": "/spec/nodeSelector", "value": labels}));
        }
    }
    for (_, index) in &ordered {
        ops.push(json!({"op": "remove", "path": format!("/spec/schedulingGates/{index}")}));
    }
    serde_json::from_value(Value::Array(ops)).expect("well-formed RFC 6902 operations")
}

/// A pod condition's message is cut here.
const MAX_CONDITION_MESSAGE: usize = 512;

/// The pod condition written through `pods/status` as `gate` is removed,
/// so that `kubectl describe pod` says next to PodScheduled why the pod was
/// released: type [`pod_condition_type`], status True, reason `NodesReady`,
/// and which conditions were ready on how many of the nodes fitting the
/// pod, quoting the first ready node's condition message.
pub fn pod_condition(gate: &Gate, verdict: &Verdict, now: SystemTime) -> Value {
    let conditions = match gate.conditions.as_slice() {
        [] => "its RuntimeClass contract ready".to_string(),
        [one] => format!("{one} True"),
        many => {
            let names: Vec<String> = many.iter().map(ToString::to_string).collect();
            format!(
                "{} and {} True",
                names[..names.len() - 1].join(", "),
                names[names.len() - 1]
            )
        }
    };
    let mut message = format!(
        "{} removed: {conditions} on {} of {} nodes that fit the pod",
        gate.name, verdict.ready, verdict.matching
    );
    if let Some(label) = &gate.label {
        message.push_str(&format!(
            "; placement narrowed to nodes labelled {label}={READY}"
        ));
    }
    if let Some((node, quote)) = &verdict.example {
        if quote.is_empty() {
            message.push_str(&format!(" (e.g. {node})"));
        } else {
            message.push_str(&format!(" ({node}: {quote})"));
        }
    }
    json!({
        "type": pod_condition_type(&gate.name),
        "status": "True",
        "reason": "NodesReady",
        "message": truncate(message, MAX_CONDITION_MESSAGE),
        "lastTransitionTime": rfc3339(now),
    })
}

fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    k8s_openapi::jiff::Timestamp::from_second(secs as i64)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// The strategic-merge patch of `pods/status` adding `conditions` (merged by type).
pub fn pod_status_patch(conditions: Vec<Value>) -> Value {
    json!({"status": {"conditions": conditions}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::config::GateConfig;
    use crate::gate::node::NodeCondition;
    use crate::gate::pod::PodNeeds;
    use k8s_openapi::api::core::v1::Pod;
    use nodeproof_findings::{ConditionStatus, ConditionType};
    use std::time::Duration;

    const GPU: &str = "nodeproof.dev/gpu-driver-ready";
    const SECCOMP: &str = "nodeproof.dev/seccomp-ready";
    const GPU_LABEL: &str = "gate.nodeproof.dev/gpu-driver-ready";

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn node(gpu: ConditionStatus, heartbeat_age: u64) -> NodeFacts {
        let mut n = NodeFacts {
            name: "n".into(),
            ..NodeFacts::default()
        };
        for k in ConditionType::ALL {
            n.conditions.insert(
                k,
                NodeCondition {
                    status: ConditionStatus::True,
                    reason: "Ok".into(),
                    message: String::new(),
                    heartbeat: Some(now() - Duration::from_secs(heartbeat_age)),
                },
            );
        }
        n.conditions
            .get_mut(&ConditionType::GPUDriverReady)
            .unwrap()
            .status = gpu;
        n
    }

    #[test]
    fn labels_follow_conditions_and_heartbeats() {
        let p = GateConfig::default().policy();
        let ready = wanted_labels(&p, &node(ConditionStatus::True, 60), now());
        assert_eq!(
            ready.keys().collect::<Vec<_>>(),
            [GPU_LABEL, "gate.nodeproof.dev/seccomp-ready"]
        );
        let broken = wanted_labels(&p, &node(ConditionStatus::False, 60), now());
        assert_eq!(
            broken.keys().collect::<Vec<_>>(),
            ["gate.nodeproof.dev/seccomp-ready"]
        );
        // An agent that stopped reporting: no label, whatever its conditions say.
        let stale = wanted_labels(&p, &node(ConditionStatus::True, 7200), now());
        assert!(stale.is_empty(), "{stale:?}");
    }

    #[test]
    fn the_label_patch_touches_only_our_labels_and_only_when_needed() {
        let on_node = BTreeMap::from([
            ("pool".to_string(), "gpu".to_string()),
            (GPU_LABEL.to_string(), READY.to_string()),
            ("gate.nodeproof.dev/retired".to_string(), READY.to_string()),
        ]);
        let wanted = BTreeMap::from([(GPU_LABEL.to_string(), READY.to_string())]);
        assert_eq!(
            label_patch(&on_node, &wanted),
            Some(json!({"metadata": {"labels": {"gate.nodeproof.dev/retired": null}}}))
        );
        let mut settled = on_node.clone();
        settled.remove("gate.nodeproof.dev/retired");
        assert_eq!(label_patch(&settled, &wanted), None, "nothing to write");
        assert_eq!(
            label_patch(&settled, &BTreeMap::new()),
            Some(json!({"metadata": {"labels": {GPU_LABEL: null}}}))
        );
    }

    fn needs(spec: Value) -> PodNeeds {
        let mut v = json!({"metadata": {"namespace": "ml", "name": "p", "uid": "u1", "resourceVersion": "7"},
            "spec": {"containers": [{"name": "c"}], "schedulingGates": [{"name": "example.com/quota"}, {"name": GPU}, {"name": SECCOMP}]}});
        for (k, val) in spec.as_object().unwrap() {
            v["spec"][k] = val.clone();
        }
        let pod: Pod = serde_json::from_value(v).unwrap();
        PodNeeds::of(&pod, &GateConfig::default().policy()).unwrap()
    }

    fn as_value(p: &PodNeeds, spec: Value) -> Value {
        let mut v = json!({"metadata": {"namespace": "ml", "name": "p", "uid": p.uid, "resourceVersion": p.resource_version},
            "spec": {"containers": [{"name": "c"}], "schedulingGates": [{"name": "example.com/quota"}, {"name": GPU}, {"name": SECCOMP}]}});
        for (k, val) in spec.as_object().unwrap() {
            v["spec"][k] = val.clone();
        }
        v
    }

    #[test]
    fn the_release_narrows_and_removes_in_one_guarded_patch() {
        let policy = GateConfig::default().policy();
        let gpu = policy.gate(GPU).unwrap();
        let seccomp = policy.gate(SECCOMP).unwrap();
        // A pod without a nodeSelector: set whole, guarded by the version.
        let n = needs(json!({}));
        let mut pod = as_value(&n, json!({}));
        json_patch::patch(&mut pod, &release_patch(&n, &[(gpu, 1), (seccomp, 2)])).unwrap();
        assert_eq!(
            pod["spec"]["schedulingGates"],
            json!([{"name": "example.com/quota"}])
        );
        assert_eq!(
            pod["spec"]["nodeSelector"],
            json!({GPU_LABEL: "ready", "gate.nodeproof.dev/seccomp-ready": "ready"})
        );
        // Someone set a nodeSelector meanwhile: the version test refuses.
        let mut moved = as_value(&n, json!({"nodeSelector": {"zone": "a"}}));
        moved["metadata"]["resourceVersion"] = json!("8");
        assert!(json_patch::patch(&mut moved, &release_patch(&n, &[(gpu, 1)])).is_err());
        // A pod with a nodeSelector: a key added, the others kept.
        let n = needs(json!({"nodeSelector": {"pool": "gpu"}}));
        let mut pod = as_value(&n, json!({"nodeSelector": {"pool": "gpu"}}));
        let patch = release_patch(&n, &[(gpu, 1)]);
        assert!(
            !serde_json::to_string(&patch)
                .unwrap()
                .contains("resourceVersion"),
            "no version guard when adding a key: unrelated writes do not fail it"
        );
        json_patch::patch(&mut pod, &patch).unwrap();
        assert_eq!(
            pod["spec"]["nodeSelector"],
            json!({"pool": "gpu", GPU_LABEL: "ready"})
        );
        assert_eq!(
            pod["spec"]["schedulingGates"],
            json!([{"name": "example.com/quota"}, {"name": SECCOMP}])
        );
        // The gate moved (another controller removed its own): nothing written.
        let mut other = as_value(&n, json!({"nodeSelector": {"pool": "gpu"}}));
        other["spec"]["schedulingGates"] = json!([{"name": GPU}, {"name": SECCOMP}]);
        let before = other.clone();
        assert!(json_patch::patch(&mut other, &patch).is_err());
        assert_eq!(other, before);
        // Another pod under the same name.
        let mut again = as_value(&n, json!({"nodeSelector": {"pool": "gpu"}}));
        again["metadata"]["uid"] = json!("u2");
        assert!(json_patch::patch(&mut again, &patch).is_err());
        // Not steering: only the gate goes.
        let off = GateConfig {
            steer: Some(false),
            ..GateConfig::default()
        }
        .policy();
        let mut pod = as_value(&n, json!({"nodeSelector": {"pool": "gpu"}}));
        json_patch::patch(&mut pod, &release_patch(&n, &[(off.gate(GPU).unwrap(), 1)])).unwrap();
        assert_eq!(pod["spec"]["nodeSelector"], json!({"pool": "gpu"}));
    }

    #[test]
    fn the_pod_condition_says_why_the_pod_was_released() {
        let policy = GateConfig::default().policy();
        let gpu = policy.gate(GPU).unwrap();
        let mut ready = node(ConditionStatus::True, 60);
        ready.name = "gpu-b".into();
        ready.labels.insert(GPU_LABEL.into(), READY.into());
        ready
            .conditions
            .get_mut(&ConditionType::GPUDriverReady)
            .unwrap()
            .message = "NVIDIA driver 550.54.15 loaded and responding".into();
        let mut broken = node(ConditionStatus::False, 60);
        broken.name = "gpu-a".into();
        let n = needs(json!({}));
        let v =
            crate::gate::judge::judge(&n, &policy, [&broken, &ready], &Default::default(), now())
                .into_iter()
                .find(|v| v.gate == GPU)
                .unwrap();
        let c = pod_condition(gpu, &v, now());
        assert_eq!(c["type"], "gate.nodeproof.dev/gpu-driver-ready");
        assert_eq!(c["status"], "True");
        assert_eq!(c["reason"], "NodesReady");
        assert_eq!(
            c["message"],
            "nodeproof.dev/gpu-driver-ready removed: GPUDriverReady and GPUHealthy True on 1 of 2 nodes \
             that fit the pod; placement narrowed to nodes labelled gate.nodeproof.dev/gpu-driver-ready=ready \
             (gpu-b: NVIDIA driver 550.54.15 loaded and responding)"
        );
        assert_eq!(c["lastTransitionTime"], "2027-01-15T08:00:00Z");
    }
}
