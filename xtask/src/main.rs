//! `cargo xtask`: set up a fresh Debian 12 machine, build, run, test, bench.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

mod smoke_record;
mod suite;

/// Debian packages the build and the tests need, with why.
const PACKAGES: &[(&str, &str)] = &[
    ("clang", "compiles the eBPF programs in agent-ebpf/"),
    (
        "libbpf-dev",
        "bpf_helpers.h and friends for the eBPF programs",
    ),
    (
        "libseccomp-dev",
        "compiles seccomp profiles (libseccomp 2.5)",
    ),
    ("pkg-config", "finds libseccomp for the build"),
    ("runc", "the oracle the profile tests compare against"),
    ("crun", "crun 1.8, the oracle of CRI-O predictions (crun 1.21 and runc 1.1.15 are fetched from trixie under target/)"),
    (
        "patchelf",
        "points trixie's runc and crun at trixie's glibc, unpacked beside them under target/oci-runtimes/",
    ),
    (
        "busybox-static",
        "the root filesystem of the oracle's containers",
    ),
    (
        "containerd",
        "the CRI oracle: a private containerd 1.6 judges the lint set through CRI (tests/tests/lint_vs_runtime.rs)",
    ),
    (
        "strace",
        "re-learning what runc init needs (tests/learn-runc-init.sh)",
    ),
    (
        "systemd",
        "systemd-analyze verify/security, sysusers and tmpfiles in the unit tests",
    ),
    (
        "systemd-container",
        "systemd-nspawn: the unit under systemd as PID 1 (agent/tests/systemd_nspawn.rs)",
    ),
    (
        "debootstrap",
        "the Debian root filesystem of that container (cached under target/nspawn/)",
    ),
    (
        "acl",
        "setfacl: the preflight tests grant and deny access with POSIX ACLs",
    ),
    (
        "qemu-system-x86",
        "boots Debian's 5.10/6.1/6.12 kernels under TCG for the tracer's kernel matrix (agent/tests/trace_kernels.rs)",
    ),
    (
        "cpio",
        "packs that matrix's initramfs",
    ),
    (
        "lintian",
        "Debian's package checker on the package (agent/tests/systemd_nspawn.rs)",
    ),
    (
        "zsh",
        "zsh -n on the zsh completion (agent/tests/cli_docs.rs)",
    ),
    (
        "fish",
        "fish -n on the fish completion (agent/tests/cli_docs.rs)",
    ),
    (
        "groff-base",
        "groff: renders the man pages with every warning on (agent/tests/cli_docs.rs)",
    ),
    (
        "man-db",
        "man -l on nodeproof(8) (agent/tests/cli_docs.rs)",
    ),
    (
        "dpkg-dev",
        "dpkg-shlibdeps: the Debian package's library dependencies (cargo deb)",
    ),
    (
        "faketime",
        "libfaketime, LD_PRELOADed into the agent for the clock-jump fault (agent/tests/soak.rs): CLOCK_REALTIME is not namespaced",
    ),
    (
        "prometheus",
        "promtool (Debian ships it only with the server, whose service the tests do not use): checks and unit-tests the alert rules, parses the dashboard's PromQL (agent/tests/ops_monitoring.rs)",
    ),
];

/// cargo-deb, pinned: the Debian package test builds with the dev profile,
/// which newer cargo-deb versions announce they will refuse.
const CARGO_DEB_VERSION: &str = "3.8.0";

/// cargo-fuzz, pinned like cargo-deb and installed the same way (under
/// target/tools); it runs on the stable toolchain with `RUSTC_BOOTSTRAP=1`.
const CARGO_FUZZ_VERSION: &str = "0.13.1";

/// fuzz/fuzz_targets/, in the order `cargo xtask fuzz` runs them.
const FUZZ_TARGETS: &[&str] = &[
    "profile_lint",
    "bpfgen_vs_libseccomp",
    "bpf_interpreter_vs_kernel",
    "sample_decoder",
    "config",
    "http_router",
    "kube_decoders",
    "podresources",
];

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
};

