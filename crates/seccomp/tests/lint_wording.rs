//! Where the outcome was right and the words were wrong or missing: each
//! message agrees with the outcome and names the effect.

use nodeproof_bpfgen::Native;
use nodeproof_seccomp::diagnostic::{Code, Severity};
use nodeproof_seccomp::filter::Arch;
use nodeproof_seccomp::lint::{lint_source, LintOptions, Outcome, ProfileReport};
use nodeproof_seccomp::oci_runtime::{CrunVersion, OciRuntime, RuncVersion};

fn lint(src: &str, nnp: bool) -> ProfileReport {
    let opts = LintOptions {
        no_new_privileges: nnp,
        arch: Arch::X86_64,
        check_listener: false,
        ..Default::default()
    };
    lint_source("p.json", src.as_bytes(), &opts, &Native)
}

fn with(r: &ProfileReport, code: Code) -> Vec<(Severity, &str)> {
    r.diagnostics
        .iter()
        .filter(|d| d.code == code)
        .map(|d| (d.severity, d.message.as_str()))
        .collect()
}

#[test]
fn trace_takes_any_16_bit_errno_ret() {
    let src = |e: u64| {
        format!(
            r#"{{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{{"names":["mkdir"],"action":"SCMP_ACT_TRACE","errnoRet":{e}}}]}}"#
        )
    };
    for e in [0, 4095, 5000, 65535] {
        let r = lint(&src(e), false);
        assert_eq!(r.outcome, Outcome::Ok, "{e}");
        assert!(
            with(&r, Code::ErrnoOutOfRange).is_empty(),
            "{e}: {:#?}",
            r.diagnostics
        );
    }
    let r = lint(&src(70000), false);
    assert_eq!(r.outcome, Outcome::Ok);
    let found = with(&r, Code::ErrnoOutOfRange);
    assert_eq!(found.len(), 1, "{:#?}", r.diagnostics);
    assert_eq!(found[0].0, Severity::Warning);
    assert!(!found[0].1.contains("fails to start"), "{}", found[0].1);
    // ERRNO is still refused by libseccomp from 4095 on, and says so.
    let r = lint(&src(5000).replace("TRACE", "ERRNO"), false);
    assert_eq!(r.outcome, Outcome::StartFailed);
    assert!(with(&r, Code::ErrnoOutOfRange)[0]
        .1
        .contains("the container fails to start"));
}

#[test]
fn masked_eq_with_mask_0_matches_every_call() {
    let src = |value: u64, two: u64| {
        format!(
            r#"{{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","args":[{{"index":1,"value":{value},"valueTwo":{two},"op":"SCMP_CMP_MASKED_EQ"}}]}}]}}"#
        )
    };
    let r = lint(&src(0, 5), false);
    let found = with(&r, Code::MaskZero);
    assert_eq!(found.len(), 1, "{:#?}", r.diagnostics);
    assert_eq!(found[0].0, Severity::Warning);
    assert!(found[0].1.contains("matches every call"), "{}", found[0].1);
    assert!(with(&lint(&src(0xff, 5), false), Code::MaskZero).is_empty());
    assert!(with(&lint(&src(0, 0), false), Code::MaskZero).is_empty());
}

#[test]
fn only_foreign_arches_and_a_trace_default_are_warned_about() {
    let r = lint(
        r#"{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86"],"syscalls":[{"names":["write"],"action":"SCMP_ACT_ALLOW"}]}"#,
        false,
    );
    let found = with(&r, Code::NativeArchUnlisted);
    assert_eq!(found.len(), 1, "{:#?}", r.diagnostics);
    assert!(
        found[0].1.contains("adds the native arch"),
        "{}",
        found[0].1
    );
    let r = lint(
        r#"{"defaultAction":"SCMP_ACT_TRACE","architectures":["SCMP_ARCH_X86_64"],"syscalls":[{"names":["read"],"action":"SCMP_ACT_ALLOW"}]}"#,
        true,
    );
    let found = with(&r, Code::TraceWithoutTracer);
    assert_eq!(found.len(), 1, "{:#?}", r.diagnostics);
    assert_eq!(found[0].0, Severity::Warning);
    assert!(found[0].1.contains("ENOSYS"), "{}", found[0].1);
}

