//! Where the outcome was right and the words were wrong or missing: each
//! message agrees with the outcome and names the effect.

use nodeproof_bpfgen::Native;
use nodeproof_seccomp::diagnostic::{Code, Severity};
use nodeproof_seccomp::filter::Arch;
use nodeproof_seccomp::lint::{lint_source, LintOptions, Outcome, ProfileReport};

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
        // args[1] is the path's address; args[5] is a register openat does not read.
        for (index, word) in [(1, "an address"), (5, "does not take (it takes 4)")] {
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
