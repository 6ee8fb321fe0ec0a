//! `nodeproof_bpfgen::compile` against the real libseccomp, checked with the BPF interpreter.

use nodeproof_bpfgen::compile;
use nodeproof_bpfgen::libseccomp::export_pfc;
use nodeproof_seccomp::cbpf::BPF_MAXINSNS;
use nodeproof_seccomp::cbpf::{run, validate, SeccompData};
use nodeproof_seccomp::compiler::{CompileError, Errno, SkippedRule};
use nodeproof_seccomp::filter::{Action, Arch, CmpOp, Cond, FilterSpec, Rule, RuleOrigin};
use nodeproof_seccomp::syscalls::{resolve_syscall, syscall_name, Libseccomp};

fn rule(i: usize, syscall: &str, action: Action, conds: Vec<Cond>) -> Rule {
    Rule {
        syscall: syscall.to_string(),
        action,
        conds,
        origin: RuleOrigin {
            pointer: format!("/syscalls/{i}").into(),
            name_index: 0,
        },
    }
}

fn spec(default_action: Action, arches: Vec<Arch>, rules: Vec<Rule>) -> FilterSpec {
    FilterSpec {
        default_action,
        arches,
        rules,
        listener_path: None,
        libseccomp: Libseccomp::V2_5_4,
    }
}

fn eval(
    prog: &[nodeproof_seccomp::cbpf::SockFilter],
    arch: Arch,
    nr: i32,
    args: [u64; 6],
) -> Action {
    let ret = run(prog, &SeccompData::new(nr, arch.audit_arch(), args)).unwrap();
    Action::from_ret(ret).unwrap()
}

fn nr(name: &str, arch: Arch) -> i32 {
    resolve_syscall(name, arch).unwrap()
}

#[test]
fn resolves_names_like_libseccomp() {
    assert_eq!(resolve_syscall("mkdir", Arch::X86_64), Some(83));
    assert_eq!(resolve_syscall("mkdirat", Arch::Aarch64), Some(34));
    assert_eq!(resolve_syscall("mkdir", Arch::X86), Some(39));
    // Known elsewhere only: a negative pseudo number, not a failure.
    let pseudo = resolve_syscall("socketcall", Arch::X86_64).unwrap();
    assert!(pseudo < 0, "{pseudo}");
    assert!(resolve_syscall("mkdir", Arch::Aarch64).unwrap() < 0);
    assert_eq!(resolve_syscall("no_such_syscall", Arch::X86_64), None);
    assert_eq!(syscall_name(83, Arch::X86_64).as_deref(), Some("mkdir"));
    assert_eq!(syscall_name(34, Arch::Aarch64).as_deref(), Some("mkdirat"));
}

#[test]
fn errno_rule_on_native_arch() {
    let s = spec(
        Action::Allow,
        vec![],
        vec![
            rule(0, "mkdir", Action::Errno(1), vec![]),
            rule(1, "rmdir", Action::Errno(13), vec![]),
        ],
    );
    let c = compile(&s, Arch::X86_64).unwrap();
    assert_eq!(c.native, Arch::X86_64);
    assert_eq!(c.arches, vec![Arch::X86_64]);
    assert!(c.skipped.is_empty());
    assert!(c.fits_kernel_limit());
    assert_eq!(c.instruction_count(), c.program.len());
    assert_eq!(validate(&c.program), Ok(()));
    let p = &c.program;
    assert_eq!(eval(p, Arch::X86_64, 83, [0; 6]), Action::Errno(1));
    assert_eq!(
        eval(p, Arch::X86_64, nr("rmdir", Arch::X86_64), [0; 6]),
        Action::Errno(13)
    );
    assert_eq!(
        eval(p, Arch::X86_64, nr("getpid", Arch::X86_64), [0; 6]),
        Action::Allow
    );
    // No X86 in the filter: libseccomp's bad-arch action kills.
    assert_eq!(eval(p, Arch::X86, 39, [0; 6]), Action::KillThread);
}

