//! `cargo xtask test`: the tiers (setup, static checks, the test binaries,
//! the doctests, the fuzz smoke), each timed, and the summary line.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::suite::{self, Totals};
use crate::{cargo, fuzz, package, root, setup};

/// The tiers of `cargo xtask test` and their wall times, printed at the end.
#[derive(Default)]
struct Tiers(Vec<(&'static str, std::time::Duration, bool)>);

impl Tiers {
    fn time<T>(&mut self, name: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        match free_gib() {
            Some(free) => eprintln!("xtask: tier {name} ({free:.1} GiB free under target/)"),
            None => eprintln!("xtask: tier {name}"),
        }
        let started = std::time::Instant::now();
        let r = f();
        self.0.push((name, started.elapsed(), r.is_ok()));
        r
    }

    fn print(&self) {
        let total: f64 = self.0.iter().map(|(_, d, _)| d.as_secs_f64()).sum();
        eprintln!("xtask: tiers");
        for (name, d, ok) in &self.0 {
            eprintln!(
                "  {name:<24} {:>7.1} s{}",
                d.as_secs_f64(),
                if *ok { "" } else { "  (failed)" }
            );
        }
        eprintln!("  {:<24} {total:>7.1} s", "total");
    }
}

/// `cargo xtask test`: setup (the packages, the Debian package the nspawn
/// test installs, tracefs), fmt and clippy, then [`test_suite`].
pub fn test(no_fuzz: bool, libtest: &[String]) -> Result<()> {
    let need = cold_build_gib();
    if let Some(free) = free_gib().filter(|free| *free < need) {
        // Said first, so that a build that dies on ENOSPC minutes later has
        // its cause on the first screen (a CI run failed that way at 209 s).
        eprintln!(
            "xtask: warning: {free:.1} GiB free under target/; a cold run needs about \
             {need} GiB (the builds, the kernels, the nspawn root); free some space"
        );
    }
    let mut tiers = Tiers::default();
    let before = tiers.time("setup", || {
        setup::setup()?;
        // agent/tests/systemd_nspawn.rs packs the binary under test with it.
        package::cargo_deb()?;
        setup::prepare_kernel();
        Ok(())
    });
    let before = before.and_then(|()| {
        tiers.time("static (fmt, clippy)", || {
            cargo(&["fmt", "--all", "--", "--check"])?;
            cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ])
        })
    });
    if let Err(e) = before {
        tiers.print();
        return Err(e);
    }
    test_suite(&mut tiers, no_fuzz, libtest)
}

/// What a cold `cargo xtask test` needs under target/, in GiB, with some
/// margin. Measured in a fresh clone (`du -s target` every 20 s): 7.6 GB at
/// its largest with cargo's incremental caches, 3.8 GB without them
/// (`CARGO_INCREMENTAL=0`, as `.ci/run` builds).
fn cold_build_gib() -> f64 {
    if std::env::var_os("CARGO_INCREMENTAL").is_some_and(|v| v == "0") {
        5.0
    } else {
        9.0
    }
}

/// Free space of the file system that holds target/, in GiB; None when it
/// cannot be read (then nothing is said).
fn free_gib() -> Option<f64> {
    let target = crate::target_dir();
    let at = if target.exists() { target } else { root() };
    let st = nix::sys::statvfs::statvfs(&at).ok()?;
    Some(st.blocks_available() as f64 * st.fragment_size() as f64 / (1u64 << 30) as f64)
}

/// Binaries that ran longest on the CI machine, started first when
/// target/test-times.tsv has no record yet (a fresh clone): the guests of
/// the kernel matrix, the soak, systemd in nspawn, everything against the
/// test API server (one binary of 115 tests: 93 s alone on this machine,
/// where an unrecorded binary is guessed at a minute), the differential
/// campaign and the runtime oracles.
const LONGEST_FIRST: &[&str] = &[
    "nodeproof::trace_kernels",
    "nodeproof::soak",
    "nodeproof::systemd_nspawn",
    "nodeproof::apiserver",
    "nodeproof-e2e::lint_vs_runtime",
    "nodeproof-e2e::lint_vs_runc",
    "nodeproof-e2e::campaign",
    "nodeproof-e2e::cri_sandbox",
];

