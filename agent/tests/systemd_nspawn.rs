//! nodeproof.service under a real systemd: systemd as PID 1 in
//! systemd-nspawn (Debian 12 rootfs from debootstrap, cached under
//! target/nspawn/). Installs the files, starts the unit and checks READY,
//! STATUS=, the journal fields, /healthz, the user and its two
//! capabilities, eBPF tracing, the watchdog restart and the kubelet drop-in;
//! then the same through the Debian package (`dpkg -i`, `-r`, `--purge`),
//! an upgrade from the previous package version, and lintian on the package.
//! Needs root, debootstrap and systemd-container, and cargo-deb for the
//! package (`cargo xtask setup` installs the first two, `cargo xtask test`
//! cargo-deb under target/tools).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nodeproof_testkit::{require, Need};

#[path = "support/fake_nvml.rs"]
mod fake_nvml_support;
#[path = "support/nspawn.rs"]
mod nspawn;

use nspawn::{repo, rootfs, show, Machine, BOOT};

const INSTALL: &str = r#"set -e
install -m 755 /opt/np/nodeproof /usr/bin/nodeproof
install -D -m 644 /opt/np/systemd/nodeproof.service /usr/lib/systemd/system/nodeproof.service
install -D -m 644 /opt/np/systemd/kubelet.service.d/10-nodeproof.conf /usr/lib/systemd/system/kubelet.service.d/10-nodeproof.conf
install -D -m 644 /opt/np/systemd/nodeproof.sysusers.conf /usr/lib/sysusers.d/nodeproof.conf
install -D -m 644 /opt/np/systemd/nodeproof.tmpfiles.conf /usr/lib/tmpfiles.d/nodeproof.conf
install -D -m 644 /opt/np/systemd/config.toml /etc/nodeproof/config.toml
sed -i -e 's|^nvml-library = .*|nvml-library = "/opt/np/gpu/libnvidia-ml.so.1"|' -e 's|^sysfs-root = .*|sysfs-root = "/opt/np/gpu/sys"|' /etc/nodeproof/config.toml
install -D -m 644 /opt/np/profiles/runtime-default-x86_64.json /var/lib/kubelet/seccomp/default.json
printf '[Service]\nWatchdogSec=2\n' > /tmp/wd.conf
install -D -m 644 /tmp/wd.conf /etc/systemd/system/nodeproof.service.d/watchdog.conf
printf '[Unit]\nDescription=stub kubelet\n[Service]\nExecStart=/bin/sleep infinity\n' > /etc/systemd/system/kubelet.service
systemd-sysusers nodeproof.conf
systemd-tmpfiles --create nodeproof.conf
systemctl daemon-reload
"#;

