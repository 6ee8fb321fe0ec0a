//! Checks `nodeproof_seccomp::runc_init::RUNC_1_1_5` against real runc: denying
//! one syscall name must break (or not break) the start exactly as recorded, in
//! each noNewPrivileges mode and for EPERM, ENOSYS, errno 0 (success without
//! running) and EINVAL. Names whose outcome the table marks flaky are
//! reported, not asserted; calls made only on a fallback branch are not made
//! when their name alone is denied.

use std::collections::BTreeSet;

use nodeproof_e2e::learn::deny_one_profile;
use nodeproof_e2e::splice::{self, SpliceOracle, Verdict};
use nodeproof_seccomp::runc_init::{Answer, InitSyscall, RUNC_1_1_5};
use nodeproof_testkit::require;

/// Expected verdict of denying `name` alone with `errno` in a mode, from the table.
fn expected(name: &str, nnp: bool, errno: u16) -> Verdict {
    let fatal = RUNC_1_1_5
        .iter()
        .filter(|s| s.name == name && s.in_mode(nnp) && s.only_after.is_none())
        .any(|s: &InitSyscall| s.fails_on(Answer::Errno(errno)));
    if fatal {
        Verdict::StartFailed
    } else {
        Verdict::Accepted
    }
}

/// The errno classes the table records: EPERM, ENOSYS, 0, and any other (EINVAL).
const ERRNOS: [u16; 4] = [1, 38, 0, 22];

#[test]
fn single_denials_match_the_table() {
    let Some(_) = require(splice::ORACLE) else {
        return;
    };
    let oracle = SpliceOracle::runc(splice::default_oracle_dir()).expect("oracle");
    let names: BTreeSet<&str> = RUNC_1_1_5.iter().map(|s| s.name).collect();
    let flaky: BTreeSet<&str> = RUNC_1_1_5
        .iter()
        .filter(|s| s.flaky)
        .map(|s| s.name)
        .collect();
    let jobs: Vec<(&str, bool, u16)> = names
        .iter()
        .filter(|n| !flaky.contains(*n))
        .flat_map(|&n| {
            [true, false]
                .into_iter()
                .flat_map(move |nnp| ERRNOS.map(|e| (n, nnp, e)))
        })
        .collect();
    assert!(
        jobs.len() >= 160,
        "table lost entries: {} checks",
        jobs.len()
    );
    let failures = nodeproof_e2e::mismatches(jobs, |(name, nnp, errno)| {
        let want = expected(name, nnp, errno);
        let profile = deny_one_profile(name, (errno != 1).then_some(u32::from(errno)));
        let got = oracle.run(profile.as_bytes(), nnp, &["/bin/true"]);
        (got.verdict != want).then(|| {
            format!(
                "deny {name} nnp={nnp} errno={errno}: want {want}, got {} (exit {}): {}",
                got.verdict,
                got.exit,
                got.stderr.trim()
            )
        })
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!("not asserted (flaky): {flaky:?}");
}
