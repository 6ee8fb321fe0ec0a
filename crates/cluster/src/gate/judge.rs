//! Whether a gate may go: at least one node could host the pod and reports
//! everything the gate waits for. Pure, with `now` passed in.
//!
//! "Could host" is the scheduler's filters that depend on the node alone
//! and never on what else runs there: the pod's `nodeSelector` and required
//! node affinity (NodeAffinity), its tolerations against NoSchedule and
//! NoExecute taints (TaintToleration), `spec.unschedulable` (NodeUnschedulable),
//! each with the RuntimeClass's `scheduling` merged in. Of those nodes, one
//! is *ready* for a gate when its allocatable covers every extended resource
//! the pod requests, its contract label is `ready` (when the gate asks for
//! the contract) and every condition the gate names is True with a fresh
//! heartbeat. Not simulated: CPU/memory fit, pod (anti-)affinity, topology
//! spread, volumes; the scheduler still decides where the pod goes.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::NodeSelector;

use nodeproof_findings::{ConditionStatus, ConditionType};
use nodeproof_report::contract::ContractState;
use nodeproof_report::marks::Taint;
use nodeproof_report::taints::{tolerates, untolerated, Toleration};

use super::affinity;
use super::config::{Gate, Policy, READY};
use super::node::NodeFacts;
use super::pod::{ClassFacts, PodNeeds};

/// `v1.TaintNodeUnschedulable`: the NodeUnschedulable filter lets a pod
/// onto a cordoned node only when it tolerates this taint (whether or not
/// the node carries it).
const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// Why no node is even considered.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Blocked {
    /// The pod names a RuntimeClass this controller has not seen.
    ClassNotFound(String),
    /// The class's `scheduling.nodeSelector` contradicts the pod's (the
    /// RuntimeClass admission plugin refuses such a pod at creation; a class
    /// changed since then can still get here).
    SelectorConflict { class: String, key: String },
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocked::ClassNotFound(c) => write!(f, "RuntimeClass {c} not found"),
            Blocked::SelectorConflict { class, key } => write!(
                f,
                "RuntimeClass {class}'s scheduling.nodeSelector contradicts the pod's on {key}"
            ),
        }
    }
}

/// Why a node that could host the pod is not ready for a gate (the first
/// failing check, in the order below).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NotReady {
    /// Allocatable below the request (or absent).
    Lacks(String),
    /// The contract label is not `ready` (`None`: absent or unreadable).
    Contract {
        label: String,
        state: Option<ContractState>,
    },
    /// The condition is absent on the node.
    Missing(ConditionType),
    /// Its heartbeat is older than the policy's `stale_after`: Unknown, whatever it says.
    Stale(ConditionType),
    /// False or Unknown, with its reason.
    Condition {
        kind: ConditionType,
        status: ConditionStatus,
        reason: String,
    },
    /// Every condition is ready, but the node does not carry the gate's
    /// readiness label yet: a pod released now could not be placed there
    /// (the controller writes the label; the watch brings it back).
    Unlabelled(String),
}

/// Why a node cannot host the pod at all (the scheduler's node-only
/// filters), the first failing one in the order below.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Unmatched {
    /// The pod's (merged) nodeSelector or required node affinity excludes
    /// the node, which is ready for the gate's conditions.
    ExcludedReady,
    /// The pod's nodeSelector or required node affinity excludes the node
    /// (also every node outside the label index's candidates, judged
    /// without being looked at).
    Excluded,
    /// `spec.unschedulable`, not tolerated.
    Cordoned,
    /// The first NoSchedule/NoExecute taint the pod does not tolerate.
    Untolerated(Taint),
}

