//! The tracer against the real kernel: real processes under real libseccomp
//! filters (loaded in a forked child only), exact counts per (pid, syscall,
//! errno, action), for every strategy this kernel loads. Needs CAP_BPF +
//! CAP_PERFMON (or root); without them each test skips (fails under
//! NODEPROOF_REQUIRE=1).

use crate::support::cgroup;
use cgroup::CgroupDir;
use libseccomp::{ScmpAction, ScmpFilterContext, ScmpSyscall};
use nodeproof_testkit::{require, Need, TRACING};
use nodeproof_trace::{
    self, loader, Action, CgroupResolver, EventSource, NoPodLookup, OutputFormat, Strategy,
    TraceError, TraceOptions, Tracer, TracerConfig,
};
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

const MKDIR: i32 = libc::SYS_mkdir as i32;
const RMDIR: i32 = libc::SYS_rmdir as i32;
const CHMOD: i32 = libc::SYS_chmod as i32;
const SYMLINK: i32 = libc::SYS_symlink as i32;

/// The strategies this kernel loads, each forced; fexit is checked for a
/// clean refusal when the kernel refuses it.
fn strategies() -> Vec<Strategy> {
    let mut ok = Vec::new();
    for s in Strategy::ALL {
        match Tracer::start(&cfg(Some(s))) {
            Ok(_) => ok.push(s),
            Err(TraceError::NoStrategy { attempts, .. }) if s == Strategy::Fexit => {
                assert_eq!(attempts.len(), 1);
                assert_eq!(attempts[0].strategy, Strategy::Fexit);
                eprintln!("fexit refused here: {}", attempts[0]);
            }
            Err(e) => panic!("strategy {s} must load on this kernel: {e}"),
        }
    }
    ok
}

fn cfg(strategy: Option<Strategy>) -> TracerConfig {
    TracerConfig {
        strategy,
        ..TracerConfig::default()
    }
}

fn install(rules: &[(&str, ScmpAction)]) {
    let mut f = ScmpFilterContext::new(ScmpAction::Allow).expect("filter");
    for (name, action) in rules {
        f.add_rule(*action, ScmpSyscall::from_name(name).expect("syscall"))
            .expect("rule");
    }
    f.load().expect("load filter");
}

fn path(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// One raw syscall on a path that does not exist (so an allowed call fails harmlessly).
fn call(nr: i32) -> (i64, i32) {
    let p = path("/nonexistent-nodeproof/x");
    let t = path("/nonexistent-nodeproof/y");
    // SAFETY: plain syscalls on valid C strings.
    let rc = unsafe {
        match nr {
            MKDIR => libc::syscall(libc::SYS_mkdir, p.as_ptr(), 0o755),
            RMDIR => libc::syscall(libc::SYS_rmdir, p.as_ptr()),
            CHMOD => libc::syscall(libc::SYS_chmod, p.as_ptr(), 0o755),
            SYMLINK => libc::syscall(libc::SYS_symlink, p.as_ptr(), t.as_ptr()),
            _ => unreachable!(),
        }
    };
    (
        rc,
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
    )
}

/// Forks; the child runs `f` and `_exit`s with its result. Returns (pid, wait status).
fn in_child(f: impl FnOnce() -> i32) -> (u32, i32) {
    // SAFETY: the child only runs `f` and exits without unwinding into the harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(101);
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    (pid as u32, status)
}

fn exited_ok(status: i32) -> bool {
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}

/// (nr, errno, action) → count for one process. The programs' own counters
/// go to the test's output (shown when it fails): a count that is short by
/// one is told apart there (an unjudged first exit, a failed state creation).
fn counts_of(t: &Tracer, pid: u32) -> HashMap<(i32, i32, Action), u64> {
    eprintln!("{} pid {pid}: {:?}", t.strategy(), t.stats());
    let mut m = HashMap::new();
    for (k, n) in t.counts().unwrap() {
        if k.pid == pid {
            *m.entry((k.nr, k.errno, k.action)).or_default() += n;
        }
    }
    m
}

fn expect(pairs: &[((i32, i32, Action), u64)]) -> HashMap<(i32, i32, Action), u64> {
    pairs.iter().copied().collect()
}

#[test]
fn probing_picks_the_first_strategy_that_loads_and_records_refusals() {
    let Some(_) = require(&[TRACING]) else {
        return;
    };
    let t = Tracer::start(&cfg(None)).unwrap();
    if t.strategy() != Strategy::Fexit {
        let refused: Vec<_> = t.attempts().iter().map(|a| a.strategy).collect();
        assert_eq!(refused[0], Strategy::Fexit);
        assert!(!refused.contains(&t.strategy()));
    }
    let r = nodeproof_trace::Readiness::of(Ok(&t));
    assert!(r.ready);
    assert!(r.message.contains(t.strategy().as_str()), "{}", r.message);
}

#[test]
fn errno_with_several_errnos_exact_per_strategy() {
    let Some(_) = require(&[TRACING]) else {
        return;
    };
    for s in strategies() {
        let t = Tracer::start(&cfg(Some(s))).unwrap();
        let (pid, status) = in_child(|| {
            install(&[
                ("mkdir", ScmpAction::Errno(libc::EPERM)),
                ("rmdir", ScmpAction::Errno(libc::EACCES)),
                ("chmod", ScmpAction::Errno(libc::EROFS)),
            ]);
            let mut bad = 0;
            for _ in 0..5 {
                bad += i32::from(call(MKDIR) != (-1, libc::EPERM));
            }
            for _ in 0..3 {
                bad += i32::from(call(RMDIR) != (-1, libc::EACCES));
            }
            for _ in 0..7 {
                bad += i32::from(call(CHMOD) != (-1, libc::EROFS));
            }
            // An allowed call that fails on its own is not a denial.
            bad += i32::from(call(SYMLINK).1 != libc::ENOENT);
            bad
        });
        assert!(exited_ok(status), "{s}: child status {status:#x}");
        assert_eq!(
            counts_of(&t, pid),
            expect(&[
                ((MKDIR, libc::EPERM, Action::Errno), 5),
                ((RMDIR, libc::EACCES, Action::Errno), 3),
                ((CHMOD, libc::EROFS, Action::Errno), 7),
            ]),
            "{s}"
        );
        assert_eq!(t.stats().unwrap().lost_counts, 0);
    }
}

#[test]
fn kill_process_counts_one_kill() {
    let Some(_) = require(&[TRACING]) else {
        return;
    };
    for s in strategies() {
        let t = Tracer::start(&cfg(Some(s))).unwrap();
        let (pid, status) = in_child(|| {
            install(&[("mkdir", ScmpAction::KillProcess)]);
            call(MKDIR);
            0
        });
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSYS,
            "{s}: {status:#x}"
        );
        assert_eq!(
            counts_of(&t, pid),
            expect(&[((MKDIR, 0, Action::Kill), 1)]),
            "{s}"
        );
    }
}

