//! The agent's start-up and steady memory (systemd waits for READY=1, and
//! a node runs one agent beside its workloads): time from
//! process start to READY (the `ready_ms` the agent logs when its first full
//! check cycle is done) without an API server, and RSS a few seconds later.
//! Then, against the test API server, start → the first conditions on a new
//! Node (none of nodeproof's there yet), with the daemon's default load
//! settings (a 30 s start spread, which a new Node skips), idle and with
//! both cores busy (a spinning thread per CPU), every run reported.
//! `cargo xtask bench daemon_start` (or `cargo bench -p nodeproof --bench daemon_start`).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../tests/support/agent.rs"]
mod agent_support;
use agent_support::free_port;
#[path = "support/proc_status.rs"]
mod proc_status;
use proc_status::status_kib;

const RUNS: usize = 15;
const FIRST_CONDITION_RUNS: usize = 6;
const FIRST_CONDITION_TARGET: Duration = Duration::from_secs(5);
const READY_TARGET_MS: u64 = 200;
const RSS_TARGET_KIB: u64 = 20 * 1024;

/// `ready_ms=123` (text log, colours stripped) → 123.
fn ready_ms(line: &str) -> Option<u64> {
    let at = line.find("ready_ms")?;
    let digits: String = line[at + "ready_ms".len()..]
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// One start: (ready_ms, RSS after `settle` if asked).
fn start(config: &std::path::Path, settle: Option<Duration>) -> (u64, Option<u64>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(["run", "--config"])
        .arg(config)
        .env_remove("NOTIFY_SOCKET")
        .env_remove("JOURNAL_STREAM")
        .env("NODEPROOF_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nodeproof starts");
    let pid = child.id();
    let stderr = child.stderr.take().unwrap();
    // Keep draining the log in the background: a full pipe would stall it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(ms) = ready_ms(&line) {
                let _ = tx.send(ms);
            }
        }
    });
    let ms = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the agent logged ready_ms");
    let rss = settle.and_then(|d| {
        std::thread::sleep(d);
        status_kib(&pid.to_string(), "VmRSS:")
    });
    // SAFETY: a plain kill(2) on our own child.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    let _ = child.wait();
    (ms, rss)
}

/// Spins one thread per CPU until dropped: both cores busy.
struct Busy(
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    Vec<std::thread::JoinHandle<()>>,
);

impl Busy {
    fn start() -> Busy {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let n = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                })
            })
            .collect();
        Busy(stop, threads)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        self.1.drain(..).for_each(|t| {
            let _ = t.join();
        });
    }
}

/// One start against `server` on a Node without conditions: the time from
/// spawning the agent to its first condition on the Node.
fn first_condition(dir: &std::path::Path, root: &str) -> Duration {
    let server = nodeproof_testapi::TestApiServer::start();
    server.add_token("node-n1", nodeproof_testapi::Identity::Node("n1".into()));
    server.add_node("n1", serde_json::json!([]));
    let kubeconfig = server.kubeconfig(dir, "node-n1");
    let config = dir.join("first.toml");
    // The daemon's defaults for the load settings (start-spread-s = 30).
    std::fs::write(
        &config,
        format!(
            "[seccomp]\nroot = \"{root}\"\n[report]\nkubeconfig = \"{}\"\nnode-name = \"n1\"\n[gpu]\nnvml-library = \"/nonexistent/libnvidia-ml.so.1\"\n[daemon]\nlisten = \"127.0.0.1:{}\"\n",
            kubeconfig.display(),
            free_port()
        ),
    )
    .unwrap();
    let t0 = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(["run", "--config"])
        .arg(&config)
        .env_remove("NOTIFY_SOCKET")
        .env_remove("JOURNAL_STREAM")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nodeproof starts");
    let took = loop {
        if server.condition("n1", "SeccompProfilesReady").is_some() {
            break t0.elapsed();
        }
        if t0.elapsed() > Duration::from_secs(60) {
            break Duration::MAX;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // SAFETY: a plain kill(2) on our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let _ = child.wait();
    took
}

fn first_conditions(dir: &std::path::Path, root: &str, busy: bool) {
    let _busy = busy.then(Busy::start);
    let runs: Vec<Duration> = (0..FIRST_CONDITION_RUNS)
        .map(|_| first_condition(dir, root))
        .collect();
    let mut sorted = runs.clone();
    sorted.sort_unstable();
    let shown: Vec<String> = runs
        .iter()
        .map(|d| {
            if *d == Duration::MAX {
                "none in 60 s".into()
            } else {
                format!("{:.2}", d.as_secs_f64())
            }
        })
        .collect();
    println!(
        "  start → first condition on a new Node, {}: runs {} s; max {}  target ≤ {} s: {}",
        if busy { "both cores busy" } else { "idle" },
        shown.join(", "),
        shown[runs
            .iter()
            .position(|d| *d == sorted[FIRST_CONDITION_RUNS - 1])
            .unwrap_or(0)],
        FIRST_CONDITION_TARGET.as_secs(),
        if sorted[FIRST_CONDITION_RUNS - 1] <= FIRST_CONDITION_TARGET {
            "met"
        } else {
            "MISSED"
        }
    );
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../profiles");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[seccomp]\nroot = \"{root}\"\n[report]\nkubeconfig = \"/nonexistent/kubeconfig\"\nnode-name = \"bench\"\n[gpu]\nnvml-library = \"/nonexistent/libnvidia-ml.so.1\"\n[daemon]\nlisten = \"127.0.0.1:{}\"\n",
            free_port()
        ),
    )
    .unwrap();
    let t0 = Instant::now();
    let mut ready: Vec<u64> = (0..RUNS).map(|_| start(&config, None).0).collect();
    ready.sort_unstable();
    let (_, rss) = start(&config, Some(Duration::from_secs(5)));
    println!(
        "daemon start benchmark (release build, {} CPUs, load average {})",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .unwrap_or("?")
    );
    println!(
        "  start → READY=1, no API server: median {} ms [min {}, max {}, n={RUNS}]  target ≤ {READY_TARGET_MS} ms: {}",
        ready[RUNS / 2],
        ready[0],
        ready[RUNS - 1],
        if ready[RUNS / 2] <= READY_TARGET_MS { "met" } else { "MISSED" }
    );
    match rss {
        Some(kib) => println!(
            "  RSS 5 s after READY: {:.1} MiB  target ≤ {} MiB: {}",
            kib as f64 / 1024.0,
            RSS_TARGET_KIB / 1024,
            if kib <= RSS_TARGET_KIB {
                "met"
            } else {
                "MISSED"
            }
        ),
        None => println!("  RSS: the agent was gone before it could be read"),
    }
    first_conditions(dir.path(), root, false);
    first_conditions(dir.path(), root, true);
    println!("  ({:.1} s in all)", t0.elapsed().as_secs_f64());
}
