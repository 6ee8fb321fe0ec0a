//! Exact counts under churn: many short-lived confined processes and threads,
//! each with a known number of denials, while both CPUs are kept busy by
//! unconfined syscall loops and other tracers attach and detach beside the
//! one under test (as the other tests of this binary do). Every strategy this
//! kernel loads must count every denial of every pid, and nothing else for
//! them. Under `tp_btf` this once missed whole processes: the per-CPU cache
//! of the running task was trusted after a context switch the kernel did not
//! report (docs/trace.md, "Why `tp_btf` missed a denial now and then").
//!
//! `short_lived_processes_and_threads_are_counted_exactly` runs it once per
//! strategy (about 3 s each here); the `#[ignore]`d `..._twenty_runs` is the
//! measurement (`cargo test -p nodeproof --test kernel trace_stress --
//! --ignored --nocapture`): 20 runs, and what each got wrong.

use libseccomp::{ScmpAction, ScmpFilterContext, ScmpSyscall};
use nodeproof_testkit::{require, TRACING};
use nodeproof_trace::{EventSource, Strategy, Tracer, TracerConfig};
use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Forked processes per run; every `EXEC_EVERY`th execs `/bin/mkdir` (one denial).
const PROCESSES: u32 = 500;
const EXEC_EVERY: u32 = 10;
/// Threads per run, spawned by the confined parent in batches.
const THREADS: u32 = 500;
const THREAD_BATCH: u32 = 25;

fn cfg(strategy: Strategy) -> TracerConfig {
    TracerConfig {
        strategy: Some(strategy),
        ..TracerConfig::default()
    }
}

/// The strategies that load here (fexit is refused on some kernels).
fn strategies() -> Vec<Strategy> {
    Strategy::ALL
        .into_iter()
        .filter(|s| Tracer::start(&cfg(*s)).is_ok())
        .collect()
}

/// Denials a forked process `i` makes (1 to 4), or 1 for one that execs mkdir.
fn denials_of_process(i: u32) -> u64 {
    if i.is_multiple_of(EXEC_EVERY) {
        1
    } else {
        u64::from(i % 4 + 1)
    }
}

fn denials_of_thread(i: u32) -> u64 {
    u64::from(i % 3 + 1)
}

fn mkdir_denied() {
    let p = c"/nonexistent-nodeproof/stress";
    // SAFETY: a plain syscall on a valid C string.
    unsafe { libc::syscall(libc::SYS_mkdir, p.as_ptr(), 0o755) };
}

/// The confined workload, in a forked child: writes each forked pid to `fd`
/// and exits 0 when every process and thread ran.
fn workload(fd: libc::c_int) -> i32 {
    let mut f = ScmpFilterContext::new(ScmpAction::Allow).expect("filter");
    f.add_rule(
        ScmpAction::Errno(libc::EPERM),
        ScmpSyscall::from_name("mkdir").expect("mkdir"),
    )
    .expect("rule");
    f.load().expect("load filter");
    let prog = CString::new("/bin/mkdir").unwrap();
    let arg = CString::new("/nonexistent-nodeproof/stress-exec").unwrap();
    let mut bad = 0;
    for i in 0..PROCESSES {
        // SAFETY: the child only makes syscalls, execs or _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            if i.is_multiple_of(EXEC_EVERY) {
                // mkdir(1) says why it failed: not into the test's output.
                let null = c"/dev/null";
                // SAFETY: opening /dev/null and moving it onto stderr.
                unsafe { libc::dup2(libc::open(null.as_ptr(), libc::O_WRONLY), 2) };
                let argv = [prog.as_ptr(), arg.as_ptr(), std::ptr::null()];
                // SAFETY: valid argv; _exit if exec fails.
                unsafe {
                    libc::execv(prog.as_ptr(), argv.as_ptr());
                    libc::_exit(127);
                }
            }
            for _ in 0..denials_of_process(i) {
                mkdir_denied();
            }
            // SAFETY: leaving the forked child without running the harness.
            unsafe { libc::_exit(0) };
        }
        if pid < 0 {
            return 100;
        }
        let bytes = (pid as u32).to_ne_bytes();
        let mut status = 0;
        // SAFETY: writing 4 bytes from a valid buffer; reaping our own child.
        unsafe {
            libc::write(fd, bytes.as_ptr().cast(), 4);
            libc::waitpid(pid, &mut status, 0);
        }
        // mkdir(1) exits 1 when its mkdir fails, as it must here.
        let want = if i.is_multiple_of(EXEC_EVERY) { 1 } else { 0 };
        bad += i32::from(!libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != want);
    }
    for batch in 0..THREADS / THREAD_BATCH {
        let handles: Vec<_> = (0..THREAD_BATCH)
            .map(|j| {
                let n = denials_of_thread(batch * THREAD_BATCH + j);
                std::thread::spawn(move || {
                    for _ in 0..n {
                        mkdir_denied();
                    }
                })
            })
            .collect();
        for h in handles {
            bad += i32::from(h.join().is_err());
        }
    }
    bad
}

