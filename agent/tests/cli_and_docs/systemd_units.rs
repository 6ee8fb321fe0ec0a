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

/// Every `Documentation=` under systemd/ is a page or file the package
/// installs: `man:NAME(8)` one that `nodeproof gen-files` writes, `file:PATH`
/// one of agent/Cargo.toml's deb assets; no web address (none is run for
/// this project that a unit could promise).
#[test]
fn every_documentation_link_is_installed() {
    let generated = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(["gen-files", "--out"])
        .arg(generated.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let mut units_files = vec![units().join("nodeproof.service")];
    units_files.push(units().join("kubelet.service.d/10-nodeproof.conf"));
    let mut links = 0;
    for file in units_files {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            let Some(value) = line.strip_prefix("Documentation=") else {
                continue;
            };
            for link in value.split_whitespace() {
                links += 1;
                if let Some(page) = link.strip_prefix("man:") {
                    let (name, section) = page
                        .strip_suffix(')')
                        .and_then(|p| p.split_once('('))
                        .unwrap_or_else(|| {
                            panic!("{}: {link} is not man:NAME(SECTION)", file.display())
                        });
                    let path = generated.path().join(format!("man/{name}.{section}"));
                    assert!(
                        path.is_file(),
                        "{}: {link} is not generated",
                        file.display()
                    );
                } else if let Some(path) = link.strip_prefix("file:") {
                    let (dir, name) = path.trim_start_matches('/').rsplit_once('/').unwrap();
                    let asset = format!("\"{dir}/\"");
                    assert!(
                        manifest
                            .lines()
                            .any(|l| l.contains(&asset) && l.contains(name)),
                        "{}: {link} is not a deb asset",
                        file.display()
                    );
                } else {
                    panic!("{}: {link} is neither man: nor file:", file.display());
                }
            }
        }
    }
    assert!(links > 0, "no Documentation= found");
}
