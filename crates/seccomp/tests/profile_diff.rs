//! `diff::diff_programs` on filters built by the whole pipeline (decode,
//! runc 1.1.5's translation and stub, the native compiler): rewritings that
//! decide the same have no change; each kind of change is found, with exactly
//! the argument region it holds for.

use nodeproof_bpfgen::Native;
use nodeproof_seccomp::diff::{
    any_harsher, diff_programs, ArgRange, ArgValues, Mode, ProfileDiff, Syscall,
};
use nodeproof_seccomp::filter::{Action, Arch};
use nodeproof_seccomp::lint::{loaded_program, LintOptions};

fn opts() -> LintOptions {
    LintOptions {
        arch: Arch::X86_64,
        check_listener: false,
        ..Default::default()
    }
}

fn diff(old: &str, new: &str) -> Vec<ProfileDiff> {
    let opts = opts();
    let (spec, old) = loaded_program(old.as_bytes(), &opts, &Native).expect("old builds");
    let (_, new) = loaded_program(new.as_bytes(), &opts, &Native).expect("new builds");
    diff_programs(&old, &new, spec.libseccomp, Mode::of(&opts)).expect("valid programs")
}

fn profile(default: &str, rules: &str) -> String {
    format!(
        r#"{{"defaultAction":"{default}","architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_X86","SCMP_ARCH_X32"],"syscalls":[{rules}]}}"#
    )
}

