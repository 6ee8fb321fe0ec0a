//! The gate controller's judgement at scale: 5,000 nodes × 20,000 gated
//! pods through the pure index (`Gatekeeper`) and `judge`, as the
//! controller drives them: everything listed, every pod judged once, then
//! Node changes judged incrementally. Prints measured figures.
//!
//! `cargo run --release -p nodeproof-cluster --example gate_scale [nodes] [pods]`

use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};

use nodeproof_cluster::gate::config::GateConfig;
use nodeproof_cluster::gate::state::Gatekeeper;

const POOLS: usize = 20;
const ZONES: usize = 4;

/// Deterministic pseudo-random numbers (xorshift), so runs compare.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    k8s_openapi::jiff::Timestamp::from_second(secs as i64)
        .unwrap()
        .to_string()
}

/// A GPU node as a real cluster has it: ~20 labels, the GPU taint, four
/// nodeproof conditions (one in six nodes with a driver problem) and the
/// kubelet's five.
fn node(i: usize, driver_ok: bool, heartbeat: SystemTime) -> Node {
    let hb = rfc3339(heartbeat);
    let mut labels = serde_json::Map::new();
    labels.insert("pool".into(), json!(format!("pool-{}", i % POOLS)));
    labels.insert(
        "topology.kubernetes.io/zone".into(),
        json!(format!("zone-{}", i % ZONES)),
    );
    labels.insert("kubernetes.io/hostname".into(), json!(format!("node-{i}")));
    labels.insert("nvidia.com/gpu.count".into(), json!("8"));
    labels.insert("gpu.generation".into(), json!(((i % 3) + 7).to_string()));
    // The readiness labels the controller keeps (steer.rs).
    if driver_ok {
        labels.insert("gate.nodeproof.dev/gpu-driver-ready".into(), json!("ready"));
    }
    labels.insert("gate.nodeproof.dev/seccomp-ready".into(), json!("ready"));
    for k in 0..15 {
        labels.insert(
            format!("example.com/label-{k}"),
            json!(format!("value-{}", i % 7)),
        );
    }
    let mut conditions: Vec<Value> = [
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
        "NetworkUnavailable",
    ]
    .iter()
    .map(|t| json!({"type": t, "status": "False", "reason": "Fine", "lastHeartbeatTime": hb}))
    .collect();
    conditions.push(json!({"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": hb}));
    for (t, ok) in [
        ("SeccompProfilesReady", true),
        ("SeccompTracingReady", true),
        ("GPUDriverReady", driver_ok),
        ("GPUHealthy", true),
    ] {
        conditions.push(
            json!({"type": t, "status": if ok { "True" } else { "False" },
            "reason": if ok { "Ok" } else { "NVMLInitFailed" }, "lastHeartbeatTime": hb}),
        );
    }
    serde_json::from_value(json!({
        "metadata": {"name": format!("node-{i}"), "labels": labels},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"},
                   "conditions": conditions},
    }))
    .unwrap()
}

/// A gated inference pod: a pool, a zone affinity (In two zones, generation
/// Gt 7 for half of them), the GPU toleration, 1..8 GPUs.
fn pod(i: usize, rng: &mut Rng) -> Pod {
    let pool = rng.next(POOLS);
    let z = rng.next(ZONES);
    let mut exprs = vec![
        json!({"key": "topology.kubernetes.io/zone", "operator": "In",
        "values": [format!("zone-{z}"), format!("zone-{}", (z + 1) % ZONES)]}),
    ];
    if i.is_multiple_of(2) {
        exprs.push(json!({"key": "gpu.generation", "operator": "Gt", "values": ["7"]}));
    }
    serde_json::from_value(json!({
        "metadata": {"namespace": "ml", "name": format!("pod-{i}"), "uid": format!("uid-{i}")},
        "spec": {
            "nodeSelector": {"pool": format!("pool-{pool}")},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": exprs}]}}},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "schedulingGates": [{"name": "nodeproof.dev/gpu-driver-ready"}],
            "containers": [{"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": (1 + rng.next(8)).to_string()}}}],
        },
    }))
    .unwrap()
}

