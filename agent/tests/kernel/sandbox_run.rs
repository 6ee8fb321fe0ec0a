//! `profile::sandbox::run_under_filter` with real commands and the real kernel.

use std::ffi::OsString;

use nodeproof::sandbox::{run_under_filter, SandboxError, SandboxReport};
use nodeproof_bpfgen::compile;
use nodeproof_seccomp::cbpf::SockFilter;
use nodeproof_seccomp::compiler::Errno;
use nodeproof_seccomp::filter::{Action, Arch, FilterSpec, Rule, RuleOrigin};
use nodeproof_seccomp::syscalls::Libseccomp;
use nodeproof_testkit::{require, Need, BUSYBOX};

fn program(default_action: Action, rules: &[(&str, Action)]) -> Vec<SockFilter> {
    let spec = FilterSpec {
        default_action,
        arches: vec![],
        rules: rules
            .iter()
            .enumerate()
            .map(|(i, (name, action))| Rule {
                syscall: (*name).into(),
                action: *action,
                conds: vec![],
                origin: RuleOrigin {
                    pointer: format!("/syscalls/{i}").into(),
                    name_index: 0,
                },
            })
            .collect(),
        listener_path: None,
        libseccomp: Libseccomp::V2_5_4,
    };
    compile(&spec, Arch::native()).unwrap().program
}

fn argv(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

fn run(prog: &[SockFilter], args: &[&str]) -> SandboxReport {
    run_under_filter(prog, Arch::native(), true, &argv(args), None).unwrap()
}

fn mkdir_target() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("made").to_str().unwrap().to_string();
    (dir, target)
}

fn mkdir_nr() -> i32 {
    nodeproof_seccomp::syscalls::resolve_syscall("mkdir", Arch::native()).unwrap()
}

#[test]
fn allow_all_runs_true() {
    let prog = program(Action::Allow, &[]);
    assert_eq!(
        run(&prog, &["/bin/true"]),
        SandboxReport {
            exit_code: Some(0),
            ..Default::default()
        }
    );
    let r = run(&prog, &["/bin/false"]);
    assert_eq!(r.exit_code, Some(1));
}

#[test]
fn exit_codes_are_not_exec_failures() {
    let prog = program(Action::Allow, &[]);
    // 127 is also what the child helper uses when exec fails: must not be confused.
    let r = run(&prog, &["sh", "-c", "exit 127"]);
    assert_eq!(r.exit_code, Some(127));
    assert_eq!(r.exec_failed, None);
}

#[test]
fn errno_makes_mkdir_fail_without_signal() {
    let prog = program(
        Action::Allow,
        &[("mkdir", Action::Errno(libc::EPERM as u16))],
    );
    let (_dir, target) = mkdir_target();
    let r = run(&prog, &["/bin/mkdir", &target]);
    assert_ne!(r.exit_code, Some(0));
    assert!(r.exit_code.is_some());
    assert_eq!(r.signal, None);
    assert_eq!(r.denied, None);
    assert!(!std::path::Path::new(&target).exists());
    // Without the rule the same command succeeds.
    let r = run(&program(Action::Allow, &[]), &["/bin/mkdir", &target]);
    assert_eq!(r.exit_code, Some(0));
    assert!(std::path::Path::new(&target).exists());
}

#[test]
fn kill_names_the_syscall() {
    for action in [Action::KillProcess, Action::KillThread, Action::Trap] {
        let prog = program(Action::Allow, &[("mkdir", action)]);
        let (_dir, target) = mkdir_target();
        let r = run(&prog, &["/bin/mkdir", &target]);
        assert_eq!(r.exit_code, None, "{action}");
        assert_eq!(r.signal, Some(libc::SIGSYS), "{action}");
        assert_eq!(r.exec_failed, None, "{action}");
        let d = r.denied.expect("a denial");
        assert_eq!(
            (d.nr, d.name.as_deref(), d.action, d.comm.as_deref()),
            (mkdir_nr(), Some("mkdir"), action, Some("mkdir")),
            "{action}"
        );
        assert!(d.tid > 0);
        if cfg!(target_arch = "x86_64") {
            assert_eq!(mkdir_nr(), 83);
        }
    }
}

