//! `cargo xtask fuzz` and the fuzz smoke of `cargo xtask test`: the
//! cargo-fuzz targets of fuzz/, built and run under libFuzzer.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::{cargo, root, smoke_record};

/// cargo-fuzz, pinned like cargo-deb and installed the same way (under
/// target/tools); it runs on the stable toolchain with `RUSTC_BOOTSTRAP=1`.
const CARGO_FUZZ_VERSION: &str = "0.13.1";

/// What every fuzz run is held to: an input that takes more memory or time
/// is a finding (libFuzzer writes it under target/fuzz-artifacts/).
const FUZZ_LIMITS: &[&str] = &["-rss_limit_mb=2048", "-timeout=10"];

/// CI's smoke run of each target (`cargo xtask test`): whichever comes first.
/// Its seed is fixed and its working corpus starts empty each time, so a
/// run tries the same inputs on every machine (a time-cut run a prefix of
/// them): CI is not red by the luck of the draw, and a red run replays.
const FUZZ_SMOKE: FuzzArgs = FuzzArgs {
    target: None,
    runs: Some(10_000),
    time_s: Some(20),
    seed: Some(1),
    dev: true,
    smoke: false,
};

#[derive(Debug, Clone, clap::Args)]
pub struct FuzzArgs {
    /// One of fuzz/'s targets ([`targets`]); all of them when absent.
    target: Option<String>,
    /// libFuzzer's `-runs`: stop after N executions.
    #[arg(long)]
    runs: Option<u64>,
    /// libFuzzer's `-max_total_time`, seconds (60 when neither bound is given).
    #[arg(long = "time")]
    time_s: Option<u64>,
    /// libFuzzer's `-seed`, with a fresh working corpus; absent: a new
    /// seed, and the corpus kept under target/fuzz-corpus/ grows.
    #[arg(long)]
    seed: Option<u64>,
    /// Built with the dev profile (`cargo fuzz build --dev`): no
    /// optimisation, so the dependency tree (kube, k8s-openapi, tokio)
    /// compiles in far less time, at a lower execution rate. The smoke
    /// run's 10,000 inputs need no speed; long runs do.
    #[arg(long)]
    dev: bool,
    /// The smoke `cargo xtask test` runs (its seed, bounds and build), and
    /// its record (fuzz/smoke-passed) written when it passes; other
    /// arguments are refused with it.
    #[arg(long, conflicts_with_all = ["target", "runs", "time_s", "seed", "dev"])]
    pub smoke: bool,
}

/// fuzz/'s targets: the `[[bin]]`s of its Cargo.toml, which cargo-fuzz
/// builds, in cargo metadata's order (by name), the order `cargo xtask
/// fuzz` runs them in.
pub fn targets() -> Result<Vec<String>> {
    let metadata = crate::metadata("fuzz/Cargo.toml")?;
    let names = targets_of(&metadata);
    if names.is_empty() {
        bail!("fuzz/Cargo.toml declares no [[bin]] target");
    }
    Ok(names)
}

