//! Judges a pod's seccomp references against this node: the file exists under
//! the kubelet seccomp root, it lints to `ok` for the container's effective
//! noNewPrivileges, and the pod's RuntimeClass runs here. Pure: the files
//! come from the judge's `ReadProfile` (the agent's reads them through
//! `nodeproof_seccomp::scan`, so FIFOs, loops and escaping links are
//! refused as they are for `profile lint`); lint results are kept by
//! (path, lint options, contents) in a `LintCache`, so a thousand pods
//! sharing one profile lint it once per mode, and not at all in the mode
//! the profiles check already linted it in.

use nodeproof_bpfgen::Native;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::node::v1::RuntimeClass;

use crate::judge::profiles::passes;
use crate::observe::lint_cache::LintCache;
use crate::observe::profiles::ProfileRead;
use nodeproof_findings::{count, Condition, ConditionStatus, ConditionType};
use nodeproof_report::contract::{self, Contract, ContractError};
use nodeproof_report::marks::Taint;
use nodeproof_report::refs::{PodRefs, Profile};
use nodeproof_report::taints::{self, Toleration};
use nodeproof_seccomp::capability::CapabilitySet;
use nodeproof_seccomp::lint::{lint_source, LintOptions};

/// Why a pod's reference is unusable on this node (the condition's reason;
/// the vocabulary's, `nodeproof_findings::reason`).
pub use nodeproof_findings::reason::PodReason as Reason;

/// One unusable reference of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFinding {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    /// None for pod-wide problems (the RuntimeClass).
    pub container: Option<String>,
    /// `localhost/<path>` or the RuntimeClass name.
    pub subject: String,
    pub reason: Reason,
    /// One line: what is wrong (for a lint failure, the first diagnostic).
    pub message: String,
    /// For a RuntimeClass that does not fit: which way (`None`: not about
    /// the RuntimeClass).
    pub class_problem: Option<ClassProblem>,
}

/// Why a pod's RuntimeClass does not fit this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassProblem {
    /// Not in the cluster.
    Missing,
    /// Its handler is not configured in the container runtime.
    Handler,
    /// Its nodeSelector does not match this node.
    NodeSelector,
    /// A taint of this node it does not tolerate.
    Untolerated,
}

impl PodFinding {
    /// The Event/condition text: names pod, container and profile.
    pub fn describe(&self) -> String {
        let container = self
            .container
            .as_ref()
            .map(|c| format!(" container {c}"))
            .unwrap_or_default();
        format!(
            "{}/{}{}: {}",
            self.namespace, self.pod, container, self.message
        )
    }
}

/// What nodeproof needs of a RuntimeClass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeClassInfo {
    pub handler: String,
    pub node_selector: BTreeMap<String, String>,
    /// `scheduling.tolerations`; `None` without `scheduling`, which the
    /// class documents as "supported by all nodes" (taints then not judged).
    pub tolerations: Option<Vec<Toleration>>,
    /// Its contract annotations (`nodeproof_report::contract`), when it has them.
    pub contract: Option<Result<Contract, ContractError>>,
}

impl From<&RuntimeClass> for RuntimeClassInfo {
    fn from(rc: &RuntimeClass) -> Self {
        let scheduling = rc.scheduling.as_ref();
        RuntimeClassInfo {
            handler: rc.handler.clone(),
            node_selector: scheduling
                .and_then(|s| s.node_selector.clone())
                .unwrap_or_default(),
            tolerations: scheduling.map(|s| {
                s.tolerations
                    .iter()
                    .flatten()
                    .map(Toleration::from)
                    .collect()
            }),
            contract: contract::contract_of(
                &rc.metadata.name.clone().unwrap_or_default(),
                &rc.metadata.annotations.clone().unwrap_or_default(),
            ),
        }
    }
}

