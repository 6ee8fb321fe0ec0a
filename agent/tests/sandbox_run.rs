//! `profile::sandbox::run_under_filter` with real commands and the real kernel.

use std::ffi::OsString;

use nodeproof::sandbox::{run_under_filter, DeniedSyscall, SandboxError, SandboxReport};
use nodeproof_bpfgen::compile;
use nodeproof_seccomp::cbpf::SockFilter;
use nodeproof_seccomp::compiler::Errno;
use nodeproof_seccomp::filter::{Action, Arch, FilterSpec, Rule, RuleOrigin};
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
    };
    compile(&spec, Arch::native()).unwrap().program
}

fn argv(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

fn run(prog: &[SockFilter], args: &[&str]) -> SandboxReport {
    run_under_filter(prog, Arch::native(), true, &argv(args)).unwrap()
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
        assert_eq!(
            r,
            SandboxReport {
                exit_code: None,
                signal: Some(libc::SIGSYS),
                denied: Some(DeniedSyscall {
                    nr: mkdir_nr(),
                    name: Some("mkdir".into()),
                    action,
                }),
                exec_failed: None,
            },
            "{action}"
        );
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
        run_under_filter(&prog, Arch::native(), true, &[]),
        Err(SandboxError::EmptyCommand)
    );
    assert_eq!(
        run_under_filter(&[], Arch::native(), true, &argv(&["/bin/true"])),
        Err(SandboxError::ProgramLength { len: 0 })
    );
    let foreign = if Arch::native() == Arch::Aarch64 {
        Arch::X86_64
    } else {
        Arch::Aarch64
    };
    assert!(matches!(
        run_under_filter(&prog, foreign, true, &argv(&["/bin/true"])),
        Err(SandboxError::ForeignArch { .. })
    ));
}

#[test]
fn without_no_new_privs_loading_needs_cap_sys_admin() {
    let prog = program(Action::Allow, &[]);
    // As root (CAP_SYS_ADMIN) loading works without no_new_privs.
    let r = run_under_filter(&prog, Arch::native(), false, &argv(&["/bin/true"])).unwrap();
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
        run_under_filter(&prog, Arch::native(), false, &argv(&["/bin/true"]))
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
