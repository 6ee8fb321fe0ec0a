//! `nodeproof check` is one round of exactly what `nodeproof run` does: on
//! the same node state (profiles on disk, a pod bound to the node, the
//! tracer, the GPU probe) `check -o json` prints, and `check --report`
//! writes, the conditions the running agent writes — the pods' references
//! included, folded into the one `SeccompProfilesReady` — and the same
//! Events: on the Node for its conditions, on the pod for its reference.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use support::agent::{reporting_config, seccomp_root, Agent};
use support::apiserver::{Identity, TestApiServer};

/// A node with a good and a refused profile on disk and a pod bound to it
/// that references a profile the node lacks, two annotated RuntimeClasses
/// (one whose contract this node meets, one it does not); the test server
/// has the Node and a node identity for it.
fn node_state(dir: &Path) -> (TestApiServer, String) {
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    for (name, profiles) in [
        ("good", "profiles/good.json"),
        ("vllm", "profiles/good.json,profiles/vllm-strict.json"),
    ] {
        server.put(
            "runtimeclasses",
            json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                "metadata": {"name": name, "annotations": {"nodeproof.dev/localhost-profiles": profiles}},
                "handler": "runc"}),
        );
    }
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "vllm-0", "namespace": "ml", "uid": "uid-vllm-0"},
            "spec": {"nodeName": "n1", "containers": [{"name": "vllm", "securityContext": {"seccompProfile":
                {"type": "Localhost", "localhostProfile": "profiles/vllm-strict.json"}}}]}}),
    );
    let root = seccomp_root(dir, true);
    std::fs::write(
        root.join("profiles/refused.json"),
        br#"{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_NOPE"}]}"#,
    )
    .unwrap();
    let kubeconfig = server.kubeconfig(dir, "node-n1");
    (server, reporting_config(&root, &kubeconfig))
}

/// (type, status, reason, message) of every condition, sorted by type.
fn quadruples(conditions: &[Value]) -> Vec<[String; 4]> {
    let mut out: Vec<[String; 4]> = conditions
        .iter()
        .map(|c| {
            ["type", "status", "reason", "message"].map(|k| c[k].as_str().unwrap_or("").to_string())
        })
        .collect();
    out.sort();
    out
}

fn node_conditions(server: &TestApiServer) -> Vec<[String; 4]> {
    let node = server.node("n1");
    quadruples(
        node["status"]["conditions"]
            .as_array()
            .map_or(&[][..], |v| v),
    )
}

