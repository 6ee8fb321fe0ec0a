//! The controller's picture of the cluster, kept up to date from the
//! watches, and which pods each change could affect. Pure: the I/O loop
//! feeds it objects and the time, and carries out what it decides.
//!
//! Incremental: a Node change re-judges only the pods that node could host
//! before or after the change (for any other pod neither the matching set
//! nor the histogram moves), and none at all when the node judges alike
//! before and after (a heartbeat-only write, most Node writes). A heartbeat
//! going stale is a change too, found by [`Gatekeeper::tick`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;

use super::config::Policy;
use super::judge::{could_host, judge, placement, ready_for, Verdict};
use super::node::NodeFacts;
use super::pod::{ClassFacts, PodKey, PodNeeds};
use super::steer::{label_patch, wanted_labels};

#[derive(Debug, Clone)]
pub struct PodEntry {
    pub needs: PodNeeds,
    /// Gates removed by this controller, not yet gone from the watched pod.
    pub released: BTreeSet<String>,
}

/// What [`Gatekeeper::tick`] found changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tick {
    /// Pods to judge again.
    pub pods: Vec<PodKey>,
    /// Nodes whose heartbeats went stale (or fresh) since the last look.
    pub nodes: Vec<String>,
}

/// What to do for one pod after judging it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub key: PodKey,
    /// Gates to remove now: (name, index in the pod's `schedulingGates`).
    pub release: Vec<(String, usize)>,
    /// The verdicts of the gates removed now (the pod conditions quote them).
    pub released: Vec<Verdict>,
    /// The verdicts of the gates that stay.
    pub waiting: Vec<Verdict>,
}

impl Decision {
    /// The Event message while the pod stays gated; `None` when nothing waits.
    pub fn message(&self) -> Option<String> {
        if self.waiting.is_empty() {
            return None;
        }
        Some(
            self.waiting
                .iter()
                .map(Verdict::message)
                .collect::<Vec<_>>()
                .join("; "),
        )
    }
}

#[derive(Debug)]
pub struct Gatekeeper {
    policy: Policy,
    nodes: HashMap<String, NodeFacts>,
    /// Each node's stale conditions when last looked at ([`NodeFacts::stale_set`]).
    stale: HashMap<String, u8>,
    classes: HashMap<String, ClassFacts>,
    pods: HashMap<PodKey, PodEntry>,
    /// label key → value → the nodes carrying it: a pod with a nodeSelector
    /// is judged against the nodes of its rarest pair only (the others
    /// cannot match it, so the verdict is the same).
    by_label: HashMap<String, HashMap<String, HashSet<String>>>,
    /// Each node's readiness for each gate's conditions (in policy order),
    /// when last looked at, and how many nodes are ready per gate: what the
    /// label index's left-out nodes count as in a verdict.
    node_ready: HashMap<String, Vec<bool>>,
    ready_count: Vec<usize>,
}

impl Gatekeeper {
    pub fn new(policy: Policy) -> Self {
        Gatekeeper {
            nodes: HashMap::new(),
            stale: HashMap::new(),
            classes: HashMap::new(),
            pods: HashMap::new(),
            by_label: HashMap::new(),
            node_ready: HashMap::new(),
            ready_count: vec![0; policy.gates.len()],
            policy,
        }
    }