#[test]
fn extra_arches_get_translated_rules() {
    let s = spec(
        Action::Errno(38),
        vec![Arch::X86_64, Arch::X86, Arch::X32],
        vec![rule(0, "mkdir", Action::Allow, vec![])],
    );
    let c = compile(&s, Arch::X86_64).unwrap();
    // X86_64 is already present: AddArch's EEXIST is success, and no duplicate.
    assert_eq!(c.arches, vec![Arch::X86_64, Arch::X86, Arch::X32]);
    let p = &c.program;
    assert_eq!(eval(p, Arch::X86_64, 83, [0; 6]), Action::Allow);
    assert_eq!(eval(p, Arch::X86, 39, [0; 6]), Action::Allow);
    assert_eq!(eval(p, Arch::X86, 40, [0; 6]), Action::Errno(38));
    // x32 syscalls carry the __X32_SYSCALL_BIT.
    assert_eq!(eval(p, Arch::X32, 0x4000_0000 | 83, [0; 6]), Action::Allow);
}

#[test]
fn cross_compiles_for_aarch64() {
    let s = spec(
        Action::Allow,
        vec![Arch::Aarch64],
        vec![
            rule(0, "mkdirat", Action::Errno(1), vec![]),
            // Exists only on other arches: resolved to a pseudo number, not skipped.
            rule(1, "mkdir", Action::Errno(2), vec![]),
        ],
    );
    let c = compile(&s, Arch::Aarch64).unwrap();
    assert_eq!(c.arches, vec![Arch::Aarch64]);
    assert!(c.skipped.is_empty());
    let p = &c.program;
    assert_eq!(eval(p, Arch::Aarch64, 34, [0; 6]), Action::Errno(1));
    assert_eq!(eval(p, Arch::Aarch64, 35, [0; 6]), Action::Allow);
    // The host arch was removed from the filter.
    assert_eq!(eval(p, Arch::X86_64, 258, [0; 6]), Action::KillThread);
    let pfc = export_pfc(&s, Arch::Aarch64).unwrap();
    assert!(pfc.contains("aarch64"), "{pfc}");
    assert!(!pfc.contains("x86_64"), "{pfc}");
}

#[test]
fn unknown_names_are_skipped_with_origin() {
    let s = spec(
        Action::Allow,
        vec![],
        vec![
            rule(0, "no_such_syscall", Action::Errno(1), vec![]),
            rule(1, "socketcall", Action::Errno(1), vec![]),
            rule(2, "mkdir", Action::Errno(1), vec![]),
        ],
    );
    let c = compile(&s, Arch::X86_64).unwrap();
    assert_eq!(
        c.skipped,
        vec![SkippedRule {
            syscall: "no_such_syscall".into(),
            action: Action::Errno(1),
            origin: RuleOrigin {
                pointer: "/syscalls/0".into(),
                name_index: 0
            },
        }]
    );
    assert_eq!(eval(&c.program, Arch::X86_64, 83, [0; 6]), Action::Errno(1));
}

#[test]
fn argument_conditions() {
    let eq = Cond {
        index: 0,
        op: CmpOp::Eq,
        value: 0xdead,
        value_two: 0,
    };
    // runc: value is the mask, valueTwo the expected value.
    let masked = Cond {
        index: 1,
        op: CmpOp::MaskedEq,
        value: 0xff,
        value_two: 0x12,
    };
    let s = spec(
        Action::Allow,
        vec![],
        vec![
            rule(0, "personality", Action::Errno(1), vec![eq]),
            rule(1, "socket", Action::Errno(97), vec![masked]),
        ],
    );
    let p = compile(&s, Arch::X86_64).unwrap().program;
    let pers = nr("personality", Arch::X86_64);
    let sock = nr("socket", Arch::X86_64);
    assert_eq!(
        eval(&p, Arch::X86_64, pers, [0xdead, 0, 0, 0, 0, 0]),
        Action::Errno(1)
    );
    assert_eq!(
        eval(&p, Arch::X86_64, pers, [0xbeef, 0, 0, 0, 0, 0]),
        Action::Allow
    );
    // 64-bit comparison: the high word matters.
    assert_eq!(
        eval(&p, Arch::X86_64, pers, [0x1_0000_dead, 0, 0, 0, 0, 0]),
        Action::Allow
    );
    assert_eq!(
        eval(&p, Arch::X86_64, sock, [0, 0x3412, 0, 0, 0, 0]),
        Action::Errno(97)
    );
    assert_eq!(
        eval(&p, Arch::X86_64, sock, [0, 0x3413, 0, 0, 0, 0]),
        Action::Allow
    );
}

