//! What a user may do to a path, as the kernel will decide it: a forked
//! child takes the user's identity and asks access(2); the mode bits are
//! the fallback when it cannot. Observed for the kubelet-access check.

use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

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
pub fn reachable(id: &Identity, path: &Path, want: u32) -> Result<(), String> {
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

pub fn access_name(want: u32) -> &'static str {
    match want {
        1 => "search",
        4 => "read",
        5 => "listing",
        6 => "read-write",
        7 => "full access",
        _ => "access",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
