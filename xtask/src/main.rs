//! `cargo xtask`: set up a fresh Debian 12 machine, build, run, test, bench.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

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
    (
        "busybox-static",
        "the root filesystem of the oracle's containers",
    ),
    (
        "strace",
        "re-learning what runc init needs (tests/learn-runc-init.sh)",
    ),
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
            let status = Command::new(&bin)
                .args(&args)
                .current_dir(root())
                .status()
                .with_context(|| format!("running {}", bin.display()))?;
            // `check` exits 1 when it finds problems: that is a report, not a failure of xtask.
            std::process::exit(status.code().unwrap_or(1));
        }
        "test" => {
            setup()?;
            prepare_kernel();
            cargo(&["fmt", "--all", "--", "--check"])?;
            cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ])?;
            let mut test = vec!["test", "--workspace"];
            test.extend(rest.iter().map(String::as_str));
            cargo(&test)
        }
        "bench" => {
            setup()?;
            // Each prints its figures and ratios; a name narrows the run to one of them.
            let which = rest.first().map(String::as_str);
            if which.is_none_or(|w| w == "profile_lint") {
                cargo(&["bench", "-p", "nodeproof-e2e", "--bench", "profile_lint"])?;
            }
            if which.is_none_or(|w| w == "trace_overhead") {
                prepare_kernel();
                cargo(&["bench", "-p", "nodeproof", "--bench", "trace_overhead"])?;
            }
            Ok(())
        }
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n  setup   install missing Debian packages (apt-get when root)\n  run     set up, build, run `nodeproof check` (or the given arguments)\n  test    set up, fmt + clippy, every test\n  bench   set up, run the benchmarks"
            );
            if cmd == "help" {
                Ok(())
            } else {
                bail!("unknown command {cmd:?}")
            }
        }
    }
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
