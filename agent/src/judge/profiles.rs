//! Profiles as node health: lint every file under the seccomp root and turn
//! the reports into findings and the `SeccompProfilesReady` condition.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use nodeproof_findings::{
    count, Check, Condition, ConditionStatus, ConditionType, Finding, Status,
};
use nodeproof_seccomp::diagnostic::Severity;
use nodeproof_seccomp::lint::{Outcome, ProfileReport, Runtime};
use nodeproof_seccomp::oci_runtime::{CrunVersion, OciRuntime, OciRuntimeKind, RuncVersion};

use super::oci_runtime::{self, CrunRelease, OciRuntimeSetting};
use super::Round;

/// Whether a report passes: outcome ok (or the file is no profile, a
/// note), no errors (and no warnings when strict).
pub fn passes(r: &ProfileReport, strict: bool) -> bool {
    matches!(r.outcome, Outcome::Ok | Outcome::NotAProfile)
        && r.count(Severity::Error) == 0
        && (!strict || r.count(Severity::Warning) == 0)
}

/// Why `SeccompProfilesReady` (the files' part) or a profile's finding is
/// what it is (the vocabulary's, `nodeproof_findings::reason`).
pub use nodeproof_findings::reason::ProfileReason as Reason;
/// Why the `oci-runtime` finding says what it says.
pub use nodeproof_findings::reason::RuntimeReason;

/// A profile report's reason.
fn reason(r: &ProfileReport) -> Reason {
    match r.outcome {
        Outcome::Rejected => Reason::ProfileRejected,
        Outcome::StartFailed => Reason::ProfileStartFails,
        Outcome::Unknown => Reason::ProfileUnreadable,
        Outcome::NotAProfile => Reason::NotAProfile,
        Outcome::Ok if r.count(Severity::Error) > 0 => Reason::ProfileInvalid,
        Outcome::Ok => Reason::ProfileOk,
    }
}

/// The OCI runtime profiles are judged for on this node, and the
/// `oci-runtime` finding that says how it was chosen.
pub struct RuntimeOnNode {
    pub runtime: OciRuntime,
    pub finding: Finding,
}

/// [`on_node`] for a runtime already resolved, with `crun_version` asking
/// a crun binary its release.
pub fn judge_runtime(
    setting: OciRuntimeSetting,
    cri: Runtime,
    configured: &oci_runtime::Configured,
    crun_version: impl FnOnce(&str) -> Result<CrunRelease, oci_runtime::VersionError>,
) -> RuntimeOnNode {
    let binary = configured.binary.as_str();
    let finding =
        |runtime: OciRuntime, status, reason: RuntimeReason, message: String| RuntimeOnNode {
            runtime,
            finding: Finding {
                detail: None,
                check: Check::OCI_RUNTIME,
                subject: binary.to_string(),
                status,
                reason: reason.into(),
                message,
            },
        };
    if setting != OciRuntimeSetting::Auto {
        let runtime = modelled(configured.kind);
        return finding(
            runtime,
            Status::Ok,
            RuntimeReason::Configured,
            format!("profiles are judged as {runtime} would (seccomp.oci-runtime in the config)"),
        );
    }
    if configured.kind != OciRuntimeKind::Crun {
        let runtime = modelled(configured.kind);
        return finding(
            runtime,
            Status::Ok,
            RuntimeReason::Detected,
            format!(
                "{} starts this node's containers ({}'s configuration); profiles are judged as {runtime} would",
                configured.kind.as_str(),
                match cri {
                    Runtime::Containerd => "containerd",
                    Runtime::Crio => "CRI-O",
                }
            ),
        );
    }
    match crun_version(binary) {
        Ok(CrunRelease::Modelled(v)) => {
            let runtime = OciRuntime::Crun(v);
            finding(
                runtime,
                Status::Ok,
                RuntimeReason::Detected,
                format!("crun {} starts this node's containers (crun --version); profiles are judged as it would", v.as_str()),
            )
        }
        Ok(CrunRelease::Nearest { found, nearest }) => {
            tracing::warn!(
                binary,
                found,
                predicted = nearest.as_str(),
                "crun {found} is not a release nodeproof models; predicting crun {}, the nearest",
                nearest.as_str()
            );
            finding(
                OciRuntime::Crun(nearest),
                Status::Warning,
                RuntimeReason::ReleaseNotModelled,
                format!(
                    "crun {found} is not a release nodeproof models; profiles are judged as crun {} would (the nearest)",
                    nearest.as_str()
                ),
            )
        }
        Err(e) => {
            let predicted = CrunVersion::V1_21;
            let error = nodeproof_findings::errors::error_chain(&e);
            tracing::warn!(
                binary,
                error = %error,
                predicted = predicted.as_str(),
                "crun's release is not known; predicting crun {}",
                predicted.as_str()
            );
            finding(
                OciRuntime::Crun(predicted),
                Status::Warning,
                RuntimeReason::ReleaseUnknown,
                format!(
                    "crun's release could not be read ({error}); profiles are judged as crun {} would",
                    predicted.as_str()
                ),
            )
        }
    }
}

