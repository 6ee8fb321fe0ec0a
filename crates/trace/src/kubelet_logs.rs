//! Pod and container names from the kubelet's log directories: how a node
//! without API credentials (`nodeproof trace --pod/--namespace/--container`)
//! turns a cgroup's pod UID and container id into names. The kubelet keeps,
//! for every pod and container it runs:
//! - `/var/log/pods/<namespace>_<pod>_<uid>/` (pkg/kubelet/kuberuntime/helpers.go,
//!   `BuildPodLogsDirectory`);
//! - `/var/log/containers/<pod>_<namespace>_<container>-<container id>.log`, a
//!   symlink (pkg/kubelet/kuberuntime/legacy.go, `logSymlink`; the name is cut
//!   to 251 bytes, so a cut one has no whole id and is skipped).
//!
//! Namespaces, pod names and container names are DNS labels or subdomains,
//! which never hold `_`: the separators are unambiguous. Parsing is pure;
//! [`KubeletLogs`] scans the two directories again when asked for a name it
//! does not know (a pod started since), at most once a second.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::attribution::{PodLookup, PodRef};

/// A pod log directory's name: the pod and its UID.
pub fn parse_pod_dir(name: &str) -> Option<(PodRef, String)> {
    let mut parts = name.splitn(3, '_');
    let (namespace, pod, uid) = (parts.next()?, parts.next()?, parts.next()?);
    if namespace.is_empty() || pod.is_empty() || uid.is_empty() || uid.contains('_') {
        return None;
    }
    Some((
        PodRef {
            namespace: namespace.to_string(),
            name: pod.to_string(),
        },
        uid.to_string(),
    ))
}

/// A container log symlink's name: (container name, container id). The id is
/// the runtime's 64 hex digits after the last `-`.
pub fn parse_container_link(name: &str) -> Option<(String, String)> {
    let stem = name.strip_suffix(".log")?;
    let mut parts = stem.splitn(3, '_');
    let (_pod, _namespace, rest) = (parts.next()?, parts.next()?, parts.next()?);
    let (container, id) = rest.rsplit_once('-')?;
    let is_id = id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit());
    (!container.is_empty() && is_id).then(|| (container.to_string(), id.to_string()))
}

/// What one scan found.
#[derive(Debug, Default)]
struct Names {
    pods: HashMap<String, PodRef>,
    containers: HashMap<String, String>,
    scanned: Option<Instant>,
}

/// Names from the pod log directories and the container log symlinks.
pub struct KubeletLogs {
    pods_dir: PathBuf,
    containers_dir: PathBuf,
    names: RefCell<Names>,
}

/// The kubelet's default `podLogsDir`.
pub const DEFAULT_POD_LOGS_DIR: &str = "/var/log/pods";

/// The shortest time between two scans made for a name not found.
const RESCAN: Duration = Duration::from_secs(1);

impl KubeletLogs {
    pub fn new(pods_dir: impl Into<PathBuf>, containers_dir: impl Into<PathBuf>) -> Self {
        KubeletLogs {
            pods_dir: pods_dir.into(),
            containers_dir: containers_dir.into(),
            names: RefCell::default(),
        }
    }

    /// The kubelet's defaults: `/var/log/pods` (its `podLogsDir` setting) and
    /// `/var/log/containers` (fixed).
    pub fn host() -> Self {
        Self::new(DEFAULT_POD_LOGS_DIR, "/var/log/containers")
    }

    /// The directory that names the pods.
    pub fn pods_dir(&self) -> &Path {
        &self.pods_dir
    }

    /// Whether this node has the kubelet's pod log directories at all.
    pub fn present(&self) -> bool {
        self.pods_dir().is_dir()
    }

