//! The pods' judgement as state: what the watches said (`Change`), taken in
//! by [`PodsState::apply`], and judged by [`PodsState::evaluate`] into one
//! [`Evaluation`] (the condition, the findings that are news, the
//! RuntimeClass contracts), and the Events said of it. No API server here:
//! `watch` feeds it, from kube-runtime's watchers, and `node` from one list.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube_core::ResourceExt;

use super::contract;
use super::denials::{PodDenialEvent, PodDenialTotal, PodIndex, EVENT_REASON};
use super::gpu_faults::{GpuFaultTotal, PodGpuFaultEvent, EVENT_REASON as GPU_FAULT_REASON};
use super::verdict::{
    self, ClassProblem, Judge, NodeContext, PodFinding, Reason, RuntimeClassInfo,
};
use nodeproof_findings::Condition;
use nodeproof_report::contract::ContractState;
use nodeproof_report::contract_labels::ContractVerdict;
use nodeproof_report::events::{EventType, ObjectRef, PodEvent};

/// What the watches report.
#[derive(Debug)]
pub enum Change {
    Pods(Vec<Pod>),
    Pod(Pod),
    PodGone(Pod),
    Classes(Vec<RuntimeClass>),
    Class(RuntimeClass),
    ClassGone(RuntimeClass),
    /// This Node, listed (one item, or none while it is not registered).
    Nodes(Vec<Node>),
    Node(Node),
    NodeGone(Node),
}

/// One judgement of every watched pod.
#[derive(Debug, Clone)]
pub struct Evaluation {
    pub condition: Condition,
    /// Findings not in the previous evaluation (each becomes one Event).
    pub new: Vec<PodFinding>,
    /// Pods with at least one unusable reference.
    pub failing_pods: usize,
    /// Every annotated RuntimeClass, judged on this node.
    pub contracts: Vec<ContractVerdict>,
}

/// The watched pods and classes and what was last said about them.
pub struct PodsState {
    pub index: PodIndex,
    classes: HashMap<String, RuntimeClassInfo>,
    judge: Judge,
    reported: HashSet<(String, Option<String>, Reason, String)>,
    /// Both initial lists arrived. Before that a pod's RuntimeClass may just
    /// not be listed yet, and "does not exist" would be a false alarm.
    pods_listed: bool,
    classes_listed: bool,
    /// When each RuntimeClass that pods reference was first found missing.
    /// A pod and its RuntimeClass created together arrive on two watches in
    /// either order, so "does not exist" waits [`CLASS_GRACE`] before it is said.
    class_missing_since: HashMap<String, Instant>,
    pub node: NodeContext,
}

/// How long a referenced RuntimeClass may be missing before it is reported.
pub const CLASS_GRACE: Duration = Duration::from_secs(2);

impl PodsState {
    /// `judge`: how files are read and where their lint reports are kept
    /// (the daemon's lints are shared with the profiles check).
    pub fn new(node: NodeContext, judge: Judge) -> Self {
        PodsState {
            index: PodIndex::default(),
            classes: HashMap::new(),
            judge,
            reported: HashSet::new(),
            pods_listed: false,
            classes_listed: false,
            class_missing_since: HashMap::new(),
            node,
        }
    }

    /// Takes a change in; true when it may change a verdict (a Node's
    /// status-only update, its 10-second heartbeat, does not).
    pub fn apply(&mut self, change: Change) -> bool {
        match change {
            Change::Pods(pods) => {
                self.pods_listed = true;
                self.index = PodIndex::default();
                pods.iter().for_each(|p| self.index.upsert(p));
            }
            Change::Pod(p) => self.index.upsert(&p),
            Change::PodGone(p) => self.index.remove(&p.uid().unwrap_or_default()),
            Change::Classes(cs) => {
                self.classes_listed = true;
                self.classes = cs.iter().map(|c| (c.name_any(), c.into())).collect();
            }
            Change::Class(c) => {
                self.classes.insert(c.name_any(), (&c).into());
            }
            Change::ClassGone(c) => {
                self.classes.remove(&c.name_any());
            }
            Change::Nodes(nodes) => {
                // Not registered (yet): the labels and taints read at start stay.
                return nodes.first().is_some_and(|n| self.node.update_from(n));
            }
            Change::Node(n) => return self.node.update_from(&n),
            Change::NodeGone(n) => {
                // A Node deleted is leaving the cluster; its last labels still describe it.
                tracing::debug!(k8s_node = %n.name_any(), "the Node was deleted; keeping its last labels and taints");
                return false;
            }
        }
        true
    }

