//! A private containerd 1.6: its own root, state dir, socket and config under
//! one directory, in its own process group, torn down with no mount left behind.
//!
//! The configuration is what a kubelet node runs, cut to what the oracle needs:
//! the CRI plugin on, runc through `io.containerd.runc.v2`, the `native`
//! snapshotter (a plain copy: works on any filesystem, overlayfs not needed),
//! the cgroup driver of this host, and no CNI (sandboxes use the node's
//! network). The one addition is a base runtime spec carrying a
//! `createRuntime` hook: see [`base_spec`].

use std::fs;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::CriError;

/// Seconds containerd gets to answer on its socket after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Seconds containerd gets to exit on SIGTERM before its group is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The cgroup driver containerd must use: the one the kubelet uses on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupDriver {
    /// runc writes the cgroup tree itself (`SystemdCgroup = false`).
    Cgroupfs,
    /// runc asks systemd for a scope (`SystemdCgroup = true`).
    Systemd,
}

impl CgroupDriver {
    /// The kubelet's own rule (kubeadm's default since 1.22): `systemd` where
    /// systemd is the init system, else `cgroupfs`. systemd marks itself
    /// running with `/run/systemd/system` (sd_booted(3)).
    pub fn of_host() -> CgroupDriver {
        if Path::new("/run/systemd/system").is_dir() {
            CgroupDriver::Systemd
        } else {
            CgroupDriver::Cgroupfs
        }
    }
}

/// Where everything of one containerd lives.
#[derive(Debug, Clone)]
pub struct Layout {
    pub dir: PathBuf,
}

impl Layout {
    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }
    pub fn config(&self) -> PathBuf {
        self.dir.join("config.toml")
    }
    pub fn base_spec(&self) -> PathBuf {
        self.dir.join("base-spec.json")
    }
    /// Where the `createRuntime` hook leaves one file per runc init started.
    pub fn hooks(&self) -> PathBuf {
        self.dir.join("hooks")
    }
    pub fn log(&self) -> PathBuf {
        self.dir.join("containerd.log")
    }
    /// containerd's pid, for a later process to end a daemon a killed run left.
    pub fn pid_file(&self) -> PathBuf {
        self.dir.join("containerd.pid")
    }
}

/// The base runtime spec: containerd's own default (`ctr oci spec`) with
/// exactly what the CRI plugin clears when no base spec is configured put
/// back the way the CRI plugin leaves it, and one `createRuntime` hook.
///
/// Why a base spec at all: containerd 1.6's CreateContainer only stores the
/// container; runc first sees the config in StartContainer, where runc's own
/// refusals (nodeproof's `rejected`) and runc init's failures
/// (`start-failed`) both come back as an error. runc 1.1.5 runs
/// `createRuntime` hooks from the parent once the freshly spawned init asks
/// for them during `prepareRootfs`: after every config check passed, before
/// the filter is loaded in either noNewPrivileges mode (the splice oracle,
/// src/runc.rs, relies on the same). The hook copies the container's state
/// (its id, on stdin per the runtime spec) into [`Layout::hooks`]: a file
/// naming the container ⇒ init existed.
///
/// What changes by having a base spec (pkg/cri/server/container_create_linux.go,
/// containerd 1.6): without one, the CRI plugin applies
/// `WithoutDefaultSecuritySettings` (no AppArmor profile, no seccomp, no
/// rlimits); with one, it trusts the base. `ctr oci spec` also sets
/// `noNewPrivileges: true`, which the CRI plugin only ever sets, never clears
/// (`no_new_privs` false adds nothing), so it is cleared here as the CRI
/// default spec leaves it. The bundles' config.json with and without this
/// base differ in `hooks` alone (checked by hand, docs/containerd-oracle.md).
pub fn base_spec(ctr_default: &Value, hooks_dir: &Path, busybox: &Path) -> Value {
    let mut spec = ctr_default.clone();
    spec["process"]["noNewPrivileges"] = json!(false);
    if let Some(p) = spec["process"].as_object_mut() {
        p.remove("rlimits");
        p.remove("apparmorProfile");
    }
    if let Some(l) = spec["linux"].as_object_mut() {
        l.remove("seccomp");
    }
    spec["hooks"] = json!({
        "createRuntime": [{
            "path": busybox,
            // `$$` is the hook shell's pid: unique among the live hooks.
            "args": ["busybox", "sh", "-c", "cat > \"$0/$$.json\"", hooks_dir],
        }]
    });
    spec
}

