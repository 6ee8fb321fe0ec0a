//! The units under systemd/ as systemd reads them: `systemd-analyze verify`
//! with empty stderr (warnings exit 0, so stderr is the verdict) and the
//! `systemd-analyze security` exposure within the target.

use std::path::{Path, PathBuf};
use std::process::Command;

use nodeproof_testkit::{require, Need};

const EXPOSURE_TARGET: f64 = 2.0;

fn units() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd")
}

/// A root with the host's unit library, the real binary at the path the
/// unit names, our units, and a stub kubelet for the drop-in; `None` (the
/// calling test skipped or failed by `require`) without systemd-analyze.
fn root() -> Option<tempfile::TempDir> {
    require(&[Need::Tool("systemd-analyze")])?;
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    for d in [
        "usr/bin",
        "bin",
        "usr/lib/systemd",
        "etc/systemd/system/kubelet.service.d",
    ] {
        std::fs::create_dir_all(r.join(d)).unwrap();
    }
    let lib = ["/usr/lib/systemd/system", "/lib/systemd/system"]
        .into_iter()
        .find(|p| Path::new(p).join("sysinit.target").exists())
        .expect("systemd-analyze is installed but no unit library (sysinit.target) was found");
    let status = Command::new("cp")
        .args(["-r", lib])
        .arg(r.join("usr/lib/systemd/system"))
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::copy(env!("CARGO_BIN_EXE_nodeproof"), r.join("usr/bin/nodeproof")).unwrap();
    std::fs::copy("/bin/kill", r.join("bin/kill")).unwrap();
    let etc = r.join("etc/systemd/system");
    std::fs::copy(
        units().join("nodeproof.service"),
        etc.join("nodeproof.service"),
    )
    .unwrap();
    std::fs::copy(
        units().join("kubelet.service.d/10-nodeproof.conf"),
        etc.join("kubelet.service.d/10-nodeproof.conf"),
    )
    .unwrap();
    std::fs::write(
        etc.join("kubelet.service"),
        "[Unit]\nDescription=stub kubelet\n[Service]\nExecStart=/usr/bin/nodeproof check\n",
    )
    .unwrap();
    Some(dir)
}

fn analyze(root: &Path, args: &[&str]) -> std::process::Output {
    Command::new("systemd-analyze")
        .args(args)
        .arg(format!("--root={}", root.display()))
        .output()
        .unwrap()
}

#[test]
fn units_and_drop_in_verify_with_empty_stderr() {
    let Some(dir) = root() else { return };
    for unit in ["nodeproof.service", "kubelet.service"] {
        let path = format!("/etc/systemd/system/{unit}");
        let out = analyze(dir.path(), &["verify", "--man=no", &path]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.is_empty(),
            "{unit}: {stderr}"
        );
    }
}

#[test]
fn exposure_is_within_target() {
    let Some(dir) = root() else { return };
    let out = analyze(
        dir.path(),
        &[
            "security",
            "--offline=true",
            "/etc/systemd/system/nodeproof.service",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let score: f64 = text
        .lines()
        .find_map(|l| l.split("nodeproof.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no exposure score in: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    eprintln!("nodeproof.service exposure {score}");
    assert!(
        score <= EXPOSURE_TARGET,
        "exposure {score} > {EXPOSURE_TARGET}:\n{text}"
    );
}

#[test]
fn sysusers_creates_the_user_tmpfiles_its_directories() {
    let Some(_) = require(&[
        Need::Tool("systemd-sysusers"),
        Need::Tool("systemd-tmpfiles"),
    ]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // sysusers writes into the root's /etc, which must exist.
    std::fs::create_dir(dir.path().join("etc")).unwrap();
    let root = format!("--root={}", dir.path().display());
    let out = Command::new("systemd-sysusers")
        .arg(&root)
        .arg(units().join("nodeproof.sysusers.conf"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let passwd = std::fs::read_to_string(dir.path().join("etc/passwd")).unwrap();
    assert!(passwd.contains("nodeproof:x:"), "{passwd}");
    let out = Command::new("systemd-tmpfiles")
        .arg(&root)
        .arg("--create")
        .arg(units().join("nodeproof.tmpfiles.conf"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.is_empty(), "{stderr}");
    assert!(dir.path().join("var/lib/nodeproof").is_dir());
}
