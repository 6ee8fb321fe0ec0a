//! `nodeproof cluster check` end to end against the test API server (TLS,
//! token of a cluster reader, paged lists, the aggregation layer's
//! APIService and NodeMetrics): a healthy cluster exits 0, each broken one
//! exits 1 with its finding, unreadable credentials exit 2; and every
//! request it (and `cluster policy`) made is allowed by deploy/base/rbac-cluster-check.yaml, every verb
//! of which is used.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use nodeproof_kube::conditions::rfc3339;
use support::apiserver::{Identity, Logged, TestApiServer};
use support::rbac::{bound_rules, coverage, request_info, RequestInfo};

const MANIFEST: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/base/rbac-cluster-check.yaml"
);
const TOKEN: &str = "reader";
const LABEL: &str = "runtimeclass.nodeproof.dev/vllm";

fn ago(secs: u64) -> String {
    rfc3339(SystemTime::now() - Duration::from_secs(secs))
}

/// A Ready node running nodeproof (a fresh SeccompProfilesReady) where the
/// vllm contract is ready.
fn add_healthy_node(server: &TestApiServer, name: &str) {
    server.add_node(
        name,
        json!([
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            {"type": "SeccompProfilesReady", "status": "True", "reason": "ProfilesOK",
             "message": "2 profiles ok", "lastHeartbeatTime": ago(30), "lastTransitionTime": ago(3600)},
        ]),
    );
    server.merge_node(name, json!({"metadata": {"labels": {LABEL: "ready"}}}));
    server.set_node_metrics(name, &ago(10));
}

/// Two healthy nodes, the Metrics API Available and serving, the vllm
/// class's contract ready on both, a vllm pod on n1, a pod gated a minute.
fn healthy() -> TestApiServer {
    let server = TestApiServer::start();
    server.add_token(TOKEN, Identity::ClusterReader);
    server.set_metrics_api_service(true, "Passed", "all checks passed");
    add_healthy_node(&server, "n1");
    add_healthy_node(&server, "n2");
    server.put(
        "runtimeclasses",
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
               "metadata": {"name": "vllm", "annotations": {
                   "nodeproof.dev/localhost-profiles": "profiles/vllm-strict.json,profiles/vllm-init.json"}},
               "handler": "runc",
               "scheduling": {"nodeSelector": {LABEL: "ready"}}}),
    );
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "vllm-0", "namespace": "ml", "uid": "uid-vllm-0",
                            "creationTimestamp": ago(7200)},
               "spec": {"nodeName": "n1", "runtimeClassName": "vllm", "containers": [{"name": "vllm"}]},
               "status": {"phase": "Running"}}),
    );
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "vllm-1", "namespace": "ml", "uid": "uid-vllm-1",
                            "creationTimestamp": ago(60)},
               "spec": {"runtimeClassName": "vllm", "containers": [{"name": "vllm"}],
                        "schedulingGates": [{"name": "nodeproof.dev/gpu-driver-ready"}]},
               "status": {"phase": "Pending"}}),
    );
    server
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn check(server: &TestApiServer, args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), TOKEN);
    check_with(&kubeconfig, args)
}

fn check_with(kubeconfig: &Path, args: &[&str]) -> Run {
    check_global(&[], kubeconfig, args)
}

/// `nodeproof GLOBAL... cluster check --kubeconfig K ARGS...`.
fn check_global(global: &[&std::ffi::OsStr], kubeconfig: &Path, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(global)
        .args(["cluster", "check", "--kubeconfig"])
        .arg(kubeconfig)
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The JSON report's findings.
fn findings(run: &Run) -> Vec<Value> {
    let report: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("JSON report ({e}): {}\n{}", run.stdout, run.stderr));
    report["findings"].as_array().unwrap().clone()
}

fn kinds(found: &[Value]) -> Vec<&str> {
    found
        .iter()
        .map(|f| f["finding"].as_str().unwrap())
        .collect()
}