/// Forks a child that stops for its parent's ptrace (PTRACE_TRACEME), then
/// runs `f`; the parent follows every syscall stop (PTRACE_SYSCALL), as
/// strace, gdb or `nodeproof profile test`'s sandbox do, until the child is
/// gone. Returns (pid, wait status).
fn in_traced_child(f: impl FnOnce() -> i32) -> (u32, i32) {
    // SAFETY: the child only asks to be traced, stops, runs `f` and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        unsafe {
            libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0);
            libc::raise(libc::SIGSTOP);
        }
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(101);
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    loop {
        // SAFETY: waiting for and resuming our own tracee.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            return (pid as u32, status);
        }
        // A signal stop other than a syscall stop hands the signal on (the
        // first SIGSTOP is swallowed; SIGSYS from a KILL is fatal anyway).
        let sig = libc::WSTOPSIG(status);
        let deliver = if sig == libc::SIGSTOP || sig == libc::SIGTRAP {
            0
        } else {
            sig
        };
        unsafe { libc::ptrace(libc::PTRACE_SYSCALL, pid, 0, deliver) };
    }
}

/// Under a ptrace tracer (strace, a debugger) every syscall stops twice and the
/// task sleeps in each stop; a KILL_PROCESS denial was counted twice (a
/// phantom `errno 0` beside the kill), since seccomp marks the task dead
/// without a filter install. One denial is one row, traced or not.
#[test]
fn a_ptraced_process_counts_each_denial_once() {
    let Some(_) = require(&[TRACING]) else {
        return;
    };
    for s in strategies() {
        let t = Tracer::start(&cfg(Some(s))).unwrap();
        let (pid, status) = in_traced_child(|| {
            install(&[("mkdir", ScmpAction::KillProcess)]);
            for _ in 0..3 {
                call(RMDIR); // allowed: fails with ENOENT, no denial
            }
            call(MKDIR);
            0
        });
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSYS,
            "{s}: {status:#x}"
        );
        assert_eq!(
            counts_of(&t, pid),
            expect(&[((MKDIR, 0, Action::Kill), 1)]),
            "{s}"
        );
        let (pid, status) = in_traced_child(|| {
            install(&[("mkdir", ScmpAction::Errno(libc::EPERM))]);
            for _ in 0..4 {
                call(RMDIR);
                call(MKDIR);
            }
            0
        });
        assert!(exited_ok(status), "{s}: {status:#x}");
        assert_eq!(
            counts_of(&t, pid),
            expect(&[((MKDIR, libc::EPERM, Action::Errno), 4)]),
            "{s}"
        );
    }
}

extern "C" fn deny_in_thread(_: *mut libc::c_void) -> *mut libc::c_void {
    call(MKDIR);
    std::ptr::null_mut()
}

#[test]
fn kill_thread_counts_one_kill_and_the_process_lives_on() {
    let Some(_) = require(&[TRACING]) else {
        return;
    };
    for s in strategies() {
        let t = Tracer::start(&cfg(Some(s))).unwrap();
        let (pid, status) = in_child(|| {
            install(&[("mkdir", ScmpAction::KillThread)]);
            // A raw pthread: std's join expects the thread to finish its Rust epilogue.
            let mut th: libc::pthread_t = 0;
            // SAFETY: valid thread function and out pointer.
            unsafe {
                libc::pthread_create(
                    &mut th,
                    std::ptr::null(),
                    deny_in_thread,
                    std::ptr::null_mut(),
                );
                libc::pthread_join(th, std::ptr::null_mut());
            }
            0
        });
        assert!(exited_ok(status), "{s}: {status:#x}");
        assert_eq!(
            counts_of(&t, pid),
            expect(&[((MKDIR, 0, Action::Kill), 1)]),
            "{s}"
        );
    }
}

