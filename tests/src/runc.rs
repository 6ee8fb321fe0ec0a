//! A real-runc oracle for seccomp profiles: run a profile's raw bytes through
//! `runc run` in a throwaway busybox bundle and report what runc did with it.
//!
//! # How a run is classified
//!
//! * [`Verdict::Accepted`]: `runc run` exited 0, i.e. the container command ran
//!   and exited 0.
//! * [`Verdict::Rejected`]: runc refused the config before it started any
//!   container init process (config.json decode errors, spec → libcontainer
//!   conversion errors such as unknown actions or unsupported flags).
//! * [`Verdict::StartFailed`]: runc's init process was started, but the command
//!   did not run to exit 0 (init or the command died, a denied syscall, a
//!   missing seccomp agent, a hang that hit the timeout).
//!
//! The rejected / start-failed split does not grep stderr. The bundle carries a
//! `createRuntime` hook that touches a marker file. runc 1.1.5 runs
//! `createRuntime` (and `prestart`) hooks from the parent when the freshly
//! spawned `runc init` reports `procHooks` during `prepareRootfs`, i.e. only
//! after the init process exists and all config decoding/conversion has
//! succeeded, and before the seccomp filter is loaded in either
//! `noNewPrivileges` mode. So: marker present ⇒ init started ⇒ any failure is a
//! start failure; marker absent ⇒ runc gave up before init ⇒ rejected. The hook
//! runs on the host (busybox `touch`), outside the filter, so it does not
//! change which syscalls init makes after the filter is loaded. A run that hits
//! the timeout is always start-failed.

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use nodeproof_testkit::Need;
use serde_json::{json, Value};

/// Where the oracle looks for runc and busybox (checked by [`ORACLE`]).
pub use nodeproof_testkit::{BUSYBOX, RUNC_CANDIDATES};
/// What the oracle needs from the machine: root for runc, runc, the static
/// busybox its containers run, and `timeout` around every `runc run`.
pub const ORACLE: &[Need] = &[Need::Root, Need::Runc, Need::Busybox, Need::Tool("timeout")];
/// Seconds `timeout` gives one `runc run`.
pub const RUN_TIMEOUT_S: u32 = 20;

/// Applets linked into the container rootfs.
/// `sleep` keeps a traced container (and so its cgroup) alive until the tracer has attributed it.
const APPLETS: &[&str] = &["sh", "true", "mkdir", "echo", "ls", "sleep"];
/// Stands for `.linux.seccomp` in the serialized config until the raw profile is spliced in.
const PLACEHOLDER: &str = "@@NODEPROOF_SECCOMP_PROFILE_BYTES@@";
const MARKER: &str = "init-started";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    Accepted,
    Rejected,
    StartFailed,
}

