//! A real-containerd oracle for seccomp profiles: each profile is a file that
//! a container references as `Localhost`, created and started through the
//! CRI API exactly as the kubelet drives containerd, and judged by what
//! containerd (and the runc it runs) did.
//!
//! The path is the production one, which the splice oracle (src/runc.rs)
//! approximates: containerd 1.6 reads the file itself (`os.ReadFile`),
//! decodes it with Go's `encoding/json` into the runtime-spec `LinuxSeccomp`,
//! builds the whole OCI spec (its own capabilities, mounts, namespaces,
//! `noNewPrivileges` from the CRI `no_new_privs`) and hands the bundle to
//! `containerd-shim-runc-v2`, which runs `runc create` and `runc start`.
//!
//! # How a run is classified
//!
//! * CreateContainer fails: containerd refused the file (unreadable, not
//!   JSON, wrong types): [`Verdict::Rejected`].
//! * StartContainer fails: runc was given the config. If runc init existed
//!   (the base spec's `createRuntime` hook left the container's state, see
//!   [`daemon::base_spec`]) the start failed ([`Verdict::StartFailed`]);
//!   otherwise runc refused the config before any container process existed
//!   ([`Verdict::Rejected`]), as `runc run` does in the splice oracle.
//! * Started: ContainerStatus is polled until the container exits; exit 0
//!   is [`Verdict::Accepted`], any other exit (the entrypoint killed or
//!   failing under the filter: the kubelet sees a terminated container and
//!   restarts it) is [`Verdict::StartFailed`], and still running after
//!   [`RUN_TIMEOUT`] is a hang: [`Verdict::StartFailed`], as in the splice
//!   oracle.

pub mod api;
pub mod daemon;
pub mod image;
pub mod pod;

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use nodeproof_testkit::Need;
use tonic::transport::Channel;

use crate::oracle::{OracleError, RuntimeRun, Verdict};
use api::runtime_service_client::RuntimeServiceClient;
use api::security_profile::ProfileType;
use daemon::{CgroupDriver, Daemon, Layout};

/// What the oracle needs from the machine: root, containerd and its `ctr`
/// and shim, runc, the static busybox its images hold, and the tools that
/// build the images.
pub const ORACLE: &[Need] = &[
    Need::Root,
    Need::Containerd,
    Need::Runc,
    Need::Busybox,
    Need::Tool("tar"),
    Need::Tool("sha256sum"),
];
/// How long StartContainer may take, and a started container may run
/// `/bin/true`, before it counts as a hang (a start takes under a second).
pub const RUN_TIMEOUT: Duration = Duration::from_secs(10);
/// Runs of one case when containerd loses a container's exit (see [`ContainerdOracle::run_with`]).
const MAX_ATTEMPTS: u32 = 3;
/// One CRI call's limit (CreateContainer copies the image for `native`).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("`{what}` failed: {stderr}")]
    Tool { what: String, stderr: String },
    #[error("containerd exited ({status}):\n{log}")]
    DaemonExited { status: String, log: String },
    #[error("cannot connect to containerd's CRI socket")]
    Connect(#[source] tonic::transport::Error),
    #[error("CRI {call}: {status}")]
    Call {
        call: &'static str,
        #[source]
        status: tonic::Status,
    },
    #[error("container {id} reads running, but its process is gone (containerd lost its exit)")]
    ExitLost { id: String },
    #[error("PodSandboxStatus gave no pid for the pause process")]
    NoSandboxPid,
    #[error("CRI {call} took over {CALL_TIMEOUT:?}")]
    Timeout { call: &'static str },
}

/// The CRI call a run stopped at, or how far it went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// CreateContainer returned an error.
    Create,
    /// StartContainer returned an error.
    Start,
    /// StartContainer had not returned after [`RUN_TIMEOUT`] (runc create hung).
    StartHung,
    /// The oracle's own plumbing failed (writing the profile, a CRI call
    /// erroring or timing out): no verdict of containerd's.
    Oracle,
    /// The container ran and exited (with [`CriRun::exit_code`]).
    Exited,
    /// The container was still running at [`RUN_TIMEOUT`].
    StillRunning,
}

/// A container of an image run through CRI: what containerd did, what it
/// printed (stdout and stderr, in order), and the uid its process ran as.
#[derive(Debug, Clone)]
pub struct ImageRun {
    pub run: CriRun,
    pub output: String,
    pub uid: Option<u32>,
}

