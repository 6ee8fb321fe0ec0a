//! The differential campaign (tests/src/campaign.rs) against real runtimes:
//! a bounded count per run with a seed that changes with each commit (HEAD's
//! id; the clock outside a checkout) and is printed.
//! `NP_CAMPAIGN_ORACLE` names the oracles, comma-separated (`runc-1.1.5`,
//! `runc-1.1.15`, `crun-1.8`, `crun-1.21`, and `containerd`: through its CRI
//! API with runc 1.1.5; default `runc-1.1.5,crun-1.21`,
//! about two minutes in all), `NP_CAMPAIGN_SEED` replays a run,
//! `NP_CAMPAIGN_CASES` sizes it (default 30 profiles × 2 modes per oracle),
//! `NP_CAMPAIGN_RERUNS` bounds the re-runs that tell an intermittent failure
//! from a disagreement (default 20). `cargo xtask campaign` runs a longer one.

use std::time::{SystemTime, UNIX_EPOCH};

use nodeproof_e2e::campaign::{self, Judgement};
use nodeproof_e2e::cri::{self, ContainerdOracle};
use nodeproof_e2e::oracle::SeccompOracle;
use nodeproof_e2e::runtimes::RuntimeBuild;
use nodeproof_e2e::splice::{self, SpliceOracle};
use nodeproof_testkit::require;

/// One oracle of the campaign: a runtime build through the splice oracle,
/// or containerd through its CRI API (with this machine's runc 1.1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    Splice(RuntimeBuild),
    Containerd,
}

impl Choice {
    fn parse(name: &str) -> Option<Choice> {
        match name {
            "containerd" => Some(Choice::Containerd),
            _ => RuntimeBuild::parse(name).map(Choice::Splice),
        }
    }

    /// The runtime build nodeproof's prediction is made for.
    fn modelled(self) -> RuntimeBuild {
        match self {
            Choice::Splice(build) => build,
            Choice::Containerd => RuntimeBuild::Runc1_1_5,
        }
    }
}

/// The oracles CI runs the campaign against when `NP_CAMPAIGN_ORACLE` is unset.
const DEFAULT_ORACLES: &[Choice] = &[
    Choice::Splice(RuntimeBuild::Runc1_1_5),
    Choice::Splice(RuntimeBuild::Crun1_21),
];

fn oracles() -> Vec<Choice> {
    match std::env::var("NP_CAMPAIGN_ORACLE") {
        Ok(list) => list
            .split(',')
            .map(|name| {
                Choice::parse(name.trim()).unwrap_or_else(|| {
                    panic!(
                        "NP_CAMPAIGN_ORACLE={list}: {name:?} is not `containerd` or one of {:?}",
                        RuntimeBuild::ALL.map(RuntimeBuild::name)
                    )
                })
            })
            .collect(),
        Err(_) => DEFAULT_ORACLES.to_vec(),
    }
}

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
fn campaign_agrees_with_real_runtimes() {
    let choices = oracles();
    let needs: Vec<_> = choices
        .iter()
        .flat_map(|c| match c {
            Choice::Splice(build) => splice::needs(*build),
            Choice::Containerd => cri::ORACLE.to_vec(),
        })
        .collect();
    let Some(_) = require(&needs) else {
        return;
    };
    let seed = env_or("NP_CAMPAIGN_SEED", default_seed());
    let n = env_or("NP_CAMPAIGN_CASES", 30) as usize;
    let reruns = env_or("NP_CAMPAIGN_RERUNS", 20) as usize;
    let mut failures = Vec::new();
    for choice in choices {
        let build = choice.modelled();
        match choice {
            Choice::Splice(build) => {
                // A start takes well under a second; hangs (KILL_THREAD, close answered 0) need not wait 20.
                let oracle = SpliceOracle::new(splice::default_oracle_dir(), build)
                    .expect("oracle")
                    .with_timeout(5);
                failures.extend(campaign_against(
                    &oracle,
                    build,
                    build.name(),
                    seed,
                    n,
                    reruns,
                ));
            }
            Choice::Containerd => {
                let oracle = ContainerdOracle::shared().expect("containerd oracle");
                failures.extend(campaign_against(
                    oracle.as_ref(),
                    build,
                    "containerd",
                    seed,
                    n,
                    reruns,
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// One oracle's campaign; what failed, if anything.
fn campaign_against(
    oracle: &dyn SeccompOracle,
    build: RuntimeBuild,
    replay: &str,
    seed: u64,
    n: usize,
    reruns: usize,
) -> Option<String> {
    let started = std::time::Instant::now();
    let modelled = build.modelled();
    eprintln!("campaign {}: seed {seed}, {n} profiles × 2 modes (replay: NP_CAMPAIGN_ORACLE={replay} NP_CAMPAIGN_SEED={seed} NP_CAMPAIGN_CASES={n})", oracle.name());
    let jobs: Vec<(usize, bool)> = (0..n).flat_map(|i| [(i, true), (i, false)]).collect();
    let cases = campaign::cases(seed, n, modelled);
    let results = std::sync::Mutex::new(Vec::new());
    let _ = nodeproof_e2e::mismatches(jobs, |(i, nnp)| {
        let j = campaign::judge(oracle, modelled, &cases[i], nnp, reruns);
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
        eprintln!(
            "campaign {}: the runtime gave no verdict: {m}",
            oracle.name()
        );
    }
    let judged = results.len() - intermittent.len() - not_seen - no_verdict.len();
    eprintln!(
        "campaign {}: seed {seed}: {} runs in {:.1} s, {agree} agree, {} intermittent ({intermittent:?}), {not_seen} predicted intermittent but never failed, {} without a verdict, {} disagree: {:.2} % of the non-intermittent agree",
        oracle.name(),
        results.len(),
        started.elapsed().as_secs_f64(),
        intermittent.len(),
        no_verdict.len(),
        disagree.len(),
        100.0 * agree as f64 / judged.max(1) as f64
    );
    (!disagree.is_empty()).then(|| {
        format!(
            "{}, seed {seed}: {} of {} differ (replay with NP_CAMPAIGN_ORACLE={replay} NP_CAMPAIGN_SEED={seed} NP_CAMPAIGN_CASES={n}):\n{}",
            oracle.name(),
            disagree.len(),
            results.len(),
            disagree.join("\n")
        )
    })
}
