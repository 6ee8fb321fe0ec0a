//! What a release is made of, as a user gets it:
//!
//! - the image `cargo xtask image` writes, under the name
//!   deploy/base/kustomization.yaml gives it, imported into the private
//!   containerd the oracles run (`ctr images import`, the docker-archive
//!   tarball) and started through CRI as a kubelet would: `nodeproof
//!   --version` and `nodeproof profile lint` run in it, as the image's
//!   non-root user, with only the libraries the image holds;
//! - the archive `cargo xtask dist` writes, unpacked with tar and checked
//!   with `sha256sum -c`, the same bytes when made twice.

use std::path::{Path, PathBuf};
use std::process::Command;

use nodeproof_e2e::cri::{self, ContainerdOracle, Stage};
use nodeproof_testkit::require;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn cargo(args: &[&str]) -> std::process::Output {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(args)
        .current_dir(workspace())
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn the_image_starts_in_containerd_as_its_user_and_lints_a_profile() {
    let Some(_) = require(cri::ORACLE) else {
        return;
    };
    // The binary the test build made (the debug one: the image test is of
    // the image, and a release build would double the suite's build).
    cargo(&["build", "-q", "-p", "nodeproof", "--bin", "nodeproof"]);
    let bin = workspace().join("target/debug/nodeproof");
    let out = tempfile::tempdir().expect("a temporary directory");
    let printed = cargo(&[
        "run",
        "-q",
        "-p",
        "xtask",
        "--",
        "image",
        "--bin",
        &bin.to_string_lossy(),
        "--out",
        &out.path().to_string_lossy(),
    ]);
    let printed = String::from_utf8_lossy(&printed.stdout);
    let (reference, digest) = printed
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("`xtask image` printed {printed:?}"));
    // No --name: the name deploy/base/kustomization.yaml runs.
    assert_eq!(
        reference,
        concat!("localhost/nodeproof:", env!("CARGO_PKG_VERSION"))
    );
    assert!(digest.starts_with("sha256:"), "{digest}");
    let oracle = ContainerdOracle::shared().expect("containerd oracle");
    oracle
        .import(&out.path().join("nodeproof-image.tar"))
        .expect("ctr images import");

    let version = oracle
        .run_image(reference, &["/usr/bin/nodeproof", "--version"])
        .expect("the version run");
    assert_eq!(
        (version.run.stage, version.run.exit_code),
        (Stage::Exited, Some(0)),
        "{version:?}"
    );
    let own =
        String::from_utf8_lossy(&Command::new(&bin).arg("--version").output().unwrap().stdout)
            .into_owned();
    assert_eq!(
        version.output, own,
        "the binary in the image is the one given"
    );
    assert_eq!(version.uid, Some(65532), "the image's non-root user");

    let lint = oracle
        .run_image(
            reference,
            &[
                "/usr/bin/nodeproof",
                "profile",
                "lint",
                "/usr/share/nodeproof/profiles/runtime-default-x86_64.json",
            ],
        )
        .expect("the lint run");
    assert_eq!(
        (lint.run.stage, lint.run.exit_code),
        (Stage::Exited, Some(0)),
        "{lint:?}"
    );
    assert!(
        lint.output.contains("runtime-default-x86_64.json"),
        "{}",
        lint.output
    );

    // No command: the image's entrypoint with its default arguments (--help).
    let help = oracle.run_image(reference, &[]).expect("the default run");
    assert_eq!(help.run.exit_code, Some(0), "{help:?}");
    assert!(help.output.contains("Usage: nodeproof"), "{}", help.output);
}

fn tar_list(archive: &Path) -> Vec<String> {
    let out = Command::new("tar")
        .arg("-tzf")
        .arg(archive)
        .output()
        .expect("tar runs");
    assert!(out.status.success(), "tar -tzf {}", archive.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_release_archive_unpacks_checks_and_runs_and_is_reproducible() {
    cargo(&["build", "-q", "-p", "nodeproof", "--bin", "nodeproof"]);
    let bin = workspace().join("target/debug/nodeproof");
    let version = env!("CARGO_PKG_VERSION");
    let dist = |out: &Path| {
        cargo(&[
            "run",
            "-q",
            "-p",
            "xtask",
            "--",
            "dist",
            "--no-deb",
            "--bin",
            &bin.to_string_lossy(),
            "--out",
            &out.to_string_lossy(),
        ]);
        let name = format!("nodeproof-{version}-x86_64-linux.tar.gz");
        let archive = out.join(&name);
        assert!(archive.is_file(), "{}", archive.display());
        // SHA256SUMS beside it names it.
        let check = Command::new("sha256sum")
            .args(["-c", "SHA256SUMS"])
            .current_dir(out)
            .output()
            .unwrap();
        assert!(check.status.success(), "{check:?}");
        std::fs::read(archive).unwrap()
    };
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = dist(a.path());
    assert_eq!(
        first,
        dist(b.path()),
        "the same binary and epoch, the same archive"
    );

    let dir = format!("nodeproof-{version}-x86_64-linux");
    let archive = a.path().join(format!("{dir}.tar.gz"));
    let listed = tar_list(&archive);
    for f in [
        "usr/bin/nodeproof",
        "usr/lib/systemd/system/nodeproof.service",
        "usr/lib/systemd/system/kubelet.service.d/10-nodeproof.conf",
        "usr/lib/sysusers.d/nodeproof.conf",
        "usr/lib/tmpfiles.d/nodeproof.conf",
        "etc/nodeproof/config.toml",
        "usr/share/nodeproof/profiles/runtime-default-x86_64.json",
        "usr/share/man/man8/nodeproof.8.gz",
        "usr/share/bash-completion/completions/nodeproof",
        "deploy/base/daemonset.yaml",
        "README.md",
        "CHANGELOG.md",
        "SHA256SUMS",
    ] {
        assert!(
            listed.contains(&format!("{dir}/{f}")),
            "{f} is not in the archive: {listed:?}"
        );
    }
    let unpacked = tempfile::tempdir().unwrap();
    let untar = Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(unpacked.path())
        .status()
        .unwrap();
    assert!(untar.success());
    let root = unpacked.path().join(&dir);
    let check = Command::new("sha256sum")
        .args(["--quiet", "-c", "SHA256SUMS"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    // Path (a) of the quick start: lint a profile from the unpacked archive.
    let lint = Command::new(root.join("usr/bin/nodeproof"))
        .args(["profile", "lint"])
        .arg(root.join("usr/share/nodeproof/profiles/runtime-default-x86_64.json"))
        .output()
        .unwrap();
    assert!(lint.status.success(), "{lint:?}");
    let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).unwrap();
    assert!(
        changelog.contains(&format!("## {version}")),
        "CHANGELOG.md has no entry for {version}"
    );
}
