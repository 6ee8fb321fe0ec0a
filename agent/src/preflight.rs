//! `nodeproof preflight`: what the kubelet needs before it starts, as far
//! as this node alone can tell (the API server is not asked):
//!
//! - the seccomp profiles under the root, and those local static pods name
//!   (`localhostProfile:` in the manifest directory), present and valid;
//! - the GPU driver answering, on nodes with NVIDIA devices;
//! - for a rootless kubelet (`User=` in kubelet.service or its drop-ins):
//!   that this user can reach its certificates, state, plugin and seccomp
//!   directories and the container runtime's socket.
//!
//! Run by kubelet.service's `ExecStartPre=` (systemd/kubelet.service.d/).

use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::finding::{Finding, Status};
use crate::profile::lint::{LintOptions, ProfileReport};
use crate::profile::node;

/// Where kubelet.service and its drop-ins may live, in systemd's order.
pub const UNIT_DIRS: [&str; 4] = [
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
    "/run/systemd/system",
    "/etc/systemd/system",
];

/// Paths a rootless kubelet needs, with the access it needs.
#[derive(Debug, Clone)]
pub struct Layout {
    pub unit_dirs: Vec<PathBuf>,
    pub manifests: PathBuf,
    pub kubelet_root: PathBuf,
    pub runtime_sockets: Vec<PathBuf>,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            unit_dirs: UNIT_DIRS.iter().map(PathBuf::from).collect(),
            manifests: PathBuf::from("/etc/kubernetes/manifests"),
            kubelet_root: PathBuf::from("/var/lib/kubelet"),
            runtime_sockets: vec![
                PathBuf::from("/run/containerd/containerd.sock"),
                PathBuf::from("/var/run/crio/crio.sock"),
            ],
        }
    }
}

/// The `User=` the kubelet runs as, the last assignment winning (unit
/// first, then drop-ins in name order, later directories overriding).
pub fn kubelet_user(unit_dirs: &[PathBuf]) -> Option<String> {
    let mut files = Vec::new();
    for dir in unit_dirs {
        files.push(dir.join("kubelet.service"));
    }
    let mut dropins: Vec<(String, PathBuf)> = Vec::new();
    for dir in unit_dirs {
        if let Ok(entries) = std::fs::read_dir(dir.join("kubelet.service.d")) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.ends_with(".conf") {
                    // A later directory's file of the same name replaces the earlier one.
                    dropins.retain(|(n, _)| n != &name);
                    dropins.push((name, e.path()));
                }
            }
        }
    }
    dropins.sort();
    files.extend(dropins.into_iter().map(|(_, p)| p));
    let mut user = None;
    for f in files {
        if let Ok(text) = std::fs::read_to_string(&f) {
            if let Some(u) = user_in(&text) {
                user = Some(u);
            }
        }
    }
    user.filter(|u| !u.is_empty() && u != "root" && u != "0")
}

/// The last `User=` of a unit file's `[Service]` section (`User=` alone resets).
pub fn user_in(unit: &str) -> Option<String> {
    let mut in_service = false;
    let mut user = None;
    for line in unit.lines().map(str::trim) {
        if line.starts_with('[') {
            in_service = line == "[Service]";
        } else if in_service {
            if let Some(v) = line.strip_prefix("User=") {
                user = Some(v.trim().to_string());
            }
        }
    }
    user
}

/// Who a user is for permission checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub uid: u32,
    pub gids: Vec<u32>,
}