#[test]
fn a_healthy_cluster_passes_in_text_and_json() {
    let server = healthy();
    let run = check(&server, &["-o", "json"]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["findings"], json!([]));
    assert_eq!(report["nodeproof_nodes"], 2);
    assert_eq!(report["contracts"][0]["ready"], 2);

    let text = check(&server, &[]);
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    assert_eq!(
        text.stdout,
        "nodes: 2 (2 Ready, 2 with nodeproof)\ncontract vllm: ready on 2 of 2 nodes (0 not-ready, 0 unlabelled)\nok: no problems found\n"
    );
}

/// A broken cluster: what it is, what breaks it, the findings it must give.
type Broken = (&'static str, fn(&TestApiServer), Vec<&'static str>);

fn broken_cases() -> Vec<Broken> {
    vec![
        (
            "Metrics API not registered",
            |s| s.remove_metrics_api_service(),
            vec!["metrics_api_not_registered", "node_metrics_not_served"],
        ),
        (
            "Metrics API registered but not Available",
            |s| {
                s.set_metrics_api_service(
                    false,
                    "FailedDiscoveryCheck",
                    "failing or missing response from https://10.96.12.7:443/apis/metrics.k8s.io/v1beta1",
                )
            },
            vec!["metrics_api_not_available", "node_metrics_not_served"],
        ),
        (
            "Available but no NodeMetrics",
            |s| {
                s.remove_node_metrics("n1");
                s.remove_node_metrics("n2");
            },
            vec!["node_metrics_missing", "node_metrics_missing"],
        ),
        (
            "stale NodeMetrics",
            |s| s.set_node_metrics("n2", &ago(600)),
            vec!["node_metrics_stale"],
        ),
        (
            "a node without nodeproof",
            |s| s.remove_condition("n2", "SeccompProfilesReady"),
            vec!["nodeproof_missing"],
        ),
        (
            "a stale heartbeat",
            |s| {
                s.merge_node(
                    "n1",
                    json!({"status": {"conditions": [
                        {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                        {"type": "SeccompProfilesReady", "status": "True", "reason": "ProfilesOK",
                         "message": "2 profiles ok", "lastHeartbeatTime": ago(3600)}]}}),
                );
            },
            vec!["heartbeat_stale"],
        ),
        (
            "a False condition",
            |s| {
                s.merge_node(
                    "n2",
                    json!({"status": {"conditions": [
                        {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                        {"type": "SeccompProfilesReady", "status": "False", "reason": "ProfileMissing",
                         "message": "profiles/vllm-strict.json: no such file", "lastHeartbeatTime": ago(30)}]}}),
                );
            },
            vec!["condition_not_true"],
        ),
        (
            "a contract ready nowhere",
            |s| {
                for n in ["n1", "n2"] {
                    s.merge_node(n, json!({"metadata": {"labels": {LABEL: "not-ready"}}}));
                }
            },
            vec!["contract_ready_nowhere", "pod_on_not_ready_node"],
        ),
        (
            "a pod bound to a node where its class is not ready",
            |s| {
                s.merge_node("n1", json!({"metadata": {"labels": {LABEL: "not-ready"}}}));
            },
            vec!["pod_on_not_ready_node"],
        ),
        (
            "a long-gated pod",
            |s| {
                s.put(
                    "pods",
                    json!({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "vllm-2", "namespace": "ml", "uid": "uid-vllm-2",
                                        "creationTimestamp": ago(1800)},
                           "spec": {"runtimeClassName": "vllm", "containers": [{"name": "vllm"}],
                                    "schedulingGates": [{"name": "nodeproof.dev/gpu-driver-ready"},
                                                        {"name": "example.com/quota"}]},
                           "status": {"phase": "Pending"}}),
                );
                s.add_event(json!({"apiVersion": "v1", "kind": "Event",
                    "metadata": {"name": "vllm-2.gate", "namespace": "ml"},
                    "involvedObject": {"kind": "Pod", "namespace": "ml", "name": "vllm-2", "uid": "uid-vllm-2"},
                    "reason": "WaitingForNodes", "type": "Normal",
                    "message": "waiting for nodeproof.dev/gpu-driver-ready: 0 of 2 matching nodes ready (2 GPUDriverReady=False NVMLInitFailed)",
                    "lastTimestamp": ago(20), "count": 12}));
            },
            vec!["pod_gated"],
        ),
    ]
}

#[test]
fn each_broken_cluster_exits_1_with_its_finding() {
    for (what, broken, want) in broken_cases() {
        let server = healthy();
        broken(&server);
        let run = check(&server, &["-o", "json"]);
        assert_eq!(run.code, Some(1), "{what}: {}\n{}", run.stdout, run.stderr);
        let found = findings(&run);
        assert_eq!(kinds(&found), want, "{what}: {found:#?}");
    }
}

#[test]
fn findings_carry_what_explains_them() {
    let server = healthy();
    for (_, broken, _) in broken_cases()
        .into_iter()
        .filter(|(w, _, _)| *w == "a long-gated pod" || *w == "a False condition")
    {
        broken(&server);
    }
    let run = check(&server, &[]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stdout.contains("  node n2: SeccompProfilesReady=False ProfileMissing: profiles/vllm-strict.json: no such file\n"),
        "{}",
        run.stdout
    );
    let gated = run
        .stdout
        .lines()
        .find(|l| l.contains("pod ml/vllm-2"))
        .unwrap_or_else(|| panic!("{}", run.stdout));
    assert!(
        gated.contains("by nodeproof.dev/gpu-driver-ready, example.com/quota (WaitingForNodes: waiting for nodeproof.dev/gpu-driver-ready: 0 of 2 matching nodes ready"),
        "{gated}"
    );
    // The pod gated a minute is not reported at the default 10m, but is at 30s.
    assert!(!run.stdout.contains("ml/vllm-1"), "{}", run.stdout);
    let run = check(&server, &["--gated-longer-than", "30s"]);
    assert!(
        run.stdout.contains("pod ml/vllm-1: gated for"),
        "{}",
        run.stdout
    );
}

#[test]
fn pods_are_read_in_pages_of_one_snapshot() {
    let server = healthy();
    for i in 0..1100 {
        server.put(
            "pods",
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": format!("web-{i:04}"), "namespace": "web", "uid": format!("uid-web-{i}"),
                                "creationTimestamp": ago(3600)},
                   "spec": {"nodeName": if i % 2 == 0 { "n1" } else { "n2" }, "containers": [{"name": "web"}]},
                   "status": {"phase": "Running"}}),
        );
    }
    // The last in key order is the one that matters.
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "zz-gated", "namespace": "zz", "uid": "uid-zz",
                            "creationTimestamp": ago(3600)},
               "spec": {"containers": [{"name": "x"}], "schedulingGates": [{"name": "nodeproof.dev/seccomp-ready"}]}}),
    );
    server.clear_log();
    let run = check(&server, &["-o", "json"]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let found = findings(&run);
    assert_eq!(kinds(&found), ["pod_gated"], "{found:#?}");
    assert_eq!(found[0]["pod"], "zz-gated");
    let pages: Vec<Logged> = server
        .log()
        .into_iter()
        .filter(|l| l.path == "/api/v1/pods")
        .collect();
    assert_eq!(pages.len(), 3, "1103 pods in pages of 500");
    assert!(pages.iter().all(|l| l.query.contains("limit=500")));
    assert!(pages[1..].iter().all(|l| l.query.contains("continue=")));
}

