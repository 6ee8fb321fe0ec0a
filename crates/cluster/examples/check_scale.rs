//! `cargo run --release -p nodeproof-cluster --example check_scale [NODES PODS]`:
//! how long `check::evaluate` takes on a synthetic cluster (default 5,000
//! nodes and 20,000 pods, a quarter of them gated, three contracts). Prints
//! the median and the slowest of 9 runs, and the same for recording a
//! baseline and comparing two; the reading (paged lists) is the API
//! server's time and is not measured here.

use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use nodeproof_cluster::check::baseline::{compare, Baseline};
use nodeproof_cluster::check::metrics_api::{
    choose, MetricsApiRead, MetricsList, MetricsSample, MetricsVersion,
};
use nodeproof_cluster::check::{self, Snapshot};
use nodeproof_report::conditions::rfc3339;
use serde_json::json;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (nodes, pods) = (
        args.first().copied().unwrap_or(5000),
        args.get(1).copied().unwrap_or(20000),
    );
    let now = SystemTime::now();
    let beat = rfc3339(now - Duration::from_secs(60));
    let classes = ["vllm", "triton", "batch"];
    let node_list: Vec<Node> = (0..nodes)
        .map(|i| {
            let labels: serde_json::Map<String, serde_json::Value> = classes
                .iter()
                .map(|c| {
                    let v = if i % 10 == 0 { "not-ready" } else { "ready" };
                    (format!("runtimeclass.nodeproof.dev/{c}"), json!(v))
                })
                .collect();
            serde_json::from_value(json!({"metadata": {"name": format!("node-{i}"), "labels": labels},
                "status": {"conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "SeccompProfilesReady", "status": if i % 50 == 0 { "False" } else { "True" },
                     "reason": "ProfilesOK", "lastHeartbeatTime": beat},
                    {"type": "GPUDriverReady", "status": "True", "reason": "DriverOK", "lastHeartbeatTime": beat}]}}))
            .unwrap()
        })
        .collect();
    let class_list: Vec<RuntimeClass> = classes
        .iter()
        .map(|c| {
            serde_json::from_value(json!({"metadata": {"name": c, "annotations":
                {"nodeproof.dev/localhost-profiles": format!("profiles/{c}.json")}}, "handler": "runc"}))
            .unwrap()
        })
        .collect();
    let created = rfc3339(now - Duration::from_secs(3600));
    let pod_list: Vec<Pod> = (0..pods)
        .map(|i| {
            let gated = i % 4 == 0;
            let mut spec =
                json!({"runtimeClassName": classes[i % 3], "containers": [{"name": "c"}]});
            if gated {
                spec["schedulingGates"] = json!([{"name": "nodeproof.dev/gpu-driver-ready"}]);
            } else {
                spec["nodeName"] = json!(format!("node-{}", i % nodes));
            }
            serde_json::from_value(
                json!({"metadata": {"name": format!("pod-{i}"), "namespace": "ml",
                "uid": format!("uid-{i}"), "creationTimestamp": created}, "spec": spec,
                "status": {"phase": if gated { "Pending" } else { "Running" }, "startTime": created}}),
            )
            .unwrap()
        })
        .collect();
    let fresh = Some(now - Duration::from_secs(5));
    let services = vec![(
        MetricsVersion::V1beta1,
        serde_json::from_value(json!({"metadata": {"name": "v1beta1.metrics.k8s.io"},
            "status": {"conditions": [{"type": "Available", "status": "True"}]}}))
        .unwrap(),
    )];
    let metrics = MetricsApiRead {
        version: choose(&services),
        services,
        nodes: MetricsList::Served(
            (0..nodes)
                .map(|i| MetricsSample {
                    namespace: None,
                    name: format!("node-{i}"),
                    timestamp: fresh,
                })
                .collect(),
        ),
        pods: MetricsList::Served(
            (0..pods)
                .map(|i| MetricsSample {
                    namespace: Some("ml".into()),
                    name: format!("pod-{i}"),
                    timestamp: fresh,
                })
                .collect(),
        ),
        latencies: vec![Duration::from_millis(20); 10],
    };
    let snap = Snapshot {
        metrics,
        nodes: node_list,
        runtime_classes: class_list,
        pods: pod_list,
        pod_events: Vec::new(),
        warning_events: Vec::new(),
        denial_events: Vec::new(),
        hpas: Vec::new(),
        role_objects: Default::default(),
    };
    let opts = check::Options::default();
    let mut times = Vec::new();
    let mut findings = 0;
    for _ in 0..9 {
        let start = Instant::now();
        let report = check::evaluate(&snap, now, &opts);
        times.push(start.elapsed());
        findings = report.findings.len();
    }
    times.sort();
    println!(
        "evaluate: {nodes} nodes, {pods} pods ({} gated), {findings} findings: median {:.1} ms, slowest {:.1} ms (9 runs)",
        pods.div_ceil(4),
        times[4].as_secs_f64() * 1e3,
        times[8].as_secs_f64() * 1e3
    );
    let report = check::evaluate(&snap, now, &opts);
    let window = Duration::from_secs(3600);
    let mut times = Vec::new();
    let mut changes = 0;
    for _ in 0..9 {
        let start = Instant::now();
        let before = Baseline::record(&snap, &report, now, window);
        let after = Baseline::record(&snap, &report, now, window);
        let c = compare(&before, &after);
        times.push(start.elapsed());
        changes = c.regressed.len() + c.improved.len() + c.changed.len();
    }
    times.sort();
    println!(
        "baseline: record twice and compare, {changes} changes: median {:.1} ms, slowest {:.1} ms (9 runs)",
        times[4].as_secs_f64() * 1e3,
        times[8].as_secs_f64() * 1e3
    );
}
