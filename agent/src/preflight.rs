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

use crate::checks::{self, profiles};
use nodeproof_findings::reason::{GpuReason, KubeletAccessReason, ProfileReason, StaticPodReason};
use nodeproof_findings::{Check, Finding, Reason, Status};
use nodeproof_seccomp::lint::{LintOptions, ProfileReport, Runtime};

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
            runtime_sockets: [Runtime::Containerd, Runtime::Crio]
                .iter()
                .flat_map(|r| r.sockets())
                .map(PathBuf::from)
                .collect(),
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
    /// The primary group (also in `gids`).
    pub gid: u32,
    pub gids: Vec<u32>,
}

/// Looks the user and its groups up through NSS.
pub fn identity(name: &str) -> Option<Identity> {
    let cname = CString::new(name).ok()?;
    // getpwnam_r underneath: no static storage another thread could overwrite.
    let pw = nix::unistd::User::from_name(name).ok()??;
    let (uid, gid) = (pw.uid.as_raw(), pw.gid.as_raw());
    // nix grows the buffer for users in more groups than a first guess holds.
    let mut groups: Vec<u32> = nix::unistd::getgrouplist(&cname, pw.gid)
        .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
        .unwrap_or_default();
    if !groups.contains(&gid) {
        groups.push(gid);
    }
    Some(Identity {
        name: name.to_string(),
        uid,
        gid,
        gids: groups,
    })
}

/// `want` is a mask of 4 (read), 2 (write), 1 (execute/search). Mode bits
/// only: the fallback when the kernel cannot be asked (see [`kernel_access`]).
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

/// Asks the kernel, so that ACLs, supplementary groups and every directory's
/// search permission count exactly as they will for the kubelet: a forked
/// child takes the user's uid, gid and groups and calls access(2) on each
/// path in order. `Ok(None)`: all allowed; `Ok(Some(i))`: the first denied.
/// Needs CAP_SETUID and CAP_SETGID (preflight runs as root before kubelet).
pub fn kernel_access(
    id: &Identity,
    checks: &[(&Path, u32)],
) -> Result<Option<usize>, std::io::Error> {
    use std::os::unix::ffi::OsStrExt;
    // Everything the child needs is allocated before the fork.
    let paths = checks
        .iter()
        .map(|(p, _)| CString::new(p.as_os_str().as_bytes()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(std::io::Error::other)?;
    let gids: Vec<libc::gid_t> = id.gids.clone();
    const CANNOT_SWITCH: i32 = 255;
    // SAFETY: the child only makes raw syscalls (no allocation, no locks)
    // and leaves with _exit.
    let pid = match unsafe { nix::unistd::fork() }.map_err(std::io::Error::from)? {
        nix::unistd::ForkResult::Parent { child } => child,
        nix::unistd::ForkResult::Child => {
            // SAFETY: raw syscalls on pointers into `gids` and `paths`, built
            // before fork; _exit never returns.
            unsafe {
                // Raw syscalls: glibc's wrappers would try to change every thread's ids.
                if libc::syscall(libc::SYS_setgroups, gids.len(), gids.as_ptr()) != 0
                    || libc::syscall(libc::SYS_setresgid, id.gid, id.gid, id.gid) != 0
                    || libc::syscall(libc::SYS_setresuid, id.uid, id.uid, id.uid) != 0
                {
                    libc::_exit(CANNOT_SWITCH);
                }
                for (i, (path, (_, want))) in paths.iter().zip(checks).enumerate() {
                    if libc::access(path.as_ptr(), *want as libc::c_int) != 0 {
                        libc::_exit(i.min(250) as i32 + 1);
                    }
                }
                libc::_exit(0);
            }
        }
    };
    use nix::sys::wait::{waitpid, WaitStatus};
    match waitpid(pid, None).map_err(std::io::Error::from)? {
        WaitStatus::Exited(_, 0) => Ok(None),
        WaitStatus::Exited(_, n) if n != CANNOT_SWITCH => Ok(Some(n as usize - 1)),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "cannot take the user's identity in a child",
        )),
    }
}