/// The modelled release of `kind`: runc 1.1 (learned from 1.1.5, checked
/// against 1.1.15 too), crun 1.21 (the newer of the two crun releases
/// modelled; `--crun-version 1.8` picks Debian 12's).
pub fn modelled(kind: OciRuntimeKind) -> OciRuntime {
    match kind {
        OciRuntimeKind::Runc => OciRuntime::Runc(RuncVersion::V1_1_5),
        OciRuntimeKind::Crun => OciRuntime::Crun(CrunVersion::V1_21),
    }
}

/// One round of the check: every profile's finding and the condition.
pub fn round(root: &Path, reports: &[ProfileReport]) -> Round {
    Round {
        findings: findings(reports),
        conditions: vec![condition(root, reports)],
    }
}

fn first_line(r: &ProfileReport) -> String {
    r.diagnostics.first().map_or_else(String::new, |d| {
        format!("{}[{}]: {}", d.severity, d.code, d.message)
    })
}

pub fn findings(reports: &[ProfileReport]) -> Vec<Finding> {
    reports
        .iter()
        .map(|r| {
            let status = if !passes(r, false) {
                Status::Failed
            } else if !r.is_profile() {
                Status::Skipped
            } else if r.count(Severity::Warning) > 0 {
                Status::Warning
            } else {
                Status::Ok
            };
            let message = match status {
                Status::Ok => format!(
                    "outcome ok, {} BPF instructions",
                    r.instructions.unwrap_or(0)
                ),
                Status::Skipped => r
                    .diagnostics
                    .first()
                    .map_or_else(String::new, |d| d.message.clone()),
                _ => format!("outcome {}: {}", r.outcome.as_str(), first_line(r)),
            };
            Finding {
                detail: None,
                check: Check::SECCOMP_PROFILE,
                subject: r.path.clone(),
                status,
                reason: reason(r).into(),
                message,
            }
        })
        .collect()
}

