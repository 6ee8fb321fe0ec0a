//! Re-learns what the runtime's init and `/bin/true` need after the seccomp
//! filter is loaded, for runc 1.1.5 installed here or another runtime build
//! (`--runtime crun-1.8`, names as in `nodeproof_e2e::runtimes`). Usage (as root):
//!
//! `cargo run -p nodeproof-e2e --bin learn-runc-init -- [--runtime NAME] [--runs N] [--reps N] [--work DIR]`
//!
//! Prints a report and, last, the body of `RUNC_1_1_5`-style table for
//! `crates/seccomp/src/runc_init.rs` (or `crun_init.rs`). See docs/runc-init-syscalls.md.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use nodeproof_e2e::learn::{self, Phase};
use nodeproof_e2e::runtimes::RuntimeBuild;
use nodeproof_e2e::splice::{self, SpliceOracle};

fn main() -> ExitCode {
    let mut runs = 5usize;
    let mut reps = 6usize;
    let mut work = splice::default_oracle_dir().join("learn");
    let mut build = RuntimeBuild::Runc1_1_5;
    let mut argv = std::env::args().skip(1);
    while let Some(a) = argv.next() {
        let mut val = || argv.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--runs" => runs = val().parse().expect("--runs N"),
            "--reps" => reps = val().parse().expect("--reps N"),
            "--work" => work = PathBuf::from(val()),
            "--runtime" => {
                let name = val();
                build = RuntimeBuild::parse(&name).unwrap_or_else(|| {
                    panic!(
                        "--runtime: one of {:?}",
                        RuntimeBuild::ALL.map(RuntimeBuild::name)
                    )
                });
            }
            _ => {
                eprintln!(
                    "usage: learn-runc-init [--runtime NAME] [--runs N] [--reps N] [--work DIR]"
                );
                return ExitCode::from(2);
            }
        }
    }
    let oracle = match SpliceOracle::new(splice::default_oracle_dir(), build) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("cannot learn: {e}");
            return ExitCode::from(2);
        }
    };
    let version = std::process::Command::new(oracle.runtime())
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default();
    println!("# learn-runc-init: {version}, {runs} traced runs per mode, {reps} reps per denial");

    let obs = match learn::learn_trace(&oracle, runs, &work) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("tracing failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("\n## post-filter syscalls (phase name key-args: runs NNP=true / NNP=false)");
    for o in &obs {
        let key: Vec<String> = learn::key_arg_positions(&o.name, &o.args)
            .iter()
            .map(|&p| format!("a{p}={:#x}", o.args[p]))
            .collect();
        println!(
            "{:?} {} {}: {}/{runs} {}/{runs} ret {}",
            o.phase,
            o.name,
            key.join(","),
            o.runs_nnp_true,
            o.runs_nnp_false,
            o.example_ret
        );
    }

    let mut obs = obs;
    let names: Vec<String> = obs
        .iter()
        .map(|o| o.name.clone())
        .chain(learn::UNTRACED_CANDIDATES.iter().map(|s| s.to_string()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let fat = learn::measure_fatality(&oracle, &names, reps);
    // Untraced candidates whose denial ever broke a run enter the table, marked
    // as seen in the modes where they broke it.
    for n in learn::UNTRACED_CANDIDATES {
        if obs.iter().any(|o| o.name == *n) {
            continue;
        }
        let broke = |nnp: bool| {
            fat.iter()
                .any(|f| f.name == *n && f.nnp == nnp && f.fatal())
        };
        if broke(true) || broke(false) {
            obs.push(learn::Observed {
                phase: Phase::RuntimeInit,
                name: n.to_string(),
                args: [0; 6],
                example_ret: "not traced".into(),
                runs_nnp_true: usize::from(broke(true)) * runs,
                runs_nnp_false: usize::from(broke(false)) * runs,
            });
        }
    }
    println!("\n## single-syscall denials (name mode errno: verdicts; message)");
    for f in &fat {
        if f.fatal() {
            println!(
                "{} NNP={} errno={}: {:?}{} exit {}; {}",
                f.name,
                f.nnp,
                f.errno,
                f.verdicts,
                if f.stable() { "" } else { " (UNSTABLE)" },
                f.exit,
                f.message
            );
        }
    }

    println!("\n## allowlists (defaultAction ERRNO/EPERM)");
    for nnp in [true, false] {
        let seen: BTreeSet<String> = obs
            .iter()
            .filter(|o| {
                if nnp {
                    o.runs_nnp_true > 0
                } else {
                    o.runs_nnp_false > 0
                }
            })
            .map(|o| o.name.clone())
            .collect();
        let fatal: BTreeSet<String> = fat
            .iter()
            .filter(|f| f.nnp == nnp && f.errno == 1 && f.fatal())
            .map(|f| f.name.clone())
            .collect();
        let all_ok = learn::allowlist_starts(&oracle, &seen, nnp, 3);
        let fatal_ok = learn::allowlist_starts(&oracle, &fatal, nnp, 3);
        println!("NNP={nnp}: all observed {seen:?} starts: {all_ok}");
        println!("NNP={nnp}: fatal-only {fatal:?} starts: {fatal_ok}");
        if all_ok {
            let min = learn::minimize_allowlist(&oracle, &seen, &fatal, nnp);
            let extra: Vec<&String> = min.difference(&fatal).collect();
            println!("NNP={nnp}: minimal allowlist {min:?}; needed beyond the single-denial-fatal set: {extra:?}");
        }
    }
    let ep = obs.iter().filter(|o| o.phase == Phase::Entrypoint).count();
    println!("\n## table ({} entries, {ep} entrypoint)\n", obs.len());
    print!("{}", learn::render_table(&obs, &fat, runs));
    ExitCode::SUCCESS
}