static TRAPS: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_sigsys(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    TRAPS.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn trap_counts_as_trap_not_errno() {
    let Some(_) = require(&[TRACING]) else {
        return;
    };
    for s in strategies() {
        let t = Tracer::start(&cfg(Some(s))).unwrap();
        let (pid, status) = in_child(|| {
            // SAFETY: installing a handler that only bumps an atomic.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_sigsys as *const () as usize;
                sa.sa_flags = libc::SA_SIGINFO;
                libc::sigaction(libc::SIGSYS, &sa, std::ptr::null_mut());
            }
            install(&[("mkdir", ScmpAction::Trap)]);
            for _ in 0..4 {
                call(MKDIR);
            }
            TRAPS.load(Ordering::Relaxed) as i32
        });
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 4,
            "{s}: {status:#x}"
        );
        assert_eq!(
            counts_of(&t, pid),
            expect(&[((MKDIR, 0, Action::Trap), 4)]),
            "{s}"
        );
    }
}

#[test]
fn log_action_is_not_a_denial() {
    let Some(_) = require(&[TRACING]) else {
        return;
    };
    for s in strategies() {
        let t = Tracer::start(&cfg(Some(s))).unwrap();
        let (pid, status) = in_child(|| {
            install(&[("mkdir", ScmpAction::Log)]);
            (0..3)
                .map(|_| i32::from(call(MKDIR).1 != libc::ENOENT))
                .sum()
        });
        assert!(exited_ok(status), "{s}");
        assert_eq!(counts_of(&t, pid), HashMap::new(), "{s}");
    }
}

#[test]
fn multithreaded_denials_are_exact() {
    let Some(_) = require(&[TRACING]) else {
        return;
    };
    for s in strategies() {
        let t = Tracer::start(&cfg(Some(s))).unwrap();
        let (pid, status) = in_child(|| {
            install(&[("mkdir", ScmpAction::Errno(libc::EPERM))]);
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    std::thread::spawn(|| {
                        for _ in 0..2500 {
                            call(MKDIR);
                        }
                    })
                })
                .collect();
            threads.into_iter().for_each(|h| h.join().unwrap());
            0
        });
        assert!(exited_ok(status), "{s}");
        assert_eq!(
            counts_of(&t, pid),
            expect(&[((MKDIR, libc::EPERM, Action::Errno), 10_000)]),
            "{s}"
        );
        let st = t.stats().unwrap();
        assert_eq!(st.lost_counts, 0);
    }
}

#[test]
fn fork_exec_chain_counts_each_process() {
    let Some(_) = require(&[TRACING]) else {
        return;
    };
    for s in strategies() {
        let t = Tracer::start(&cfg(Some(s))).unwrap();
        let mut fds = [0; 2];
        // SAFETY: pipe with a valid array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let (child, status) = in_child(|| {
            install(&[("mkdir", ScmpAction::Errno(libc::EPERM))]);
            for i in 0..3 {
                // SAFETY: the grandchild only execs.
                let pid = unsafe { libc::fork() };
                if pid == 0 {
                    let prog = path("/bin/mkdir");
                    let arg = path(&format!("/nonexistent-nodeproof/{i}"));
                    let argv = [prog.as_ptr(), arg.as_ptr(), std::ptr::null()];
                    unsafe {
                        libc::execv(prog.as_ptr(), argv.as_ptr());
                        libc::_exit(127);
                    }
                }
                let bytes = (pid as u32).to_ne_bytes();
                unsafe {
                    libc::write(fds[1], bytes.as_ptr().cast(), 4);
                    libc::waitpid(pid, std::ptr::null_mut(), 0);
                }
            }
            // The child's own denial, after its children.
            call(MKDIR);
            0
        });
        assert!(exited_ok(status), "{s}");
        let mut buf = [0u8; 12];
        // SAFETY: reading into a valid buffer, then closing our fds.
        unsafe {
            assert_eq!(libc::read(fds[0], buf.as_mut_ptr().cast(), 12), 12);
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        let one = expect(&[((MKDIR, libc::EPERM, Action::Errno), 1)]);
        assert_eq!(counts_of(&t, child), one, "{s}: child");
        let rows = t.counts().unwrap();
        for c in buf.chunks(4) {
            let gc = u32::from_ne_bytes(c.try_into().unwrap());
            assert_eq!(counts_of(&t, gc), one, "{s}: grandchild {gc}");
            assert!(rows.iter().any(|(k, _)| k.pid == gc && k.comm == "mkdir"));
        }
    }
}

#[test]
fn nested_filters_and_the_second_install_is_not_a_denial() {
    let Some(_) = require(&[TRACING]) else {
        return;
    };
    for s in strategies() {
        let t = Tracer::start(&cfg(Some(s))).unwrap();
        let (pid, status) = in_child(|| {
            install(&[("mkdir", ScmpAction::Errno(libc::EPERM))]);
            call(MKDIR);
            call(MKDIR);
            install(&[("rmdir", ScmpAction::Errno(libc::EACCES))]);
            for _ in 0..3 {
                call(MKDIR);
            }
            for _ in 0..4 {
                call(RMDIR);
            }
            0
        });
        assert!(exited_ok(status), "{s}");
        assert_eq!(
            counts_of(&t, pid),
            expect(&[
                ((MKDIR, libc::EPERM, Action::Errno), 5),
                ((RMDIR, libc::EACCES, Action::Errno), 4),
            ]),
            "{s}"
        );
    }
}