/// The build, the test binaries as a pool (`suite`), the doctests and the
/// fuzz smoke, each a tier; the summary line last.
///
/// `NODEPROOF_TEST_JOBS` sets how many binaries run at once; the default is
/// the CPUs + 1 (3 on the 2-core CI machine: a binary waiting on a runtime or
/// a guest leaves its CPU idle). Binaries that share state across processes
/// serialise it themselves: the nspawn root filesystem is built under a
/// lock, the tracer's tests count only their own processes. Arguments after
/// `test` go to every binary (libtest's, e.g. a name filter); `--no-fuzz`
/// leaves the fuzz smoke out.
fn test_suite(tiers: &mut Tiers, no_fuzz: bool, args: &[String]) -> Result<()> {
    let skips = nodeproof_testkit::skips_dir();
    // Records of an earlier run would be counted against this one.
    nodeproof_testkit::clear_skips(&skips)
        .with_context(|| format!("clearing {}", skips.display()))?;
    let binaries = tiers.time("build tests", || {
        suite::build(&["test", "--workspace"], &root())
    })?;
    let jobs = std::env::var("NODEPROOF_TEST_JOBS")
        .ok()
        .and_then(|j| j.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get() + 1));
    let times_file = crate::target_dir().join("test-times.tsv");
    let ordered = suite::order(&binaries, &suite::read_times(&times_file), LONGEST_FIRST);
    eprintln!("xtask: {} test binaries, {jobs} at a time", ordered.len());
    let outcomes = tiers.time("tests", || {
        suite::run_pool(
            ordered,
            jobs,
            args,
            &crate::target_dir().join("test-logs"),
            &times_file,
        )
    })?;
    let doc = tiers.time("doctests", || cargo_test(&["test", "--workspace", "--doc"]));
    let fuzzed = if no_fuzz {
        eprintln!("xtask: fuzz smoke left out (--no-fuzz)");
        Ok(())
    } else {
        tiers.time("fuzz smoke", fuzz::fuzz_smoke)
    };
    let mut totals = Totals::default();
    for o in &outcomes {
        totals.passed += o.passed;
        totals.failed += o.failed;
        totals.ignored += o.ignored;
    }
    let doc_totals = doc.as_ref().cloned().unwrap_or_default();
    totals.passed += doc_totals.passed;
    totals.failed += doc_totals.failed;
    totals.ignored += doc_totals.ignored;
    let skipped = nodeproof_testkit::recorded_skips(&skips)
        .with_context(|| format!("reading {}", skips.display()))?;
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.ok)
        .map(|o| format!("{} ({})", o.binary.key(), o.status))
        .collect();
    for f in &failed {
        eprintln!("xtask: FAILED {f}");
    }
    if let Err(e) = &doc {
        eprintln!("xtask: doctests: {e:#}");
    }
    if let Err(e) = &fuzzed {
        eprintln!("xtask: {e:#}");
    }
    tiers.print();
    // Every test ends what it started: a process left in one of the tests'
    // cgroups or a mount of theirs fails the suite; cgroups left empty are
    // removed and said.
    let (left_running, left_cgroups) = suite::leftovers();
    for p in &left_running {
        eprintln!("xtask: left running by the tests: {p}");
    }
    let left_mounts = suite::leftover_mounts(
        &std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default(),
        &crate::target_dir(),
    );
    for m in &left_mounts {
        eprintln!("xtask: left mounted by the tests: {m}");
    }
    if !left_cgroups.is_empty() {
        let kept = suite::remove_empty_cgroups(&left_cgroups);
        if kept.len() < left_cgroups.len() {
            eprintln!(
                "xtask: {} cgroups of the tests left empty, removed: {}",
                left_cgroups.len() - kept.len(),
                left_cgroups
                    .iter()
                    .filter(|c| !kept.contains(c))
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
        if !kept.is_empty() {
            eprintln!(
                "xtask: {} cgroups of the tests could not be removed: {}",
                kept.len(),
                kept.join(" ")
            );
        }
    }
    for s in &skipped {
        println!("SKIPPED {}::{}: needs {}", s.target, s.test, s.needs);
    }
    println!("{}", totals.summary(skipped.len()));
    if !failed.is_empty()
        || doc.is_err()
        || fuzzed.is_err()
        || !left_running.is_empty()
        || !left_mounts.is_empty()
    {
        std::process::exit(1);
    }
    Ok(())
}

/// `cargo test ARGS` with its output passed through, and the sums of its
/// `test result:` lines; an error when cargo fails.
fn cargo_test(args: &[&str]) -> Result<Totals> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("+ cargo {}", args.join(" "));
    let mut child = Command::new(cargo)
        .args(args)
        .current_dir(root())
        .stdout(Stdio::piped())
        .spawn()
        .context("running cargo")?;
    let mut totals = Totals::default();
    let mut out = std::io::stdout();
    // libtest writes its `test result:` lines to stdout; the rest goes on as it comes.
    for line in BufReader::new(child.stdout.take().context("cargo's stdout")?).split(b'\n') {
        let line = line.context("reading cargo's output")?;
        out.write_all(&line)?;
        out.write_all(b"\n")?;
        totals.add(&String::from_utf8_lossy(&line));
    }
    let status = child.wait().context("waiting for cargo")?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A binary renamed or folded into another (agent/tests/<group>/main.rs)
    /// would silently leave the fresh clone's order: each name is a test
    /// target, `tests/<name>.rs` or `tests/<name>/main.rs` of its package.
    #[test]
    fn the_longest_first_are_test_targets() {
        for key in LONGEST_FIRST {
            let (package, target) = key.split_once("::").unwrap();
            let dir = match package {
                "nodeproof" => "agent/tests",
                "nodeproof-e2e" => "tests/tests",
                other => panic!("{key}: no directory known for package {other}"),
            };
            let dir = root().join(dir);
            assert!(
                dir.join(format!("{target}.rs")).is_file()
                    || dir.join(target).join("main.rs").is_file(),
                "{key}: no {target}.rs or {target}/main.rs under {}",
                dir.display()
            );
        }
    }

    #[test]
    fn the_summary_sums_test_results_and_takes_skips_off_passed() {
        let mut t = Totals::default();
        for line in [
            "running 9 tests",
            "test corpus_round_trip ... ok",
            "test result: ok. 9 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 2.36s",
            "",
            "test result: FAILED. 3 passed; 2 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.10s",
            "test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s",
            "SKIPPED corpus_round_trip: needs the seccomp corpus at /x (set NODEPROOF_CORPUS)",
        ] {
            t.add(line);
        }
        assert_eq!(
            t,
            Totals {
                passed: 12,
                failed: 2,
                ignored: 1
            }
        );
        assert_eq!(t.summary(4), "8 passed, 2 failed, 4 skipped, 1 ignored");
        let ok = Totals {
            passed: 5,
            ..Totals::default()
        };
        assert_eq!(ok.summary(0), "5 passed, 0 failed, 0 skipped");
    }
}
