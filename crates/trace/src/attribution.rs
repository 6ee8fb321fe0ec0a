//! From a cgroup to a container and a pod. The path grammar is pure (table
//! tests below); resolving a cgroup id to a path reads `/sys/fs/cgroup` or
//! `/proc/<pid>/cgroup` and caches.
//!
//! Layouts handled (cgroup v1 paths are the same strings under each
//! controller's hierarchy):
//! - systemd driver: `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope`
//!   (the uid's dashes are underscores: systemd reserves `-` for nesting);
//!   CRI-O: `crio-<id>.scope`, sometimes with a trailing `/container`; docker: `docker-<id>.scope`.
//! - cgroupfs driver: `/kubepods/burstable/pod<uid>/<id>`, CRI-O `/kubepods/pod<uid>/crio-<id>`.
//! - guaranteed pods sit directly under `kubepods` (no QoS level); nested
//!   prefixes (kind, a node inside a container) are skipped.

use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What a cgroup path says about the workload in it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Attribution {
    /// The cgroup path (relative to the hierarchy root), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// The container's name, from a [`PodLookup`] that knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    /// Filled by a [`PodLookup`] (the API-server issue); `None` until then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodRef>,
}

/// A pod's name and namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
}

/// The hook for pod name/namespace resolution: the daemon's pod index (from
/// the API server) and the kubelet's log directories ([`crate::kubelet_logs`])
/// implement it.
pub trait PodLookup {
    fn pod(&self, uid: &str) -> Option<PodRef>;
    /// The name of the container with this runtime id, when known.
    fn container_name(&self, _container_id: &str) -> Option<String> {
        None
    }
    /// The profile change a row's container started after, if the lookup
    /// knows the container's profile, start and the profile's versions.
    fn change(
        &self,
        _row: &super::SummaryRow,
    ) -> Option<nodeproof_findings::denial_change::DenialChange> {
        None
    }
}

/// No API server: pods stay identified by UID only.
pub struct NoPodLookup;

impl PodLookup for NoPodLookup {
    fn pod(&self, _uid: &str) -> Option<PodRef> {
        None
    }
}

/// Parses a cgroup path into container id, pod UID and QoS class.
pub fn parse_cgroup_path(path: &str) -> Attribution {
    let mut out = Attribution {
        cgroup: Some(path.to_string()),
        ..Attribution::default()
    };
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let Some(start) = segments
        .iter()
        .position(|s| *s == "kubepods" || *s == "kubepods.slice")
    else {
        return out;
    };
    for seg in &segments[start + 1..] {
        if out.pod_uid.is_none() {
            if let Some(qos) = qos_of(seg) {
                out.qos = Some(qos.to_string());
                continue;
            }
            if let Some(uid) = pod_uid_of(seg) {
                out.pod_uid = Some(uid);
                if out.qos.is_none() {
                    out.qos = Some("guaranteed".to_string());
                }
                continue;
            }
            return out;
        }
        if let Some(id) = container_id_of(seg) {
            out.container_id = Some(id);
        }
        // Anything deeper (CRI-O's `container`, a process's own sub-cgroup) keeps the id.
        break;
    }
    out
}

fn qos_of(seg: &str) -> Option<&'static str> {
    match seg {
        "burstable" | "kubepods-burstable.slice" => Some("burstable"),
        "besteffort" | "kubepods-besteffort.slice" => Some("besteffort"),
        _ => None,
    }
}

fn pod_uid_of(seg: &str) -> Option<String> {
    // systemd: kubepods[-<qos>]-pod<uid>.slice, uid with `_` for `-`.
    if let Some(rest) = seg.strip_suffix(".slice") {
        let idx = rest.rfind("-pod")?;
        if !rest.starts_with("kubepods") {
            return None;
        }
        let uid = rest[idx + 4..].replace('_', "-");
        return is_uid(&uid).then_some(uid);
    }
    let uid = seg.strip_prefix("pod")?;
    is_uid(uid).then(|| uid.to_string())
}