/// Looks the user and its groups up through NSS.
pub fn identity(name: &str) -> Option<Identity> {
    let cname = CString::new(name).ok()?;
    // SAFETY: getpwnam returns a pointer to static storage or null; read at once.
    let pw = unsafe { libc::getpwnam(cname.as_ptr()) };
    if pw.is_null() {
        return None;
    }
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    let mut n: libc::c_int = 64;
    let mut groups = vec![0 as libc::gid_t; n as usize];
    // SAFETY: buffer of n entries; n is updated to the real count.
    let r = unsafe { libc::getgrouplist(cname.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
    groups.truncate(if r < 0 { 0 } else { n as usize });
    if !groups.contains(&gid) {
        groups.push(gid);
    }
    Some(Identity {
        name: name.to_string(),
        uid,
        gids: groups,
    })
}

/// `want` is a mask of 4 (read), 2 (write), 1 (execute/search). Mode bits
/// only: ACLs are not consulted (a user granted access by an ACL alone is
/// reported as lacking it, which errs on the side of a warning).
pub fn can(id: &Identity, uid: u32, gid: u32, mode: u32, want: u32) -> bool {
    if id.uid == 0 {
        return true;
    }
    let bits = if id.uid == uid {
        (mode >> 6) & 7
    } else if id.gids.contains(&gid) {
        (mode >> 3) & 7
    } else {
        mode & 7
    };
    bits & want == want
}

/// Every directory on the way must be searchable, then the path itself.
fn reachable(id: &Identity, path: &Path, want: u32) -> Result<(), String> {
    let mut prefix = PathBuf::new();
    let components: Vec<_> = path.components().collect();
    for (i, c) in components.iter().enumerate() {
        prefix.push(c);
        let meta = std::fs::metadata(&prefix).map_err(|e| format!("{}: {e}", prefix.display()))?;
        let last = i + 1 == components.len();
        let need = if last { want } else { 1 };
        if !can(id, meta.uid(), meta.gid(), meta.mode(), need) {
            return Err(format!(
                "{} (owner {}:{}, mode {:o}) denies {} to {}",
                prefix.display(),
                meta.uid(),
                meta.gid(),
                meta.mode() & 0o7777,
                access_name(need),
                id.name
            ));
        }
    }
    Ok(())
}

fn access_name(want: u32) -> &'static str {
    match want {
        1 => "search",
        4 => "read",
        5 => "listing",
        6 => "read-write",
        7 => "full access",
        _ => "access",
    }
}

/// The rootless kubelet's paths, each with what it needs.
pub fn rootless_findings(id: &Identity, layout: &Layout, seccomp_root: &Path) -> Vec<Finding> {
    let k = &layout.kubelet_root;
    let mut wanted: Vec<(PathBuf, u32)> = vec![
        (k.join("pki"), 5),
        (k.clone(), 7),
        (k.join("plugins"), 7),
        (k.join("plugins_registry"), 7),
        (seccomp_root.to_path_buf(), 5),
    ];
    if let Some(sock) = layout.runtime_sockets.iter().find(|s| s.exists()) {
        wanted.push((sock.clone(), 6));
    }
    wanted
        .into_iter()
        .map(|(path, want)| {
            let (status, reason, message) = match reachable(id, &path, want) {
                Ok(()) => (
                    Status::Ok,
                    "Accessible",
                    format!("{} has {}", id.name, access_name(want)),
                ),
                Err(m) => (Status::Failed, "AccessDenied", m),
            };
            Finding {
                check: "kubelet-access",
                subject: path.display().to_string(),
                status,
                reason: reason.into(),
                message,
            }
        })
        .collect()
}

/// `localhostProfile:` values in local static pod manifests (a line scan:
/// the key is unambiguous and a YAML parser is not worth it for this).
pub fn static_pod_profiles(manifests: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(manifests) else {
        return out;
    };
    let mut files: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    files.sort();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        for line in text.lines() {
            if let Some(v) = line.trim().strip_prefix("localhostProfile:") {
                let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
                if !v.is_empty() {
                    out.push((f.clone(), v.to_string()));
                }
            }
        }
    }
    out
}

/// Profiles static pods name but the root lacks, or that fail the lint.
pub fn referenced_findings(
    refs: &[(PathBuf, String)],
    root: &Path,
    reports: &[ProfileReport],
) -> Vec<Finding> {
    refs.iter()
        .filter_map(|(manifest, profile)| {
            let path = root.join(profile);
            let shown = path.display().to_string();
            let report = reports.iter().find(|r| Path::new(&r.path) == path);
            let (reason, message) = match report {
                None if !path.exists() => (
                    "ProfileMissing",
                    format!("{} names it, but it does not exist", manifest.display()),
                ),
                Some(r) if !node::passes(r, false) => (
                    "ProfileFails",
                    format!(
                        "{} names it; outcome {}",
                        manifest.display(),
                        r.outcome.as_str()
                    ),
                ),
                _ => return None,
            };
            Some(Finding {
                check: "static-pod-profile",
                subject: shown,
                status: Status::Failed,
                reason: reason.into(),
                message,
            })
        })
        .collect()
}

