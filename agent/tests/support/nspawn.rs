//! systemd as PID 1 in systemd-nspawn, for end-to-end tests of the unit
//! (agent/tests/systemd_nspawn.rs) and the fault and soak harness
//! (agent/tests/soak.rs): the Debian 12 root filesystem from debootstrap,
//! cached under target/nspawn/, booted with a volatile overlay, and shell
//! commands run inside with nsenter. See /work/shared/notes/systemd.md.
#![allow(dead_code)] // each test crate uses part of it

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nodeproof_testkit::Need;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The cached root filesystem, built once (~70 s). The tests of a binary run
/// in parallel, and `cargo xtask test` runs soak and systemd_nspawn at the
/// same time: one of them builds it, the others wait, within the process on
/// the mutex and across processes on an flock(2) of target/nspawn/.lock (two
/// debootstraps into one directory fail both).
pub fn rootfs() -> PathBuf {
    static BUILT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _once = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = nodeproof_testkit::target_dir().join("nspawn");
    let root = dir.join("rootfs");
    std::fs::create_dir_all(&dir).unwrap();
    let lock = std::fs::File::create(dir.join(".lock")).unwrap();
    // Released when `lock` is dropped, at the end of this function.
    let rc = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    assert_eq!(
        rc,
        0,
        "flock {}: {}",
        dir.display(),
        std::io::Error::last_os_error()
    );
    if root.join("usr/lib/systemd/systemd").exists() {
        return root;
    }
    let tmp = dir.join("rootfs.tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    // The machine's own Debian mirror (its apt sources, or NODEPROOF_APT_MIRROR).
    let mirror = nodeproof_debpkg::mirror().unwrap_or_else(|e| panic!("{e}"));
    let status = Command::new("debootstrap")
        .args([
            "--variant=minbase",
            "--include=systemd,systemd-sysv,dbus,curl",
            "bookworm",
        ])
        .arg(&tmp)
        .arg(&mirror.uri)
        .status()
        .unwrap();
    assert!(status.success(), "debootstrap failed");
    std::fs::rename(&tmp, &root).unwrap();
    root
}

pub struct Machine {
    nspawn: Child,
    pub leader: u32,
}

impl Drop for Machine {
    fn drop(&mut self) {
        // SIGTERM: a clean halt of the container's systemd.
        unsafe { libc::kill(self.nspawn.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.nspawn.wait();
    }
}

impl Machine {
    pub fn boot(root: &Path, share: &Path) -> Machine {
        let cmd = format!(
            "mount -t tmpfs -o mode=755 tmpfs /run; exec systemd-nspawn -D {} --register=no --keep-unit \
             --private-network --boot --console=pipe --volatile=overlay --bind-ro={}:/opt/np \
             --capability=CAP_BPF,CAP_PERFMON --system-call-filter='bpf perf_event_open'",
            root.display(),
            share.display()
        );
        let nspawn = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &cmd])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // unshare execs sh, which execs systemd-nspawn; its child is the container's PID 1.
        let deadline = Instant::now() + Duration::from_secs(20);
        let leader = loop {
            let out = Command::new("pgrep")
                .args(["-P", &nspawn.id().to_string()])
                .output()
                .unwrap();
            // nspawn forks helpers first: wait for the child that is systemd.
            let pid: Option<u32> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .and_then(|l| l.trim().parse().ok());
            if let Some(pid) = pid {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                if comm.trim() == "systemd" {
                    break pid;
                }
            }
            assert!(Instant::now() < deadline, "container did not start");
            std::thread::sleep(Duration::from_millis(50));
        };
        let m = Machine { nspawn, leader };
        // The manager's socket appears a moment after PID 1 does.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let state = m.sh("timeout 30 systemctl is-system-running --wait 2>&1 || true");
            if state.contains("running") || state.contains("degraded") {
                break;
            }
            assert!(Instant::now() < deadline, "container not running: {state}");
            std::thread::sleep(Duration::from_millis(100));
        }
        m
    }

    /// A shell command inside the container; stdout (and stderr on failure).
    pub fn sh(&self, script: &str) -> String {
        let out = Command::new("nsenter")
            .args(["-t", &self.leader.to_string(), "-a", "sh", "-c", script])
            .output()
            .unwrap();
        let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            s.push_str(&String::from_utf8_lossy(&out.stderr));
        }
        s
    }
}

/// What booting a container takes: root, debootstrap for its root
/// filesystem, systemd-nspawn, and the tools `Machine` drives it with.
pub const BOOT: &[Need] = &[
    Need::Root,
    Need::Tool("debootstrap"),
    Need::Tool("systemd-nspawn"),
    Need::Tool("nsenter"),
    Need::Tool("unshare"),
    Need::Tool("pgrep"),
];

/// `systemctl show -p NAME --value UNIT`, trimmed.
pub fn show(m: &Machine, unit: &str, property: &str) -> String {
    m.sh(&format!("systemctl show -p {property} --value {unit}"))
        .trim()
        .to_string()
}