fn is_uid(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

fn container_id_of(seg: &str) -> Option<String> {
    let seg = seg.strip_suffix(".scope").unwrap_or(seg);
    // CRI-O's conmon monitor lives beside the container: not the workload.
    if seg.starts_with("crio-conmon-") {
        return None;
    }
    let id = [
        "cri-containerd-",
        "crio-",
        "docker-",
        "containerd-",
        "cri-o-",
    ]
    .iter()
    .find_map(|p| seg.strip_prefix(p))
    .unwrap_or(seg);
    (id.len() >= 12 && id.chars().all(|c| c.is_ascii_hexdigit())).then(|| id.to_string())
}

/// Picks the interesting path out of `/proc/<pid>/cgroup`: the v2 line
/// (`0::/path`) on a unified host; on v1, a path that names kubepods (any
/// controller carries the same path), else the `name=systemd` or first one.
pub fn parse_proc_cgroup(contents: &str) -> Option<String> {
    let mut v2 = None;
    let mut kube = None;
    let mut systemd = None;
    let mut first = None;
    for line in contents.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrl), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if id == "0" && ctrl.is_empty() {
            v2 = Some(path);
        }
        if kube.is_none() && path.contains("kubepods") {
            kube = Some(path);
        }
        if ctrl == "name=systemd" {
            systemd = Some(path);
        }
        if first.is_none() && !path.is_empty() {
            first = Some(path);
        }
    }
    kube.or(v2).or(systemd).or(first).map(str::to_string)
}

/// Resolves cgroup ids (the kernfs inode number of a v2 cgroup directory) to
/// paths, falling back to `/proc/<pid>/cgroup` (cgroup v1, or a cgroup gone
/// already). Ids are learned as cgroups are created ([`Self::learn`], fed
/// from the kernel's `cgroup_mkdir`) and by walking the tree on a miss; both
/// caches are bounded (see [`CACHE_ENTRIES`]).
pub struct CgroupResolver {
    root: PathBuf,
    proc_root: PathBuf,
    by_id: Bounded<u64, String>,
    by_pid: Bounded<u32, Option<String>>,
    walks: u32,
}

/// Walk depth and rescan bounds: kubepods paths are 4–6 levels deep, and a
/// storm of unknown ids must not turn into a storm of tree walks.
const MAX_DEPTH: usize = 8;
const MAX_WALKS: u32 = 64;

/// Entries of each cache (ids, pids). A node's cgroup2 tree holds a few
/// hundred directories (110 pods by default, a few containers each, plus the
/// system slices), so 4096 keeps every live one and the last few thousand
/// gone ones, whose counts may still be unread. Paths are at most 511 bytes
/// (the kernel record's buffer), about 200 for a kubepods container: the id
/// cache stays under 1 MiB in practice, 2.2 MiB at worst. When full, the
/// least recently used eighth is dropped; a dropped id that is still live is
/// found again by a walk, a gone one is then unattributed.
pub const CACHE_ENTRIES: usize = 4096;

/// A map that keeps at most `cap` entries, dropping the least recently used
/// eighth when full (amortised: one sort per `cap / 8` inserts). No LRU crate
/// is in the workspace and this is all the resolver needs.
struct Bounded<K, V> {
    map: HashMap<K, (V, u64)>,
    tick: u64,
    cap: usize,
}

impl<K: std::hash::Hash + Eq + Copy, V> Bounded<K, V> {
    fn new(cap: usize) -> Self {
        Self {
            map: HashMap::new(),
            tick: 0,
            cap: cap.max(1),
        }
    }