#[test]
fn busybox_mkdir_killed_too() {
    let Some(_) = require(&[Need::Busybox]) else {
        return;
    };
    let bb = BUSYBOX;
    let prog = program(Action::Allow, &[("mkdir", Action::KillProcess)]);
    let (_dir, target) = mkdir_target();
    let r = run(&prog, &[bb, "mkdir", &target]);
    assert_eq!(r.signal, Some(libc::SIGSYS));
    assert_eq!(r.denied.map(|d| d.name), Some(Some("mkdir".to_string())));
}

#[test]
fn missing_command_is_an_exec_failure() {
    let prog = program(Action::Allow, &[]);
    for cmd in ["nodeproof-no-such-command", "/nonexistent/nodeproof"] {
        assert_eq!(
            run(&prog, &[cmd]),
            SandboxReport {
                exec_failed: Some(libc::ENOENT),
                ..Default::default()
            },
            "{cmd}"
        );
    }
}

#[test]
fn filter_denying_execve_is_reported() {
    let prog = program(
        Action::Allow,
        &[("execve", Action::Errno(libc::EPERM as u16))],
    );
    assert_eq!(run(&prog, &["/bin/true"]).exec_failed, Some(libc::EPERM));
    let prog = program(Action::Allow, &[("execve", Action::KillProcess)]);
    let r = run(&prog, &["/bin/true"]);
    assert_eq!(r.signal, Some(libc::SIGSYS));
    assert_eq!(r.denied.and_then(|d| d.name).as_deref(), Some("execve"));
}

#[test]
fn bad_input_is_rejected_before_fork() {
    let prog = program(Action::Allow, &[]);
    assert_eq!(
        run_under_filter(&prog, Arch::native(), true, &[], None),
        Err(SandboxError::EmptyCommand)
    );
    assert_eq!(
        run_under_filter(&[], Arch::native(), true, &argv(&["/bin/true"]), None),
        Err(SandboxError::ProgramLength { len: 0 })
    );
    let foreign = if Arch::native() == Arch::Aarch64 {
        Arch::X86_64
    } else {
        Arch::Aarch64
    };
    assert!(matches!(
        run_under_filter(&prog, foreign, true, &argv(&["/bin/true"]), None),
        Err(SandboxError::ForeignArch { .. })
    ));
}

#[test]
fn without_no_new_privs_loading_needs_cap_sys_admin() {
    let prog = program(Action::Allow, &[]);
    // As root (CAP_SYS_ADMIN) loading works without no_new_privs.
    let r = run_under_filter(&prog, Arch::native(), false, &argv(&["/bin/true"]), None).unwrap();
    assert_eq!(r.exit_code, Some(0));

    // Capabilities are per thread: drop CAP_SYS_ADMIN in a throwaway thread.
    let res = std::thread::spawn(move || {
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy, Default)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let mut hdr = Header {
            version: 0x2008_0522,
            pid: 0,
        };
        let mut data = [Data::default(); 2];
        unsafe {
            assert_eq!(
                libc::syscall(libc::SYS_capget, &mut hdr, data.as_mut_ptr()),
                0
            );
            const CAP_SYS_ADMIN: u32 = 21;
            data[0].effective &= !(1 << CAP_SYS_ADMIN);
            assert_eq!(libc::syscall(libc::SYS_capset, &mut hdr, data.as_ptr()), 0);
        }
        run_under_filter(&prog, Arch::native(), false, &argv(&["/bin/true"]), None)
    })
    .join()
    .unwrap();
    assert_eq!(
        res,
        Err(SandboxError::LoadNeedsPrivilege {
            source: Errno(libc::EACCES)
        })
    );
}

#[test]
fn command_starts_with_default_sigpipe_and_no_blocked_signals() {
    // The test harness (like any Rust binary) ignores SIGPIPE; the command must not.
    let prog = program(Action::Allow, &[]);
    let script = "ign=$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/self/status); \
                  blk=$(sed -n 's/^SigBlk:[[:space:]]*//p' /proc/self/status); \
                  [ $(( 0x$ign & 0x1000 )) -eq 0 ] && [ $(( 0x$blk )) -eq 0 ]";
    let r = run(&prog, &["sh", "-c", script]);
    assert_eq!(r.exit_code, Some(0));
}