    /// Starts over with another node context (a reload changed the node,
    /// root or lint options): everything is listed again before the next
    /// judgement, and findings already reported stay reported, so a
    /// finding that still holds is not news again. The lint reports stay:
    /// they are kept by lint options, so new options lint afresh.
    pub fn restart(&mut self, node: NodeContext) {
        self.node = node;
        self.pods_listed = false;
        self.classes_listed = false;
        self.class_missing_since.clear();
    }

    pub fn synced(&self) -> bool {
        self.pods_listed && self.classes_listed
    }

    pub fn evaluate(&mut self) -> Evaluation {
        self.evaluate_at(Instant::now())
    }

    /// How soon a held-back finding is due (the caller's next wake-up).
    pub fn next_due(&self, now: Instant) -> Option<Duration> {
        self.class_missing_since
            .values()
            .map(|since| (*since + CLASS_GRACE).saturating_duration_since(now))
            .filter(|d| !d.is_zero())
            .min()
    }

    pub fn evaluate_at(&mut self, now: Instant) -> Evaluation {
        let mut pods: Vec<_> = self.index.refs().cloned().collect();
        pods.sort_by_key(|p| p.key());
        let missing: HashSet<&String> = pods
            .iter()
            .filter_map(|p| p.runtime_class.as_ref())
            .filter(|name| !self.classes.contains_key(*name))
            .collect();
        self.class_missing_since
            .retain(|name, _| missing.contains(name));
        for name in missing {
            self.class_missing_since.entry(name.clone()).or_insert(now);
        }
        let held: HashSet<String> = self
            .class_missing_since
            .iter()
            .filter(|(_, since)| now.saturating_duration_since(**since) < CLASS_GRACE)
            .map(|(name, _)| name.clone())
            .collect();
        let contracts = contract::judge_all(&mut self.judge, &self.classes, &self.node);
        let not_ready: HashMap<&str, &ContractVerdict> = contracts
            .iter()
            .filter(|v| v.state == ContractState::NotReady)
            .map(|v| (v.class.as_str(), v))
            .collect();
        let findings: Vec<PodFinding> = pods
            .iter()
            .flat_map(|p| {
                let held_class = p.runtime_class.as_ref().filter(|rc| held.contains(*rc));
                // Already bound here (the scheduler placed it before the label
                // said not-ready, or it ignores the class's nodeSelector).
                let unmet = p
                    .runtime_class
                    .as_deref()
                    .and_then(|rc| not_ready.get(rc))
                    .map(|v| PodFinding {
                        namespace: p.namespace.clone(),
                        pod: p.name.clone(),
                        uid: p.uid.clone(),
                        container: None,
                        subject: v.class.clone(),
                        reason: Reason::RuntimeClassNotReady,
                        message: format!(
                            "RuntimeClass {} is not ready on this node: {}",
                            v.class, v.cause
                        ),
                        class_problem: None,
                    })
                    .filter(|_| !p.finished);
                let judged = self
                    .judge
                    .judge_pod(p, &self.classes, &self.node)
                    .into_iter()
                    .filter(move |f| {
                        !(f.class_problem == Some(ClassProblem::Missing)
                            && held_class.is_some_and(|rc| f.subject == *rc))
                    });
                // The pod's own, more concrete findings lead.
                judged.chain(unmet).collect::<Vec<_>>()
            })
            .collect();
        let root = self.node.seccomp_root.display().to_string();
        let keys: HashSet<_> = findings.iter().map(|f| finding_key(f, &root)).collect();
        let new = findings
            .iter()
            .filter(|f| !self.reported.contains(&finding_key(f, &root)))
            .cloned()
            .collect();
        // Only current findings are remembered: a problem fixed and broken again is news again.
        self.reported = keys;
        let failing_pods = findings
            .iter()
            .map(|f| f.uid.as_str())
            .collect::<BTreeSet<_>>()
            .len();
        Evaluation {
            condition: verdict::condition(&findings, pods.len()),
            new,
            failing_pods,
            contracts,
        }
    }
}

