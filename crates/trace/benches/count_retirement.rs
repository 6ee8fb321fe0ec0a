//! What the daemon holds after many short-lived processes were denied, with
//! and without retiring exited processes' counts (`nodeproof_trace::retire`),
//! side by side in one run: the keys left in the kernel's count map, the rows
//! each read returns, how long a read takes, `lost_counts`, and this
//! process's RSS. Each mode starts its own tracer (the previous one detached,
//! its maps freed) and forks NP_BENCH_PROCS processes (default 20,000, more
//! than the map's 16,384 keys), each denied `mkdir` once, reading the counts
//! every NP_BENCH_WAVE processes (default 1,000) as the daemon reads them
//! every few seconds.
//!
//! `cargo bench -p nodeproof-trace --bench count_retirement` (root or CAP_BPF+CAP_PERFMON).

use std::time::Instant;

use libseccomp::{ScmpAction, ScmpFilterContext, ScmpSyscall};
use nodeproof_trace::{
    self as trace, CgroupResolver, EventSource, Filter, NoPodLookup, Pump, Tracer, TracerConfig,
};

const COMM: &str = "np-bench-deny";

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Forks a process that names itself COMM, is denied `mkdir` once and exits.
fn denied_process() {
    // SAFETY: the child only sets its name, loads a filter, makes one
    // syscall and _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let name = std::ffi::CString::new(COMM).unwrap();
        let dir = std::ffi::CString::new("/nonexistent-nodeproof/bench").unwrap();
        unsafe {
            libc::prctl(libc::PR_SET_NAME, name.as_ptr());
            let Ok(mut f) = ScmpFilterContext::new(ScmpAction::Allow) else {
                libc::_exit(2)
            };
            let Ok(mkdir) = ScmpSyscall::from_name("mkdir") else {
                libc::_exit(2)
            };
            if f.add_rule(ScmpAction::Errno(libc::EPERM), mkdir).is_err() || f.load().is_err() {
                libc::_exit(2);
            }
            libc::syscall(libc::SYS_mkdir, dir.as_ptr(), 0o755);
            libc::_exit(0);
        }
    }
    let mut status = 0;
    // SAFETY: our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
}

struct Figures {
    keys: usize,
    rows: usize,
    ours: u64,
    read_ms: f64,
    lost: u64,
    rss_kib: u64,
}

fn run(retire: bool, procs: usize, wave: usize) -> Figures {
    let tracer = Tracer::start(&TracerConfig::default()).expect("the tracer loads");
    let mut pump = Pump::new(tracer, CgroupResolver::host(), Filter::default());
    if retire {
        pump = pump.retire_exited(trace::process_exited);
    }
    // The daemon keeps the latest rows (its watch channel) between reads.
    let mut latest = Vec::new();
    let mut read_ms = 0.0;
    let mut lost = 0;
    let mut done = 0;
    while done < procs {
        for _ in 0..wave.min(procs - done) {
            denied_process();
        }
        done += wave.min(procs - done);
        let t = Instant::now();
        let (rows, stats) = pump.rows(&NoPodLookup).expect("counts read");
        read_ms = t.elapsed().as_secs_f64() * 1e3;
        lost = stats.lost_counts;
        latest = rows;
    }
    let keys = pump.source().counts().expect("counts").len();
    let ours = latest
        .iter()
        .filter(|r| r.comm == COMM)
        .map(|r| r.count)
        .sum();
    Figures {
        keys,
        rows: latest.len(),
        ours,
        read_ms,
        lost,
        rss_kib: rss_kib(),
    }
}

fn main() {
    let procs = env("NP_BENCH_PROCS", 20_000);
    let wave = env("NP_BENCH_WAVE", 1_000).max(1);
    // Each mode runs in a process of its own, so that each RSS is its own.
    if let Ok(mode) = std::env::var("NP_BENCH_MODE") {
        let retire = mode == "retire";
        let f = run(retire, procs, wave);
        println!(
            "{:<8} {:>12} {:>10} {:>14} {:>13} {:>9.1} ms {:>9.1} MiB",
            mode,
            f.keys,
            f.rows,
            f.ours,
            f.lost,
            f.read_ms,
            f.rss_kib as f64 / 1024.0
        );
        return;
    }
    if nodeproof_testkit::require(&[nodeproof_testkit::TRACING]).is_none() {
        return;
    }
    println!("{procs} processes denied once each, the counts read after every {wave}:\n");
    println!(
        "{:<8} {:>12} {:>10} {:>14} {:>13} {:>12} {:>13}",
        "mode", "kernel keys", "rows", "ours counted", "lost_counts", "last read", "RSS"
    );
    let me = std::env::current_exe().expect("this bench's path");
    for mode in ["keep", "retire"] {
        let status = std::process::Command::new(&me)
            .env("NP_BENCH_MODE", mode)
            .status()
            .expect("the bench runs itself");
        assert!(status.success(), "{mode}: {status}");
    }
}