#[test]
fn libseccomp_rejections_carry_context() {
    let c0 = Cond {
        index: 0,
        op: CmpOp::Eq,
        value: 1,
        value_two: 0,
    };
    // Two checks on one argument must be split by the runtime; libseccomp refuses.
    let s = spec(
        Action::Allow,
        vec![],
        vec![rule(4, "personality", Action::Errno(1), vec![c0, c0])],
    );
    assert_eq!(
        compile(&s, Arch::X86_64),
        Err(CompileError::AddRule {
            syscall: "personality".into(),
            action: Action::Errno(1),
            pointer: "/syscalls/4".into(),
            source: Errno(libc::EINVAL),
        })
    );
    // A rule with the default action: libseccomp says EACCES (runc drops these first).
    let s = spec(
        Action::Allow,
        vec![],
        vec![rule(2, "mkdir", Action::Allow, vec![])],
    );
    let err = compile(&s, Arch::X86_64).unwrap_err();
    assert_eq!(
        err,
        CompileError::AddRule {
            syscall: "mkdir".into(),
            action: Action::Allow,
            pointer: "/syscalls/2".into(),
            source: Errno(libc::EACCES),
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("mkdir") && msg.contains("/syscalls/2"),
        "{msg}"
    );
    assert!(std::error::Error::source(&err).is_some());
    // libseccomp refuses ERRNO data of 4095 (MAX_ERRNO) and up, as rule and default.
    let s = spec(
        Action::Allow,
        vec![],
        vec![rule(1, "chdir", Action::Errno(4095), vec![])],
    );
    assert!(matches!(
        compile(&s, Arch::X86_64),
        Err(CompileError::AddRule {
            source: Errno(libc::EINVAL),
            ..
        })
    ));
    let s = spec(Action::Errno(5000), vec![], vec![]);
    assert_eq!(
        compile(&s, Arch::X86_64),
        Err(CompileError::Init {
            action: Action::Errno(5000),
            source: Errno(libc::EINVAL)
        })
    );
    let bad = Cond { index: 6, ..c0 };
    let s = spec(
        Action::Allow,
        vec![],
        vec![rule(0, "personality", Action::Errno(1), vec![bad])],
    );
    assert!(matches!(
        compile(&s, Arch::X86_64),
        Err(CompileError::BadArgIndex { index: 6, .. })
    ));
}

#[test]
fn default_kill_allowlist() {
    let s = spec(
        Action::KillProcess,
        vec![],
        ["read", "write", "exit_group"]
            .iter()
            .enumerate()
            .map(|(i, n)| rule(i, n, Action::Allow, vec![]))
            .collect(),
    );
    let p = compile(&s, Arch::X86_64).unwrap().program;
    assert_eq!(eval(&p, Arch::X86_64, 0, [0; 6]), Action::Allow);
    assert_eq!(eval(&p, Arch::X86_64, 231, [0; 6]), Action::Allow);
    assert_eq!(eval(&p, Arch::X86_64, 83, [0; 6]), Action::KillProcess);
}

#[test]
fn huge_filter_exports_without_blocking() {
    // One conditional rule per x86_64 syscall, on every little-endian arch.
    let rules: Vec<Rule> = (0..400)
        .filter_map(|n| syscall_name(n, Arch::X86_64))
        .enumerate()
        .map(|(i, name)| {
            let c = Cond {
                index: 0,
                op: CmpOp::Eq,
                // Distinct values: libseccomp shares identical BPF blocks.
                value: (i as u64) << 40,
                value_two: 0,
            };
            rule(i, &name, Action::Errno(1), vec![c])
        })
        .collect();
    let le = [
        Arch::X86,
        Arch::X32,
        Arch::Arm,
        Arch::Aarch64,
        Arch::Mipsel,
        Arch::Mipsel64,
        Arch::Mipsel64N32,
        Arch::Ppc64Le,
        Arch::Riscv64,
    ];
    let s = spec(Action::Allow, le.to_vec(), rules);
    let c = compile(&s, Arch::X86_64).unwrap();
    assert_eq!(c.arches.len(), 10);
    assert!(c.program.len() > BPF_MAXINSNS, "{}", c.program.len());
    assert!(!c.fits_kernel_limit());
    // Far beyond a 64 KiB pipe buffer: export through a pipe would block.
    let pfc = export_pfc(&s, Arch::X86_64).unwrap();
    assert!(pfc.len() > 4 * 65536, "{}", pfc.len());
    assert!(pfc.contains("riscv64"));
}
