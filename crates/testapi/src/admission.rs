//! Admission and the update validation that admission-like rules here
//! stand for: NodeRestriction's rules on a node's Node (labels, its own
//! Node only on create), TaintNodesByCondition, NamespaceLifecycle, the
//! RuntimeClass plugin's scheduling merge, and KEP-3838's rules for a
//! gated pod's placement (pod update validation).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelectorTerm, Pod, PodSpec, Taint,
};
use k8s_openapi::api::node::v1::RuntimeClass;
use serde_json::{json, Value};

use crate::state::TestApiServer;
use crate::status::{invalid, status, Answer};

// ---------------------------------------------------------------------------
// NodeRestriction (plugin/pkg/admission/noderestriction/admission.go)
// ---------------------------------------------------------------------------

/// Label keys whose value differs between two label maps (added, changed
/// or removed): NodeRestriction's `getModifiedLabels`.
pub fn modified_labels(
    before: Option<&BTreeMap<String, String>>,
    after: Option<&BTreeMap<String, String>>,
) -> Vec<String> {
    let empty = BTreeMap::new();
    let a = before.unwrap_or(&empty);
    let b = after.unwrap_or(&empty);
    let mut keys: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// What NodeRestriction forbids a node to change on its own Node
/// (`getForbiddenLabels`): anything under `node-restriction.kubernetes.io`,
/// and labels under `kubernetes.io` / `k8s.io` (or their subdomains) that
/// are not the kubelet's own (pkg/kubelet/apis `IsKubeletLabel`: the
/// well-known labels and the `kubelet.kubernetes.io` and
/// `node.kubernetes.io` namespaces). Any other prefix, `nodeproof.dev/` and
/// `runtimeclass.nodeproof.dev/` included, is the node's to set.
pub fn forbidden_node_label(key: &str) -> bool {
    const KUBELET_LABELS: [&str; 11] = [
        "kubernetes.io/hostname",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
    ];
    let namespace = key.split_once('/').map_or("", |(ns, _)| ns);
    let under = |domain: &str| namespace == domain || namespace.ends_with(&format!(".{domain}"));
    if under("node-restriction.kubernetes.io") {
        return true;
    }
    let kubelet_label = KUBELET_LABELS.contains(&key)
        || under("kubelet.kubernetes.io")
        || under("node.kubernetes.io");
    (under("kubernetes.io") || under("k8s.io")) && !kubelet_label
}

/// NodeRestriction on a node's update of its own Node: 403 when it
/// changes a forbidden label.
pub fn node_labels(
    before: Option<&BTreeMap<String, String>>,
    after: Option<&BTreeMap<String, String>>,
) -> Option<Answer> {
    let forbidden: Vec<String> = modified_labels(before, after)
        .into_iter()
        .filter(|k| forbidden_node_label(k))
        .collect();
    (!forbidden.is_empty()).then(|| {
        status(
            403,
            "Forbidden",
            &format!("is not allowed to modify labels: {}", forbidden.join(", ")),
        )
    })
}

/// `admission.NewForbidden` on a Node: 403, `nodes "<name>" is forbidden: <why>`.
fn node_forbidden(name: &str, why: &str) -> Answer {
    let (code, mut v) = status(
        403,
        "Forbidden",
        &format!("nodes \"{name}\" is forbidden: {why}"),
    );
    v["details"] = json!({"name": name, "kind": "nodes"});
    (code, v)
}

/// NodeRestriction on a node identity's create of a Node (`admitNode`, the
/// create branch; on create the name is the object's): only its own Node
/// (`node "n1" is not allowed to modify node "n2"`), without
/// `spec.configSource`, and without a label it may not set
/// ([`forbidden_node_label`], as on update).
pub fn node_create(me: &str, node: &Node) -> Option<Answer> {
    let name = node.metadata.name.as_deref().unwrap_or("");
    if name != me {
        return Some(node_forbidden(
            name,
            &format!("node \"{me}\" is not allowed to modify node \"{name}\""),
        ));
    }
    if node
        .spec
        .as_ref()
        .is_some_and(|s| s.config_source.is_some())
    {
        // Upstream's own words.
        return Some(node_forbidden(
            name,
            &format!("node \"{me}\" is not allowed to create pods with a non-nil configSource"),
        ));
    }
    let forbidden: Vec<String> = modified_labels(None, node.metadata.labels.as_ref())
        .into_iter()
        .filter(|k| forbidden_node_label(k))
        .collect();
    (!forbidden.is_empty()).then(|| {
        node_forbidden(
            name,
            &format!(
                "node \"{me}\" is not allowed to set the following labels: {}",
                forbidden.join(", ")
            ),
        )
    })
}

// ---------------------------------------------------------------------------
// TaintNodesByCondition (plugin/pkg/admission/nodetaint/admission.go)
// ---------------------------------------------------------------------------

/// The taint every Node is created with.
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// TaintNodesByCondition's `Admit` on a Node create (the plugin handles
/// only `admission.Create` of `nodes`, no subresource): adds
/// `node.kubernetes.io/not-ready:NoSchedule` unless a taint with that key
/// and effect is there (`Taint.MatchTaint` compares key and effect only),
/// whoever creates the Node. The node lifecycle controller lifts it once
/// the node is Ready (`nodes::mark_ready`).
pub fn taint_at_creation(node: &mut Node) {
    let taints = node
        .spec
        .get_or_insert_with(Default::default)
        .taints
        .get_or_insert_with(Vec::new);
    if !taints
        .iter()
        .any(|t| t.key == NOT_READY_TAINT && t.effect == "NoSchedule")
    {
        taints.push(Taint {
            key: NOT_READY_TAINT.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        });
    }
}

// ---------------------------------------------------------------------------
// NamespaceLifecycle (plugin/pkg/admission/namespace/lifecycle/admission.go)
// ---------------------------------------------------------------------------

/// A namespace's phase as NamespaceLifecycle sees it. Namespaces never set
/// are Active (the server serves any namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamespacePhase {
    Active,
    /// Being deleted: no new objects (403 with cause NamespaceTerminating).
    Terminating,
    /// Deleted: 404 for the namespace.
    Gone,
}

