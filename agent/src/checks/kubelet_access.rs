//! `kubelet-access` (preflight): a rootless kubelet (`User=` in
//! kubelet.service or its drop-ins) must reach its certificates, state,
//! plugin and seccomp directories and the container runtime's socket, as
//! the kernel will decide for that user (ACLs and groups included).

use std::path::{Path, PathBuf};

use nodeproof_findings::reason::OwnReason;
use nodeproof_findings::{Check, Finding, Status};
use strum::{EnumString, IntoStaticStr, VariantArray};

use super::{skipped, Command, Context, NodeCheck, Outcome, Schedule};
use crate::observe::access::{access_name, identity, reachable, Identity};
use crate::observe::kubelet::{self, Layout};

/// The CHECK column of its findings.
pub const CHECK: Check = Check::named("kubelet-access");

/// Whether a rootless kubelet can reach what it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, IntoStaticStr, EnumString, VariantArray)]
pub enum KubeletAccessReason {
    /// The kubelet's user has the access the path needs.
    Accessible,
    AccessDenied,
    /// `User=` names a user this host does not have.
    UnknownUser,
    /// The kubelet runs as root: nothing to check (skipped).
    NotRootless,
}

impl OwnReason for KubeletAccessReason {
    fn meaning(self) -> &'static str {
        match self {
            KubeletAccessReason::Accessible => "the kubelet's user has the access the path needs",
            KubeletAccessReason::AccessDenied => {
                "the kubelet's user lacks it (the mode bits, an ACL or a security module)"
            }
            KubeletAccessReason::UnknownUser => "User= names a user this host does not have",
            KubeletAccessReason::NotRootless => {
                "the kubelet runs as root, or there is no kubelet.service (skipped)"
            }
        }
    }
}

pub struct KubeletAccess;

impl NodeCheck for KubeletAccess {
    fn name(&self) -> &'static str {
        "kubelet-access"
    }
    fn about(&self) -> &'static str {
        "Whether a rootless kubelet can reach its certificates, state, plugin and seccomp directories and the runtime's socket"
    }
    fn findings(&self) -> &'static [Check] {
        &[CHECK]
    }
    fn reasons(&self) -> Vec<(&'static str, &'static str)> {
        KubeletAccessReason::all_with_meanings()
    }
    fn commands(&self) -> &'static [Command] {
        &[Command::Preflight]
    }
    fn schedule(&self) -> Schedule {
        Schedule::NotRun
    }
    fn round(&self, cx: &Context<'_>, _command: Command) -> Outcome {
        let layout = cx.kubelet;
        let unit = kubelet::unit(&layout.unit_dirs, &layout.host);
        let findings = match unit.user {
            None => {
                let message = if !unit.files.is_empty() {
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
                vec![skipped(
                    CHECK,
                    Path::new("kubelet.service"),
                    KubeletAccessReason::NotRootless,
                    message,
                )]
            }
            Some(user) => match identity(&user) {
                Some(id) => rootless_findings(&id, layout, cx.seccomp_root),
                None => vec![Finding {
                    detail: None,
                    check: CHECK,
                    subject: user.clone(),
                    status: Status::Failed,
                    reason: KubeletAccessReason::UnknownUser.into(),
                    message: format!("kubelet runs as User={user}, which does not exist"),
                }],
            },
        };
        crate::judge::Round {
            findings,
            conditions: Vec::new(),
        }
        .into()
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
                check: CHECK,
                subject: path.display().to_string(),
                status,
                reason: reason.into(),
                message,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

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
}
