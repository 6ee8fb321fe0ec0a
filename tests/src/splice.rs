//! The splice oracle for seccomp profiles: run a profile through `runc run`
//! or `crun run` (any [`RuntimeBuild`]) in a throwaway busybox bundle and
//! report what the runtime did with it. For runc the profile's raw bytes are
//! spliced into config.json (containerd's path, approximated); for crun the
//! bundle gets what CRI-O would write ([`crate::crio::handoff`]).
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
//! runs on the host (busybox `sh`), outside the filter, so it does not
//! change which syscalls init makes after the filter is loaded. A run that hits
//! the timeout is always start-failed. The hook reads the container state the
//! runtime writes to its stdin before touching the marker: crun 1.8 fails
//! the start when that write meets a closed pipe (EPIPE), runc ignores it.
//!
//! crun runs its `createRuntime` hooks before it builds the seccomp filter
//! (`libcrun_container_run_internal`: the hooks after the container process is
//! created, `libcrun_generate_seccomp` after them), so with crun a profile the
//! runtime refuses is start-failed, as nodeproof's crun model says.
//!
//! crun refuses to run on a hybrid cgroup hierarchy whose cgroup2 part has
//! controllers ("cgroups in hybrid mode not supported, drop all controllers
//! from cgroupv2"). Where this machine has one, crun runs in a private mount
//! namespace without `/sys/fs/cgroup/unified`, and with
//! `--cgroup-manager=disabled` everywhere: the oracle's containers need no
//! cgroup, and neither changes what crun does with the profile.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use nodeproof_testkit::Need;
use serde_json::{json, Value};

use crate::crio::{self, Handoff};
pub use crate::oracle::{OracleError, RuntimeRun, SeccompOracle, Verdict};
use crate::runtimes::RuntimeBuild;
use nodeproof_seccomp::oci_runtime::OciRuntimeKind;

/// Where the oracle looks for busybox (checked by [`ORACLE`]).
pub use nodeproof_testkit::BUSYBOX;
/// What the runc 1.1.5 oracle needs from the machine: root for runc, runc, the
/// static busybox its containers run, and `timeout` around every `runc run`.
pub const ORACLE: &[Need] = &[Need::Root, Need::Runc, Need::Busybox, Need::Tool("timeout")];
/// Seconds `timeout` gives one run.
pub const RUN_TIMEOUT_S: u32 = 20;

/// What an oracle of `build` needs from the machine.
pub fn needs(build: RuntimeBuild) -> Vec<Need> {
    let mut n = vec![Need::Root, Need::Busybox, Need::Tool("timeout")];
    n.extend(build.needs());
    if build.modelled().kind() == OciRuntimeKind::Crun {
        n.push(Need::Tool("unshare"));
    }
    n
}

