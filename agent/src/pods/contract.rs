//! Judges the RuntimeClass contracts (`nodeproof_report::contract`) on this
//! node: every listed profile present under the seccomp root and `ok` in
//! both noNewPrivileges modes (a pod of the class may run either), the
//! class's handler configured in the container runtime, its own
//! `scheduling` matching this node, and the GPU conditions True when it
//! requires a GPU. The profiles go through the pods' judge (its lint and its
//! cache), so a contract and a pod never disagree about a file. Pure apart
//! from reading the profile files.

use std::collections::HashMap;

use super::verdict::{self, FileVerdict, Judge, NodeContext, RuntimeClassInfo};
use nodeproof_findings::{ConditionStatus, ConditionType};
use nodeproof_report::contract::{Contract, ContractState, Requirement};
use nodeproof_report::contract_labels::ContractVerdict;

/// How many problems a cause names before it only counts the rest.
const NAMED: usize = 3;

/// The verdict of every annotated class, in name order. A file listed by
/// several classes is read and judged once per round.
pub fn judge_all(
    judge: &mut Judge,
    classes: &HashMap<String, RuntimeClassInfo>,
    node: &NodeContext,
) -> Vec<ContractVerdict> {
    let mut names: Vec<&String> = classes
        .iter()
        .filter(|(_, info)| info.contract.is_some())
        .map(|(name, _)| name)
        .collect();
    names.sort();
    let mut files = Files {
        judge,
        round: HashMap::new(),
    };
    names
        .into_iter()
        .map(|name| judge_with(&mut files, name, &classes[name], node))
        .collect()
}

/// One annotated class on this node.
pub fn judge_class(
    judge: &mut Judge,
    class: &str,
    info: &RuntimeClassInfo,
    node: &NodeContext,
) -> ContractVerdict {
    let mut files = Files {
        judge,
        round: HashMap::new(),
    };
    judge_with(&mut files, class, info, node)
}

/// The pods' judge, and what it said this round of each (file, mode).
struct Files<'a> {
    judge: &'a mut Judge,
    round: HashMap<(String, bool), FileVerdict>,
}

impl Files<'_> {
    fn judge(&mut self, rel: &str, nnp: bool, node: &NodeContext) -> FileVerdict {
        if let Some(v) = self.round.get(&(rel.to_string(), nnp)) {
            return v.clone();
        }
        let v = self.judge.judge_file(rel, nnp, None, node);
        self.round.insert((rel.to_string(), nnp), v.clone());
        v
    }
}