#[test]
fn unusable_credentials_exit_2() {
    let server = healthy();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), "nobody");
    let run = check_with(&kubeconfig, &[]);
    assert_eq!(run.code, Some(2), "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("could not check"), "{}", run.stderr);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
}

#[test]
fn the_cluster_check_role_allows_exactly_what_the_check_does() {
    let manifest = std::fs::read_to_string(MANIFEST).unwrap();
    let (_, rules) = bound_rules(&manifest);
    let mut log: Vec<Logged> = Vec::new();
    for (_, broken, _) in broken_cases() {
        let server = healthy();
        broken(&server);
        server.clear_log();
        let run = check(&server, &["-o", "json"]);
        assert_eq!(run.code, Some(1), "{}", run.stderr);
        log.extend(server.log());
    }
    // `cluster policy` reads with the same role.
    let server = healthy();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), TOKEN);
    let out = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(["cluster", "policy", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    log.extend(server.log());
    let requests: BTreeSet<RequestInfo> = log
        .iter()
        .map(|l| request_info(&l.method, &l.path, &l.query))
        .collect();
    let (uncovered, unused) = coverage(&rules, &requests);
    assert!(
        uncovered.is_empty(),
        "not allowed by the manifest: {uncovered:#?}"
    );
    assert!(unused.is_empty(), "never used: {unused:#?}");
    assert!(
        log.iter().all(|l| l.method == "GET"),
        "the check only reads"
    );
}

/// n1 and n2 report a ready GPU (GPUDriverReady and GPUHealthy True, fresh,
/// and the gate controller's readiness label), and `vllm-gpu` runs on n1 as
/// the controller leaves a pod it released: the readiness nodeSelector key
/// and the `gate.nodeproof.dev/gpu-driver-ready` pod condition.
fn with_released_gpu_pod(server: &TestApiServer, heartbeat_age: u64) {
    let gpu = |kind: &str| {
        json!({"type": kind, "status": "True", "reason": "Healthy", "message": "ok",
               "lastHeartbeatTime": ago(heartbeat_age), "lastTransitionTime": ago(3600)})
    };
    for n in ["n1", "n2"] {
        let mut conditions = server.node(n)["status"]["conditions"].clone();
        let list = conditions.as_array_mut().unwrap();
        list.push(gpu("GPUDriverReady"));
        list.push(gpu("GPUHealthy"));
        server.merge_node(
            n,
            json!({"metadata": {"labels": {"gate.nodeproof.dev/gpu-driver-ready": "ready"}},
                   "status": {"conditions": conditions}}),
        );
    }
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "vllm-gpu", "namespace": "ml", "uid": "uid-vllm-gpu",
                            "creationTimestamp": ago(600)},
               "spec": {"nodeName": "n1", "containers": [{"name": "vllm"}],
                        "nodeSelector": {"gate.nodeproof.dev/gpu-driver-ready": "ready"}},
               "status": {"phase": "Running", "conditions": [
                   {"type": "PodScheduled", "status": "True"},
                   {"type": "gate.nodeproof.dev/gpu-driver-ready", "status": "True", "reason": "NodesReady",
                    "message": "nodeproof.dev/gpu-driver-ready removed: GPUDriverReady and GPUHealthy True on 2 of 2 nodes that fit the pod"}]}}),
    );
}