/// The namespaces' phases (the admission part of the state); a namespace
/// never set is Active.
#[derive(Default)]
pub struct Namespaces(pub BTreeMap<String, NamespacePhase>);

impl TestApiServer {
    /// Sets a namespace's phase (NamespaceLifecycle); `Gone` also removes its Events.
    pub fn set_namespace(&self, ns: &str, phase: NamespacePhase) {
        self.with(|s| {
            s.part::<Namespaces>().0.insert(ns.into(), phase);
            if phase == NamespacePhase::Gone {
                s.store.events.retain(|(n, _), _| n != ns);
            }
        });
    }
}

/// NamespaceLifecycle on the create of an Event `name` in `ns`: refused in
/// a terminating namespace (403, its message and the
/// `NamespaceTerminating` cause) or a missing one (404 naming the namespace).
pub fn namespace_lifecycle(phase: Option<NamespacePhase>, ns: &str, name: &str) -> Option<Answer> {
    match phase? {
        NamespacePhase::Active => None,
        NamespacePhase::Terminating => {
            let (code, mut v) = status(
                403,
                "Forbidden",
                &format!("events \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated"),
            );
            v["details"] = json!({"name": name, "kind": "events", "causes": [{
                "reason": "NamespaceTerminating",
                "message": format!("namespace {ns} is being terminated"),
                "field": "metadata.namespace",
            }]});
            Some((code, v))
        }
        NamespacePhase::Gone => {
            let (code, mut v) = status(404, "NotFound", &format!("namespaces \"{ns}\" not found"));
            v["details"] = json!({"name": ns, "kind": "namespaces"});
            Some((code, v))
        }
    }
}

// ---------------------------------------------------------------------------
// RuntimeClass (plugin/pkg/admission/runtimeclass/admission.go)
// ---------------------------------------------------------------------------

