//! Pods run through CRI the way the kubelet runs a Pod object, for tests
//! that play the kubelet: ImageStatus for an image string as a manifest
//! holds it, one pod sandbox per pod under the kubelet's cgroup layout
//! (`kubepods/<qos>/pod<uid>`, its `cgroup_parent`), containers created,
//! started, read and removed by id, and the containers' logs.
//!
//! Unlike [`ContainerdOracle::run`], nothing here judges: a test builds the
//! sandbox and container configs from the Pod it plays and reads what
//! happened itself.

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use super::api::image_service_client::ImageServiceClient;
use super::api::runtime_service_client::RuntimeServiceClient;
use super::daemon::CgroupDriver;
use super::{api, call, cri_log_text, remove_sandbox, ContainerdOracle, CriError};

/// How long StopContainer lets a container's process end on SIGTERM before
/// SIGKILL (the kubelet sends the pod's terminationGracePeriodSeconds).
const STOP_GRACE_S: i64 = 10;

/// A pod's QoS class, the cgroup level the kubelet puts it under
/// (pkg/kubelet/cm/qos_container_manager_linux.go: guaranteed pods sit
/// directly under `kubepods`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl Qos {
    fn cgroupfs_level(self) -> Option<&'static str> {
        match self {
            Qos::Guaranteed => None,
            Qos::Burstable => Some("burstable"),
            Qos::BestEffort => Some("besteffort"),
        }
    }
}

/// The `cgroup_parent` the kubelet gives a pod's sandbox on this host's
/// driver (pkg/kubelet/cm/pod_container_manager_linux.go). With cgroupfs
/// the kubepods tree sits under `/nodeproof-cri`, the tests' own cgroup, as
/// the kubelet's `--cgroup-root` places it (kind's nodes run it under
/// `/kubelet`), so the suite's end check still sees what it left; with
/// systemd the slice is the kubelet's own name (`kubepods-<qos>-pod<uid>`,
/// dashes of the uid as underscores), which systemd unloads once empty.
pub fn kubelet_cgroup_parent(qos: Qos, uid: &str) -> String {
    match CgroupDriver::of_host() {
        CgroupDriver::Cgroupfs => match qos.cgroupfs_level() {
            Some(level) => format!("/nodeproof-cri/kubepods/{level}/pod{uid}"),
            None => format!("/nodeproof-cri/kubepods/pod{uid}"),
        },
        CgroupDriver::Systemd => {
            let uid = uid.replace('-', "_");
            match qos.cgroupfs_level() {
                Some(level) => format!("kubepods-{level}-pod{uid}.slice"),
                None => format!("kubepods-pod{uid}.slice"),
            }
        }
    }
}

/// A pod UID for this test process: hex and dashes in a UUID's shape (the
/// kubelet's cgroup names carry it; nodeproof's attribution reads it back),
/// unique per process and call.
pub fn test_pod_uid(oracle: &ContainerdOracle) -> String {
    let n = oracle.counter.fetch_add(1, Ordering::Relaxed);
    format!(
        "{:08x}-{:04x}-4000-8000-{:012x}",
        std::process::id(),
        n & 0xffff,
        0x6e6f_6465_7072u64
    )
}

/// A pod sandbox run through CRI and the containers created in it; all of
/// them stopped and removed on drop, and its cgroupfs pod cgroup with them.
pub struct RunningPod<'a> {
    oracle: &'a ContainerdOracle,
    pub id: String,
    pub config: api::PodSandboxConfig,
    logs: PathBuf,
    containers: Mutex<Vec<String>>,
}

impl ContainerdOracle {
    /// ImageStatus for `image` exactly as given: `None` when containerd's
    /// CRI does not have it (what makes the kubelet pull).
    pub fn image_status(&self, image: &str) -> Result<Option<api::Image>, CriError> {
        let mut c = ImageServiceClient::new(self.channel.clone());
        self.rt
            .block_on(call(
                "ImageStatus",
                c.image_status(api::ImageStatusRequest {
                    image: Some(api::ImageSpec {
                        image: image.to_string(),
                    }),
                    verbose: false,
                }),
            ))
            .map(|r| r.image)
    }

    /// RunPodSandbox with `config` (its `log_directory` set to a directory
    /// of this oracle's, where each container's log is kept).
    pub fn run_pod(&self, mut config: api::PodSandboxConfig) -> Result<RunningPod<'_>, CriError> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let logs = self.profiles.with_file_name(format!("pod-logs-{n}"));
        fs::create_dir_all(&logs).map_err(|source| CriError::Io {
            what: format!("mkdir {}", logs.display()),
            source,
        })?;
        config.log_directory = logs.to_string_lossy().into_owned();
        let mut c = RuntimeServiceClient::new(self.channel.clone());
        let id = self
            .rt
            .block_on(call(
                "RunPodSandbox",
                c.run_pod_sandbox(api::RunPodSandboxRequest {
                    config: Some(config.clone()),
                    runtime_handler: String::new(),
                }),
            ))?
            .pod_sandbox_id;
        Ok(RunningPod {
            oracle: self,
            id,
            config,
            logs,
            containers: Mutex::new(Vec::new()),
        })
    }
}

