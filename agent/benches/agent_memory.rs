//! The node agent's memory with tracing, pods and reporting on: `nodeproof
//! run` (the bench's release build) against the test API server as node n1,
//! with 200 pods bound to n1, each referencing a Localhost profile, the
//! tracer loaded (as root), conditions and Events written. Per run: the peak
//! (VmHWM: the tracer's load, which parses the kernel's BTF) and the steady
//! RSS (the median of VmRSS, and of its anonymous and file-backed parts,
//! read every second for 10 s once every pod is watched, while the agent
//! is scraped, re-lints a rewritten profile and judges a pod bound and
//! deleted). Targets: peak ≤ 32 MiB, steady ≤ 20 MiB, so that a node agent fits a 32Mi limit; the
//! DaemonSet's requests and limits follow these figures
//! (deploy/base/daemonset.yaml).
//!
//! `cargo bench -p nodeproof --bench agent_memory` (or `cargo xtask bench
//! agent_memory`); `NODEPROOF_BENCH_BIN=PATH` measures another build (the
//! "before" of a change) with the same server and pods.

use std::time::{Duration, Instant};

use serde_json::json;

#[path = "../tests/support/agent.rs"]
mod agent_support;
use nodeproof_testapi as apiserver;
#[path = "support/proc_status.rs"]
mod proc_status;

use agent_support::{reporting_config, seccomp_root, Agent};
use apiserver::{Identity, TestApiServer};
use proc_status::status_kib;

const RUNS: usize = 3;
const PODS: usize = 200;
const PEAK_TARGET_KIB: u64 = 32 * 1024;
const STEADY_TARGET_KIB: u64 = 20 * 1024;

fn pod(i: usize) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("vllm-{i}"), "namespace": "ml", "uid": format!("uid-{i}")},
        "spec": {"nodeName": "n1", "containers": [{"name": "vllm", "securityContext": {"seccompProfile":
            {"type": "Localhost", "localhostProfile": "profiles/good.json"}}}]},
        "status": {"phase": "Running"}})
}

/// One run's figures, in KiB.
struct Figures {
    peak: u64,
    /// The medians of VmRSS and of its two parts.
    steady: u64,
    anon: u64,
    file: u64,
    traced: bool,
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// One run.
fn run() -> Figures {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.add_node("n1", json!([]));
    for i in 0..PODS {
        server.put("pods", pod(i));
    }
    let root = seccomp_root(dir.path(), true);
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let config = reporting_config(&root, &kubeconfig);
    let mut agent = match std::env::var_os("NODEPROOF_BENCH_BIN") {
        Some(bin) => Agent::start_binary(std::path::Path::new(&bin), dir.path(), &config),
        None => Agent::start(dir.path(), &config),
    };
    agent.wait_ready(Duration::from_secs(60));
    let pid = agent.child.id().to_string();
    let watched = format!("pods {PODS} watched");
    let started = Instant::now();
    while !agent.get("/healthz/pods").1.contains(&watched) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the agent never watched {PODS} pods: {}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let traced = agent.get("/healthz/tracing").0 == 200;
    // The steady window exercises what the agent does all day, so the
    // pages it needs stay counted: every second a /metrics and /healthz
    // scrape; a profile rewritten (inotify, re-lint, a new round to the
    // reporter); a pod bound and deleted (watch events, a judgement, an
    // Event).
    let (mut rss, mut anon, mut file) = (Vec::new(), Vec::new(), Vec::new());
    let good = root.join("profiles/good.json");
    for second in 0..10 {
        agent.get("/metrics");
        agent.get("/healthz");
        match second {
            2 => {
                let bytes = std::fs::read(&good).unwrap();
                std::fs::write(&good, bytes).unwrap();
            }
            4 => server.put("pods", pod(PODS)),
            6 => server.delete("pods", &format!("ml/vllm-{PODS}")),
            _ => {}
        }
        std::thread::sleep(Duration::from_secs(1));
        rss.extend(status_kib(&pid, "VmRSS:"));
        anon.extend(status_kib(&pid, "RssAnon:"));
        file.extend(status_kib(&pid, "RssFile:"));
    }
    let peak = status_kib(&pid, "VmHWM:").unwrap_or(0);
    agent.stop();
    Figures {
        peak,
        steady: median(rss),
        anon: median(anon),
        file: median(file),
        traced,
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn main() {
    println!(
        "agent memory benchmark (release build, {PODS} pods, {} CPUs, load average {})",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .unwrap_or("?")
    );
    for n in 1..=RUNS {
        let Figures {
            peak,
            steady,
            anon,
            file,
            traced,
        } = run();
        println!(
            "  run {n}: peak (VmHWM) {} target ≤ {}: {}; steady (median VmRSS) {} target ≤ {}: {} (anon {}, file {}); tracer {}",
            mib(peak),
            mib(PEAK_TARGET_KIB),
            if peak <= PEAK_TARGET_KIB { "met" } else { "MISSED" },
            mib(steady),
            mib(STEADY_TARGET_KIB),
            if steady <= STEADY_TARGET_KIB { "met" } else { "MISSED" },
            mib(anon),
            mib(file),
            if traced { "loaded" } else { "NOT loaded (run as root)" }
        );
    }
}