fn targets_of(metadata: &serde_json::Value) -> Vec<String> {
    metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter(|t| {
            t["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "bin"))
        })
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// `cargo xtask fuzz`: builds every target with cargo-fuzz (cached under
/// target/fuzz), then runs each one after the other under [`FUZZ_LIMITS`],
/// its working corpus under target/fuzz-corpus/, what it finds under
/// target/fuzz-artifacts/, libFuzzer's output in target/fuzz-logs/.
pub fn fuzz(opts: &FuzzArgs) -> Result<Vec<FuzzRun>> {
    let all = targets()?;
    if let Some(t) = &opts.target {
        if !all.contains(t) {
            bail!("no fuzz target {t:?} (one of {})", all.join(", "));
        }
    }
    let mut opts = opts.clone();
    if opts.runs.is_none() && opts.time_s.is_none() {
        opts.time_s = Some(60);
    }
    let opts = &opts;
    let cargo_fuzz = cargo_fuzz()?;
    let target_dir = crate::target_dir().join("fuzz");
    let mut build = Command::new(&cargo_fuzz);
    // No sanitizer: the targets are Rust (cargo-fuzz's release build keeps
    // debug assertions and overflow checks on), and the fork per input of
    // the kernel target is far cheaper without ASan's shadow memory.
    build
        .args(["build", "-s", "none", "--target-dir"])
        .arg(&target_dir)
        .env("RUSTC_BOOTSTRAP", "1")
        .current_dir(root());
    if opts.dev {
        build.arg("--dev");
    }
    if let Some(t) = &opts.target {
        build.arg(t);
    }
    eprintln!("+ {build:?}");
    let status = build.status().context("running cargo fuzz build")?;
    if !status.success() {
        bail!("cargo fuzz build failed ({status})");
    }
    let bin_dir = target_dir
        .join("x86_64-unknown-linux-gnu")
        .join(if opts.dev { "debug" } else { "release" });
    let targets: Vec<&str> = match &opts.target {
        Some(t) => vec![t.as_str()],
        None => all.iter().map(String::as_str).collect(),
    };
    let mut failed = Vec::new();
    let mut runs = Vec::new();
    for t in targets {
        let run = run_fuzz_target(&bin_dir.join(t), t, opts)?;
        println!("{}", run.summary());
        if !run.ok {
            failed.push(t);
        }
        runs.push(run);
    }
    if !failed.is_empty() {
        bail!(
            "fuzz targets found problems: {} (inputs under target/fuzz-artifacts/, output under target/fuzz-logs/)",
            failed.join(", ")
        );
    }
    Ok(runs)
}

/// The fuzz smoke of `cargo xtask test`, unless its inputs are those of the
/// last passing one ([`smoke_record`]); `NODEPROOF_FUZZ_SMOKE=always` runs
/// it regardless. A passing run writes the record.
pub fn fuzz_smoke() -> Result<()> {
    let settings = format!(
        "cargo-fuzz {CARGO_FUZZ_VERSION}; {FUZZ_SMOKE:?}; targets {:?}; limits {FUZZ_LIMITS:?}",
        targets()?
    );
    let always = std::env::var("NODEPROOF_FUZZ_SMOKE").is_ok_and(|v| v == "always");
    // Without a digest (no git, say) the smoke runs: it is never skipped on a guess.
    let digest = smoke_record::digest(&root(), &settings)
        .inspect_err(|e| eprintln!("xtask: fuzz smoke inputs not digested ({e:#}): it runs"))
        .ok();
    if let (Some(d), false) = (&digest, always) {
        if smoke_record::recorded(&root()).as_deref() == Some(d.as_str()) {
            eprintln!(
                "xtask: fuzz smoke: the targets and what they link are unchanged since it last passed ({}: {d}); not rebuilt (NODEPROOF_FUZZ_SMOKE=always runs it)",
                smoke_record::RECORD
            );
            return Ok(());
        }
    }
    let runs = fuzz(&FUZZ_SMOKE)?;
    if let Some(d) = digest {
        let lines: Vec<String> = runs
            .iter()
            .map(|r| {
                format!(
                    "{}: {} executions",
                    r.target,
                    r.executions.map_or_else(|| "?".into(), |v| v.to_string())
                )
            })
            .collect();
        smoke_record::record(&root(), &d, &lines)?;
        eprintln!(
            "xtask: fuzz smoke passed; recorded in {} (commit it)",
            smoke_record::RECORD
        );
    }
    Ok(())
}

/// One target's run, from libFuzzer's final stats.
pub struct FuzzRun {
    target: String,
    ok: bool,
    executions: Option<u64>,
    rate: Option<u64>,
    wall_s: f64,
    log: PathBuf,
}

impl FuzzRun {
    fn summary(&self) -> String {
        let n = |v: Option<u64>| v.map_or_else(|| "?".into(), |v| v.to_string());
        format!(
            "fuzz {}: {} ({} executions in {:.0} s, {} exec/s; {})",
            self.target,
            if self.ok { "ok" } else { "FAILED" },
            n(self.executions),
            self.wall_s,
            n(self.rate),
            self.log.display()
        )
    }
}

/// libFuzzer's `stat::NAME: VALUE` line of `-print_final_stats=1`.
fn fuzz_stat(log: &str, name: &str) -> Option<u64> {
    log.lines().rev().find_map(|l| {
        l.strip_prefix("stat::")?
            .strip_prefix(name)?
            .strip_prefix(':')?
            .trim()
            .parse()
            .ok()
    })
}

fn run_fuzz_target(bin: &Path, target: &str, opts: &FuzzArgs) -> Result<FuzzRun> {
    let corpus = match opts.seed {
        Some(_) => {
            let fresh = crate::target_dir().join("fuzz-smoke-corpus").join(target);
            if fresh.exists() {
                std::fs::remove_dir_all(&fresh)
                    .with_context(|| format!("emptying {}", fresh.display()))?;
            }
            fresh
        }
        None => crate::target_dir().join("fuzz-corpus").join(target),
    };
    let artifacts = crate::target_dir().join("fuzz-artifacts").join(target);
    let logs = crate::target_dir().join("fuzz-logs");
    for d in [&corpus, &artifacts, &logs] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    // libFuzzer writes new inputs into the first directory and only reads the others.
    let mut dirs = vec![corpus];
    let committed = root().join("fuzz/seeds").join(target);
    if committed.is_dir() {
        dirs.push(committed);
    }
    let mut max_len = None;
    match target {
        "profile_lint" => {
            // The project's profiles and the shared corpus, copied at run
            // time (the corpus is never committed).
            let seeds = crate::target_dir().join("fuzz-corpus/profile_lint-seeds");
            copy_seeds(
                &[
                    nodeproof_testkit::own_profiles_dir(),
                    nodeproof_testkit::corpus_dir(),
                ],
                &seeds,
            )?;
            dirs.push(seeds);
            max_len = Some(64 * 1024);
        }
        "config" => {
            let seeds = crate::target_dir().join("fuzz-corpus/config-seeds");
            std::fs::create_dir_all(&seeds)?;
            std::fs::copy(
                root().join("systemd/config.toml"),
                seeds.join("systemd-config.toml"),
            )?;
            dirs.push(seeds);
        }
        _ => {}
    }
    let log = logs.join(format!("{target}.log"));
    let mut cmd = Command::new(bin);
    cmd.args(&dirs)
        .args(FUZZ_LIMITS)
        .arg("-print_final_stats=1")
        .arg(format!("-artifact_prefix={}/", artifacts.display()));
    if let Some(n) = opts.runs {
        cmd.arg(format!("-runs={n}"));
    }
    if let Some(s) = opts.time_s {
        cmd.arg(format!("-max_total_time={s}"));
    }
    if let Some(s) = opts.seed {
        cmd.arg(format!("-seed={s}"));
    }
    if let Some(m) = max_len {
        cmd.arg(format!("-max_len={m}"));
    }
    let file =
        std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    cmd.stdout(file.try_clone()?)
        .stderr(file)
        .current_dir(root());
    eprintln!("+ {cmd:?}");
    let started = std::time::Instant::now();
    let status = cmd
        .status()
        .with_context(|| format!("running {}", bin.display()))?;
    let wall_s = started.elapsed().as_secs_f64();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    if !status.success() {
        // The end of libFuzzer's report: the panic, the input, how to reproduce.
        let lines: Vec<&str> = text.lines().collect();
        for l in &lines[lines.len().saturating_sub(40)..] {
            eprintln!("  {l}");
        }
    }
    Ok(FuzzRun {
        target: target.to_owned(),
        ok: status.success(),
        executions: fuzz_stat(&text, "number_of_executed_units"),
        rate: fuzz_stat(&text, "average_exec_per_sec"),
        wall_s,
        log,
    })
}

/// Every profile under `from` (recursively, .json) into `to`, flat, named by
/// where it came from.
fn copy_seeds(from: &[PathBuf], to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for dir in from {
        for file in nodeproof_testkit::profiles_in(dir) {
            let rel = file.strip_prefix(dir).unwrap_or(&file);
            let name = format!(
                "{}_{}",
                dir.file_name().unwrap_or_default().to_string_lossy(),
                rel.to_string_lossy().replace('/', "_")
            );
            std::fs::copy(&file, to.join(name))
                .with_context(|| format!("copying {}", file.display()))?;
        }
    }
    Ok(())
}

/// `cargo-fuzz`: the pinned version under target/tools, installed there on
/// first use (CI caches it with the rest of target/).
fn cargo_fuzz() -> Result<PathBuf> {
    let tools = crate::target_dir().join("tools");
    let local = tools.join("bin/cargo-fuzz");
    let pinned = Command::new(&local)
        .arg("--version")
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout).trim() == format!("cargo-fuzz {CARGO_FUZZ_VERSION}")
        });
    if !pinned {
        let root = tools.to_string_lossy();
        cargo(&[
            "install",
            "cargo-fuzz",
            "--version",
            CARGO_FUZZ_VERSION,
            "--locked",
            "--root",
            &root,
        ])?;
    }
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn fuzz_figures_come_from_libfuzzers_final_stats() {
        let log = "#3000\tDONE   corp: 1/1b lim: 33 exec/s: 0 rss: 27Mb\n\
                   Done 3000 runs in 0 second(s)\n\
                   stat::number_of_executed_units: 3000\n\
                   stat::average_exec_per_sec:     1067\n\
                   stat::new_units_added:          0\n";
        assert_eq!(fuzz_stat(log, "number_of_executed_units"), Some(3000));
        assert_eq!(fuzz_stat(log, "average_exec_per_sec"), Some(1067));
        assert_eq!(fuzz_stat(log, "peak_rss_mb"), None);
        assert_eq!(
            fuzz_stat("crashed before the stats", "average_exec_per_sec"),
            None
        );
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        fuzz: FuzzArgs,
    }

    #[test]
    fn fuzz_arguments_name_a_target_and_a_bound() {
        let args = |a: &[&str]| Cli::try_parse_from(["fuzz"].iter().chain(a)).map(|c| c.fuzz);
        let a = args(&["profile_lint", "--runs", "5"]).unwrap();
        assert_eq!(
            (a.target.as_deref(), a.runs, a.time_s),
            (Some("profile_lint"), Some(5), None)
        );
        let a = args(&["--time", "20", "--runs", "10000", "--dev"]).unwrap();
        assert_eq!((a.runs, a.time_s, a.dev), (Some(10_000), Some(20), true));
        assert!(args(&["--runs"]).is_err());
        assert!(args(&["--time", "soon"]).is_err());
    }

    #[test]
    fn the_targets_are_fuzz_cargo_tomls_bins_one_per_source_file() {
        let listed = targets().unwrap();
        let mut files: Vec<String> = std::fs::read_dir(root().join("fuzz/fuzz_targets"))
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                p.file_stem().unwrap().to_string_lossy().into_owned()
            })
            .collect();
        files.sort();
        assert_eq!(listed, files);
    }
}
