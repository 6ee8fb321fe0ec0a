//! Profiles as node health: lint every file under the seccomp root and turn
//! the reports into findings and the `SeccompProfilesReady` condition.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use nodeproof_bpfgen::Native;
use nodeproof_findings::{Check, Condition, ConditionStatus, ConditionType, Finding, Status};
use nodeproof_seccomp::containerd;
use nodeproof_seccomp::diagnostic::Severity;
use nodeproof_seccomp::lint::{lint_source, LintOptions, Outcome, ProfileReport, Runtime};
use nodeproof_seccomp::oci_runtime::{CrunVersion, OciRuntime, OciRuntimeKind, RuncVersion};
use nodeproof_seccomp::scan::{self, ProfileFile};

use super::oci_runtime::{self, CrunRelease, OciRuntimeSetting};
use super::Round;

/// Lint files in parallel (one thread per core); reports keep the input order.
pub fn lint_files(files: Vec<ProfileFile>, opts: &LintOptions) -> Vec<ProfileReport> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(files.len().max(1));
    let chunk = files.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = files
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || part.iter().map(|f| lint_file(f, opts)).collect::<Vec<_>>())
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

/// One file's report. A file nodeproof could not read is `rejected` where
/// containerd cannot read it either, whoever reads (missing, a dangling
/// symlink, a symlink loop: a pod naming it fails CreateContainer), and
/// `unknown` otherwise (permissions, a FIFO, a link out of the root).
pub fn lint_file(f: &ProfileFile, opts: &LintOptions) -> ProfileReport {
    match &f.contents {
        Ok(bytes) => lint_source(&f.display_path(), bytes, opts, &Native),
        Err(d) => {
            // A directory is no reference: `scan` walks into the ones it can
            // list, and one it cannot is no file a pod names.
            let reference = !f.path.is_dir();
            reference
                .then(|| containerd::read_failure_report(&f.path, opts))
                .flatten()
                .unwrap_or_else(|| ProfileReport::unreadable(f.display_path(), d.clone()))
        }
    }
}

/// Lint everything under the seccomp root.
pub fn lint_root(root: &Path, opts: &LintOptions) -> Vec<ProfileReport> {
    if !root.exists() {
        return Vec::new();
    }
    lint_files(scan::collect(&[PathBuf::from(root)]), opts)
}

/// Whether a report passes: outcome ok, no errors (and no warnings when strict).
pub fn passes(r: &ProfileReport, strict: bool) -> bool {
    r.outcome == Outcome::Ok
        && r.count(Severity::Error) == 0
        && (!strict || r.count(Severity::Warning) == 0)
}

/// Why `SeccompProfilesReady` (the files' part) or a profile's finding is
/// what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    NoProfiles,
    ProfilesValid,
    ProfileRejected,
    ProfileStartFails,
    ProfileUnreadable,
    ProfileInvalid,
    ProfileOk,
}

impl Reason {
    const ALL: [Reason; 7] = [
        Reason::NoProfiles,
        Reason::ProfilesValid,
        Reason::ProfileRejected,
        Reason::ProfileStartFails,
        Reason::ProfileUnreadable,
        Reason::ProfileInvalid,
        Reason::ProfileOk,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NoProfiles => "NoProfiles",
            Reason::ProfilesValid => "ProfilesValid",
            Reason::ProfileRejected => "ProfileRejected",
            Reason::ProfileStartFails => "ProfileStartFails",
            Reason::ProfileUnreadable => "ProfileUnreadable",
            Reason::ProfileInvalid => "ProfileInvalid",
            Reason::ProfileOk => "ProfileOk",
        }
    }

    /// The reason a condition of this check carries, if it is one of this check's.
    pub fn of(c: &Condition) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == c.reason)
    }

    fn of_report(r: &ProfileReport) -> Reason {
        match r.outcome {
            Outcome::Rejected => Reason::ProfileRejected,
            Outcome::StartFailed => Reason::ProfileStartFails,
            Outcome::Unknown => Reason::ProfileUnreadable,
            Outcome::Ok if r.count(Severity::Error) > 0 => Reason::ProfileInvalid,
            Outcome::Ok => Reason::ProfileOk,
        }
    }
}

fn reason(r: &ProfileReport) -> &'static str {
    Reason::of_report(r).as_str()
}