    fn get(&mut self, k: &K) -> Option<&V> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(k).map(|(v, used)| {
            *used = tick;
            &*v
        })
    }

    fn insert(&mut self, k: K, v: V) {
        if self.map.len() >= self.cap && !self.map.contains_key(&k) {
            let mut used: Vec<u64> = self.map.values().map(|(_, u)| *u).collect();
            let drop = (self.cap / 8).max(1);
            let (_, cut, _) = used.select_nth_unstable(drop - 1);
            let cut = *cut;
            self.map.retain(|_, (_, u)| *u > cut);
        }
        self.tick += 1;
        self.map.insert(k, (v, self.tick));
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

impl CgroupResolver {
    pub fn new(root: impl Into<PathBuf>, proc_root: impl Into<PathBuf>) -> Self {
        Self::with_capacity(root, proc_root, CACHE_ENTRIES)
    }

    /// A resolver whose caches hold `entries` each.
    pub fn with_capacity(
        root: impl Into<PathBuf>,
        proc_root: impl Into<PathBuf>,
        entries: usize,
    ) -> Self {
        Self {
            root: root.into(),
            proc_root: proc_root.into(),
            by_id: Bounded::new(entries),
            by_pid: Bounded::new(entries),
            walks: 0,
        }
    }

    /// Remembers a cgroup as it is created, so that its denials are
    /// attributed even when it is gone before they are read.
    pub fn learn(&mut self, id: u64, path: String) {
        self.by_id.insert(id, path);
    }

    /// Cgroup ids currently remembered.
    pub fn known_ids(&self) -> usize {
        self.by_id.len()
    }

    /// The host's resolver: the cgroup2 mount (`/sys/fs/cgroup` on unified
    /// hosts, `/sys/fs/cgroup/unified` on hybrid ones), and `/proc`.
    pub fn host() -> Self {
        let root = std::fs::read_to_string("/proc/self/mounts")
            .ok()
            .and_then(|m| cgroup2_mount(&m))
            .unwrap_or_else(|| "/sys/fs/cgroup".to_string());
        Self::new(root, "/proc")
    }

    /// The cgroup path for a denial, by id first, then by the process.
    pub fn path(&mut self, cgroup_id: u64, pid: u32) -> Option<String> {
        if let Some(p) = self.by_id.get(&cgroup_id) {
            return Some(p.clone());
        }
        if cgroup_id != 0 && self.walks < MAX_WALKS {
            self.walks += 1;
            let mut found = HashMap::new();
            walk(&self.root, &self.root, 0, &mut found);
            let hit = found.remove(&cgroup_id);
            // The tree may be larger than the cache: the id asked for goes in last.
            for (id, path) in found {
                self.by_id.insert(id, path);
            }
            if let Some(p) = hit {
                self.by_id.insert(cgroup_id, p.clone());
                return Some(p);
            }
        }
        self.proc_path(pid)
    }

    /// The process's cgroup path from `/proc/<pid>/cgroup`, cached (the
    /// process may be gone by the time its counts are summarized).
    fn proc_path(&mut self, pid: u32) -> Option<String> {
        if let Some(p) = self.by_pid.get(&pid) {
            return p.clone();
        }
        let file = self.proc_root.join(pid.to_string()).join("cgroup");
        let path = std::fs::read_to_string(file)
            .ok()
            .and_then(|c| parse_proc_cgroup(&c));
        self.by_pid.insert(pid, path.clone());
        path
    }

    /// Full attribution of a denial. The id names a cgroup2 directory; on
    /// cgroup v1 or hybrid hosts the kubepods layout may exist only in the v1
    /// hierarchies, so a path without a pod is checked against the process's
    /// own cgroup file too.
    pub fn attribute(&mut self, cgroup_id: u64, pid: u32, pods: &dyn PodLookup) -> Attribution {
        let mut a = match self.path(cgroup_id, pid) {
            Some(path) => parse_cgroup_path(&path),
            None => Attribution::default(),
        };
        if a.pod_uid.is_none() {
            if let Some(v1) = self.proc_path(pid).map(|p| parse_cgroup_path(&p)) {
                if v1.pod_uid.is_some() {
                    a = v1;
                }
            }
        }
        if let Some(uid) = &a.pod_uid {
            a.pod = pods.pod(uid);
        }
        if let Some(id) = &a.container_id {
            a.container = pods.container_name(id);
        }
        a
    }
}

/// The mount point of the cgroup2 hierarchy in a `/proc/self/mounts` text.
pub fn cgroup2_mount(mounts: &str) -> Option<String> {
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup2").then(|| dir.to_string())
    })
}

