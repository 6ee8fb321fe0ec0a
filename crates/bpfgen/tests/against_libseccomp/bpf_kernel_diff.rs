//! Differential test: the BPF interpreter against the running kernel.
//!
//! Each probe loads a libseccomp-compiled program in a forked child
//! (`PR_SET_NO_NEW_PRIVS` + `seccomp(SECCOMP_SET_MODE_FILTER)`), makes one
//! syscall, and reports its raw result through a pipe. The parent predicts the
//! same outcome from the interpreter and compares. Filters are never loaded in
//! the test process itself.

use std::ffi::CString;

use nodeproof_bpfgen::compile;
use nodeproof_seccomp::cbpf::SockFilter;
use nodeproof_seccomp::cbpf::{run, SeccompData};
use nodeproof_seccomp::filter::{Action, Arch, CmpOp, Cond, FilterSpec, Rule, RuleOrigin};
use nodeproof_seccomp::syscalls::{resolve_syscall, Libseccomp};

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The syscall returned this raw value (`-errno` on failure).
    Returned(i64),
    /// SIGSYS reached the child's handler (SECCOMP_RET_TRAP).
    Trapped,
    /// The child died of this signal.
    Killed(i32),
}

const TRAPPED_EXIT: i32 = 251;
const SETUP_FAILED_EXIT: i32 = 252;

extern "C" fn on_sigsys(_: libc::c_int) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(TRAPPED_EXIT) }
}

fn rule(syscall: &str, action: Action, conds: Vec<Cond>) -> Rule {
    Rule {
        syscall: syscall.into(),
        action,
        conds,
        origin: RuleOrigin {
            pointer: "/syscalls/0".into(),
            name_index: 0,
        },
    }
}

fn eq(index: u8, value: u64) -> Cond {
    Cond {
        index,
        op: CmpOp::Eq,
        value,
        value_two: 0,
    }
}

struct Probe {
    name: &'static str,
    args: [u64; 6],
    /// What the syscall returns when the filter lets it run.
    natural: i64,
}

fn nr(name: &str) -> i64 {
    i64::from(resolve_syscall(name, Arch::native()).unwrap())
}

/// Run the syscall in a forked child under `program` and observe the kernel.
fn kernel(program: &[SockFilter], nr: i64, args: [u64; 6]) -> Outcome {
    let fprog = libc::sock_fprog {
        len: u16::try_from(program.len()).unwrap(),
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: plain C structs; zeroed is a valid initial state.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = on_sigsys as *const () as usize;
    let mut fds = [0; 2];
    // SAFETY: fds has room for two descriptors.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: the child only makes async-signal-safe calls and then _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        unsafe {
            libc::close(fds[0]);
            // A killed child would otherwise dump core into the test's cwd.
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            if libc::sigaction(libc::SIGSYS, &sa, std::ptr::null_mut()) != 0
                || libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    0,
                    &fprog as *const libc::sock_fprog,
                ) != 0
            {
                libc::_exit(SETUP_FAILED_EXIT);
            }
            let r = libc::syscall(nr, args[0], args[1], args[2], args[3], args[4], args[5]);
            let raw: i64 = if r == -1 {
                -i64::from(*libc::__errno_location())
            } else {
                r
            };
            libc::write(fds[1], (&raw as *const i64).cast(), 8);
            libc::_exit(0);
        }
    }
    unsafe { libc::close(fds[1]) };
    let mut status = 0;
    // SAFETY: pid is our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    let mut raw = [0u8; 8];
    // SAFETY: reading at most 8 bytes into raw; the writer has exited.
    let n = unsafe { libc::read(fds[0], raw.as_mut_ptr().cast(), 8) };
    unsafe { libc::close(fds[0]) };
    if libc::WIFSIGNALED(status) {
        return Outcome::Killed(libc::WTERMSIG(status));
    }
    assert!(libc::WIFEXITED(status));
    match libc::WEXITSTATUS(status) {
        0 => {
            assert_eq!(n, 8);
            Outcome::Returned(i64::from_ne_bytes(raw))
        }
        TRAPPED_EXIT => Outcome::Trapped,
        other => panic!("child failed to set up the filter (exit {other})"),
    }
}

