//! Every corpus profile, run through real runc in both `noNewPrivileges` modes,
//! must get the verdict (and exit status) recorded in `runc-results.json`.

use std::collections::VecDeque;

use nodeproof_e2e::splice::{self, SpliceOracle, Verdict};
use nodeproof_testkit::{require, Need};
use serde_json::Value;

#[test]
fn corpus_verdicts_match_runc_results() {
    let Some(granted) = require(&[splice::ORACLE, &[Need::Corpus]].concat()) else {
        return;
    };
    let corpus = granted.corpus();
    let results_path = corpus.join("runc-results.json");
    let results: Value = serde_json::from_slice(
        &std::fs::read(&results_path)
            .unwrap_or_else(|e| panic!("read {}: {e}", results_path.display())),
    )
    .expect("runc-results.json is JSON");
    let results = results.as_object().expect("runc-results.json is an object");
    assert!(
        results.len() >= 33,
        "corpus shrank: {} entries",
        results.len()
    );

    // (file, nnp, expected verdict, expected exit)
    let mut jobs = VecDeque::new();
    for (file, entry) in results {
        for (nnp, rec) in [(true, entry), (false, &entry["nnp_false"])] {
            let verdict = Verdict::parse(rec["verdict"].as_str().expect("verdict"))
                .unwrap_or_else(|| panic!("{file}: unknown verdict {}", rec["verdict"]));
            let exit = rec["exit"].as_i64().expect("exit") as i32;
            jobs.push_back((file.clone(), nnp, verdict, exit));
        }
    }
    let total = jobs.len();
    let oracle = SpliceOracle::runc(splice::default_oracle_dir()).expect("oracle");
    let mismatches = nodeproof_e2e::mismatches(jobs.into(), |(file, nnp, want, want_exit)| {
        let bytes = std::fs::read(corpus.join(&file)).expect("corpus file");
        let got = oracle.run(&bytes, nnp, &["/bin/true"]);
        (got.verdict != want || got.exit != want_exit).then(|| {
            format!(
                "{file} nnp={nnp}: want {want} ({want_exit}), got {} ({}) stderr: {}",
                got.verdict,
                got.exit,
                got.stderr.trim()
            )
        })
    });
    assert!(
        mismatches.is_empty(),
        "{} of {total} runs disagree with runc-results.json:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    eprintln!("all {total} corpus runs match runc-results.json");
}