/// Applets linked into the container rootfs.
/// `sleep` keeps a traced container (and so its cgroup) alive until the tracer has attributed it.
const APPLETS: &[&str] = &["sh", "true", "mkdir", "echo", "ls", "sleep"];
/// Stands for `.linux.seccomp` in the serialized config until the raw profile is spliced in.
const PLACEHOLDER: &str = "@@NODEPROOF_SECCOMP_PROFILE_BYTES@@";
const MARKER: &str = "init-started";

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> OracleError {
    let what = what.into();
    move |source| OracleError::Io { what, source }
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

/// Runs profiles through a real runtime. Cheap to share between threads.
pub struct SpliceOracle {
    dir: PathBuf,
    build: RuntimeBuild,
    runtime: PathBuf,
    /// Whether crun must run without the hybrid hierarchy's cgroup2 mount.
    hide_unified_cgroup: bool,
    busybox: PathBuf,
    base_config: Value,
    counter: AtomicU64,
    /// Seconds `timeout` gives one `runc run`.
    timeout_s: u32,
}

impl SpliceOracle {
    /// The runc 1.1.5 oracle (this machine's runc) with its cache under `dir`.
    pub fn runc(dir: impl Into<PathBuf>) -> Result<SpliceOracle, OracleError> {
        SpliceOracle::new(dir, RuntimeBuild::Runc1_1_5)
    }

    /// Prepares (or reuses) the cached busybox, the runtime binary (fetched
    /// into [`crate::runtimes::default_cache_dir`] if it is trixie's) and the
    /// runtime's `spec` config under `dir`.
    pub fn new(dir: impl Into<PathBuf>, build: RuntimeBuild) -> Result<SpliceOracle, OracleError> {
        let missing = nodeproof_testkit::missing_of(&needs(build));
        if !missing.is_empty() {
            let text: Vec<String> = missing.iter().map(ToString::to_string).collect();
            return Err(OracleError::Unavailable(text.join(", ")));
        }
        let dir = dir.into();
        let runc = build.binary(&crate::runtimes::default_cache_dir())?;
        fs::create_dir_all(dir.join("runs")).map_err(io_err(format!("mkdir {}", dir.display())))?;

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

        let spec_dir = dir.join(format!("spec-{build}"));
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
                return Err(OracleError::Spec {
                    runtime: build.to_string(),
                    stderr: String::from_utf8_lossy(&out.stderr).into(),
                });
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
        Ok(SpliceOracle {
            dir,
            build,
            hide_unified_cgroup: build.modelled().kind() == OciRuntimeKind::Crun
                && hybrid_cgroup2_has_controllers(),
            runtime: runc,
            busybox,
            base_config,
            counter: AtomicU64::new(0),
            timeout_s: RUN_TIMEOUT_S,
        })
    }

    /// The same oracle giving each `runc run` `seconds` before it counts as a
    /// hang (a start takes well under one; campaigns meet many hangs).
    pub fn with_timeout(mut self, seconds: u32) -> SpliceOracle {
        self.timeout_s = seconds;
        self
    }

    /// The runtime binary this oracle runs.
    pub fn runtime(&self) -> &Path {
        &self.runtime
    }

    pub fn build(&self) -> RuntimeBuild {
        self.build
    }

    /// `cmd` followed by the runtime and its global options (`--root` and
    /// crun's cgroup manager), in a mount namespace without the hybrid
    /// hierarchy's cgroup2 part where crun needs that.
    fn runtime_command<'c>(&self, cmd: &'c mut Command, bundle: &Path) -> &'c mut Command {
        if self.hide_unified_cgroup {
            cmd.args(["unshare", "-m", "--propagation", "private", "sh", "-c"])
                .arg("umount /sys/fs/cgroup/unified && exec \"$@\"")
                .arg("sh");
        }
        cmd.arg(&self.runtime).arg("--root").arg(state_dir(bundle));
        if self.build.modelled().kind() == OciRuntimeKind::Crun {
            cmd.arg("--cgroup-manager=disabled");
        }
        cmd
    }

    /// Runs `args` in a container whose `.linux.seccomp` is exactly `profile_bytes`.
    pub fn run(&self, profile_bytes: &[u8], no_new_privileges: bool, args: &[&str]) -> RuntimeRun {
        self.run_wrapped(profile_bytes, no_new_privileges, args, &[])
            .unwrap_or_else(|e| RuntimeRun {
                // The oracle's own plumbing failed; say so instead of inventing a verdict.
                verdict: Verdict::StartFailed,
                exit: -1,
                stderr: format!("nodeproof oracle error: {e}"),
                init_started: false,
                timed_out: false,
            })
    }

    /// Like [`SpliceOracle::run`], giving this one run `timeout_s` seconds.
    pub fn run_with_timeout(
        &self,
        profile_bytes: &[u8],
        no_new_privileges: bool,
        args: &[&str],
        timeout_s: u32,
    ) -> RuntimeRun {
        self.run_full(&RunSpec {
            profile: profile_bytes,
            nnp: no_new_privileges,
            args,
            wrapper: &[],
            cgroups_path: None,
            timeout_s,
        })
        .unwrap_or_else(|e| RuntimeRun {
            verdict: Verdict::StartFailed,
            exit: -1,
            stderr: format!("nodeproof oracle error: {e}"),
            init_started: false,
            timed_out: false,
        })
    }

    /// Like [`SpliceOracle::run`], with `wrapper` (e.g. `strace -f -ff -o ...`) put in
    /// front of `runc run`, inside the timeout.
    pub fn run_wrapped(
        &self,
        profile_bytes: &[u8],
        no_new_privileges: bool,
        args: &[&str],
        wrapper: &[OsString],
    ) -> Result<RuntimeRun, OracleError> {
        self.run_full(&RunSpec {
            profile: profile_bytes,
            nnp: no_new_privileges,
            args,
            wrapper,
            cgroups_path: None,
            timeout_s: self.timeout_s,
        })
    }

    /// Like [`SpliceOracle::run`], with `.linux.cgroupsPath` set to `cgroups_path`
    /// (e.g. a kubelet-shaped `/kubepods/burstable/pod<uid>/<id>`): runc creates
    /// that cgroup for the container and removes it when the container exits.
    pub fn run_in_cgroup(
        &self,
        profile_bytes: &[u8],
        no_new_privileges: bool,
        args: &[&str],
        cgroups_path: &str,
    ) -> Result<RuntimeRun, OracleError> {
        self.run_full(&RunSpec {
            profile: profile_bytes,
            nnp: no_new_privileges,
            args,
            wrapper: &[],
            cgroups_path: Some(cgroups_path),
            timeout_s: self.timeout_s,
        })
    }

    fn run_full(&self, spec: &RunSpec) -> Result<RuntimeRun, OracleError> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let id = format!("nodeproof-{}-{n}-{nanos:x}", std::process::id());
        let bundle = self.dir.join("runs").join(&id);
        let result = self.run_in_bundle(&id, &bundle, spec);
        // Always clean up, whatever happened; a leftover container would leak a process.
        let _ = self
            .runtime_command(&mut Command::new(&self.runtime), &bundle)
            .args(["delete", "-f", &id])
            .output();
        // What `delete` cannot see (a run killed before runc wrote its
        // state): the container's cgroup, its processes killed (crate::reap).
        let cgroup = spec
            .cgroups_path
            .map_or_else(|| format!("/{id}"), String::from);
        let left = crate::reap::reap_cgroup(Path::new("/sys/fs/cgroup"), &cgroup);
        if !left.is_empty() {
            eprintln!(
                "oracle run {id}: processes {left:?} of cgroup {cgroup} survived SIGKILL for 5 s"
            );
        }
        let _ = fs::remove_dir_all(&bundle);
        result
    }

    fn run_in_bundle(
        &self,
        id: &str,
        bundle: &Path,
        spec: &RunSpec,
    ) -> Result<RuntimeRun, OracleError> {
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
        let handed;
        let profile = match self.build.modelled().kind() {
            OciRuntimeKind::Runc => Some(profile),
            OciRuntimeKind::Crun => match crio::handoff(profile) {
                Handoff::Seccomp(v) => {
                    handed =
                        serde_json::to_vec(&v).map_err(|e| OracleError::Config(e.to_string()))?;
                    Some(&handed[..])
                }
                Handoff::Unconfined => None,
                Handoff::Refused(why) => {
                    return Ok(RuntimeRun {
                        verdict: Verdict::Rejected,
                        exit: -1,
                        stderr: format!(
                            "CRI-O refuses the profile (nodeproof's mirror of its decoding): {why}"
                        ),
                        init_started: false,
                        timed_out: false,
                    })
                }
            },
        };
        fs::write(
            bundle.join("config.json"),
            self.config_bytes(profile, nnp, args, &marker, cgroups_path)?,
        )
        .map_err(io_err("write config.json"))?;

        // -k: runc forwards SIGTERM to a container that may never act on it
        // (a KILL_THREAD default leaves init's other threads waiting).
        let mut cmd = Command::new("timeout");
        cmd.args(["-k", "5"])
            .arg(timeout_s.to_string())
            .args(wrapper);
        let started = std::time::Instant::now();
        let out = self
            .runtime_command(&mut cmd, bundle)
            .args(["run", "--bundle"])
            .arg(bundle)
            .arg(id)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(io_err("run `timeout <runtime> run`"))?;
        let exit = match out.status.code() {
            Some(c) => c,
            None => {
                use std::os::unix::process::ExitStatusExt;
                128 + out.status.signal().unwrap_or(0)
            }
        };
        // 124: `timeout` stopped the runtime with SIGTERM; 128+9 after the
        // whole limit: the runtime ignored that and `-k` killed it.
        let timed_out =
            exit == 124 || (exit == 128 + 9 && started.elapsed().as_secs() >= u64::from(timeout_s));
        let init_started = marker.exists();
        let verdict = if exit == 0 {
            Verdict::Accepted
        } else if init_started || timed_out {
            Verdict::StartFailed
        } else {
            Verdict::Rejected
        };
        Ok(RuntimeRun {
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
        profile: Option<&[u8]>,
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
        let touch = format!("cat >/dev/null; exec touch '{}'", marker.display());
        c["hooks"] = json!({
            "createRuntime": [{
                "path": self.busybox,
                "args": ["busybox", "sh", "-c", touch],
            }]
        });
        if let Some(p) = cgroups_path {
            c["linux"]["cgroupsPath"] = json!(p);
        }
        let Some(profile) = profile else {
            return serde_json::to_vec_pretty(&c).map_err(|e| OracleError::Config(e.to_string()));
        };
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

impl SeccompOracle for SpliceOracle {
    fn name(&self) -> &str {
        self.build.name()
    }

    fn judge(&self, profile: &[u8], no_new_privileges: bool) -> Result<RuntimeRun, OracleError> {
        self.run_wrapped(profile, no_new_privileges, &["/bin/true"], &[])
    }

    fn judge_patiently(
        &self,
        profile: &[u8],
        no_new_privileges: bool,
    ) -> Result<RuntimeRun, OracleError> {
        self.run_full(&RunSpec {
            profile,
            nnp: no_new_privileges,
            args: &["/bin/true"],
            wrapper: &[],
            cgroups_path: None,
            timeout_s: RUN_TIMEOUT_S.max(self.timeout_s),
        })
    }
}

/// The runtime's state root for one run, inside its bundle: each run starts
/// with none. crun 1.21 caches compiled filters under its state root
/// (`.cache/seccomp`), keyed by a checksum of the profile that leaves out
/// each rule's `errnoRet` (`calculate_seccomp_checksum`), so with a shared
/// root a profile that differs from an earlier one only there is run with
/// the earlier one's filter.
fn state_dir(bundle: &Path) -> PathBuf {
    bundle.join("state")
}

/// A hybrid hierarchy (cgroup v1 at /sys/fs/cgroup, cgroup2 at
/// /sys/fs/cgroup/unified) whose cgroup2 part has controllers: crun's
/// `libcrun_get_cgroup_mode` refuses to run there.
fn hybrid_cgroup2_has_controllers() -> bool {
    fs::read_to_string("/sys/fs/cgroup/unified/cgroup.controllers")
        .is_ok_and(|c| !c.trim().is_empty())
}

/// A cache directory for the oracle under the workspace's `target/`.
pub fn default_oracle_dir() -> PathBuf {
    nodeproof_testkit::target_dir().join("nodeproof-runc-oracle")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_keeps_raw_bytes() {
        let oracle = SpliceOracle {
            dir: PathBuf::from("/nonexistent"),
            build: RuntimeBuild::Runc1_1_5,
            runtime: PathBuf::from("/usr/sbin/runc"),
            hide_unified_cgroup: false,
            busybox: PathBuf::from("/bin/busybox"),
            base_config: json!({"process": {}, "root": {}, "linux": {}}),
            counter: AtomicU64::new(0),
            timeout_s: RUN_TIMEOUT_S,
        };
        let raw = b"\xef\xbb\xbf{\"defaultAction\":\"A\",\"DEFAULTACTION\":\"B\",";
        let out = oracle
            .config_bytes(Some(raw), false, &["/bin/true"], Path::new("/m"), None)
            .unwrap();
        assert!(find(&out, raw).is_some());
        assert!(find(&out, PLACEHOLDER.as_bytes()).is_none());
        let ok = oracle
            .config_bytes(
                Some(b"{\"defaultAction\":\"SCMP_ACT_ALLOW\"}"),
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