#[test]
fn a_released_pod_on_a_node_that_broke_after_binding_is_reported() {
    let server = healthy();
    with_released_gpu_pod(&server, 30);
    let run = check(&server, &[]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains(
            "gate nodeproof.dev/gpu-driver-ready: 1 released pod running, 1 on a ready node\n"
        ),
        "{}",
        run.stdout
    );

    // The driver breaks on n1 after the pod was bound there.
    let mut conditions = server.node("n1")["status"]["conditions"].clone();
    for c in conditions.as_array_mut().unwrap() {
        if c["type"] == "GPUDriverReady" {
            c["status"] = json!("False");
            c["reason"] = json!("NVMLInitFailed");
        }
    }
    server.merge_node("n1", json!({"status": {"conditions": conditions}}));
    let run = check(&server, &["-o", "json"]);
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    let found = findings(&run);
    assert_eq!(
        kinds(&found),
        ["condition_not_true", "released_pod_on_not_ready_node"],
        "{found:#?}"
    );
    assert_eq!(
        found[1],
        json!({"finding": "released_pod_on_not_ready_node", "namespace": "ml", "pod": "vllm-gpu",
               "node": "n1", "gate": "nodeproof.dev/gpu-driver-ready",
               "cause": {"kind": "not_true", "condition": "GPUDriverReady", "status": "False",
                         "reason": "NVMLInitFailed"}})
    );
    let text = check(&server, &[]);
    assert!(
        text.stdout.contains(
            "pod ml/vllm-gpu (released by nodeproof.dev/gpu-driver-ready) runs on node n1, whose GPUDriverReady is False (NVMLInitFailed)"
        ),
        "{}",
        text.stdout
    );
}

