//! The checks, one module each: what it observes (through
//! `crate::observe`, and for the pods the API server), how it judges (a
//! pure function of its own or of `crate::judge`), when `run` runs it, and
//! its vocabulary (the CHECK column's names, its reasons). [`REGISTRY`]
//! lists them once; `check`, `preflight`, `run` (`/healthz/<name>`,
//! `STATUS=`, `/metrics`) and docs/operations.md's table of checks iterate
//! it, so a check added to it is run, served and documented everywhere,
//! and `agent/tests/cli_and_docs/operations_reference.rs` fails while the
//! docs lack it.
//!
//! Adding a check: a module here implementing [`NodeCheck`], its line in
//! [`REGISTRY`], its tests and its docs row (CONTRIBUTING.md walks
//! `seccomp_default` through it).

pub mod gpu;
pub mod kubelet_access;
pub mod pods;
pub mod profiles;
pub mod seccomp_default;
pub mod static_pods;
pub mod tracing;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nodeproof_findings::{Check, ConditionType, Finding, NotJudged};
use nodeproof_gpu::views::NodeDra;
use nodeproof_report::events::PodEvent;
use strum::IntoStaticStr;

use crate::config::Config;
use crate::judge::{Origin, Round};
use crate::observe::kubelet::Layout;
use crate::observe::lint_cache::LintCache;
use crate::pods::node::PodsOnce;

/// Every check, in the order `check` and `preflight` list their findings
/// and `STATUS=` lists them.
pub static REGISTRY: &[&dyn NodeCheck] = &[
    &profiles::Profiles,
    &pods::Pods,
    &tracing::Tracing,
    &gpu::Gpu,
    &static_pods::StaticPods,
    &kubelet_access::KubeletAccess,
    &seccomp_default::SeccompDefault,
];

/// The registered check named `name` (`/healthz/<name>`).
pub fn named(name: &str) -> Option<&'static dyn NodeCheck> {
    REGISTRY.iter().copied().find(|c| c.name() == name)
}

/// The commands that run checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Command {
    /// `nodeproof check`: one round of what `run` does.
    Check,
    /// `nodeproof preflight`: before the kubelet starts, this node alone.
    Preflight,
    /// `nodeproof run`: the agent.
    Run,
}

impl Command {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// How `nodeproof run` runs a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    /// A task of its own in the daemon drives it (a file watch, the
    /// tracer's thread, the GPU probe's cycle, the API server's watch).
    OwnTask,
    /// The daemon's check runner, at start, every period and on a reload.
    Every(Duration),
    /// Not in the daemon: only the commands in [`NodeCheck::commands`] run it.
    NotRun,
}

/// What a command's round may observe through: the settings, the host's
/// kubelet layout, the round's one lint per file, and the API server when
/// the command has a connection.
pub struct Context<'a> {
    pub config: &'a Config,
    /// The kubelet's seccomp root (`--seccomp-root` or `seccomp.root`).
    pub seccomp_root: &'a Path,
    pub kubelet: &'a Layout,
    /// The round's lint reports: the profiles check fills it, the others
    /// (pods, static pods) find the same files here instead of linting
    /// them again.
    pub lints: &'a Arc<LintCache>,
    /// `None`: the command reads nothing from the API server (preflight,
    /// the daemon's runner).
    pub api: Option<&'a dyn ApiSession>,
}

/// The API server as a one-shot command reads it (the real edge: one
/// connection per command, `crate::oneshot::Session`).
pub trait ApiSession {
    /// The pods bound to this node judged once, or why not.
    fn pods(&self, lints: Arc<LintCache>) -> Result<PodsOnce, NotJudged>;
    /// This node's DRA view once.
    fn dra(&self) -> NodeDra;
}

/// One round of one check, with what it could not judge and the Events
/// the agent writes for it.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub round: Round,
    pub events: Vec<PodEvent>,
    pub not_judged: Vec<NotJudged>,
}

impl From<Round> for Outcome {
    fn from(round: Round) -> Outcome {
        Outcome {
            round,
            ..Outcome::default()
        }
    }
}

/// A check, as the registry holds it.
pub trait NodeCheck: Sync {
    /// Its name: `/healthz/<name>`, `STATUS=`, journald's `NODEPROOF_CHECK=`.
    fn name(&self) -> &'static str;
    /// What it judges, one line for the docs' table.
    fn about(&self) -> &'static str;
    /// The CHECK column of the findings it makes.
    fn findings(&self) -> &'static [Check];
    /// Its reasons, each with what it means (empty: listed in the
    /// reference's tables of its condition).
    fn reasons(&self) -> Vec<(&'static str, &'static str)> {
        Vec::new()
    }
    /// The Node conditions it backs.
    fn conditions(&self) -> &'static [ConditionType] {
        &[]
    }
    /// How its conditions fold with another check's of the same type.
    fn origin(&self) -> Origin {
        Origin::Own
    }
    /// The commands that run it.
    fn commands(&self) -> &'static [Command];
    /// How `run` runs it.
    fn schedule(&self) -> Schedule;
    /// One round, as `command` runs it.
    fn round(&self, cx: &Context<'_>, command: Command) -> Outcome;
}

/// Every finding of `findings` says a check of [`REGISTRY`] made it.
pub fn registered(check: Check) -> bool {
    REGISTRY.iter().any(|c| c.findings().contains(&check))
}

/// A finding for a check that did not apply here, and why.
pub fn skipped(
    check: Check,
    subject: &Path,
    reason: impl Into<nodeproof_findings::Reason>,
    message: String,
) -> Finding {
    Finding {
        detail: None,
        check,
        subject: subject.display().to_string(),
        status: nodeproof_findings::Status::Skipped,
        reason: reason.into(),
        message,
    }
}

/// Why a directory a check reads holds nothing to check.
pub fn absent_or(dir: &Path, empty: String) -> String {
    if dir.exists() {
        empty
    } else {
        format!("{} does not exist: nothing to check", dir.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_finding_checks_are_unique() {
        let mut names: Vec<&str> = REGISTRY.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), REGISTRY.len());
        let mut checks: Vec<Check> = REGISTRY
            .iter()
            .flat_map(|c| c.findings())
            .copied()
            .collect();
        let n = checks.len();
        checks.sort_unstable();
        checks.dedup();
        assert_eq!(checks.len(), n, "two checks claim one CHECK name");
        for c in REGISTRY {
            assert!(
                !c.commands().is_empty(),
                "{} is run by no command",
                c.name()
            );
            assert_eq!(
                c.commands().contains(&Command::Run),
                c.schedule() != Schedule::NotRun,
                "{}: run by `run` exactly when the daemon schedules it",
                c.name()
            );
        }
    }
}