/// How profiles are judged on this node: the runtime (configured or
/// detected) and the noNewPrivileges mode of the `[seccomp]` section. The
/// one place the checks build [`LintOptions`]; the CLI's flags override it.
pub fn lint_options(config: &SeccompConfig) -> LintOptions {
    let runtime = detect_runtime(config);
    LintOptions {
        runtime,
        no_new_privileges: config.no_new_privileges,
        oci_runtime: on_node(config.oci_runtime, runtime),
        ..LintOptions::default()
    }
}

/// The modelled OCI runtime release `setting` means for the node's `cri`
/// runtime: [`modelled`] of the kind it names, except that a crun found by
/// `auto` is the release its `--version` names (the nearest modelled one
/// for another release, said in a warning; 1.21 when it cannot be told).
pub fn on_node(setting: OciRuntimeSetting, cri: Runtime) -> OciRuntime {
    let configured = oci_runtime::resolve(setting, cri);
    if setting != OciRuntimeSetting::Auto || configured.kind != OciRuntimeKind::Crun {
        return modelled(configured.kind);
    }
    let binary = configured.binary.as_str();
    OciRuntime::Crun(
        match oci_runtime::crun_version(binary, oci_runtime::VERSION_TIMEOUT) {
            Ok(CrunRelease::Modelled(v)) => v,
            Ok(CrunRelease::Nearest { found, nearest }) => {
                tracing::warn!(
                binary,
                found,
                predicted = nearest.as_str(),
                "crun {found} is not a release nodeproof models; predicting crun {}, the nearest",
                nearest.as_str()
            );
                nearest
            }
            Err(e) => {
                let predicted = CrunVersion::V1_21;
                tracing::warn!(
                    binary,
                    error = %nodeproof_findings::errors::error_chain(&e),
                    predicted = predicted.as_str(),
                    "crun's release is not known; predicting crun {}",
                    predicted.as_str()
                );
                predicted
            }
        },
    )
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
                _ => format!("outcome {}: {}", r.outcome.as_str(), first_line(r)),
            };
            Finding {
                check: Check::SeccompProfile,
                subject: r.path.clone(),
                status,
                reason: reason(r).to_string(),
                message,
            }
        })
        .collect()
}

pub fn condition(root: &Path, reports: &[ProfileReport]) -> Condition {
    let failing: Vec<&ProfileReport> = reports.iter().filter(|r| !passes(r, false)).collect();
    if reports.is_empty() {
        return Condition {
            kind: ConditionType::SeccompProfilesReady,
            status: ConditionStatus::True,
            reason: Reason::NoProfiles.as_str().into(),
            message: format!("no profiles under {}", root.display()),
        };
    }
    match failing.first() {
        None => Condition {
            kind: ConditionType::SeccompProfilesReady,
            status: ConditionStatus::True,
            reason: Reason::ProfilesValid.as_str().into(),
            message: format!(
                "{} profiles under {} predicted ok",
                reports.len(),
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
                    "{} of {} profiles fail: {}{}; first cause: {}",
                    failing.len(),
                    reports.len(),
                    names.join(", "),
                    if failing.len() > 3 { ", ..." } else { "" },
                    first_line(first)
                ),
            }
        }
    }
}

/// The runtime whose decoder reads profiles: configured, else detected from
/// the runtime sockets on this node (CRI-O only when containerd is absent).
pub fn detect_runtime(config: &SeccompConfig) -> Runtime {
    match config.runtime.as_str() {
        "crio" => Runtime::Crio,
        "containerd" => Runtime::Containerd,
        _ => {
            let present = |r: Runtime| r.sockets().iter().any(|p| Path::new(p).exists());
            let (crio, containerd) = (present(Runtime::Crio), present(Runtime::Containerd));
            if crio && !containerd {
                Runtime::Crio
            } else {
                Runtime::Containerd
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
    /// `auto`, `containerd` or `crio`.
    #[serde(default = "default_runtime")]
    pub runtime: String,
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

fn default_runtime() -> String {
    "auto".into()
}

impl SeccompConfig {
    /// Every problem of the section, each naming its key.
    pub fn problems(&self) -> Vec<String> {
        if matches!(self.runtime.as_str(), "auto" | "containerd" | "crio") {
            return Vec::new();
        }
        vec![format!(
            "seccomp.runtime must be auto, containerd or crio, not {:?}",
            self.runtime
        )]
    }
}

impl Default for SeccompConfig {
    fn default() -> Self {
        SeccompConfig {
            root: default_root(),
            runtime: default_runtime(),
            no_new_privileges: false,
            oci_runtime: OciRuntimeSetting::Auto,
        }
    }
}
