//! `advise --from RECORDING`'s allow-list checked against the real runtimes:
//! the profile written for a recording of `/bin/true` (busybox-static, the
//! oracles' entrypoint) must start it under each runtime and in each
//! noNewPrivileges mode the runtime's oracle runs, as lint predicted; the
//! recorded calls alone (without the runtime's own and the entrypoint's
//! start) must not, or the test would check nothing.

use nodeproof_bpfgen::Native;
use nodeproof_e2e::runtimes::RuntimeBuild;
use nodeproof_e2e::splice::{self, SpliceOracle, Verdict};
use nodeproof_seccomp::allowlist::allowlist;
use nodeproof_seccomp::filter::Arch;
use nodeproof_seccomp::lint::{LintOptions, Outcome};
use nodeproof_seccomp::recording::{
    RecordedArch, RecordedContainer, RecordedSyscall, Recording, FORMAT,
};
use nodeproof_seccomp::syscalls::resolve_syscall;
use nodeproof_testkit::require;

/// Starts per runtime and mode: Go's scheduler in runc init makes some calls
/// in some starts only (a denied futex wake killed 1 start of 3 under load
/// before the Go runtime's calls were kept), so one start proves little.
const REPS: usize = 10;

/// What a recording of busybox's `/bin/true` begun after its start holds.
fn recording_of_true() -> Recording {
    Recording {
        format: FORMAT.into(),
        node: None,
        pod: None,
        started: "2026-12-06T02:00:00Z".into(),
        ended: "2026-12-06T02:00:01Z".into(),
        containers: vec![RecordedContainer {
            name: "true".into(),
            id: None,
            profile: None,
            arches: vec![RecordedArch {
                arch: Arch::X86_64,
                syscalls: vec![RecordedSyscall {
                    nr: resolve_syscall("exit_group", Arch::X86_64).expect("exit_group") as u32,
                    name: Some("exit_group".into()),
                    args: vec![],
                }],
            }],
            lost: 0,
        }],
    }
}

#[test]
fn the_allowlist_starts_under_every_real_runtime_and_the_recording_alone_does_not() {
    let Some(_) = require(splice::ORACLE) else {
        return;
    };
    if Arch::native() != Arch::X86_64 {
        eprintln!("skipped: the runtimes' init models are x86_64's");
        return;
    }
    let rec = recording_of_true();
    let mut checked = 0;
    for build in [
        RuntimeBuild::Runc1_1_5,
        RuntimeBuild::Runc1_1_15,
        RuntimeBuild::Crun1_8,
        RuntimeBuild::Crun1_21,
    ] {
        if require(&build.needs()).is_none() {
            continue;
        }
        let oracle = SpliceOracle::new(splice::default_oracle_dir(), build).expect("oracle");
        for nnp in [false, true] {
            let opts = LintOptions {
                no_new_privileges: nnp,
                arch: Arch::X86_64,
                oci_runtime: build.modelled(),
                check_listener: false,
                ..Default::default()
            };
            let a = allowlist(&rec, None, &opts, &Native).expect("an allow-list");
            assert_eq!(a.report.outcome, Outcome::Ok);
            let profile = serde_json::to_vec(&a.profile).unwrap();
            for _ in 0..REPS {
                let run = oracle.run(&profile, nnp, &["/bin/true"]);
                assert_eq!(
                    run.verdict,
                    Verdict::Accepted,
                    "{} nnp={nnp}: the allow-list (added {:?}) did not start /bin/true: {}",
                    build.name(),
                    a.added_for_runtime,
                    run.stderr
                );
            }
            // The recorded call alone: the runtime's init is denied.
            let bare = serde_json::json!({
                "defaultAction": "SCMP_ACT_ERRNO",
                "architectures": ["SCMP_ARCH_X86_64"],
                "syscalls": [{"names": a.recorded, "action": "SCMP_ACT_ALLOW"}],
            });
            let run = oracle.run(&serde_json::to_vec(&bare).unwrap(), nnp, &["/bin/true"]);
            assert_ne!(
                run.verdict,
                Verdict::Accepted,
                "{} nnp={nnp}: the recording alone started /bin/true",
                build.name()
            );
            eprintln!(
                "{} nnp={nnp}: allow-list of {} names ({} added for the runtime and the entrypoint) starts /bin/true {REPS} of {REPS}",
                build.name(),
                a.recorded.len() + a.added_for_runtime.len(),
                a.added_for_runtime.len()
            );
            checked += 1;
        }
    }
    assert!(checked >= 2, "no runtime could be checked");
}