impl Verdict {
    /// The spelling used in `runc-results.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Accepted => "accepted",
            Verdict::Rejected => "rejected",
            Verdict::StartFailed => "start-failed",
        }
    }

    pub fn parse(s: &str) -> Option<Verdict> {
        match s {
            "accepted" => Some(Verdict::Accepted),
            "rejected" => Some(Verdict::Rejected),
            "start-failed" => Some(Verdict::StartFailed),
            _ => None,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of one `runc run`.
#[derive(Debug, Clone)]
pub struct RuncRun {
    pub verdict: Verdict,
    /// Exit status of `timeout 20 runc run` (124 = timed out; 128+N = killed by signal N).
    pub exit: i32,
    /// runc's stderr (runc's own error lines and whatever the container wrote there).
    pub stderr: String,
    /// Whether runc init was started (the createRuntime marker exists).
    pub init_started: bool,
    pub timed_out: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum OracleError {
    #[error("runc oracle unavailable: {0}")]
    Unavailable(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("`runc spec` failed: {0}")]
    Spec(String),
    #[error("bad config.json from `runc spec`: {0}")]
    Config(String),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> OracleError {
    let what = what.into();
    move |source| OracleError::Io { what, source }
}

/// The runc binary to use: the first candidate that exists.
pub fn runc_path() -> Option<PathBuf> {
    RUNC_CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// `Ok(())` when the oracle can run here; otherwise what is missing. Tests
/// call `nodeproof_testkit::require(ORACLE)` instead, which also skips or fails.
pub fn available() -> Result<(), String> {
    let missing = nodeproof_testkit::missing_of(ORACLE);
    if missing.is_empty() {
        return Ok(());
    }
    Err(missing
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", "))
}

/// One `runc run`: what goes into config.json and what wraps runc.
#[derive(Clone, Copy)]
struct RunSpec<'a> {
    profile: &'a [u8],
    nnp: bool,
    args: &'a [&'a str],
    wrapper: &'a [OsString],
    cgroups_path: Option<&'a str>,
    timeout_s: u32,
}

/// Runs profiles through real runc. Cheap to share between threads.
pub struct RuncOracle {
    dir: PathBuf,
    runc: PathBuf,
    busybox: PathBuf,
    base_config: Value,
    counter: AtomicU64,
    /// Seconds `timeout` gives one `runc run`.
    timeout_s: u32,
}

impl RuncOracle {
    /// Prepares (or reuses) the cached busybox and `runc spec` config under `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Result<RuncOracle, OracleError> {
        available().map_err(OracleError::Unavailable)?;
        let dir = dir.into();
        let runc = runc_path().expect("checked by available()");
        fs::create_dir_all(dir.join("runs")).map_err(io_err(format!("mkdir {}", dir.display())))?;
        fs::create_dir_all(dir.join("state")).map_err(io_err("mkdir state"))?;

        let busybox = dir.join("busybox");
        let fresh = match (fs::metadata(&busybox), fs::metadata(BUSYBOX)) {
            (Ok(a), Ok(b)) => a.len() != b.len(),
            _ => true,
        };
        if fresh {
            // Copy under a temporary name first so parallel users never see half a binary.
            let tmp = dir.join(format!(
                "busybox.tmp.{}.{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            fs::copy(BUSYBOX, &tmp).map_err(io_err("copy busybox"))?;
            fs::rename(&tmp, &busybox).map_err(io_err("install busybox"))?;
        }

        let spec_dir = dir.join("spec");
        let spec = spec_dir.join("config.json");
        if !spec.is_file() {
            // `runc spec` refuses to overwrite, and tests create oracles in parallel:
            // make it in a private directory and rename the result into place.
            fs::create_dir_all(&spec_dir).map_err(io_err("mkdir spec"))?;
            let private = dir.join(format!(
                "spec.tmp.{}.{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = fs::remove_dir_all(&private);
            fs::create_dir_all(&private).map_err(io_err("mkdir private spec dir"))?;
            let out = Command::new(&runc)
                .arg("spec")
                .current_dir(&private)
                .output()
                .map_err(io_err("run `runc spec`"))?;
            if !out.status.success() {
                return Err(OracleError::Spec(
                    String::from_utf8_lossy(&out.stderr).into(),
                ));
            }
            fs::rename(private.join("config.json"), &spec)
                .map_err(io_err("install spec config.json"))?;
            let _ = fs::remove_dir_all(&private);
        }
        let text = fs::read(&spec).map_err(io_err("read spec config.json"))?;
        let base_config: Value =
            serde_json::from_slice(&text).map_err(|e| OracleError::Config(e.to_string()))?;
        if !base_config.is_object() || !base_config["linux"].is_object() {
            return Err(OracleError::Config("no .linux object".into()));
        }
        Ok(RuncOracle {
            dir,
            runc,
            busybox,
            base_config,
            counter: AtomicU64::new(0),
            timeout_s: RUN_TIMEOUT_S,
        })
    }

    /// The same oracle giving each `runc run` `seconds` before it counts as a
    /// hang (a start takes well under one; campaigns meet many hangs).
    pub fn with_timeout(mut self, seconds: u32) -> RuncOracle {
        self.timeout_s = seconds;
        self
    }

    pub fn runc(&self) -> &Path {
        &self.runc
    }

    /// Runs `args` in a container whose `.linux.seccomp` is exactly `profile_bytes`.
    pub fn run(&self, profile_bytes: &[u8], no_new_privileges: bool, args: &[&str]) -> RuncRun {
        self.run_wrapped(profile_bytes, no_new_privileges, args, &[])
            .unwrap_or_else(|e| RuncRun {
                // The oracle's own plumbing failed; say so instead of inventing a verdict.
                verdict: Verdict::StartFailed,
                exit: -1,
                stderr: format!("nodeproof oracle error: {e}"),
                init_started: false,
                timed_out: false,
            })
    }

    /// Like [`RuncOracle::run`], giving this one run `timeout_s` seconds.
    pub fn run_with_timeout(
        &self,
        profile_bytes: &[u8],
        no_new_privileges: bool,
        args: &[&str],
        timeout_s: u32,
    ) -> RuncRun {
        self.run_full(&RunSpec {
            profile: profile_bytes,
            nnp: no_new_privileges,
            args,
            wrapper: &[],
            cgroups_path: None,
            timeout_s,
        })
        .unwrap_or_else(|e| RuncRun {
            verdict: Verdict::StartFailed,
            exit: -1,
            stderr: format!("nodeproof oracle error: {e}"),
            init_started: false,
            timed_out: false,
        })
    }

    /// Like [`RuncOracle::run`], with `wrapper` (e.g. `strace -f -ff -o ...`) put in
    /// front of `runc run`, inside the timeout.
    pub fn run_wrapped(
        &self,
        profile_bytes: &[u8],
        no_new_privileges: bool,
        args: &[&str],
        wrapper: &[OsString],
    ) -> Result<RuncRun, OracleError> {
        self.run_full(&RunSpec {
            profile: profile_bytes,
            nnp: no_new_privileges,
            args,
            wrapper,
            cgroups_path: None,
            timeout_s: self.timeout_s,
        })
    }

    /// Like [`RuncOracle::run`], with `.linux.cgroupsPath` set to `cgroups_path`
    /// (e.g. a kubelet-shaped `/kubepods/burstable/pod<uid>/<id>`): runc creates
    /// that cgroup for the container and removes it when the container exits.
    pub fn run_in_cgroup(
        &self,
        profile_bytes: &[u8],
        no_new_privileges: bool,
        args: &[&str],
        cgroups_path: &str,
    ) -> Result<RuncRun, OracleError> {
        self.run_full(&RunSpec {
            profile: profile_bytes,
            nnp: no_new_privileges,
            args,
            wrapper: &[],
            cgroups_path: Some(cgroups_path),
            timeout_s: self.timeout_s,
        })
    }

    fn run_full(&self, spec: &RunSpec) -> Result<RuncRun, OracleError> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let id = format!("nodeproof-{}-{n}-{nanos:x}", std::process::id());
        let bundle = self.dir.join("runs").join(&id);
        let result = self.run_in_bundle(&id, &bundle, spec);
        // Always clean up, whatever happened; a leftover container would leak a process.
        let _ = Command::new(&self.runc)
            .arg("--root")
            .arg(self.dir.join("state"))
            .args(["delete", "-f", &id])
            .output();
        let _ = fs::remove_dir_all(&bundle);
        result
    }

    fn run_in_bundle(
        &self,
        id: &str,
        bundle: &Path,
        spec: &RunSpec,
    ) -> Result<RuncRun, OracleError> {
        let RunSpec {
            profile,
            nnp,
            args,
            wrapper,
            cgroups_path,
            timeout_s,
        } = *spec;
        let rootfs = bundle.join("rootfs");
        fs::create_dir_all(rootfs.join("bin")).map_err(io_err("mkdir rootfs"))?;
        fs::create_dir_all(rootfs.join("tmp")).map_err(io_err("mkdir rootfs/tmp"))?;
        // A fresh rootfs per run (hard link, copy as fallback): containers may write to it.
        let bb = rootfs.join("bin/busybox");
        if fs::hard_link(&self.busybox, &bb).is_err() {
            fs::copy(&self.busybox, &bb).map_err(io_err("copy busybox into rootfs"))?;
        }
        for applet in APPLETS {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet))
                .map_err(io_err("symlink applet"))?;
        }
        let marker = bundle.join(MARKER);
        fs::write(
            bundle.join("config.json"),
            self.config_bytes(profile, nnp, args, &marker, cgroups_path)?,
        )
        .map_err(io_err("write config.json"))?;

        // -k: runc forwards SIGTERM to a container that may never act on it
        // (a KILL_THREAD default leaves init's other threads waiting).
        let out = Command::new("timeout")
            .args(["-k", "5"])
            .arg(timeout_s.to_string())
            .args(wrapper)
            .arg(&self.runc)
            .arg("--root")
            .arg(self.dir.join("state"))
            .args(["run", "--bundle"])
            .arg(bundle)
            .arg(id)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(io_err("run `timeout runc run`"))?;
        let exit = match out.status.code() {
            Some(c) => c,
            None => {
                use std::os::unix::process::ExitStatusExt;
                128 + out.status.signal().unwrap_or(0)
            }
        };
        let timed_out = exit == 124;
        let init_started = marker.exists();
        let verdict = if exit == 0 {
            Verdict::Accepted
        } else if init_started || timed_out {
            Verdict::StartFailed
        } else {
            Verdict::Rejected
        };
        Ok(RuncRun {
            verdict,
            exit,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            init_started,
            timed_out,
        })
    }

    /// config.json with the profile's bytes spliced in textually as `.linux.seccomp`.
    fn config_bytes(
        &self,
        profile: &[u8],
        nnp: bool,
        args: &[&str],
        marker: &Path,
        cgroups_path: Option<&str>,
    ) -> Result<Vec<u8>, OracleError> {
        let mut c = self.base_config.clone();
        c["process"]["terminal"] = json!(false);
        c["process"]["noNewPrivileges"] = json!(nnp);
        c["process"]["args"] = json!(args);
        c["root"]["path"] = json!("rootfs");
        c["root"]["readonly"] = json!(false);
        c["hooks"] = json!({
            "createRuntime": [{
                "path": self.busybox,
                "args": ["busybox", "touch", marker],
            }]
        });
        if let Some(p) = cgroups_path {
            c["linux"]["cgroupsPath"] = json!(p);
        }
        c["linux"]["seccomp"] = json!(PLACEHOLDER);
        let text = serde_json::to_vec_pretty(&c).map_err(|e| OracleError::Config(e.to_string()))?;
        let needle = format!("\"{PLACEHOLDER}\"");
        let at = find(&text, needle.as_bytes())
            .ok_or_else(|| OracleError::Config("placeholder vanished".into()))?;
        let mut spliced = Vec::with_capacity(text.len() + profile.len());
        spliced.extend_from_slice(&text[..at]);
        spliced.extend_from_slice(profile);
        spliced.extend_from_slice(&text[at + needle.len()..]);
        Ok(spliced)
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A cache directory for the oracle under the workspace's `target/`.
pub fn default_oracle_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/nodeproof-runc-oracle")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_keeps_raw_bytes() {
        let oracle = RuncOracle {
            dir: PathBuf::from("/nonexistent"),
            runc: PathBuf::from("/usr/sbin/runc"),
            busybox: PathBuf::from("/bin/busybox"),
            base_config: json!({"process": {}, "root": {}, "linux": {}}),
            counter: AtomicU64::new(0),
            timeout_s: RUN_TIMEOUT_S,
        };
        let raw = b"\xef\xbb\xbf{\"defaultAction\":\"A\",\"DEFAULTACTION\":\"B\",";
        let out = oracle
            .config_bytes(raw, false, &["/bin/true"], Path::new("/m"), None)
            .unwrap();
        assert!(find(&out, raw).is_some());
        assert!(find(&out, PLACEHOLDER.as_bytes()).is_none());
        let ok = oracle
            .config_bytes(
                b"{\"defaultAction\":\"SCMP_ACT_ALLOW\"}",
                true,
                &["/bin/true"],
                Path::new("/m"),
                Some("/kubepods/pod1/c1"),
            )
            .unwrap();
        let v: Value = serde_json::from_slice(&ok).unwrap();
        assert_eq!(v["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ALLOW");
        assert_eq!(v["process"]["noNewPrivileges"], true);
        assert_eq!(v["process"]["args"][0], "/bin/true");
        assert_eq!(v["linux"]["cgroupsPath"], "/kubepods/pod1/c1");
    }
}
