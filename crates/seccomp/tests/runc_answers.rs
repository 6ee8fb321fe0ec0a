//! What runc init does with the value a denied call hands back, predicted
//! through the native compiler: errno 0 taken for success, runc's eaccess
//! fallback, and the errors runc's capability library ignores. Each case was
//! judged by real runc 1.1.5 (tests/tests/lint_vs_runc.rs runs them live).

use nodeproof_bpfgen::Native;
use nodeproof_seccomp::capability::CapabilitySet;
use nodeproof_seccomp::diagnostic::{Code, Severity};
use nodeproof_seccomp::filter::Arch;
use nodeproof_seccomp::lint::{lint_source, LintOptions, Outcome, ProfileReport};

fn lint(rules: &str, nnp: bool) -> ProfileReport {
    let src = format!(r#"{{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{rules}]}}"#);
    let opts = LintOptions {
        no_new_privileges: nnp,
        arch: Arch::X86_64,
        check_listener: false,
        ..Default::default()
    };
    lint_source("p.json", src.as_bytes(), &opts, &Native)
}

fn deny(name: &str, errno: u16) -> String {
    format!(r#"{{"names":["{name}"],"action":"SCMP_ACT_ERRNO","errnoRet":{errno}}}"#)
}

fn deny_prctl(option: u32, errno: u16) -> String {
    format!(
        r#"{{"names":["prctl"],"action":"SCMP_ACT_ERRNO","errnoRet":{errno},"args":[{{"index":0,"value":{option},"op":"SCMP_CMP_EQ"}}]}}"#
    )
}

fn findings(r: &ProfileReport, code: Code) -> Vec<&str> {
    r.diagnostics
        .iter()
        .filter(|d| d.code == code)
        .map(|d| d.message.as_str())
        .collect()
}

#[test]
fn errno_0_is_success_for_most_of_init_and_fatal_for_the_rest() {
    // (syscall, noNewPrivileges, outcome real runc gave)
    for (name, nnp, want) in [
        ("getdents64", true, Outcome::Ok),
        ("getdents64", false, Outcome::Ok),
        ("mprotect", true, Outcome::Ok),
        ("mprotect", false, Outcome::Ok),
        ("futex", false, Outcome::Ok),
        ("capget", false, Outcome::Ok),
        ("chdir", false, Outcome::Ok),
        ("fstat", false, Outcome::Ok),
        ("getppid", false, Outcome::Ok),
        ("read", false, Outcome::Ok),
        ("close", true, Outcome::StartFailed),
        ("openat", false, Outcome::StartFailed),
        ("fstatfs", true, Outcome::StartFailed),
        ("execve", true, Outcome::StartFailed),
        ("arch_prctl", true, Outcome::StartFailed),
        // A zeroed stat of /bin/true is not executable; getcwd's 0 is EINVAL to Go.
        ("newfstatat", false, Outcome::StartFailed),
        ("getcwd", false, Outcome::StartFailed),
    ] {
        let r = lint(&deny(name, 0), nnp);
        assert_eq!(r.outcome, want, "{name} nnp={nnp}: {:#?}", r.diagnostics);
    }
}

#[test]
fn privilege_drops_answered_0_are_errors_naming_what_the_pod_keeps() {
    for (name, kept) in [
        ("setuid", "root user (uid 0)"),
        ("setgid", "root group (gid 0)"),
        ("setgroups", "supplementary groups"),
        ("capset", "all of runc init's capabilities"),
    ] {
        let r = lint(&deny(name, 0), false);
        assert_eq!(r.outcome, Outcome::Ok, "{name}: {:#?}", r.diagnostics);
        let found = findings(&r, Code::PrivilegeDropSkipped);
        assert_eq!(found.len(), 1, "{name}: {:#?}", r.diagnostics);
        assert!(found[0].contains(kept), "{name}: {}", found[0]);
        assert_eq!(r.diagnostics[0].code, Code::PrivilegeDropSkipped);
        assert_eq!(r.diagnostics[0].severity, Severity::Error);
        // With noNewPrivileges the filter comes after the drops: nothing is skipped.
        let r = lint(&deny(name, 0), true);
        assert!(
            findings(&r, Code::PrivilegeDropSkipped).is_empty(),
            "{name}"
        );
        // A real errno fails the start instead.
        let r = lint(&deny(name, 1), false);
        assert_eq!(r.outcome, Outcome::StartFailed, "{name}");
        assert!(
            findings(&r, Code::PrivilegeDropSkipped).is_empty(),
            "{name}"
        );
    }
}

#[test]
fn eaccess_falls_back_only_on_eperm_and_enosys() {
    let trace = r#"{"names":["faccessat2"],"action":"SCMP_ACT_TRACE"}"#;
    for (rules, want) in [
        (deny("faccessat2", 1), Outcome::Ok),
        (deny("faccessat2", 38), Outcome::Ok),
        (deny("faccessat2", 0), Outcome::Ok),
        (trace.to_string(), Outcome::Ok),
        (deny("faccessat2", 22), Outcome::StartFailed),
        (deny("faccessat2", 13), Outcome::StartFailed),
        // The fallback's access(2) is faccessat on x86_64.
        (deny("faccessat", 1), Outcome::Ok),
        (
            format!("{},{}", deny("faccessat2", 1), deny("faccessat", 1)),
            Outcome::StartFailed,
        ),
        (
            format!("{},{}", deny("faccessat2", 38), deny("faccessat", 22)),
            Outcome::StartFailed,
        ),
        (
            format!("{trace},{}", deny("faccessat", 1)),
            Outcome::StartFailed,
        ),
        (
            format!("{},{}", deny("faccessat2", 1), deny("faccessat", 0)),
            Outcome::Ok,
        ),
        // uid != euid: x/sys' AT_EACCESS emulation instead of faccessat.
        (
            format!(
                "{},{},{}",
                deny("getuid", 1),
                deny("faccessat2", 1),
                deny("faccessat", 1)
            ),
            Outcome::Ok,
        ),
        (
            format!("{},{}", deny("faccessat2", 1), deny("getegid", 1)),
            Outcome::Ok,
        ),
    ] {
        let r = lint(&rules, false);
        assert_eq!(r.outcome, want, "{rules}: {:#?}", r.diagnostics);
        // With noNewPrivileges the lookup happens before the filter.
        assert_eq!(lint(&rules, true).outcome, Outcome::Ok, "{rules}");
    }
}

#[test]
fn capability_calls_whose_errors_runc_ignores() {
    const PR_SET_KEEPCAPS: u32 = 8;
    const PR_CAPBSET_DROP: u32 = 24;
    const PR_CAP_AMBIENT: u32 = 47;
    for (option, errno, want) in [
        (PR_CAPBSET_DROP, 22, Outcome::Ok),
        (PR_CAPBSET_DROP, 0, Outcome::Ok),
        (PR_CAPBSET_DROP, 1, Outcome::StartFailed),
        (PR_CAPBSET_DROP, 38, Outcome::StartFailed),
        (PR_CAPBSET_DROP, 13, Outcome::StartFailed),
        (PR_CAP_AMBIENT, 1, Outcome::Ok),
        (PR_CAP_AMBIENT, 22, Outcome::Ok),
        (PR_CAP_AMBIENT, 38, Outcome::Ok),
        (PR_SET_KEEPCAPS, 0, Outcome::Ok),
        (PR_SET_KEEPCAPS, 22, Outcome::StartFailed),
        (PR_SET_KEEPCAPS, 1, Outcome::StartFailed),
    ] {
        let r = lint(&deny_prctl(option, errno), false);
        assert_eq!(
            r.outcome, want,
            "prctl({option}) errno {errno}: {:#?}",
            r.diagnostics
        );
        // The bounding set left full is said, whatever the answer runc ignored.
        let bounding = findings(&r, Code::PrivilegeDropSkipped);
        assert_eq!(
            bounding.len(),
            usize::from(option == PR_CAPBSET_DROP && want == Outcome::Ok),
            "prctl({option}) errno {errno}: {bounding:?}"
        );
    }
    // The whole name answered EINVAL: PR_SET_KEEPCAPS still fails the start.
    let r = lint(&deny("prctl", 22), false);
    assert_eq!(r.outcome, Outcome::StartFailed);
}

/// runc init drops each capability the bounding set lacks with a
/// `prctl(PR_CAPBSET_DROP, cap)` of its own, so a rule on the capability
/// matters only for the ones the container's set lacks: CAP_FOWNER is in
/// containerd's default set and not in `runc spec`'s. Judged by real runc
/// (tests/src/lintset.rs's variants) and found by the campaign, seed
/// 15343045307184929404.
#[test]
fn bounding_set_drops_are_judged_per_capability_the_set_lacks() {
    let capbset_drop = |cap: u32, errno: u16| {
        format!(
            r#"{{"names":["prctl"],"action":"SCMP_ACT_ERRNO","errnoRet":{errno},"args":[{{"index":0,"value":24,"op":"SCMP_CMP_EQ"}},{{"index":1,"value":{cap},"op":"SCMP_CMP_EQ"}}]}}"#
        )
    };
    let lint_with = |rules: &str, bounding_set: CapabilitySet| {
        let src = format!(r#"{{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{rules}]}}"#);
        let opts = LintOptions {
            no_new_privileges: false,
            arch: Arch::X86_64,
            check_listener: false,
            bounding_set: Some(bounding_set),
            ..Default::default()
        };
        lint_source("p.json", src.as_bytes(), &opts, &Native)
    };
    let spec = CapabilitySet::OCI_SPEC_DEFAULT;
    let containerd = CapabilitySet::CONTAINERD_DEFAULT;
    // The campaign's rule: no option named, args[1] == 3 matches PR_CAPBSET_DROP of CAP_FOWNER.
    let bare = r#"{"names":["prctl"],"action":"SCMP_ACT_ERRNO","errnoRet":1,"args":[{"index":1,"value":3,"op":"SCMP_CMP_EQ"}]}"#;
    for (rules, set, want) in [
        (capbset_drop(3, 1), spec, Outcome::StartFailed),
        (bare.to_string(), spec, Outcome::StartFailed),
        (capbset_drop(3, 1), containerd, Outcome::Ok),
        (bare.to_string(), containerd, Outcome::Ok),
        (capbset_drop(21, 1), spec, Outcome::StartFailed),
        (capbset_drop(21, 1), containerd, Outcome::StartFailed),
        (capbset_drop(21, 22), containerd, Outcome::Ok),
        // Kept by both: never dropped, so never asked.
        (capbset_drop(5, 1), spec, Outcome::Ok),
        (capbset_drop(5, 1), containerd, Outcome::Ok),
    ] {
        let r = lint_with(&rules, set);
        assert_eq!(
            r.outcome, want,
            "{rules} with {set:?}: {:#?}",
            r.diagnostics
        );
    }
    let r = lint_with(&capbset_drop(3, 1), spec);
    let denied = findings(&r, Code::RuntimeSyscallDenied);
    assert!(
        denied[0].contains("to drop CAP_FOWNER from the bounding set"),
        "{denied:?}"
    );
    // Answered 0: CAP_FOWNER silently stays in the bounding set.
    let r = lint_with(&capbset_drop(3, 0), spec);
    assert_eq!(r.outcome, Outcome::Ok);
    let kept = findings(&r, Code::PrivilegeDropSkipped);
    assert_eq!(kept.len(), 1, "{:#?}", r.diagnostics);
    assert!(
        kept[0].contains("PR_CAPBSET_DROP of CAP_FOWNER"),
        "{}",
        kept[0]
    );
    assert!(findings(
        &lint_with(&capbset_drop(3, 0), containerd),
        Code::PrivilegeDropSkipped
    )
    .is_empty());
}

/// runc init fstats stdin, stdout and stderr (fixStdioPermissions) before the
/// filter takes over with noNewPrivileges false: a rule on fstat that spares
/// fd 0 still breaks the start. Real runc 1.1.5 (a differential campaign's
/// case, seed 1767648712536697145): `unable to setup user: fstat /dev/stdout:
/// function not implemented`. The model once had fstat(0) alone and said Ok.
#[test]
fn fstat_of_stdout_and_stderr_is_init_s_too() {
    let rule = r#"{"names":["fstat"],"action":"SCMP_ACT_ERRNO","errnoRet":38,"args":[{"index":0,"value":0,"op":"SCMP_CMP_GT"},{"index":4,"value":0,"op":"SCMP_CMP_EQ"}]}"#;
    assert_eq!(lint(rule, false).outcome, Outcome::StartFailed);
    // With noNewPrivileges the filter is loaded after that fix-up.
    assert_eq!(lint(rule, true).outcome, Outcome::Ok);
}
