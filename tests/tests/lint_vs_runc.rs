//! nodeproof's predicted outcome must equal what real runc does, in both
//! noNewPrivileges modes: live for the project's own profiles (profiles/ and
//! the broken variants of src/lintset.rs), and where the shared corpus is
//! present, for every corpus profile too (against the recorded results, and live).

use nodeproof_e2e::lintset::{predict, variants};
use nodeproof_e2e::runc::{self, RuncOracle, Verdict};
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
            let (got, why) = predict(&bytes, nnp);
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

/// Each job through real runc and the prediction; the ones that differ.
fn live_mismatches(oracle: &RuncOracle, profiles: Vec<(String, Vec<u8>)>) -> (usize, Vec<String>) {
    let jobs: Vec<(String, Vec<u8>, bool)> = profiles
        .into_iter()
        .flat_map(|(name, bytes)| [(name.clone(), bytes.clone(), true), (name, bytes, false)])
        .collect();
    let total = jobs.len();
    let wrong = nodeproof_e2e::mismatches(jobs, |(name, bytes, nnp)| {
        let run = oracle.run(&bytes, nnp, &["/bin/true"]);
        let (got, why) = predict(&bytes, nnp);
        (got != expected(run.verdict)).then(|| {
            format!(
                "{name} nnp={nnp}: runc {} (exit {}, {}), nodeproof {got:?} ({why})",
                run.verdict,
                run.exit,
                run.stderr.trim()
            )
        })
    });
    (total, wrong)
}

fn read_all(files: &[std::path::PathBuf]) -> Vec<(String, Vec<u8>)> {
    files
        .iter()
        .map(|f| (f.display().to_string(), std::fs::read(f).unwrap()))
        .collect()
}

/// Live: the profiles of profiles/ and each broken variant through real
/// runc in both modes. Needs no corpus, so it runs in any checkout.
#[test]
fn own_profiles_match_real_runc() {
    let Some(_) = require(runc::ORACLE) else {
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
    let oracle = RuncOracle::new(runc::default_oracle_dir()).expect("oracle");
    let (total, wrong) = live_mismatches(&oracle, profiles);
    assert!(
        wrong.is_empty(),
        "{} of {total} differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// Live: the shared corpus through real runc, compared with the prediction
/// (not with the recorded file), so a different runc build is caught too.
#[test]
fn corpus_predictions_match_live_runc() {
    let Some(granted) = require(&[runc::ORACLE, &[Need::Corpus]].concat()) else {
        return;
    };
    let oracle = RuncOracle::new(runc::default_oracle_dir()).expect("oracle");
    let (total, wrong) = live_mismatches(&oracle, read_all(&profiles_in(granted.corpus())));
    assert!(total >= 66, "{total}");
    assert!(
        wrong.is_empty(),
        "{} of {total} differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