/// What the interpreter says the kernel will do.
fn predicted(program: &[SockFilter], probe: &Probe) -> Outcome {
    let data = SeccompData::new(
        i32::try_from(nr(probe.name)).unwrap(),
        Arch::native().audit_arch(),
        probe.args,
    );
    let ret = run(program, &data).unwrap();
    match Action::from_ret(ret).unwrap() {
        Action::Allow | Action::Log => Outcome::Returned(probe.natural),
        // ERRNO(0) makes the syscall "succeed" without running it. (libseccomp
        // refuses data of 4095 and up, so the kernel's MAX_ERRNO clamp never applies.)
        Action::Errno(e) => Outcome::Returned(-i64::from(e)),
        Action::Trap => Outcome::Trapped,
        Action::KillThread | Action::KillProcess => Outcome::Killed(libc::SIGSYS),
        other => panic!("unexpected action {other}"),
    }
}

fn check(spec: &FilterSpec, probes: &[Probe], expect: &[Outcome]) {
    let compiled = compile(spec, Arch::native()).unwrap();
    for (probe, want) in probes.iter().zip(expect) {
        let p = predicted(&compiled.program, probe);
        let k = kernel(&compiled.program, nr(probe.name), probe.args);
        assert_eq!(
            p, k,
            "interpreter vs kernel for {}{:x?}",
            probe.name, probe.args
        );
        // Pin the expected outcome too, so a filter that does nothing fails.
        assert_eq!(&k, want, "{}{:x?}", probe.name, probe.args);
    }
}

fn cstr(s: &str) -> u64 {
    // Leaked on purpose: the pointer must stay valid in forked children.
    CString::new(s).unwrap().into_raw() as u64
}

fn current_personality() -> i64 {
    // SAFETY: 0xffffffff only queries the persona.
    i64::from(unsafe { libc::personality(0xffff_ffff) })
}

const ENOENT: i64 = -(libc::ENOENT as i64);

#[test]
fn errno_actions_match_kernel() {
    let spec = FilterSpec {
        default_action: Action::Allow,
        arches: vec![],
        rules: vec![
            rule("mkdir", Action::Errno(libc::EPERM as u16), vec![]),
            rule("rmdir", Action::Errno(0), vec![]),
            rule("chdir", Action::Errno(4094), vec![]),
            rule("getuid", Action::Errno(libc::EACCES as u16), vec![]),
        ],
        listener_path: None,
        libseccomp: Libseccomp::V2_5_4,
    };
    let missing = cstr("/nonexistent-nodeproof/dir");
    let probes = [
        Probe {
            name: "mkdir",
            args: [missing, 0o755, 0, 0, 0, 0],
            natural: ENOENT,
        },
        Probe {
            name: "rmdir",
            args: [missing, 0, 0, 0, 0, 0],
            natural: ENOENT,
        },
        Probe {
            name: "chdir",
            args: [missing, 0, 0, 0, 0, 0],
            natural: ENOENT,
        },
        Probe {
            name: "getuid",
            args: [0; 6],
            natural: 0,
        },
        Probe {
            name: "personality",
            args: [0xffff_ffff, 0, 0, 0, 0, 0],
            natural: current_personality(),
        },
    ];
    let expect = [
        Outcome::Returned(-i64::from(libc::EPERM)),
        Outcome::Returned(0),
        Outcome::Returned(-4094),
        Outcome::Returned(-i64::from(libc::EACCES)),
        Outcome::Returned(current_personality()),
    ];
    check(&spec, &probes, &expect);
}

#[test]
fn argument_conditions_and_trap_match_kernel() {
    let spec = FilterSpec {
        default_action: Action::Allow,
        arches: vec![],
        rules: vec![
            rule(
                "personality",
                Action::Errno(libc::EROFS as u16),
                vec![eq(0, 0xdead)],
            ),
            rule("uname", Action::Trap, vec![]),
        ],
        listener_path: None,
        libseccomp: Libseccomp::V2_5_4,
    };
    let pers = current_personality();
    let probes = [
        Probe {
            name: "personality",
            args: [0xdead, 0, 0, 0, 0, 0],
            natural: pers,
        },
        Probe {
            name: "personality",
            args: [0xffff_ffff, 0, 0, 0, 0, 0],
            natural: pers,
        },
        // The filter sees the full 64-bit register; the syscall only 32 bits.
        Probe {
            name: "personality",
            args: [0x1_0000_dead, 0, 0, 0, 0, 0],
            natural: pers,
        },
        Probe {
            name: "uname",
            args: [0; 6],
            natural: -i64::from(libc::EFAULT),
        },
    ];
    let expect = [
        Outcome::Returned(-i64::from(libc::EROFS)),
        Outcome::Returned(pers),
        Outcome::Returned(pers),
        Outcome::Trapped,
    ];
    check(&spec, &probes, &expect);
}

