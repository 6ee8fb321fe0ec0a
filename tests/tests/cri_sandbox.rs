//! The containerd oracle keeps judging when its pod sandbox is lost: with the
//! pause process gone, runc cannot join the pod's namespaces (`namespace
//! path: lstat /proc/0/ns/ipc`), which is the oracle's failure, not a
//! verdict on the profile. The oracle sees the sandbox NOTREADY (CRI
//! PodSandboxStatus), runs the pod's next attempt and runs the case again.
//! Its own binary: ending the pause of a containerd other tests share would
//! make their cases run twice.

use std::time::{Duration, Instant};

use nodeproof_e2e::cri::{self, ContainerdOracle, Stage};
use nodeproof_e2e::splice::Verdict;
use nodeproof_testkit::require;

/// SIGKILL to the pause process of the oracle's sandbox; returns once it has
/// exited (gone, or a zombie until containerd's shim reaps it).
fn end_pause(oracle: &ContainerdOracle) {
    let pid = oracle.sandbox_pid().expect("the pause process's pid");
    // SAFETY: kill(2) on the pause process of the sandbox this test's containerd runs.
    assert_eq!(
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) },
        0,
        "kill {pid}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let exited = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        });
        if exited {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("pause process {pid} still running 10 s after SIGKILL");
}

#[test]
fn a_lost_pod_sandbox_is_replaced_and_the_case_still_judged() {
    let Some(_) = require(cri::ORACLE) else {
        return;
    };
    let oracle = ContainerdOracle::shared().expect("containerd");
    let allow = br#"{"defaultAction":"SCMP_ACT_ALLOW"}"#;
    // Denies everything runc init calls after loading the filter: a real start failure.
    let deny = br#"{"defaultAction":"SCMP_ACT_ERRNO"}"#;

    let first = oracle.run(allow, true, &["/bin/true"]);
    assert_eq!(first.verdict, Verdict::Accepted, "{first:?}");

    // The pause gone between two cases: the next one still gets containerd's verdict.
    let lost = oracle.sandbox_id();
    end_pause(&oracle);
    let next = oracle.run(allow, true, &["/bin/true"]);
    assert_eq!(next.verdict, Verdict::Accepted, "{next:?}");
    assert_eq!(next.stage, Stage::Exited, "{next:?}");
    let replaced = oracle.sandbox_id();
    assert_ne!(replaced, lost, "a new sandbox runs the case");

    // And a failing case after another loss fails for its profile, not for the sandbox.
    end_pause(&oracle);
    let failed = oracle.run(deny, false, &["/bin/true"]);
    assert_eq!(failed.verdict, Verdict::StartFailed, "{failed:?}");
    assert_ne!(failed.stage, Stage::Oracle, "{failed:?}");
    assert!(failed.init_started, "runc init ran: {failed:?}");
    assert!(!failed.detail.contains("/proc/0/ns"), "{failed:?}");
    assert_ne!(oracle.sandbox_id(), replaced);

    // A case with the sandbox left alone does not replace it.
    let kept = oracle.sandbox_id();
    let denied = oracle.run(deny, true, &["/bin/true"]);
    assert_eq!(denied.verdict, Verdict::StartFailed, "{denied:?}");
    assert_eq!(oracle.sandbox_id(), kept);
}
