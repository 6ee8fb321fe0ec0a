//! The lint set: the profiles the project's own tests judge against a real
//! runtime (tests/lint_vs_runc.rs against the splice oracle,
//! tests/lint_vs_runtime.rs against containerd through CRI), besides
//! profiles/ and the shared corpus.

use nodeproof_bpfgen::Native;
use nodeproof_seccomp::capability::CapabilitySet;
use nodeproof_seccomp::filter::Arch;
use nodeproof_seccomp::lint::{lint_source, LintOptions, Outcome, ProfileReport, Runtime};
use nodeproof_seccomp::oci_runtime::{OciRuntime, OciRuntimeKind};
use nodeproof_seccomp::syscalls::resolve_syscall;
use serde_json::Value;

/// runc 1.1.5's prediction for a container with `bounding_set`
/// ([`CapabilitySet::OCI_SPEC_DEFAULT`] for the splice oracle's `runc spec`
/// bundle, [`CapabilitySet::CONTAINERD_DEFAULT`] for containerd's CRI).
pub fn predict(bytes: &[u8], nnp: bool, bounding_set: CapabilitySet) -> (Outcome, String) {
    let r = report_for(bytes, nnp, OciRuntime::default(), bounding_set);
    (r.outcome, first_line(&r))
}

pub fn first_line(r: &ProfileReport) -> String {
    r.diagnostics.first().map_or_else(String::new, |d| {
        format!("{}[{}]: {}", d.severity, d.code, d.message)
    })
}

/// The report for `oci_runtime` behind its CRI runtime: runc behind
/// containerd, crun behind CRI-O.
pub fn report_for(
    bytes: &[u8],
    nnp: bool,
    oci_runtime: OciRuntime,
    bounding_set: CapabilitySet,
) -> ProfileReport {
    let opts = LintOptions {
        runtime: match oci_runtime.kind() {
            OciRuntimeKind::Runc => Runtime::Containerd,
            OciRuntimeKind::Crun => Runtime::Crio,
        },
        no_new_privileges: nnp,
        arch: Arch::native(),
        check_listener: true,
        oci_runtime,
        bounding_set: Some(bounding_set),
    };
    lint_source("p.json", bytes, &opts, &Native)
}