/// Keeps `n` unconfined processes making syscalls until dropped.
struct Busy(Vec<libc::pid_t>);

impl Busy {
    fn start(n: usize) -> Busy {
        Busy(
            (0..n)
                .map(|_| {
                    // SAFETY: the child loops on getppid/sched_yield until killed.
                    let pid = unsafe { libc::fork() };
                    if pid == 0 {
                        // SAFETY (the loop): plain syscalls.
                        loop {
                            for _ in 0..64 {
                                unsafe { libc::getppid() };
                            }
                            unsafe { libc::sched_yield() };
                        }
                    }
                    assert!(pid > 0, "fork");
                    pid
                })
                .collect(),
        )
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        for pid in &self.0 {
            // SAFETY: killing and reaping our own children.
            unsafe {
                libc::kill(*pid, libc::SIGKILL);
                libc::waitpid(*pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

/// What one run got wrong.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    /// (expected, counted) per pid, for the pids that differ.
    off: BTreeMap<u32, (u64, u64)>,
    /// Rows of these pids that are not the denied mkdir.
    extra: usize,
}

impl Run {
    fn exact(&self) -> bool {
        self.off.is_empty() && self.extra == 0
    }
}

/// One run of the workload under a tracer of `strategy`.
fn one_run(strategy: Strategy) -> Run {
    let t = Tracer::start(&cfg(strategy)).unwrap();
    let churn_stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let stop = Arc::clone(&churn_stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                drop(Tracer::start(&cfg(strategy)));
            }
        })
    };
    let busy = Busy::start(2);
    let mut fds = [0; 2];
    // SAFETY: pipe with a valid array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child runs the workload and _exits.
    let root = unsafe { libc::fork() };
    assert!(root >= 0, "fork");
    if root == 0 {
        let code = std::panic::catch_unwind(|| workload(fds[1])).unwrap_or(101);
        unsafe { libc::_exit(code) };
    }
    // SAFETY: closing our copy of the write end; reading the pids to EOF.
    unsafe { libc::close(fds[1]) };
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n as usize]);
    }
    unsafe { libc::close(fds[0]) };
    let mut status = 0;
    // SAFETY: reaping our own child.
    assert_eq!(unsafe { libc::waitpid(root, &mut status, 0) }, root);
    drop(busy);
    churn_stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{strategy}: workload status {status:#x}"
    );
    let pids: Vec<u32> = raw
        .chunks(4)
        .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(pids.len(), PROCESSES as usize);
    let mut want: HashMap<u32, u64> = pids
        .iter()
        .enumerate()
        .map(|(i, pid)| (*pid, denials_of_process(i as u32)))
        .collect();
    want.insert(root as u32, (0..THREADS).map(denials_of_thread).sum());
    let mut got: HashMap<u32, u64> = HashMap::new();
    let mut extra = Vec::new();
    for (k, n) in t.counts().unwrap() {
        if want.contains_key(&k.pid) {
            // Anything else (an allowed call counted as an `errno 0` denial,
            // as a stale cache once did) is a row that must not exist.
            if (k.nr, k.errno) != (libc::SYS_mkdir as i32, libc::EPERM) {
                extra.push((k, n));
                continue;
            }
            *got.entry(k.pid).or_default() += n;
        }
    }
    let stats = t.stats().unwrap();
    assert_eq!(stats.lost_counts, 0, "{strategy}: {stats:?}");
    let off: BTreeMap<u32, (u64, u64)> = want
        .iter()
        .map(|(pid, w)| (*pid, (*w, got.get(pid).copied().unwrap_or(0))))
        .filter(|(_, (w, g))| w != g)
        .collect();
    if !off.is_empty() || !extra.is_empty() {
        eprintln!(
            "{strategy}: {} pids off (pid: (want, got)): {off:?}; rows not expected: {extra:?}; {stats:?}",
            off.len()
        );
    }
    Run {
        off,
        extra: extra.len(),
    }
}

#[test]
fn short_lived_processes_and_threads_are_counted_exactly() {
    let Some(_) = require(&[TRACING]) else {
        return;
    };
    for s in strategies() {
        let run = one_run(s);
        assert!(run.exact(), "{s}: {run:?}");
    }
}

#[test]
#[ignore = "the 20-run measurement: --ignored"]
fn short_lived_processes_and_threads_are_counted_exactly_twenty_runs() {
    let Some(_) = require(&[TRACING]) else {
        return;
    };
    for s in strategies() {
        let runs: Vec<Run> = (0..20).map(|_| one_run(s)).collect();
        let off: Vec<(usize, usize)> = runs.iter().map(|r| (r.off.len(), r.extra)).collect();
        eprintln!("{s}: (pids off, rows not expected) per run: {off:?}");
        assert!(runs.iter().all(Run::exact), "{s}: {off:?}");
    }
}