/// The running unit's process is the nodeproof user with CAP_PERFMON (38)
/// and CAP_BPF (39), nothing else, effective and bounding.
fn assert_user_and_caps(m: &Machine) {
    let pid = show(m, "nodeproof.service", "MainPID");
    let proc_status = m.sh(&format!("cat /proc/{pid}/status"));
    let field = |name: &str| {
        proc_status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    let uid = m.sh("id -u nodeproof").trim().to_string();
    assert!(
        !uid.is_empty() && field("Uid:").starts_with(&uid),
        "{proc_status}"
    );
    assert_eq!(field("CapEff:"), "000000c000000000", "{proc_status}");
    assert_eq!(field("CapBnd:"), "000000c000000000", "{proc_status}");
}

/// Starts the unit: active (READY=1 received), STATUS=, the user and its
/// capabilities, /healthz answering the nodeproof user.
fn start_and_check(m: &Machine) {
    let started =
        m.sh("systemctl start nodeproof.service && systemctl is-active nodeproof.service");
    assert_eq!(
        started.trim(),
        "active",
        "{}",
        m.sh("journalctl -u nodeproof --no-pager | tail -30")
    );
    assert_status_line(m);
    assert_user_and_caps(m);
    let health = m.sh("runuser -u nodeproof -- curl -sf http://127.0.0.1:9810/healthz");
    assert!(health.starts_with("ok"), "{health}");
}

/// STATUS= says the profile passed and which eBPF strategy traces.
fn assert_status_line(m: &Machine) {
    let status = show(m, "nodeproof.service", "StatusText");
    eprintln!("STATUS={status}");
    assert!(status.contains("profiles 1 ok"), "{status}");
    assert!(
        status.contains("tracing tp_btf")
            || status.contains("tracing fexit")
            || status.contains("tracing tracepoint"),
        "eBPF tracing not working as the nodeproof user: {status}"
    );
}

#[test]
fn the_unit_runs_under_systemd_as_pid_1() {
    let Some(_) = require(BOOT) else {
        return;
    };
    let root = rootfs();
    let share = tempfile::tempdir().unwrap();
    std::fs::copy(
        env!("CARGO_BIN_EXE_nodeproof"),
        share.path().join("nodeproof"),
    )
    .unwrap();
    // One fake GPU (the fake NVML) that has raised XID 79: the journal gets XID= and GPU_UUID=.
    let gpu = fake_nvml_support::Scenario::new("gpus 1\nxid 1 0 79\n", 1);
    for (from, to) in [
        (repo().join("systemd"), "systemd"),
        (repo().join("profiles"), "profiles"),
        (gpu.dir.path().to_path_buf(), "gpu"),
    ] {
        let status = Command::new("cp")
            .arg("-r")
            .arg(&from)
            .arg(share.path().join(to))
            .status()
            .unwrap();
        assert!(status.success());
    }
    // The agent reads the fake NVML and its scenario as the nodeproof user.
    let status = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(share.path())
        .status()
        .unwrap();
    assert!(status.success());
    let m = Machine::boot(&root, share.path());
    let out = m.sh(INSTALL);
    assert!(!out.contains("rror"), "{out}");

    start_and_check(&m);
    let pid = show(&m, "nodeproof.service", "MainPID");
    let journal = m.sh("journalctl -u nodeproof.service -o json --no-pager");
    for field in [
        "\"NODEPROOF_CHECK\":\"profiles\"",
        "\"SECCOMP_PROFILE\":\"/var/lib/kubelet/seccomp/default.json\"",
        "\"NODEPROOF_CHECK\":\"tracing\"",
        "\"NODEPROOF_CHECK\":\"gpu\"",
        "\"XID\":\"79\"",
        "\"GPU_UUID\":\"GPU-fa4e0000-0000-4000-8000-000000000000\"",
    ] {
        assert!(
            journal.contains(field),
            "no {field} in the journal:\n{journal}"
        );
    }

    // The watchdog: a stopped agent sends no WATCHDOG=1 and is restarted.
    m.sh(&format!("kill -STOP {pid}"));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now_pid = m
            .sh("systemctl show -p MainPID --value nodeproof.service")
            .trim()
            .to_string();
        let active = m.sh("systemctl is-active nodeproof.service");
        if now_pid != pid && now_pid != "0" && active.trim() == "active" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no watchdog restart: {}",
            m.sh("systemctl status nodeproof --no-pager")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let journal = m.sh("journalctl -u nodeproof.service --no-pager");
    assert!(journal.contains("Watchdog timeout"), "{journal}");
    eprintln!("watchdog restart seen");

    let cat = m.sh("systemctl cat kubelet.service");
    assert!(
        cat.contains("10-nodeproof.conf")
            && cat.contains("ExecStartPre=-/usr/bin/nodeproof preflight"),
        "{cat}"
    );
}

/// cargo-deb: the pinned one `cargo xtask test` installs under target/tools
/// when PATH has no such version, else the one on PATH. Missing is a
/// failure, not a skip: the package is what gets shipped.
fn cargo_deb() -> Command {
    let tools = nodeproof_testkit::target_dir().join("tools/bin/cargo-deb");
    if tools.is_file() {
        let mut c = Command::new(tools);
        c.arg("deb");
        return c;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let on_path = Command::new(&cargo)
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        on_path,
        "cargo-deb is neither on PATH nor at {}: `cargo xtask test` (or `cargo xtask deb`) installs it there",
        tools.display()
    );
    let mut c = Command::new(cargo);
    c.arg("deb");
    c
}

/// The Debian package of the binary under test, in `dir`: cargo-deb with
/// the dev profile and no build packs target/debug/nodeproof, which cargo
/// has just built for this test, with the metadata of agent/Cargo.toml, and
/// the completions and man pages it generates, put beside it by the same
/// `cargo xtask gen-files` that `cargo xtask deb` runs on the release build.
/// `version` overrides the package's (`--deb-version`), for an older one.
/// The tests of this file build in parallel: one at a time, since each
/// rewrites the generated files.
fn build_deb(dir: &Path, version: Option<&str>) -> PathBuf {
    static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    let bin = Path::new(env!("CARGO_BIN_EXE_nodeproof"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let gen = Command::new(cargo)
        .args(["run", "-q", "-p", "xtask", "--", "gen-files", "--bin"])
        .arg(bin)
        .arg("--out")
        .arg(bin.parent().unwrap().join("assets"))
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(gen.status.success(), "xtask gen-files: {gen:?}");
    let out_dir = tempfile::tempdir_in(dir).unwrap();
    let mut deb = cargo_deb();
    deb.args([
        "-p",
        "nodeproof",
        "--profile",
        "dev",
        "--no-build",
        "--fast",
    ]);
    if let Some(v) = version {
        deb.args(["--deb-version", v]);
    }
    let out = deb
        .arg("-o")
        .arg(out_dir.path())
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo deb failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deb = std::fs::read_dir(out_dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .expect("cargo deb wrote no .deb");
    let name = dir.join(match version {
        Some(v) => format!("nodeproof_{v}.deb"),
        None => "nodeproof.deb".to_owned(),
    });
    std::fs::rename(&deb, &name).unwrap();
    name
}

/// lintian, Debian's package checker, finds no error and no warning but
/// those `systemd/debian/nodeproof.lintian-overrides` explains, and each of
/// those overrides is still used (a stale one would hide nothing).
#[test]
fn the_debian_package_is_lintian_clean() {
    let Some(_) = require(&[Need::Tool("lintian")]) else {
        return;
    };
    let share = tempfile::tempdir().unwrap();
    let deb = build_deb(share.path(), None);
    // The operators' parts are in what lintian judges.
    let listed = Command::new("dpkg-deb")
        .arg("-c")
        .arg(&deb)
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    for path in [
        "./usr/share/nodeproof/prometheus/nodeproof.rules.yml",
        "./usr/share/nodeproof/prometheus/nodeproof.tests.yml",
        "./usr/share/nodeproof/grafana/nodeproof.json",
        "./usr/share/doc/nodeproof/runbooks.md",
    ] {
        assert!(
            listed.contains(path),
            "{path} not in the package:\n{listed}"
        );
    }
    let lintian = |args: &[&str]| {
        let out = Command::new("lintian")
            .args(args)
            .args(["--tag-display-limit", "0"])
            .arg(&deb)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (
            out.status,
            text,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The verdict (with --show-overrides lintian would fail on the overridden tags too).
    let (status, text, stderr) = lintian(&["--fail-on", "error,warning"]);
    eprintln!("{text}");
    let flagged: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("E: ") || l.starts_with("W: "))
        .collect();
    assert!(
        status.success() && flagged.is_empty(),
        "lintian ({status:?}):\n{text}{stderr}"
    );
    let (_, text, _) = lintian(&["--show-overrides"]);
    let overrides =
        std::fs::read_to_string(repo().join("systemd/debian/nodeproof.lintian-overrides")).unwrap();
    for tag in overrides
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().nth(1))
    {
        assert!(
            text.lines()
                .any(|l| l.starts_with("O: ") && l.contains(tag)),
            "override {tag} is not used by lintian any more: remove it\n{text}"
        );
    }
}

/// Upgrading from the previous package version (the same tree packed as
/// 0.0.9-1) keeps what the admin and the agent wrote: the edited conffile
/// (no .dpkg-new, no prompt), the state directory with its files, owner and
/// mode; the running agent is restarted on the new package and stays
/// enabled.
#[test]
fn an_upgrade_keeps_the_config_and_the_state_directory() {
    let Some(_) = require(BOOT) else {
        return;
    };
    let share = tempfile::tempdir().unwrap();
    let old = build_deb(share.path(), Some("0.0.9-1"));
    let new = build_deb(share.path(), None);
    let root = rootfs();
    let m = Machine::boot(&root, share.path());
    let out = m.sh(&format!(
        "dpkg -i /opt/np/{} 2>&1",
        old.file_name().unwrap().to_string_lossy()
    ));
    assert_eq!(
        m.sh("dpkg-query -W -f='${Version}' nodeproof"),
        "0.0.9-1",
        "{out}"
    );
    // The admin's edit and the agent's state.
    m.sh("sed -i 's/^profile-resync-s = .*/profile-resync-s = 120/' /etc/nodeproof/config.toml");
    m.sh("echo 'seen' > /var/lib/nodeproof/state && chown nodeproof:nodeproof /var/lib/nodeproof/state");
    m.sh("install -D -m 644 /usr/share/nodeproof/profiles/runtime-default-x86_64.json /var/lib/kubelet/seccomp/default.json");
    start_and_check(&m);
    let pid_before = show(&m, "nodeproof.service", "MainPID");

    // Noninteractive as a fleet's tooling runs it: a conffile question would fail here.
    let out = m.sh(&format!(
        "DEBIAN_FRONTEND=noninteractive dpkg -i /opt/np/{} </dev/null 2>&1",
        new.file_name().unwrap().to_string_lossy()
    ));
    assert_eq!(
        m.sh("dpkg-query -W -f='${Version}' nodeproof"),
        "0.1.0-1",
        "{out}"
    );
    assert!(
        m.sh("grep -c '^profile-resync-s = 120$' /etc/nodeproof/config.toml")
            .trim()
            == "1",
        "the admin's config edit is gone after the upgrade: {out}"
    );
    assert_eq!(
        m.sh("ls /etc/nodeproof/").trim(),
        "config.toml",
        "dpkg left a conffile copy beside the config: {out}"
    );
    assert_eq!(m.sh("cat /var/lib/nodeproof/state").trim(), "seen", "{out}");
    assert_eq!(
        m.sh("stat -c '%U %a' /var/lib/nodeproof /var/lib/nodeproof/state")
            .trim(),
        "nodeproof 750\nnodeproof 644",
        "{out}"
    );
    assert_eq!(
        m.sh("systemctl is-enabled nodeproof.service").trim(),
        "enabled"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while m.sh("systemctl is-active nodeproof.service").trim() != "active" {
        assert!(
            Instant::now() < deadline,
            "not active again after the upgrade: {out}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let pid_after = show(&m, "nodeproof.service", "MainPID");
    assert_ne!(
        pid_before, pid_after,
        "the agent was not restarted on the new package: {out}"
    );
}

/// An admin who disabled the agent keeps it disabled across an upgrade
/// (deb-systemd-helper's remembered state), and it is not started.
#[test]
fn an_upgrade_keeps_an_admins_disable() {
    let Some(_) = require(BOOT) else {
        return;
    };
    let share = tempfile::tempdir().unwrap();
    let old = build_deb(share.path(), Some("0.0.9-1"));
    let new = build_deb(share.path(), None);
    let m = Machine::boot(&rootfs(), share.path());
    m.sh(&format!(
        "dpkg -i /opt/np/{} 2>&1",
        old.file_name().unwrap().to_string_lossy()
    ));
    m.sh("systemctl disable nodeproof.service 2>&1");
    let out = m.sh(&format!(
        "dpkg -i /opt/np/{} </dev/null 2>&1",
        new.file_name().unwrap().to_string_lossy()
    ));
    assert_eq!(
        m.sh("dpkg-query -W -f='${Version}' nodeproof"),
        "0.1.0-1",
        "{out}"
    );
    assert_eq!(
        m.sh("systemctl is-enabled nodeproof.service").trim(),
        "disabled",
        "{out}"
    );
    assert_eq!(
        m.sh("systemctl is-active nodeproof.service").trim(),
        "inactive",
        "{out}"
    );
}

#[test]
fn the_debian_package_installs_runs_and_goes_away() {
    let Some(_) = require(BOOT) else {
        return;
    };
    let share = tempfile::tempdir().unwrap();
    let deb = build_deb(share.path(), None);
    eprintln!("package: {} bytes", std::fs::metadata(&deb).unwrap().len());
    let root = rootfs();
    let m = Machine::boot(&root, share.path());

    // postinst: user, directories, daemon-reload, enabled; not started.
    let out = m.sh("dpkg -i /opt/np/nodeproof.deb 2>&1");
    assert!(
        m.sh("dpkg-query -W -f='${Status}' nodeproof") == "install ok installed",
        "{out}"
    );
    assert!(
        m.sh("id -u nodeproof").trim().parse::<u32>().is_ok(),
        "{out}"
    );
    assert_eq!(
        m.sh("systemctl is-enabled nodeproof.service").trim(),
        "enabled"
    );
    assert_eq!(m.sh("stat -c %U /var/lib/nodeproof").trim(), "nodeproof");
    // The generated documentation, where the shells and man look for it.
    for f in [
        "/usr/share/man/man8/nodeproof.8.gz",
        "/usr/share/man/man8/nodeproof-run.8.gz",
        "/usr/share/bash-completion/completions/nodeproof",
        "/usr/share/zsh/vendor-completions/_nodeproof",
        "/usr/share/fish/vendor_completions.d/nodeproof.fish",
    ] {
        assert!(
            m.sh(&format!("test -s {f}; echo $?")).starts_with('0'),
            "no {f}"
        );
    }
    // The package's own default profile stands in for the kubelet's.
    m.sh("install -D -m 644 /usr/share/nodeproof/profiles/runtime-default-x86_64.json /var/lib/kubelet/seccomp/default.json");

    start_and_check(&m);
    // Type=notify is active only after READY=1; the agent logs when it sent it.
    let journal = m.sh("journalctl -u nodeproof.service -o json --no-pager");
    for needle in [
        "first check cycle done; ready",
        "\"NODEPROOF_CHECK\":\"tracing\"",
        "seccomp tracing attached",
    ] {
        assert!(journal.contains(needle), "no {needle} in:\n{journal}");
    }

    // prerm: stopped and disabled; the conffile and the user stay.
    let out = m.sh("dpkg -r nodeproof 2>&1");
    assert_eq!(
        m.sh("systemctl is-active nodeproof.service").trim(),
        "inactive",
        "{out}"
    );
    // No process of the user is left (the rootfs has no procps).
    assert_eq!(
        m.sh("find /proc -maxdepth 1 -user nodeproof | wc -l")
            .trim(),
        "0",
        "{out}"
    );
    assert_eq!(
        m.sh("ls /etc/systemd/system/multi-user.target.wants/ | grep -c nodeproof || true")
            .trim(),
        "0",
        "still enabled after dpkg -r: {out}"
    );
    assert!(!m.sh("test -e /usr/bin/nodeproof; echo $?").starts_with('0'));
    assert!(m
        .sh("test -f /etc/nodeproof/config.toml; echo $?")
        .starts_with('0'));

    // postrm purge: the conffile and the state directory go.
    let out = m.sh("dpkg --purge nodeproof 2>&1");
    assert!(
        m.sh("test -e /etc/nodeproof/config.toml; echo $?")
            .starts_with('1'),
        "conffile left after purge: {out}"
    );
    assert!(
        m.sh("test -e /var/lib/nodeproof; echo $?").starts_with('1'),
        "state directory left after purge: {out}"
    );
    assert!(!m
        .sh("dpkg-query -W -f='${Status}' nodeproof 2>&1")
        .contains("ok installed"));
}