/// Resident set size and its peak, from /proc/self/status.
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU time of this (single-threaded) process so far, from
/// /proc/self/schedstat: on a shared machine the wall clock also counts the
/// time other processes had the CPU.
fn cpu() -> Duration {
    std::fs::read_to_string("/proc/self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .map(Duration::from_nanos)
        .unwrap_or_default()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let nodes = args.first().copied().unwrap_or(5_000);
    let pods = args.get(1).copied().unwrap_or(20_000);
    let now = SystemTime::now();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let node_objects: Vec<Node> = (0..nodes)
        .map(|i| node(i, !i.is_multiple_of(6), now))
        .collect();
    let pod_objects: Vec<Pod> = (0..pods).map(|i| pod(i, &mut rng)).collect();
    let (rss0, _) = memory();

    let mut gk = Gatekeeper::new(GateConfig::default().policy());
    let t = Instant::now();
    for n in &node_objects {
        gk.upsert_node(n, now);
    }
    for p in &pod_objects {
        gk.upsert_pod(p);
    }
    let index_time = t.elapsed();
    let (rss_index, _) = memory();

    let keys = gk.pod_keys();
    let t = Instant::now();
    let c = cpu();
    let mut released = 0;
    let mut waiting = 0;
    for k in &keys {
        let d = gk.judge(k, now).unwrap();
        released += d.release.len();
        waiting += d.waiting.len();
    }
    let full = t.elapsed();
    let full_cpu = cpu() - c;
    let per_s = keys.len() as f64 / full.as_secs_f64();
    let per_cpu_s = keys.len() as f64 / full_cpu.as_secs_f64();

    // A heartbeat on every node (the common Node write): nothing to re-judge.
    let later = now + Duration::from_secs(60);
    let beats: Vec<Node> = (0..nodes)
        .map(|i| node(i, !i.is_multiple_of(6), later))
        .collect();
    let t = Instant::now();
    let mut rejudge = 0;
    for n in &beats {
        rejudge += gk.upsert_node(n, later).len();
    }
    let heartbeat_time = t.elapsed();

    // One node's driver recovers: the pods it could host, re-judged.
    let flips = 100.min(nodes);
    let mut affected_total = 0;
    let mut flip_time = Duration::ZERO;
    let c = cpu();
    for i in (0..nodes).filter(|i| i.is_multiple_of(6)).take(flips) {
        let t = Instant::now();
        let affected = gk.upsert_node(&node(i, true, later), later);
        for k in &affected {
            gk.judge(k, later);
        }
        flip_time += t.elapsed();
        affected_total += affected.len();
    }
    let flip_cpu = cpu() - c;
    let (rss_end, hwm) = memory();

    println!("gate judgement at {nodes} nodes x {pods} gated pods ({POOLS} pools, {ZONES} zones)");
    println!("  index: {nodes} nodes + {pods} pods upserted in {index_time:.2?}");
    println!(
        "  full judgement: {} pods in {full:.2?} = {per_s:.0} pods/s ({:.1} µs per pod over {nodes} nodes); {released} gates releasable, {waiting} waiting",
        keys.len(),
        full.as_secs_f64() * 1e6 / keys.len() as f64
    );
    println!("  full judgement on the CPU: {full_cpu:.2?} = {per_cpu_s:.0} pods per CPU-second");
    println!(
        "  heartbeat-only update of every node: {heartbeat_time:.2?}, {rejudge} pods re-judged"
    );
    println!(
        "  node turning ready ({flips} times): {:.0} pods affected on average, {:.2?} per change (index update + re-judging them)",
        affected_total as f64 / flips as f64,
        flip_time / flips as u32
    );
    println!(
        "  node turning ready on the CPU: {:.2?} per change",
        flip_cpu / flips as u32
    );
    println!(
        "  memory: RSS {:.1} MiB with the API objects, {:.1} MiB with the index (+{:.1} MiB), {:.1} MiB at the end, peak {:.1} MiB",
        mib(rss0),
        mib(rss_index),
        mib(rss_index.saturating_sub(rss0)),
        mib(rss_end),
        mib(hwm)
    );
}