#[test]
fn intermittent_failures_say_so_and_come_after_steady_ones() {
    let deny = |names: &str| {
        format!(
            r#"{{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{{"names":[{names}],"action":"SCMP_ACT_ERRNO"}}]}}"#
        )
    };
    let r = lint(&deny(r#""futex""#), true);
    assert_eq!(r.outcome, Outcome::StartFailed);
    let first = &r.diagnostics[0];
    assert_eq!(first.code, Code::RuntimeSyscallDeniedIntermittently);
    assert!(
        first.message.contains("intermittently (in 1 of 6 starts"),
        "{}",
        first.message
    );
    assert!(first.message.contains("scheduler"), "{}", first.message);
    // futex comes first in the file, getdents64 fails every time: it leads.
    let r = lint(&deny(r#""futex","rt_sigreturn","getdents64""#), true);
    assert_eq!(r.outcome, Outcome::StartFailed);
    assert_eq!(r.diagnostics[0].code, Code::RuntimeSyscallDenied);
    assert!(r.diagnostics[0].message.contains("`getdents64`"));
    let r = lint(&deny(r#""rt_sigreturn""#), false);
    assert!(
        r.diagnostics[0].message.contains("signal"),
        "{}",
        r.diagnostics[0].message
    );
}

/// A rule on an argument runc init does not fix (an address, an unused
/// register) decides init's call in some starts and not in others: the
/// prediction says the start fails, names the argument and why, and a rule on
/// an argument init does fix is judged from the traced value as before.
#[test]
fn a_rule_on_an_argument_init_does_not_fix_says_the_start_depends_on_it() {
    let deny_openat_if = |index: u8, op: &str, value: u64| {
        format!(
            r#"{{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{{"names":["openat"],"action":"SCMP_ACT_ERRNO","args":[{{"index":{index},"value":{value},"op":"{op}"}}]}}]}}"#
        )
    };
    for nnp in [true, false] {
        // args[1] is the path's address (args[5], which openat does not
        // take, is Go's 0 under runc: below).
        for (index, word) in [(1, "an address")] {
            for op in ["SCMP_CMP_EQ", "SCMP_CMP_GT", "SCMP_CMP_LT"] {
                let r = lint(&deny_openat_if(index, op, 0x7fff_0000_1234), nnp);
                assert_eq!(r.outcome, Outcome::StartFailed, "{index} {op} nnp={nnp}");
                let first = &r.diagnostics[0];
                assert_eq!(first.code, Code::RuntimeSyscallDeniedByUnfixedArgument);
                assert_eq!(first.severity, Severity::Error);
                assert!(
                    first.message.contains(&format!("`args[{index}]`"))
                        && first.message.contains(word),
                    "{}",
                    first.message
                );
            }
        }
        // args[2] holds the open flags, the same in every start: init's value decides.
        let r = lint(&deny_openat_if(2, "SCMP_CMP_EQ", 0x7fff_0000_1234), nnp);
        assert_eq!(r.outcome, Outcome::Ok, "{:#?}", r.diagnostics);
        assert!(with(&r, Code::RuntimeSyscallDeniedByUnfixedArgument).is_empty());
    }
    // A start that fails every time still leads.
    let src = r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
        {"names":["openat"],"action":"SCMP_ACT_ERRNO","args":[{"index":1,"value":5,"op":"SCMP_CMP_EQ"}]},
        {"names":["getdents64"],"action":"SCMP_ACT_ERRNO"}]}"#;
    let r = lint(src, true);
    assert_eq!(
        r.diagnostics[0].code,
        Code::RuntimeSyscallDenied,
        "{:#?}",
        r.diagnostics
    );
    assert!(!with(&r, Code::RuntimeSyscallDeniedByUnfixedArgument).is_empty());
}

fn lint_with(src: &str, nnp: bool, rt: OciRuntime) -> ProfileReport {
    let opts = LintOptions {
        no_new_privileges: nnp,
        arch: Arch::X86_64,
        check_listener: false,
        oci_runtime: rt,
        ..Default::default()
    };
    lint_source("p.json", src.as_bytes(), &opts, &Native)
}

/// runc init is Go: its own calls go through the syscall package, which
/// passes 0 in every slot a call does not take, so a rule there is judged
/// with 0 (real runc 1.1.5 starts every time with `execve` denied when
/// `args[3] != 0`: tests/tests/lint_vs_runc.rs). crun calls through libc,
/// where those registers hold leftovers: the start depends on them, so a
/// rule there is judged unknown.
#[test]
fn an_argument_a_go_made_call_does_not_take_is_zero_a_c_made_one_is_unknown() {
    let deny_execve_if = |op: &str, value: u64| {
        format!(
            r#"{{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{{"names":["execve"],"action":"SCMP_ACT_ERRNO","args":[{{"index":3,"value":{value},"op":"{op}"}}]}}]}}"#
        )
    };
    let runc = OciRuntime::Runc(RuncVersion::V1_1_5);
    let crun = OciRuntime::Crun(CrunVersion::V1_8);
    for nnp in [true, false] {
        // Go's 0 never equals 5: the rule never matches, the container starts.
        let r = lint_with(&deny_execve_if("SCMP_CMP_NE", 0), nnp, runc);
        assert_eq!(r.outcome, Outcome::Ok, "nnp={nnp}: {:#?}", r.diagnostics);
        // ...and always equals 0: the start fails every time, said as such.
        let r = lint_with(&deny_execve_if("SCMP_CMP_EQ", 0), nnp, runc);
        assert_eq!(r.outcome, Outcome::StartFailed);
        assert_eq!(
            r.diagnostics[0].code,
            Code::RuntimeSyscallDenied,
            "{:#?}",
            r.diagnostics
        );
        assert!(with(&r, Code::RuntimeSyscallDeniedByUnfixedArgument).is_empty());
        // crun: whatever the register held.
        let r = lint_with(&deny_execve_if("SCMP_CMP_NE", 0), nnp, crun);
        assert_eq!(r.outcome, Outcome::StartFailed, "nnp={nnp}");
        let first = &r.diagnostics[0];
        assert_eq!(first.code, Code::RuntimeSyscallDeniedByUnfixedArgument);
        assert!(
            first.message.contains("`args[3]`")
                && first
                    .message
                    .contains("does not take (it takes 3), so it holds whatever the register held"),
            "{}",
            first.message
        );
        // The Go runtime's own calls are made from assembly: not zeroed.
        let sigreturn = r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["rt_sigreturn"],"action":"SCMP_ACT_ERRNO","args":[{"index":5,"value":0,"op":"SCMP_CMP_NE"}]}]}"#;
        let r = lint_with(sigreturn, nnp, runc);
        let unfixed = with(&r, Code::RuntimeSyscallDeniedByUnfixedArgument);
        assert!(
            unfixed
                .iter()
                .any(|(_, m)| m.contains("`rt_sigreturn`")
                    && m.contains("whatever the register held")),
            "{:#?}",
            r.diagnostics
        );
    }
}