/// A [`NotReady`] or [`Unmatched`] borrowing from the node and the pod, so
/// that the loop over the nodes allocates nothing; made owned once per
/// distinct reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Why<'a> {
    Lacks(&'a str),
    Contract {
        label: &'a str,
        state: Option<ContractState>,
    },
    Missing(ConditionType),
    Stale(ConditionType),
    Condition {
        kind: ConditionType,
        status: ConditionStatus,
        reason: &'a str,
    },
    Unlabelled(&'a str),
}

impl Why<'_> {
    fn owned(self) -> NotReady {
        match self {
            Why::Lacks(r) => NotReady::Lacks(r.to_string()),
            Why::Contract { label, state } => NotReady::Contract {
                label: label.to_string(),
                state,
            },
            Why::Missing(k) => NotReady::Missing(k),
            Why::Stale(k) => NotReady::Stale(k),
            Why::Condition {
                kind,
                status,
                reason,
            } => NotReady::Condition {
                kind,
                status,
                reason: reason.to_string(),
            },
            Why::Unlabelled(l) => NotReady::Unlabelled(l.to_string()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Miss<'a> {
    ExcludedReady,
    Excluded,
    Cordoned,
    Untolerated(&'a Taint),
}

impl Miss<'_> {
    fn owned(self) -> Unmatched {
        match self {
            Miss::ExcludedReady => Unmatched::ExcludedReady,
            Miss::Excluded => Unmatched::Excluded,
            Miss::Cordoned => Unmatched::Cordoned,
            Miss::Untolerated(t) => Unmatched::Untolerated(t.clone()),
        }
    }
}

/// One gate of one pod, judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub gate: String,
    /// Released now: a matching node is ready for this gate and for every
    /// other gate released with it (see [`judge`]).
    pub release: bool,
    /// Ready on some matching node, but not on the node ready for the most
    /// of the pod's gates: held back this round, without an Event, and judged
    /// again once the gates released now have narrowed the pod.
    pub deferred: bool,
    /// Nodes judged (matching or not).
    pub total: usize,
    /// Nodes that could host the pod.
    pub matching: usize,
    /// Of those, ready for this gate.
    pub ready: usize,
    /// Why the matching others are not: how many nodes for each first reason.
    pub reasons: BTreeMap<NotReady, usize>,
    /// Why the other nodes cannot host the pod at all.
    pub unmatched: BTreeMap<Unmatched, usize>,
    /// Nodes judged that are ready for the gate's conditions, fitting the
    /// pod or not.
    pub conditions_ready: usize,
    pub blocked: Option<Blocked>,
    /// The policy's staleness, for the message.
    pub stale_after: Duration,
    /// The first ready node by name and its first condition's message
    /// (what the pod condition at release quotes).
    pub example: Option<(String, String)>,
}

/// Reasons named in one Event message at most; the rest are counted.
const MAX_GROUPS: usize = 6;
/// An Event message is cut here (at a character boundary).
pub const MAX_MESSAGE: usize = 1024;

impl Verdict {
    /// Nodes the caller did not pass because the label index showed they
    /// do not carry the pod's nodeSelector: `n` of them, `ready` of which are
    /// ready for the gate's conditions. Counted as a full scan would.
    pub fn add_excluded(&mut self, n: usize, ready: usize) {
        let ready = ready.min(n);
        self.total += n;
        self.conditions_ready += ready;
        for (kind, k) in [
            (Unmatched::ExcludedReady, ready),
            (Unmatched::Excluded, n - ready),
        ] {
            if k > 0 {
                *self.unmatched.entry(kind).or_insert(0) += k;
            }
        }
    }

    /// The Event's message: "waiting for nodeproof.dev/gpu-driver-ready: 0 of
    /// 12 nodes ready for the pod: 8 GPUDriverReady=False (NVMLInitFailed), 3
    /// have a taint the pod does not tolerate (node.kubernetes.io/not-ready:NoSchedule),
    /// 1 lacks nvidia.com/gpu"; groups most frequent first, at most
    /// [`MAX_GROUPS`] of them, the message at most [`MAX_MESSAGE`] bytes.
    pub fn message(&self) -> String {
        if let Some(b) = &self.blocked {
            return format!("waiting for {}: {b}", self.gate);
        }
        let mut line = format!(
            "waiting for {}: {} of {} nodes ready for the pod",
            self.gate, self.ready, self.total
        );
        let mut groups: Vec<(usize, String)> = self
            .reasons
            .iter()
            .map(|(r, n)| (*n, not_ready_text(r, *n, self.stale_after)))
            .chain(
                self.unmatched
                    .iter()
                    .map(|(u, n)| (*n, unmatched_text(u, *n))),
            )
            .collect();
        // Most frequent first; equal counts in the order of the enums.
        groups.sort_by_key(|g| std::cmp::Reverse(g.0));
        if !groups.is_empty() {
            let shown: Vec<String> = groups
                .iter()
                .take(MAX_GROUPS)
                .map(|(n, text)| format!("{n} {text}"))
                .collect();
            line.push_str(": ");
            line.push_str(&shown.join(", "));
            let rest: usize = groups.iter().skip(MAX_GROUPS).map(|(n, _)| n).sum();
            if rest > 0 {
                line.push_str(&format!(", {rest} more for other reasons"));
            }
        }
        truncate(line, MAX_MESSAGE)
    }
}

fn plural(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// `900 s` → `15m`, `7200 s` → `2h`: a fixed threshold, not each node's age,
/// so that a message does not change (and the Event is not patched) as
/// heartbeats age.
pub fn short_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s >= 60 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

fn not_ready_text(r: &NotReady, n: usize, stale_after: Duration) -> String {
    match r {
        NotReady::Lacks(res) => format!("{} {res}", plural(n, "lacks", "lack")),
        NotReady::Contract {
            label,
            state: Some(s),
        } => format!("{label}={s}"),
        NotReady::Contract { label, state: None } => format!("without {label}"),
        NotReady::Missing(k) => format!("without {k}"),
        NotReady::Stale(k) => format!(
            "with a {k} heartbeat older than {} (its agent stopped reporting)",
            short_duration(stale_after)
        ),
        NotReady::Condition {
            kind,
            status,
            reason,
        } if reason.is_empty() => format!("{kind}={}", status.as_str()),
        NotReady::Condition {
            kind,
            status,
            reason,
        } => format!("{kind}={} ({reason})", status.as_str()),
        NotReady::Unlabelled(label) => format!("ready, not yet labelled {label}={READY}"),
    }
}

fn unmatched_text(u: &Unmatched, n: usize) -> String {
    match u {
        Unmatched::ExcludedReady => {
            "ready but excluded by the pod's own nodeSelector or affinity".to_string()
        }
        Unmatched::Excluded => "excluded by the pod's nodeSelector or affinity".to_string(),
        Unmatched::Cordoned => "cordoned".to_string(),
        Unmatched::Untolerated(t) => format!(
            "{} a taint the pod does not tolerate ({})",
            plural(n, "has", "have"),
            nodeproof_report::taints::display(t)
        ),
    }
}

/// `s` cut to at most `max` bytes at a character boundary, with an ellipsis.
pub fn truncate(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let mut cut = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s.push('…');
    s
}

/// Where the pod may go: its own constraints with its RuntimeClass's merged
/// in (the RuntimeClass admission plugin merges them into the pod at
/// creation; merging the class as it is now again is a no-op for an
/// unchanged class).
#[derive(Debug, Clone)]
pub struct Placement<'a> {
    pub selector: Cow<'a, BTreeMap<String, String>>,
    pub affinity: Option<&'a NodeSelector>,
    pub tolerations: Cow<'a, [Toleration]>,
    pub contract_label: Option<&'a str>,
    /// Tolerates `node.kubernetes.io/unschedulable:NoSchedule`.
    pub tolerates_unschedulable: bool,
}

pub fn placement<'a>(
    pod: &'a PodNeeds,
    classes: &'a HashMap<String, ClassFacts>,
) -> Result<Placement<'a>, Blocked> {
    let class = match &pod.runtime_class {
        None => None,
        Some(name) => Some(
            classes
                .get(name)
                .ok_or_else(|| Blocked::ClassNotFound(name.clone()))?,
        ),
    };
    let mut selector = Cow::Borrowed(&pod.node_selector);
    let mut tolerations = Cow::Borrowed(&pod.tolerations[..]);
    if let (Some(class), Some(name)) = (class, &pod.runtime_class) {
        for (k, v) in &class.node_selector {
            match selector.get(k) {
                Some(own) if own != v => {
                    return Err(Blocked::SelectorConflict {
                        class: name.clone(),
                        key: k.clone(),
                    })
                }
                Some(_) => {}
                None => {
                    selector.to_mut().insert(k.clone(), v.clone());
                }
            }
        }
        for t in &class.tolerations {
            if !tolerations.contains(t) {
                tolerations.to_mut().push(t.clone());
            }
        }
    }
    let unschedulable = Taint {
        key: UNSCHEDULABLE.into(),
        value: String::new(),
        effect: "NoSchedule".into(),
    };
    let tolerates_unschedulable = tolerations.iter().any(|t| tolerates(t, &unschedulable));
    Ok(Placement {
        selector,
        affinity: pod.affinity.as_ref(),
        tolerations,
        contract_label: class.and_then(|c| c.contract_label.as_deref()),
        tolerates_unschedulable,
    })
}

