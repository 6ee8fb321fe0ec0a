//! `nodeproof cluster check` end to end against the test API server (TLS,
//! token of a cluster reader, paged lists, the aggregation layer's
//! APIServices and the Metrics API in both versions, workloads, HPAs,
//! webhooks and admission policy bindings): a healthy cluster exits 0,
//! each broken one exits 1 with its finding, unreadable credentials exit
//! 2; a baseline saved and compared exits 0 when nothing regressed and 1
//! on each kind of regression, a corrupt or newer baseline exits 2; and
//! every request it (and `cluster policy`) made is allowed by
//! deploy/base/rbac-cluster-check.yaml, every verb of which is used.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use nodeproof_report::conditions::rfc3339;
use support::apiserver::{Fault, Identity, Logged, TestApiServer};
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
    server.merge_node(
        name,
        json!({"metadata": {"labels": {LABEL: "ready"}},
               "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"},
                          "nodeInfo": {"kubeletVersion": "v1.35.2", "containerRuntimeVersion": "containerd://1.7.27",
                                       "kernelVersion": "6.1.0-37-amd64", "osImage": "Debian GNU/Linux 12 (bookworm)",
                                       "architecture": "amd64", "operatingSystem": "linux", "bootID": "b",
                                       "machineID": "m", "systemUUID": "s", "kubeProxyVersion": ""}}}),
    );
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
               "status": {"phase": "Running", "startTime": ago(7200)}}),
    );
    server.set_pod_metrics("ml", "vllm-0", &ago(10));
    // Workloads and admission objects that name only the control-plane role.
    server.put(
        "daemonsets",
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
               "metadata": {"name": "node-exporter", "namespace": "monitoring"},
               "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "e"}],
                   "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}}}}),
    );
    server.put(
        "horizontalpodautoscalers",
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
               "metadata": {"name": "vllm", "namespace": "ml"},
               "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
                        "minReplicas": 1, "maxReplicas": 4},
               "status": {"desiredReplicas": 1, "conditions": [
                   {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale"},
                   {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound"}]}}),
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
    let (first, rest) = text.stdout.split_once('\n').unwrap();
    assert_eq!(first, "nodes: 2 (2 Ready, 2 with nodeproof)");
    let (metrics, rest) = rest.split_once('\n').unwrap();
    assert!(
        metrics.starts_with("metrics API: metrics.k8s.io/v1beta1, p50 ")
            && metrics.ends_with("over 10 requests; fresh for 2/2 Ready nodes, 1/1 Running pods"),
        "{metrics}"
    );
    assert_eq!(
        rest,
        "contract vllm: ready on 2 of 2 nodes (0 not-ready, 0 unlabelled)\nok: no problems found\n"
    );
}

#[test]
fn metrics_v1_is_preferred_where_served_and_said() {
    let server = healthy();
    server.set_metrics_api_version("v1", true, "Passed", "all checks passed");
    let run = check(&server, &["-o", "json", "--metrics-samples", "3"]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["metrics"]["version"], "v1");
    assert_eq!(report["metrics"]["registered"], json!(["v1", "v1beta1"]));
    assert_eq!(report["metrics"]["latency"]["samples"], 3);
    assert_eq!(report["metrics"]["pods_fresh"], 1);
    let paths: Vec<String> = server.log().into_iter().map(|l| l.path).collect();
    assert_eq!(
        paths
            .iter()
            .filter(|p| p.as_str() == "/apis/metrics.k8s.io/v1/nodes")
            .count(),
        3
    );
    assert!(!paths
        .iter()
        .any(|p| p.starts_with("/apis/metrics.k8s.io/v1beta1/")));
    // v1 registered but not Available: read v1beta1, and say what is wrong with v1.
    server.set_metrics_api_version(
        "v1",
        false,
        "MissingEndpoints",
        "endpoints for service/metrics-server in \"kube-system\" have no addresses",
    );
    let run = check(&server, &["-o", "json"]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["metrics"]["version"], "v1beta1");
    assert_eq!(kinds(&findings(&run)), ["metrics_api_not_available"]);
    assert_eq!(findings(&run)[0]["version"], "v1");
}

/// A broken cluster: what it is, what breaks it, the findings it must give.
type Broken = (&'static str, fn(&TestApiServer), Vec<&'static str>);

fn broken_cases() -> Vec<Broken> {
    vec![
        (
            "Metrics API not registered",
            |s| s.remove_metrics_api_service(),
            vec!["metrics_api_not_registered"],
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
            vec![
                "metrics_api_not_available",
                "node_metrics_not_served",
                "pod_metrics_not_served",
            ],
        ),
        (
            "Running pods without PodMetrics",
            |s| s.remove_pod_metrics("ml", "vllm-0"),
            vec!["pod_metrics_incomplete"],
        ),
        (
            "a slow Metrics API",
            |s| s.set_metrics_delay(Duration::from_millis(1200)),
            vec!["metrics_api_slow"],
        ),
        (
            "an HPA blind to its metrics",
            |s| {
                s.put(
                    "horizontalpodautoscalers",
                    json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                           "metadata": {"name": "vllm", "namespace": "ml"},
                           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
                                    "maxReplicas": 4},
                           "status": {"desiredReplicas": 1, "conditions": [
                               {"type": "AbleToScale", "status": "True", "reason": "SucceededGetScale"},
                               {"type": "ScalingActive", "status": "False", "reason": "FailedGetResourceMetric",
                                "message": "the HPA was unable to compute the replica count: unable to get metrics for resource cpu: no metrics returned from resource metrics API"}]}}),
                )
            },
            vec!["hpa_not_scaling"],
        ),
        (
            "a node with the old master role only",
            |s| {
                s.merge_node(
                    "n2",
                    json!({"metadata": {"labels": {"node-role.kubernetes.io/master": ""}}}),
                );
            },
            vec!["master_role_without_control_plane"],
        ),
        (
            "workloads and admission objects naming the master role",
            |s| {
                let master = "node-role.kubernetes.io/master";
                s.put(
                    "pods",
                    json!({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "etcd-backup", "namespace": "kube-system", "uid": "uid-b"},
                           "spec": {"nodeSelector": {master: ""}, "containers": [{"name": "b"}]},
                           "status": {"phase": "Succeeded"}}),
                );
                s.put(
                    "deployments",
                    json!({"apiVersion": "apps/v1", "kind": "Deployment",
                           "metadata": {"name": "ingress", "namespace": "ops"},
                           "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "i"}],
                               "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                   {"nodeSelectorTerms": [{"matchExpressions": [{"key": master, "operator": "Exists"}]}]}}}}}}}),
                );
                s.put(
                    "statefulsets",
                    json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                           "metadata": {"name": "vault", "namespace": "ops"},
                           "spec": {"serviceName": "vault", "selector": {}, "template": {"spec": {"containers": [{"name": "v"}],
                               "tolerations": [{"key": master, "effect": "NoSchedule"}]}}}}),
                );
                s.put(
                    "jobs",
                    json!({"apiVersion": "batch/v1", "kind": "Job",
                           "metadata": {"name": "migrate", "namespace": "ops"},
                           "spec": {"template": {"spec": {"containers": [{"name": "m"}],
                               "nodeSelector": {master: "true"}}}}}),
                );
                s.put(
                    "cronjobs",
                    json!({"apiVersion": "batch/v1", "kind": "CronJob",
                           "metadata": {"name": "certs", "namespace": "ops"},
                           "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": {"spec":
                               {"containers": [{"name": "c"}], "tolerations": [{"key": master, "operator": "Exists"}]}}}}}}),
                );
                s.put(
                    "validatingwebhookconfigurations",
                    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                           "metadata": {"name": "policy"},
                           "webhooks": [{"name": "policy.example.com", "clientConfig": {}, "sideEffects": "None",
                               "admissionReviewVersions": ["v1"],
                               "objectSelector": {"matchExpressions": [{"key": master, "operator": "DoesNotExist"}]}}]}),
                );
                s.put(
                    "mutatingwebhookconfigurations",
                    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                           "metadata": {"name": "inject"},
                           "webhooks": [{"name": "inject.example.com", "clientConfig": {}, "sideEffects": "None",
                               "admissionReviewVersions": ["v1"],
                               "namespaceSelector": {"matchLabels": {master: ""}}}]}),
                );
                s.put(
                    "validatingadmissionpolicybindings",
                    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
                           "metadata": {"name": "no-root"},
                           "spec": {"policyName": "no-root", "validationActions": ["Deny"],
                               "matchResources": {"objectSelector": {"matchLabels": {master: ""}}}}}),
                );
                s.put(
                    "mutatingadmissionpolicybindings",
                    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
                           "metadata": {"name": "add-gate"},
                           "spec": {"policyName": "add-gate",
                               "matchResources": {"namespaceSelector": {"matchExpressions": [{"key": master, "operator": "Exists"}]}}}}),
                );
            },
            vec!["master_role_reference"; 9],
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
        (
            "a profile change that broke pods",
            |s| {
                // As the agents on n1 and n2 write them: the version each
                // container started with, the one before, its verdict.
                for (pod, node, syscall, verdict) in [
                    ("web-0", "n1", "mkdir", "allowed"),
                    ("web-1", "n2", "mkdir", "allowed"),
                    ("web-1", "n2", "mount", "denied"),
                ] {
                    s.add_event(json!({"apiVersion": "v1", "kind": "Event",
                        "metadata": {"name": format!("{pod}.{syscall}"), "namespace": "ml",
                            "annotations": {
                                "seccomp.nodeproof.dev/profile": "profiles/app.json",
                                "seccomp.nodeproof.dev/syscall": syscall,
                                "seccomp.nodeproof.dev/version": "1f2e3d4c5b6a79880011223344556677",
                                "seccomp.nodeproof.dev/version-since": "2026-12-06T14:22:05Z",
                                "seccomp.nodeproof.dev/previous-version": "9a8b7c6d5e4f30112233445566778899",
                                "seccomp.nodeproof.dev/previous-verdict": verdict}},
                        "involvedObject": {"kind": "Pod", "namespace": "ml", "name": pod},
                        "reason": "SeccompDenied", "type": "Warning",
                        "message": format!("denied {syscall} ×4 (EPERM) in container app, profile profiles/app.json"),
                        "source": {"component": "nodeproof", "host": node},
                        "reportingComponent": "nodeproof", "reportingInstance": node,
                        "lastTimestamp": ago(30), "count": 1}));
                }
                // A denial with no change behind it is not one.
                s.add_event(json!({"apiVersion": "v1", "kind": "Event",
                    "metadata": {"name": "web-2.mount", "namespace": "ml"},
                    "involvedObject": {"kind": "Pod", "namespace": "ml", "name": "web-2"},
                    "reason": "SeccompDenied", "type": "Warning",
                    "message": "denied mount ×1 (EPERM) in container app, profile profiles/app.json",
                    "reportingComponent": "nodeproof", "reportingInstance": "n1",
                    "lastTimestamp": ago(30), "count": 1}));
            },
            vec!["profile_change_broke"],
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
fn role_references_name_the_object_and_the_field() {
    let server = healthy();
    let (_, broken, _) = broken_cases()
        .into_iter()
        .find(|(w, _, _)| w.starts_with("workloads and admission objects"))
        .unwrap();
    broken(&server);
    let run = check(&server, &["-o", "json"]);
    let refs: Vec<String> = findings(&run)
        .iter()
        .map(|f| {
            let o = &f["object"];
            let ns = o["namespace"]
                .as_str()
                .map(|n| format!("{n}/"))
                .unwrap_or_default();
            format!(
                "{} {ns}{} {}",
                o["kind"].as_str().unwrap(),
                o["name"].as_str().unwrap(),
                f["field"].as_str().unwrap()
            )
        })
        .collect();
    let m = "node-role.kubernetes.io/master";
    assert_eq!(
        refs,
        [
            format!("Pod kube-system/etcd-backup spec.nodeSelector[\"{m}\"]"),
            "Deployment ops/ingress spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key".into(),
            "StatefulSet ops/vault spec.template.spec.tolerations[0].key".into(),
            format!("Job ops/migrate spec.template.spec.nodeSelector[\"{m}\"]"),
            "CronJob ops/certs spec.jobTemplate.spec.template.spec.tolerations[0].key".into(),
            "ValidatingWebhookConfiguration policy webhooks[0].objectSelector.matchExpressions[0].key".into(),
            format!("MutatingWebhookConfiguration inject webhooks[0].namespaceSelector.matchLabels[\"{m}\"]"),
            format!("ValidatingAdmissionPolicyBinding no-root spec.matchResources.objectSelector.matchLabels[\"{m}\"]"),
            "MutatingAdmissionPolicyBinding add-gate spec.matchResources.namespaceSelector.matchExpressions[0].key".into(),
        ]
    );
    let text = check(&server, &[]);
    assert!(
        text.stdout.contains("  StatefulSet ops/vault: spec.template.spec.tolerations[0].key (toleration) still names the master role; use node-role.kubernetes.io/control-plane\n"),
        "{}",
        text.stdout
    );
}

/// What breaks between a baseline and the check after it, and the change it
/// must report as regressed.
type Regression = (&'static str, fn(&TestApiServer), &'static str);

fn regressions() -> Vec<Regression> {
    vec![
        (
            "node not Ready",
            |s| {
                s.merge_node(
                    "n2",
                    json!({"status": {"conditions": [
                {"type": "Ready", "status": "False", "reason": "KubeletNotReady"},
                {"type": "SeccompProfilesReady", "status": "True", "reason": "ProfilesOK",
                 "message": "2 profiles ok", "lastHeartbeatTime": ago(30)}]}}),
                );
            },
            "node_ready",
        ),
        (
            "cordoned",
            |s| {
                s.merge_node("n1", json!({"spec": {"unschedulable": true}}));
            },
            "node_schedulable",
        ),
        (
            "fewer GPUs",
            |s| {
                s.merge_node(
                    "n1",
                    json!({"status": {"allocatable": {"nvidia.com/gpu": "7"}}}),
                );
            },
            "allocatable",
        ),
        (
            "a pod that cannot start",
            |s| {
                s.put("pods", json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "vllm-9", "namespace": "ml", "uid": "uid-vllm-9"},
            "spec": {"nodeName": "n1", "containers": [{"name": "vllm"}]},
            "status": {"phase": "Pending", "containerStatuses": [{"name": "vllm", "image": "vllm", "imageID": "",
                "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "CreateContainerError", "message": "cannot load seccomp profile"}}}]}}))
            },
            "pods_not_running",
        ),
        (
            "restarts",
            |s| {
                s.put("pods", json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "vllm-0", "namespace": "ml", "uid": "uid-vllm-0", "creationTimestamp": ago(7200)},
            "spec": {"nodeName": "n1", "runtimeClassName": "vllm", "containers": [{"name": "vllm"}]},
            "status": {"phase": "Running", "startTime": ago(7200), "containerStatuses": [{"name": "vllm", "image": "vllm",
                "imageID": "", "ready": true, "restartCount": 3, "state": {"running": {}}}]}}))
            },
            "restarts",
        ),
        (
            "Warning events",
            |s| {
                s.add_event(json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "vllm-0.failed", "namespace": "ml"},
            "involvedObject": {"kind": "Pod", "namespace": "ml", "name": "vllm-0"},
            "reason": "FailedMount", "type": "Warning", "message": "MountVolume.SetUp failed",
            "lastTimestamp": ago(60), "count": 4}))
            },
            "warning_events",
        ),
        (
            "contract on fewer nodes",
            |s| {
                s.merge_node("n2", json!({"metadata": {"labels": {LABEL: "not-ready"}}}));
            },
            "contract_ready",
        ),
        (
            "HPA blind",
            |s| {
                s.put("horizontalpodautoscalers", json!({"apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler", "metadata": {"name": "vllm", "namespace": "ml"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "vllm"}, "maxReplicas": 4},
            "status": {"desiredReplicas": 1, "conditions": [
                {"type": "ScalingActive", "status": "False", "reason": "FailedGetResourceMetric", "message": "no metrics"}]}}))
            },
            "hpa",
        ),
        (
            "pods without metrics",
            |s| s.remove_pod_metrics("ml", "vllm-0"),
            "metrics_missing",
        ),
        (
            "Metrics API gone",
            |s| s.remove_metrics_api_service(),
            "metrics_version",
        ),
    ]
}

