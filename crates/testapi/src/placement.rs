//! Placement: what kube-apiserver lets a client
//! change of a gated pod's placement, `pods/status` patches, and an
//! adversarial scheduler.
//!
//! - KEP-3838 (mutable pod scheduling directives, GA with pod scheduling
//!   readiness): while a pod has scheduling gates, `ValidatePodUpdate`
//!   (pkg/apis/core/validation/validation.go) lets a client add nodeSelector
//!   keys (`validateNodeSelectorMutation`: "only additions to
//!   spec.nodeSelector are allowed (no mutations or deletions)") and narrow
//!   required node affinity (`validateNodeAffinityMutation`: anything where
//!   there was none; else the same number of terms, "no additions/deletions
//!   to non-empty NodeSelectorTerms list are allowed", each term only
//!   appended to); once ungated, nothing of the spec but the gates' removal.
//!   Measured on kube-apiserver 1.36 (shared/notes/kube-apiserver-1.36.md).
//! - The scheduler binds an ungated, unbound pod to one of the nodes that
//!   pass the host-only filters (NodeAffinity with nodeSelector,
//!   TaintToleration for NoSchedule/NoExecute, NodeUnschedulable, and
//!   extended resources against allocatable minus what bound pods request:
//!   NodeResourcesFit for those), choosing the **least** ready one:
//!   nodeproof's conditions False or Unknown first, then stale heartbeats,
//!   then by name. A real kube-scheduler chose the first node by name among
//!   equals in 3 runs of 3 (the notes); this one is worse on purpose, so only
//!   a pod narrowed to ready nodes lands on one.

use super::*;

/// nodeproof's condition types, the ones the adversarial scheduler ranks by.
pub(crate) const NODEPROOF_CONDITIONS: [&str; 4] = [
    "SeccompProfilesReady",
    "SeccompTracingReady",
    "GPUDriverReady",
    "GPUHealthy",
];

#[derive(Default)]
pub(crate) struct SchedulerState {
    /// No binding while paused (a test holds the scheduler between two writes).
    paused: bool,
    /// A heartbeat older than this ranks a node as stale.
    stale_after: Duration,
    /// When each pod (`ns/name`) was bound, and to which node.
    bound: BTreeMap<String, (String, Instant)>,
    /// The resourceVersion of the last pass: nothing changed, nothing to do
    /// (the pods that fit nowhere wait for a change, as in kube-scheduler's
    /// unschedulable queue).
    last_pass_rv: u64,
}

/// The required node affinity's terms of a pod spec (`None`: no required affinity).
pub(crate) fn required_terms(spec: &Value) -> Option<&Vec<Value>> {
    spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .as_array()
}

/// The spec without what KEP-3838 lets change while gated.
pub(crate) fn without_placement(spec: &Value) -> Value {
    let mut spec = spec.clone();
    if let Some(o) = spec.as_object_mut() {
        o.remove("schedulingGates");
        o.remove("nodeSelector");
    }
    // `pointer_mut`, not indexing: `IndexMut` would insert the members it looks for.
    if let Some(na) = spec
        .pointer_mut("/affinity/nodeAffinity")
        .and_then(Value::as_object_mut)
    {
        na.remove("requiredDuringSchedulingIgnoredDuringExecution");
        if na.is_empty() {
            spec["affinity"]
                .as_object_mut()
                .unwrap()
                .remove("nodeAffinity");
        }
    }
    // Setting affinity where there was none leaves an empty object behind.
    if spec
        .pointer("/affinity")
        .and_then(Value::as_object)
        .is_some_and(|o| o.is_empty())
    {
        spec.as_object_mut().unwrap().remove("affinity");
    }
    spec
}

/// Whether `new` only appends to `old`'s list at `field` (each old entry kept, in place).
pub(crate) fn only_appended(old: &Value, new: &Value, field: &str) -> bool {
    let empty = Vec::new();
    let o = old[field].as_array().unwrap_or(&empty);
    let n = new[field].as_array().unwrap_or(&empty);
    n.len() >= o.len() && o.iter().zip(n).all(|(a, b)| a == b)
}