/// The scheduler's node-only filters.
pub fn could_host(p: &Placement<'_>, node: &NodeFacts) -> bool {
    mismatch(p, node).is_none()
}

/// The first of the node-only filters that refuses `node`.
fn mismatch<'a>(p: &Placement<'_>, node: &'a NodeFacts) -> Option<Miss<'a>> {
    if !affinity::matches(&p.selector, p.affinity, &node.labels, &node.name) {
        return Some(Miss::Excluded);
    }
    if node.unschedulable && !p.tolerates_unschedulable {
        return Some(Miss::Cordoned);
    }
    untolerated(&p.tolerations, &node.taints)
        .first()
        .map(|t| Miss::Untolerated(t))
}

/// Whether every condition `gate` names is True with a fresh heartbeat on
/// `node`; the first reason if not. What the readiness label says.
fn conditions_ready<'a>(
    gate: &Gate,
    node: &'a NodeFacts,
    now: SystemTime,
    stale_after: Duration,
) -> Result<(), Why<'a>> {
    for kind in &gate.conditions {
        let Some(c) = node.conditions.get(kind) else {
            return Err(Why::Missing(*kind));
        };
        if c.stale(now, stale_after) {
            return Err(Why::Stale(*kind));
        }
        if c.status != ConditionStatus::True {
            return Err(Why::Condition {
                kind: *kind,
                status: c.status,
                reason: &c.reason,
            });
        }
    }
    Ok(())
}