#[test]
fn filter_installed_mid_run() {
    let Some(_) = require(&[TRACING]) else {
        return;
    };
    for s in strategies() {
        let t = Tracer::start(&cfg(Some(s))).unwrap();
        let (pid, status) = in_child(|| {
            // Unconfined and failing on its own (ENOENT): nothing to report.
            for _ in 0..3 {
                call(RMDIR);
            }
            std::thread::sleep(Duration::from_millis(20));
            install(&[("rmdir", ScmpAction::Errno(libc::EPERM))]);
            for _ in 0..4 {
                call(RMDIR);
            }
            0
        });
        assert!(exited_ok(status), "{s}");
        assert_eq!(
            counts_of(&t, pid),
            expect(&[((RMDIR, libc::EPERM, Action::Errno), 4)]),
            "{s}"
        );
    }
}

/// A fork storm and a compiler, both unconfined and under a filter that
/// denies only a syscall they never make (`reboot`), in one v1 pids cgroup
/// plus one v2 cgroup: not one denial may be reported for any of them.
#[test]
fn busy_workloads_produce_no_false_denials() {
    let Some(_) = require(&[TRACING, Need::Cgroup2, Need::Tool("cc")]) else {
        return;
    };
    let v2 = CgroupDir::create("unified").expect("Need::Cgroup2 holds");
    for s in strategies() {
        let t = Tracer::start(&cfg(Some(s))).unwrap();
        let before = t.stats().unwrap();
        let workload = |confined: bool| {
            let procs = v2.procs.clone();
            in_child(move || {
                std::fs::write(&procs, "0").expect("join test cgroup");
                if confined {
                    install(&[("reboot", ScmpAction::Errno(libc::EPERM))]);
                }
                let sh = "for i in $(seq 150); do /bin/true; done; \
                          printf 'int main(void){return 0;}' > /tmp/np-$$.c && \
                          cc -O2 -o /tmp/np-$$ /tmp/np-$$.c && /tmp/np-$$; rc=$?; rm -f /tmp/np-$$ /tmp/np-$$.c; exit $rc";
                let threads: Vec<_> = (0..3)
                    .map(|_| {
                        std::thread::spawn(|| {
                            for _ in 0..2000 {
                                // SAFETY: getppid has no arguments.
                                unsafe { libc::getppid() };
                            }
                        })
                    })
                    .collect();
                let ok = std::process::Command::new("/bin/sh")
                    .args(["-c", sh])
                    .status()
                    .map(|st| st.success())
                    .unwrap_or(false);
                threads.into_iter().for_each(|h| h.join().unwrap());
                i32::from(!ok)
            })
        };
        let (p1, st1) = workload(false);
        let (p2, st2) = workload(true);
        assert!(exited_ok(st1) && exited_ok(st2), "{s}: {st1:#x} {st2:#x}");
        assert!(counts_of(&t, p1).is_empty(), "{s}");
        assert!(counts_of(&t, p2).is_empty(), "{s}");
        let false_ones: Vec<_> = t
            .counts()
            .unwrap()
            .into_iter()
            .filter(|(k, _)| k.cgroup_id == v2.id)
            .collect();
        assert!(false_ones.is_empty(), "{s}: false denials {false_ones:?}");
        // The confined storm's new tasks were seen (their first exits were not judged).
        let after = t.stats().unwrap();
        assert!(
            after.unjudged_first_exits > before.unjudged_first_exits + 100,
            "{s}: before {before:?}, after {after:?}"
        );
    }
}

