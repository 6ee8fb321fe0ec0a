//! An adversarial scheduler, for the placement tests.
//!
//! It binds an ungated, unbound pod to one of the nodes that pass the
//! host-only filters (NodeAffinity with nodeSelector, TaintToleration for
//! NoSchedule/NoExecute, NodeUnschedulable, and extended resources against
//! allocatable minus what bound pods request: NodeResourcesFit for those),
//! choosing the **least** ready one: nodeproof's conditions False or
//! Unknown first, then stale heartbeats, then by name. A real
//! kube-scheduler chose the first node by name among equals in 3 runs of 3
//! (shared/notes/kube-apiserver-1.36.md); this one is worse on purpose, so
//! only a pod narrowed to ready nodes lands on one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodCondition, PodSpec, Taint, Toleration,
};

use crate::admission::{gate_names, required_terms};
use crate::kinds::Object;
use crate::state::TestApiServer;
use crate::store::Store;

/// nodeproof's condition types, the ones the adversarial scheduler ranks by.
pub const NODEPROOF_CONDITIONS: [&str; 4] = [
    "SeccompProfilesReady",
    "SeccompTracingReady",
    "GPUDriverReady",
    "GPUHealthy",
];

#[derive(Default)]
pub struct SchedulerState {
    /// No binding while paused (a test holds the scheduler between two writes).
    pub paused: bool,
    /// A heartbeat older than this ranks a node as stale.
    pub stale_after: Duration,
    /// When each pod (`ns/name`) was bound, and to which node.
    pub bound: BTreeMap<String, (String, Instant)>,
    /// The resourceVersion of the last pass: nothing changed, nothing to do
    /// (the pods that fit nowhere wait for a change, as in kube-scheduler's
    /// unschedulable queue).
    pub last_pass_rv: u64,
}

/// `ToleratesTaint` (k8s.io/api/core/v1/toleration.go).
pub fn toleration_tolerates(t: &Toleration, taint: &Taint) -> bool {
    let effect = t.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && taint.effect != effect {
        return false;
    }
    let key = t.key.as_deref().unwrap_or("");
    if !key.is_empty() && taint.key != key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        _ => false,
    }
}

/// One `NodeSelectorRequirement` against a node's labels (or its name, for
/// `matchFields`), as k8s.io/component-helpers nodeaffinity does.
pub fn requirement_matches(req: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values: Vec<&str> = req.values.iter().flatten().map(String::as_str).collect();
    let int = |v: &str| v.parse::<i64>().ok();
    match req.operator.as_str() {
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

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

pub fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    if exprs.is_empty() && fields.is_empty() {
        return false; // an empty term selects nothing
    }
    exprs
        .iter()
        .all(|r| requirement_matches(r, label(node, &r.key)))
        && fields.iter().all(|r| {
            r.key == "metadata.name" && requirement_matches(r, node.metadata.name.as_deref())
        })
}

/// Extended resources a pod spec requests (a request, else its limit), by
/// name: integers only, as the tests write them.
pub fn extended_requests(spec: Option<&PodSpec>) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for c in spec.map_or(&[][..], |s| &s.containers) {
        let Some(res) = &c.resources else { continue };
        let mut names: BTreeSet<&str> = BTreeSet::new();
        for part in [&res.requests, &res.limits] {
            names.extend(part.iter().flatten().map(|(k, _)| k.as_str()));
        }
        for n in names
            .into_iter()
            .filter(|n| n.contains('/') && !n.starts_with("kubernetes.io/"))
        {
            let q = res
                .requests
                .as_ref()
                .and_then(|r| r.get(n))
                .or(res.limits.as_ref().and_then(|l| l.get(n)))
                .map_or("0", |q| q.0.as_str());
            *out.entry(n.to_string()).or_insert(0) += q.parse::<i64>().unwrap_or(0);
        }
    }
    out
}

/// Whether the node carries every label of the pod's nodeSelector.
fn selector_matches(selector: Option<&BTreeMap<String, String>>, node: &Node) -> bool {
    selector
        .into_iter()
        .flatten()
        .all(|(k, v)| label(node, k) == Some(v.as_str()))
}

/// Whether `node` passes the host-only filters for `pod` (whose extended
/// requests are `wants`), given what the pods already bound there request.
pub fn fits(
    pod: &Pod,
    wants: &BTreeMap<String, i64>,
    node: &Node,
    used: &BTreeMap<String, i64>,
) -> bool {
    let empty = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&empty);
    if !selector_matches(spec.node_selector.as_ref(), node) {
        return false; // the cheap filter first: most nodes stop here
    }
    let affinity_ok =
        required_terms(spec).is_none_or(|terms| terms.iter().any(|t| term_matches(t, node)));
    let tolerations = spec.tolerations.as_deref().unwrap_or(&[]);
    let tolerated = |taint: &Taint| tolerations.iter().any(|t| toleration_tolerates(t, taint));
    let node_spec = node.spec.as_ref();
    let taints_ok = node_spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"))
        .all(tolerated);
    let cordon_ok = node_spec.and_then(|s| s.unschedulable) != Some(true)
        || tolerated(&Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        });
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let resources_ok = wants.iter().all(|(r, want)| {
        let have = allocatable
            .and_then(|a| a.get(r))
            .and_then(|q| q.0.parse::<i64>().ok())
            .unwrap_or(0);
        used.get(r).copied().unwrap_or(0) + want <= have
    });
    affinity_ok && taints_ok && cordon_ok && resources_ok
}