/// Profiles written to break in specific ways, with the outcome runc gives them.
pub fn variants() -> Vec<(&'static str, Vec<u8>)> {
    let allow =
        |rules: &str| format!(r#"{{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{rules}]}}"#);
    let default = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../profiles/runtime-default-x86_64.json"
    ))
    .unwrap();
    let default_text = String::from_utf8(default).unwrap();
    // The default profile with one syscall taken out of its allow lists.
    let without = |name: &str| {
        default_text
            .replace(&format!("\"{name}\","), "")
            .replace(&format!(",\n        \"{name}\"\n"), "\n")
    };
    // A filter far beyond 4096 instructions: one masked comparison per value.
    let big_rules: Vec<String> = (0..1500)
        .map(|i| format!(r#"{{"names":["ioctl"],"action":"SCMP_ACT_ERRNO","args":[{{"index":1,"value":{},"op":"SCMP_CMP_EQ"}}]}}"#, 0x10000 + i))
        .collect();
    // The default profile with KILL_PROCESS as the default, `architectures` as
    // given, and no syscall numbered from rseq's up: the entrypoint's rseq is
    // above every named syscall, so only runc's -ENOSYS stub saves it.
    let kill_below_rseq = |arches: Option<&[&str]>| {
        let mut v: Value = serde_json::from_str(&default_text).unwrap();
        let rseq = resolve_syscall("rseq", Arch::native()).unwrap();
        v["defaultAction"] = "SCMP_ACT_KILL_PROCESS".into();
        v.as_object_mut().unwrap().remove("defaultErrnoRet");
        match arches {
            Some(a) => v["architectures"] = a.iter().map(|s| Value::from(*s)).collect(),
            None => drop(v.as_object_mut().unwrap().remove("architectures")),
        }
        let rules = v["syscalls"].as_array_mut().unwrap();
        for rule in rules.iter_mut() {
            rule["names"].as_array_mut().unwrap().retain(|n| {
                resolve_syscall(n.as_str().unwrap(), Arch::native()).is_some_and(|nr| nr < rseq)
            });
        }
        rules.retain(|r| !r["names"].as_array().unwrap().is_empty());
        serde_json::to_vec_pretty(&v).unwrap()
    };
    // The default profile without `architectures`, padded with conditional
    // `acct` rules (about one instruction each) to either side of the
    // kernel's 4096: runc adds only its 4-instruction no-op stub here.
    let (fits, over) = {
        let mut base: Value = serde_json::from_str(&default_text).unwrap();
        base.as_object_mut().unwrap().remove("architectures");
        let padded = |n: u64| {
            let mut v = base.clone();
            let rules = v["syscalls"].as_array_mut().unwrap();
            rules.extend((0..n).map(|i| {
                serde_json::json!({"names": ["acct"], "action": "SCMP_ACT_ALLOW",
                    "args": [{"index": 0, "value": 0x10000 + i, "op": "SCMP_CMP_EQ"}]})
            }));
            serde_json::to_vec_pretty(&v).unwrap()
        };
        let opts = LintOptions {
            runtime: Runtime::Containerd,
            no_new_privileges: true,
            arch: Arch::native(),
            check_listener: true,
            oci_runtime: Default::default(),
            // `runc spec`'s bounding set: the splice oracle runs its config.json.
            bounding_set: Some(CapabilitySet::OCI_SPEC_DEFAULT),
        };
        let len = |n| {
            lint_source("p.json", &padded(n), &opts, &Native)
                .instructions
                .unwrap()
        };
        // The largest padding that still fits (the length grows with n).
        let (mut lo, mut hi) = (0, 8000);
        assert!(len(lo) <= 4096 && len(hi) > 4096, "{} {}", len(lo), len(hi));
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if len(mid) <= 4096 {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        // Close enough that the 9-instruction native section nodeproof used
        // to count would push it over; and over only by the no-op stub.
        assert!(len(lo) >= 4092, "{} instructions", len(lo));
        assert!(len(hi) <= 4096 + 4, "{} instructions", len(hi));
        (padded(lo), padded(hi))
    };
    let deny = |name: &str, errno: u16| {
        format!(r#"{{"names":["{name}"],"action":"SCMP_ACT_ERRNO","errnoRet":{errno}}}"#)
    };
    let deny_prctl = |option: u32, errno: u16| {
        format!(
            r#"{{"names":["prctl"],"action":"SCMP_ACT_ERRNO","errnoRet":{errno},"args":[{{"index":0,"value":{option},"op":"SCMP_CMP_EQ"}}]}}"#
        )
    };
    let deny_capbset_drop = |cap: u32, errno: u16| {
        format!(
            r#"{{"names":["prctl"],"action":"SCMP_ACT_ERRNO","errnoRet":{errno},"args":[{{"index":0,"value":24,"op":"SCMP_CMP_EQ"}},{{"index":1,"value":{cap},"op":"SCMP_CMP_EQ"}}]}}"#
        )
    };
    // The runtime default itself is among the profiles of profiles/.
    vec![
        ("misspelled args", allow(r#"{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","agrs":[{"index":0,"value":1,"op":"SCMP_CMP_EQ"}]}"#).into_bytes()),
        ("case-folded key", br#"{"DefaultAction":"SCMP_ACT_ALLOW"}"#.to_vec()),
        // Go 1.19 folds the long s (U+017F) to 's': this key is `syscalls`, and execve is denied.
        ("long-s key", "{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"\u{17f}yscalls\":[{\"names\":[\"execve\"],\"action\":\"SCMP_ACT_ERRNO\"}]}".as_bytes().to_vec()),
        ("last duplicate wins", br#"{"defaultAction":"SCMP_ACT_ALLOW","defaultAction":"SCMP_ACT_KILL"}"#.to_vec()),
        ("null profile", b"null".to_vec()),
        ("empty object", b"{}".to_vec()),
        ("top-level array", b"[]".to_vec()),
        ("truncated", br#"{"defaultAction":"SCMP_ACT_ALLOW","sysc"#.to_vec()),
        ("byte order mark", b"\xef\xbb\xbf{\"defaultAction\":\"SCMP_ACT_ALLOW\"}".to_vec()),
        ("numeric action", allow(r#"{"names":["mkdir"],"action":2}"#).into_bytes()),
        ("negative errno", allow(r#"{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","errnoRet":-1}"#).into_bytes()),
        ("flags", br#"{"defaultAction":"SCMP_ACT_ALLOW","flags":["SECCOMP_FILTER_FLAG_TSYNC"]}"#.to_vec()),
        // crun knows a few flags by name and fails the start on any other.
        ("unknown flag", br#"{"defaultAction":"SCMP_ACT_ALLOW","flags":["SECCOMP_FILTER_FLAG_NOPE"]}"#.to_vec()),
        ("wait-killable-recv flag", br#"{"defaultAction":"SCMP_ACT_ALLOW","flags":["SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"]}"#.to_vec()),
        // crun refuses an errno on an action that takes none; runc ignores it.
        ("errnoRet on a log rule", allow(r#"{"names":["acct"],"action":"SCMP_ACT_LOG","errnoRet":1}"#).into_bytes()),
        ("defaultErrnoRet on a log default", br#"{"defaultAction":"SCMP_ACT_LOG","defaultErrnoRet":1,"syscalls":[{"names":["acct"],"action":"SCMP_ACT_ERRNO"}]}"#.to_vec()),
        ("unknown arch", br#"{"defaultAction":"SCMP_ACT_ALLOW","architectures":["x86_64"]}"#.to_vec()),
        ("unknown operator", allow(r#"{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","args":[{"index":0,"value":1,"op":"EQ"}]}"#).into_bytes()),
        ("empty syscall name", allow(r#"{"names":[""],"action":"SCMP_ACT_ERRNO"}"#).into_bytes()),
        ("argument index 6", allow(r#"{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","args":[{"index":6,"value":1,"op":"SCMP_CMP_EQ"}]}"#).into_bytes()),
        ("notify write", br#"{"defaultAction":"SCMP_ACT_ALLOW","listenerPath":"/run/none.sock","syscalls":[{"names":["write"],"action":"SCMP_ACT_NOTIFY"}]}"#.to_vec()),
        ("notify without listener", allow(r#"{"names":["mkdir"],"action":"SCMP_ACT_NOTIFY"}"#).into_bytes()),
        ("notify, agent socket missing", br#"{"defaultAction":"SCMP_ACT_ALLOW","listenerPath":"/run/nodeproof-test-none.sock","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_NOTIFY"}]}"#.to_vec()),
        ("errno too large for libseccomp", allow(r#"{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","errnoRet":5000}"#).into_bytes()),
        ("errno 0", allow(r#"{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","errnoRet":0}"#).into_bytes()),
        ("execve killed", allow(r#"{"names":["execve"],"action":"SCMP_ACT_KILL_PROCESS"}"#).into_bytes()),
        ("shadowed and unknown rules", allow(r#"{"names":["mkdir","no_such_syscall"],"action":"SCMP_ACT_ALLOW"}"#).into_bytes()),
        ("split conditions on getdents64", allow(r#"{"names":["getdents64"],"action":"SCMP_ACT_ERRNO","args":[{"index":2,"value":1,"op":"SCMP_CMP_GE"},{"index":2,"value":4,"op":"SCMP_CMP_LE"}]}"#).into_bytes()),
        ("default without getdents64", without("getdents64").into_bytes()),
        ("default without capset", without("capset").into_bytes()),
        ("default without brk", without("brk").into_bytes()),
        ("default without brk and mmap", without("brk").replace("\"mmap\",", "").into_bytes()),
        ("default, denials answered ENOSYS", default_text.replacen("\"SCMP_ACT_ERRNO\"", "\"SCMP_ACT_ERRNO\",\n  \"defaultErrnoRet\": 38", 1).into_bytes()),
        ("filter over 4096 instructions", allow(&big_rules.join(",")).into_bytes()),
        // runc hands names to libseccomp as C strings: everything from a NUL on is cut off.
        ("NUL inside a denied name", allow(r#"{"names":["execve\u0000x"],"action":"SCMP_ACT_ERRNO"}"#).into_bytes()),
        ("NUL inside an allowed name", default_text.replacen("\"execve\",", "\"execve\\u0000x\",", 1).into_bytes()),
        ("NUL before a denied name", allow(r#"{"names":["\u0000execve"],"action":"SCMP_ACT_ERRNO"}"#).into_bytes()),
        // Architectures libseccomp knows but runc 1.1.5's own map does not.
        ("riscv64 arch", br#"{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_RISCV64"]}"#.to_vec()),
        ("loongarch64 arch", br#"{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_LOONGARCH64"]}"#.to_vec()),
        ("made-up arch", br#"{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_NOPE"]}"#.to_vec()),
        // The -ENOSYS stub covers only the listed architectures.
        ("kill default below rseq, native arch listed", kill_below_rseq(Some(&["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]))),
        ("kill default below rseq, no architectures", kill_below_rseq(None)),
        ("kill default below rseq, empty architectures", kill_below_rseq(Some(&[]))),
        ("no architectures, 4096 instructions with the no-op stub", fits),
        ("no architectures, over 4096 only by the no-op stub", over),
        ("kill default below rseq, only x86 listed", kill_below_rseq(Some(&["SCMP_ARCH_X86"]))),
        // errnoRet 0: the call returns 0 without running; many of init's callers carry on.
        ("setuid answered 0", allow(&deny("setuid", 0)).into_bytes()),
        ("setgid answered 0", allow(&deny("setgid", 0)).into_bytes()),
        ("setgroups answered 0", allow(&deny("setgroups", 0)).into_bytes()),
        ("capset answered 0", allow(&deny("capset", 0)).into_bytes()),
        ("getdents64 answered 0", allow(&deny("getdents64", 0)).into_bytes()),
        ("mprotect answered 0", allow(&deny("mprotect", 0)).into_bytes()),
        ("chdir answered 0", allow(&deny("chdir", 0)).into_bytes()),
        ("getppid answered 0", allow(&deny("getppid", 0)).into_bytes()),
        ("newfstatat answered 0", allow(&deny("newfstatat", 0)).into_bytes()),
        ("getcwd answered 0", allow(&deny("getcwd", 0)).into_bytes()),
        ("fstatfs answered 0", allow(&deny("fstatfs", 0)).into_bytes()),
        // runc's eaccess: only EPERM/ENOSYS from faccessat2 fall back to access(2).
        ("faccessat2 answered EINVAL", allow(&deny("faccessat2", 22)).into_bytes()),
        ("faccessat2 and its fallback denied", allow(&[deny("faccessat2", 1), deny("faccessat", 1)].join(",")).into_bytes()),
        ("faccessat2 traced, fallback denied", allow(&[r#"{"names":["faccessat2"],"action":"SCMP_ACT_TRACE"}"#.to_string(), deny("faccessat", 13)].join(",")).into_bytes()),
        ("eaccess fallback with uid != euid", allow(&[deny("getuid", 1), deny("faccessat2", 38), deny("faccessat", 1)].join(",")).into_bytes()),
        // Errors runc's capability library ignores.
        ("PR_CAPBSET_DROP answered EINVAL", allow(&deny_prctl(24, 22)).into_bytes()),
        ("PR_CAPBSET_DROP answered EACCES", allow(&deny_prctl(24, 13)).into_bytes()),
        ("PR_CAP_AMBIENT answered EPERM", allow(&deny_prctl(47, 1)).into_bytes()),
        ("PR_CAP_AMBIENT answered EINVAL", allow(&deny_prctl(47, 22)).into_bytes()),
        ("PR_SET_KEEPCAPS answered 0", allow(&deny_prctl(8, 0)).into_bytes()),
        ("PR_SET_KEEPCAPS answered EINVAL", allow(&deny_prctl(8, 22)).into_bytes()),
        // One PR_CAPBSET_DROP per capability the bounding set lacks: CAP_FOWNER
        // is dropped under `runc spec`'s set, kept under containerd's.
        ("PR_CAPBSET_DROP of CAP_FOWNER denied", allow(&deny_capbset_drop(3, 1)).into_bytes()),
        ("PR_CAPBSET_DROP of CAP_SYS_ADMIN denied", allow(&deny_capbset_drop(21, 1)).into_bytes()),
        ("PR_CAPBSET_DROP of CAP_FOWNER answered 0", allow(&deny_capbset_drop(3, 0)).into_bytes()),
    ]
}