/// Every cgroup2 directory under `root` (to 8 levels), id (inode) to its
/// path from `root`: what `nodeproof record` matches a pod's containers in.
pub fn cgroup_dirs(root: &Path) -> HashMap<u64, String> {
    let mut out = HashMap::new();
    walk(root, root, 0, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, depth: usize, out: &mut HashMap<u64, String>) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(dir) else {
        return;
    };
    let rel = dir.strip_prefix(root).unwrap_or(dir);
    out.insert(meta.ino(), format!("/{}", rel.display()));
    if depth >= MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            walk(root, &e.path(), depth + 1, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "8b6c7e2a-1d2f-4a5b-9c3d-0e1f2a3b4c5d";
    const ID: &str = "3f2a9c1b7d4e5f60718293a4b5c6d7e8f90123456789abcdef0123456789abcd";

    #[test]
    fn kubepods_layouts() {
        let uid_ = UID.replace('-', "_");
        // (path, pod uid, container id, qos)
        type Row<'a> = (String, Option<&'a str>, Option<&'a str>, Option<&'a str>);
        let table: Vec<Row> = vec![
            // systemd driver, containerd
            (
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/cri-containerd-{ID}.scope"),
                Some(UID), Some(ID), Some("burstable"),
            ),
            // systemd driver, guaranteed, CRI-O with its `container` sub-cgroup
            (
                format!("/kubepods.slice/kubepods-pod{uid_}.slice/crio-{ID}.scope/container"),
                Some(UID), Some(ID), Some("guaranteed"),
            ),
            // systemd driver, besteffort, docker
            (
                format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid_}.slice/docker-{ID}.scope"),
                Some(UID), Some(ID), Some("besteffort"),
            ),
            // CRI-O conmon: the pod but no container
            (
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/crio-conmon-{ID}.scope"),
                Some(UID), None, Some("burstable"),
            ),
            // cgroupfs driver, containerd
            (format!("/kubepods/burstable/pod{UID}/{ID}"), Some(UID), Some(ID), Some("burstable")),
            // cgroupfs driver, guaranteed, CRI-O
            (format!("/kubepods/pod{UID}/crio-{ID}"), Some(UID), Some(ID), Some("guaranteed")),
            // nested under kind's node container
            (
                format!("/system.slice/docker-abc.scope/kubepods/besteffort/pod{UID}/{ID}"),
                Some(UID), Some(ID), Some("besteffort"),
            ),
            // the pod cgroup itself (a pause-less process)
            (format!("/kubepods/burstable/pod{UID}"), Some(UID), None, Some("burstable")),
            // not Kubernetes
            ("/system.slice/sshd.service".to_string(), None, None, None),
            ("/user.slice/user-0.slice/session-1.scope".to_string(), None, None, None),
            ("/".to_string(), None, None, None),
        ];
        for (path, uid, id, qos) in table {
            let a = parse_cgroup_path(&path);
            assert_eq!(a.pod_uid.as_deref(), uid, "{path}");
            assert_eq!(a.container_id.as_deref(), id, "{path}");
            assert_eq!(a.qos.as_deref(), qos, "{path}");
            assert_eq!(a.cgroup.as_deref(), Some(path.as_str()));
        }
    }

    #[test]
    fn proc_cgroup_v1_and_v2() {
        assert_eq!(
            parse_proc_cgroup("0::/system.slice/foo.service\n").as_deref(),
            Some("/system.slice/foo.service")
        );
        let v1 = format!(
            "12:pids:/kubepods/burstable/pod{UID}/{ID}\n11:memory:/kubepods/burstable/pod{UID}/{ID}\n1:name=systemd:/kubepods/burstable/pod{UID}/{ID}\n0::/\n"
        );
        assert_eq!(
            parse_proc_cgroup(&v1),
            Some(format!("/kubepods/burstable/pod{UID}/{ID}"))
        );
        assert_eq!(
            parse_proc_cgroup("3:cpu:/a\n1:name=systemd:/user.slice\n").as_deref(),
            Some("/user.slice")
        );
        assert_eq!(parse_proc_cgroup(""), None);
    }

    #[test]
    fn cgroup2_mount_unified_and_hybrid() {
        assert_eq!(
            cgroup2_mount("cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n").as_deref(),
            Some("/sys/fs/cgroup")
        );
        let hybrid = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup /sys/fs/cgroup/pids cgroup rw,pids 0 0\ncgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        assert_eq!(
            cgroup2_mount(hybrid).as_deref(),
            Some("/sys/fs/cgroup/unified")
        );
        assert_eq!(cgroup2_mount("proc /proc proc rw 0 0\n"), None);
    }

    #[test]
    fn resolver_by_id_and_by_pid() {
        use std::os::unix::fs::MetadataExt;
        let cg = tempfile::tempdir().unwrap();
        let proc_ = tempfile::tempdir().unwrap();
        let leaf = cg.path().join(format!("kubepods/burstable/pod{UID}/{ID}"));
        std::fs::create_dir_all(&leaf).unwrap();
        let ino = std::fs::metadata(&leaf).unwrap().ino();
        std::fs::create_dir_all(proc_.path().join("77")).unwrap();
        std::fs::write(
            proc_.path().join("77/cgroup"),
            format!("0::/kubepods/besteffort/pod{UID}/{ID}\n"),
        )
        .unwrap();

        struct OnePod;
        impl PodLookup for OnePod {
            fn pod(&self, uid: &str) -> Option<PodRef> {
                (uid == UID).then(|| PodRef {
                    namespace: "default".into(),
                    name: "web-0".into(),
                })
            }
        }

        let mut r = CgroupResolver::new(cg.path(), proc_.path());
        let a = r.attribute(ino, 1, &OnePod);
        assert_eq!(a.container_id.as_deref(), Some(ID));
        assert_eq!(a.qos.as_deref(), Some("burstable"));
        assert_eq!(a.pod.as_ref().map(|p| p.name.as_str()), Some("web-0"));
        // Unknown id: falls back to the process's cgroup file.
        let b = r.attribute(u64::MAX, 77, &NoPodLookup);
        assert_eq!(b.qos.as_deref(), Some("besteffort"));
        assert_eq!(b.pod, None);
        // Hybrid host: the id names a v2 cgroup outside kubepods, the v1 lines know the pod.
        std::fs::create_dir_all(cg.path().join("system.slice")).unwrap();
        let sys_ino = std::fs::metadata(cg.path().join("system.slice"))
            .unwrap()
            .ino();
        std::fs::create_dir_all(proc_.path().join("79")).unwrap();
        std::fs::write(
            proc_.path().join("79/cgroup"),
            format!("4:memory:/kubepods/pod{UID}/{ID}\n0::/system.slice\n"),
        )
        .unwrap();
        let mut r = CgroupResolver::new(cg.path(), proc_.path());
        let c = r.attribute(sys_ino, 79, &NoPodLookup);
        assert_eq!(c.qos.as_deref(), Some("guaranteed"));
        assert_eq!(c.container_id.as_deref(), Some(ID));
        // Neither: nothing.
        assert_eq!(
            r.attribute(u64::MAX - 1, 78, &NoPodLookup),
            Attribution::default()
        );
    }

    /// A cgroup learned at creation resolves after its directory and its
    /// process are gone (the short-lived container), where a walk finds nothing.
    #[test]
    fn learned_cgroup_resolves_after_it_is_gone() {
        let cg = tempfile::tempdir().unwrap();
        let proc_ = tempfile::tempdir().unwrap();
        let uid_ = UID.replace('-', "_");
        let path = format!("/kubepods.slice/kubepods-pod{uid_}.slice/cri-containerd-{ID}.scope");
        let mut r = CgroupResolver::new(cg.path(), proc_.path());
        assert_eq!(
            r.attribute(9_000_001, 4242, &NoPodLookup),
            Attribution::default()
        );
        r.learn(9_000_002, path.clone());
        let a = r.attribute(9_000_002, 4243, &NoPodLookup);
        assert_eq!(a.cgroup.as_deref(), Some(path.as_str()));
        assert_eq!(a.pod_uid.as_deref(), Some(UID));
        assert_eq!(a.container_id.as_deref(), Some(ID));
        assert_eq!(a.qos.as_deref(), Some("guaranteed"));
    }

    /// The caches never exceed their bound; what is dropped is the least
    /// recently used, so an id in use survives a flood of new cgroups.
    #[test]
    fn caches_are_bounded_and_keep_what_is_used() {
        let cg = tempfile::tempdir().unwrap();
        let mut r = CgroupResolver::with_capacity(cg.path(), cg.path(), 64);
        r.learn(1, "/kubepods/pod-in-use".to_string());
        for id in 2..10_000u64 {
            r.learn(id, format!("/kubepods/c{id}"));
            assert!(r.known_ids() <= 64, "{} entries after {id}", r.known_ids());
            // The in-use cgroup is looked up as its denials arrive.
            if id % 16 == 0 {
                assert_eq!(r.path(1, 0).as_deref(), Some("/kubepods/pod-in-use"));
            }
        }
        assert_eq!(r.path(1, 0).as_deref(), Some("/kubepods/pod-in-use"));
        assert_eq!(r.path(9_999, 0).as_deref(), Some("/kubepods/c9999"));
        // An early one went: resolved by neither the cache nor a walk now.
        assert_eq!(r.path(2, 0), None);
        // The pid cache is bounded the same way.
        for pid in 0..1000u32 {
            r.proc_path(pid);
        }
        assert!(r.by_pid.len() <= 64);
    }
}