/// The text of a CRI container log: each line is `TIME STREAM TAG TEXT`,
/// tag `F` a full line and `P` a part continued by the next
/// (kubelet's pkg/kubelet/kuberuntime/logs, the format containerd writes).
pub fn cri_log_text(log: &str) -> String {
    let mut out = String::new();
    for line in log.lines() {
        let mut fields = line.splitn(4, ' ');
        let (_time, _stream, tag) = (fields.next(), fields.next(), fields.next());
        out.push_str(fields.next().unwrap_or(""));
        if tag != Some("P") {
            out.push('\n');
        }
    }
    out
}

/// What containerd did with one profile.
#[derive(Debug, Clone)]
pub struct CriRun {
    pub verdict: Verdict,
    pub stage: Stage,
    /// The container's exit code when it exited.
    pub exit_code: Option<i32>,
    /// The CRI error's message, or the exited container's reason and message.
    pub detail: String,
    /// Whether runc init existed (the `createRuntime` hook ran).
    pub init_started: bool,
}

/// Runs profiles through a private containerd over CRI. Cheap to share between threads.
pub struct ContainerdOracle {
    rt: tokio::runtime::Runtime,
    channel: Channel,
    daemon: Mutex<Daemon>,
    /// The pod sandbox containers join now; replaced when it is lost.
    sandbox: Mutex<Sandbox>,
    profiles: PathBuf,
    counter: AtomicU64,
    /// containerd's `runtime_name runtime_version` from the CRI Version call.
    pub version: String,
}

/// One pod sandbox: its id and the config it was run with (the kubelet
/// hands both to CreateContainer). A replacement is the same pod's next
/// attempt, as the kubelet makes it when a sandbox dies.
#[derive(Debug, Clone)]
struct Sandbox {
    id: String,
    config: api::PodSandboxConfig,
}

static SHARED: Mutex<Weak<ContainerdOracle>> = Mutex::new(Weak::new());

impl ContainerdOracle {
    /// The one containerd of this test binary: started by the first caller,
    /// torn down when the last holder drops it.
    pub fn shared() -> Result<Arc<ContainerdOracle>, CriError> {
        let mut slot = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(oracle) = slot.upgrade() {
            return Ok(oracle);
        }
        let oracle = Arc::new(ContainerdOracle::start(default_oracle_dir())?);
        *slot = Arc::downgrade(&oracle);
        Ok(oracle)
    }