fn judge_with(
    files: &mut Files<'_>,
    class: &str,
    info: &RuntimeClassInfo,
    node: &NodeContext,
) -> ContractVerdict {
    let problems = match &info.contract {
        None => Vec::new(),
        // A contract that cannot be read cannot be met: said, never guessed around.
        Some(Err(e)) => vec![e.to_string()],
        Some(Ok(contract)) => problems(files, contract, info, node),
    };
    let state = if problems.is_empty() {
        ContractState::Ready
    } else {
        ContractState::NotReady
    };
    let mut cause = problems
        .iter()
        .take(NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if problems.len() > NAMED {
        cause.push_str(&format!("; ... ({} problems)", problems.len()));
    }
    ContractVerdict {
        class: class.to_string(),
        state,
        cause,
    }
}

fn problems(
    files: &mut Files<'_>,
    contract: &Contract,
    info: &RuntimeClassInfo,
    node: &NodeContext,
) -> Vec<String> {
    let mut out = Vec::new();
    // The class's scheduling is judged without its own contract label: the
    // documented nodeSelector `runtimeclass.nodeproof.dev/<class>: ready` is
    // what this very judgement decides, so counting it would keep a node that
    // once went not-ready not-ready forever (and a fresh node, without the
    // label, could never become ready).
    let mut own = info.clone();
    own.node_selector.remove(&contract.label_key());
    // Only the class's tolerations: a contract is about the class, and the
    // scheduler merges the class's into every pod's, so a taint they do not
    // tolerate keeps the pods that rely on the class alone away.
    if let Some((_, p)) = verdict::runtime_class_problem(&contract.class, Some(&own), &[], node) {
        let prefix = format!("RuntimeClass {}: ", contract.class);
        out.push(p.strip_prefix(&prefix).unwrap_or(&p).to_string());
    }
    if contract.requires.contains(&Requirement::Gpu) {
        for kind in [ConditionType::GPUDriverReady, ConditionType::GPUHealthy] {
            match node.gpu.get(&kind) {
                Some(ConditionStatus::True) => {}
                Some(s) => out.push(format!("requires gpu: {kind} is {s}")),
                None => out.push(format!("requires gpu: {kind} is not reported on this Node")),
            }
        }
    }
    for rel in &contract.profiles {
        let before = out.len();
        // Both modes: a container with allowPrivilegeEscalation unset (or
        // true) runs without noNewPrivileges, one with it false runs with it,
        // and runc loads the filter at different points for each.
        for nnp in [false, true] {
            match files.judge(rel, nnp, node) {
                FileVerdict::Ok => {}
                FileVerdict::Missing => {
                    out.push(format!(
                        "{rel}: not found under {}",
                        node.seccomp_root.display()
                    ));
                    // Missing in one mode is missing in both.
                    break;
                }
                FileVerdict::Bad(first) => {
                    out.push(format!("{rel} (noNewPrivileges={nnp}): {first}"));
                }
            }
        }
        // A file that starts may still stop what the class's pods call:
        // the rollout guard's word, where it is on.
        if out.len() == before {
            if let Some(cause) = files.judge.guard_cause(rel, &node.lint) {
                out.push(cause);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::node::v1::RuntimeClass;
    use nodeproof_report::contract::{label_key, ANNOTATION_PROFILES, ANNOTATION_REQUIRES};
    use nodeproof_report::marks::Taint;
    use nodeproof_seccomp::lint::LintOptions;
    use serde_json::json;
    use std::collections::BTreeMap;
    use std::path::Path;

    fn good() -> Vec<u8> {
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../profiles/runtime-default-x86_64.json"
        ))
        .expect("default profile")
    }

    fn node(root: &Path) -> NodeContext {
        NodeContext {
            seccomp_root: root.to_path_buf(),
            labels: [("pool".to_string(), "gpu".to_string())].into(),
            taints: vec![Taint {
                key: "nvidia.com/gpu".into(),
                value: "present".into(),
                effect: "NoSchedule".into(),
            }],
            handlers: Some(["runc".to_string(), "nvidia".to_string()].into()),
            lint: LintOptions {
                check_listener: false,
                ..LintOptions::default()
            },
            gpu: BTreeMap::new(),
        }
    }

    fn class(v: serde_json::Value) -> (String, RuntimeClassInfo) {
        let rc: RuntimeClass = serde_json::from_value(v).expect("RuntimeClass");
        (rc.metadata.name.clone().unwrap(), (&rc).into())
    }

    /// An annotated class with handler `nvidia` that tolerates the GPU taint.
    fn vllm(profiles: &str, extra: serde_json::Value) -> (String, RuntimeClassInfo) {
        let mut v = json!({
            "metadata": {"name": "vllm", "annotations": {ANNOTATION_PROFILES: profiles}},
            "handler": "nvidia",
            "scheduling": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}
        });
        merge(&mut v, &extra);
        class(v)
    }

    /// JSON merge patch (RFC 7386) without deletes: enough for fixtures.
    fn merge(target: &mut serde_json::Value, patch: &serde_json::Value) {
        match (target, patch) {
            (serde_json::Value::Object(t), serde_json::Value::Object(p)) => {
                for (k, v) in p {
                    merge(t.entry(k.clone()).or_insert(serde_json::Value::Null), v);
                }
            }
            (t, p) => *t = p.clone(),
        }
    }

    fn judged(c: &(String, RuntimeClassInfo), ctx: &NodeContext) -> ContractVerdict {
        judge_class(
            &mut Judge::new(Default::default(), crate::observe::profiles::read_reference),
            &c.0,
            &c.1,
            ctx,
        )
    }

    fn setup() -> (tempfile::TempDir, NodeContext) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("profiles")).unwrap();
        std::fs::write(dir.path().join("profiles/good.json"), good()).unwrap();
        let ctx = node(dir.path());
        (dir, ctx)
    }

    #[test]
    fn a_class_whose_profiles_handler_and_scheduling_fit_is_ready() {
        let (_dir, ctx) = setup();
        let v = judged(&vllm("profiles/good.json", json!({})), &ctx);
        assert_eq!(
            (v.state, v.cause.as_str()),
            (ContractState::Ready, ""),
            "{v:?}"
        );
    }

    #[test]
    fn each_unmet_part_is_named() {
        let (dir, ctx) = setup();
        // Only exit_group: runc cannot exec the entrypoint (start-failed), in both modes.
        std::fs::write(
            dir.path().join("profiles/tiny.json"),
            r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["exit_group"],"action":"SCMP_ACT_ALLOW"}]}"#,
        )
        .unwrap();
        let cases = [
            (
                vllm("profiles/gone.json", json!({})),
                "profiles/gone.json: not found under",
            ),
            (
                vllm("profiles/tiny.json", json!({})),
                "profiles/tiny.json (noNewPrivileges=false): outcome start-failed",
            ),
            (
                vllm("profiles/good.json", json!({"handler": "kata"})),
                "handler \"kata\" is not configured in the container runtime",
            ),
            (
                vllm(
                    "profiles/good.json",
                    json!({"scheduling": {"tolerations": []}}),
                ),
                "this node's taint nvidia.com/gpu=present:NoSchedule is not tolerated",
            ),
            (
                vllm(
                    "profiles/good.json",
                    json!({"scheduling": {"nodeSelector": {"pool": "cpu"}}}),
                ),
                "nodeSelector pool=cpu does not match this node",
            ),
            (
                vllm(
                    "profiles/good.json",
                    json!({"metadata": {"annotations": {ANNOTATION_REQUIRES: "gpu"}}}),
                ),
                "requires gpu: GPUDriverReady is not reported on this Node; requires gpu: GPUHealthy is not reported on this Node",
            ),
            (
                vllm("../outside.json", json!({})),
                "is not a relative path below the seccomp root",
            ),
            (
                vllm(" , ", json!({})),
                "lists no profile",
            ),
            (
                vllm("profiles/good.json", json!({"metadata": {"annotations": {ANNOTATION_REQUIRES: "gpu,tpu"}}})),
                "names \"tpu\"; known: gpu",
            ),
        ];
        for (i, (c, text)) in cases.iter().enumerate() {
            let v = judged(c, &ctx);
            assert_eq!(v.state, ContractState::NotReady, "case {i}: {v:?}");
            assert!(v.cause.contains(text), "case {i}: {}", v.cause);
        }
        // tiny.json fails in both modes, and says so for each.
        let v = judged(&vllm("profiles/tiny.json", json!({})), &ctx);
        assert!(v.cause.contains("noNewPrivileges=true"), "{}", v.cause);
    }

    #[test]
    fn gpu_conditions_must_both_be_true() {
        let (_dir, mut ctx) = setup();
        let c = vllm(
            "profiles/good.json",
            json!({"metadata": {"annotations": {ANNOTATION_REQUIRES: "gpu"}}}),
        );
        ctx.gpu = [
            (ConditionType::GPUDriverReady, ConditionStatus::True),
            (ConditionType::GPUHealthy, ConditionStatus::False),
        ]
        .into();
        let v = judged(&c, &ctx);
        assert_eq!(v.cause, "requires gpu: GPUHealthy is False");
        ctx.gpu
            .insert(ConditionType::GPUHealthy, ConditionStatus::True);
        assert_eq!(judged(&c, &ctx).state, ContractState::Ready);
    }

    #[test]
    fn the_class_own_contract_label_in_its_node_selector_is_not_circular() {
        let (_dir, mut ctx) = setup();
        let c = vllm(
            "profiles/good.json",
            json!({"scheduling": {"nodeSelector": {label_key("vllm"): "ready", "pool": "gpu"}}}),
        );
        // A fresh node has no label yet; a node once not-ready has `not-ready`: both can become ready.
        for value in [None, Some("not-ready")] {
            ctx.labels.remove(&label_key("vllm"));
            if let Some(v) = value {
                ctx.labels.insert(label_key("vllm"), v.into());
            }
            assert_eq!(judged(&c, &ctx).state, ContractState::Ready, "{value:?}");
        }
        // The rest of the selector still counts.
        ctx.labels.remove("pool");
        let v = judged(&c, &ctx);
        assert_eq!(v.cause, "nodeSelector pool=gpu does not match this node");
    }

    #[test]
    fn three_hundred_profiles_are_judged_and_the_cause_stays_short() {
        let (_dir, ctx) = setup();
        let mut list: Vec<String> = (0..299).map(|i| format!("profiles/p{i}.json")).collect();
        list.push("profiles/good.json".into());
        let c = vllm(&list.join(","), json!({}));
        let v = judged(&c, &ctx);
        assert_eq!(v.state, ContractState::NotReady);
        assert!(v.cause.ends_with("; ... (299 problems)"), "{}", v.cause);
        assert!(v.cause.len() < 1024, "{}", v.cause.len());
    }

    #[test]
    fn only_annotated_classes_are_judged_in_name_order() {
        let (_dir, ctx) = setup();
        let classes: HashMap<String, RuntimeClassInfo> = [
            vllm("profiles/good.json", json!({"metadata": {"name": "zeta"}})),
            vllm("profiles/gone.json", json!({})),
            class(json!({"metadata": {"name": "plain"}, "handler": "runc"})),
        ]
        .into();
        let got: Vec<(String, ContractState)> = judge_all(
            &mut Judge::new(Default::default(), crate::observe::profiles::read_reference),
            &classes,
            &ctx,
        )
        .into_iter()
        .map(|v| (v.class, v.state))
        .collect();
        assert_eq!(
            got,
            [
                ("vllm".to_string(), ContractState::NotReady),
                ("zeta".to_string(), ContractState::Ready)
            ]
        );
    }
}