/// containerd's config.toml (version 2 schema, containerd 1.6).
pub fn config_toml(
    layout: &Layout,
    runc: &Path,
    driver: CgroupDriver,
    sandbox_image: &str,
) -> String {
    let d = layout.dir.display();
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
# Snapshotters and plugins the oracle does not use, some of which want paths outside its root.
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.overlayfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.internal.v1.opt",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  # A port per daemon, so parallel test binaries do not collide.
  stream_server_port = "0"
  disable_apparmor = true
  # The sandbox's -998 (and any score below this process's own) needs
  # CAP_SYS_RESOURCE, which a test machine inside a container may lack; kind
  # and rootless nodes set the same: containerd clamps to its own score.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      base_runtime_spec = "{base}"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        # runc's state under this daemon's directory, apart from any node containerd's.
        Root = "{d}/runc"
        SystemdCgroup = {systemd}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni/bin"
    conf_dir = "{d}/cni/conf"
"#,
        socket = layout.socket().display(),
        base = layout.base_spec().display(),
        runc = runc.display(),
        systemd = driver == CgroupDriver::Systemd,
    )
}

/// A running containerd; [`Daemon::stop`] (or drop) ends it.
pub struct Daemon {
    pub layout: Layout,
    child: Option<Child>,
    /// A daemon of an earlier, killed test process (see [`Daemon::adopt`]).
    orphan: Option<libc::pid_t>,
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> CriError {
    let what = what.into();
    move |source| CriError::Io { what, source }
}

impl Daemon {
    /// Writes the config and starts `containerd` in a process group of its
    /// own; returns once its socket accepts connections.
    pub fn start(
        layout: Layout,
        runc: &Path,
        busybox: &Path,
        sandbox_image: &str,
    ) -> Result<Daemon, CriError> {
        fs::create_dir_all(layout.hooks()).map_err(io_err("mkdir hooks"))?;
        fs::create_dir_all(layout.dir.join("cni/conf")).map_err(io_err("mkdir cni"))?;
        let out = Command::new("ctr")
            .args(["oci", "spec"])
            .output()
            .map_err(io_err("run `ctr oci spec`"))?;
        if !out.status.success() {
            return Err(CriError::Tool {
                what: "ctr oci spec".into(),
                stderr: String::from_utf8_lossy(&out.stderr).into(),
            });
        }
        let default: Value = serde_json::from_slice(&out.stdout).map_err(|e| CriError::Tool {
            what: "ctr oci spec".into(),
            stderr: e.to_string(),
        })?;
        let spec = base_spec(&default, &layout.hooks(), busybox);
        fs::write(
            layout.base_spec(),
            serde_json::to_vec_pretty(&spec).unwrap_or_default(),
        )
        .map_err(io_err("write base spec"))?;
        let driver = CgroupDriver::of_host();
        fs::write(
            layout.config(),
            config_toml(&layout, runc, driver, sandbox_image),
        )
        .map_err(io_err("write config.toml"))?;
        let log = fs::File::create(layout.log()).map_err(io_err("create containerd.log"))?;
        let child = Command::new("containerd")
            .arg("--config")
            .arg(layout.config())
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(io_err("dup log"))?)
            .stderr(log)
            // Its own group: the teardown signals the group, never a name.
            .process_group(0)
            .spawn()
            .map_err(io_err("start containerd"))?;
        let _ = fs::write(layout.pid_file(), child.id().to_string());
        let mut daemon = Daemon {
            layout,
            child: Some(child),
            orphan: None,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if std::os::unix::net::UnixStream::connect(daemon.layout.socket()).is_ok() {
                return Ok(daemon);
            }
            if let Some(child) = daemon.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    daemon.child = None;
                    return Err(CriError::DaemonExited {
                        status: status.to_string(),
                        log: tail(&daemon.layout.log()),
                    });
                }
            }
            if Instant::now() > deadline {
                daemon.stop();
                return Err(CriError::DaemonExited {
                    status: "no socket after 30 s".into(),
                    log: String::new(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The daemon an earlier test process started under `layout` and never
    /// stopped (it was killed): its pid file names it, and it is only taken
    /// for that daemon while that process still runs containerd with this
    /// layout's config.
    pub fn adopt(layout: Layout) -> Daemon {
        let orphan = fs::read_to_string(layout.pid_file())
            .ok()
            .and_then(|s| s.trim().parse::<libc::pid_t>().ok())
            .filter(|pid| {
                let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let config = layout.config();
                String::from_utf8_lossy(&cmdline).contains(&*config.to_string_lossy())
            });
        Daemon {
            layout,
            child: None,
            orphan,
        }
    }

    /// SIGTERM to containerd's process group, SIGKILL after [`STOP_TIMEOUT`];
    /// then every mount still under the layout's directory is detached and
    /// returned (none is expected: RemovePodSandbox unmounts the sandbox's
    /// /dev/shm and the shims unmount the rootfs).
    pub fn stop(&mut self) -> Vec<String> {
        if let Some(mut child) = self.child.take() {
            let pgid = child.id() as libc::pid_t;
            // SAFETY: kill(2) on the group this daemon leads; no memory is involved.
            unsafe { libc::kill(-pgid, libc::SIGTERM) };
            let deadline = Instant::now() + STOP_TIMEOUT;
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        // SAFETY: as above.
                        unsafe { libc::kill(-pgid, libc::SIGKILL) };
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        if let Some(pid) = self.orphan.take() {
            // Not our child: no wait(2); its group is killed outright.
            // SAFETY: kill(2) on the group that daemon leads.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            // Its shims (and their runc) run in groups of their own and outlive it;
            // each names the daemon's socket, under this directory, on its command line.
            let dir = self.layout.dir.to_string_lossy().into_owned();
            for pid in pids_whose_args(|args| args.iter().any(|a| a.starts_with(dir.as_bytes()))) {
                // SAFETY: kill(2) on a shim or runc of that daemon.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let left = mounts_under(&self.layout.dir);
        // Deepest first, so a mount inside another comes off before its parent.
        for m in left.iter().rev() {
            if let Ok(c) = std::ffi::CString::new(m.as_bytes()) {
                // SAFETY: umount2(2) with a valid C string.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
        left
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Live processes whose command line (its NUL-separated arguments) satisfies `pred`.
pub fn pids_whose_args(pred: impl Fn(&[&[u8]]) -> bool) -> Vec<libc::pid_t> {
    let Ok(procs) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|p| {
            let pid = p.file_name().to_str()?.parse::<libc::pid_t>().ok()?;
            let cmdline = fs::read(p.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            pred(&args).then_some(pid)
        })
        .collect()
}

/// Mount points at or below `dir`, in /proc/self/mountinfo order.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let prefix = dir.to_string_lossy().into_owned();
    nodeproof_testkit::mount_points(&info)
        .into_iter()
        .filter(|p| p == &prefix || p.starts_with(&format!("{prefix}/")))
        .collect()
}

fn tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_spec_is_the_cri_default_plus_the_hook() {
        let ctr_default = json!({
            "process": {"noNewPrivileges": true, "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
                        "args": ["sh"]},
            "linux": {"seccomp": {"defaultAction": "SCMP_ACT_ERRNO"}, "cgroupsPath": "/default"},
        });
        let spec = base_spec(&ctr_default, Path::new("/h"), Path::new("/bin/busybox"));
        assert_eq!(spec["process"]["noNewPrivileges"], false);
        assert!(spec["process"].get("rlimits").is_none());
        assert!(spec["linux"].get("seccomp").is_none());
        // Everything else is containerd's.
        assert_eq!(spec["process"]["args"][0], "sh");
        assert_eq!(spec["linux"]["cgroupsPath"], "/default");
        let hook = &spec["hooks"]["createRuntime"][0];
        assert_eq!(hook["path"], "/bin/busybox");
        assert_eq!(hook["args"].as_array().unwrap().last().unwrap(), "/h");
    }

    #[test]
    fn config_follows_the_layout_and_the_cgroup_driver() {
        let layout = Layout {
            dir: PathBuf::from("/t/cri"),
        };
        let runc = Path::new("/usr/sbin/runc");
        let fs = config_toml(&layout, runc, CgroupDriver::Cgroupfs, "p:1");
        assert!(fs.contains("SystemdCgroup = false"));
        assert!(fs.contains(r#"address = "/t/cri/containerd.sock""#));
        assert!(fs.contains(r#"base_runtime_spec = "/t/cri/base-spec.json""#));
        assert!(fs.contains(r#"Root = "/t/cri/runc""#));
        assert!(fs.contains(r#"sandbox_image = "p:1""#));
        assert!(fs.contains(r#"snapshotter = "native""#));
        let sd = config_toml(&layout, runc, CgroupDriver::Systemd, "p:1");
        assert!(sd.contains("SystemdCgroup = true"));
    }
}