/// KEP-3838's rules for a pod update: `None` when `after`'s spec may follow
/// `before`'s, else kube-apiserver's 422.
pub(crate) fn placement_mutation(
    before: &Value,
    after: &Value,
    name: &str,
) -> Option<(u16, Value)> {
    let (b, a) = (&before["spec"], &after["spec"]);
    let gated = !gate_names(before).is_empty();
    let forbidden = || {
        invalid("Pod", name, "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations), `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative) and `spec.schedulingGates`")
    };
    if !gated {
        let mut x = b.clone();
        let mut y = a.clone();
        for v in [&mut x, &mut y] {
            if let Some(o) = v.as_object_mut() {
                o.remove("schedulingGates");
            }
        }
        return (x != y).then(forbidden);
    }
    if without_placement(b) != without_placement(a) {
        return Some(forbidden());
    }
    let empty = serde_json::Map::new();
    let old_sel = b["nodeSelector"].as_object().unwrap_or(&empty);
    let new_sel = a["nodeSelector"].as_object().unwrap_or(&empty);
    if old_sel.iter().any(|(k, v)| new_sel.get(k) != Some(v)) {
        return Some(invalid(
            "Pod",
            name,
            &format!("spec.nodeSelector: Invalid value: {}: only additions to spec.nodeSelector are allowed (no mutations or deletions)", a["nodeSelector"]),
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
        if !only_appended(o, n, "matchExpressions") || !only_appended(o, n, "matchFields") {
            return Some(invalid(
                "Pod",
                name,
                &format!("{path}[{i}]: Invalid value: {n}: only additions are allowed (no mutations or deletions)"),
            ));
        }
    }
    None
}

/// `PATCH pods/<name>/status` (strategic merge; `status.conditions` merge
/// by `type`, as the pod status's patch strategy says). A node may patch
/// only the status of the pods bound to it (the Node authorizer).
pub(crate) fn patch_pod_status(
    s: &mut State,
    who: &Identity,
    ns: &str,
    name: &str,
    content_type: &str,
    body: &Value,
) -> (u16, Value) {
    if content_type != "application/strategic-merge-patch+json"
        && content_type != "application/merge-patch+json"
    {
        return status(
            415,
            "UnsupportedMediaType",
            "strategic or merge patch only here",
        );
    }
    let key = format!("{ns}/{name}");
    let Some(before) = s.objects.get(&("pods", key.clone())).cloned() else {
        return status(404, "NotFound", &format!("pods \"{name}\" not found"));
    };
    if let Identity::Node(me) = who {
        if before["spec"]["nodeName"].as_str() != Some(me.as_str()) {
            return status(
                403,
                "Forbidden",
                &format!("pods \"{name}\" is forbidden: node \"{me}\" can only update pod status for pods with its spec.nodeName"),
            );
        }
    }
    // The status subresource ignores everything but `status`.
    let mut after = before.clone();
    if let Some(conditions) = body["status"]["conditions"].as_array() {
        for c in conditions {
            if c["type"].as_str().is_none_or(|t| t.is_empty()) {
                return invalid("Pod", name, "status.conditions.type: Required value");
            }
            let list = after["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            after["status"]["conditions"] = json!(merge_by_type(list, &json!([c])));
        }
    }
    let rv = s.next_rv();
    after["metadata"]["resourceVersion"] = json!(rv);
    s.objects.insert(("pods", key), after.clone());
    let rv = s.rv;
    s.changes
        .push((rv, "pods", Some(before), Some(after.clone())));
    (200, after)
}

/// `ToleratesTaint` (k8s.io/api/core/v1/toleration.go).
pub(crate) fn toleration_tolerates(t: &Value, taint: &Value) -> bool {
    let effect = t["effect"].as_str().unwrap_or("");
    if !effect.is_empty() && taint["effect"].as_str() != Some(effect) {
        return false;
    }
    let key = t["key"].as_str().unwrap_or("");
    if !key.is_empty() && taint["key"].as_str() != Some(key) {
        return false;
    }
    match t["operator"].as_str().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => t["value"].as_str().unwrap_or("") == taint["value"].as_str().unwrap_or(""),
        _ => false,
    }
}

/// One `NodeSelectorRequirement` against a node's labels (or its name, for
/// `matchFields`), as k8s.io/component-helpers nodeaffinity does.
pub(crate) fn requirement_matches(req: &Value, value: Option<&str>) -> bool {
    let values: Vec<&str> = req["values"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let int = |v: &str| v.parse::<i64>().ok();
    match req["operator"].as_str().unwrap_or("") {
        "In" => value.is_some_and(|v| values.contains(&v)),
        "NotIn" => value.is_none_or(|v| !values.contains(&v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => {
            matches!((value.and_then(int), values.first().and_then(|v| int(v))), (Some(a), Some(b)) if a > b)
        }
        "Lt" => {
            matches!((value.and_then(int), values.first().and_then(|v| int(v))), (Some(a), Some(b)) if a < b)
        }
        _ => false,
    }
}

pub(crate) fn term_matches(term: &Value, node: &Value) -> bool {
    let exprs = term["matchExpressions"].as_array();
    let fields = term["matchFields"].as_array();
    if exprs.is_none_or(|e| e.is_empty()) && fields.is_none_or(|f| f.is_empty()) {
        return false; // an empty term selects nothing
    }
    let labels = &node["metadata"]["labels"];
    exprs
        .into_iter()
        .flatten()
        .all(|r| requirement_matches(r, r["key"].as_str().and_then(|k| labels[k].as_str())))
        && fields.into_iter().flatten().all(|r| {
            r["key"] == "metadata.name" && requirement_matches(r, node["metadata"]["name"].as_str())
        })
}

/// Extended resources a pod spec requests (a request, else its limit), by name:
/// integers only, as the tests write them.
pub(crate) fn extended_requests(spec: &Value) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for c in spec["containers"].as_array().into_iter().flatten() {
        let res = &c["resources"];
        let mut names: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
        for part in ["requests", "limits"] {
            names.extend(
                res[part]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, _)| k.as_str()),
            );
        }
        for n in names
            .into_iter()
            .filter(|n| n.contains('/') && !n.starts_with("kubernetes.io/"))
        {
            let q = res["requests"][n]
                .as_str()
                .or(res["limits"][n].as_str())
                .unwrap_or("0");
            *out.entry(n.to_string()).or_insert(0) += q.parse::<i64>().unwrap_or(0);
        }
    }
    out
}

/// Whether `node` passes the host-only filters for `pod` (whose extended
/// requests are `wants`), given what the pods already bound there request.
pub(crate) fn fits(
    pod: &Value,
    wants: &BTreeMap<String, i64>,
    node: &Value,
    used: &BTreeMap<String, i64>,
) -> bool {
    let spec = &pod["spec"];
    let labels = &node["metadata"]["labels"];
    let selector_ok = spec["nodeSelector"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| &labels[k] == v);
    let affinity_ok =
        required_terms(spec).is_none_or(|terms| terms.iter().any(|t| term_matches(t, node)));
    let tolerations: Vec<&Value> = spec["tolerations"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let tolerated = |taint: &Value| tolerations.iter().any(|t| toleration_tolerates(t, taint));
    let taints_ok = node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| matches!(t["effect"].as_str(), Some("NoSchedule" | "NoExecute")))
        .all(tolerated);
    let cordon_ok = node["spec"]["unschedulable"] != json!(true)
        || tolerated(&json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}));
    if !selector_ok {
        return false; // the cheap filter first: most nodes stop here
    }
    let resources_ok = wants.iter().all(|(r, want)| {
        let have = node["status"]["allocatable"][r]
            .as_str()
            .and_then(|q| q.parse::<i64>().ok())
            .unwrap_or(0);
        used.get(r).copied().unwrap_or(0) + want <= have
    });
    selector_ok && affinity_ok && taints_ok && cordon_ok && resources_ok
}