#[test]
fn released_pods_are_judged_by_the_configured_gates() {
    // Heartbeats 400 s old: fresh for the default gate staleness (three
    // heartbeats of 300 s), stale with `heartbeat-s = 60`.
    let server = healthy();
    with_released_gpu_pod(&server, 400);
    let run = check(&server, &["-o", "json"]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[gate]\nheartbeat-s = 60\n").unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), TOKEN);
    let run = check_global(
        &["--config".as_ref(), config.as_os_str()],
        &kubeconfig,
        &["-o", "json"],
    );
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    let found = findings(&run);
    assert_eq!(
        kinds(&found),
        ["released_pod_on_not_ready_node"],
        "{found:#?}"
    );
    assert_eq!(found[0]["cause"]["kind"], "stale", "{found:#?}");
    assert_eq!(found[0]["cause"]["condition"], "GPUDriverReady");
}

/// `--context` picks a context of the kubeconfig as `kubectl --context`
/// does: here the current-context points at a server that does not answer,
/// the named one at the cluster. A context the file lacks is named with
/// those it has (issue 28).
#[test]
fn context_picks_the_kubeconfigs_context_like_kubectl() {
    let server = healthy();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.kubeconfig_two_contexts(dir.path(), TOKEN);
    let current = check_with(&kubeconfig, &[]);
    assert_eq!(current.code, Some(2), "{}", current.stderr);
    let picked = check_with(&kubeconfig, &["--context", "test", "-o", "json"]);
    assert_eq!(picked.code, Some(0), "{}\n{}", picked.stdout, picked.stderr);
    let missing = check_with(&kubeconfig, &["--context", "prod"]);
    assert_eq!(missing.code, Some(2), "{}", missing.stderr);
    assert!(
        missing.stderr.contains(&format!(
            "no context \"prod\" in kubeconfig {} (it has gone, test): `kubectl config get-contexts` lists them",
            kubeconfig.display()
        )),
        "{}",
        missing.stderr
    );
}

/// `-o yaml` is the JSON report as YAML, and so is the error object of a
/// check that could not run.
#[test]
fn yaml_output_is_the_json_document() {
    let server = healthy();
    let json = check(&server, &["-o", "json"]);
    let yaml = check(&server, &["-o", "yaml"]);
    assert_eq!(yaml.code, json.code);
    let from_json: Value = serde_json::from_str(&json.stdout).unwrap();
    let from_yaml: Value = serde_saphyr::from_str(&yaml.stdout)
        .unwrap_or_else(|e| panic!("YAML ({e}): {}", yaml.stdout));
    assert_eq!(from_yaml, from_json);
    let dir = tempfile::tempdir().unwrap();
    let nobody = server.kubeconfig(dir.path(), "nobody");
    let failed = check_with(&nobody, &["-o", "yaml"]);
    assert_eq!(failed.code, Some(2));
    let error: Value = serde_saphyr::from_str(&failed.stdout).unwrap();
    assert_eq!(error["error"]["exit_code"], 2);
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("could not check"));
}
