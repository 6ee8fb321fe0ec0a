//! nodeproof's predicted outcome must equal what the real runtime does, in
//! both noNewPrivileges modes: live for the project's own profiles (profiles/
//! and a set of broken variants written here) through each runtime nodeproof
//! models (runc 1.1.5 and 1.1.15 behind containerd; crun 1.8 and 1.21 behind
//! CRI-O), and where the shared corpus is present, for every corpus profile
//! too (against runc's recorded results, and live through runc 1.1.5).

use nodeproof_e2e::lintset::{first_line, predict, report_for, variants};
use nodeproof_e2e::runtimes::RuntimeBuild;
use nodeproof_e2e::splice::{self, SpliceOracle, Verdict};
use nodeproof_seccomp::capability::CapabilitySet;
use nodeproof_seccomp::lint::Outcome;
use nodeproof_testkit::{own_profiles_dir, profiles_in, require, Need};
use serde_json::Value;

fn expected(v: Verdict) -> Outcome {
    match v {
        Verdict::Accepted => Outcome::Ok,
        Verdict::Rejected => Outcome::Rejected,
        Verdict::StartFailed => Outcome::StartFailed,
    }
}

/// Needs no runc: the recorded verdicts of the shared corpus.
#[test]
fn corpus_predictions_match_recorded_runc_results() {
    let Some(granted) = require(&[Need::Corpus]) else {
        return;
    };
    let corpus = granted.corpus();
    let results: Value = serde_json::from_slice(
        &std::fs::read(corpus.join("runc-results.json")).expect("runc-results.json"),
    )
    .unwrap();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (file, entry) in results.as_object().unwrap() {
        let bytes = std::fs::read(corpus.join(file)).unwrap();
        for (nnp, rec) in [(true, entry), (false, &entry["nnp_false"])] {
            let want = expected(Verdict::parse(rec["verdict"].as_str().unwrap()).unwrap());
            let (got, why) = predict(&bytes, nnp, CapabilitySet::OCI_SPEC_DEFAULT);
            checked += 1;
            if got != want {
                wrong.push(format!(
                    "{file} nnp={nnp}: runc {want:?}, nodeproof {got:?} ({why})"
                ));
            }
        }
    }
    assert_eq!(checked, 66);
    assert!(
        wrong.is_empty(),
        "{} of {checked} differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// Each job through the real runtime and the prediction: (runs, disagreements).
fn live_mismatches(
    oracle: &SpliceOracle,
    profiles: Vec<(String, Vec<u8>)>,
) -> (usize, Vec<String>) {
    let jobs: Vec<(String, Vec<u8>, bool)> = profiles
        .into_iter()
        .flat_map(|(name, bytes)| [(name.clone(), bytes.clone(), true), (name, bytes, false)])
        .collect();
    let total = jobs.len();
    let modelled = oracle.build().modelled();
    let compared = std::sync::Mutex::new(Vec::new());
    let _ = nodeproof_e2e::mismatches(jobs, |(name, bytes, nnp)| {
        let run = oracle.run(&bytes, nnp, &["/bin/true"]);
        let report = report_for(&bytes, nnp, modelled, CapabilitySet::OCI_SPEC_DEFAULT);
        let got = report.outcome;
        if got != expected(run.verdict) {
            let said = format!(
                "{name} nnp={nnp}: {} {} (exit {}, {}), nodeproof {got:?} ({})",
                oracle.build(),
                run.verdict,
                run.exit,
                run.stderr.trim(),
                first_line(&report)
            );
            compared
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(said);
        }
        None
    });
    (
        total,
        compared.into_inner().unwrap_or_else(|e| e.into_inner()),
    )
}

fn read_all(files: &[std::path::PathBuf]) -> Vec<(String, Vec<u8>)> {
    files
        .iter()
        .map(|f| (f.display().to_string(), std::fs::read(f).unwrap()))
        .collect()
}

/// Live: the profiles of profiles/ and each broken variant through real
/// runc 1.1.5 in both modes. Needs no corpus, so it runs in any checkout.
#[test]
fn own_profiles_match_real_runc() {
    own_profiles_match(RuntimeBuild::Runc1_1_5);
}

/// The same set through trixie's runc 1.1.15 (fetched under target/).
#[test]
fn own_profiles_match_runc_1_1_15() {
    own_profiles_match(RuntimeBuild::Runc1_1_15);
}

/// The same set through bookworm's crun 1.8, as CRI-O hands it over.
#[test]
fn own_profiles_match_crun_1_8() {
    own_profiles_match(RuntimeBuild::Crun1_8);
}

/// The same set through trixie's crun 1.21 (fetched under target/), as CRI-O hands it over.
#[test]
fn own_profiles_match_crun_1_21() {
    own_profiles_match(RuntimeBuild::Crun1_21);
}

fn own_profiles_match(build: RuntimeBuild) {
    let Some(_) = require(&splice::needs(build)) else {
        return;
    };
    let own = profiles_in(&own_profiles_dir());
    assert!(
        !own.is_empty(),
        "no profiles under {}",
        own_profiles_dir().display()
    );
    let mut profiles = read_all(&own);
    profiles.extend(variants().into_iter().map(|(n, b)| (n.to_string(), b)));
    let oracle = SpliceOracle::new(splice::default_oracle_dir(), build).expect("oracle");
    let (total, wrong) = live_mismatches(&oracle, profiles);
    eprintln!(
        "{build}: {} of {total} runs agree, {} disagree",
        total - wrong.len(),
        wrong.len()
    );
    assert!(
        wrong.is_empty(),
        "{} of {total} differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// runc init is Go: what it calls through the syscall package has 0 in
/// every slot the call does not take, so a rule there decides the same way
/// in every start. The case seen: `execve` denied when `args[3] != 0`
/// starts every time with real runc (it was predicted start-failed, "depends
/// on the register"), and denied when `args[3] == 0` fails every time.
#[test]
fn go_zeros_in_unused_argument_slots_match_real_runc() {
    for build in [RuntimeBuild::Runc1_1_5, RuntimeBuild::Runc1_1_15] {
        let Some(_) = require(&splice::needs(build)) else {
            return;
        };
        let deny_execve_if = |op: &str| {
            format!(
                r#"{{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{{"names":["execve"],"action":"SCMP_ACT_ERRNO","args":[{{"index":3,"value":0,"op":"{op}"}}]}}]}}"#
            )
            .into_bytes()
        };
        let cases = [
            (
                "execve denied if args[3] != 0",
                deny_execve_if("SCMP_CMP_NE"),
                Outcome::Ok,
            ),
            (
                "execve denied if args[3] == 0",
                deny_execve_if("SCMP_CMP_EQ"),
                Outcome::StartFailed,
            ),
        ];
        let oracle = SpliceOracle::new(splice::default_oracle_dir(), build).expect("oracle");
        for (name, bytes, want) in &cases {
            for nnp in [true, false] {
                let report = report_for(
                    bytes,
                    nnp,
                    oracle.build().modelled(),
                    CapabilitySet::OCI_SPEC_DEFAULT,
                );
                assert_eq!(
                    report.outcome,
                    *want,
                    "{build} {name} nnp={nnp}: {}",
                    first_line(&report)
                );
            }
        }
        // Three starts each way, so "every time" is seen, not assumed.
        let profiles: Vec<(String, Vec<u8>)> = (0..3)
            .flat_map(|i| {
                cases
                    .iter()
                    .map(move |(n, b, _)| (format!("{n} #{i}"), b.clone()))
            })
            .collect();
        let (total, wrong) = live_mismatches(&oracle, profiles);
        assert_eq!(total, 12);
        assert!(
            wrong.is_empty(),
            "{build}: {} of {total} differ:\n{}",
            wrong.len(),
            wrong.join("\n")
        );
    }
}

/// Live: the shared corpus through real runc, compared with the prediction
/// (not with the recorded file), so a different runc build is caught too.
#[test]
fn corpus_predictions_match_live_runc() {
    let Some(granted) = require(&[splice::ORACLE, &[Need::Corpus]].concat()) else {
        return;
    };
    let oracle = SpliceOracle::runc(splice::default_oracle_dir()).expect("oracle");
    let (total, wrong) = live_mismatches(&oracle, read_all(&profiles_in(granted.corpus())));
    assert!(total >= 66, "{total}");
    assert!(
        wrong.is_empty(),
        "{} of {total} differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
