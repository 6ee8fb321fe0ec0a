//! The agent's start-up and steady memory (systemd waits for READY=1, and
//! a node runs one agent beside its workloads): time from
//! process start to READY (the `ready_ms` the agent logs when its first full
//! check cycle is done) without an API server, and RSS a few seconds later.
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
    println!("  ({:.1} s in all)", t0.elapsed().as_secs_f64());
}
