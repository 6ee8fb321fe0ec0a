//! deploy/runtimeclass-example.yaml: parsed back with k8s-openapi's types
//! (as kubectl would send it), its annotations read as a contract by the
//! shared vocabulary, its nodeSelector naming exactly that contract's label,
//! and judged by the agent's own judgement: ready on a node that has what it
//! asks, not-ready on one without a listed profile, whatever its own label says.

use std::collections::BTreeMap;

use k8s_openapi::api::node::v1::RuntimeClass;

use nodeproof::pods::contract::judge_class;
use nodeproof::pods::verdict::{Judge, NodeContext, RuntimeClassInfo};
use nodeproof_findings::{ConditionStatus, ConditionType};
use nodeproof_report::contract::{contract_of, ContractState, Requirement};
use nodeproof_report::marks::Taint;
use nodeproof_seccomp::lint::LintOptions;

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/runtimeclass-example.yaml"
);

fn example() -> RuntimeClass {
    let text = std::fs::read_to_string(EXAMPLE).unwrap();
    serde_saphyr::from_str(&text).expect("a RuntimeClass")
}

#[test]
fn the_example_is_a_runtimeclass_whose_selector_is_its_own_contract_label() {
    let rc = example();
    let name = rc.metadata.name.clone().unwrap();
    let contract = contract_of(&name, rc.metadata.annotations.as_ref().unwrap())
        .expect("annotated")
        .expect("a valid contract");
    assert_eq!(
        contract.profiles,
        ["profiles/vllm-strict.json", "profiles/vllm-init.json"]
    );
    assert!(contract.requires.contains(&Requirement::Gpu));
    let selector = rc
        .scheduling
        .as_ref()
        .and_then(|s| s.node_selector.clone())
        .unwrap();
    assert_eq!(
        selector,
        BTreeMap::from([(contract.label_key(), "ready".to_string())])
    );
}

#[test]
fn the_example_is_ready_on_a_node_that_has_what_it_asks_and_not_elsewhere() {
    let rc = example();
    let info = RuntimeClassInfo::from(&rc);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("profiles")).unwrap();
    let good = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../profiles/runtime-default-x86_64.json"
    ))
    .unwrap();
    std::fs::write(root.join("profiles/vllm-strict.json"), &good).unwrap();
    std::fs::write(root.join("profiles/vllm-init.json"), &good).unwrap();
    let mut node = NodeContext {
        seccomp_root: root.to_path_buf(),
        // Once not-ready: the class's own selector does not keep it so.
        labels: [(
            "runtimeclass.nodeproof.dev/vllm".to_string(),
            "not-ready".to_string(),
        )]
        .into(),
        taints: vec![Taint {
            key: "nvidia.com/gpu".into(),
            value: String::new(),
            effect: "NoSchedule".into(),
        }],
        handlers: Some(["runc".to_string(), "nvidia".to_string()].into()),
        lint: LintOptions {
            check_listener: false,
            ..LintOptions::default()
        },
        gpu: [
            (ConditionType::GPUDriverReady, ConditionStatus::True),
            (ConditionType::GPUHealthy, ConditionStatus::True),
        ]
        .into(),
    };
    let mut judge = Judge::new(
        Default::default(),
        nodeproof::observe::profiles::read_reference,
    );
    let v = judge_class(&mut judge, "vllm", &info, &node);
    assert_eq!((v.state, v.cause.as_str()), (ContractState::Ready, ""));
    std::fs::remove_file(root.join("profiles/vllm-init.json")).unwrap();
    node.gpu
        .insert(ConditionType::GPUHealthy, ConditionStatus::False);
    let v = judge_class(&mut judge, "vllm", &info, &node);
    assert_eq!(v.state, ContractState::NotReady);
    assert_eq!(
        v.cause,
        format!(
            "requires gpu: GPUHealthy is False; profiles/vllm-init.json: not found under {}",
            root.display()
        )
    );
}