/// What makes a finding news. The seccomp root is left out of the message:
/// a file missing from the root before a reload and from the new one after
/// it is the same problem, already said.
fn finding_key(f: &PodFinding, seccomp_root: &str) -> (String, Option<String>, Reason, String) {
    let message = if seccomp_root.is_empty() {
        f.message.clone()
    } else {
        f.message.replace(seccomp_root, "<seccomp root>")
    };
    (f.uid.clone(), f.container.clone(), f.reason, message)
}

/// The Event for a finding: on the pod, the first line of what is wrong.
pub fn finding_event(f: &PodFinding) -> PodEvent {
    let message = match &f.container {
        Some(c) => format!("container {c}: {}", f.message),
        None => f.message.clone(),
    };
    PodEvent {
        pod: ObjectRef {
            kind: "Pod",
            namespace: f.namespace.clone(),
            name: f.pod.clone(),
            uid: Some(f.uid.clone()),
        },
        event_type: EventType::Warning,
        reason: f.reason.event_reason(),
        message,
        annotations: Default::default(),
    }
}

/// The Event for aggregated denials (Warning, reason `SeccompDenied`, on the pod).
pub fn denial_event(e: PodDenialEvent) -> PodEvent {
    PodEvent {
        pod: e.pod,
        event_type: EventType::Warning,
        reason: EVENT_REASON,
        message: e.message,
        annotations: e.change.map(|c| c.to_annotations()).unwrap_or_default(),
    }
}

/// The Event for aggregated GPU faults (Warning, reason `GPUFault`, on the pod).
pub fn gpu_fault_event(e: PodGpuFaultEvent) -> PodEvent {
    PodEvent {
        pod: e.pod,
        event_type: EventType::Warning,
        reason: GPU_FAULT_REASON,
        message: e.message,
        annotations: Default::default(),
    }
}

/// Which lint of the seccomp root a judgement read the reports of: the
/// daemon's profiles task numbers its lints 1, 2, ... (0: none yet), and a
/// pods round says the latest it had seen when it judged, so the daemon can
/// tell the round that judged a lint's files from one that came before it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LintGeneration(pub u64);

impl LintGeneration {
    /// The generation after this one.
    pub fn next(self) -> LintGeneration {
        LintGeneration(self.0 + 1)
    }
}