/// `run_with` end to end: JSON samples while the run lasts, then the summary
/// line with exact counts and attribution through a kubepods-shaped cgroup.
#[test]
fn run_json_summary_is_exact_and_attributed() {
    let Some(_) = require(&[TRACING, Need::Cgroup2]) else {
        return;
    };
    let uid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
    let id = "ab".repeat(32);
    let cg = CgroupDir::create_at("unified", &format!("kubepods/burstable/pod{uid}/{id}"))
        .expect("Need::Cgroup2 holds");
    let mut tracer = Tracer::start(&cfg(None)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let child_pid = Arc::new(AtomicU32::new(0));
    let worker = {
        let (stop, child_pid, procs) = (stop.clone(), child_pid.clone(), cg.procs.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let (pid, status) = in_child(move || {
                std::fs::write(&procs, "0").expect("join cgroup");
                // SAFETY: PR_SET_NAME with a valid C string.
                unsafe { libc::prctl(libc::PR_SET_NAME, c"np-e2e".as_ptr()) };
                install(&[("mkdir", ScmpAction::Errno(libc::EPERM))]);
                for _ in 0..6 {
                    call(MKDIR);
                }
                0
            });
            child_pid.store(pid, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(200));
            stop.store(true, Ordering::SeqCst);
            status
        })
    };
    let opts = TraceOptions {
        comm: Some("np-e2e".into()),
        format: OutputFormat::Json,
        ..TraceOptions::default()
    };
    let mut out = Vec::new();
    let summary = nodeproof_trace::run_with(
        &mut tracer,
        &opts,
        &mut out,
        &stop,
        CgroupResolver::host(),
        &NoPodLookup,
    )
    .unwrap();
    assert!(exited_ok(worker.join().unwrap()));
    let pid = child_pid.load(Ordering::SeqCst);
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (last, samples) = lines.split_last().unwrap();
    assert_eq!(samples.len(), 6, "{text}");
    for sm in samples {
        assert_eq!(sm["pid"], pid);
        assert_eq!(sm["syscall"], "mkdir");
        assert_eq!(sm["errno"], 1);
        assert_eq!(sm["container_id"], id.as_str());
        assert_eq!(sm["pod_uid"], uid);
    }
    assert_eq!(summary.count(pid, MKDIR, libc::EPERM, Action::Errno), 6);
    let row = &last["summary"][0];
    assert_eq!(last["summary"].as_array().unwrap().len(), 1, "{last}");
    assert_eq!(row["pid"], pid);
    assert_eq!(row["comm"], "np-e2e");
    assert_eq!(row["syscall"], "mkdir");
    assert_eq!(row["nr"], 83);
    assert_eq!(row["action"], "errno");
    assert_eq!(row["errno"], 1);
    assert_eq!(row["count"], 6);
    assert_eq!(row["container_id"], id.as_str());
    assert_eq!(row["pod_uid"], uid);
    assert_eq!(last["dropped"], 0);
    assert_eq!(last["strategy"], tracer.strategy().as_str());
}

/// A container that lives a few milliseconds keeps its pod attribution: a
/// kubelet-shaped cgroup (systemd driver, containerd) is created after the
/// tracer attached, a process in it makes 5 denied `mkdir`s and exits, and the
/// cgroup is removed at once. Samples are off for it (sampling only this test
/// process), so nothing resolves the cgroup while it exists: the summary's
/// rows are attributed at the end, when neither the directory nor
/// `/proc/<pid>` is left, from what the `cgroup_mkdir` feed delivered. Every
/// strategy this kernel loads.
#[test]
fn short_lived_container_keeps_its_pod_attribution() {
    let Some(_) = require(&[TRACING, Need::Cgroup2]) else {
        return;
    };
    let uid = "5d4c3b2a-1908-4f7e-8d6c-5b4a39281706";
    let id = "cd".repeat(32);
    let scope = format!(
        "kubepods.slice/kubepods-pod{}.slice/cri-containerd-{id}.scope",
        uid.replace('-', "_")
    );
    for strategy in strategies() {
        let mut tracer = Tracer::start(&TracerConfig {
            strategy: Some(strategy),
            sample_pid: Some(std::process::id()),
            ..TracerConfig::default()
        })
        .unwrap();
        assert!(tracer.cgroup_feed(), "{strategy}: no cgroup creation feed");
        let stop = Arc::new(AtomicBool::new(false));
        let worker = {
            let (stop, scope) = (stop.clone(), scope.clone());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(150));
                let started = std::time::Instant::now();
                let cg = CgroupDir::create_at("unified", &scope).expect("Need::Cgroup2 holds");
                let procs = cg.procs.clone();
                let (pid, status) = in_child(move || {
                    std::fs::write(&procs, "0").expect("join cgroup");
                    // SAFETY: PR_SET_NAME with a valid C string.
                    unsafe { libc::prctl(libc::PR_SET_NAME, c"np-short".as_ptr()) };
                    install(&[("mkdir", ScmpAction::Errno(libc::EPERM))]);
                    (0..5)
                        .map(|_| i32::from(call(MKDIR) != (-1, libc::EPERM)))
                        .sum()
                });
                let leaf = cg.leaf.clone();
                drop(cg);
                let lived = started.elapsed();
                assert!(!leaf.exists(), "the test cgroup was not removed");
                std::thread::sleep(Duration::from_millis(250));
                stop.store(true, Ordering::SeqCst);
                (pid, status, lived)
            })
        };
        let opts = TraceOptions {
            format: OutputFormat::Json,
            ..TraceOptions::default()
        };
        let mut out = Vec::new();
        let summary = nodeproof_trace::run_with(
            &mut tracer,
            &opts,
            &mut out,
            &stop,
            CgroupResolver::host(),
            &NoPodLookup,
        )
        .unwrap();
        let (pid, status, lived) = worker.join().unwrap();
        assert!(exited_ok(status), "{strategy}: child status {status}");
        // How long it lived is the machine's business (tens of ms here, more
        // under load); what matters is that nothing of it is left to resolve.
        eprintln!("{strategy}: cgroup created, used and removed in {lived:?}");
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
        let rows: Vec<_> = summary.summary.iter().filter(|r| r.pid == pid).collect();
        assert_eq!(rows.len(), 1, "{strategy}: {rows:?}");
        let row = rows[0];
        assert_eq!(
            (row.nr, row.errno, row.action),
            (MKDIR, libc::EPERM, Action::Errno)
        );
        assert_eq!(row.count, 5, "{strategy}");
        assert_eq!(row.comm, "np-short");
        assert_eq!(row.pod_uid.as_deref(), Some(uid), "{strategy}: {row:?}");
        assert_eq!(row.container_id.as_deref(), Some(id.as_str()), "{strategy}");
        assert!(
            row.cgroup.as_deref().is_some_and(|c| c.ends_with(&scope)),
            "{strategy}: {row:?}"
        );
    }
}

