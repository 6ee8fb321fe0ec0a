//! The differential campaign (tests/src/campaign.rs) against real runc: a
//! bounded count per run with a seed that changes with each commit (HEAD's
//! id; the clock outside a checkout) and is printed.
//! `NP_CAMPAIGN_SEED` replays a run, `NP_CAMPAIGN_CASES` sizes it (default
//! 60 profiles × 2 modes, about two minutes), `NP_CAMPAIGN_RERUNS` bounds the
//! re-runs that tell an intermittent failure from a disagreement (default
//! 20). `cargo xtask campaign` runs a longer one.

use std::time::{SystemTime, UNIX_EPOCH};

use nodeproof_e2e::campaign::{self, Judgement};
use nodeproof_e2e::runc::{self, RuncOracle};
use nodeproof_testkit::require;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|s| {
            s.parse()
                .unwrap_or_else(|_| panic!("{name}={s}: not a number"))
        })
        .unwrap_or(default)
}

/// A new seed for every commit: the checkout's HEAD (so every submission
/// draws new cases, and a CI run of one commit can be replayed exactly);
/// outside a git checkout, the clock.
fn default_seed() -> u64 {
    let head = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| u64::from_str_radix(String::from_utf8_lossy(&o.stdout).get(..16)?, 16).ok());
    head.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    })
}

#[test]
fn campaign_agrees_with_real_runc() {
    let Some(_) = require(runc::ORACLE) else {
        return;
    };
    let seed = env_or("NP_CAMPAIGN_SEED", default_seed());
    let n = env_or("NP_CAMPAIGN_CASES", 60) as usize;
    let reruns = env_or("NP_CAMPAIGN_RERUNS", 20) as usize;
    eprintln!("campaign: seed {seed}, {n} profiles × 2 modes (replay: NP_CAMPAIGN_SEED={seed} NP_CAMPAIGN_CASES={n})");
    // A start takes well under a second; hangs (KILL_THREAD, close answered 0) need not wait 20.
    let oracle = RuncOracle::new(runc::default_oracle_dir())
        .expect("oracle")
        .with_timeout(5);
    let jobs: Vec<(usize, bool)> = (0..n).flat_map(|i| [(i, true), (i, false)]).collect();
    let cases = campaign::cases(seed, n);
    let results = std::sync::Mutex::new(Vec::new());
    let _ = nodeproof_e2e::mismatches(jobs, |(i, nnp)| {
        let j = campaign::judge(&oracle, &cases[i], nnp, reruns);
        results.lock().unwrap_or_else(|e| e.into_inner()).push(j);
        None
    });
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    let agree = results.iter().filter(|j| **j == Judgement::Agree).count();
    let intermittent: Vec<_> = results
        .iter()
        .filter(|j| matches!(j, Judgement::Intermittent { .. }))
        .collect();
    let disagree: Vec<&str> = results
        .iter()
        .filter_map(|j| match j {
            Judgement::Disagree(m) => Some(m.as_str()),
            _ => None,
        })
        .collect();
    let not_seen = results
        .iter()
        .filter(|j| matches!(j, Judgement::IntermittentNotSeen { .. }))
        .count();
    let no_verdict: Vec<&str> = results
        .iter()
        .filter_map(|j| match j {
            Judgement::NoVerdict(m) => Some(m.as_str()),
            _ => None,
        })
        .collect();
    for m in &no_verdict {
        eprintln!("campaign: runc gave no verdict: {m}");
    }
    let judged = results.len() - intermittent.len() - not_seen - no_verdict.len();
    eprintln!(
        "campaign: seed {seed}: {} runs, {agree} agree, {} intermittent ({intermittent:?}), {not_seen} predicted intermittent but never failed, {} without a runc verdict, {} disagree: {:.2} % of the non-intermittent agree",
        results.len(),
        intermittent.len(),
        no_verdict.len(),
        disagree.len(),
        100.0 * agree as f64 / judged.max(1) as f64
    );
    assert!(
        disagree.is_empty(),
        "seed {seed}: {} of {} differ (replay with NP_CAMPAIGN_SEED={seed} NP_CAMPAIGN_CASES={n}):\n{}",
        disagree.len(),
        results.len(),
        disagree.join("\n")
    );
}