/// Every directory on the way must be searchable, then the path itself:
/// the kernel decides when it can be asked, else the mode bits.
fn reachable(id: &Identity, path: &Path, want: u32) -> Result<(), String> {
    let mut prefixes = Vec::new();
    let mut prefix = PathBuf::new();
    let components: Vec<_> = path.components().collect();
    for (i, c) in components.iter().enumerate() {
        prefix.push(c);
        let meta = std::fs::metadata(&prefix).map_err(|e| format!("{}: {e}", prefix.display()))?;
        let need = if i + 1 == components.len() { want } else { 1 };
        prefixes.push((prefix.clone(), meta, need));
    }
    let denies = |(p, meta, need): &(PathBuf, std::fs::Metadata, u32), how: &str| {
        format!(
            "{} (owner {}:{}, mode {:o}) denies {} to {}{how}",
            p.display(),
            meta.uid(),
            meta.gid(),
            meta.mode() & 0o7777,
            access_name(*need),
            id.name
        )
    };
    let checks: Vec<(&Path, u32)> = prefixes
        .iter()
        .map(|(p, _, need)| (p.as_path(), *need))
        .collect();
    let by_kernel = if id.uid == 0 {
        Ok(None)
    } else {
        kernel_access(id, &checks)
    };
    match by_kernel {
        Ok(None) => Ok(()),
        Ok(Some(i)) => {
            let p = &prefixes[i];
            // The mode bits would allow it: an ACL (or a security module) denies.
            let how = if can(id, p.1.uid(), p.1.gid(), p.1.mode(), p.2) {
                " (its ACL or a security module)"
            } else {
                ""
            };
            Err(denies(p, how))
        }
        Err(e) => {
            tracing::debug!(error = %e, "kernel access check unavailable; judging by mode bits");
            match prefixes
                .iter()
                .find(|(_, m, need)| !can(id, m.uid(), m.gid(), m.mode(), *need))
            {
                Some(p) => Err(denies(p, " (mode bits only: ACLs not checked)")),
                None => Ok(()),
            }
        }
    }
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
                    KubeletAccessReason::Accessible,
                    format!("{} has {}", id.name, access_name(want)),
                ),
                Err(m) => (Status::Failed, KubeletAccessReason::AccessDenied, m),
            };
            Finding {
                detail: None,
                check: Check::KubeletAccess,
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

/// Each profile static pods name: missing from the root, failing the
/// lint, or present and passing.
pub fn referenced_findings(
    refs: &[(PathBuf, String)],
    root: &Path,
    reports: &[ProfileReport],
) -> Vec<Finding> {
    refs.iter()
        .map(|(manifest, profile)| {
            let path = root.join(profile);
            let shown = path.display().to_string();
            let report = reports.iter().find(|r| Path::new(&r.path) == path);
            let (status, reason, message) = match report {
                None if !path.exists() => (
                    Status::Failed,
                    StaticPodReason::ProfileMissing,
                    format!("{} names it, but it does not exist", manifest.display()),
                ),
                Some(r) if !profiles::passes(r, false) => (
                    Status::Failed,
                    StaticPodReason::ProfileFails,
                    format!(
                        "{} names it; outcome {}",
                        manifest.display(),
                        r.outcome.as_str()
                    ),
                ),
                _ => (
                    Status::Ok,
                    StaticPodReason::ProfilePresent,
                    format!("{} names it; present and predicted ok", manifest.display()),
                ),
            };
            Finding {
                detail: None,
                check: Check::StaticPodProfile,
                subject: shown,
                status,
                reason: reason.into(),
                message,
            }
        })
        .collect()
}

/// A check that did not apply on this host, and why.
fn skipped(check: Check, subject: &Path, reason: impl Into<Reason>, message: String) -> Finding {
    Finding {
        detail: None,
        check,
        subject: subject.display().to_string(),
        status: Status::Skipped,
        reason: reason.into(),
        message,
    }
}

/// Why a directory a check reads holds nothing to check.
fn absent_or(dir: &Path, empty: String) -> String {
    if dir.exists() {
        empty
    } else {
        format!("{} does not exist: nothing to check", dir.display())
    }
}

/// Everything preflight checks, each check said: its findings (ok or
/// failed), or one `skipped` finding that says why it did not apply. The
/// CLI prints it like `check`.
pub fn run(
    seccomp_root: &Path,
    lint: &LintOptions,
    gpu: nodeproof_gpu::GpuReport,
    layout: &Layout,
) -> Vec<Finding> {
    let reports = crate::observe::profiles::lint_root(seccomp_root, lint);
    let mut findings = profiles::findings(&reports);
    if !reports.iter().any(|r| r.is_profile()) {
        let why = format!("no profiles under {}", seccomp_root.display());
        findings.push(skipped(
            Check::SeccompProfile,
            seccomp_root,
            ProfileReason::NoProfiles,
            absent_or(seccomp_root, why),
        ));
    }
    let refs = static_pod_profiles(&layout.manifests);
    if refs.is_empty() {
        let why = format!(
            "no static pod in {} names a localhostProfile",
            layout.manifests.display()
        );
        findings.push(skipped(
            Check::StaticPodProfile,
            &layout.manifests,
            StaticPodReason::NoStaticPodProfiles,
            absent_or(&layout.manifests, why),
        ));
    }
    findings.extend(referenced_findings(&refs, seccomp_root, &reports));
    if gpu.no_gpu() {
        findings.push(Finding {
            detail: None,
            status: Status::Skipped,
            message: "no NVIDIA PCI device on this node: no GPU driver to check".into(),
            ..checks::gpu::findings(&gpu)
                .into_iter()
                .next()
                .unwrap_or(Finding {
                    detail: None,
                    check: Check::GpuDriver,
                    subject: "NVML".into(),
                    status: Status::Skipped,
                    reason: GpuReason::NoGpu.into(),
                    message: String::new(),
                })
        });
    } else {
        findings.extend(checks::gpu::findings(&gpu));
    }
    let user = kubelet_user(&layout.unit_dirs);
    if user.is_none() {
        let unit = Path::new("kubelet.service");
        let found = layout
            .unit_dirs
            .iter()
            .any(|d| d.join("kubelet.service").exists());
        let message = if found {
            "the kubelet runs as root (no User= in kubelet.service or its drop-ins): no rootless access to check".to_string()
        } else {
            let dirs: Vec<String> = layout
                .unit_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            format!(
                "no kubelet.service in {}: no rootless kubelet to check",
                dirs.join(", ")
            )
        };
        findings.push(skipped(
            Check::KubeletAccess,
            unit,
            KubeletAccessReason::NotRootless,
            message,
        ));
    }
    if let Some(user) = user {
        match identity(&user) {
            Some(id) => findings.extend(rootless_findings(&id, layout, seccomp_root)),
            None => findings.push(Finding {
                detail: None,
                check: Check::KubeletAccess,
                subject: user.clone(),
                status: Status::Failed,
                reason: KubeletAccessReason::UnknownUser.into(),
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
            gid: 1000,
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
            gid: me.gid() + 4242,
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
            gid: me.gid(),
            gids: vec![me.gid()],
        };
        assert!(rootless_findings(&owner, &layout, dir.path())
            .iter()
            .all(|f| f.status == Status::Ok));
    }

    /// `setfacl ARGS PATH`; `Err` says why ACLs cannot be tested here.
    fn setfacl(args: &[&str], path: &Path) -> Result<(), String> {
        let out = std::process::Command::new("setfacl")
            .args(args)
            .arg(path)
            .output()
            .map_err(|e| format!("setfacl not runnable ({e}): package acl, cargo xtask setup"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }

    #[test]
    fn acls_decide_as_the_kernel_does_both_ways() {
        // Root: taking another user's identity; setfacl: the ACLs under test.
        use nodeproof_testkit::{require, Need};
        let Some(_) = require(&[Need::Root, Need::Tool("setfacl")]) else {
            return;
        };
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        // A user with no passwd entry: only its ids matter to the kernel.
        let kube = Identity {
            name: "kube".into(),
            uid: 4242,
            gid: 4242,
            gids: vec![4242, 4343],
        };
        // Mode bits deny (root-only), an ACL entry for the user grants.
        let granted = dir.path().join("pki");
        std::fs::create_dir(&granted).unwrap();
        std::fs::set_permissions(&granted, std::fs::Permissions::from_mode(0o700)).unwrap();
        if let Err(why) = setfacl(&["-m", "u:4242:rx"], &granted) {
            panic!("cannot set an ACL on {}: {why}", granted.display());
        }
        // Mode bits allow (world-readable), an ACL entry for a supplementary group denies.
        let denied = dir.path().join("seccomp");
        std::fs::create_dir(&denied).unwrap();
        std::fs::set_permissions(&denied, std::fs::Permissions::from_mode(0o755)).unwrap();
        setfacl(&["-m", "g:4343:---"], &denied).unwrap();
        // A plain mode-bits case on the way: the group owner's bits apply to a supplementary group.
        let group = dir.path().join("group");
        std::fs::create_dir(&group).unwrap();
        std::fs::set_permissions(&group, std::fs::Permissions::from_mode(0o750)).unwrap();
        std::os::unix::fs::chown(&group, None, Some(4343)).unwrap();

        assert_eq!(reachable(&kube, &granted, 5), Ok(()));
        let meta = std::fs::metadata(&granted).unwrap();
        assert!(!can(&kube, meta.uid(), meta.gid(), meta.mode(), 5));
        assert_eq!(
            reachable(&kube, &denied, 5),
            Err(format!(
                "{} (owner 0:0, mode 755) denies listing to kube (its ACL or a security module)",
                denied.display()
            ))
        );
        assert_eq!(reachable(&kube, &group, 5), Ok(()));
        assert_eq!(
            reachable(&kube, &group, 7),
            Err(format!(
                "{} (owner 0:4343, mode 750) denies full access to kube",
                group.display()
            ))
        );
        // Below a directory the user cannot search, the first such directory is named.
        assert_eq!(
            kernel_access(&kube, &[(dir.path(), 1), (&denied, 1), (&granted, 1)]).unwrap(),
            Some(1)
        );
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

    /// On a bare host every check is listed, each skipped with why.
    #[test]
    fn a_bare_host_lists_every_check_skipped_with_why() {
        let dir = tempfile::tempdir().unwrap();
        let (root, host) = (dir.path().join("seccomp"), dir.path().join("host"));
        let layout = Layout {
            unit_dirs: vec![host.join("etc/systemd/system")],
            manifests: host.join("etc/kubernetes/manifests"),
            kubelet_root: host.join("var/lib/kubelet"),
            runtime_sockets: Vec::new(),
        };
        let mut config =
            crate::config::Config::parse(crate::config::EMBEDDED_DEFAULT, Path::new("config.toml"))
                .unwrap();
        // A PCI bus with no device on it.
        std::fs::create_dir_all(host.join("bus/pci/devices")).unwrap();
        config.gpu.sysfs_root = host.clone();
        config.gpu.nvml_library = host.join("libnvidia-ml.so.1").display().to_string();
        let gpu = crate::oneshot::gpu_cycle_alone(&config);
        let got: Vec<(Check, Status, String)> = run(&root, &LintOptions::default(), gpu, &layout)
            .into_iter()
            .map(|f| {
                let message = f.message.replace(&host.display().to_string(), "HOST");
                (
                    f.check,
                    f.status,
                    message.replace(&dir.path().display().to_string(), "DIR"),
                )
            })
            .collect();
        let skipped = |check, m: &str| (check, Status::Skipped, m.to_string());
        assert_eq!(
            got,
            [
                skipped(
                    Check::SeccompProfile,
                    "DIR/seccomp does not exist: nothing to check"
                ),
                skipped(
                    Check::StaticPodProfile,
                    "HOST/etc/kubernetes/manifests does not exist: nothing to check"
                ),
                skipped(
                    Check::GpuDriver,
                    "no NVIDIA PCI device on this node: no GPU driver to check"
                ),
                skipped(
                    Check::KubeletAccess,
                    "no kubelet.service in HOST/etc/systemd/system: no rootless kubelet to check"
                ),
            ]
        );
        // Present but empty, and a kubelet running as root.
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&layout.manifests).unwrap();
        std::fs::create_dir_all(&layout.unit_dirs[0]).unwrap();
        std::fs::write(
            layout.unit_dirs[0].join("kubelet.service"),
            "[Service]\nExecStart=/k\n",
        )
        .unwrap();
        let gpu = crate::oneshot::gpu_cycle_alone(&config);
        let messages: Vec<String> = run(&root, &LintOptions::default(), gpu, &layout)
            .into_iter()
            .filter(|f| f.check != Check::GpuDriver)
            .map(|f| f.message.replace(&dir.path().display().to_string(), "DIR"))
            .collect();
        assert_eq!(
            messages,
            [
                "no profiles under DIR/seccomp",
                "no static pod in DIR/host/etc/kubernetes/manifests names a localhostProfile",
                "the kubelet runs as root (no User= in kubelet.service or its drop-ins): no rootless access to check",
            ]
        );
    }
}