#[test]
fn real_time_signals_are_passed_on_and_reported() {
    // glibc's own thread signals (cancellation, setxid) are real-time ones:
    // the tracer must pass a stop for one on like any other signal, and a
    // death by one is reported with its number.
    let prog = program(Action::Allow, &[]);
    let rt = libc::SIGRTMIN() + 1;
    let killed = run(&prog, &["sh", "-c", &format!("kill -{rt} $$; exit 0")]);
    assert_eq!(
        killed,
        SandboxReport {
            signal: Some(rt),
            ..Default::default()
        }
    );
    let caught = run(
        &prog,
        &[
            "sh",
            "-c",
            &format!("trap 'exit 7' {rt}; kill -{rt} $$; exit 0"),
        ],
    );
    assert_eq!(caught.exit_code, Some(7));
}

/// The first denial's (action, comm), checking that it was `mkdir`.
fn denial(r: &SandboxReport) -> (Action, Option<&str>) {
    let d = r.denied.as_ref().expect("a denial");
    assert_eq!(d.name.as_deref(), Some("mkdir"), "{r}");
    (d.action, d.comm.as_deref())
}

#[test]
fn denial_in_a_forked_child_is_named_and_the_parent_status_kept() {
    for action in [Action::KillProcess, Action::KillThread, Action::Trap] {
        let prog = program(Action::Allow, &[("mkdir", action)]);
        let (dir, target) = mkdir_target();
        let pidfile = dir.path().join("pid");
        // The child writes its pid, then calls mkdir; the parent exits 3.
        let script = format!(
            "/bin/sh -c 'echo $$ > {}; exec /bin/mkdir {target}'; exit 3",
            pidfile.display()
        );
        let r = run(&prog, &["/bin/sh", "-c", &script]);
        assert_eq!(r.exit_code, Some(3), "{action}: {r}");
        assert_eq!(r.signal, None);
        assert!(!r.succeeded());
        assert_eq!(denial(&r), (action, Some("mkdir")), "{r}");
        let child: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(r.denied.unwrap().tid, child, "{action}");
        assert!(!std::path::Path::new(&target).exists());
    }
}

#[test]
fn denial_after_exec_in_a_grandchild_is_named() {
    let prog = program(Action::Allow, &[("mkdir", Action::KillProcess)]);
    let (_dir, target) = mkdir_target();
    let inner = format!("/bin/sh -c \"/bin/mkdir {target}\"; exit 0");
    let r = run(&prog, &["/bin/sh", "-c", &inner]);
    assert_eq!(r.exit_code, Some(0), "{r}");
    assert_eq!(denial(&r), (Action::KillProcess, Some("mkdir")));
    assert!(!r.succeeded());
}

#[test]
fn busybox_grandchild_denial_is_named() {
    let Some(_) = require(&[Need::Busybox]) else {
        return;
    };
    let prog = program(Action::Allow, &[("mkdir", Action::KillProcess)]);
    let (_dir, target) = mkdir_target();
    // busybox sh execs a lone last command in place: the trailing exits make
    // each shell fork, so mkdir runs in a grandchild.
    let inner = format!("{BUSYBOX} sh -c '{BUSYBOX} mkdir {target}; exit 0'; exit 4");
    let r = run(&prog, &[BUSYBOX, "sh", "-c", &inner]);
    assert_eq!(r.exit_code, Some(4), "{r}");
    assert_eq!(denial(&r), (Action::KillProcess, Some("busybox")));
    assert!(!std::path::Path::new(&target).exists());
}

#[test]
fn denial_in_a_thread_is_named_with_its_tid() {
    let Some(_) = require(&[Need::Tool("python3")]) else {
        return;
    };
    for action in [Action::KillProcess, Action::Trap] {
        let prog = program(Action::Allow, &[("mkdir", action)]);
        let (dir, target) = mkdir_target();
        let tidfile = dir.path().join("tid");
        // The thread records its tid (never the process's pid), names itself
        // and calls mkdir; the filter's SIGSYS ends the whole process.
        let script = format!(
            "import os, threading, ctypes\n\
             def f():\n\
             \x20   open({tid:?}, 'w').write(str(threading.get_native_id()))\n\
             \x20   ctypes.CDLL(None).prctl(15, b'denier', 0, 0, 0)\n\
             \x20   os.mkdir({target:?})\n\
             t = threading.Thread(target=f)\n\
             t.start()\n\
             t.join()\n",
            tid = tidfile.display().to_string(),
        );
        let r = run(&prog, &["python3", "-c", &script]);
        assert_eq!(r.signal, Some(libc::SIGSYS), "{action}: {r}");
        assert_eq!(denial(&r), (action, Some("denier")), "{r}");
        let tid: i32 = std::fs::read_to_string(&tidfile).unwrap().parse().unwrap();
        assert_eq!(r.denied.unwrap().tid, tid, "{action}");
    }
    // Threads that exit on their own end the run with the process's status.
    let prog = program(Action::Allow, &[("mkdir", Action::KillProcess)]);
    let script = "import sys, threading\n\
                  ts = [threading.Thread(target=sum, args=([1],)) for _ in range(8)]\n\
                  [t.start() for t in ts]\n\
                  [t.join() for t in ts]\n\
                  sys.exit(6)\n";
    let r = run(&prog, &["python3", "-c", script]);
    assert_eq!(
        r,
        SandboxReport {
            exit_code: Some(6),
            ..Default::default()
        }
    );
}