/// What `install` and the Debian package put where (source relative to the
/// repository, destination absolute). agent/Cargo.toml's
/// [package.metadata.deb] assets list the same files.
const INSTALL: &[(&str, &str, u32)] = &[
    (
        "systemd/nodeproof.service",
        "/usr/lib/systemd/system/nodeproof.service",
        0o644,
    ),
    (
        "systemd/kubelet.service.d/10-nodeproof.conf",
        "/usr/lib/systemd/system/kubelet.service.d/10-nodeproof.conf",
        0o644,
    ),
    (
        "systemd/nodeproof.sysusers.conf",
        "/usr/lib/sysusers.d/nodeproof.conf",
        0o644,
    ),
    (
        "systemd/nodeproof.tmpfiles.conf",
        "/usr/lib/tmpfiles.d/nodeproof.conf",
        0o644,
    ),
    ("systemd/config.toml", "/etc/nodeproof/config.toml", 0o644),
    (
        "profiles/runtime-default-x86_64.json",
        "/usr/share/nodeproof/profiles/runtime-default-x86_64.json",
        0o644,
    ),
    ("README.md", "/usr/share/doc/nodeproof/README.md", 0o644),
    (
        "docs/runbooks.md",
        "/usr/share/doc/nodeproof/runbooks.md",
        0o644,
    ),
    (
        "deploy/prometheus/nodeproof.rules.yml",
        "/usr/share/nodeproof/prometheus/nodeproof.rules.yml",
        0o644,
    ),
    (
        "deploy/prometheus/nodeproof.tests.yml",
        "/usr/share/nodeproof/prometheus/nodeproof.tests.yml",
        0o644,
    ),
    (
        "deploy/grafana/nodeproof.json",
        "/usr/share/nodeproof/grafana/nodeproof.json",
        0o644,
    ),
];

const BINARY_DEST: &str = "/usr/bin/nodeproof";

/// What [`gen_files`] leaves in its directory (source relative to it,
/// destination directory), installed beside [`INSTALL`]; agent/Cargo.toml's
/// deb assets list the same.
const GENERATED: &[(&str, &str)] = &[
    (
        "completions/nodeproof",
        "/usr/share/bash-completion/completions/",
    ),
    (
        "completions/_nodeproof",
        "/usr/share/zsh/vendor-completions/",
    ),
    (
        "completions/nodeproof.fish",
        "/usr/share/fish/vendor_completions.d/",
    ),
    ("man/*.8.gz", "/usr/share/man/man8/"),
];