const ALLOW: &str = r#"{"names":["read","write","openat","close"],"action":"SCMP_ACT_ALLOW"},
 {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":0,"op":"SCMP_CMP_EQ"}]},
 {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":131080,"op":"SCMP_CMP_EQ"}]},
 {"names":["clone"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":2114060288,"valueTwo":0,"op":"SCMP_CMP_MASKED_EQ"}]}"#;

fn changes(d: &[ProfileDiff]) -> Vec<String> {
    d.iter()
        .flat_map(|g| {
            g.changes
                .iter()
                .map(move |c| format!("{}: {c}", g.arch.map_or("other".into(), |a| a.to_string())))
        })
        .collect()
}

#[test]
fn rewritings_that_decide_the_same_have_no_change() {
    let base = profile("SCMP_ACT_ERRNO", ALLOW);
    let reordered = profile(
        "SCMP_ACT_ERRNO",
        r#"{"names":["clone"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":2114060288,"valueTwo":0,"op":"SCMP_CMP_MASKED_EQ"}]},
 {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":131080,"op":"SCMP_CMP_EQ"}]},
 {"names":["close","openat"],"action":"SCMP_ACT_ALLOW"},
 {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":0,"op":"SCMP_CMP_EQ"}]},
 {"names":["write","read"],"action":"SCMP_ACT_ALLOW"}"#,
    );
    let split_and_duplicated = profile(
        "SCMP_ACT_ERRNO",
        r#"{"names":["read"],"action":"SCMP_ACT_ALLOW"},{"names":["write"],"action":"SCMP_ACT_ALLOW"},
 {"names":["openat","close","read"],"action":"SCMP_ACT_ALLOW"},
 {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":0,"op":"SCMP_CMP_EQ"}]},
 {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":131080,"op":"SCMP_CMP_EQ"}]},
 {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":0,"op":"SCMP_CMP_EQ"}]},
 {"names":["clone"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":2114060288,"valueTwo":0,"op":"SCMP_CMP_MASKED_EQ"}]}"#,
    );
    for other in [&base, &reordered, &split_and_duplicated] {
        let d = diff(&base, other);
        assert!(d.is_empty(), "{:#?}", changes(&d));
        assert!(!any_harsher(&d));
    }
}

#[test]
fn a_syscall_dropped_from_the_allow_list_is_one_change_on_each_arch() {
    let old = profile("SCMP_ACT_ERRNO", ALLOW);
    // Not the highest-numbered name: that would move runc's -ENOSYS stub too.
    let new = profile("SCMP_ACT_ERRNO", &ALLOW.replace(r#""write","#, ""));
    let d = diff(&old, &new);
    assert!(any_harsher(&d));
    let x86_64 = d
        .iter()
        .find(|g| g.arch == Some(Arch::X86_64))
        .expect("x86_64 changes");
    assert_eq!(x86_64.changes.len(), 1, "{:#?}", changes(&d));
    let c = &x86_64.changes[0];
    assert_eq!(
        c.syscall,
        Syscall::Named {
            name: "write".into(),
            nr: 1
        }
    );
    assert!(c.args.is_empty());
    assert_eq!(
        (c.old, c.new, c.harsher),
        (Action::Allow, Action::Errno(1), true)
    );
    // The same name on x86 and x32: one change each, nothing else anywhere.
    assert_eq!(changes(&d).len(), 3, "{:#?}", changes(&d));
    assert!(
        changes(&d).iter().all(|c| c.contains("write")),
        "{:#?}",
        changes(&d)
    );
}

#[test]
fn a_narrowed_argument_condition_names_exactly_the_values_it_denies() {
    let old = profile("SCMP_ACT_ERRNO", ALLOW);
    let new = profile(
        "SCMP_ACT_ERRNO",
        &ALLOW.replace(
            r#"{"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":131080,"op":"SCMP_CMP_EQ"}]},"#,
            "",
        ),
    );
    let d = diff(&old, &new);
    let x86_64 = d
        .iter()
        .find(|g| g.arch == Some(Arch::X86_64))
        .expect("x86_64 changes");
    assert_eq!(x86_64.changes.len(), 1, "{:#?}", changes(&d));
    let c = &x86_64.changes[0];
    assert_eq!(
        c.syscall,
        Syscall::Named {
            name: "personality".into(),
            nr: 135
        }
    );
    assert_eq!(
        c.args,
        [ArgRange {
            index: 0,
            values: ArgValues::Range {
                first: 0x20008,
                last: 0x20008
            }
        }]
    );
    assert_eq!((c.old, c.new), (Action::Allow, Action::Errno(1)));
    assert!(c.harsher && !c.sampled);
    // On x86 the filter compares the low word alone: the same single value of it.
    let x86 = d
        .iter()
        .find(|g| g.arch == Some(Arch::X86))
        .expect("x86 changes");
    assert_eq!(
        x86.changes[0].args,
        [ArgRange {
            index: 0,
            values: ArgValues::Low {
                first: 0x20008,
                last: 0x20008
            }
        }]
    );
}

#[test]
fn a_masked_condition_is_enumerated_exactly() {
    let old = profile("SCMP_ACT_ERRNO", ALLOW);
    // clone allowed whatever its flags: every flag assignment the old mask refused changes.
    let new = profile(
        "SCMP_ACT_ERRNO",
        &ALLOW.replace(
            r#"{"names":["clone"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":2114060288,"valueTwo":0,"op":"SCMP_CMP_MASKED_EQ"}]}"#,
            r#"{"names":["clone"],"action":"SCMP_ACT_ALLOW"}"#,
        ),
    );
    let d = diff(&old, &new);
    assert!(!any_harsher(&d), "{:#?}", changes(&d));
    let x86_64 = d
        .iter()
        .find(|g| g.arch == Some(Arch::X86_64))
        .expect("x86_64 changes");
    // 0x7E020000 has 7 bits: the 127 assignments but 0 were denied, said once.
    assert_eq!(x86_64.changes.len(), 1, "{:#?}", changes(&d));
    let c = &x86_64.changes[0];
    assert_eq!(
        (c.old, c.new, c.sampled),
        (Action::Errno(1), Action::Allow, false)
    );
    assert_eq!(
        c.args,
        [ArgRange {
            index: 0,
            values: ArgValues::MaskedNot {
                mask: 0x7E02_0000,
                value: 0
            }
        }]
    );

    // Allowed for one more flag combination: exactly that one changes.
    let one_more = profile(
        "SCMP_ACT_ERRNO",
        &format!(
            r#"{ALLOW},{{"names":["clone"],"action":"SCMP_ACT_ALLOW","args":[{{"index":0,"value":2114060288,"valueTwo":131072,"op":"SCMP_CMP_MASKED_EQ"}}]}}"#
        ),
    );
    let d = diff(&old, &one_more);
    let x86_64 = d
        .iter()
        .find(|g| g.arch == Some(Arch::X86_64))
        .expect("x86_64 changes");
    assert_eq!(x86_64.changes.len(), 1, "{:#?}", changes(&d));
    assert_eq!(
        x86_64.changes[0].args,
        [ArgRange {
            index: 0,
            values: ArgValues::Masked {
                mask: 0x7E02_0000,
                value: 0x2_0000
            }
        }]
    );
}

#[test]
fn errno_to_kill_is_harsher_and_an_allow_gained_is_listed_but_not() {
    let old = profile("SCMP_ACT_ERRNO", ALLOW);
    let killed = profile("SCMP_ACT_KILL_PROCESS", ALLOW);
    let d = diff(&old, &killed);
    assert!(any_harsher(&d));
    assert!(d
        .iter()
        .flat_map(|g| &g.changes)
        .all(|c| c.old == Action::Errno(1) && c.new == Action::KillProcess));
    // The -ENOSYS stub's range above the profile's highest number is untouched:
    // both stubs answer ENOSYS there.
    let x86_64 = d
        .iter()
        .find(|g| g.arch == Some(Arch::X86_64))
        .expect("x86_64 changes");
    assert!(
        x86_64.changes.iter().all(|c| match c.syscall {
            Syscall::Numbers { last, .. } => last < 0x4000_0000,
            Syscall::Named { nr, .. } => nr < 0x4000_0000,
        }),
        "{:#?}",
        changes(&d)
    );

    let gained = profile(
        "SCMP_ACT_ERRNO",
        &format!(r#"{ALLOW},{{"names":["getpid"],"action":"SCMP_ACT_ALLOW"}}"#),
    );
    let d = diff(&old, &gained);
    assert!(!any_harsher(&d));
    let x86_64 = d
        .iter()
        .find(|g| g.arch == Some(Arch::X86_64))
        .expect("x86_64 changes");
    assert_eq!(x86_64.changes.len(), 1, "{:#?}", changes(&d));
    assert_eq!(
        x86_64.changes[0].syscall,
        Syscall::Named {
            name: "getpid".into(),
            nr: 39
        }
    );
    assert_eq!(
        (x86_64.changes[0].old, x86_64.changes[0].new),
        (Action::Errno(1), Action::Allow)
    );
}

#[test]
fn a_number_above_the_profile_is_reported_by_number() {
    // Allowing a higher syscall moves runc's -ENOSYS stub boundary: the
    // numbers between the two highest now get EPERM instead of ENOSYS.
    let old = profile(
        "SCMP_ACT_ERRNO",
        r#"{"names":["write"],"action":"SCMP_ACT_ALLOW"}"#,
    );
    let new = profile(
        "SCMP_ACT_ERRNO",
        r#"{"names":["write","getpid"],"action":"SCMP_ACT_ALLOW"}"#,
    );
    let d = diff(&old, &new);
    let x86_64 = d
        .iter()
        .find(|g| g.arch == Some(Arch::X86_64))
        .expect("x86_64 changes");
    let got: Vec<String> = x86_64.changes.iter().map(|c| c.to_string()).collect();
    assert_eq!(
        got,
        [
            "nr 2..=38: SCMP_ACT_ERRNO(38) -> SCMP_ACT_ERRNO(1)",
            "getpid (39): SCMP_ACT_ERRNO(38) -> SCMP_ACT_ALLOW",
        ]
    );
}

#[test]
fn a_mask_of_more_than_twelve_bits_is_sampled_and_says_so() {
    let rule = |cond: &str| {
        format!(
            r#"{{"names":["read"],"action":"SCMP_ACT_ALLOW"}},{{"names":["clone"],"action":"SCMP_ACT_ALLOW"{cond}}}"#
        )
    };
    // 16 bits under the mask: 65,536 assignments, more than the 4,096 tried.
    let old = profile(
        "SCMP_ACT_ERRNO",
        &rule(r#","args":[{"index":0,"value":4294901760,"valueTwo":0,"op":"SCMP_CMP_MASKED_EQ"}]"#),
    );
    let new = profile("SCMP_ACT_ERRNO", &rule(""));
    let d = diff(&old, &new);
    let x86_64 = d
        .iter()
        .find(|g| g.arch == Some(Arch::X86_64))
        .expect("x86_64 changes");
    assert_eq!(x86_64.changes.len(), 1, "{:#?}", changes(&d));
    let c = &x86_64.changes[0];
    assert!(c.sampled, "{c}");
    assert!(c.to_string().ends_with("(sampled)"), "{c}");
    assert_eq!(
        c.args,
        [ArgRange {
            index: 0,
            values: ArgValues::MaskedNot {
                mask: 0xffff_0000,
                value: 0
            }
        }]
    );
    // The 12-bit mask just below the limit is exact.
    let old = profile(
        "SCMP_ACT_ERRNO",
        &rule(r#","args":[{"index":0,"value":4095,"valueTwo":0,"op":"SCMP_CMP_MASKED_EQ"}]"#),
    );
    let d = diff(&old, &new);
    assert!(
        d.iter().flat_map(|g| &g.changes).all(|c| !c.sampled),
        "{:#?}",
        changes(&d)
    );
}

#[test]
fn an_argument_compared_by_value_and_under_a_mask_is_exact() {
    let rules = |with_eq: bool| {
        format!(
            r#"{{"names":["read"],"action":"SCMP_ACT_ALLOW"}},{{"names":["ioctl"],"action":"SCMP_ACT_ALLOW","args":[{{"index":1,"value":240,"valueTwo":0,"op":"SCMP_CMP_MASKED_EQ"}}]}}{}"#,
            if with_eq {
                r#",{"names":["ioctl"],"action":"SCMP_ACT_ALLOW","args":[{"index":1,"value":21,"op":"SCMP_CMP_EQ"}]}"#
            } else {
                ""
            }
        )
    };
    let old = profile("SCMP_ACT_ERRNO", &rules(true));
    let new = profile("SCMP_ACT_ERRNO", &rules(false));
    let d = diff(&old, &new);
    let x86_64 = d
        .iter()
        .find(|g| g.arch == Some(Arch::X86_64))
        .expect("x86_64 changes");
    // 0x15 has 0x10 under the mask, so only the equality allowed it.
    assert_eq!(x86_64.changes.len(), 1, "{:#?}", changes(&d));
    let c = &x86_64.changes[0];
    assert!(!c.sampled, "{c}");
    assert_eq!(
        c.args,
        [ArgRange {
            index: 1,
            values: ArgValues::Range {
                first: 0x15,
                last: 0x15
            }
        }]
    );
    // 0x5 is under the mask's clear bits: dropping its equality changes nothing.
    let old = profile(
        "SCMP_ACT_ERRNO",
        &rules(true).replace(r#""value":21"#, r#""value":5"#),
    );
    assert!(diff(&old, &new).is_empty());
}