#[test]
fn clean_tree_exits_with_the_commands_status_and_no_denial() {
    let prog = program(Action::Allow, &[("mkdir", Action::KillProcess)]);
    let r = run(
        &prog,
        &[
            "/bin/sh",
            "-c",
            "/bin/true & /bin/sh -c 'exit 0' & wait; exit 5",
        ],
    );
    assert_eq!(
        r,
        SandboxReport {
            exit_code: Some(5),
            ..Default::default()
        }
    );
    let r = run(&prog, &["/bin/sh", "-c", "/bin/true & wait"]);
    assert!(r.succeeded(), "{r}");
}

#[test]
fn an_escaped_background_task_is_followed_after_the_command_exits() {
    let prog = program(Action::Allow, &[("mkdir", Action::KillThread)]);
    let (_dir, target) = mkdir_target();
    // The session leader outlives the command, which exits 0 at once.
    let script = format!("setsid /bin/sh -c 'sleep 0.3; exec /bin/mkdir {target}' & exit 0");
    let r = run(&prog, &["/bin/sh", "-c", &script]);
    assert_eq!(r.exit_code, Some(0), "{r}");
    assert_eq!(denial(&r), (Action::KillThread, Some("mkdir")));
}

#[test]
fn too_many_tasks_fail_the_run_and_are_killed() {
    let prog = program(Action::Allow, &[]);
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("survivor");
    // More sleeping children than the bound; any that survived the kill
    // would create the marker.
    let script = format!(
        "i=0; while [ $i -le {} ]; do (sleep 2; touch {}) & i=$((i+1)); done; wait",
        nodeproof::sandbox::MAX_TRACED_TASKS,
        marker.display()
    );
    let r = run_under_filter(
        &prog,
        Arch::native(),
        true,
        &argv(&["/bin/sh", "-c", &script]),
        None,
    );
    assert_eq!(
        r,
        Err(SandboxError::TooManyTasks {
            limit: nodeproof::sandbox::MAX_TRACED_TASKS
        })
    );
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(!marker.exists());
}

#[test]
fn the_time_limit_kills_a_daemon_that_outlives_the_command() {
    let prog = program(Action::Allow, &[]);
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("survivor");
    let script = format!(
        "setsid /bin/sh -c 'sleep 3; touch {}' & exit 0",
        marker.display()
    );
    let started = std::time::Instant::now();
    let r = run_under_filter(
        &prog,
        Arch::native(),
        true,
        &argv(&["/bin/sh", "-c", &script]),
        Some(std::time::Duration::from_millis(300)),
    )
    .unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    assert_eq!(
        r,
        SandboxReport {
            exit_code: Some(0),
            timed_out: true,
            ..Default::default()
        }
    );
    assert!(!r.succeeded());
    std::thread::sleep(std::time::Duration::from_secs(4));
    assert!(!marker.exists());
    // A tree busy forking and exec'ing when the limit strikes: tasks killed
    // at a stop are not errors.
    for _ in 0..5 {
        let r = run_under_filter(
            &prog,
            Arch::native(),
            true,
            &argv(&["/bin/sh", "-c", "while :; do /bin/true & /bin/true; done"]),
            Some(std::time::Duration::from_millis(150)),
        )
        .unwrap();
        assert!(r.timed_out && r.signal == Some(libc::SIGKILL), "{r}");
    }
    // A command done in time is not marked.
    let r = run_under_filter(
        &prog,
        Arch::native(),
        true,
        &argv(&["/bin/true"]),
        Some(std::time::Duration::from_secs(30)),
    )
    .unwrap();
    assert!(r.succeeded() && !r.timed_out, "{r}");
}