/// This node, as the judge sees it.
#[derive(Debug, Clone)]
pub struct NodeContext {
    /// The kubelet seccomp root (`/var/lib/kubelet/seccomp`).
    pub seccomp_root: PathBuf,
    pub labels: BTreeMap<String, String>,
    /// The Node's `spec.taints`.
    pub taints: Vec<Taint>,
    /// Handlers configured in the container runtime; `None` when its config
    /// could not be read, in which case handlers are not judged (a guess would flap).
    pub handlers: Option<BTreeSet<String>>,
    /// Runtime and arch; `no_new_privileges` is set per container.
    pub lint: LintOptions,
    /// The statuses of `GPUDriverReady` and `GPUHealthy` as the Node shows
    /// them (what the scheduler and the gate controller see too), for
    /// contracts that require a GPU.
    pub gpu: BTreeMap<ConditionType, ConditionStatus>,
}

impl NodeContext {
    /// Takes the Node's labels, taints and GPU condition statuses; true when
    /// any changed. The rest of the Node (heartbeats every 10 s, other
    /// conditions) does not change a verdict.
    pub fn update_from(&mut self, node: &Node) -> bool {
        let (labels, taints) = labels_and_taints(node);
        let gpu = gpu_conditions(node);
        if labels == self.labels && taints == self.taints && gpu == self.gpu {
            return false;
        }
        self.labels = labels;
        self.taints = taints;
        self.gpu = gpu;
        true
    }
}

/// The GPU conditions' statuses on a Node (absent ones are absent).
pub fn gpu_conditions(node: &Node) -> BTreeMap<ConditionType, ConditionStatus> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let kind = ConditionType::parse(&c.type_)?;
            matches!(
                kind,
                ConditionType::GPUDriverReady | ConditionType::GPUHealthy
            )
            .then(|| (kind, ConditionStatus::parse(&c.status)))
        })
        .collect()
}

/// What the judge reads from a Node: `metadata.labels` and `spec.taints`.
pub fn labels_and_taints(node: &Node) -> (BTreeMap<String, String>, Vec<Taint>) {
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .map(|t| Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.clone(),
        })
        .collect();
    (node.metadata.labels.clone().unwrap_or_default(), taints)
}

/// How the judge reads a profile a pod references (`root`: the seccomp
/// root, `path` under it). The agent's is
/// `observe::profiles::read_reference`; tests give files of their own.
pub type ReadProfile = fn(root: &Path, path: &Path) -> ProfileRead;

/// Judges pods: pure, given what `read` finds. Lint reports come from a
/// [`LintCache`], the daemon's one shared with the profiles check, so a
/// file the check linted after an edit is not linted again for the pods
/// that use it in the same mode.
pub struct Judge {
    lints: Arc<LintCache>,
    read: ReadProfile,
    /// The rollout guard, where the config turns it on.
    guard: Option<super::rollout_guard::RolloutGuard>,
}

/// What a profile file is worth on this node, in one noNewPrivileges mode.
#[derive(Clone)]
pub(crate) enum FileVerdict {
    Missing,
    /// The first thing wrong with it.
    Bad(String),
    Ok,
}

impl Judge {
    pub fn new(lints: Arc<LintCache>, read: ReadProfile) -> Self {
        Judge {
            lints,
            read,
            guard: None,
        }
    }

    /// Contracts also held by the rollout guard.
    pub fn with_guard(mut self, guard: super::rollout_guard::RolloutGuard) -> Self {
        self.guard = Some(guard);
        self
    }

    /// The rollout guard's hold on `rel`, as a contract's cause.
    pub(crate) fn guard_cause(&mut self, rel: &str, lint: &LintOptions) -> Option<String> {
        self.guard.as_mut()?.cause(rel, lint)
    }