#[test]
fn a_baseline_compares_clean_and_each_regression_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("before.json");
    let file = file.to_str().unwrap();
    let server = healthy();
    let save = check(&server, &["--save-baseline", file]);
    assert_eq!(save.code, Some(0), "{}\n{}", save.stdout, save.stderr);
    assert!(save.stderr.contains("baseline saved to"), "{}", save.stderr);
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    assert_eq!(saved["format"], 1);
    assert_eq!(saved["metrics"]["version"], "v1beta1");
    // Nothing changed: exit 0, nothing regressed.
    let same = check(&server, &["--baseline", file]);
    assert_eq!(same.code, Some(0), "{}\n{}", same.stdout, same.stderr);
    assert!(
        same.stdout
            .contains(": 0 regressed, 0 improved, 0 changed\n"),
        "{}",
        same.stdout
    );
    for (what, breaks, change) in regressions() {
        let server = healthy();
        breaks(&server);
        let run = check(&server, &["--baseline", file, "-o", "json"]);
        assert_eq!(run.code, Some(1), "{what}: {}\n{}", run.stdout, run.stderr);
        let report: Value = serde_json::from_str(&run.stdout).unwrap();
        let regressed: Vec<&str> = report["baseline"]["regressed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["change"].as_str().unwrap())
            .collect();
        assert!(
            regressed.contains(&change),
            "{what}: {regressed:?}\n{}",
            run.stdout
        );
    }
    // An upgrade: the kubelet's version changed, nothing regressed.
    let server = healthy();
    server.merge_node(
        "n1",
        json!({"status": {"nodeInfo": {"kubeletVersion": "v1.36.1"}}}),
    );
    let run = check(&server, &["--baseline", file]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("  changed: node n1: kubelet"),
        "{}",
        run.stdout
    );
}