/// Everything preflight checks; the CLI prints it like `check`.
pub fn run(
    seccomp_root: &Path,
    lint: &LintOptions,
    gpu: crate::gpu::GpuReport,
    layout: &Layout,
) -> Vec<Finding> {
    let reports = node::lint_root(seccomp_root, lint);
    let mut findings = node::findings(&reports);
    findings.extend(referenced_findings(
        &static_pod_profiles(&layout.manifests),
        seccomp_root,
        &reports,
    ));
    if !gpu.no_gpu() {
        findings.extend(gpu.findings());
    }
    if let Some(user) = kubelet_user(&layout.unit_dirs) {
        match identity(&user) {
            Some(id) => findings.extend(rootless_findings(&id, layout, seccomp_root)),
            None => findings.push(Finding {
                check: "kubelet-access",
                subject: user.clone(),
                status: Status::Failed,
                reason: "UnknownUser".into(),
                message: format!("kubelet runs as User={user}, which does not exist"),
            }),
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_user_in_the_service_section_wins_and_root_is_not_rootless() {
        assert_eq!(
            user_in("[Unit]\nUser=x\n[Service]\nUser=kube\nExecStart=/k\n"),
            Some("kube".into())
        );
        assert_eq!(
            user_in("[Service]\nUser=kube\nUser=\n"),
            Some(String::new())
        );
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("lib"), dir.path().join("etc"));
        std::fs::create_dir_all(a.join("kubelet.service.d")).unwrap();
        std::fs::create_dir_all(b.join("kubelet.service.d")).unwrap();
        std::fs::write(a.join("kubelet.service"), "[Service]\nExecStart=/k\n").unwrap();
        assert_eq!(kubelet_user(&[a.clone(), b.clone()]), None);
        std::fs::write(
            a.join("kubelet.service.d/10-user.conf"),
            "[Service]\nUser=kube\n",
        )
        .unwrap();
        assert_eq!(kubelet_user(&[a.clone(), b.clone()]), Some("kube".into()));
        // Same name in a later directory replaces it.
        std::fs::write(
            b.join("kubelet.service.d/10-user.conf"),
            "[Service]\nUser=root\n",
        )
        .unwrap();
        assert_eq!(kubelet_user(&[a, b]), None);
    }

    #[test]
    fn mode_bits_decide_by_owner_then_group_then_other() {
        let id = Identity {
            name: "kube".into(),
            uid: 1000,
            gids: vec![1000, 50],
        };
        assert!(can(&id, 1000, 0, 0o700, 7));
        assert!(!can(&id, 0, 0, 0o700, 4));
        assert!(can(&id, 0, 50, 0o750, 5));
        assert!(!can(&id, 0, 50, 0o750, 2));
        assert!(can(&id, 0, 0, 0o755, 5));
        // The owner class applies even when it grants less than other.
        assert!(!can(&id, 1000, 0, 0o077, 4));
    }

    #[test]
    fn a_root_only_directory_on_the_way_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let k = dir.path().join("kubelet");
        std::fs::create_dir_all(k.join("pki")).unwrap();
        std::fs::create_dir_all(k.join("plugins")).unwrap();
        std::fs::create_dir_all(k.join("plugins_registry")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o700)).unwrap();
        let me = std::fs::metadata(&k).unwrap();
        // A user who is neither the owner nor in the group.
        let id = Identity {
            name: "kube".into(),
            uid: me.uid() + 4242,
            gids: vec![me.gid() + 4242],
        };
        let layout = Layout {
            kubelet_root: k.clone(),
            runtime_sockets: vec![],
            ..Layout::default()
        };
        let f = rootless_findings(&id, &layout, dir.path());
        let pki = f.iter().find(|f| f.subject.ends_with("pki")).unwrap();
        assert_eq!(pki.status, Status::Failed, "{f:?}");
        assert!(pki.message.contains("mode 700"), "{}", pki.message);
        // The seccomp root here (the tempdir) is 0700 too, owned by the test.
        let owner = Identity {
            name: "me".into(),
            uid: me.uid(),
            gids: vec![me.gid()],
        };
        assert!(rootless_findings(&owner, &layout, dir.path())
            .iter()
            .all(|f| f.status == Status::Ok));
    }

    #[test]
    fn static_pods_name_profiles_that_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path().join("manifests");
        std::fs::create_dir(&m).unwrap();
        std::fs::write(m.join("a.yaml"), "spec:\n  securityContext:\n    seccompProfile:\n      type: Localhost\n      localhostProfile: \"profiles/missing.json\"\n").unwrap();
        let refs = static_pod_profiles(&m);
        assert_eq!(
            refs,
            vec![(m.join("a.yaml"), "profiles/missing.json".to_string())]
        );
        let f = referenced_findings(&refs, dir.path(), &[]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].reason, "ProfileMissing");
    }
}