/// No BTF (forced with a BTF path that does not exist): fexit and tp_btf are
/// refused, in probe order, as KernelUnsupported naming the missing BTF; the
/// tracepoint strategy loads its BTF-free variant (seccomp.mode at a probed
/// offset, task->stack for a KILL's syscall) and still counts ERRNO and KILL exactly.
#[test]
fn without_btf_the_tracepoint_strategy_runs_btf_free_and_stays_exact() {
    let Some(_) = require(&[TRACING]) else {
        return;
    };
    let no_btf = TracerConfig {
        btf_path: Some("/nonexistent-nodeproof/vmlinux".into()),
        ..TracerConfig::default()
    };
    let t = Tracer::start(&no_btf).expect("tracepoint without BTF");
    assert_eq!(t.strategy(), Strategy::Tracepoint);
    let offset = t.btf_free_offset().expect("BTF-free variant");
    assert!(
        t.cgroup_feed(),
        "the BTF-free variant feeds cgroup creations too"
    );
    let order: Vec<Strategy> = t.attempts().iter().map(|a| a.strategy).collect();
    assert_eq!(order, vec![Strategy::Fexit, Strategy::TpBtf]);
    for a in t.attempts() {
        assert_eq!(a.reason, loader::FailureReason::KernelUnsupported, "{a}");
        assert!(
            a.detail
                .contains("no BTF at /nonexistent-nodeproof/vmlinux"),
            "{a}"
        );
    }
    eprintln!("probed task_struct.seccomp.mode offset: {offset}");

    let (pid, status) = in_child(|| {
        install(&[
            ("mkdir", ScmpAction::Errno(libc::EPERM)),
            ("rmdir", ScmpAction::Errno(libc::EACCES)),
        ]);
        let mut bad = 0;
        for _ in 0..5 {
            bad += i32::from(call(MKDIR) != (-1, libc::EPERM));
        }
        for _ in 0..3 {
            bad += i32::from(call(RMDIR) != (-1, libc::EACCES));
        }
        bad
    });
    assert!(exited_ok(status));
    assert_eq!(
        counts_of(&t, pid),
        expect(&[
            ((MKDIR, libc::EPERM, Action::Errno), 5),
            ((RMDIR, libc::EACCES, Action::Errno), 3),
        ])
    );
    let (pid, status) = in_child(|| {
        install(&[("chmod", ScmpAction::KillProcess)]);
        call(CHMOD);
        0
    });
    assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSYS);
    // task->stack was probed too, so the KILL's syscall is known.
    assert_eq!(counts_of(&t, pid), expect(&[((CHMOD, 0, Action::Kill), 1)]));
    // Unconfined and allowed syscalls: nothing (the probe's own thread included).
    assert!(t
        .counts()
        .unwrap()
        .iter()
        .all(|(k, _)| k.pid != std::process::id()));
}

/// Nothing loads without BTF when the tracepoint strategy cannot run either
/// (forced fexit/tp_btf): the refusal is KernelUnsupported and says why.
#[test]
fn without_btf_btf_strategies_refuse_as_kernel_unsupported() {
    let Some(_) = require(&[TRACING]) else {
        return;
    };
    for s in [Strategy::Fexit, Strategy::TpBtf] {
        let err = match Tracer::start(&TracerConfig {
            strategy: Some(s),
            btf_path: Some("/nonexistent-nodeproof/vmlinux".into()),
            ..TracerConfig::default()
        }) {
            Ok(_) => panic!("{s} loaded without BTF"),
            Err(e) => e,
        };
        let TraceError::NoStrategy { attempts, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0].reason, loader::FailureReason::KernelUnsupported);
        assert_eq!(
            nodeproof_trace::Readiness::failed(&err).reason,
            "KernelUnsupported"
        );
    }
}