#[test]
fn a_corrupt_or_newer_baseline_exits_2_before_reading_the_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let server = healthy();
    let file = dir.path().join("b.json");
    std::fs::write(&file, "{\"format\": 1, \"nodes\": {").unwrap();
    server.clear_log();
    let run = check(&server, &["--baseline", file.to_str().unwrap()]);
    assert_eq!(run.code, Some(2), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("is not a nodeproof baseline"),
        "{}",
        run.stderr
    );
    assert!(server.log().is_empty(), "the cluster was read");
    std::fs::write(&file, "{\"format\": 7}").unwrap();
    let run = check(
        &server,
        &["--baseline", file.to_str().unwrap(), "-o", "json"],
    );
    assert_eq!(run.code, Some(2));
    let doc: Value = serde_json::from_str(&run.stdout).unwrap();
    assert!(
        doc.to_string()
            .contains("format 7, newer than this nodeproof reads"),
        "{doc}"
    );
    let run = check(
        &server,
        &[
            "--baseline",
            dir.path().join("missing.json").to_str().unwrap(),
        ],
    );
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains("cannot read baseline"),
        "{}",
        run.stderr
    );
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
    // A baseline reads the Warning Events too.
    let server = healthy();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("b.json");
    let run = check(&server, &["--save-baseline", file.to_str().unwrap()]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    log.extend(server.log());
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
/// those it has, as kubectl names them.
#[test]
fn context_picks_the_kubeconfigs_context_like_kubectl() {
    let server = healthy();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.kubeconfig_two_contexts(dir.path(), TOKEN);
    // Not waited for (`--api-wait`): the cluster's heartbeats would age meanwhile.
    let current = check_with(&kubeconfig, &["--api-wait", "0s"]);
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
    let mut from_json: Value = serde_json::from_str(&json.stdout).unwrap();
    let mut from_yaml: Value = serde_saphyr::from_str(&yaml.stdout)
        .unwrap_or_else(|e| panic!("YAML ({e}): {}", yaml.stdout));
    // The measured latency differs from run to run; its shape does not.
    for doc in [&mut from_json, &mut from_yaml] {
        for p in ["p50_ms", "p99_ms"] {
            assert!(doc["metrics"]["latency"][p].is_u64(), "{doc}");
            doc["metrics"]["latency"][p] = json!(0);
        }
    }
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

/// A CronJob's pod may start before its network reaches the Service, or
/// during a control-plane restart: the check reads again with backoff while
/// the API server does not answer, one line each time, and checks once it
/// answers; past `--api-wait` it gives up with exit 2 naming the wait.
#[test]
fn an_api_server_away_at_start_is_waited_out_then_checked() {
    let server = healthy();
    server.set_fault(Fault::Down);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), TOKEN);
    let waiting = {
        let kubeconfig = kubeconfig.clone();
        std::thread::spawn(move || check_with(&kubeconfig, &["--api-wait", "30s", "-o", "json"]))
    };
    std::thread::sleep(Duration::from_secs(3));
    server.clear_fault();
    let run = waiting.join().unwrap();
    assert!(
        matches!(run.code, Some(0 | 1)),
        "checked: {:?} {}",
        run.code,
        run.stderr
    );
    assert!(run.stderr.contains("; retrying in "), "{}", run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).expect("the JSON report");
    assert!(report["metrics"]["registered"].is_array(), "{}", run.stdout);

    server.set_fault(Fault::Down);
    let run = check_with(&kubeconfig, &["--api-wait", "2s"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("could not check: the API server did not answer for 2 s (--api-wait)"),
        "{}",
        run.stderr
    );
}

/// The profile change the agents' Events name, across nodes: listed by
/// profile and change with each pod's calls, and a finding for the calls
/// the previous version allowed.
#[test]
fn pods_denied_after_a_profile_change_are_listed_by_change() {
    let server = healthy();
    for (_, broken, _) in broken_cases()
        .into_iter()
        .filter(|(w, _, _)| *w == "a profile change that broke pods")
    {
        broken(&server);
    }
    let run = check(&server, &[]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stdout.contains(
            "profile profiles/app.json changed at 2026-12-06T14:22:05Z (sha256 9a8b7c6d5e4f… → 1f2e3d4c5b6a…): denials in 2 pods on 2 nodes since\n  \
             ml/web-0 on n1: mkdir (previous version: allowed)\n  \
             ml/web-1 on n2: mkdir (previous version: allowed), mount (previous version: denied)\n"
        ),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("  profile profiles/app.json: the change at 2026-12-06T14:22:05Z (sha256 9a8b7c6d5e4f… → 1f2e3d4c5b6a…) denies mkdir that the previous version allowed, in 2 pods on 2 nodes; restore the previous version or allow them\n"),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("web-2"), "{}", run.stdout);
    let run = check(&server, &["-o", "json"]);
    let v: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        v["profile_changes"][0]["pods"][1]["syscalls"][1],
        json!(["mount", "denied"])
    );
    assert_eq!(findings(&run)[0]["pods"], json!(["ml/web-0", "ml/web-1"]));
}