/// Merges the RuntimeClass's `scheduling` (nodeSelector, tolerations) into
/// the pod, as the plugin does on create; a conflicting nodeSelector key is
/// refused (here: the error text, a test's mistake).
pub fn runtime_class_scheduling(pod: &mut Pod, rc: &RuntimeClass) -> Result<(), String> {
    let Some(scheduling) = &rc.scheduling else {
        return Ok(());
    };
    let class = rc.metadata.name.as_deref().unwrap_or("");
    let spec = pod.spec.get_or_insert_with(Default::default);
    for (k, v) in scheduling.node_selector.iter().flatten() {
        let selector = spec.node_selector.get_or_insert_with(Default::default);
        match selector.get(k) {
            Some(own) if own != v => {
                return Err(format!(
                    "RuntimeClass {class} conflicts with the pod's nodeSelector on {k}"
                ))
            }
            _ => {
                selector.insert(k.clone(), v.clone());
            }
        }
    }
    for t in scheduling.tolerations.iter().flatten() {
        let list = spec.tolerations.get_or_insert_with(Vec::new);
        if !list.contains(t) {
            list.push(t.clone());
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// KEP-3838: mutable pod scheduling directives while gated
// (pkg/apis/core/validation/validation.go, ValidatePodUpdate)
// ---------------------------------------------------------------------------

/// The pod's `spec.schedulingGates` names.
pub fn gate_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .into_iter()
        .flatten()
        .map(|g| g.name.clone())
        .collect()
}

/// The required node affinity's terms of a pod spec (`None`: no required affinity).
pub fn required_terms(spec: &PodSpec) -> Option<&Vec<NodeSelectorTerm>> {
    spec.affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .map(|r| &r.node_selector_terms)
}

/// The spec without what KEP-3838 lets change while gated.
fn without_placement(spec: &PodSpec) -> PodSpec {
    let mut spec = spec.clone();
    spec.scheduling_gates = None;
    spec.node_selector = None;
    if let Some(a) = spec.affinity.as_mut() {
        if let Some(na) = a.node_affinity.as_mut() {
            na.required_during_scheduling_ignored_during_execution = None;
            if *na == NodeAffinity::default() {
                a.node_affinity = None;
            }
        }
        // Setting affinity where there was none leaves an empty one behind.
        if *a == Affinity::default() {
            spec.affinity = None;
        }
    }
    spec
}

/// Whether `new` only appends to `old` (each old entry kept, in place).
fn only_appended<T: PartialEq>(old: Option<&Vec<T>>, new: Option<&Vec<T>>) -> bool {
    let (o, n) = (old.map_or(&[][..], |v| v), new.map_or(&[][..], |v| v));
    n.len() >= o.len() && o.iter().zip(n).all(|(a, b)| a == b)
}

/// KEP-3838's rules for a pod update: `None` when `after`'s spec may
/// follow `before`'s, else kube-apiserver's 422. While gated, a client may
/// add nodeSelector keys (`validateNodeSelectorMutation`: "only additions
/// to spec.nodeSelector are allowed (no mutations or deletions)") and
/// narrow required node affinity (`validateNodeAffinityMutation`: anything
/// where there was none; else the same number of terms, "no
/// additions/deletions to non-empty NodeSelectorTerms list are allowed",
/// each term only appended to); once ungated, nothing of the spec but the
/// gates' removal. Measured on kube-apiserver 1.36
/// (shared/notes/kube-apiserver-1.36.md).
pub fn placement_mutation(before: &Pod, after: &Pod, name: &str) -> Option<Answer> {
    let empty = PodSpec::default();
    let b = before.spec.as_ref().unwrap_or(&empty);
    let a = after.spec.as_ref().unwrap_or(&empty);
    let gated = !gate_names(before).is_empty();
    let forbidden = || {
        invalid("Pod", name, "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations), `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative) and `spec.schedulingGates`")
    };
    if !gated {
        let ungate = |s: &PodSpec| PodSpec {
            scheduling_gates: None,
            ..s.clone()
        };
        return (ungate(b) != ungate(a)).then(forbidden);
    }
    if without_placement(b) != without_placement(a) {
        return Some(forbidden());
    }
    let no_selector = BTreeMap::new();
    let old_sel = b.node_selector.as_ref().unwrap_or(&no_selector);
    let new_sel = a.node_selector.as_ref().unwrap_or(&no_selector);
    if old_sel.iter().any(|(k, v)| new_sel.get(k) != Some(v)) {
        let shown: Value = a.node_selector.as_ref().map_or(Value::Null, |s| json!(s));
        return Some(invalid(
            "Pod",
            name,
            &format!("spec.nodeSelector: Invalid value: {shown}: only additions to spec.nodeSelector are allowed (no mutations or deletions)"),
        ));
    }
    let Some(old_terms) = required_terms(b).filter(|t| !t.is_empty()) else {
        return None; // none before: anything may be set
    };
    let path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";
    let new_terms = required_terms(a).cloned().unwrap_or_default();
    if new_terms.len() != old_terms.len() {
        return Some(invalid(
            "Pod",
            name,
            &format!("{path}: Invalid value: {}: no additions/deletions to non-empty NodeSelectorTerms list are allowed", json!(new_terms)),
        ));
    }
    for (i, (o, n)) in old_terms.iter().zip(&new_terms).enumerate() {
        if !only_appended(o.match_expressions.as_ref(), n.match_expressions.as_ref())
            || !only_appended(o.match_fields.as_ref(), n.match_fields.as_ref())
        {
            return Some(invalid(
                "Pod",
                name,
                &format!("{path}[{i}]: Invalid value: {}: only additions are allowed (no mutations or deletions)", json!(n)),
            ));
        }
    }
    None
}

/// Scheduling gates may only be removed on update
/// (`validateSchedulingGates`: "only deletion is allowed").
pub fn gates_only_removed(before: &Pod, after: &Pod, name: &str) -> Option<Answer> {
    let old_gates = gate_names(before);
    let added = gate_names(after)
        .into_iter()
        .find(|g| !old_gates.contains(g))?;
    Some(invalid(
        "Pod",
        name,
        &format!("spec.schedulingGates: Forbidden: only deletion is allowed, but found new scheduling gate '{added}'"),
    ))
}