    /// Every unusable reference of `pod`, in container order (RuntimeClass first).
    pub fn judge_pod(
        &mut self,
        pod: &PodRefs,
        runtime_classes: &HashMap<String, RuntimeClassInfo>,
        node: &NodeContext,
    ) -> Vec<PodFinding> {
        let mut out = Vec::new();
        if pod.finished {
            return out;
        }
        let finding = |container: Option<&str>, subject: String, reason, message| PodFinding {
            namespace: pod.namespace.clone(),
            pod: pod.name.clone(),
            uid: pod.uid.clone(),
            container: container.map(str::to_string),
            subject,
            reason,
            message,
            class_problem: None,
        };
        if let Some(rc_name) = &pod.runtime_class {
            let rc = runtime_classes.get(rc_name);
            if let Some((problem, msg)) = runtime_class_problem(rc_name, rc, &pod.tolerations, node)
            {
                out.push(PodFinding {
                    class_problem: Some(problem),
                    ..finding(None, rc_name.clone(), Reason::RuntimeClassMismatch, msg)
                });
            }
        }
        for c in &pod.containers {
            let Some((profile, _)) = &c.profile else {
                continue;
            };
            let subject = profile.display();
            match profile {
                Profile::RuntimeDefault | Profile::Unconfined => {}
                Profile::Unknown(v) => out.push(finding(
                    Some(&c.name),
                    subject.clone(),
                    Reason::ProfileInvalid,
                    format!("seccomp profile {v:?} is not a type the kubelet knows"),
                )),
                Profile::Localhost(rel) => {
                    // The container's own bounding set: runc init drops
                    // every capability it lacks with a call the profile may deny.
                    let bounding = CapabilitySet::for_container(
                        node.lint.runtime.default_capabilities(),
                        &c.capabilities.add,
                        &c.capabilities.drop,
                        c.capabilities.privileged,
                    );
                    let bounding =
                        Some(bounding).filter(|b| *b != node.lint.runtime.default_capabilities());
                    let (reason, msg) =
                        match self.judge_file(rel, c.no_new_privileges, bounding, node) {
                            FileVerdict::Ok => continue,
                            FileVerdict::Missing => (
                                Reason::ProfileMissing,
                                format!(
                                    "profile {subject} not found under {}",
                                    node.seccomp_root.display()
                                ),
                            ),
                            FileVerdict::Bad(first) => (
                                Reason::ProfileInvalid,
                                format!(
                                    "profile {subject} (noNewPrivileges={}): {first}",
                                    c.no_new_privileges
                                ),
                            ),
                        };
                    out.push(finding(Some(&c.name), subject.clone(), reason, msg));
                }
            }
        }
        out
    }

    /// `bounding`: the container's bounding set when it is not the runtime's
    /// default (`None`: the default, as for a RuntimeClass contract).
    pub(crate) fn judge_file(
        &mut self,
        rel: &str,
        nnp: bool,
        bounding: Option<CapabilitySet>,
        node: &NodeContext,
    ) -> FileVerdict {
        let Some(path) = profile_path(&node.seccomp_root, rel) else {
            return FileVerdict::Bad(format!("{rel} leaves the seccomp root"));
        };
        let bytes = match (self.read)(&node.seccomp_root, &path) {
            ProfileRead::Missing => return FileVerdict::Missing,
            ProfileRead::Unusable(why) => return FileVerdict::Bad(why),
            ProfileRead::Contents(b) => b,
        };
        let opts = LintOptions {
            no_new_privileges: nnp,
            bounding_set: bounding.or(node.lint.bounding_set),
            ..node.lint.clone()
        };
        let display = path.to_string_lossy();
        let report = &self.lints.report(&path, &display, &bytes, &opts, || {
            lint_source(&display, &bytes, &opts, &Native)
        });
        if passes(report, false) {
            FileVerdict::Ok
        } else {
            let first = report.diagnostics.first().map_or_else(
                || format!("outcome {}", report.outcome.as_str()),
                |d| {
                    format!(
                        "outcome {}: {}[{}]: {}",
                        report.outcome.as_str(),
                        d.severity,
                        d.code,
                        d.message
                    )
                },
            );
            FileVerdict::Bad(first)
        }
    }
}

/// Where the kubelet finds a `localhostProfile`: joined under its seccomp
/// root. `None` for a path with `..`, which would leave it (what lies
/// outside is not the node owner's profile store).
pub fn profile_path(root: &Path, rel: &str) -> Option<PathBuf> {
    if Path::new(rel)
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        return None;
    }
    Some(root.join(rel.trim_start_matches('/')))
}