/// Whether `node` is ready for `gate`'s conditions: the readiness label it
/// should carry (`gate.nodeproof.dev/<gate>=ready`), for every gate that steers.
pub fn ready_for(gate: &Gate, node: &NodeFacts, now: SystemTime, stale_after: Duration) -> bool {
    conditions_ready(gate, node, now, stale_after).is_ok()
}

/// Whether `node` (which could host the pod) is ready for `gate`; the first
/// reason if not. `conditions` is [`conditions_ready`] of the same node and
/// gate, computed once by the caller (it counts conditions-ready nodes
/// whether or not they match).
fn readiness<'a>(
    pod: &'a PodNeeds,
    p: &Placement<'a>,
    gate: &'a Gate,
    node: &'a NodeFacts,
    conditions: Result<(), Why<'a>>,
) -> Result<(), Why<'a>> {
    for (resource, want) in &pod.extended {
        if node.allocatable.get(resource).copied().unwrap_or(0) < *want {
            return Err(Why::Lacks(resource));
        }
    }
    if let (true, Some(label)) = (gate.contract, p.contract_label) {
        let state = node.labels.get(label).and_then(|v| ContractState::parse(v));
        if state != Some(ContractState::Ready) {
            return Err(Why::Contract { label, state });
        }
    }
    conditions?;
    if let Some(label) = &gate.label {
        if node.labels.get(label).map(String::as_str) != Some(READY) {
            return Err(Why::Unlabelled(label));
        }
    }
    Ok(())
}

