//! `cargo xtask`: set up a fresh Debian 12 machine, build, run, test, bench,
//! fuzz, install and package. One module per command family: setup
//! (packages), tiers (`test`, with suite.rs running the binaries and
//! smoke_record.rs deciding whether the fuzz smoke runs), fuzz, package
//! (install, gen-files, deb).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

mod archive;
mod dist;
#[cfg(test)]
mod edge;
mod fuzz;
mod image;
#[cfg(test)]
mod layers;
mod package;
#[cfg(test)]
mod prose;
mod setup;
mod smoke_record;
mod suite;
mod tiers;

#[derive(Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install missing Debian packages (apt-get when root).
    Setup,
    /// Set up, build, run `nodeproof check` (or the given arguments).
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Set up, fmt + clippy, every test binary (NODEPROOF_TEST_JOBS at a
    /// time), the doctests, the fuzz smoke; the time of each tier.
    Test {
        /// Leave the fuzz smoke out.
        #[arg(long)]
        no_fuzz: bool,
        /// Passed to every test binary (libtest's, e.g. a name filter).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        libtest: Vec<String>,
    },
    /// Set up, run the benchmarks (or one).
    Bench { which: Option<Bench> },
    /// The differential campaign against real runtimes (NP_CAMPAIGN_ORACLE=
    /// runc-1.1.5,runc-1.1.15,crun-1.8,crun-1.21 picks the oracles).
    Campaign {
        /// Profiles per oracle.
        #[arg(default_value_t = 2000)]
        cases: u64,
        /// The campaign's seed (default: a new one).
        seed: Option<u64>,
    },
    /// Binary, units, kubelet drop-in, sysusers/tmpfiles, config, profiles,
    /// completions, man pages.
    Install(package::InstallArgs),
    /// That binary's completions and gzipped man pages into DIR.
    GenFiles(package::GenFilesArgs),
    /// The same files as a Debian package (cargo-deb; arguments go to it).
    Deb {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The container image: an OCI layout and a tarball docker, podman and
    /// ctr load (no registry, no daemon), reproducible from the commit.
    Image(image::ImageArgs),
    /// The release bundle: an archive of what the package installs, with
    /// deploy/, the changelog and SHA256SUMS; the .deb; their SHA256SUMS.
    Dist(dist::DistArgs),
    /// Build the cargo-fuzz targets (fuzz/) and run each (or one) under
    /// libFuzzer, -rss_limit_mb=2048 -timeout=10; prints executions and rate.
    Fuzz(fuzz::FuzzArgs),
}

/// The benchmarks `cargo xtask bench` runs: (package, bench target).
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
enum Bench {
    ProfileLint,
    GpuProbe,
    GpuUsage,
    DaemonStart,
    AgentMemory,
    CountRetirement,
    TraceOverhead,
}

impl Bench {
    fn target(self) -> (&'static str, &'static str) {
        match self {
            Bench::ProfileLint => ("nodeproof-e2e", "profile_lint"),
            Bench::GpuProbe => ("nodeproof", "gpu_probe"),
            Bench::GpuUsage => ("nodeproof", "gpu_usage"),
            Bench::DaemonStart => ("nodeproof", "daemon_start"),
            Bench::AgentMemory => ("nodeproof", "agent_memory"),
            Bench::CountRetirement => ("nodeproof-trace", "count_retirement"),
            Bench::TraceOverhead => ("nodeproof-trace", "trace_overhead"),
        }
    }
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli.command) {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

fn run(command: Cmd) -> Result<()> {
    match command {
        Cmd::Setup => setup::setup(),
        Cmd::Run { args } => run_binary(args),
        Cmd::Test { no_fuzz, libtest } => tiers::test(no_fuzz, &libtest),
        Cmd::Bench { which } => {
            setup::setup()?;
            // Each prints its figures and ratios.
            for b in Bench::value_variants() {
                if which.is_some_and(|w| w != *b) {
                    continue;
                }
                if *b == Bench::TraceOverhead {
                    setup::prepare_kernel();
                }
                let (package, bench) = b.target();
                cargo(&["bench", "-p", package, "--bench", bench])?;
            }
            Ok(())
        }
        Cmd::Campaign { cases, seed } => campaign(cases, seed),
        Cmd::Install(args) => package::install_command(&args),
        Cmd::GenFiles(args) => package::gen_files(&args.bin, &args.out),
        Cmd::Deb { args } => package::deb(&args),
        Cmd::Fuzz(args) if args.smoke => fuzz::fuzz_smoke(),
        Cmd::Fuzz(args) => fuzz::fuzz(&args).map(drop),
        Cmd::Image(args) => image::image_command(&args),
        Cmd::Dist(args) => dist::dist_command(&args),
    }
}

/// `cargo xtask run`: the release binary, on this checkout's profiles when
/// the machine has no kubelet.
fn run_binary(mut args: Vec<String>) -> Result<()> {
    setup::setup()?;
    let bin = build_release()?;
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

/// The differential campaign against real runtimes, longer than CI's
/// bounded run, the oracles from NP_CAMPAIGN_ORACLE (default: runc-1.1.5
/// and crun-1.21).
fn campaign(cases: u64, seed: Option<u64>) -> Result<()> {
    setup::setup()?;
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
    .env("NP_CAMPAIGN_CASES", cases.to_string())
    .env("NODEPROOF_REQUIRE", "1");
    if let Some(seed) = seed {
        test.env("NP_CAMPAIGN_SEED", seed.to_string());
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

/// `git ARGS` in the repository: its trimmed output, `None` when git fails.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(root())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// HEAD's commit, `-dirty` appended when tracked files have changes
/// (`unknown` outside git): what `nodeproof --version` and the image's
/// revision label say.
fn revision() -> String {
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    }
}

/// The release binary, built with [`revision`] for `--version` (agent/build.rs).
fn build_release() -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let revision = revision();
    eprintln!("+ NODEPROOF_REVISION={revision} cargo build --release -p nodeproof");
    let status = Command::new(cargo)
        .args(["build", "--release", "-p", "nodeproof"])
        .env("NODEPROOF_REVISION", &revision)
        .current_dir(root())
        .status()
        .context("running cargo")?;
    if !status.success() {
        bail!("cargo build --release -p nodeproof failed ({status})");
    }
    Ok(crate::target_dir().join("release/nodeproof"))
}

/// The workspace's target directory as cargo resolves it
/// (`CARGO_TARGET_DIR`, a cargo config's `build.target-dir`, else
/// `<workspace>/target`): `cargo metadata`'s `target_directory`, read once.
/// Everything xtask writes or finds under "target/" is under this.
pub fn target_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        match metadata("Cargo.toml").map(|m| m["target_directory"].as_str().map(PathBuf::from)) {
            Ok(Some(dir)) => dir,
            Ok(None) => {
                eprintln!("xtask: cargo metadata names no target_directory; using target/");
                root().join("target")
            }
            Err(e) => {
                eprintln!("xtask: {e:#}; using target/");
                root().join("target")
            }
        }
    })
    .clone()
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

/// `cargo metadata --no-deps` of the manifest at `manifest` (relative to
/// the root): where the lists xtask needs (fuzz targets, packaged files)
/// are read from, instead of being repeated here.
fn metadata(manifest: &str) -> Result<serde_json::Value> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .arg("--manifest-path")
        .arg(root().join(manifest))
        .current_dir(root())
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!("cargo metadata --manifest-path {manifest} failed");
    }
    serde_json::from_slice(&out.stdout).context("reading cargo metadata's output")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_parses_as_the_readme_and_ci_write_it() {
        let parse = |a: &[&str]| Cli::try_parse_from(["cargo xtask"].iter().chain(a));
        assert!(matches!(
            parse(&["test"]).unwrap().command,
            Cmd::Test { no_fuzz: false, ref libtest } if libtest.is_empty()
        ));
        assert!(matches!(
            parse(&["test", "--no-fuzz", "corpus", "--nocapture"]).unwrap().command,
            Cmd::Test { no_fuzz: true, ref libtest } if libtest == &["corpus", "--nocapture"]
        ));
        assert!(matches!(
            parse(&["bench", "trace_overhead"]).unwrap().command,
            Cmd::Bench {
                which: Some(Bench::TraceOverhead)
            }
        ));
        assert!(matches!(
            parse(&["campaign", "300", "7"]).unwrap().command,
            Cmd::Campaign {
                cases: 300,
                seed: Some(7)
            }
        ));
        assert!(matches!(
            parse(&["run", "trace", "--pod", "x"]).unwrap().command,
            Cmd::Run { ref args } if args == &["trace", "--pod", "x"]
        ));
        assert!(parse(&["bench", "no-such"]).is_err());
        assert!(parse(&["campaign", "many"]).is_err());
        assert!(parse(&["frobnicate"]).is_err());
    }
}

#[cfg(test)]
mod crate_table {
    use super::*;

    /// docs/architecture.md's crate table names every package of the
    /// workspace, and only those: the one table a newcomer reads.
    #[test]
    fn the_architecture_table_names_every_workspace_crate() {
        let text = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
        let section = text
            .split("## Crates")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .and_then(|s| s.split("\n### ").next())
            .expect("a Crates section");
        let mut tabled: Vec<String> = section
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .filter(|n| *n != "crate")
            .map(str::to_owned)
            .collect();
        tabled.sort();
        let metadata = metadata("Cargo.toml").unwrap();
        let mut members: Vec<String> = metadata["packages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect();
        members.sort();
        assert_eq!(tabled, members);
    }
}