/// An external BTF file (here a copy of the kernel's) serves the tracepoint
/// strategy's CO-RE reads: counts stay exact.
#[test]
fn tracepoint_strategy_with_an_external_btf_file() {
    let Some(_) = require(&[TRACING, Need::Btf]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("vmlinux.btf");
    std::fs::copy("/sys/kernel/btf/vmlinux", &copy).expect("copy kernel BTF");
    let t = Tracer::start(&TracerConfig {
        strategy: Some(Strategy::Tracepoint),
        btf_path: Some(copy),
        ..TracerConfig::default()
    })
    .unwrap();
    let (pid, status) = in_child(|| {
        install(&[("mkdir", ScmpAction::Errno(libc::EPERM))]);
        (0..3)
            .map(|_| i32::from(call(MKDIR).1 != libc::EPERM))
            .sum()
    });
    assert!(exited_ok(status));
    assert_eq!(
        counts_of(&t, pid),
        expect(&[((MKDIR, libc::EPERM, Action::Errno), 3)])
    );
}

/// USER_NOTIF: a child loads a filter that notifies on mkdir (with a
/// listener), the parent takes the listener fd with pidfd_getfd and answers:
/// 4 calls with an error (EACCES), 2 with a value (emulated: not a denial),
/// 3 with CONTINUE (the call really runs and fails with ENOENT: not a denial).
/// Then 5 ERRNO denials of the same syscall from a second filter must stay `errno`.
#[test]
fn user_notif_error_is_notify_error_not_errno() {
    use libseccomp::{ScmpNotifReq, ScmpNotifResp, ScmpNotifRespFlags};
    let Some(_) = require(&[TRACING]) else {
        return;
    };
    for s in strategies() {
        let t = Tracer::start(&cfg(Some(s))).unwrap();
        let mut fds = [0; 2];
        // SAFETY: pipe with a valid array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child only runs the closure below and _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = std::panic::catch_unwind(|| {
                let mut f = ScmpFilterContext::new(ScmpAction::Allow).unwrap();
                f.add_rule(ScmpAction::Notify, ScmpSyscall::from_name("mkdir").unwrap())
                    .unwrap();
                f.load().unwrap();
                let fd = f.get_notify_fd().unwrap();
                // SAFETY: writing 4 bytes from a valid buffer.
                unsafe { libc::write(fds[1], (&fd as *const i32).cast(), 4) };
                let mut got = Vec::new();
                for _ in 0..9 {
                    got.push(call(MKDIR));
                }
                let want: Vec<(i64, i32)> = [(-1, libc::EACCES); 4]
                    .into_iter()
                    .chain([(0, 0); 2].into_iter().map(|(r, _)| (r, -1)))
                    .chain([(-1, libc::ENOENT); 3])
                    .collect();
                let mut bad = 0;
                for (g, w) in got.iter().zip(&want) {
                    // An emulated success leaves errno unspecified: compare the return only.
                    bad += i32::from(g.0 != w.0 || (w.1 >= 0 && g.1 != w.1));
                }
                install(&[("mkdir", ScmpAction::Errno(libc::EPERM))]);
                for _ in 0..5 {
                    bad += i32::from(call(MKDIR) != (-1, libc::EPERM));
                }
                bad
            })
            .unwrap_or(101);
            unsafe { libc::_exit(code) };
        }
        let mut child_fd = 0i32;
        // SAFETY: reading 4 bytes into a valid i32; pidfd syscalls on our own child.
        let listener = unsafe {
            assert_eq!(libc::read(fds[0], (&mut child_fd as *mut i32).cast(), 4), 4);
            let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
            assert!(pidfd >= 0, "pidfd_open");
            let fd = libc::syscall(libc::SYS_pidfd_getfd, pidfd, child_fd, 0) as i32;
            assert!(fd >= 0, "pidfd_getfd");
            libc::close(pidfd);
            fd
        };
        for i in 0..9 {
            let req = ScmpNotifReq::receive(listener).expect("receive");
            let resp = match i {
                0..=3 => {
                    ScmpNotifResp::new_error(req.id, -libc::EACCES, ScmpNotifRespFlags::empty())
                }
                4..=5 => ScmpNotifResp::new_val(req.id, 0, ScmpNotifRespFlags::empty()),
                _ => ScmpNotifResp::new_val(req.id, 0, ScmpNotifRespFlags::CONTINUE),
            };
            resp.respond(listener).expect("respond");
        }
        let mut status = 0;
        // SAFETY: closing our fds and waiting for our own child.
        unsafe {
            libc::close(listener);
            libc::close(fds[0]);
            libc::close(fds[1]);
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        }
        assert!(exited_ok(status), "{s}: {status:#x}");
        assert_eq!(
            counts_of(&t, pid as u32),
            expect(&[
                ((MKDIR, libc::EACCES, Action::NotifyError), 4),
                ((MKDIR, libc::EPERM, Action::Errno), 5),
            ]),
            "{s}"
        );
        assert!(t.stats().unwrap().notify_emulated >= 2, "{s}");
    }
}