/// Every configured gate of `pod`, judged against `nodes` at `now`, in one
/// pass over the nodes.
pub fn judge<'n>(
    pod: &PodNeeds,
    policy: &Policy,
    nodes: impl IntoIterator<Item = &'n NodeFacts>,
    classes: &HashMap<String, ClassFacts>,
    now: SystemTime,
) -> Vec<Verdict> {
    let gates: Vec<&Gate> = pod.gates.iter().filter_map(|g| policy.gate(g)).collect();
    let mut verdicts: Vec<Verdict> = gates
        .iter()
        .map(|g| Verdict {
            gate: g.name.clone(),
            release: false,
            deferred: false,
            total: 0,
            matching: 0,
            ready: 0,
            reasons: BTreeMap::new(),
            unmatched: BTreeMap::new(),
            conditions_ready: 0,
            blocked: None,
            stale_after: policy.stale_after,
            example: None,
        })
        .collect();
    let p = match placement(pod, classes) {
        Ok(p) => p,
        Err(b) => {
            for v in &mut verdicts {
                v.blocked = Some(b.clone());
            }
            return verdicts;
        }
    };
    let mut why: Vec<HashMap<Why<'_>, usize>> = vec![HashMap::new(); gates.len()];
    let mut miss: Vec<HashMap<Miss<'_>, usize>> = vec![HashMap::new(); gates.len()];
    let mut example: Vec<Option<&NodeFacts>> = vec![None; gates.len()];
    // The gates released together must share a ready node: each gate adds
    // its readiness label to the pod's nodeSelector as it goes, so gates
    // ready on different nodes released at once would leave the pod
    // selecting a node that carries every label, possibly none. So only the
    // gates of the node ready for the most of them (by name on a tie) go;
    // the others are judged again on the narrowed pod.
    let mut best: Option<(u32, u128, &str)> = None;
    for node in nodes {
        let refused = mismatch(&p, node);
        let mut ready_for: u128 = 0;
        for (i, (v, gate)) in verdicts.iter_mut().zip(&gates).enumerate() {
            v.total += 1;
            let conditions = conditions_ready(gate, node, now, policy.stale_after);
            let cond_ready = conditions.is_ok();
            v.conditions_ready += usize::from(cond_ready);
            if let Some(m) = refused {
                let m = match m {
                    Miss::Excluded if cond_ready => Miss::ExcludedReady,
                    m => m,
                };
                *miss[i].entry(m).or_insert(0) += 1;
                continue;
            }
            v.matching += 1;
            match readiness(pod, &p, gate, node, conditions) {
                Ok(()) => {
                    v.ready += 1;
                    ready_for |= 1u128.checked_shl(i as u32).unwrap_or(0);
                    if example[i].is_none_or(|e| node.name < e.name) {
                        example[i] = Some(node);
                    }
                }
                Err(r) => *why[i].entry(r).or_insert(0) += 1,
            }
        }
        let n = ready_for.count_ones();
        if n > 0
            && best
                .is_none_or(|(most, _, name)| n > most || (n == most && node.name.as_str() < name))
        {
            best = Some((n, ready_for, &node.name));
        }
    }
    let together = best.map_or(0, |(_, gates, _)| gates);
    for (i, (((v, why), miss), (gate, example))) in verdicts
        .iter_mut()
        .zip(why)
        .zip(miss)
        .zip(gates.iter().zip(example))
        .enumerate()
    {
        v.release = v.ready > 0 && together & 1u128.checked_shl(i as u32).unwrap_or(0) != 0;
        v.deferred = v.ready > 0 && !v.release;
        v.reasons = why.into_iter().map(|(r, n)| (r.owned(), n)).collect();
        v.unmatched = miss.into_iter().map(|(m, n)| (m.owned(), n)).collect();
        v.example = example.map(|n| {
            let message = gate
                .conditions
                .first()
                .and_then(|k| n.conditions.get(k))
                .map(|c| c.message.clone())
                .unwrap_or_default();
            (n.name.clone(), message)
        });
    }
    verdicts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::config::GateConfig;
    use crate::gate::node::NodeCondition;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::{json, Value};

    const T0: u64 = 1_800_000_000;

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(T0)
    }

    fn policy() -> Policy {
        GateConfig::default().policy()
    }

    const GPU: &str = "nodeproof.dev/gpu-driver-ready";
    const SECCOMP: &str = "nodeproof.dev/seccomp-ready";

    /// A pod with the GPU gate and `spec` merged into its spec.
    fn pod(spec: Value) -> PodNeeds {
        let mut v = json!({"metadata": {"namespace": "ml", "name": "p", "uid": "u"},
            "spec": {"containers": [{"name": "c"}], "schedulingGates": [{"name": GPU}, {"name": SECCOMP}]}});
        for (k, val) in spec.as_object().unwrap() {
            v["spec"][k] = val.clone();
        }
        let pod: Pod = serde_json::from_value(v).unwrap();
        PodNeeds::of(&pod, &policy()).unwrap()
    }

    /// A GPU node, every condition True and fresh.
    fn node(name: &str) -> NodeFacts {
        let mut n = NodeFacts {
            name: name.into(),
            ..NodeFacts::default()
        };
        n.allocatable.insert("nvidia.com/gpu".into(), 8000);
        for k in ConditionType::ALL {
            n.conditions.insert(
                k,
                NodeCondition {
                    status: ConditionStatus::True,
                    reason: "Ok".into(),
                    message: String::new(),
                    heartbeat: Some(now() - Duration::from_secs(60)),
                },
            );
        }
        // The readiness labels the controller keeps on a ready node.
        for g in &policy().gates {
            if let Some(l) = &g.label {
                n.labels.insert(l.clone(), READY.into());
            }
        }
        n
    }

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: String::new(),
            effect: effect.into(),
        }
    }

    fn gpu_verdict(
        pod: &PodNeeds,
        nodes: &[NodeFacts],
        classes: &HashMap<String, ClassFacts>,
    ) -> Verdict {
        judge(pod, &policy(), nodes, classes, now())
            .into_iter()
            .find(|v| v.gate == GPU)
            .unwrap()
    }

    #[test]
    fn placement_table() {
        let mut labelled = node("n");
        labelled.labels.insert("pool".into(), "gpu".into());
        labelled.labels.insert("gen".into(), "9".into());
        let mut tainted = labelled.clone();
        tainted.taints.push(taint("nvidia.com/gpu", "NoSchedule"));
        let mut executing = labelled.clone();
        executing.taints.push(taint("dedicated", "NoExecute"));
        let mut soft = labelled.clone();
        soft.taints.push(taint("soft", "PreferNoSchedule"));
        let mut cordoned = labelled.clone();
        cordoned.unschedulable = true;
        let aff = |op: &str, values: &[&str]| {
            json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": "gen", "operator": op, "values": values}]}]}}})
        };
        let tol_all = json!([{"operator": "Exists"}]);
        let cases: Vec<(&str, Value, &NodeFacts, bool)> = vec![
            ("no constraints", json!({}), &labelled, true),
            (
                "nodeSelector matches",
                json!({"nodeSelector": {"pool": "gpu"}}),
                &labelled,
                true,
            ),
            (
                "nodeSelector differs",
                json!({"nodeSelector": {"pool": "cpu"}}),
                &labelled,
                false,
            ),
            (
                "affinity Gt",
                json!({"affinity": aff("Gt", &["8"])}),
                &labelled,
                true,
            ),
            (
                "affinity Lt",
                json!({"affinity": aff("Lt", &["8"])}),
                &labelled,
                false,
            ),
            (
                "affinity NotIn",
                json!({"affinity": aff("NotIn", &["9"])}),
                &labelled,
                false,
            ),
            ("untolerated NoSchedule", json!({}), &tainted, false),
            (
                "tolerated NoSchedule",
                json!({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}),
                &tainted,
                true,
            ),
            (
                "toleration for another effect",
                json!({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}]}),
                &tainted,
                false,
            ),
            ("untolerated NoExecute", json!({}), &executing, false),
            (
                "PreferNoSchedule needs no toleration",
                json!({}),
                &soft,
                true,
            ),
            ("cordoned", json!({}), &cordoned, false),
            (
                "cordoned, unschedulable tolerated",
                json!({"tolerations": [{"key": UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"}]}),
                &cordoned,
                true,
            ),
            (
                "cordoned, tolerate everything",
                json!({"tolerations": tol_all}),
                &cordoned,
                true,
            ),
            (
                "cordoned, NoExecute only",
                json!({"tolerations": [{"key": UNSCHEDULABLE, "operator": "Exists", "effect": "NoExecute"}]}),
                &cordoned,
                false,
            ),
        ];
        for (what, spec, n, want) in cases {
            let p = pod(spec);
            let classes = HashMap::new();
            let pl = placement(&p, &classes).unwrap();
            assert_eq!(could_host(&pl, n), want, "{what}");
            let v = gpu_verdict(&p, std::slice::from_ref(n), &classes);
            assert_eq!((v.matching, v.release), (usize::from(want), want), "{what}");
        }
    }

    #[test]
    fn extended_resources_table() {
        let mut small = node("small");
        small.allocatable.insert("nvidia.com/gpu".into(), 1000);
        let mut none = node("none");
        none.allocatable.clear();
        let gpus = |n: &str| json!({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": n}}}]});
        let cases = [
            (gpus("1"), &small, true),
            (gpus("2"), &small, false),
            (gpus("8"), &node("big"), true),
            (gpus("9"), &node("big"), false),
            (gpus("1"), &none, false),
            (json!({}), &none, true),
            (
                json!({"containers": [{"name": "c", "resources": {"limits": {"example.com/fpga": "1"}}}]}),
                &node("big"),
                false,
            ),
        ];
        for (i, (spec, n, want)) in cases.into_iter().enumerate() {
            let v = gpu_verdict(&pod(spec), std::slice::from_ref(n), &HashMap::new());
            assert_eq!(
                v.matching, 1,
                "case {i}: resources never make a node unmatched"
            );
            assert_eq!(v.release, want, "case {i}: {v:?}");
            if !want {
                assert!(
                    matches!(v.reasons.keys().next(), Some(NotReady::Lacks(_))),
                    "case {i}"
                );
            }
        }
    }

    #[test]
    fn conditions_and_heartbeats() {
        let p = pod(json!({}));
        let stale_after = policy().stale_after;
        let mut down = node("down");
        let c = down
            .conditions
            .get_mut(&ConditionType::GPUDriverReady)
            .unwrap();
        c.status = ConditionStatus::False;
        c.reason = "NVMLInitFailed".into();
        let mut silent = node("silent");
        for c in silent.conditions.values_mut() {
            c.heartbeat = Some(now() - stale_after - Duration::from_secs(1));
        }
        let mut just_in_time = node("edge");
        for c in just_in_time.conditions.values_mut() {
            c.heartbeat = Some(now() - stale_after);
        }
        let mut bare = node("bare");
        bare.conditions.remove(&ConditionType::GPUHealthy);
        let v = gpu_verdict(
            &p,
            &[down.clone(), silent.clone(), bare.clone()],
            &HashMap::new(),
        );
        assert!(!v.release);
        assert_eq!((v.matching, v.ready), (3, 0));
        assert_eq!(
            v.message(),
            "waiting for nodeproof.dev/gpu-driver-ready: 0 of 3 nodes ready for the pod: \
             1 without GPUHealthy, 1 with a GPUDriverReady heartbeat older than 15m (its agent stopped reporting), \
             1 GPUDriverReady=False (NVMLInitFailed)"
        );
        assert!(gpu_verdict(&p, &[silent, just_in_time], &HashMap::new()).release);
        // A True condition with the only stale heartbeat never releases.
        let mut one = node("one");
        one.conditions
            .get_mut(&ConditionType::GPUHealthy)
            .unwrap()
            .heartbeat = None;
        assert!(!gpu_verdict(&p, &[one], &HashMap::new()).release);
    }

    #[test]
    fn the_issue_message() {
        let p = pod(
            json!({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}),
        );
        let mut nodes = Vec::new();
        for i in 0..8 {
            let mut n = node(&format!("bad{i}"));
            let c = n
                .conditions
                .get_mut(&ConditionType::GPUDriverReady)
                .unwrap();
            c.status = ConditionStatus::False;
            c.reason = "NVMLInitFailed".into();
            nodes.push(n);
        }
        for i in 0..4 {
            let mut n = node(&format!("cpu{i}"));
            n.allocatable.clear();
            nodes.push(n);
        }
        let mut elsewhere = node("other-pool");
        elsewhere.taints.push(taint("dedicated", "NoSchedule"));
        nodes.push(elsewhere);
        let v = gpu_verdict(&p, &nodes, &HashMap::new());
        assert_eq!(
            v.message(),
            "waiting for nodeproof.dev/gpu-driver-ready: 0 of 13 nodes ready for the pod: \
             8 GPUDriverReady=False (NVMLInitFailed), 4 lack nvidia.com/gpu, \
             1 has a taint the pod does not tolerate (dedicated:NoSchedule)"
        );
    }

    /// A node ready for one of the pod's two gates only.
    fn ready_for_only(name: &str, gate: &str) -> NodeFacts {
        let mut n = node(name);
        let (other, condition) = if gate == GPU {
            (SECCOMP, ConditionType::SeccompProfilesReady)
        } else {
            (GPU, ConditionType::GPUDriverReady)
        };
        n.conditions.get_mut(&condition).unwrap().status = ConditionStatus::False;
        n.labels
            .remove(&crate::gate::config::readiness_label(other));
        n
    }

    #[test]
    fn gates_released_together_share_a_ready_node() {
        let p = pod(json!({}));
        let released = |nodes: &[&NodeFacts]| -> Vec<(String, bool, bool)> {
            judge(&p, &policy(), nodes.iter().copied(), &HashMap::new(), now())
                .into_iter()
                .map(|v| (v.gate, v.release, v.deferred))
                .collect()
        };
        let gpu_only = ready_for_only("a-gpu", GPU);
        let seccomp_only = ready_for_only("b-seccomp", SECCOMP);
        // Each gate is ready somewhere, but on different nodes: releasing
        // both would select a node with both labels, which none is. The
        // first node by name goes; the other gate is deferred, no Event.
        assert_eq!(
            released(&[&gpu_only, &seccomp_only]),
            [(GPU.into(), true, false), (SECCOMP.into(), false, true)]
        );
        // A node ready for both: both go in one patch.
        let both = node("z-both");
        assert_eq!(
            released(&[&gpu_only, &seccomp_only, &both]),
            [(GPU.into(), true, false), (SECCOMP.into(), true, false)]
        );
        // Neither ready: both wait (with their Events), none deferred.
        let mut none = ready_for_only("c", GPU);
        none.conditions
            .get_mut(&ConditionType::GPUDriverReady)
            .unwrap()
            .status = ConditionStatus::False;
        assert_eq!(
            released(&[&none]),
            [(GPU.into(), false, false), (SECCOMP.into(), false, false)]
        );
    }

    #[test]
    fn runtime_class_scheduling_and_contract() {
        let class = ClassFacts {
            node_selector: BTreeMap::from([(
                "runtimeclass.nodeproof.dev/vllm".into(),
                "ready".into(),
            )]),
            tolerations: vec![Toleration {
                key: "gpu".into(),
                operator: "Exists".into(),
                ..Toleration::default()
            }],
            contract_label: Some("runtimeclass.nodeproof.dev/vllm".into()),
        };
        let classes = HashMap::from([("vllm".to_string(), class)]);
        let p = pod(json!({"runtimeClassName": "vllm"}));
        let mut ready = node("ready");
        ready
            .labels
            .insert("runtimeclass.nodeproof.dev/vllm".into(), "ready".into());
        ready.taints.push(taint("gpu", "NoSchedule")); // tolerated through the class
        let mut not_ready = node("not-ready");
        not_ready
            .labels
            .insert("runtimeclass.nodeproof.dev/vllm".into(), "not-ready".into());
        let verdicts = judge(&p, &policy(), [&ready, &not_ready], &classes, now());
        let seccomp = verdicts.iter().find(|v| v.gate == SECCOMP).unwrap();
        // The class's nodeSelector keeps the not-ready node out of "matching".
        assert_eq!((seccomp.matching, seccomp.ready), (1, 1));
        assert!(verdicts.iter().all(|v| v.release));
        // A class without the nodeSelector: the contract label is what the seccomp gate checks.
        let mut loose = classes.clone();
        loose.get_mut("vllm").unwrap().node_selector.clear();
        let verdicts = judge(&p, &policy(), [&not_ready], &loose, now());
        let seccomp = verdicts.iter().find(|v| v.gate == SECCOMP).unwrap();
        assert!(!seccomp.release);
        assert_eq!(
            seccomp.message(),
            "waiting for nodeproof.dev/seccomp-ready: 0 of 1 nodes ready for the pod: \
             1 runtimeclass.nodeproof.dev/vllm=not-ready"
        );
        // The GPU gate does not ask for the contract.
        assert!(verdicts.iter().find(|v| v.gate == GPU).unwrap().release);
        // A class not seen yet, or contradicting the pod, blocks every gate.
        let v = judge(&p, &policy(), [&ready], &HashMap::new(), now());
        assert!(v
            .iter()
            .all(|v| !v.release && v.blocked == Some(Blocked::ClassNotFound("vllm".into()))));
        assert_eq!(
            v[0].message(),
            "waiting for nodeproof.dev/gpu-driver-ready: RuntimeClass vllm not found"
        );
        let p = pod(
            json!({"runtimeClassName": "vllm", "nodeSelector": {"runtimeclass.nodeproof.dev/vllm": "not-ready"}}),
        );
        let v = judge(&p, &policy(), [&not_ready], &classes, now());
        assert!(matches!(
            v[0].blocked,
            Some(Blocked::SelectorConflict { .. })
        ));
    }

    #[test]
    fn no_matching_node_says_so() {
        let p = pod(json!({"nodeSelector": {"pool": "tpu"}}));
        let v = gpu_verdict(&p, &[node("a")], &HashMap::new());
        assert_eq!(
            v.message(),
            "waiting for nodeproof.dev/gpu-driver-ready: 0 of 1 nodes ready for the pod: \
             1 ready but excluded by the pod's own nodeSelector or affinity"
        );
    }
}
