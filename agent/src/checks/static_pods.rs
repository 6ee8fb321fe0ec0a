//! `static-pods` (preflight): the seccomp profiles local static pods name
//! (`localhostProfile:` in the kubelet's manifest directory) must be
//! present and pass the lint before the kubelet starts them, or they stay
//! in CreateContainerError with no API server to say so.

use std::path::{Path, PathBuf};

use nodeproof_findings::reason::OwnReason;
use nodeproof_findings::{Check, Finding, Status};
use nodeproof_seccomp::lint::ProfileReport;
use strum::{EnumString, IntoStaticStr, VariantArray};

use super::{absent_or, skipped, Command, Context, NodeCheck, Outcome, Schedule};
use crate::judge::profiles;
use crate::observe::kubelet::static_pod_profiles;
use crate::observe::profiles::{lint_options, lint_root_cached};

/// The CHECK column of its findings.
pub const CHECK: Check = Check::named("static-pod-profile");

/// Why a static pod's profile is as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, IntoStaticStr, EnumString, VariantArray)]
pub enum StaticPodReason {
    ProfileMissing,
    /// Present, but it does not pass the lint.
    ProfileFails,
    ProfilePresent,
    /// No static pod names a `localhostProfile` (skipped).
    NoStaticPodProfiles,
}

impl OwnReason for StaticPodReason {
    fn meaning(self) -> &'static str {
        match self {
            StaticPodReason::ProfileMissing => {
                "a static pod names a profile the seccomp root lacks"
            }
            StaticPodReason::ProfileFails => "a static pod's profile is there but fails the lint",
            StaticPodReason::ProfilePresent => {
                "a static pod's profile is there and predicted to load"
            }
            StaticPodReason::NoStaticPodProfiles => {
                "no static pod names a localhostProfile (skipped)"
            }
        }
    }
}

pub struct StaticPods;

impl NodeCheck for StaticPods {
    fn name(&self) -> &'static str {
        "static-pods"
    }
    fn about(&self) -> &'static str {
        "The seccomp profiles local static pods name, present and passing the lint before the kubelet starts them"
    }
    fn findings(&self) -> &'static [Check] {
        &[CHECK]
    }
    fn reasons(&self) -> Vec<(&'static str, &'static str)> {
        StaticPodReason::all_with_meanings()
    }
    fn commands(&self) -> &'static [Command] {
        &[Command::Preflight]
    }
    fn schedule(&self) -> Schedule {
        Schedule::NotRun
    }
    fn round(&self, cx: &Context<'_>, _command: Command) -> Outcome {
        let manifests = &cx.kubelet.manifests;
        let refs = static_pod_profiles(manifests);
        let mut findings = Vec::new();
        if refs.is_empty() {
            let why = format!(
                "no static pod in {} names a localhostProfile",
                manifests.display()
            );
            findings.push(skipped(
                CHECK,
                manifests,
                StaticPodReason::NoStaticPodProfiles,
                absent_or(manifests, why),
            ));
        }
        // The profiles check linted the root in this round already.
        let reports =
            lint_root_cached(cx.seccomp_root, &lint_options(&cx.config.seccomp), cx.lints);
        findings.extend(referenced_findings(&refs, cx.seccomp_root, &reports));
        crate::judge::Round {
            findings,
            conditions: Vec::new(),
        }
        .into()
    }
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
                check: CHECK,
                subject: shown,
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
        assert_eq!(f[0].reason.named(), Some(StaticPodReason::ProfileMissing));
    }
}
