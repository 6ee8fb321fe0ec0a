//! `nodeproof cluster policy` end to end: the RuntimeClasses read from the
//! test API server (a cluster reader's token, paged list) or from a YAML
//! file, the printed policies parsed back with k8s-openapi types, an
//! unusable annotation said on stderr and left out, and nothing to enforce
//! refused. (The CEL itself is evaluated in crates/cluster/tests/policy_cel.rs.)

use crate::support;

use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use serde::Deserialize;
use serde_json::{json, Value};

use support::apiserver::{Identity, TestApiServer};

fn class(name: &str, profiles: Option<&str>) -> Value {
    let mut rc = json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                        "metadata": {"name": name}, "handler": "runc"});
    if let Some(p) = profiles {
        rc["metadata"]["annotations"] = json!({"nodeproof.dev/localhost-profiles": p});
    }
    rc
}

fn nodeproof(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Each printed policy's name and its validations' messages.
type Messages = Vec<(String, Vec<String>)>;

/// The validations' messages of each printed policy, by name, and the
/// bindings' actions: what the YAML says, read with k8s-openapi types.
fn parsed(yaml: &str) -> (Messages, Vec<Vec<String>>) {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("YAML");
    let mut policies = Vec::new();
    let mut actions = Vec::new();
    for d in docs {
        match d["kind"].as_str().unwrap() {
            "ValidatingAdmissionPolicy" => {
                let p = ValidatingAdmissionPolicy::deserialize(&d).unwrap();
                let messages = p
                    .spec
                    .unwrap()
                    .validations
                    .unwrap()
                    .into_iter()
                    .map(|v| v.message.unwrap())
                    .collect();
                policies.push((p.metadata.name.unwrap(), messages));
            }
            "ValidatingAdmissionPolicyBinding" => {
                let b = ValidatingAdmissionPolicyBinding::deserialize(&d).unwrap();
                actions.push(b.spec.unwrap().validation_actions.unwrap());
            }
            other => panic!("unexpected {other}"),
        }
    }
    (policies, actions)
}

#[test]
fn policies_from_the_clusters_runtime_classes() {
    let server = TestApiServer::start();
    server.add_token("reader", Identity::ClusterReader);
    server.put("runtimeclasses", class("runc", None));
    server.put(
        "runtimeclasses",
        class(
            "vllm",
            Some("profiles/vllm-strict.json,profiles/vllm-init.json"),
        ),
    );
    server.put("runtimeclasses", class("broken", Some("../escape.json")));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), "reader");
    let (code, stdout, stderr) = nodeproof(&[
        "cluster",
        "policy",
        "--mode",
        "warn",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("skipped: RuntimeClass broken: nodeproof.dev/localhost-profiles entry \"../escape.json\""),
        "{stderr}"
    );
    let (policies, actions) = parsed(&stdout);
    let names: Vec<&str> = policies.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "nodeproof-seccomp-pods",
            "nodeproof-seccomp-workloads",
            "nodeproof-seccomp-cronjobs"
        ]
    );
    for (_, messages) in &policies {
        assert_eq!(
            messages.len(),
            1,
            "only vllm has a usable contract: {messages:?}"
        );
        assert!(messages[0].starts_with("runtimeClassName vllm: "));
    }
    assert!(
        actions.iter().all(|a| a == &["Warn", "Audit"]),
        "{actions:?}"
    );
    assert!(
        stdout.contains("#         runtimeclass.nodeproof.dev/vllm: ready\n"),
        "{stdout}"
    );
    assert!(
        server
            .log()
            .iter()
            .all(|l| l.method == "GET" && l.path == "/apis/node.k8s.io/v1/runtimeclasses"),
        "only RuntimeClasses are listed"
    );
}

#[test]
fn policies_from_a_file_and_nothing_to_enforce() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("classes.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: node.k8s.io/v1\n  kind: RuntimeClass\n  metadata:\n    name: vllm\n    annotations:\n      nodeproof.dev/localhost-profiles: profiles/vllm-strict.json\n  handler: runc\n",
    )
    .unwrap();
    let (code, stdout, stderr) =
        nodeproof(&["cluster", "policy", "--from", file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    let (policies, actions) = parsed(&stdout);
    assert_eq!(policies.len(), 3);
    assert!(actions.iter().all(|a| a == &["Deny"]));

    std::fs::write(
        &file,
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: runc}\nhandler: runc\n",
    )
    .unwrap();
    let (code, stdout, stderr) =
        nodeproof(&["cluster", "policy", "--from", file.to_str().unwrap()]);
    assert_ne!(code, Some(0));
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains(
            "no RuntimeClass carries a usable nodeproof.dev/localhost-profiles annotation"
        ),
        "{stderr}"
    );
}
