//! The gate controller at scale against the test API server: 5,000 nodes
//! and 20,000 gated pods (issue #14's figure), the real `nodeproof
//! gate-controller` binary. Measures the time from start to every waiting
//! pod's Event written (list, judge, one POST each), the controller's RSS,
//! and the release latency when a node turns ready (first and last gate of
//! the pods it could host). Run once, not in a loop:
//! `cargo bench -p nodeproof --bench gate_scale [-- NODES PODS]`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "../tests/support/agent.rs"]
mod agent_support;
#[path = "../tests/support/apiserver.rs"]
mod apiserver;
use apiserver::{Identity, TestApiServer};

const GATE: &str = "nodeproof.dev/gpu-driver-ready";
const POOLS: usize = 20;

fn ago(age: i64) -> String {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    k8s_openapi::jiff::Timestamp::from_second(now - age)
        .unwrap()
        .to_string()
}

fn conditions(driver: &str) -> Value {
    json!([
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": ago(0)},
        {"type": "GPUDriverReady", "status": driver, "reason": if driver == "True" { "Ok" } else { "NVMLInitFailed" },
         "lastHeartbeatTime": ago(0)},
        {"type": "GPUHealthy", "status": "True", "reason": "Healthy", "lastHeartbeatTime": ago(0)},
    ])
}

fn vm_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let nodes = args.first().copied().unwrap_or(5_000);
    let pods = args.get(1).copied().unwrap_or(20_000);
    let server = TestApiServer::start();
    server.add_token("sa-gate", Identity::GateControllerServiceAccount);
    let t = Instant::now();
    for i in 0..nodes {
        let name = format!("node-{i}");
        server.add_node(&name, conditions("False"));
        server.merge_node(
            &name,
            json!({"metadata": {"labels": {"pool": format!("pool-{}", i % POOLS)}},
                   "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
                   "status": {"allocatable": {"cpu": "96", "nvidia.com/gpu": "8"}}}),
        );
    }
    for i in 0..pods {
        server.put(
            "pods",
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"namespace": "ml", "name": format!("pod-{i}"), "uid": format!("uid-{i}"),
                             "creationTimestamp": ago(0)},
                "spec": {"nodeSelector": {"pool": format!("pool-{}", i % POOLS)},
                         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                         "schedulingGates": [{"name": GATE}],
                         "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}),
        );
    }
    eprintln!("test server filled in {:.1?}", t.elapsed());
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), "sa-gate");
    let config = dir.path().join("gate.toml");
    std::fs::write(
        &config,
        format!("[gate]\nheartbeat-s = 300\n[gate.gates.\"{GATE}\"]\nconditions = [\"GPUDriverReady\", \"GPUHealthy\"]\n"),
    )
    .unwrap();
    let port = agent_support::free_port();
    let log = dir.path().join("controller.log");
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .arg("gate-controller")
        .arg("--config")
        .arg(&config)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--namespace", "nodeproof", "--identity", "a"])
        .arg(format!("--listen=127.0.0.1:{port}"))
        .env_remove("JOURNAL_STREAM")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let events = || server.events().len();
    let all = wait_until(Duration::from_secs(600), || events() >= pods);
    let judged = start.elapsed();
    let rss = vm_rss_kib(child.id());
    assert!(
        all,
        "only {} of {pods} Events after {judged:?}\n{}",
        events(),
        read(&log)
    );

    // One node of pool-0 turns ready: the pods of pool-0 can go.
    let flip = Instant::now();
    server.merge_node(
        "node-0",
        json!({"status": {"conditions": conditions("True")}}),
    );
    let pool0: Vec<String> = (0..pods)
        .filter(|i| i % POOLS == 0)
        .map(|i| format!("ml/pod-{i}"))
        .collect();
    let released = |key: &String| {
        server.pod(key).is_some_and(|p| {
            p["spec"]["schedulingGates"]
                .as_array()
                .is_none_or(|g| g.is_empty())
        })
    };
    let mut first = None;
    let done = wait_until(Duration::from_secs(600), || {
        let n = pool0.iter().filter(|k| released(k)).count();
        if n > 0 && first.is_none() {
            first = Some(flip.elapsed());
        }
        n == pool0.len()
    });
    let last = flip.elapsed();
    let rss_after = vm_rss_kib(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert!(done, "not every pool-0 pod released\n{}", read(&log));
    println!("gate controller against the test API server: {nodes} nodes x {pods} gated pods");
    println!("  start to every Event written (list, judge, {pods} POSTs): {judged:.2?} = {:.0} pods/s end to end", pods as f64 / judged.as_secs_f64());
    println!(
        "  controller RSS: {:.1} MiB after the first judgement, {:.1} MiB after the releases",
        rss as f64 / 1024.0,
        rss_after as f64 / 1024.0
    );
    println!(
        "  one node turns ready: first of its {} pods released after {:.2?}, all after {last:.2?}",
        pool0.len(),
        first.unwrap_or_default()
    );
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}