/// 0: a nodeproof condition False or Unknown; 1: one with a stale heartbeat; 2: ready.
pub(crate) fn readiness_rank(node: &Value, stale_after: Duration) -> u8 {
    let now = std::time::SystemTime::now();
    let ours: Vec<&Value> = node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            c["type"]
                .as_str()
                .is_some_and(|t| NODEPROOF_CONDITIONS.contains(&t))
        })
        .collect();
    if ours.iter().any(|c| c["status"] != "True") {
        return 0;
    }
    let stale = ours.iter().any(|c| {
        c["lastHeartbeatTime"]
            .as_str()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .is_none_or(|t| {
                now.duration_since(std::time::SystemTime::from(t))
                    .is_ok_and(|age| age > stale_after)
            })
    });
    if stale {
        1
    } else {
        2
    }
}

/// One pass: binds every schedulable pod (no gates, no node, not being
/// deleted) to the least ready node that fits it; pods that fit nowhere wait.
pub(crate) fn schedule_pending(s: &mut State) {
    if s.scheduler.paused || s.scheduler.last_pass_rv == s.rv {
        return;
    }
    // Only a change to a pod or a node can make a pod schedulable (an Event
    // or a Lease written cannot): the pass rescans every object, so ten
    // thousand Event POSTs must not cost ten thousand rescans.
    let since = s.scheduler.last_pass_rv;
    let placement_changed = s
        .changes
        .iter()
        .rev()
        .take_while(|(rv, ..)| *rv > since)
        .any(|(_, r, ..)| *r == "pods" || *r == "nodes");
    s.scheduler.last_pass_rv = s.rv;
    if !placement_changed {
        return;
    }
    let pending: Vec<String> = s
        .objects
        .iter()
        .filter(|((r, _), p)| {
            *r == "pods"
                && gate_names(p).is_empty()
                && p["spec"]["nodeName"].as_str().is_none_or(str::is_empty)
                && p["metadata"]["deletionTimestamp"].is_null()
        })
        .map(|((_, k), _)| k.clone())
        .collect();
    if pending.is_empty() {
        return;
    }
    let mut used: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for ((r, _), p) in &s.objects {
        if let (true, Some(n)) = (*r == "pods", p["spec"]["nodeName"].as_str()) {
            let u = used.entry(n.to_string()).or_default();
            for (res, q) in extended_requests(&p["spec"]) {
                *u.entry(res).or_insert(0) += q;
            }
        }
    }
    let empty = BTreeMap::new();
    // The nodes carrying each distinct nodeSelector, computed once per pass:
    // a thousand pending pods with one selector cost one scan, not a thousand.
    let mut by_selector: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for key in pending {
        let pod = s.objects[&("pods", key.clone())].clone();
        let wants = extended_requests(&pod["spec"]);
        let selector = &pod["spec"]["nodeSelector"];
        let candidates = by_selector.entry(selector.to_string()).or_insert_with(|| {
            s.nodes
                .iter()
                .filter(|(_, n)| {
                    selector
                        .as_object()
                        .into_iter()
                        .flatten()
                        .all(|(k, v)| &n["metadata"]["labels"][k] == v)
                })
                .map(|(name, _)| name.clone())
                .collect()
        });
        let choice = candidates
            .iter()
            .map(|name| (name, &s.nodes[name]))
            .filter(|(name, n)| fits(&pod, &wants, n, used.get(*name).unwrap_or(&empty)))
            .map(|(name, n)| (readiness_rank(n, s.scheduler.stale_after), name.clone()))
            .min();
        let Some((_, node)) = choice else {
            continue;
        };
        let u = used.entry(node.clone()).or_default();
        for (res, q) in wants {
            *u.entry(res).or_insert(0) += q;
        }
        let mut after = pod.clone();
        after["spec"]["nodeName"] = json!(node);
        let list = after["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        after["status"]["conditions"] = json!(merge_by_type(
            list,
            &json!([{"type": "PodScheduled", "status": "True", "reason": ""}])
        ));
        let rv = s.next_rv();
        after["metadata"]["resourceVersion"] = json!(rv);
        s.objects.insert(("pods", key.clone()), after.clone());
        let rv = s.rv;
        s.changes.push((rv, "pods", Some(pod), Some(after)));
        s.scheduler.bound.insert(key, (node, Instant::now()));
    }
}