impl RunningPod<'_> {
    /// CreateContainer in this sandbox; its log is `<name>.log` in the
    /// sandbox's log directory. The container's id.
    pub fn create(&self, mut config: api::ContainerConfig) -> Result<String, CriError> {
        let name = config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        config.log_path = format!("{name}.log");
        let mut c = self.client();
        let id = self
            .oracle
            .rt
            .block_on(call(
                "CreateContainer",
                c.create_container(api::CreateContainerRequest {
                    pod_sandbox_id: self.id.clone(),
                    config: Some(config),
                    sandbox_config: Some(self.config.clone()),
                }),
            ))?
            .container_id;
        self.containers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(id.clone());
        Ok(id)
    }

    /// StartContainer.
    pub fn start(&self, id: &str) -> Result<(), CriError> {
        let mut c = self.client();
        self.oracle
            .rt
            .block_on(call(
                "StartContainer",
                c.start_container(api::StartContainerRequest {
                    container_id: id.to_string(),
                }),
            ))
            .map(drop)
    }

    /// ContainerStatus (not verbose).
    pub fn status(&self, id: &str) -> Result<api::ContainerStatus, CriError> {
        let mut c = self.client();
        self.oracle
            .rt
            .block_on(call(
                "ContainerStatus",
                c.container_status(api::ContainerStatusRequest {
                    container_id: id.to_string(),
                    verbose: false,
                }),
            ))
            .map(|r| r.status.unwrap_or_default())
    }

    /// What container `name` printed so far (stdout and stderr, in order).
    pub fn log(&self, name: &str) -> String {
        cri_log_text(&fs::read_to_string(self.logs.join(format!("{name}.log"))).unwrap_or_default())
    }

    fn client(&self) -> RuntimeServiceClient<tonic::transport::Channel> {
        RuntimeServiceClient::new(self.oracle.channel.clone())
    }

    /// The pod's cgroup (cgroupfs) and the kubepods levels above it under
    /// `/nodeproof-cri`, in every hierarchy, once containerd removed the
    /// sandbox: the kubelet removes a pod's cgroup itself, runc only its
    /// containers'. A level still holding another pod stays.
    fn remove_pod_cgroup(&self) {
        let parent = self
            .config
            .linux
            .as_ref()
            .map(|l| l.cgroup_parent.clone())
            .unwrap_or_default();
        let Some(rel) = parent.strip_prefix("/nodeproof-cri/") else {
            return;
        };
        let Ok(hierarchies) = fs::read_dir("/sys/fs/cgroup") else {
            return;
        };
        let mut roots = vec![PathBuf::from("/sys/fs/cgroup")];
        roots.extend(hierarchies.flatten().map(|h| h.path()));
        for root in roots {
            let mut dir = root.join("nodeproof-cri").join(rel);
            while dir.starts_with(root.join("nodeproof-cri/kubepods")) {
                remove_cgroup(&dir);
                dir.pop();
            }
        }
    }
}

/// The kubepods pod cgroups (cgroupfs) of test processes that are gone (a
/// killed run): what still runs in them (an agent, a workload) is killed
/// and the cgroups removed. The owner is the pid [`test_pod_uid`] put first
/// in the UID.
pub(super) fn sweep_stale_pods() {
    let Ok(hierarchies) = fs::read_dir("/sys/fs/cgroup") else {
        return;
    };
    let mut roots = vec![PathBuf::from("/sys/fs/cgroup")];
    roots.extend(hierarchies.flatten().map(|h| h.path()));
    for root in roots {
        let kubepods = root.join("nodeproof-cri/kubepods");
        let levels = [
            kubepods.join("burstable"),
            kubepods.join("besteffort"),
            kubepods.clone(),
        ];
        let mut swept = false;
        for level in &levels {
            let Ok(pods) = fs::read_dir(level) else {
                continue;
            };
            for pod in pods.flatten() {
                let name = pod.file_name();
                let Some(owner) = name
                    .to_str()
                    .and_then(|n| n.strip_prefix("pod"))
                    .and_then(|uid| uid.get(..8))
                    .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                else {
                    continue;
                };
                if owner == std::process::id() || PathBuf::from(format!("/proc/{owner}")).exists() {
                    continue;
                }
                let containers = fs::read_dir(pod.path()).into_iter().flatten().flatten();
                for c in containers.filter(|c| c.path().is_dir()) {
                    let procs =
                        fs::read_to_string(c.path().join("cgroup.procs")).unwrap_or_default();
                    for p in procs.lines().filter_map(|l| l.parse::<libc::pid_t>().ok()) {
                        // SAFETY: kill(2) on a process of a pod a gone test process ran.
                        unsafe { libc::kill(p, libc::SIGKILL) };
                    }
                    remove_cgroup(&c.path());
                }
                remove_cgroup(&pod.path());
                swept = true;
            }
        }
        // The levels only after a sweep: a live test may be about to run a pod in them.
        if swept {
            for level in &levels {
                remove_cgroup(level);
            }
        }
    }
}

/// rmdir of a cgroup, retried for 2 s while the kernel says EBUSY (its
/// last task's exit still being finished); absent or not empty: left.
fn remove_cgroup(dir: &std::path::Path) {
    for _ in 0..100 {
        match fs::remove_dir(dir) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => return,
        }
    }
}

impl Drop for RunningPod<'_> {
    fn drop(&mut self) {
        let containers =
            std::mem::take(&mut *self.containers.lock().unwrap_or_else(|e| e.into_inner()));
        let mut c = self.client();
        let id = self.id.clone();
        let removed = self.oracle.rt.block_on(async move {
            for container in containers {
                let _ = call(
                    "StopContainer",
                    c.stop_container(api::StopContainerRequest {
                        container_id: container.clone(),
                        timeout: STOP_GRACE_S,
                    }),
                )
                .await;
                let _ = call(
                    "RemoveContainer",
                    c.remove_container(api::RemoveContainerRequest {
                        container_id: container,
                    }),
                )
                .await;
            }
            remove_sandbox(&mut c, &id).await
        });
        if let Err(e) = removed {
            // No test can fail in a destructor: stderr is what shows.
            eprintln!(
                "containerd oracle: pod sandbox {} not removed: {e}",
                self.id
            );
        }
        self.remove_pod_cgroup();
        let _ = fs::remove_dir_all(&self.logs);
    }
}