    /// Looks at `name`'s readiness per gate again (`None`: gone).
    fn refresh_ready(&mut self, name: &str, now: SystemTime) {
        if let Some(old) = self.node_ready.remove(name) {
            for (count, was) in self.ready_count.iter_mut().zip(old) {
                *count -= usize::from(was);
            }
        }
        let Some(facts) = self.nodes.get(name) else {
            return;
        };
        let flags: Vec<bool> = self
            .policy
            .gates
            .iter()
            .map(|g| ready_for(g, facts, now, self.policy.stale_after))
            .collect();
        for (count, is) in self.ready_count.iter_mut().zip(&flags) {
            *count += usize::from(*is);
        }
        self.node_ready.insert(name.to_string(), flags);
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn pod(&self, key: &str) -> Option<&PodEntry> {
        self.pods.get(key)
    }

    pub fn pod_keys(&self) -> Vec<PodKey> {
        self.pods.keys().cloned().collect()
    }

    pub fn node_names(&self) -> Vec<String> {
        self.nodes.keys().cloned().collect()
    }

    pub fn class_names(&self) -> Vec<String> {
        self.classes.keys().cloned().collect()
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Gated pods per configured gate (every configured gate listed).
    pub fn gated_by_gate(&self) -> BTreeMap<String, usize> {
        let mut out: BTreeMap<String, usize> = self
            .policy
            .gates
            .iter()
            .map(|g| (g.name.clone(), 0))
            .collect();
        for e in self.pods.values() {
            for g in &e.needs.gates {
                if !e.released.contains(g) {
                    *out.entry(g.clone()).or_insert(0) += 1;
                }
            }
        }
        out
    }

    /// A pod added or changed: the keys to judge (it, or none when it no
    /// longer waits on a configured gate).
    pub fn upsert_pod(&mut self, pod: &Pod) -> Vec<PodKey> {
        let key = pod_key(pod);
        match PodNeeds::of(pod, &self.policy) {
            None => {
                self.pods.remove(&key);
                vec![]
            }
            Some(needs) => {
                let released = self
                    .pods
                    .remove(&key)
                    .filter(|e| e.needs.uid == needs.uid)
                    .map(|e| {
                        let mut r = e.released;
                        // What the watch shows gone is no longer pending.
                        r.retain(|g| needs.all_gates.contains(g));
                        r
                    })
                    .unwrap_or_default();
                self.pods.insert(key.clone(), PodEntry { needs, released });
                vec![key]
            }
        }
    }

    pub fn delete_pod(&mut self, key: &str) {
        self.pods.remove(key);
    }

    /// A Node added or changed: the pods it could affect.
    pub fn upsert_node(&mut self, node: &Node, now: SystemTime) -> Vec<PodKey> {
        let facts = NodeFacts::of(node);
        let name = facts.name.clone();
        self.stale
            .insert(name.clone(), facts.stale_set(now, self.policy.stale_after));
        if let Some(old) = self.nodes.get(&name) {
            if old.labels != facts.labels {
                unindex(&mut self.by_label, old);
                index(&mut self.by_label, &facts);
            }
        } else {
            index(&mut self.by_label, &facts);
        }
        let before = self.nodes.insert(name.clone(), facts);
        self.refresh_ready(&name, now);
        let after = &self.nodes[&name];
        if before
            .as_ref()
            .is_some_and(|b| b.judged_alike(after, now, self.policy.stale_after))
        {
            return vec![];
        }
        self.affected([before.as_ref(), Some(after)])
    }

    pub fn delete_node(&mut self, name: &str) -> Vec<PodKey> {
        self.stale.remove(name);
        let gone = self.nodes.remove(name);
        self.refresh_ready(name, SystemTime::UNIX_EPOCH);
        match gone {
            Some(before) => {
                unindex(&mut self.by_label, &before);
                self.affected([Some(&before), None])
            }
            None => vec![],
        }
    }

    /// A RuntimeClass added or changed: the pods of that class.
    pub fn upsert_class(&mut self, rc: &RuntimeClass) -> Vec<PodKey> {
        let name = rc.metadata.name.clone().unwrap_or_default();
        let facts = ClassFacts::of(rc);
        if self.classes.get(&name) == Some(&facts) {
            return vec![];
        }
        self.classes.insert(name.clone(), facts);
        self.of_class(&name)
    }

    pub fn delete_class(&mut self, name: &str) -> Vec<PodKey> {
        if self.classes.remove(name).is_none() {
            return vec![];
        }
        self.of_class(name)
    }

    /// Heartbeats that went stale since the last look: the pods those nodes
    /// could host, and the nodes (whose readiness labels may change).
    pub fn tick(&mut self, now: SystemTime) -> Tick {
        let mut changed = Vec::new();
        for (name, facts) in &self.nodes {
            let set = facts.stale_set(now, self.policy.stale_after);
            if self.stale.get(name) != Some(&set) {
                self.stale.insert(name.clone(), set);
                changed.push(name.clone());
            }
        }
        for name in &changed {
            self.refresh_ready(name, now);
        }
        let mut keys = BTreeSet::new();
        for name in &changed {
            let node = &self.nodes[name];
            keys.extend(self.affected([Some(node), None]));
        }
        changed.sort();
        Tick {
            pods: keys.into_iter().collect(),
            nodes: changed,
        }
    }

    /// The patch of `node`'s labels that makes its readiness labels what its
    /// conditions say at `now` (`steer::label_patch`); `None` when they are,
    /// or the node is unknown.
    pub fn label_patch(&self, node: &str, now: SystemTime) -> Option<serde_json::Value> {
        let facts = self.nodes.get(node)?;
        label_patch(&facts.labels, &wanted_labels(&self.policy, facts, now))
    }

    /// Judge one pod at `now`; `None` when it is no longer tracked.
    pub fn judge(&self, key: &str, now: SystemTime) -> Option<Decision> {
        let e = self.pods.get(key)?;
        let mut verdicts = match self.candidates(&e.needs) {
            Some(names) => {
                let nodes = names.iter().filter_map(|n| self.nodes.get(n));
                judge(&e.needs, &self.policy, nodes, &self.classes, now)
            }
            None => judge(
                &e.needs,
                &self.policy,
                self.nodes.values(),
                &self.classes,
                now,
            ),
        };
        for v in verdicts.iter_mut().filter(|v| v.blocked.is_none()) {
            // The nodes the label index left out do not carry the pod's nodeSelector.
            let ready = self
                .policy
                .gates
                .iter()
                .position(|g| g.name == v.gate)
                .map_or(0, |i| self.ready_count[i]);
            v.add_excluded(
                self.nodes.len().saturating_sub(v.total),
                ready.saturating_sub(v.conditions_ready),
            );
        }
        let mut release = Vec::new();
        let mut released = Vec::new();
        let mut waiting = Vec::new();
        for v in verdicts {
            if e.released.contains(&v.gate) {
                continue;
            }
            if v.release {
                let index = e.needs.all_gates.iter().position(|g| *g == v.gate)?;
                release.push((v.gate.clone(), index));
                released.push(v);
            } else if !v.deferred {
                waiting.push(v);
            }
        }
        Some(Decision {
            key: key.to_string(),
            release,
            released,
            waiting,
        })
    }

    /// The patch removing `gate` succeeded: do not remove it again before
    /// the watch shows the pod without it.
    pub fn mark_released(&mut self, key: &str, gate: &str) {
        if let Some(e) = self.pods.get_mut(key) {
            e.released.insert(gate.to_string());
        }
    }

    /// The nodes carrying the rarest pair of the pod's merged nodeSelector;
    /// `None`: no selector (every node is a candidate) or no placement.
    fn candidates(&self, needs: &PodNeeds) -> Option<&HashSet<String>> {
        static NONE: std::sync::OnceLock<HashSet<String>> = std::sync::OnceLock::new();
        let p = placement(needs, &self.classes).ok()?;
        p.selector
            .iter()
            .map(|(k, v)| {
                self.by_label
                    .get(k)
                    .and_then(|values| values.get(v))
                    .unwrap_or_else(|| NONE.get_or_init(HashSet::new))
            })
            .min_by_key(|set| set.len())
    }

    fn of_class(&self, class: &str) -> Vec<PodKey> {
        let mut keys: Vec<PodKey> = self
            .pods
            .iter()
            .filter(|(_, e)| e.needs.runtime_class.as_deref() == Some(class))
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys
    }

    /// The pods any of `nodes` could host.
    fn affected(&self, nodes: [Option<&NodeFacts>; 2]) -> Vec<PodKey> {
        let mut keys: Vec<PodKey> = self
            .pods
            .iter()
            .filter(|(_, e)| match placement(&e.needs, &self.classes) {
                Ok(p) => nodes.iter().flatten().any(|n| could_host(&p, n)),
                // No node is considered for it, before or after.
                Err(_) => false,
            })
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys
    }
}

fn index(by_label: &mut HashMap<String, HashMap<String, HashSet<String>>>, node: &NodeFacts) {
    for (k, v) in &node.labels {
        by_label
            .entry(k.clone())
            .or_default()
            .entry(v.clone())
            .or_default()
            .insert(node.name.clone());
    }
}

fn unindex(by_label: &mut HashMap<String, HashMap<String, HashSet<String>>>, node: &NodeFacts) {
    for (k, v) in &node.labels {
        if let Some(values) = by_label.get_mut(k) {
            if let Some(names) = values.get_mut(v) {
                names.remove(&node.name);
                if names.is_empty() {
                    values.remove(v);
                }
            }
            if values.is_empty() {
                by_label.remove(k);
            }
        }
    }
}

pub fn pod_key(pod: &Pod) -> PodKey {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::config::GateConfig;
    use serde_json::{json, Value};
    use std::time::Duration;

    const GPU: &str = "nodeproof.dev/gpu-driver-ready";

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn rfc3339(at: SystemTime) -> String {
        let secs = at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        k8s_openapi::jiff::Timestamp::from_second(secs as i64)
            .unwrap()
            .to_string()
    }

    fn node(name: &str, pool: &str, status: &str, heartbeat: SystemTime) -> Node {
        let hb = rfc3339(heartbeat);
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"pool": pool, "gate.nodeproof.dev/gpu-driver-ready": "ready"}},
            "status": {"allocatable": {"nvidia.com/gpu": "1"}, "conditions": [
                {"type": "GPUDriverReady", "status": status, "reason": "R", "lastHeartbeatTime": hb},
                {"type": "GPUHealthy", "status": "True", "reason": "R", "lastHeartbeatTime": hb},
            ]},
        }))
        .unwrap()
    }

    fn pod(name: &str, spec: Value) -> Pod {
        let mut v = json!({"metadata": {"namespace": "ml", "name": name, "uid": name},
            "spec": {"containers": [{"name": "c"}],
                     "schedulingGates": [{"name": "example.com/first"}, {"name": GPU}]}});
        for (k, val) in spec.as_object().unwrap() {
            v["spec"][k] = val.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn node_changes_rejudge_only_the_pods_they_could_affect() {
        let mut g = Gatekeeper::new(GateConfig::default().policy());
        assert!(g
            .upsert_node(&node("a1", "a", "False", t(0)), t(0))
            .is_empty());
        g.upsert_node(&node("b1", "b", "False", t(0)), t(0));
        assert_eq!(
            g.upsert_pod(&pod("pa", json!({"nodeSelector": {"pool": "a"}}))),
            ["ml/pa"]
        );
        g.upsert_pod(&pod("pb", json!({"nodeSelector": {"pool": "b"}})));
        g.upsert_pod(&pod("any", json!({})));
        let d = g.judge("ml/pa", t(1)).unwrap();
        assert!(d.release.is_empty());
        assert_eq!(
            d.message().unwrap(),
            "waiting for nodeproof.dev/gpu-driver-ready: 0 of 2 nodes ready for the pod: 1 GPUDriverReady=False (R), 1 excluded by the pod's nodeSelector or affinity"
        );
        // A heartbeat alone: nothing to re-judge.
        assert!(g
            .upsert_node(&node("a1", "a", "False", t(60)), t(60))
            .is_empty());
        // a1 turns ready: the pods it could host, not pb.
        assert_eq!(
            g.upsert_node(&node("a1", "a", "True", t(61)), t(61)),
            ["ml/any", "ml/pa"]
        );
        let d = g.judge("ml/pa", t(61)).unwrap();
        assert_eq!(d.release, [(GPU.to_string(), 1)]);
        assert_eq!(d.message(), None);
        assert!(g.judge("ml/pb", t(61)).unwrap().release.is_empty());
        // Moving a node to another pool affects the pods of both.
        assert_eq!(
            g.upsert_node(&node("a1", "b", "True", t(62)), t(62)),
            ["ml/any", "ml/pa", "ml/pb"]
        );
        assert_eq!(g.delete_node("b1"), ["ml/any", "ml/pb"]);
        assert_eq!(g.gated_by_gate()[GPU], 3);
        assert_eq!(g.gated_by_gate()["nodeproof.dev/seccomp-ready"], 0);
    }

    #[test]
    fn the_label_index_judges_as_every_node_would() {
        let mut g = Gatekeeper::new(GateConfig::default().policy());
        let mut all = Vec::new();
        for (i, (pool, status)) in [("a", "False"), ("a", "True"), ("b", "True"), ("c", "False")]
            .into_iter()
            .enumerate()
        {
            let n = node(&format!("n{i}"), pool, status, t(0));
            g.upsert_node(&n, t(0));
            all.push(NodeFacts::of(&n));
        }
        // Relabelled and deleted nodes leave the index.
        g.upsert_node(&node("n3", "a", "False", t(0)), t(0));
        all[3] = NodeFacts::of(&node("n3", "a", "False", t(0)));
        g.delete_node("n2");
        all.remove(2);
        for spec in [
            json!({"nodeSelector": {"pool": "a"}}),
            json!({"nodeSelector": {"pool": "b"}}),
            json!({"nodeSelector": {"pool": "c"}}),
            json!({"nodeSelector": {"pool": "a", "missing": "x"}}),
            json!({}),
        ] {
            let p = pod("p", spec.clone());
            g.upsert_pod(&p);
            let needs = PodNeeds::of(&p, g.policy()).unwrap();
            let every = judge(&needs, g.policy(), &all, &HashMap::new(), t(1));
            let d = g.judge("ml/p", t(1)).unwrap();
            let want: Vec<Verdict> = every.iter().filter(|v| !v.release).cloned().collect();
            assert_eq!(d.waiting, want, "{spec}");
            assert_eq!(
                d.release.len(),
                every.iter().filter(|v| v.release).count(),
                "{spec}"
            );
        }
    }

    #[test]
    fn a_stale_heartbeat_is_a_change_found_by_tick() {
        let mut g = Gatekeeper::new(GateConfig::default().policy());
        let stale_after = g.policy().stale_after;
        g.upsert_node(&node("a1", "a", "True", t(0)), t(0));
        g.upsert_pod(&pod("p", json!({})));
        assert_eq!(g.judge("ml/p", t(1)).unwrap().release.len(), 1);
        assert!(g.tick(t(1)).pods.is_empty());
        let later = t(0) + stale_after + Duration::from_secs(1);
        let tick = g.tick(later);
        assert_eq!(tick.pods, ["ml/p"]);
        assert_eq!(tick.nodes, ["a1"]);
        assert!(g.tick(later).pods.is_empty(), "once per change");
        let d = g.judge("ml/p", later).unwrap();
        assert!(d.release.is_empty());
        assert!(d
            .message()
            .unwrap()
            .contains("1 with a GPUDriverReady heartbeat older than 15m"));
        // The label follows: the stale node is to lose its readiness label.
        assert_eq!(
            g.label_patch("a1", later),
            Some(json!({"metadata": {"labels": {"gate.nodeproof.dev/gpu-driver-ready": null}}}))
        );
        assert_eq!(g.label_patch("a1", t(1)), None, "fresh: as it is");
    }

    #[test]
    fn released_gates_are_not_released_twice_and_foreign_gates_never() {
        let mut g = Gatekeeper::new(GateConfig::default().policy());
        g.upsert_node(&node("a1", "a", "True", t(0)), t(0));
        g.upsert_pod(&pod("p", json!({})));
        let d = g.judge("ml/p", t(1)).unwrap();
        assert_eq!(
            d.release,
            [(GPU.to_string(), 1)],
            "only the configured gate, by its index"
        );
        g.mark_released("ml/p", GPU);
        let d = g.judge("ml/p", t(2)).unwrap();
        assert!(d.release.is_empty() && d.waiting.is_empty());
        assert_eq!(g.gated_by_gate()[GPU], 0);
        // The watch shows the pod with only the foreign gate left: not ours any more.
        let mut left = pod("p", json!({}));
        left.spec
            .as_mut()
            .unwrap()
            .scheduling_gates
            .as_mut()
            .unwrap()
            .pop();
        assert!(g.upsert_pod(&left).is_empty());
        assert!(g.pod("ml/p").is_none());
    }

    #[test]
    fn class_changes_rejudge_the_pods_of_the_class() {
        let mut g = Gatekeeper::new(GateConfig::default().policy());
        g.upsert_node(&node("a1", "a", "True", t(0)), t(0));
        g.upsert_pod(&pod("p", json!({"runtimeClassName": "vllm"})));
        g.upsert_pod(&pod("q", json!({})));
        assert!(
            g.judge("ml/p", t(1)).unwrap().release.is_empty(),
            "class not seen yet"
        );
        let rc: RuntimeClass =
            serde_json::from_value(json!({"metadata": {"name": "vllm"}, "handler": "runc"}))
                .unwrap();
        assert_eq!(g.upsert_class(&rc), ["ml/p"]);
        assert!(g.upsert_class(&rc).is_empty(), "unchanged");
        assert_eq!(g.judge("ml/p", t(1)).unwrap().release.len(), 1);
        assert_eq!(g.delete_class("vllm"), ["ml/p"]);
    }
}