    /// Scans again unless the last scan is younger than [`RESCAN`].
    fn refresh(&self) {
        let mut names = self.names.borrow_mut();
        if names.scanned.is_some_and(|t| t.elapsed() < RESCAN) {
            return;
        }
        names.pods = entries(&self.pods_dir)
            .filter_map(|n| parse_pod_dir(&n))
            .map(|(pod, uid)| (uid, pod))
            .collect();
        names.containers = entries(&self.containers_dir)
            .filter_map(|n| parse_container_link(&n))
            .map(|(name, id)| (id, name))
            .collect();
        names.scanned = Some(Instant::now());
    }
}

fn entries(dir: &Path) -> impl Iterator<Item = String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
}

impl PodLookup for KubeletLogs {
    fn pod(&self, uid: &str) -> Option<PodRef> {
        if let Some(p) = self.names.borrow().pods.get(uid) {
            return Some(p.clone());
        }
        self.refresh();
        self.names.borrow().pods.get(uid).cloned()
    }

    fn container_name(&self, container_id: &str) -> Option<String> {
        if let Some(n) = self.names.borrow().containers.get(container_id) {
            return Some(n.clone());
        }
        self.refresh();
        self.names.borrow().containers.get(container_id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "8b6c7e2a-1d2f-4a5b-9c3d-0e1f2a3b4c5d";
    const ID: &str = "3f2a9c1b7d4e5f60718293a4b5c6d7e8f90123456789abcdef0123456789abcd";

    #[test]
    fn pod_directories() {
        let (pod, uid) = parse_pod_dir(&format!("ml_vllm-0_{UID}")).unwrap();
        assert_eq!(
            (pod.namespace.as_str(), pod.name.as_str()),
            ("ml", "vllm-0")
        );
        assert_eq!(uid, UID);
        // Dots and dashes are a subdomain's; a static pod's UID is a hash.
        let (pod, uid) = parse_pod_dir("kube-system_etcd-cp.example.com_5d41402abc4b2a76").unwrap();
        assert_eq!(pod.name, "etcd-cp.example.com");
        assert_eq!(uid, "5d41402abc4b2a76");
        for bad in [
            "ml_vllm",
            "ml__x",
            "_vllm_x",
            "ml_vllm_",
            "ml_vllm_a_b",
            "README",
        ] {
            assert_eq!(parse_pod_dir(bad), None, "{bad}");
        }
    }

    #[test]
    fn container_links() {
        assert_eq!(
            parse_container_link(&format!("vllm-0_ml_model-server-{ID}.log")),
            Some(("model-server".to_string(), ID.to_string()))
        );
        for bad in [
            format!("vllm-0_ml_model-server-{ID}"), // not .log
            format!("vllm-0_ml_model-server-{}.log", &ID[..40]), // cut by the kubelet
            format!("vllm-0_ml_-{ID}.log"),         // no container name
            format!("vllm-0_model-server-{ID}.log"), // no namespace
        ] {
            assert_eq!(parse_container_link(&bad), None, "{bad}");
        }
    }

    #[test]
    fn lookup_scans_again_for_a_pod_started_since() {
        let root = tempfile::tempdir().unwrap();
        let logs = KubeletLogs::new(root.path().join("pods"), root.path().join("containers"));
        assert!(!logs.present());
        assert_eq!(logs.pod(UID), None);
        std::fs::create_dir_all(root.path().join(format!("pods/ml_vllm-0_{UID}/vllm"))).unwrap();
        std::fs::create_dir_all(root.path().join("containers")).unwrap();
        std::os::unix::fs::symlink(
            "/nowhere",
            root.path()
                .join(format!("containers/vllm-0_ml_vllm-{ID}.log")),
        )
        .unwrap();
        assert!(logs.present());
        // The miss above scanned less than a second ago: no rescan yet.
        assert_eq!(logs.pod(UID), None);
        std::thread::sleep(RESCAN);
        assert_eq!(
            logs.pod(UID),
            Some(PodRef {
                namespace: "ml".into(),
                name: "vllm-0".into()
            })
        );
        assert_eq!(logs.container_name(ID).as_deref(), Some("vllm"));
        assert_eq!(logs.container_name(&ID.replace('3', "4")), None);
    }
}