/// What one judgement round says; whoever runs the watch reports it.
#[derive(Debug, Clone)]
pub struct Round {
    pub at: SystemTime,
    /// The latest lint generation the watcher had been told of when it
    /// judged (0 without a daemon's profiles task: `nodeproof pods`).
    pub lint_generation: LintGeneration,
    /// Pods bound to this node and watched.
    pub pods: usize,
    /// The pods' part of `SeccompProfilesReady` (see `verdict::combine`).
    pub condition: Condition,
    /// Findings not in the previous round, and denials due: one Event each.
    pub events: Vec<PodEvent>,
    /// Pods with an unusable reference.
    pub failing_pods: usize,
    /// `nodeproof_pod_seccomp_denials_total`, when denials are fed.
    pub denial_totals: Option<Vec<PodDenialTotal>>,
    /// `nodeproof_pod_seccomp_denials_after_change_total`, when denials are fed.
    pub denials_after_change:
        Option<std::collections::BTreeMap<nodeproof_report::denial_change::PreviousVerdict, u64>>,
    /// `nodeproof_gpu_faults_total`, when GPU faults are fed.
    pub gpu_fault_totals: Option<Vec<GpuFaultTotal>>,
    /// Every annotated RuntimeClass judged on this node (the contract labels).
    pub contracts: Vec<ContractVerdict>,
    /// `(namespace, name)` of the pods running here (not Succeeded or
    /// Failed), for the GPU usage metrics' pod labels.
    pub running_pods: std::collections::BTreeSet<(String, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeproof_findings::ConditionStatus;
    use nodeproof_seccomp::lint::LintOptions;

    /// A judge that reads the test's files, with lint reports of its own.
    fn test_judge() -> Judge {
        Judge::new(Default::default(), crate::observe::profiles::read_reference)
    }

    /// A watcher's state with lint reports of its own.
    fn fresh_state(node: NodeContext) -> PodsState {
        PodsState::new(node, test_judge())
    }

    #[test]
    fn nothing_is_judged_before_both_lists_and_findings_are_news_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = fresh_state(NodeContext {
            seccomp_root: dir.path().to_path_buf(),
            labels: Default::default(),
            taints: Vec::new(),
            handlers: None,
            lint: LintOptions::default(),
            gpu: Default::default(),
        });
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ml", "uid": "u"},
            "spec": {"runtimeClassName": "gvisor", "containers": [{"name": "c"}]}
        }))
        .unwrap();
        st.apply(Change::Pods(vec![pod]));
        assert!(!st.synced());
        let rc: RuntimeClass = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gvisor"}, "handler": "runsc"
        }))
        .unwrap();
        st.apply(Change::Classes(vec![rc.clone()]));
        assert!(st.synced());
        let e = st.evaluate();
        assert_eq!(e.condition.status, ConditionStatus::True);
        let t0 = Instant::now();
        st.apply(Change::ClassGone(rc.clone()));
        // Missing for less than the grace: maybe its watch event is just late.
        let e = st.evaluate_at(t0);
        assert_eq!(
            (e.condition.status, e.new.len()),
            (ConditionStatus::True, 0)
        );
        assert_eq!(st.next_due(t0), Some(CLASS_GRACE));
        let e = st.evaluate_at(t0 + CLASS_GRACE);
        assert_eq!(e.new.len(), 1);
        assert_eq!(e.new[0].reason, Reason::RuntimeClassMismatch);
        assert_eq!(e.new[0].message, "RuntimeClass gvisor does not exist");
        // Still broken: the condition stays False, but it is not news.
        let e = st.evaluate_at(t0 + CLASS_GRACE * 2);
        assert_eq!(
            (e.condition.status, e.new.len()),
            (ConditionStatus::False, 0)
        );
        // Back within the grace: never reported.
        st.apply(Change::Class(rc));
        let e = st.evaluate_at(t0 + CLASS_GRACE * 3);
        assert_eq!(e.condition.status, ConditionStatus::True);
        assert_eq!(st.next_due(t0 + CLASS_GRACE * 3), None);
    }

    #[test]
    fn a_restart_with_another_root_lists_again_and_says_nothing_twice() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        std::fs::write(
            a.path().join("there.json"),
            r#"{"defaultAction":"SCMP_ACT_ALLOW"}"#,
        )
        .unwrap();
        let context = |root: &std::path::Path| NodeContext {
            seccomp_root: root.to_path_buf(),
            labels: Default::default(),
            taints: Vec::new(),
            handlers: None,
            lint: LintOptions {
                check_listener: false,
                ..LintOptions::default()
            },
            gpu: Default::default(),
        };
        let pod = |name: &str, file: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "ml", "uid": name},
                "spec": {"containers": [{"name": "c", "securityContext": {"seccompProfile":
                    {"type": "Localhost", "localhostProfile": file}}}]}
            }))
            .unwrap()
        };
        let pods = || vec![pod("gone", "nope.json"), pod("moved", "there.json")];
        let mut st = PodsState::new(context(a.path()), test_judge());
        st.apply(Change::Pods(pods()));
        st.apply(Change::Classes(Vec::new()));
        let e = st.evaluate();
        assert_eq!(e.new.len(), 1);
        assert_eq!(e.new[0].pod, "gone");
        st.restart(context(b.path()));
        assert!(!st.synced(), "judged before the new lists");
        st.apply(Change::Pods(pods()));
        st.apply(Change::Classes(Vec::new()));
        // nope.json is missing from both roots: not news; there.json only from B: news.
        let e = st.evaluate();
        assert_eq!(e.failing_pods, 2);
        let new: Vec<_> = e.new.iter().map(|f| f.pod.as_str()).collect();
        assert_eq!(new, ["moved"]);
    }

    fn node(labels: serde_json::Value, taints: serde_json::Value, heartbeat: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": labels, "resourceVersion": heartbeat},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": "True",
                "lastHeartbeatTime": heartbeat}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_gpu_condition_status_asks_for_a_judgement_its_heartbeat_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = fresh_state(NodeContext {
            seccomp_root: dir.path().to_path_buf(),
            labels: Default::default(),
            taints: Vec::new(),
            handlers: None,
            lint: LintOptions::default(),
            gpu: Default::default(),
        });
        let gpu = |status: &str, heartbeat: &str| -> Node {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "n1"},
                "status": {"conditions": [
                    {"type": "GPUHealthy", "status": status, "lastHeartbeatTime": heartbeat},
                    {"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}]}
            }))
            .unwrap()
        };
        assert!(st.apply(Change::Node(gpu("True", "2026-11-29T20:00:00Z"))));
        assert_eq!(
            st.node.gpu,
            [(
                nodeproof_findings::ConditionType::GPUHealthy,
                ConditionStatus::True
            )]
            .into()
        );
        assert!(!st.apply(Change::Node(gpu("True", "2026-11-29T20:00:10Z"))));
        assert!(st.apply(Change::Node(gpu("False", "2026-11-29T20:00:20Z"))));
    }

    #[test]
    fn only_labels_and_taints_of_the_node_ask_for_a_judgement() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = fresh_state(NodeContext {
            seccomp_root: dir.path().to_path_buf(),
            labels: [("gpu".to_string(), "true".to_string())].into(),
            taints: Vec::new(),
            handlers: None,
            lint: LintOptions::default(),
            gpu: Default::default(),
        });
        let gpu = serde_json::json!({"gpu": "true"});
        // The same labels and taints as read at start: nothing to judge again.
        assert!(!st.apply(Change::Nodes(vec![node(
            gpu.clone(),
            serde_json::json!([]),
            "2026-11-29T20:00:00Z"
        )])));
        // Heartbeats and other status updates.
        assert!(!st.apply(Change::Node(node(
            gpu.clone(),
            serde_json::json!([]),
            "2026-11-29T20:00:10Z"
        ))));
        let taint =
            serde_json::json!([{"key": "dedicated", "value": "infer", "effect": "NoExecute"}]);
        assert!(st.apply(Change::Node(node(
            gpu.clone(),
            taint.clone(),
            "2026-11-29T20:00:20Z"
        ))));
        assert_eq!(st.node.taints[0].effect, "NoExecute");
        assert!(st.apply(Change::Node(node(
            serde_json::json!({}),
            taint.clone(),
            "2026-11-29T20:00:20Z"
        ))));
        assert!(st.node.labels.is_empty());
        // Gone, or not registered: the last labels and taints stay.
        assert!(!st.apply(Change::NodeGone(node(
            gpu,
            serde_json::json!([]),
            "2026-11-29T20:00:30Z"
        ))));
        assert!(!st.apply(Change::Nodes(Vec::new())));
        assert_eq!(st.node.taints.len(), 1);
        // Pod and class changes always ask.
        assert!(st.apply(Change::Classes(Vec::new())));
    }
}