#[test]
fn check_prints_and_writes_what_the_agent_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (server, config) = node_state(dir.path());
    let config_path = dir.path().join("check.toml");
    std::fs::write(&config_path, &config).unwrap();
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(["check", "-o", "json", "--report", "--config"])
        .arg(&config_path)
        .env_remove("JOURNAL_STREAM")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // One connection: the pods' list, the Node's read and the report's
    // writes share the session's client (each connected on its own before).
    assert_eq!(
        server.connections_since(started).len(),
        1,
        "TCP connections of one check --report\n{stderr}"
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let printed = quadruples(printed["conditions"].as_array().unwrap());
    let written = node_conditions(&server);
    assert_eq!(printed, written, "check prints what it writes\n{stderr}");
    // The pod's reference is in it: the pod's reason leads, the files' problem is still named.
    let seccomp = printed
        .iter()
        .find(|c| c[0] == "SeccompProfilesReady")
        .expect("SeccompProfilesReady");
    assert_eq!(seccomp[1], "False");
    assert_eq!(seccomp[2], "ProfileMissing", "{seccomp:?}");
    assert!(
        seccomp[3].contains("ml/vllm-0 container vllm") && seccomp[3].contains("refused.json"),
        "{seccomp:?}"
    );
    assert!(printed.iter().any(|c| c[0] == "SeccompTracingReady"));
    // The contracts, as check judges them: what the agent labels the Node with.
    let contracts: Vec<(String, String)> = serde_json::from_slice::<Value>(&out.stdout).unwrap()
        ["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "runtimeclass-contract")
        .map(|f| {
            let state = if f["status"] == "ok" {
                "ready"
            } else {
                "not-ready"
            };
            (
                f["subject"].as_str().unwrap().to_string(),
                state.to_string(),
            )
        })
        .collect();
    assert_eq!(
        contracts,
        [
            ("good".to_string(), "ready".to_string()),
            ("vllm".to_string(), "not-ready".to_string())
        ],
        "{stderr}"
    );
    // check --report writes no contract label: only the watching agent does, with hysteresis.
    assert_eq!(contract_labels(&server), Vec::new());
    // No NVIDIA device here: the GPU conditions are absent, in both.
    assert!(
        !printed.iter().any(|c| c[0].starts_with("GPU")),
        "{printed:?}"
    );
    // The pod's missing profile is a Warning Event on the pod, as the agent writes it.
    let written_events = events(&server);
    let on_pod: Vec<&[String; 6]> = written_events.iter().filter(|e| e[0] == "Pod").collect();
    assert!(
        on_pod.len() == 1
            && on_pod[0][1..5] == ["ml", "vllm-0", "Warning", "SeccompProfileMissing"]
            && on_pod[0][5].starts_with(
                "container vllm: profile localhost/profiles/vllm-strict.json not found"
            ),
        "{written_events:#?}\n{stderr}"
    );

    // The agent on the same node state, reporting to a server of its own.
    let agent_dir = tempfile::tempdir().unwrap();
    let (agent_server, agent_config) = node_state(agent_dir.path());
    let agent_config = agent_config.replace(
        &agent_dir.path().join("seccomp").display().to_string(),
        &dir.path().join("seccomp").display().to_string(),
    );
    let mut agent = Agent::start(agent_dir.path(), &agent_config);
    agent.wait_ready(Duration::from_secs(30));
    let start = Instant::now();
    let mut last = Vec::new();
    while start.elapsed() < Duration::from_secs(15) {
        last = node_conditions(&agent_server);
        if last == printed {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        last,
        printed,
        "the agent's round equals check's\n--- agent log ---\n{}",
        agent.log_text()
    );
    let start = Instant::now();
    while contract_labels(&agent_server) != contracts && start.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        contract_labels(&agent_server),
        contracts,
        "the agent labels what check judged\n--- agent log ---\n{}",
        agent.log_text()
    );
    // The same Events: on the pod, word for word; on the Node, one per
    // condition that is not True. The agent's Node Event says the reason
    // its first round found (the files', before the pods are listed), so
    // the conditions' Events are compared by condition and status; the
    // RuntimeClass contract Events follow the labels only the agent writes.
    let compared = |events: Vec<[String; 6]>| -> Vec<[String; 3]> {
        events
            .into_iter()
            .filter(|e| !e[4].starts_with("RuntimeClass"))
            .map(|e| match e[0].as_str() {
                "Pod" => [e[1].clone(), e[2].clone(), e.join(" | ")],
                _ => {
                    let said = e[5].split(':').next().unwrap_or("").to_string();
                    [e[0].clone(), e[2].clone(), format!("{} {said}", e[3])]
                }
            })
            .collect()
    };
    let want = compared(written_events.clone());
    let start = Instant::now();
    while compared(events(&agent_server)) != want && start.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        compared(events(&agent_server)),
        want,
        "check --report writes the Events the agent writes\n--- agent log ---\n{}",
        agent.log_text()
    );
}

/// Every Event as (kind, namespace, name, type, reason, message) of its
/// object, sorted; the count and times are the writer's own.
fn events(server: &TestApiServer) -> Vec<[String; 6]> {
    let mut out: Vec<[String; 6]> = server
        .events()
        .iter()
        .map(|e| {
            let o = &e["involvedObject"];
            [
                &o["kind"],
                &o["namespace"],
                &o["name"],
                &e["type"],
                &e["reason"],
                &e["message"],
            ]
            .map(|v| v.as_str().unwrap_or("").to_string())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The Node's `runtimeclass.nodeproof.dev/` labels as (class, value).
fn contract_labels(server: &TestApiServer) -> Vec<(String, String)> {
    server.node("n1")["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            let class = k.strip_prefix("runtimeclass.nodeproof.dev/")?;
            Some((class.to_string(), v.as_str()?.to_string()))
        })
        .collect()
}