/// 0: a nodeproof condition False or Unknown; 1: one with a stale heartbeat; 2: ready.
pub fn readiness_rank(node: &Node, stale_after: Duration) -> u8 {
    let now = std::time::SystemTime::now();
    let ours: Vec<_> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| NODEPROOF_CONDITIONS.contains(&c.type_.as_str()))
        .collect();
    if ours.iter().any(|c| c.status != "True") {
        return 0;
    }
    let stale = ours.iter().any(|c| {
        c.last_heartbeat_time.as_ref().is_none_or(|t| {
            now.duration_since(std::time::SystemTime::from(t.0))
                .is_ok_and(|age| age > stale_after)
        })
    });
    if stale {
        1
    } else {
        2
    }
}

fn schedulable(pod: &Pod) -> bool {
    gate_names(pod).is_empty()
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_none_or(str::is_empty)
        && pod.metadata.deletion_timestamp.is_none()
}

/// One pass: binds every schedulable pod (no gates, no node, not being
/// deleted) to the least ready node that fits it; pods that fit nowhere wait.
pub fn schedule_pending(store: &mut Store, sched: &mut SchedulerState) {
    if sched.paused || sched.last_pass_rv == store.rv {
        return;
    }
    // Only a change to a pod or a node can make a pod schedulable (an Event
    // or a Lease written cannot): the pass rescans every object, so ten
    // thousand Event POSTs must not cost ten thousand rescans.
    let since = sched.last_pass_rv;
    let placement_changed = store
        .changes
        .iter()
        .rev()
        .take_while(|c| c.rv > since)
        .any(|c| c.resource == "pods" || c.resource == "nodes");
    sched.last_pass_rv = store.rv;
    if !placement_changed {
        return;
    }
    let pending: Vec<String> = store
        .pods()
        .filter(|(_, p)| schedulable(p))
        .map(|(k, _)| k.clone())
        .collect();
    if pending.is_empty() {
        return;
    }
    let mut used: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for (_, p) in store.pods() {
        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            let u = used.entry(n.to_string()).or_default();
            for (res, q) in extended_requests(p.spec.as_ref()) {
                *u.entry(res).or_insert(0) += q;
            }
        }
    }
    let empty = BTreeMap::new();
    // The nodes carrying each distinct nodeSelector, computed once per pass:
    // a thousand pending pods with one selector cost one scan, not a thousand.
    let mut by_selector: BTreeMap<Option<BTreeMap<String, String>>, Vec<String>> = BTreeMap::new();
    for key in pending {
        let pod = store.pod(&key).expect("a pending pod").clone();
        let wants = extended_requests(pod.spec.as_ref());
        let selector = pod.spec.as_ref().and_then(|s| s.node_selector.clone());
        let candidates = by_selector.entry(selector.clone()).or_insert_with(|| {
            store
                .nodes()
                .filter(|(_, n)| selector_matches(selector.as_ref(), n))
                .map(|(name, _)| name.clone())
                .collect()
        });
        let choice = candidates
            .iter()
            .filter_map(|name| Some((name, store.node(name)?)))
            .filter(|(name, n)| fits(&pod, &wants, n, used.get(*name).unwrap_or(&empty)))
            .map(|(name, n)| (readiness_rank(n, sched.stale_after), name.clone()))
            .min();
        let Some((_, node)) = choice else {
            continue;
        };
        let u = used.entry(node.clone()).or_default();
        for (res, q) in wants {
            *u.entry(res).or_insert(0) += q;
        }
        let mut after = pod;
        after.spec.get_or_insert_with(Default::default).node_name = Some(node.clone());
        crate::pods::set_condition(
            &mut after,
            PodCondition {
                type_: "PodScheduled".into(),
                status: "True".into(),
                reason: Some(String::new()),
                ..Default::default()
            },
        );
        store.write("pods", Object::Pod(Box::new(after)));
        sched.bound.insert(key, (node, Instant::now()));
    }
}

impl TestApiServer {
    /// Starts the adversarial scheduler (see [`crate::scheduler`]): every 5
    /// ms it binds the schedulable pods; heartbeats older than `stale_after`
    /// rank a node as stale. It stops with the server.
    pub fn start_scheduler(&self, stale_after: Duration) {
        self.with(|s| s.part::<SchedulerState>().stale_after = stale_after);
        let weak = Arc::downgrade(&self.state);
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(5));
            let Some(st) = weak.upgrade() else {
                return;
            };
            let mut s = st.lock().unwrap();
            let (store, sched) = s.store_and::<SchedulerState>();
            schedule_pending(store, sched);
        });
    }

    /// Holds (or lets go) every binding.
    pub fn pause_scheduler(&self, paused: bool) {
        self.with(|s| s.part::<SchedulerState>().paused = paused);
    }

    /// The node the scheduler bound `ns/name` to, and when.
    pub fn bound(&self, key: &str) -> Option<(String, Instant)> {
        self.with(|s| s.part::<SchedulerState>().bound.get(key).cloned())
    }

    /// Every binding so far: pod → node.
    pub fn bindings(&self) -> BTreeMap<String, String> {
        self.with(|s| {
            s.part::<SchedulerState>()
                .bound
                .iter()
                .map(|(k, (n, _))| (k.clone(), n.clone()))
                .collect()
        })
    }
}
