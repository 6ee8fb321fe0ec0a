//! crun's differences from runc, each on one profile, without a runtime
//! (the live check against real crun 1.8 and 1.21 is
//! tests/tests/lint_vs_runc.rs): the same profile, judged for runc 1.1.5 and
//! for each crun release.

use nodeproof_bpfgen::Native;
use nodeproof_seccomp::diagnostic::Code;
use nodeproof_seccomp::filter::Arch;
use nodeproof_seccomp::lint::{lint_source, LintOptions, Outcome, ProfileReport, Runtime};
use nodeproof_seccomp::oci_runtime::{CrunVersion, OciRuntime, RuncVersion};

const RUNC: OciRuntime = OciRuntime::Runc(RuncVersion::V1_1_5);
const CRUNS: [OciRuntime; 2] = [
    OciRuntime::Crun(CrunVersion::V1_8),
    OciRuntime::Crun(CrunVersion::V1_21),
];

fn lint(src: &str, nnp: bool, oci_runtime: OciRuntime) -> ProfileReport {
    let opts = LintOptions {
        runtime: Runtime::Crio,
        no_new_privileges: nnp,
        arch: Arch::X86_64,
        check_listener: true,
        oci_runtime,
        ..Default::default()
    };
    lint_source("p.json", src.as_bytes(), &opts, &Native)
}

/// (profile, runc 1.1.5's outcome, crun's outcome) in both modes.
fn differ(src: &str, runc: Outcome, crun: Outcome) {
    for nnp in [true, false] {
        assert_eq!(lint(src, nnp, RUNC).outcome, runc, "runc nnp={nnp}: {src}");
        for c in CRUNS {
            assert_eq!(lint(src, nnp, c).outcome, crun, "{c} nnp={nnp}: {src}");
        }
    }
}

fn allow(rules: &str) -> String {
    format!(r#"{{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{rules}]}}"#)
}

#[test]
fn architectures_are_libseccomps_names() {
    let p = |a: &str| format!(r#"{{"defaultAction":"SCMP_ACT_ALLOW","architectures":["{a}"]}}"#);
    differ(&p("x86_64"), Outcome::Rejected, Outcome::Ok);
    differ(&p("SCMP_ARCH_RISCV64"), Outcome::Rejected, Outcome::Ok);
    // crun builds the filter after creating the container's process: its refusals are start failures.
    differ(
        &p("SCMP_ARCH_NOPE"),
        Outcome::Rejected,
        Outcome::StartFailed,
    );
}

#[test]
fn refusals_come_after_the_process_exists() {
    differ(
        &allow(
            r#"{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","args":[{"index":0,"value":1,"op":"EQ"}]}"#,
        ),
        Outcome::Rejected,
        Outcome::StartFailed,
    );
    differ(
        &allow(r#"{"names":["mkdir"],"action":"SCMP_ACT_BOGUS"}"#),
        Outcome::Rejected,
        Outcome::StartFailed,
    );
    // runc ignores an errno on an action without one; crun refuses it.
    differ(
        &allow(r#"{"names":["acct"],"action":"SCMP_ACT_LOG","errnoRet":1}"#),
        Outcome::Ok,
        Outcome::StartFailed,
    );
}

#[test]
fn flags_empty_names_and_notify() {
    differ(
        r#"{"defaultAction":"SCMP_ACT_ALLOW","flags":["SECCOMP_FILTER_FLAG_TSYNC"]}"#,
        Outcome::Rejected,
        Outcome::Ok,
    );
    differ(
        r#"{"defaultAction":"SCMP_ACT_ALLOW","flags":["SECCOMP_FILTER_FLAG_NOPE"]}"#,
        Outcome::Rejected,
        Outcome::StartFailed,
    );
    differ(
        &allow(r#"{"names":[""],"action":"SCMP_ACT_ERRNO"}"#),
        Outcome::StartFailed,
        Outcome::Ok,
    );
    differ(
        &allow(r#"{"names":["mkdir"],"action":"SCMP_ACT_NOTIFY"}"#),
        Outcome::StartFailed,
        Outcome::Ok,
    );
    // crun connects to the agent before it creates the container.
    differ(
        r#"{"defaultAction":"SCMP_ACT_ALLOW","listenerPath":"/run/nodeproof-test-none.sock","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_NOTIFY"}]}"#,
        Outcome::StartFailed,
        Outcome::Rejected,
    );
}

#[test]
fn crun_has_no_enosys_stub_and_its_own_init() {
    // A KILL default that names x86_64 syscalls only up to 300: runc's stub
    // answers the entrypoint's newer rseq (334) with ENOSYS; crun kills it.
    let names: Vec<String> = [
        "execve",
        "brk",
        "arch_prctl",
        "mprotect",
        "exit_group",
        "set_tid_address",
        "set_robust_list",
        "prlimit64",
        "readlink",
        "getrandom",
        "getuid",
        "prctl",
        "close",
        "capset",
        "capget",
        "setuid",
        "setgid",
        "setgroups",
        "setresuid",
        "setresgid",
        "rt_sigaction",
        "rt_sigprocmask",
        "write",
        "read",
        "openat",
        "fstat",
        "fstatfs",
        "getdents64",
        "futex",
        "newfstatat",
        "getppid",
        "chdir",
        "fcntl",
        "epoll_ctl",
        "getcwd",
        "faccessat",
        "getpid",
        "rt_sigreturn",
        "mmap",
        "munmap",
        "sched_yield",
        "nanosleep",
        "sigaltstack",
        "gettid",
        "tgkill",
        "clone",
        "exit",
        "madvise",
        "getgid",
        "geteuid",
        "getegid",
        "epoll_pwait",
    ]
    .iter()
    .map(|n| format!("\"{n}\""))
    .collect();
    let kill = format!(
        r#"{{"defaultAction":"SCMP_ACT_KILL_PROCESS","architectures":["SCMP_ARCH_X86_64"],"syscalls":[{{"names":[{}],"action":"SCMP_ACT_ALLOW"}}]}}"#,
        names.join(",")
    );
    differ(&kill, Outcome::Ok, Outcome::StartFailed);
    let r = lint(&kill, true, CRUNS[0]);
    assert!(
        r.diagnostics
            .iter()
            .any(|d| d.code == Code::EntrypointSyscallDenied && d.message.contains("`rseq`")),
        "{:#?}",
        r.diagnostics
    );
    // runc init reads /proc/self/fd after the filter; crun's process does not.
    differ(
        &allow(r#"{"names":["getdents64"],"action":"SCMP_ACT_ERRNO"}"#),
        Outcome::StartFailed,
        Outcome::Ok,
    );
}