/// The notified thread in a pid namespace of its own (a container's), the
/// supervisor in the host's: the RECV names it by its host pid, and its exit
/// finds the mark one level up its pid numbers.
#[test]
fn user_notif_from_a_child_pid_namespace_is_notify_error() {
    use libseccomp::{ScmpNotifReq, ScmpNotifResp, ScmpNotifRespFlags};
    let Some(_) = require(&[TRACING]) else {
        return;
    };
    for s in strategies().into_iter().filter(|s| *s != Strategy::Fexit) {
        let t = Tracer::start(&cfg(Some(s))).unwrap();
        let before = t.stats().unwrap().notify_emulated;
        // fds: [read, write] for the listener fd number, then for the host pid.
        let (mut fd_pipe, mut pid_pipe) = ([0; 2], [0; 2]);
        // SAFETY: pipes with valid arrays.
        unsafe {
            assert_eq!(libc::pipe(fd_pipe.as_mut_ptr()), 0);
            assert_eq!(libc::pipe(pid_pipe.as_mut_ptr()), 0);
        }
        // SAFETY: the middle process moves its children into a new pid
        // namespace, forks the notifying one, reports its host pid and
        // exits with its status.
        let middle = unsafe { libc::fork() };
        assert!(middle >= 0, "fork");
        if middle == 0 {
            unsafe {
                if libc::unshare(libc::CLONE_NEWPID) != 0 {
                    libc::_exit(90);
                }
                let inner = libc::fork();
                if inner == 0 {
                    let code = std::panic::catch_unwind(|| {
                        assert_eq!(libc::getpid(), 1, "pid 1 of its own namespace");
                        let mut f = ScmpFilterContext::new(ScmpAction::Allow).unwrap();
                        f.add_rule(ScmpAction::Notify, ScmpSyscall::from_name("mkdir").unwrap())
                            .unwrap();
                        f.load().unwrap();
                        let fd = f.get_notify_fd().unwrap();
                        libc::write(fd_pipe[1], (&fd as *const i32).cast(), 4);
                        let mut bad = 0;
                        for _ in 0..2 {
                            bad += i32::from(call(MKDIR) != (-1, libc::EIO));
                        }
                        bad + i32::from(call(MKDIR).0 != 0)
                    })
                    .unwrap_or(101);
                    libc::_exit(code);
                }
                libc::write(pid_pipe[1], (&inner as *const i32).cast(), 4);
                let mut st = 0;
                libc::waitpid(inner, &mut st, 0);
                libc::_exit(if libc::WIFEXITED(st) {
                    libc::WEXITSTATUS(st)
                } else {
                    99
                });
            }
        }
        let (mut child_fd, mut host_pid) = (0i32, 0i32);
        // SAFETY: reading 4 bytes into valid i32s; pidfd syscalls on our grandchild.
        let listener = unsafe {
            assert_eq!(
                libc::read(pid_pipe[0], (&mut host_pid as *mut i32).cast(), 4),
                4
            );
            assert_eq!(
                libc::read(fd_pipe[0], (&mut child_fd as *mut i32).cast(), 4),
                4
            );
            let pidfd = libc::syscall(libc::SYS_pidfd_open, host_pid, 0) as i32;
            assert!(pidfd >= 0, "pidfd_open");
            let fd = libc::syscall(libc::SYS_pidfd_getfd, pidfd, child_fd, 0) as i32;
            assert!(fd >= 0, "pidfd_getfd");
            libc::close(pidfd);
            fd
        };
        for i in 0..3 {
            let req = ScmpNotifReq::receive(listener).expect("receive");
            assert_eq!(req.pid, host_pid as u32, "the host's number for it");
            let resp = if i < 2 {
                ScmpNotifResp::new_error(req.id, -libc::EIO, ScmpNotifRespFlags::empty())
            } else {
                ScmpNotifResp::new_val(req.id, 0, ScmpNotifRespFlags::empty())
            };
            resp.respond(listener).expect("respond");
        }
        let mut status = 0;
        // SAFETY: closing our fds and waiting for our own child.
        unsafe {
            libc::close(listener);
            for fd in fd_pipe.into_iter().chain(pid_pipe) {
                libc::close(fd);
            }
            assert_eq!(libc::waitpid(middle, &mut status, 0), middle);
        }
        let host_pid = host_pid as u32;
        assert!(exited_ok(status), "{s}: {status:#x}");
        assert_eq!(
            counts_of(&t, host_pid),
            expect(&[((MKDIR, libc::EIO, Action::NotifyError), 2)]),
            "{s}"
        );
        assert!(t.stats().unwrap().notify_emulated > before, "{s}");
    }
}

/// The daemon's pump retires exited processes: their keys leave the kernel's
/// count map (which would otherwise fill with the dead: 16,384 keys), and
/// their counts come back folded into one row with pid 0, the totals exact.
#[test]
fn retiring_pump_empties_the_kernel_map_of_exited_processes_keeping_totals() {
    let Some(_) = require(&[TRACING]) else {
        return;
    };
    let t = Tracer::start(&cfg(None)).unwrap();
    let mut pump = nodeproof_trace::Pump::new(
        t,
        CgroupResolver::host(),
        nodeproof_trace::Filter::default(),
    )
    .retire_exited(nodeproof_trace::process_exited);
    // A comm of our own: the tracer is host-wide and other tests deny too.
    const COMM: &str = "np-retire-test";
    let mut pids = Vec::new();
    for round in 1..=3u64 {
        for _ in 0..50 {
            let (pid, status) = in_child(|| {
                let name = path(COMM);
                // SAFETY: a valid C string for PR_SET_NAME.
                unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
                install(&[("mkdir", ScmpAction::Errno(libc::EPERM))]);
                call(MKDIR);
                call(MKDIR);
                0
            });
            assert!(exited_ok(status));
            pids.push(pid);
        }
        let (rows, stats) = pump.rows(&NoPodLookup).unwrap();
        assert_eq!(stats.lost_counts, 0);
        let ours: Vec<_> = rows
            .iter()
            .filter(|r| r.comm == COMM && r.nr == MKDIR)
            .collect();
        assert!(ours.iter().all(|r| r.pid == 0), "{ours:#?}");
        let total: u64 = ours.iter().map(|r| r.count).sum();
        assert_eq!(total, 100 * round, "round {round}: {stats:?}\n{ours:#?}");
        let left = pump
            .source()
            .counts()
            .unwrap()
            .into_iter()
            .filter(|(k, _)| pids.contains(&k.pid))
            .count();
        assert_eq!(
            left, 0,
            "round {round}: exited processes' keys left in the kernel map"
        );
    }
    eprintln!(
        "150 exited processes, 300 denials: 0 keys left in the kernel map, {} folded rows",
        pump.retired_rows()
    );
}
