//! `cargo xtask setup`: the Debian packages the build and the tests need.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

/// Debian packages the build and the tests need, with why.
pub const PACKAGES: &[(&str, &str)] = &[
    ("clang", "compiles the eBPF programs in crates/trace/bpf/"),
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
        "kubernetes-client",
        "kubectl kustomize renders deploy/'s base and overlays (agent/tests/cli_and_docs/deploy_daemonset.rs); any kubectl on PATH will do",
    ),
    (
        "ca-certificates",
        "the CA certificates `cargo xtask image` puts in the image",
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
        "zsh -n on the zsh completion (agent/tests/cli_and_docs/cli_docs.rs)",
    ),
    (
        "fish",
        "fish -n on the fish completion (agent/tests/cli_and_docs/cli_docs.rs)",
    ),
    (
        "groff-base",
        "groff: renders the man pages with every warning on (agent/tests/cli_and_docs/cli_docs.rs)",
    ),
    (
        "man-db",
        "man -l on nodeproof(8) (agent/tests/cli_and_docs/cli_docs.rs)",
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
        "promtool (Debian ships it only with the server, whose service the tests do not use): checks and unit-tests the alert rules, parses the dashboard's PromQL (agent/tests/apiserver/ops_monitoring.rs)",
    ),
];

/// Packages whose command another package may provide: present when the
/// command runs (e.g. a kubectl from a cloud SDK's package, which Debian's
/// kubernetes-client would conflict with).
const COMMANDS: &[(&str, &[&str])] = &[("kubernetes-client", &["kubectl", "version", "--client"])];

fn installed(pkg: &str) -> bool {
    if let Some((_, cmd)) = COMMANDS.iter().find(|(p, _)| *p == pkg) {
        let runs = Command::new(cmd[0])
            .args(&cmd[1..])
            .output()
            .is_ok_and(|o| o.status.success());
        if runs {
            return true;
        }
    }
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Install what is missing; as non-root, print the one command to run.
pub fn setup() -> Result<()> {
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
pub fn prepare_kernel() {
    if is_root() && !Path::new("/sys/kernel/tracing/events").exists() {
        let _ = Command::new("mount")
            .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
            .status();
    }
}
