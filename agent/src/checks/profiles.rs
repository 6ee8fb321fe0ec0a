//! Profiles as node health: lint every file under the seccomp root and turn
//! the reports into findings and the `SeccompProfilesReady` condition.

use std::path::{Path, PathBuf};

use nodeproof_bpfgen::Native;
use nodeproof_findings::{Check, Condition, ConditionStatus, ConditionType, Finding, Status};
use nodeproof_seccomp::diagnostic::Severity;
use nodeproof_seccomp::lint::{lint_source, LintOptions, Outcome, ProfileReport};
use nodeproof_seccomp::scan::{self, ProfileFile};

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

pub fn lint_file(f: &ProfileFile, opts: &LintOptions) -> ProfileReport {
    match &f.contents {
        Ok(bytes) => lint_source(&f.display_path(), bytes, opts, &Native),
        Err(d) => ProfileReport::unreadable(f.display_path(), d.clone()),
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

fn reason(r: &ProfileReport) -> &'static str {
    match r.outcome {
        Outcome::Rejected => "ProfileRejected",
        Outcome::StartFailed => "ProfileStartFails",
        Outcome::Unknown => "ProfileUnreadable",
        Outcome::Ok if r.count(Severity::Error) > 0 => "ProfileInvalid",
        Outcome::Ok => "ProfileOk",
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
            reason: "NoProfiles".into(),
            message: format!("no profiles under {}", root.display()),
        };
    }
    match failing.first() {
        None => Condition {
            kind: ConditionType::SeccompProfilesReady,
            status: ConditionStatus::True,
            reason: "ProfilesValid".into(),
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
pub fn detect_runtime(config: &crate::config::SeccompConfig) -> nodeproof_seccomp::lint::Runtime {
    use nodeproof_seccomp::lint::Runtime;
    match config.runtime.as_str() {
        "crio" => Runtime::Crio,
        "containerd" => Runtime::Containerd,
        _ => {
            let crio = ["/run/crio/crio.sock", "/var/run/crio/crio.sock"]
                .iter()
                .any(|p| Path::new(p).exists());
            let containerd = Path::new("/run/containerd/containerd.sock").exists();
            if crio && !containerd {
                Runtime::Crio
            } else {
                Runtime::Containerd
            }
        }
    }
}