impl TestApiServer {
    /// Starts the adversarial scheduler (see "Placement"): every 5 ms it binds
    /// the schedulable pods; heartbeats older than `stale_after` rank a node
    /// as stale. It stops with the server.
    pub fn start_scheduler(&self, stale_after: Duration) {
        self.state.lock().unwrap().scheduler.stale_after = stale_after;
        let weak = Arc::downgrade(&self.state);
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(5));
            let Some(st) = weak.upgrade() else {
                return;
            };
            schedule_pending(&mut st.lock().unwrap());
        });
    }

    /// Holds (or lets go) every binding.
    pub fn pause_scheduler(&self, paused: bool) {
        self.state.lock().unwrap().scheduler.paused = paused;
    }

    /// The node the scheduler bound `ns/name` to, and when.
    pub fn bound(&self, key: &str) -> Option<(String, Instant)> {
        self.state.lock().unwrap().scheduler.bound.get(key).cloned()
    }

    /// Every binding so far: pod → node.
    pub fn bindings(&self) -> BTreeMap<String, String> {
        self.state
            .lock()
            .unwrap()
            .scheduler
            .bound
            .iter()
            .map(|(k, (n, _))| (k.clone(), n.clone()))
            .collect()
    }

    /// Creates a pod as kube-apiserver's admission leaves it: the RuntimeClass
    /// plugin merges the class's `scheduling` (nodeSelector, tolerations) in
    /// (plugin/pkg/admission/runtimeclass/admission.go; a conflicting key is
    /// refused: this panics, a test's mistake), and a gated pod carries
    /// `PodScheduled=False` reason `SchedulingGated` (as the scheduler's
    /// SchedulingGates plugin reports it).
    pub fn create_pod(&self, mut pod: Value) {
        let class = pod["spec"]["runtimeClassName"].as_str().map(String::from);
        if let Some(class) = class {
            let rc = self
                .state
                .lock()
                .unwrap()
                .objects
                .get(&("runtimeclasses", class.clone()))
                .cloned();
            if let Some(rc) = rc {
                for (k, v) in rc["scheduling"]["nodeSelector"]
                    .as_object()
                    .into_iter()
                    .flatten()
                {
                    match pod["spec"]["nodeSelector"].get(k) {
                        Some(own) if own != v => panic!(
                            "RuntimeClass {class} conflicts with the pod's nodeSelector on {k}"
                        ),
                        _ => pod["spec"]["nodeSelector"][k] = v.clone(),
                    }
                }
                for t in rc["scheduling"]["tolerations"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let list = pod["spec"]["tolerations"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    if !list.contains(t) {
                        let mut list = list;
                        list.push(t.clone());
                        pod["spec"]["tolerations"] = json!(list);
                    }
                }
            }
        }
        if !gate_names(&pod).is_empty() {
            pod["status"]["conditions"] =
                json!([{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]);
        }
        self.put("pods", pod);
    }
}