#[test]
fn default_kill_allowlist_matches_kernel() {
    for default_action in [Action::KillProcess, Action::KillThread] {
        let spec = FilterSpec {
            default_action,
            arches: vec![Arch::X86, Arch::X32],
            rules: ["exit_group", "write", "getuid", "personality"]
                .into_iter()
                .map(|n| rule(n, Action::Allow, vec![]))
                .collect(),
            listener_path: None,
            libseccomp: Libseccomp::V2_5_4,
        };
        let probes = [
            Probe {
                name: "getuid",
                args: [0; 6],
                natural: 0,
            },
            Probe {
                name: "personality",
                args: [0xffff_ffff, 0, 0, 0, 0, 0],
                natural: current_personality(),
            },
            Probe {
                name: "mkdir",
                args: [cstr("/nonexistent-nodeproof/dir"), 0o755, 0, 0, 0, 0],
                natural: ENOENT,
            },
        ];
        let expect = [
            Outcome::Returned(0),
            Outcome::Returned(current_personality()),
            Outcome::Killed(libc::SIGSYS),
        ];
        check(&spec, &probes, &expect);
    }
}

/// Whether the kernel accepts `program` (errno when it does not).
fn kernel_load(program: &[SockFilter]) -> Result<(), i32> {
    let fprog = libc::sock_fprog {
        len: u16::try_from(program.len()).unwrap(),
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: the child only makes async-signal-safe calls and then _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                libc::_exit(SETUP_FAILED_EXIT);
            }
            let r = libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                &fprog as *const libc::sock_fprog,
            );
            libc::_exit(if r == 0 { 0 } else { *libc::__errno_location() });
        }
    }
    let mut status = 0;
    // SAFETY: pid is our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    // Every accepted program below returns ALLOW, so _exit runs.
    assert!(libc::WIFEXITED(status), "{status:#x}");
    match libc::WEXITSTATUS(status) {
        0 => Ok(()),
        SETUP_FAILED_EXIT => panic!("no_new_privs failed"),
        e => Err(e),
    }
}

#[test]
fn validate_agrees_with_kernel_loader() {
    use nodeproof_seccomp::cbpf::{op, validate};
    let ins = |code, jt, jf, k| SockFilter { code, jt, jf, k };
    let allow = 0x7fff_0000;
    let ret_allow = ins(op::RET_K, 0, 0, allow);
    let programs: Vec<(&str, Vec<SockFilter>)> = vec![
        ("plain", vec![ins(op::LD_W_ABS, 0, 0, 0), ret_allow]),
        ("arg word", vec![ins(op::LD_W_ABS, 0, 0, 60), ret_allow]),
        ("offset 64", vec![ins(op::LD_W_ABS, 0, 0, 64), ret_allow]),
        ("misaligned", vec![ins(op::LD_W_ABS, 0, 0, 2), ret_allow]),
        ("byte load", vec![ins(0x30, 0, 0, 0), ret_allow]),
        ("mod", vec![ins(op::ALU_MOD_K, 0, 0, 3), ret_allow]),
        ("div k 0", vec![ins(op::ALU_DIV_K, 0, 0, 0), ret_allow]),
        ("shift 32", vec![ins(op::ALU_LSH_K, 0, 0, 32), ret_allow]),
        ("shift 31", vec![ins(op::ALU_LSH_K, 0, 0, 31), ret_allow]),
        ("uninit mem", vec![ins(op::LD_MEM, 0, 0, 1), ret_allow]),
        (
            "mem",
            vec![
                ins(op::LD_IMM, 0, 0, allow),
                ins(op::ST, 0, 0, 1),
                ins(op::LDX_MEM, 0, 0, 1),
                ins(op::TXA, 0, 0, 0),
                ins(op::RET_A, 0, 0, 0),
            ],
        ),
        ("ja out", vec![ins(op::JA, 0, 0, 1), ret_allow]),
        ("jeq out", vec![ins(op::JEQ_K, 0, 1, 0), ret_allow]),
        ("no ret", vec![ret_allow, ins(op::LD_IMM, 0, 0, 0)]),
        // LSH K with bits above the opcode fields (found by the
        // bpf_interpreter_vs_kernel fuzz target).
        ("high opcode bits", vec![ins(0x0964, 0, 0, 4), ret_allow]),
    ];
    let mut rejected = 0;
    for (what, p) in &programs {
        let ours = validate(p);
        let kernel = kernel_load(p);
        assert_eq!(
            ours.is_ok(),
            kernel.is_ok(),
            "{what}: {ours:?} vs {kernel:?}"
        );
        if let Err(e) = kernel {
            assert_eq!(e, libc::EINVAL, "{what}");
            rejected += 1;
        }
    }
    assert_eq!(rejected, 11);
}