pub fn condition(root: &Path, reports: &[ProfileReport]) -> Condition {
    // Files that are no profile are the findings' to say; the condition counts profiles.
    let others = reports.iter().filter(|r| !r.is_profile()).count();
    let reports: Vec<&ProfileReport> = reports.iter().filter(|r| r.is_profile()).collect();
    let failing: Vec<&ProfileReport> = reports
        .iter()
        .copied()
        .filter(|r| !passes(r, false))
        .collect();
    if reports.is_empty() {
        let others = match others {
            0 => String::new(),
            1 => " (1 file that is not a profile)".to_string(),
            n => format!(" ({n} files that are not profiles)"),
        };
        return Condition {
            kind: ConditionType::SeccompProfilesReady,
            status: ConditionStatus::True,
            reason: Reason::NoProfiles.as_str().into(),
            message: format!("no profiles under {}{others}", root.display()),
        };
    }
    match failing.first() {
        None => Condition {
            kind: ConditionType::SeccompProfilesReady,
            status: ConditionStatus::True,
            reason: Reason::ProfilesValid.as_str().into(),
            message: format!(
                "{} under {} predicted ok",
                count(reports.len(), "profile", "profiles"),
                root.display()
            ),
        },
        Some(first) => {
            let names: Vec<String> = failing
                .iter()
                .take(3)
                .map(|r| format!("{} ({})", r.path, r.outcome.as_str()))
                .collect();
            Condition {
                kind: ConditionType::SeccompProfilesReady,
                status: ConditionStatus::False,
                reason: reason(first).to_string(),
                message: format!(
                    "{} of {} {}: {}{}; first cause: {}",
                    failing.len(),
                    count(reports.len(), "profile", "profiles"),
                    if failing.len() == 1 { "fails" } else { "fail" },
                    names.join(", "),
                    if failing.len() > 3 { ", ..." } else { "" },
                    first_line(first)
                ),
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
/// The `[seccomp]` section: where profiles are and how they are judged.
pub struct SeccompConfig {
    /// The kubelet's seccomp root (`--seccomp-root` overrides it).
    #[serde(default = "default_root")]
    pub root: PathBuf,
    /// `auto`, `containerd` or `crio`: whose decoder reads the profiles.
    #[serde(default)]
    pub runtime: CriRuntimeSetting,
    /// The noNewPrivileges mode profiles are judged in (containerd's default for pods is false).
    #[serde(default)]
    pub no_new_privileges: bool,
    /// `auto`, `runc` or `crun`: the OCI runtime whose filter and init are predicted.
    #[serde(default)]
    pub oci_runtime: OciRuntimeSetting,
}

fn default_root() -> PathBuf {
    PathBuf::from("/var/lib/kubelet/seccomp")
}

/// `seccomp.runtime` in the config: the CRI runtime whose decoder reads the
/// profiles (CRI-O evaluates its template first; containerd hands the file
/// to the OCI runtime as it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CriRuntimeSetting {
    /// Told from the runtime sockets on this node.
    #[default]
    Auto,
    Containerd,
    Crio,
}

impl CriRuntimeSetting {
    /// The runtime named, or None for `auto`.
    pub fn named(self) -> Option<Runtime> {
        match self {
            CriRuntimeSetting::Auto => None,
            CriRuntimeSetting::Containerd => Some(Runtime::Containerd),
            CriRuntimeSetting::Crio => Some(Runtime::Crio),
        }
    }
}

impl Default for SeccompConfig {
    fn default() -> Self {
        SeccompConfig {
            root: default_root(),
            runtime: CriRuntimeSetting::Auto,
            no_new_privileges: false,
            oci_runtime: OciRuntimeSetting::Auto,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeproof_bpfgen::Native;
    use nodeproof_seccomp::lint::{lint_source, LintOptions};
    use oci_runtime::{Configured, VersionError};

    fn crun() -> Configured {
        Configured {
            kind: OciRuntimeKind::Crun,
            binary: "/usr/local/bin/crun".into(),
        }
    }

    fn never(_: &str) -> Result<CrunRelease, VersionError> {
        panic!("crun --version must not be asked")
    }

    #[test]
    fn the_condition_counts_profiles_in_agreement() {
        let opts = LintOptions::default();
        let ok = || {
            lint_source(
                "/r/ok.json",
                br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO"}]}"#,
                &opts,
                &Native,
            )
        };
        let bad = || lint_source("/r/bad.json", b"[]", &opts, &Native);
        let root = Path::new("/r");
        let message = |reports: &[ProfileReport]| condition(root, reports).message;
        assert_eq!(message(&[ok()]), "1 profile under /r predicted ok");
        assert_eq!(message(&[ok(), ok()]), "2 profiles under /r predicted ok");
        let m = message(&[bad()]);
        assert!(
            m.starts_with("1 of 1 profile fails: /r/bad.json (rejected); first cause: "),
            "{m}"
        );
        let m = message(&[bad(), ok()]);
        assert!(m.starts_with("1 of 2 profiles fails: "), "{m}");
        let m = message(&[bad(), bad()]);
        assert!(m.starts_with("2 of 2 profiles fail: "), "{m}");
    }

    #[test]
    fn a_crun_release_not_modelled_is_a_warning_naming_both_releases() {
        let got = judge_runtime(OciRuntimeSetting::Auto, Runtime::Crio, &crun(), |_| {
            Ok(CrunRelease::Nearest {
                found: "1.23.1".into(),
                nearest: CrunVersion::V1_21,
            })
        });
        assert_eq!(got.runtime, OciRuntime::Crun(CrunVersion::V1_21));
        let f = got.finding;
        assert_eq!((f.check, f.status), (Check::OCI_RUNTIME, Status::Warning));
        assert_eq!(f.reason, "RuntimeReleaseNotModelled");
        assert_eq!(f.subject, "/usr/local/bin/crun");
        assert!(
            f.message.contains("crun 1.23.1 is not a release") && f.message.contains("crun 1.21"),
            "{}",
            f.message
        );
    }

    #[test]
    fn an_unreadable_crun_release_is_a_warning_with_the_cause() {
        let got = judge_runtime(OciRuntimeSetting::Auto, Runtime::Crio, &crun(), |b| {
            Err(VersionError::Timeout {
                binary: b.into(),
                timeout: std::time::Duration::from_secs(5),
            })
        });
        assert_eq!(got.runtime, OciRuntime::Crun(CrunVersion::V1_21));
        assert_eq!(got.finding.status, Status::Warning);
        assert_eq!(got.finding.reason, "RuntimeReleaseUnknown");
        assert!(
            got.finding.message.contains("did not finish within 5s"),
            "{}",
            got.finding.message
        );
    }

    #[test]
    fn a_modelled_crun_runc_and_a_configured_runtime_are_ok() {
        let got = judge_runtime(OciRuntimeSetting::Auto, Runtime::Crio, &crun(), |_| {
            Ok(CrunRelease::Modelled(CrunVersion::V1_8))
        });
        assert_eq!(got.runtime, OciRuntime::Crun(CrunVersion::V1_8));
        assert_eq!(
            (got.finding.status, got.finding.reason.as_str()),
            (Status::Ok, "RuntimeDetected")
        );
        let runc = Configured {
            kind: OciRuntimeKind::Runc,
            binary: "runc".into(),
        };
        let got = judge_runtime(OciRuntimeSetting::Auto, Runtime::Containerd, &runc, never);
        assert_eq!(got.runtime, OciRuntime::Runc(RuncVersion::V1_1_5));
        assert!(
            got.finding.message.contains("containerd's configuration"),
            "{}",
            got.finding.message
        );
        let got = judge_runtime(OciRuntimeSetting::Crun, Runtime::Containerd, &crun(), never);
        assert_eq!(got.runtime, OciRuntime::Crun(CrunVersion::V1_21));
        assert_eq!(got.finding.reason, "RuntimeConfigured");
    }
}
