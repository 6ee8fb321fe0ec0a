//! The gate controller at scale against the test API server and its
//! adversarial scheduler (it binds to the least ready node that fits, so
//! only the controller's steering lands a pod on a ready one): 5,000 nodes
//! and 20,000 gated pods, the real `nodeproof gate-controller` binary.
//! Measures, side by side in one run:
//! - start to every waiting pod's Event written (list, judge, one POST each)
//!   and the controller's RSS then;
//! - one pod: its only node turns ready → gate removed → bound;
//! - 1,000 pods: 10 of their pool's 250 nodes turn ready → all bound, every
//!   one on a ready node, and the writes per released pod;
//! - the controller's RSS after the releases.
//!
//! Run once, not in a loop:
//! `cargo bench -p nodeproof --bench gate_scale [-- NODES PODS]`.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "../tests/support/agent.rs"]
mod agent_support;
use apiserver::{Identity, TestApiServer};
use nodeproof_testapi as apiserver;

const GATE: &str = "nodeproof.dev/gpu-driver-ready";
const POOLS: usize = 20;
/// Nodes of pool-0 that turn ready together, each with room for a tenth of
/// the pool's pods (the others hold 8 GPUs, as a DGX).
const READY_OF_POOL0: usize = 10;

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
    let pool0_pods = pods.div_ceil(POOLS);
    let big = pool0_pods.div_ceil(READY_OF_POOL0).max(8).to_string();
    // pool-0's first nodes (node-0, node-20, ...): the ones that turn ready.
    let ready: BTreeSet<String> = (0..nodes)
        .step_by(POOLS)
        .take(READY_OF_POOL0)
        .map(|i| format!("node-{i}"))
        .collect();
    for i in 0..nodes {
        let name = format!("node-{i}");
        let gpus = if ready.contains(&name) {
            big.as_str()
        } else {
            "8"
        };
        server.add_node(&name, conditions("False"));
        server.merge_node(
            &name,
            json!({"metadata": {"labels": {"pool": format!("pool-{}", i % POOLS)}},
                   "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
                   "status": {"allocatable": {"cpu": "96", "nvidia.com/gpu": gpus}}}),
        );
    }
    // One pod alone in its pool of one node: the single-pod latency.
    server.add_node("solo-0", conditions("False"));
    server.merge_node(
        "solo-0",
        json!({"metadata": {"labels": {"pool": "solo"}},
               "status": {"allocatable": {"cpu": "96", "nvidia.com/gpu": "8"}}}),
    );
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "ml", "name": "solo", "uid": "uid-solo", "creationTimestamp": ago(0)},
            "spec": {"nodeSelector": {"pool": "solo"}, "schedulingGates": [{"name": GATE}],
                     "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}),
    );
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
    server.start_scheduler(Duration::from_secs(900));
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
    let mut child = Controller(
        Command::new(env!("CARGO_BIN_EXE_nodeproof"))
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
            .unwrap(),
    );
    let events = || server.events().len();
    let all = wait_until(Duration::from_secs(600), || events() > pods);
    let judged = start.elapsed();
    let rss = vm_rss_kib(child.0.id());
    assert!(
        all,
        "only {} of {pods} Events after {judged:?}\n{}",
        events(),
        read(&log)
    );

    let ungated = |key: &str| {
        server.pod(key).is_some_and(|p| {
            p["spec"]["schedulingGates"]
                .as_array()
                .is_none_or(|g| g.is_empty())
        })
    };

    // One pod: its node turns ready.
    let flip = Instant::now();
    server.merge_node(
        "solo-0",
        json!({"status": {"conditions": conditions("True")}}),
    );
    let solo_bound = wait_until(Duration::from_secs(60), || {
        server.bound("ml/solo").is_some()
    });
    let (solo_node, bound_at) = server
        .bound("ml/solo")
        .unwrap_or_else(|| panic!("solo never bound\n{}", read(&log)));
    assert!(solo_bound && solo_node == "solo-0", "solo: {solo_node}");
    assert!(ungated("ml/solo"));
    let solo = bound_at.duration_since(flip);

    // 1,000 pods: READY_OF_POOL0 of pool-0's nodes turn ready at once.
    server.clear_log();
    let flip = Instant::now();
    for n in &ready {
        server.merge_node(n, json!({"status": {"conditions": conditions("True")}}));
    }
    let pool0: Vec<String> = (0..pods)
        .filter(|i| i % POOLS == 0)
        .map(|i| format!("ml/pod-{i}"))
        .collect();
    let mut first_released = None;
    let mut all_released = None;
    let done = wait_until(Duration::from_secs(600), || {
        if all_released.is_none() {
            let n = pool0.iter().filter(|k| ungated(k)).count();
            if n > 0 && first_released.is_none() {
                first_released = Some(flip.elapsed());
            }
            if n == pool0.len() {
                all_released = Some(flip.elapsed());
            }
        }
        pool0.iter().all(|k| server.bound(k).is_some())
    });
    let bound: Vec<(String, Instant)> = pool0.iter().filter_map(|k| server.bound(k)).collect();
    let rss_after = vm_rss_kib(child.0.id());
    child.stop();
    assert!(
        done,
        "{} of {} pool-0 pods bound\n{}",
        bound.len(),
        pool0.len(),
        read(&log)
    );
    let wrong: Vec<&String> = bound
        .iter()
        .map(|(n, _)| n)
        .filter(|n| !ready.contains(*n))
        .collect();
    assert!(wrong.is_empty(), "bound to nodes not ready: {wrong:?}");
    let first_bound = bound
        .iter()
        .map(|(_, t)| t.duration_since(flip))
        .min()
        .unwrap_or_default();
    let last_bound = bound
        .iter()
        .map(|(_, t)| t.duration_since(flip))
        .max()
        .unwrap_or_default();
    let log_after = server.log();
    let count = |f: &dyn Fn(&apiserver::Logged) -> bool| {
        log_after
            .iter()
            .filter(|l| l.method == "PATCH" && f(l))
            .count()
    };
    let pod_patches = count(&|l| l.path.contains("/pods/") && !l.path.ends_with("/status"));
    let status_patches = count(&|l| l.path.contains("/pods/") && l.path.ends_with("/status"));
    let label_patches = count(&|l| l.path.starts_with("/api/v1/nodes/"));
    let released = pool0.len() as f64;

    println!("gate controller against the test API server and its adversarial scheduler: {nodes} nodes x {pods} gated pods");
    println!("  start to every Event written (list, judge, {} POSTs): {judged:.2?} = {:.0} pods/s end to end", pods + 1, pods as f64 / judged.as_secs_f64());
    println!("  one pod: its node turns ready -> bound on it: {solo:.2?}");
    println!(
        "  {READY_OF_POOL0} of pool-0's nodes turn ready: {} pods released first {:.2?}, all {:.2?}; bound first {first_bound:.2?}, all {last_bound:.2?}, every one on a ready node",
        pool0.len(),
        first_released.unwrap_or_default(),
        all_released.unwrap_or_default(),
    );
    println!(
        "  writes per released pod: {:.2} pod PATCH, {:.2} pods/status PATCH; {label_patches} node label PATCHes in all",
        pod_patches as f64 / released,
        status_patches as f64 / released
    );
    println!(
        "  controller RSS: {:.1} MiB after the first judgement, {:.1} MiB after the releases",
        rss as f64 / 1024.0,
        rss_after as f64 / 1024.0
    );
}

/// The controller's process, killed however the bench ends (a failed
/// assertion would otherwise leave it running against a dead server).
struct Controller(std::process::Child);

impl Controller {
    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop();
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}