    /// Starts containerd under `base/<pid>`, imports the images and runs the
    /// pod sandbox every container of this oracle joins.
    pub fn start(base: PathBuf) -> Result<ContainerdOracle, CriError> {
        fs::create_dir_all(&base).map_err(|source| CriError::Io {
            what: format!("mkdir {}", base.display()),
            source,
        })?;
        // Canonical: the sweep matches this path in other processes' command lines.
        let base = fs::canonicalize(&base).unwrap_or(base);
        sweep_stale(&base);
        let dir = base.join(std::process::id().to_string());
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("profiles")).map_err(|source| CriError::Io {
            what: format!("mkdir {}", dir.display()),
            source,
        })?;
        let runc = crate::runtimes::RuntimeBuild::Runc1_1_5
            .binary(&crate::runtimes::default_cache_dir())
            .unwrap_or_else(|_| PathBuf::from("runc"));
        let busybox = Path::new(nodeproof_testkit::BUSYBOX);
        let layout = Layout { dir: dir.clone() };
        let daemon = Daemon::start(layout.clone(), &runc, busybox, image::PAUSE)?;
        image::build_and_import(&dir, busybox, &layout.socket())?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|source| CriError::Io {
                what: "tokio runtime".into(),
                source,
            })?;
        let channel = rt
            .block_on(api::connect(layout.socket()))
            .map_err(CriError::Connect)?;
        let (version, sandbox) = rt.block_on(async {
            let mut c = RuntimeServiceClient::new(channel.clone());
            let v = call("Version", c.version(api::VersionRequest::default())).await?;
            let s = run_sandbox(&mut c, 0).await?;
            Ok::<_, CriError>((format!("{} {}", v.runtime_name, v.runtime_version), s))
        })?;
        Ok(ContainerdOracle {
            rt,
            channel,
            daemon: Mutex::new(daemon),
            sandbox: Mutex::new(sandbox),
            profiles: dir.join("profiles"),
            counter: AtomicU64::new(0),
            version,
        })
    }

    /// Runs `args` in a container whose Localhost profile is a file holding exactly `profile`.
    pub fn run(&self, profile: &[u8], no_new_privileges: bool, args: &[&str]) -> CriRun {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let path = self.profiles.join(format!("{n}.json"));
        if let Err(e) = fs::write(&path, profile) {
            return plumbing_failure(&format!("write {}: {e}", path.display()));
        }
        let run = self.run_localhost(&path.to_string_lossy(), no_new_privileges, args);
        let _ = fs::remove_file(&path);
        run
    }

    /// Runs `args` in a container whose seccomp profile is `Localhost` with
    /// `localhost_ref` as given (the kubelet passes the absolute path under
    /// its seccomp root).
    pub fn run_localhost(
        &self,
        localhost_ref: &str,
        no_new_privileges: bool,
        args: &[&str],
    ) -> CriRun {
        let profile = api::SecurityProfile {
            profile_type: ProfileType::Localhost as i32,
            localhost_ref: localhost_ref.to_string(),
        };
        self.run_with(Some(profile), no_new_privileges, args)
    }

    /// Runs `args` with the container's `seccomp` field as given (None: unset).
    pub fn run_with(
        &self,
        seccomp: Option<api::SecurityProfile>,
        no_new_privileges: bool,
        args: &[&str],
    ) -> CriRun {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let config = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata {
                name: format!("c{n}"),
                attempt: 0,
            }),
            image: Some(api::ImageSpec {
                image: image::BUSYBOX_IMAGE.into(),
            }),
            command: args.iter().map(|s| s.to_string()).collect(),
            linux: Some(api::LinuxContainerConfig {
                security_context: Some(api::LinuxContainerSecurityContext {
                    namespace_options: Some(namespaces()),
                    // The kubelet: no_new_privs = !allowPrivilegeEscalation.
                    no_new_privs: no_new_privileges,
                    seccomp,
                    ..Default::default()
                }),
            }),
            ..Default::default()
        };
        let mut attempt = 0;
        let mut sandbox_replaced = false;
        loop {
            let mut config = config.clone();
            if let Some(m) = config.metadata.as_mut() {
                m.attempt = attempt;
            }
            let sandbox = self.sandbox();
            let run = match self.rt.block_on(self.run_container(config, &sandbox)) {
                // containerd 1.6.20's shim can miss the exit of a process that ends
                // before the start is recorded (fixed in 1.6.23): the container then
                // reads "running" forever with no process. That says nothing about
                // the profile, so the run is repeated.
                Err(CriError::ExitLost { .. }) if attempt < MAX_ATTEMPTS => {
                    attempt += 1;
                    continue;
                }
                Ok(run) => run,
                Err(e) => plumbing_failure(&e.to_string()),
            };
            if run.verdict == Verdict::Accepted {
                return run;
            }
            // A container of a sandbox whose pause process is gone cannot start
            // (runc: `namespace path: lstat /proc/0/ns/ipc`): that failure is
            // the oracle's, not the profile's. The case runs again, once, in a
            // new sandbox.
            // A namespace path of pid 0 names no process at all: whatever
            // containerd's sandbox status says, the spec it built did not
            // come from a live pause, so the run says nothing of the profile
            // (seen next to starts that hung past RUN_TIMEOUT, with the
            // sandbox READY and its pause running; the cause is open).
            let pid_zero = run.detail.contains("/proc/0/ns/");
            let ready = if pid_zero {
                Ok(false)
            } else {
                self.rt.block_on(self.sandbox_ready(&sandbox.id))
            };
            match ready {
                Ok(true) => return run,
                Ok(false) if sandbox_replaced => {
                    return plumbing_failure(&format!(
                        "the pod sandbox was lost again (first run: {})",
                        run.detail
                    ))
                }
                Ok(false) => {
                    if let Err(e) = self.replace_sandbox(&sandbox.id) {
                        return plumbing_failure(&format!("replacing the lost pod sandbox: {e}"));
                    }
                    sandbox_replaced = true;
                    attempt += 1;
                }
                Err(e) => return plumbing_failure(&format!("PodSandboxStatus: {e}")),
            }
        }
    }

    /// Imports an image tarball (`ctr images import`) into this containerd;
    /// what `ctr` printed (`unpacking <name> (<digest>)...done`).
    pub fn import(&self, tarball: &Path) -> Result<String, CriError> {
        let socket = self
            .daemon
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .layout
            .socket();
        image::import(tarball, &socket)
    }

    /// Runs `command` (empty: the image's entrypoint and cmd) in a container
    /// of `image`, as the image says (its user, its environment), in a pod
    /// sandbox of its own whose log directory keeps what it printed.
    pub fn run_image(&self, image: &str, command: &[&str]) -> Result<ImageRun, CriError> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let logs = self.profiles.with_file_name(format!("logs-{n}"));
        fs::create_dir_all(&logs).map_err(|source| CriError::Io {
            what: format!("mkdir {}", logs.display()),
            source,
        })?;
        let config = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata {
                name: format!("image{n}"),
                attempt: 0,
            }),
            image: Some(api::ImageSpec {
                image: image.into(),
            }),
            command: command.iter().map(|s| s.to_string()).collect(),
            log_path: "container.log".into(),
            linux: Some(api::LinuxContainerConfig {
                security_context: Some(api::LinuxContainerSecurityContext {
                    namespace_options: Some(namespaces()),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        };
        let result = self.rt.block_on(async {
            let mut c = RuntimeServiceClient::new(self.channel.clone());
            let mut sandbox_config = sandbox_config();
            if let Some(m) = sandbox_config.metadata.as_mut() {
                m.name = format!("nodeproof-image-{n}");
                m.uid = format!("{}-image-{n}", m.uid);
            }
            sandbox_config.log_directory = logs.to_string_lossy().into_owned();
            let id = call(
                "RunPodSandbox",
                c.run_pod_sandbox(api::RunPodSandboxRequest {
                    config: Some(sandbox_config.clone()),
                    runtime_handler: String::new(),
                }),
            )
            .await?
            .pod_sandbox_id;
            let sandbox = Sandbox {
                id: id.clone(),
                config: sandbox_config,
            };
            let run = self
                .run_container_then(config, &sandbox, |c, container| {
                    Box::pin(async move {
                        call(
                            "ContainerStatus",
                            c.container_status(api::ContainerStatusRequest {
                                container_id: container,
                                verbose: true,
                            }),
                        )
                        .await
                        .ok()
                        .and_then(|s| s.info.get("info").cloned())
                        .and_then(|i| serde_json::from_str::<serde_json::Value>(&i).ok())
                        .and_then(|i| i["runtimeSpec"]["process"]["user"]["uid"].as_u64())
                    })
                })
                .await;
            let _ = remove_sandbox(&mut c, &id).await;
            run
        });
        let (run, uid) = result?;
        let log = fs::read_to_string(logs.join("container.log")).unwrap_or_default();
        let _ = fs::remove_dir_all(&logs);
        Ok(ImageRun {
            run,
            output: cri_log_text(&log),
            uid: uid.map(|u| u as u32),
        })
    }

    /// The sandbox containers join now.
    fn sandbox(&self) -> Sandbox {
        self.sandbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The id of the sandbox containers join now (a test can end its pause).
    pub fn sandbox_id(&self) -> String {
        self.sandbox().id
    }

    /// The pid of the current sandbox's pause process (containerd's verbose
    /// `info` JSON), for a test that ends it.
    pub fn sandbox_pid(&self) -> Result<u32, CriError> {
        let id = self.sandbox_id();
        let mut c = RuntimeServiceClient::new(self.channel.clone());
        let status = self.rt.block_on(call(
            "PodSandboxStatus",
            c.pod_sandbox_status(api::PodSandboxStatusRequest {
                pod_sandbox_id: id,
                verbose: true,
            }),
        ))?;
        let info: serde_json::Value = status
            .info
            .get("info")
            .and_then(|i| serde_json::from_str(i).ok())
            .unwrap_or_default();
        info["pid"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .ok_or(CriError::NoSandboxPid)
    }

    /// Whether sandbox `id` can still take containers: READY (containerd
    /// marks it NOTREADY when its pause process exits; one removed is not
    /// found) and its pause process, as the verbose status names it, running.
    /// A campaign run once met a sandbox containerd still called READY while
    /// runc was handed `/proc/0/ns/ipc`: a pid of 0 is no pause either.
    async fn sandbox_ready(&self, id: &str) -> Result<bool, CriError> {
        let mut c = RuntimeServiceClient::new(self.channel.clone());
        let status = c.pod_sandbox_status(api::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: true,
        });
        match tokio::time::timeout(CALL_TIMEOUT, status).await {
            Ok(Ok(r)) => {
                let r = r.into_inner();
                let ready = r
                    .status
                    .is_some_and(|s| s.state() == api::PodSandboxState::SandboxReady);
                let info: serde_json::Value = r
                    .info
                    .get("info")
                    .and_then(|i| serde_json::from_str(i).ok())
                    .unwrap_or_default();
                // No pid in the verbose info: only the state can tell.
                let pause = info["pid"]
                    .as_u64()
                    .is_none_or(|pid| pid > 0 && running(pid));
                Ok(ready && pause)
            }
            Ok(Err(status)) if status.code() == tonic::Code::NotFound => Ok(false),
            Ok(Err(status)) => Err(CriError::Call {
                call: "PodSandboxStatus",
                status,
            }),
            Err(_) => Err(CriError::Timeout {
                call: "PodSandboxStatus",
            }),
        }
    }

    /// Replaces the lost sandbox `dead` with the pod's next attempt, unless
    /// another thread already has: stopped and removed as the kubelet does
    /// (containerd removes the containers left in it), then run again.
    fn replace_sandbox(&self, dead: &str) -> Result<(), CriError> {
        let mut current = self.sandbox.lock().unwrap_or_else(|e| e.into_inner());
        if current.id != dead {
            return Ok(());
        }
        let attempt = current.config.metadata.as_ref().map_or(0, |m| m.attempt) + 1;
        eprintln!("containerd oracle: pod sandbox {dead} lost its pause process; running attempt {attempt}");
        let channel = self.channel.clone();
        let dead = dead.to_string();
        *current = self.rt.block_on(async move {
            let mut c = RuntimeServiceClient::new(channel);
            if let Err(e) = remove_sandbox(&mut c, &dead).await {
                eprintln!("containerd oracle: lost sandbox {dead} not removed: {e}");
            }
            run_sandbox(&mut c, attempt).await
        })?;
        Ok(())
    }

    async fn run_container(
        &self,
        config: api::ContainerConfig,
        sandbox: &Sandbox,
    ) -> Result<CriRun, CriError> {
        self.run_container_then(config, sandbox, |_, _| Box::pin(async {}))
            .await
            .map(|(run, ())| run)
    }

    /// [`Self::run_container`], asking `inspect` about the container (by
    /// id) once it has run, before it is removed.
    async fn run_container_then<T>(
        &self,
        config: api::ContainerConfig,
        sandbox: &Sandbox,
        inspect: impl for<'c> FnOnce(
            &'c mut RuntimeServiceClient<Channel>,
            String,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = T> + Send + 'c>,
        >,
    ) -> Result<(CriRun, T), CriError>
    where
        T: Default,
    {
        let mut c = RuntimeServiceClient::new(self.channel.clone());
        let created = tokio::time::timeout(
            CALL_TIMEOUT,
            c.create_container(api::CreateContainerRequest {
                pod_sandbox_id: sandbox.id.clone(),
                config: Some(config),
                sandbox_config: Some(sandbox.config.clone()),
            }),
        )
        .await
        .map_err(|_| CriError::Timeout {
            call: "CreateContainer",
        })?;
        let id = match created {
            Ok(r) => r.into_inner().container_id,
            Err(status) => {
                return Ok((
                    CriRun {
                        verdict: Verdict::Rejected,
                        stage: Stage::Create,
                        exit_code: None,
                        detail: status.message().to_string(),
                        init_started: false,
                    },
                    T::default(),
                ))
            }
        };
        let run = self.start_and_wait(&mut c, &id).await;
        let seen = inspect(&mut c, id.clone()).await;
        // Always remove, whatever happened: a leftover container keeps a shim and
        // a rootfs mount. A container still running is stopped first (as the kubelet does).
        let _ = call(
            "StopContainer",
            c.stop_container(api::StopContainerRequest {
                container_id: id.clone(),
                timeout: 0,
            }),
        )
        .await;
        let removed = call(
            "RemoveContainer",
            c.remove_container(api::RemoveContainerRequest {
                container_id: id.clone(),
            }),
        )
        .await;
        if let Err(e) = removed {
            // The test harness has no tracing subscriber: stderr is what shows.
            eprintln!("containerd oracle: container {id} not removed: {e}");
        }
        run.map(|r| (r, seen))
    }

    async fn start_and_wait(
        &self,
        c: &mut RuntimeServiceClient<Channel>,
        id: &str,
    ) -> Result<CriRun, CriError> {
        // A client of its own: the pending start must not hold `c`.
        let mut starter = RuntimeServiceClient::new(self.channel.clone());
        let start = starter.start_container(api::StartContainerRequest {
            container_id: id.to_string(),
        });
        tokio::pin!(start);
        let started = match tokio::time::timeout(RUN_TIMEOUT, &mut start).await {
            Ok(started) => started,
            Err(_) => {
                // runc create never returns when init hangs under the filter (a
                // KILL_THREAD default leaves init's other threads waiting); the
                // kubelet would see StartContainer time out. Ending that runc
                // makes the shim fail the start, so containerd cleans up.
                self.kill_runc_of(id);
                let _ = tokio::time::timeout(CALL_TIMEOUT, start).await;
                let init_started = self.take_hook_record(id);
                return Ok(CriRun {
                    verdict: Verdict::StartFailed,
                    stage: Stage::StartHung,
                    exit_code: None,
                    detail: format!("StartContainer still waiting after {RUN_TIMEOUT:?}"),
                    init_started,
                });
            }
        };
        let init_started = self.take_hook_record(id);
        if let Err(status) = started {
            return Ok(CriRun {
                verdict: if init_started {
                    Verdict::StartFailed
                } else {
                    Verdict::Rejected
                },
                stage: Stage::Start,
                exit_code: None,
                detail: status.message().to_string(),
                init_started,
            });
        }
        let deadline = Instant::now() + RUN_TIMEOUT;
        loop {
            let status = call(
                "ContainerStatus",
                c.container_status(api::ContainerStatusRequest {
                    container_id: id.to_string(),
                    verbose: false,
                }),
            )
            .await?
            .status
            .unwrap_or_default();
            if status.state() == api::ContainerState::ContainerExited {
                return Ok(CriRun {
                    verdict: if status.exit_code == 0 {
                        Verdict::Accepted
                    } else {
                        Verdict::StartFailed
                    },
                    stage: Stage::Exited,
                    exit_code: Some(status.exit_code),
                    detail: format!("{}: {}", status.reason, status.message),
                    init_started,
                });
            }
            if Instant::now() > deadline {
                if !self.process_alive(c, id).await {
                    return Err(CriError::ExitLost { id: id.to_string() });
                }
                return Ok(CriRun {
                    verdict: Verdict::StartFailed,
                    stage: Stage::StillRunning,
                    exit_code: None,
                    detail: format!("{:?} after {RUN_TIMEOUT:?}", status.state()),
                    init_started,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL to the `runc` processes this oracle's containerd runs for
    /// container `id` (found by their `--root` and the id in their command line).
    fn kill_runc_of(&self, id: &str) {
        let root = self
            .daemon
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .layout
            .dir
            .join("runc");
        let root = root.to_string_lossy().into_owned();
        for pid in daemon::pids_whose_args(|args| {
            args.iter().any(|a| a.starts_with(root.as_bytes())) && args.contains(&id.as_bytes())
        }) {
            // SAFETY: kill(2) on a runc this oracle's containerd started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }

    /// Whether container `id`'s init process still exists: its pid from the
    /// verbose status (containerd's `info` JSON) is still a live process.
    async fn process_alive(&self, c: &mut RuntimeServiceClient<Channel>, id: &str) -> bool {
        let Ok(status) = call(
            "ContainerStatus",
            c.container_status(api::ContainerStatusRequest {
                container_id: id.to_string(),
                verbose: true,
            }),
        )
        .await
        else {
            return true;
        };
        let info: serde_json::Value = status
            .info
            .get("info")
            .and_then(|i| serde_json::from_str(i).ok())
            .unwrap_or_default();
        info["pid"].as_u64().is_none_or(running)
    }

    /// Whether the `createRuntime` hook recorded container `id` (and forget the record).
    fn take_hook_record(&self, id: &str) -> bool {
        let hooks = self
            .daemon
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .layout
            .hooks();
        let Ok(entries) = fs::read_dir(&hooks) else {
            return false;
        };
        let mut found = false;
        for entry in entries.flatten() {
            let Ok(text) = fs::read(entry.path()) else {
                continue;
            };
            let state: serde_json::Value = serde_json::from_slice(&text).unwrap_or_default();
            if state["id"] == id {
                found = true;
                let _ = fs::remove_file(entry.path());
            }
        }
        found
    }
}

/// containerd + this machine's runc as one of the campaign's oracles: the
/// profile file is the pod's Localhost profile, `/bin/true` its command.
impl crate::oracle::SeccompOracle for ContainerdOracle {
    fn name(&self) -> &str {
        "containerd+runc-1.1.5"
    }

    fn judge(&self, profile: &[u8], no_new_privileges: bool) -> Result<RuntimeRun, OracleError> {
        let run = self.run(profile, no_new_privileges, &["/bin/true"]);
        if run.stage == Stage::Oracle {
            return Err(OracleError::Unavailable(run.detail));
        }
        Ok(RuntimeRun {
            verdict: run.verdict,
            exit: run.exit_code.unwrap_or(-1),
            stderr: run.detail,
            init_started: run.init_started,
            // A start still going at RUN_TIMEOUT: a hang, or libseccomp still
            // compiling thousands of rules; the campaign tells them apart.
            timed_out: matches!(run.stage, Stage::StartHung | Stage::StillRunning),
        })
    }
}

impl Drop for ContainerdOracle {
    fn drop(&mut self) {
        let channel = self.channel.clone();
        let id = self.sandbox_id();
        let stopped = self.rt.block_on(async move {
            let mut c = RuntimeServiceClient::new(channel);
            remove_sandbox(&mut c, &id).await
        });
        if let Err(e) = stopped {
            eprintln!("containerd oracle: sandbox not removed: {e}");
        }
        let mut daemon = self.daemon.lock().unwrap_or_else(|e| e.into_inner());
        let left = daemon.stop();
        if CgroupDriver::of_host() == CgroupDriver::Cgroupfs {
            clear_pod_cgroups(std::process::id(), false);
        }
        if left.is_empty() {
            let _ = fs::remove_dir_all(&daemon.layout.dir);
        } else {
            // Detached by stop(); said here because no test can fail in a destructor.
            eprintln!("containerd oracle: mounts left behind and detached: {left:?}");
        }
    }
}

/// Whether process `pid` exists and has not exited (a zombie has; only its
/// reaping is pending).
fn running(pid: u64) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// RunPodSandbox for this process's pod, its `attempt`th time.
async fn run_sandbox(
    c: &mut RuntimeServiceClient<Channel>,
    attempt: u32,
) -> Result<Sandbox, CriError> {
    let mut config = sandbox_config();
    if let Some(m) = config.metadata.as_mut() {
        m.attempt = attempt;
    }
    let s = call(
        "RunPodSandbox",
        c.run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        }),
    )
    .await?;
    Ok(Sandbox {
        id: s.pod_sandbox_id,
        config,
    })
}

/// StopPodSandbox, then RemovePodSandbox.
async fn remove_sandbox(c: &mut RuntimeServiceClient<Channel>, id: &str) -> Result<(), CriError> {
    call(
        "StopPodSandbox",
        c.stop_pod_sandbox(api::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        }),
    )
    .await?;
    call(
        "RemovePodSandbox",
        c.remove_pod_sandbox(api::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        }),
    )
    .await
    .map(drop)
}

/// The answer when the oracle's own plumbing failed: say so instead of inventing a verdict.
fn plumbing_failure(why: &str) -> CriRun {
    CriRun {
        verdict: Verdict::StartFailed,
        stage: Stage::Oracle,
        exit_code: None,
        detail: format!("nodeproof oracle error: {why}"),
        init_started: false,
    }
}

async fn call<T>(
    call: &'static str,
    fut: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, CriError> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(status)) => Err(CriError::Call { call, status }),
        Err(_) => Err(CriError::Timeout { call }),
    }
}

/// The kubelet's namespaces for a pod with `hostNetwork: true` and
/// `shareProcessNamespace: false`: the node's network (so no CNI is
/// needed), a PID namespace per container, IPC shared in the pod.
fn namespaces() -> api::NamespaceOption {
    api::NamespaceOption {
        network: api::NamespaceMode::Node as i32,
        pid: api::NamespaceMode::Container as i32,
        ipc: api::NamespaceMode::Pod as i32,
        target_id: String::new(),
    }
}

/// The parent cgroup of the pod, as the kubelet names one for its driver
/// (`/kubepods/besteffort/pod<uid>` or `kubepods-besteffort-pod<uid>.slice`).
fn cgroup_parent() -> String {
    let pid = std::process::id();
    match CgroupDriver::of_host() {
        CgroupDriver::Cgroupfs => format!("/nodeproof-cri/pod{pid}"),
        CgroupDriver::Systemd => format!("nodeproof-cri-pod{pid}.slice"),
    }
}

/// The pod cgroups (cgroupfs) of test process `pid`, in every hierarchy:
/// each container's, then the pod's. runc removes a container's cgroup when it
/// deletes the container and the pod's parent is the kubelet's to remove, so
/// the oracle does it at teardown; for a killed process's pod (`kill`), what
/// still runs there (its pause) is killed first. A cgroup holding a zombie
/// stays: only its parent can reap it.
fn clear_pod_cgroups(pid: u32, kill: bool) {
    let Ok(hierarchies) = fs::read_dir("/sys/fs/cgroup") else {
        return;
    };
    for h in hierarchies.flatten() {
        let pod = h.path().join(format!("nodeproof-cri/pod{pid}"));
        let Ok(containers) = fs::read_dir(&pod) else {
            continue;
        };
        for c in containers.flatten().filter(|c| c.path().is_dir()) {
            if kill {
                let procs = fs::read_to_string(c.path().join("cgroup.procs")).unwrap_or_default();
                for p in procs.lines().filter_map(|l| l.parse::<libc::pid_t>().ok()) {
                    // SAFETY: kill(2) on a process of a pod this oracle ran.
                    unsafe { libc::kill(p, libc::SIGKILL) };
                }
            }
            let _ = fs::remove_dir(c.path());
        }
        let _ = fs::remove_dir(&pod);
        let _ = fs::remove_dir(h.path().join("nodeproof-cri"));
    }
}

/// Test processes whose pod cgroups are still there.
fn pod_cgroup_owners() -> Vec<u32> {
    let mut owners: Vec<u32> = fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|h| fs::read_dir(h.path().join("nodeproof-cri")).ok())
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("pod")?.parse().ok())
        .collect();
    owners.sort_unstable();
    owners.dedup();
    owners
}

fn sandbox_config() -> api::PodSandboxConfig {
    let pid = std::process::id();
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: "nodeproof-oracle".into(),
            uid: format!("nodeproof-oracle-{pid}"),
            namespace: "nodeproof".into(),
            attempt: 0,
        }),
        hostname: String::new(),
        log_directory: String::new(),
        labels: HashMap::new(),
        annotations: HashMap::new(),
        linux: Some(api::LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent(),
            security_context: Some(api::LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces()),
                privileged: false,
                // The kubelet passes the pod's profile to the sandbox too; the pause
                // container is not what is judged, so it runs unconfined.
                seccomp: Some(api::SecurityProfile {
                    profile_type: ProfileType::Unconfined as i32,
                    localhost_ref: String::new(),
                }),
            }),
        }),
    }
}

/// Directories of earlier test processes that are gone: their containerd
/// (if a killed run left it) is ended by its group, their mounts detached,
/// the directory removed.
fn sweep_stale(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let mut stale = Daemon::adopt(Layout { dir: entry.path() });
        stale.stop();
        if daemon::mounts_under(&entry.path()).is_empty() {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
    pod::sweep_stale_pods();
    for pid in pod_cgroup_owners() {
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            clear_pod_cgroups(pid, true);
        }
    }
}

/// A directory for the oracle under the workspace's `target/`.
pub fn default_oracle_dir() -> PathBuf {
    nodeproof_testkit::target_dir().join("nodeproof-cri")
}