pub(crate) fn runtime_class_problem(
    name: &str,
    rc: Option<&RuntimeClassInfo>,
    pod_tolerations: &[Toleration],
    node: &NodeContext,
) -> Option<(ClassProblem, String)> {
    let Some(rc) = rc else {
        return Some((
            ClassProblem::Missing,
            format!("RuntimeClass {name} does not exist"),
        ));
    };
    if let Some(handlers) = &node.handlers {
        if !handlers.contains(&rc.handler) {
            let known: Vec<&str> = handlers.iter().map(String::as_str).collect();
            return Some((
                ClassProblem::Handler,
                format!(
                    "RuntimeClass {name}: handler {:?} is not configured in the container runtime (configured: {})",
                    rc.handler,
                    known.join(", ")
                ),
            ));
        }
    }
    let unmatched: Vec<String> = rc
        .node_selector
        .iter()
        .filter(|(k, v)| node.labels.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !unmatched.is_empty() {
        return Some((
            ClassProblem::NodeSelector,
            format!(
                "RuntimeClass {name}: nodeSelector {} does not match this node",
                unmatched.join(",")
            ),
        ));
    }
    // What the scheduler sees: the class's tolerations merged into the pod's.
    let class_tolerations = rc.tolerations.as_ref()?;
    let all: Vec<Toleration> = class_tolerations
        .iter()
        .chain(pod_tolerations)
        .cloned()
        .collect();
    let left: Vec<String> = taints::untolerated(&all, &node.taints)
        .into_iter()
        .map(taints::display)
        .collect();
    (!left.is_empty()).then(|| {
        (
            ClassProblem::Untolerated,
            format!(
                "RuntimeClass {name}: this node's taint {} is not tolerated (by scheduling.tolerations nor the pod's)",
                left.join(", ")
            ),
        )
    })
}

/// The reason of the pods' part of `SeccompProfilesReady` when every
/// watched pod's references are usable (False takes its first finding's
/// [`Reason`]).
pub const PODS_READY: &str = "PodProfilesReady";

/// The pods' contribution to `SeccompProfilesReady`: True with reason
/// `PodProfilesReady` when every watched pod's references are usable, else
/// False with the first finding's reason and up to three findings named.
pub fn condition(findings: &[PodFinding], pods: usize) -> Condition {
    let Some(first) = findings.first() else {
        return Condition {
            kind: ConditionType::SeccompProfilesReady,
            status: ConditionStatus::True,
            reason: PODS_READY.into(),
            message: format!(
                "seccomp references of {} on this node are usable",
                count(pods, "pod", "pods")
            ),
        };
    };
    let bad_pods: BTreeSet<(&str, &str)> = findings
        .iter()
        .map(|f| (f.namespace.as_str(), f.pod.as_str()))
        .collect();
    let named: Vec<String> = findings.iter().take(3).map(PodFinding::describe).collect();
    Condition {
        kind: ConditionType::SeccompProfilesReady,
        status: ConditionStatus::False,
        reason: first.reason.as_str().into(),
        message: format!(
            "{} of {} {} unusable seccomp profiles: {}{}",
            bad_pods.len(),
            count(pods, "pod", "pods"),
            if bad_pods.len() == 1 {
                "references"
            } else {
                "reference"
            },
            named.join("; "),
            if findings.len() > 3 { "; ..." } else { "" }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeproof_report::refs::pod_refs;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(v).expect("pod JSON")
    }

    /// A profile that lints ok: the runtime default shipped in `profiles/`.
    fn good() -> Vec<u8> {
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../profiles/runtime-default-x86_64.json"
        ))
        .expect("default profile")
    }

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect: effect.into(),
        }
    }

    fn tol(key: &str, operator: &str, value: &str) -> Toleration {
        Toleration {
            key: key.into(),
            operator: operator.into(),
            value: value.into(),
            effect: String::new(),
        }
    }

    fn node(root: &Path) -> NodeContext {
        NodeContext {
            seccomp_root: root.to_path_buf(),
            labels: [("gpu".to_string(), "true".to_string())].into(),
            taints: vec![
                taint("nvidia.com/gpu", "present", "NoSchedule"),
                taint("dedicated", "infer", "NoExecute"),
                taint("soft", "", "PreferNoSchedule"),
            ],
            handlers: Some(["runc".to_string(), "nvidia".to_string()].into()),
            lint: LintOptions {
                check_listener: false,
                ..LintOptions::default()
            },
            gpu: BTreeMap::new(),
        }
    }

    /// No disk: the node's files as the test gives them.
    fn files_in_memory(_root: &Path, path: &Path) -> ProfileRead {
        match path.file_name().and_then(|n| n.to_str()) {
            Some("good.json") => ProfileRead::Contents(good()),
            Some("fifo.json") => ProfileRead::Unusable("error[unreadable]: a FIFO".into()),
            _ => ProfileRead::Missing,
        }
    }

    #[test]
    fn the_judgement_is_pure_given_what_the_reader_finds() {
        let mut judge = Judge::new(Default::default(), files_in_memory);
        let ctx = node(Path::new("/nowhere"));
        let judged = |judge: &mut Judge, file: &str| {
            judge
                .judge_pod(&vllm(localhost(file), None), &HashMap::new(), &ctx)
                .into_iter()
                .map(|f| (f.reason, f.message))
                .collect::<Vec<_>>()
        };
        assert!(judged(&mut judge, "good.json").is_empty());
        let missing = judged(&mut judge, "gone.json");
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].0, Reason::ProfileMissing);
        assert!(
            missing[0].1.contains("not found under /nowhere"),
            "{missing:?}"
        );
        let fifo = judged(&mut judge, "fifo.json");
        assert_eq!(fifo[0].0, Reason::ProfileInvalid);
        assert!(fifo[0].1.ends_with("error[unreadable]: a FIFO"), "{fifo:?}");
    }

    fn vllm(profile_json: serde_json::Value, rc: Option<&str>) -> PodRefs {
        pod_refs(&pod(json!({
            "metadata": {"name": "vllm-0", "namespace": "ml", "uid": "u1"},
            "spec": {"runtimeClassName": rc, "containers": [
                {"name": "vllm", "securityContext": {"seccompProfile": profile_json}}]}
        })))
    }

    /// A pod of RuntimeClass `rc` that tolerates `dedicated` itself.
    fn tolerant(rc: &str) -> PodRefs {
        pod_refs(&pod(json!({
            "metadata": {"name": "vllm-1", "namespace": "ml", "uid": "u2"},
            "spec": {"runtimeClassName": rc, "containers": [{"name": "vllm"}],
                "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}]}
        })))
    }

    fn localhost(p: &str) -> serde_json::Value {
        json!({"type": "Localhost", "localhostProfile": p})
    }

    #[test]
    fn table() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("profiles")).unwrap();
        std::fs::write(root.join("profiles/good.json"), good()).unwrap();
        std::fs::write(root.join("profiles/broken.json"), "{\"defaultAction\":").unwrap();
        // Valid JSON the runtime refuses: an unknown action.
        std::fs::write(
            root.join("profiles/bad-action.json"),
            r#"{"defaultAction":"SCMP_ACT_NOPE"}"#,
        )
        .unwrap();
        let gpu_tolerations = vec![
            tol("nvidia.com/gpu", "Exists", ""),
            tol("dedicated", "Equal", "infer"),
        ];
        let rcs: HashMap<String, RuntimeClassInfo> = [
            (
                "nvidia",
                "nvidia",
                vec![("gpu", "true")],
                Some(gpu_tolerations),
            ),
            ("kata", "kata", vec![], None),
            ("elsewhere", "runc", vec![("pool", "cpu")], Some(vec![])),
            // Declares scheduling: the node's NoExecute taint is not tolerated.
            (
                "gpu-only",
                "runc",
                vec![("gpu", "true")],
                Some(vec![tol("nvidia.com/gpu", "Exists", "")]),
            ),
            // The wrong value: Equal compares values.
            (
                "wrong-value",
                "runc",
                vec![],
                Some(vec![tol("", "Exists", ""), tol("x", "Equal", "y")]),
            ),
            (
                "infer-2",
                "runc",
                vec![],
                Some(vec![
                    tol("nvidia.com/gpu", "Equal", "present"),
                    tol("dedicated", "Equal", "training"),
                ]),
            ),
            // No scheduling: "supported by all nodes", taints not judged.
            ("anywhere", "runc", vec![], None),
        ]
        .into_iter()
        .map(|(n, h, sel, tolerations)| {
            (
                n.to_string(),
                RuntimeClassInfo {
                    handler: h.into(),
                    node_selector: sel
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                    tolerations,
                    contract: None,
                },
            )
        })
        .collect();
        let ctx = node(root);
        let mut judge = Judge::new(Default::default(), crate::observe::profiles::read_reference);
        let cases: Vec<(PodRefs, Option<Reason>, &str)> = vec![
            (vllm(localhost("profiles/good.json"), None), None, ""),
            (vllm(json!({"type": "RuntimeDefault"}), None), None, ""),
            (
                vllm(localhost("profiles/good.json"), Some("nvidia")),
                None,
                "",
            ),
            (
                vllm(localhost("profiles/vllm-strict.json"), None),
                Some(Reason::ProfileMissing),
                "profile localhost/profiles/vllm-strict.json not found under",
            ),
            (
                vllm(localhost("profiles/broken.json"), None),
                Some(Reason::ProfileInvalid),
                "outcome rejected: error[json-syntax]",
            ),
            (
                vllm(localhost("profiles/bad-action.json"), None),
                Some(Reason::ProfileInvalid),
                "outcome rejected",
            ),
            (
                vllm(localhost("../etc/passwd"), None),
                Some(Reason::ProfileInvalid),
                "leaves the seccomp root",
            ),
            (
                vllm(json!({"type": "Bogus"}), None),
                Some(Reason::ProfileInvalid),
                "not a type the kubelet knows",
            ),
            (
                vllm(json!({"type": "RuntimeDefault"}), Some("kata")),
                Some(Reason::RuntimeClassMismatch),
                "handler \"kata\" is not configured",
            ),
            (
                vllm(json!({"type": "RuntimeDefault"}), Some("elsewhere")),
                Some(Reason::RuntimeClassMismatch),
                "nodeSelector pool=cpu does not match",
            ),
            (
                vllm(json!({"type": "RuntimeDefault"}), Some("gone")),
                Some(Reason::RuntimeClassMismatch),
                "RuntimeClass gone does not exist",
            ),
            (
                vllm(json!({"type": "RuntimeDefault"}), Some("gpu-only")),
                Some(Reason::RuntimeClassMismatch),
                "RuntimeClass gpu-only: this node's taint dedicated=infer:NoExecute is not tolerated",
            ),
            // The pod's own toleration covers what the class's do not.
            (tolerant("gpu-only"), None, ""),
            // An empty key with Exists tolerates every taint.
            (
                vllm(json!({"type": "RuntimeDefault"}), Some("wrong-value")),
                None,
                "",
            ),
            (
                vllm(json!({"type": "RuntimeDefault"}), Some("infer-2")),
                Some(Reason::RuntimeClassMismatch),
                "taint dedicated=infer:NoExecute is not tolerated",
            ),
            (
                vllm(json!({"type": "RuntimeDefault"}), Some("anywhere")),
                None,
                "",
            ),
        ];
        for (i, (refs, want, text)) in cases.iter().enumerate() {
            let got = judge.judge_pod(refs, &rcs, &ctx);
            match want {
                None => assert!(got.is_empty(), "case {i}: {got:?}"),
                Some(r) => {
                    assert_eq!(got.len(), 1, "case {i}: {got:?}");
                    assert_eq!(got[0].reason, *r, "case {i}: {got:?}");
                    assert!(
                        got[0].message.contains(text),
                        "case {i}: {}",
                        got[0].message
                    );
                }
            }
        }
    }

    #[test]
    fn finished_pods_are_not_judged() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = node(dir.path());
        let done = pod_refs(&pod(json!({
            "metadata": {"name": "job-1", "namespace": "ml", "uid": "u9"},
            "spec": {"containers": [{"name": "c", "securityContext": {"seccompProfile":
                {"type": "Localhost", "localhostProfile": "gone.json"}}}]},
            "status": {"phase": "Succeeded"}
        })));
        assert!(done.finished);
        assert!(
            Judge::new(Default::default(), crate::observe::profiles::read_reference)
                .judge_pod(&done, &HashMap::new(), &ctx)
                .is_empty()
        );
    }

    #[test]
    fn condition_names_pods_and_recovers_when_fixed() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = node(dir.path());
        let mut judge = Judge::new(Default::default(), crate::observe::profiles::read_reference);
        let refs = vllm(localhost("profiles/vllm-strict.json"), None);
        let f = judge.judge_pod(&refs, &HashMap::new(), &ctx);
        let c = condition(&f, 1);
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::False, "ProfileMissing")
        );
        assert!(
            c.message.starts_with("1 of 1 pod references unusable seccomp profiles: ml/vllm-0 container vllm: profile localhost/profiles/vllm-strict.json not found"),
            "{}",
            c.message
        );
        std::fs::create_dir_all(dir.path().join("profiles")).unwrap();
        std::fs::write(dir.path().join("profiles/vllm-strict.json"), "[").unwrap();
        let f = judge.judge_pod(&refs, &HashMap::new(), &ctx);
        assert_eq!(condition(&f, 1).reason, "ProfileInvalid");
        // Same path, new contents: the cache must not keep the old verdict.
        std::fs::write(dir.path().join("profiles/vllm-strict.json"), good()).unwrap();
        let f = judge.judge_pod(&refs, &HashMap::new(), &ctx);
        let c = condition(&f, 1);
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::True, "PodProfilesReady")
        );
        assert_eq!(
            c.message,
            "seccomp references of 1 pod on this node are usable"
        );
        assert_eq!(
            condition(&f, 2).message,
            "seccomp references of 2 pods on this node are usable"
        );
    }

    #[test]
    fn lint_failure_names_the_no_new_privileges_mode() {
        // Only exit_group allowed: runc cannot even exec the entrypoint, in
        // either mode; the message says which mode was judged, since the
        // same file can pass in one and fail in the other.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("tiny.json"),
            r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["exit_group"],"action":"SCMP_ACT_ALLOW"}]}"#,
        )
        .unwrap();
        let ctx = node(dir.path());
        let mut judge = Judge::new(Default::default(), crate::observe::profiles::read_reference);
        let a = judge.judge_pod(&vllm(localhost("tiny.json"), None), &HashMap::new(), &ctx);
        assert_eq!(a.len(), 1, "{a:?}");
        assert!(
            a[0].message.contains("noNewPrivileges=false"),
            "{}",
            a[0].message
        );
    }

    /// runc init drops each capability the container's bounding set lacks
    /// with a `prctl` of its own: a profile denying the drop of
    /// CAP_DAC_READ_SEARCH (not in containerd's default set) breaks a plain
    /// container's start, not that of one that adds the capability or is
    /// privileged, whose set keeps it.
    #[test]
    fn a_containers_own_capabilities_decide_which_drops_init_makes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("no-drop.json"),
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["prctl"],"action":"SCMP_ACT_ERRNO","errnoRet":1,"args":[{"index":0,"value":24,"op":"SCMP_CMP_EQ"},{"index":1,"value":2,"op":"SCMP_CMP_EQ"}]}]}"#,
        )
        .unwrap();
        let ctx = node(dir.path());
        let with = |sc: serde_json::Value| {
            let mut sc = sc;
            sc["seccompProfile"] = localhost("no-drop.json");
            pod_refs(&pod(json!({
                "metadata": {"name": "vllm-0", "namespace": "ml", "uid": "u1"},
                "spec": {"containers": [{"name": "vllm", "securityContext": sc}]}
            })))
        };
        let mut judge = Judge::new(Default::default(), crate::observe::profiles::read_reference);
        let plain = judge.judge_pod(&with(json!({})), &HashMap::new(), &ctx);
        assert_eq!(plain.len(), 1, "{plain:?}");
        assert!(
            plain[0].message.contains("CAP_DAC_READ_SEARCH"),
            "{}",
            plain[0].message
        );
        let adds = with(json!({"capabilities": {"add": ["DAC_READ_SEARCH"]}}));
        assert!(judge.judge_pod(&adds, &HashMap::new(), &ctx).is_empty());
        let privileged = with(json!({"privileged": true}));
        assert!(judge
            .judge_pod(&privileged, &HashMap::new(), &ctx)
            .is_empty());
        // Dropping everything drops it too: the start fails again.
        let drops = with(json!({"capabilities": {"drop": ["ALL"]}}));
        assert_eq!(judge.judge_pod(&drops, &HashMap::new(), &ctx).len(), 1);
    }
}