fn main() {
    if let Err(e) = run() {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = args
        .split_first()
        .map_or(("help", &[][..]), |(c, r)| (c.as_str(), r));
    match cmd {
        "setup" => setup(),
        "run" => {
            setup()?;
            cargo(&["build", "--release", "-p", "nodeproof"])?;
            let bin = root().join("target/release/nodeproof");
            let mut args: Vec<String> = rest.to_vec();
            if args.is_empty() {
                args.push("check".into());
            }
            // The binary has no source-tree fallback: on a machine without a
            // kubelet, the checkout's example profiles are the root to judge.
            let kubelet_root = Path::new("/var/lib/kubelet/seccomp");
            // Before the command: the global flag, which commands that read no
            // profiles (gpu, trace) refuse after their name.
            if !kubelet_root.exists() && !args.iter().any(|a| a.starts_with("--seccomp-root")) {
                args.splice(
                    0..0,
                    [
                        "--seccomp-root".into(),
                        root().join("profiles").display().to_string(),
                    ],
                );
            }
            let status = Command::new(&bin)
                .args(&args)
                .current_dir(root())
                .status()
                .with_context(|| format!("running {}", bin.display()))?;
            // `check` exits 1 when it finds problems: that is a report, not a failure of xtask.
            std::process::exit(status.code().unwrap_or(1));
        }
        "test" => {
            let mut tiers = Tiers::default();
            let before = tiers.time("setup", || {
                setup()?;
                // agent/tests/systemd_nspawn.rs packs the binary under test with it.
                cargo_deb()?;
                prepare_kernel();
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
            test_suite(&mut tiers, rest)
        }
        "fuzz" => fuzz(&FuzzArgs::parse(rest)?).map(drop),
        "install" => {
            let opts = InstallArgs::parse(rest)?;
            let bin = match &opts.bin {
                Some(b) => b.clone(),
                None => {
                    cargo(&["build", "--release", "-p", "nodeproof"])?;
                    root().join("target/release/nodeproof")
                }
            };
            let dest = opts.destdir.clone().unwrap_or_else(|| PathBuf::from("/"));
            let generated = root().join("target/release/assets");
            gen_files(&bin, &generated)?;
            let written = install(&root(), &bin, &generated, &dest)?;
            for w in &written {
                eprintln!("installed {}", w.display());
            }
            if opts.destdir.is_none() {
                activate()?;
            }
            Ok(())
        }
        "gen-files" => {
            let opts = GenFilesArgs::parse(rest)?;
            gen_files(&opts.bin, &opts.out)
        }
        "deb" => {
            // The completions and man pages the package ships come from the
            // binary it ships: built first, asked, then packed by cargo-deb
            // (whose own build is then a no-op).
            cargo(&["build", "--release", "-p", "nodeproof"])?;
            gen_files(
                &root().join("target/release/nodeproof"),
                &root().join("target/release/assets"),
            )?;
            let mut deb = cargo_deb()?;
            deb.args(["-p", "nodeproof"]);
            // The Debian convention (dch, dh_make): whoever builds the
            // package names themselves; agent/Cargo.toml's is a placeholder.
            if let Ok(email) = std::env::var("DEBEMAIL") {
                let name = std::env::var("DEBFULLNAME").unwrap_or_else(|_| "nodeproof".into());
                deb.arg("--maintainer").arg(format!("{name} <{email}>"));
            }
            deb.args(rest);
            eprintln!("+ {deb:?}");
            let status = deb
                .current_dir(root())
                .status()
                .context("running cargo deb")?;
            if !status.success() {
                bail!("cargo deb failed ({status})");
            }
            Ok(())
        }
        "campaign" => {
            setup()?;
            // The differential campaign against real runtimes, longer than CI's
            // bounded run: `cargo xtask campaign [CASES [SEED]]`, the oracles
            // from NP_CAMPAIGN_ORACLE (default: runc-1.1.5 and crun-1.21).
            let cases = rest.first().map_or("2000", String::as_str);
            let mut test = Command::new("cargo");
            test.args([
                "test",
                "-p",
                "nodeproof-e2e",
                "--test",
                "campaign",
                "--",
                "--nocapture",
            ])
            .env("NP_CAMPAIGN_CASES", cases)
            .env("NODEPROOF_REQUIRE", "1");
            if let Some(seed) = rest.get(1) {
                test.env("NP_CAMPAIGN_SEED", seed);
            }
            eprintln!("+ {test:?}");
            let status = test
                .current_dir(root())
                .status()
                .context("running the campaign")?;
            if !status.success() {
                bail!("the campaign found disagreements ({status})");
            }
            Ok(())
        }
        "bench" => {
            setup()?;
            // Each prints its figures and ratios; a name narrows the run to one of them.
            let which = rest.first().map(String::as_str);
            if which.is_none_or(|w| w == "profile_lint") {
                cargo(&["bench", "-p", "nodeproof-e2e", "--bench", "profile_lint"])?;
            }
            if which.is_none_or(|w| w == "gpu_probe") {
                cargo(&["bench", "-p", "nodeproof", "--bench", "gpu_probe"])?;
            }
            if which.is_none_or(|w| w == "daemon_start") {
                cargo(&["bench", "-p", "nodeproof", "--bench", "daemon_start"])?;
            }
            if which.is_none_or(|w| w == "count_retirement") {
                cargo(&[
                    "bench",
                    "-p",
                    "nodeproof-trace",
                    "--bench",
                    "count_retirement",
                ])?;
            }
            if which.is_none_or(|w| w == "trace_overhead") {
                prepare_kernel();
                cargo(&[
                    "bench",
                    "-p",
                    "nodeproof-trace",
                    "--bench",
                    "trace_overhead",
                ])?;
            }
            Ok(())
        }
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n  setup   install missing Debian packages (apt-get when root)\n  run     set up, build, run `nodeproof check` (or the given arguments)\n  test [--no-fuzz] [LIBTEST ARGS]  set up, fmt + clippy, every test binary (NODEPROOF_TEST_JOBS at a time), the doctests, the fuzz smoke; the time of each tier\n  bench   set up, run the benchmarks\n  campaign [CASES [SEED]]  the differential campaign against real runtimes (default 2000 profiles per oracle, a new seed; NP_CAMPAIGN_ORACLE=runc-1.1.5,runc-1.1.15,crun-1.8,crun-1.21 picks them)\n  install [--destdir D] [--bin PATH]  binary, units, kubelet drop-in, sysusers/tmpfiles, config, profiles, completions, man pages\n  gen-files --bin PATH --out DIR  that binary's completions and gzipped man pages into DIR\n  deb     the same files as a Debian package (cargo-deb)\n  fuzz [TARGET] [--runs N] [--time S] [--seed N] [--dev]  build the cargo-fuzz targets (fuzz/, --dev: unoptimised) and run each (or TARGET) under libFuzzer, -rss_limit_mb=2048 -timeout=10, until N executions or S seconds (default 60 s); prints executions and rate per target"
            );
            if cmd == "help" {
                Ok(())
            } else {
                bail!("unknown command {cmd:?}")
            }
        }
    }
}

#[derive(Debug)]
struct FuzzArgs {
    /// One of [`FUZZ_TARGETS`]; all of them when absent.
    target: Option<String>,
    /// libFuzzer's `-runs`.
    runs: Option<u64>,
    /// libFuzzer's `-max_total_time`, seconds.
    time_s: Option<u64>,
    /// libFuzzer's `-seed`, with a fresh working corpus; `None`: a new
    /// seed, and the corpus kept under target/fuzz-corpus/ grows.
    seed: Option<u64>,
    /// Built with the dev profile (`cargo fuzz build --dev`): no
    /// optimisation, so the dependency tree (kube, k8s-openapi, tokio)
    /// compiles in far less time, at a lower execution rate. The smoke
    /// run's 10,000 inputs need no speed; long runs do.
    dev: bool,
}

impl FuzzArgs {
    fn parse(args: &[String]) -> Result<Self> {
        let mut out = FuzzArgs {
            target: None,
            runs: None,
            time_s: None,
            seed: None,
            dev: false,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut number = |name: &str| -> Result<u64> {
                let v = it.next().with_context(|| format!("{name} needs a value"))?;
                v.parse()
                    .with_context(|| format!("{name} {v:?}: not a whole number"))
            };
            match a.as_str() {
                "--runs" => out.runs = Some(number("--runs")?),
                "--time" => out.time_s = Some(number("--time")?),
                "--seed" => out.seed = Some(number("--seed")?),
                "--dev" => out.dev = true,
                t if !t.starts_with('-') && out.target.is_none() => {
                    if !FUZZ_TARGETS.contains(&t) {
                        bail!("no fuzz target {t:?} (one of {})", FUZZ_TARGETS.join(", "));
                    }
                    out.target = Some(t.to_owned());
                }
                other => {
                    bail!("unknown fuzz argument {other:?} ([TARGET] [--runs N] [--time S] [--seed N] [--dev])")
                }
            }
        }
        if out.runs.is_none() && out.time_s.is_none() {
            out.time_s = Some(60);
        }
        Ok(out)
    }
}

/// `cargo xtask fuzz`: builds every target with cargo-fuzz (cached under
/// target/fuzz), then runs each one after the other under [`FUZZ_LIMITS`],
/// its working corpus under target/fuzz-corpus/, what it finds under
/// target/fuzz-artifacts/, libFuzzer's output in target/fuzz-logs/.
fn fuzz(opts: &FuzzArgs) -> Result<Vec<FuzzRun>> {
    let cargo_fuzz = cargo_fuzz()?;
    let target_dir = root().join("target/fuzz");
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
        None => FUZZ_TARGETS.to_vec(),
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
fn fuzz_smoke() -> Result<()> {
    let settings = format!(
        "cargo-fuzz {CARGO_FUZZ_VERSION}; {FUZZ_SMOKE:?}; targets {FUZZ_TARGETS:?}; limits {FUZZ_LIMITS:?}"
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
struct FuzzRun {
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
            let fresh = root().join("target/fuzz-smoke-corpus").join(target);
            if fresh.exists() {
                std::fs::remove_dir_all(&fresh)
                    .with_context(|| format!("emptying {}", fresh.display()))?;
            }
            fresh
        }
        None => root().join("target/fuzz-corpus").join(target),
    };
    let artifacts = root().join("target/fuzz-artifacts").join(target);
    let logs = root().join("target/fuzz-logs");
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
            let seeds = root().join("target/fuzz-corpus/profile_lint-seeds");
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
            let seeds = root().join("target/fuzz-corpus/config-seeds");
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
    let tools = root().join("target/tools");
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

struct InstallArgs {
    destdir: Option<PathBuf>,
    /// An already built binary (default: build the release one).
    bin: Option<PathBuf>,
}

impl InstallArgs {
    fn parse(args: &[String]) -> Result<Self> {
        let mut out = InstallArgs {
            destdir: None,
            bin: None,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = |name: &str| {
                it.next()
                    .map(PathBuf::from)
                    .with_context(|| format!("{name} needs a value"))
            };
            match a.as_str() {
                "--destdir" => out.destdir = Some(value("--destdir")?),
                "--bin" => out.bin = Some(value("--bin")?),
                other => bail!("unknown install argument {other:?} (--destdir D, --bin PATH)"),
            }
        }
        Ok(out)
    }
}

/// `BIN gen-files --out DIR`: completions and man pages from the binary's
/// own clap definitions (agent/src/cli/docs.rs), fresh in DIR; then the man
/// pages gzipped with `gzip -9n` (no name or time stamp, as dh_compress
/// does; Debian policy 12.1). Done here rather than by cargo-deb, which
/// compresses only assets outside the target directory.
fn gen_files(bin: &Path, out: &Path) -> Result<()> {
    if out.exists() {
        std::fs::remove_dir_all(out).with_context(|| format!("clearing {}", out.display()))?;
    }
    let status = Command::new(bin)
        .args(["gen-files", "--out"])
        .arg(out)
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("running {}", bin.display()))?;
    if !status.success() {
        bail!("{} gen-files failed ({status})", bin.display());
    }
    let man = out.join("man");
    for entry in std::fs::read_dir(&man).with_context(|| format!("reading {}", man.display()))? {
        let page = entry?.path();
        let status = Command::new("gzip")
            .arg("-9nf")
            .arg(&page)
            .status()
            .with_context(|| format!("running gzip on {}", page.display()))?;
        if !status.success() {
            bail!("gzip {} failed ({status})", page.display());
        }
    }
    Ok(())
}

struct GenFilesArgs {
    bin: PathBuf,
    out: PathBuf,
}

impl GenFilesArgs {
    fn parse(args: &[String]) -> Result<Self> {
        let (mut bin, mut out) = (None, None);
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let value = it.next().map(PathBuf::from);
            match a.as_str() {
                "--bin" => bin = value,
                "--out" => out = value,
                other => bail!("unknown gen-files argument {other:?} (--bin PATH --out DIR)"),
            }
        }
        Ok(GenFilesArgs {
            bin: bin.context("gen-files needs --bin PATH")?,
            out: out.context("gen-files needs --out DIR")?,
        })
    }
}

/// The files of [`GENERATED`] found in `generated`: (source, destination).
fn generated_files(generated: &Path) -> Result<Vec<(PathBuf, String)>> {
    let mut files = Vec::new();
    for (src, dest_dir) in GENERATED {
        let (dir, name) = src
            .rsplit_once('/')
            .context("GENERATED source without a directory")?;
        let dir = generated.join(dir);
        let matches: Vec<PathBuf> = match name.strip_prefix('*') {
            Some(suffix) => {
                let mut m: Vec<PathBuf> = std::fs::read_dir(&dir)
                    .with_context(|| format!("reading {}", dir.display()))?
                    .map(|e| e.map(|e| e.path()))
                    .collect::<std::io::Result<_>>()?;
                m.retain(|p| p.to_string_lossy().ends_with(suffix));
                m.sort();
                m
            }
            None => vec![dir.join(name)],
        };
        if matches.is_empty() {
            bail!("no {src} under {}", generated.display());
        }
        for path in matches {
            let file = path.file_name().context("generated file without a name")?;
            let dest = format!("{dest_dir}{}", file.to_string_lossy());
            files.push((path, dest));
        }
    }
    Ok(files)
}

/// Copies the files of [`INSTALL`], those of [`GENERATED`] from `generated`
/// and the binary under `destdir`. An existing
/// /etc/nodeproof/config.toml is the admin's: kept, the example goes beside
/// it as config.toml.example.
fn install(repo: &Path, bin: &Path, generated: &Path, destdir: &Path) -> Result<Vec<PathBuf>> {
    use std::os::unix::fs::PermissionsExt;
    let mut files: Vec<(PathBuf, String, u32)> =
        vec![(bin.to_path_buf(), BINARY_DEST.to_owned(), 0o755)];
    files.extend(
        INSTALL
            .iter()
            .map(|(s, d, m)| (repo.join(s), (*d).to_owned(), *m)),
    );
    files.extend(
        generated_files(generated)?
            .into_iter()
            .map(|(s, d)| (s, d, 0o644)),
    );
    let mut written = Vec::new();
    for (src, dest, mode) in files {
        let mut target = destdir.join(dest.trim_start_matches('/'));
        if dest.starts_with("/etc/") && target.exists() {
            target.set_extension("toml.example");
        }
        let dir = target.parent().context("install target without a parent")?;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        // Copy to a temporary name and rename: a running binary is replaced, not overwritten.
        let tmp = target.with_extension("xtask-tmp");
        std::fs::copy(&src, &tmp)
            .with_context(|| format!("copying {} to {}", src.display(), tmp.display()))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
        std::fs::rename(&tmp, &target)?;
        written.push(target);
    }
    Ok(written)
}

/// On the live system: the user, the directories, systemd's view of the units.
fn activate() -> Result<()> {
    let run = |cmd: &str, args: &[&str]| -> Result<()> {
        let status = Command::new(cmd)
            .args(args)
            .status()
            .with_context(|| format!("running {cmd}"))?;
        if !status.success() {
            bail!("{cmd} {} failed ({status})", args.join(" "));
        }
        Ok(())
    };
    run("systemd-sysusers", &["nodeproof.conf"])?;
    run("systemd-tmpfiles", &["--create", "nodeproof.conf"])?;
    if Path::new("/run/systemd/system").exists() {
        run("systemctl", &["daemon-reload"])?;
    } else {
        eprintln!("systemd is not running here: no daemon-reload");
    }
    Ok(())
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn cargo(args: &[&str]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("+ cargo {}", args.join(" "));
    let status = Command::new(cargo)
        .args(args)
        .current_dir(root())
        .status()
        .context("running cargo")?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}

/// The tiers of `cargo xtask test` and their wall times, printed at the end.
#[derive(Default)]
struct Tiers(Vec<(&'static str, std::time::Duration, bool)>);

impl Tiers {
    fn time<T>(&mut self, name: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        eprintln!("xtask: tier {name}");
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

/// Binaries that ran longest on the CI machine, started first when
/// target/test-times.tsv has no record yet (a fresh clone): the guests of
/// the kernel matrix, the soak, systemd in nspawn, the differential
/// campaign and the runtime oracles.
const LONGEST_FIRST: &[&str] = &[
    "nodeproof::trace_kernels",
    "nodeproof::soak",
    "nodeproof::systemd_nspawn",
    "nodeproof-e2e::lint_vs_runtime",
    "nodeproof-e2e::lint_vs_runc",
    "nodeproof-e2e::campaign",
    "nodeproof-e2e::cri_sandbox",
];

/// The build, the test binaries as a pool (`suite`), the doctests and the
/// fuzz smoke, each a tier; the summary line last.
///
/// `NODEPROOF_TEST_JOBS` sets how many binaries run at once (default 1).
/// Three at once, on a fresh clone on the 2-core machine: the tests tier
/// took 651 s for binaries whose own times summed to 1,934 s, but four
/// failed that pass alone, because binaries share state across processes: the
/// nspawn root filesystem cache (two debootstraps at once failed), the
/// host-wide tracer's counts next to the runc oracles, and timing bounds
/// under twice the load. Until those are separated it stays opt-in, as
/// a container). Arguments after `test` go to every binary (libtest's, e.g.
/// a name filter); `--no-fuzz` leaves the fuzz smoke out.
fn test_suite(tiers: &mut Tiers, rest: &[String]) -> Result<()> {
    let skips = nodeproof_testkit::skips_dir();
    // Records of an earlier run would be counted against this one.
    nodeproof_testkit::clear_skips(&skips)
        .with_context(|| format!("clearing {}", skips.display()))?;
    let no_fuzz = rest.iter().any(|a| a == "--no-fuzz");
    let args: Vec<String> = rest.iter().filter(|a| *a != "--no-fuzz").cloned().collect();
    let binaries = tiers.time("build tests", || {
        suite::build(&["test", "--workspace"], &root())
    })?;
    let jobs = std::env::var("NODEPROOF_TEST_JOBS")
        .ok()
        .and_then(|j| j.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get() + 1));
    let times_file = root().join("target/test-times.tsv");
    let ordered = suite::order(&binaries, &suite::read_times(&times_file), LONGEST_FIRST);
    eprintln!("xtask: {} test binaries, {jobs} at a time", ordered.len());
    let outcomes = tiers.time("tests", || {
        suite::run_pool(
            ordered,
            jobs,
            &args,
            &root().join("target/test-logs"),
            &times_file,
        )
    })?;
    let doc = tiers.time("doctests", || cargo_test(&["test", "--workspace", "--doc"]));
    let fuzzed = if no_fuzz {
        eprintln!("xtask: fuzz smoke left out (--no-fuzz)");
        Ok(())
    } else {
        tiers.time("fuzz smoke", fuzz_smoke)
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
    // cgroups fails the suite; cgroups left empty are said.
    let (left_running, left_cgroups) = suite::leftovers();
    for p in &left_running {
        eprintln!("xtask: left running by the tests: {p}");
    }
    if !left_cgroups.is_empty() {
        eprintln!(
            "xtask: {} cgroups of the tests left (empty): {}",
            left_cgroups.len(),
            left_cgroups.join(" ")
        );
    }
    for s in &skipped {
        println!("SKIPPED {}::{}: needs {}", s.target, s.test, s.needs);
    }
    println!("{}", totals.summary(skipped.len()));
    if !failed.is_empty() || doc.is_err() || fuzzed.is_err() || !left_running.is_empty() {
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

/// The sums of libtest's `test result:` lines.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Totals {
    passed: usize,
    failed: usize,
    ignored: usize,
}

impl Totals {
    /// Adds `line` when it is a `test result: ok. 3 passed; 0 failed; ...` line.
    fn add(&mut self, line: &str) {
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            return;
        };
        let count = |what: &str| {
            rest.split(';').find_map(|field| {
                let n = field.trim().strip_suffix(what)?;
                n.trim().rsplit(' ').next()?.parse::<usize>().ok()
            })
        };
        self.passed += count(" passed").unwrap_or(0);
        self.failed += count(" failed").unwrap_or(0);
        self.ignored += count(" ignored").unwrap_or(0);
    }

    /// `N passed, F failed, M skipped`: libtest counts a test that returned
    /// early as passed, so the skipped ones come off `passed`.
    fn summary(&self, skipped: usize) -> String {
        let mut s = format!(
            "{} passed, {} failed, {skipped} skipped",
            self.passed.saturating_sub(skipped),
            self.failed
        );
        if self.ignored > 0 {
            s += &format!(", {} ignored", self.ignored);
        }
        s
    }
}

/// `cargo deb`: the one on PATH if it is the pinned version, else the pinned
/// version under target/tools (installed there on first use: CI's clean
/// clone caches it with the rest of target/).
fn cargo_deb() -> Result<Command> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Only the pinned version: newer ones announce refusing the dev profile
    // the package test builds with.
    let on_path = Command::new(&cargo)
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout).trim()
                    == format!("cargo-deb {CARGO_DEB_VERSION}")
        });
    let tools = root().join("target/tools");
    let local = tools.join("bin/cargo-deb");
    let mut cmd = if on_path {
        Command::new(&cargo)
    } else {
        if !local.is_file() {
            let root = tools.to_string_lossy();
            crate::cargo(&[
                "install",
                "cargo-deb",
                "--version",
                CARGO_DEB_VERSION,
                "--locked",
                "--root",
                &root,
            ])?;
        }
        Command::new(local)
    };
    cmd.arg("deb");
    Ok(cmd)
}

fn installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Install what is missing; as non-root, print the one command to run.
fn setup() -> Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| !installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    for (p, why) in PACKAGES.iter().filter(|(p, _)| missing.contains(p)) {
        eprintln!("missing package {p}: {why}");
    }
    let install = format!(
        "apt-get install -y --no-install-recommends {}",
        missing.join(" ")
    );
    if !is_root() {
        bail!("run as root: apt-get update && {install}");
    }
    let status = Command::new("sh")
        .args([
            "-c",
            &format!("apt-get update -qq && DEBIAN_FRONTEND=noninteractive {install}"),
        ])
        .status()
        .context("running apt-get")?;
    if !status.success() {
        bail!("apt-get failed ({status})");
    }
    Ok(())
}

/// tracefs is not mounted by default here; the eBPF tests want it.
fn prepare_kernel() {
    if is_root() && !Path::new("/sys/kernel/tracing/events").exists() {
        let _ = Command::new("mount")
            .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn fuzz_arguments_name_a_target_and_a_bound() {
        let args =
            |a: &[&str]| FuzzArgs::parse(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let a = args(&["profile_lint", "--runs", "5"]).unwrap();
        assert_eq!(
            (a.target.as_deref(), a.runs, a.time_s),
            (Some("profile_lint"), Some(5), None)
        );
        let a = args(&[]).unwrap();
        assert_eq!((a.target, a.runs, a.time_s), (None, None, Some(60)));
        let a = args(&["--time", "20", "--runs", "10000"]).unwrap();
        assert_eq!((a.runs, a.time_s), (Some(10_000), Some(20)));
        assert!(args(&["no_such_target"]).is_err());
        assert!(args(&["--runs"]).is_err());
        assert!(args(&["--time", "soon"]).is_err());
    }

    #[test]
    fn install_puts_every_file_in_place_and_keeps_an_existing_config() {
        let dest = std::env::temp_dir().join(format!("xtask-install-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dest);
        let bin = root().join("Cargo.toml"); // any file stands in for the binary
                                             // gen_files' tree, with stand-ins of its files.
        let generated = dest.with_extension("generated");
        let _ = std::fs::remove_dir_all(&generated);
        for f in [
            "completions/nodeproof",
            "completions/_nodeproof",
            "completions/nodeproof.fish",
            "man/nodeproof.8.gz",
            "man/nodeproof-check.8.gz",
        ] {
            let path = generated.join(f);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, format!(".TH {f}\n")).unwrap();
        }
        let written = install(&root(), &bin, &generated, &dest).unwrap();
        assert_eq!(written.len(), INSTALL.len() + 1 + 5);
        for (_, d, _) in INSTALL {
            assert!(dest.join(d.trim_start_matches('/')).is_file(), "{d}");
        }
        for f in [
            "usr/share/bash-completion/completions/nodeproof",
            "usr/share/zsh/vendor-completions/_nodeproof",
            "usr/share/fish/vendor_completions.d/nodeproof.fish",
        ] {
            assert!(dest.join(f).is_file(), "{f}");
        }
        for page in ["nodeproof.8.gz", "nodeproof-check.8.gz"] {
            assert!(dest.join("usr/share/man/man8").join(page).is_file());
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dest.join("usr/bin/nodeproof"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        std::fs::write(dest.join("etc/nodeproof/config.toml"), "# mine\n").unwrap();
        install(&root(), &bin, &generated, &dest).unwrap();
        assert_eq!(
            std::fs::read_to_string(dest.join("etc/nodeproof/config.toml")).unwrap(),
            "# mine\n"
        );
        assert!(dest.join("etc/nodeproof/config.toml.example").is_file());
        std::fs::remove_dir_all(&dest).unwrap();
        std::fs::remove_dir_all(&generated).unwrap();
    }
}
