//! The checks, assembled once. Each check is a function from what it
//! observed (lint reports, the tracer's start, a GPU cycle, the pods'
//! judgement) to one [`Round`] of findings and conditions, and
//! [`node_conditions`] folds the latest rounds into the Node's conditions.
//! `check`, `preflight`, `pods` and the daemon (`run`) all call these, so
//! what `nodeproof check` prints is what the agent writes.

pub mod gpu;
pub mod oci_runtime;
pub mod pods;
pub mod profiles;
pub mod tracing;

use std::path::Path;

use nodeproof_findings::{Condition, Finding, NotJudged};
use nodeproof_kube::events::PodEvent;

use crate::config::Config;

/// One round of one check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Round {
    pub findings: Vec<Finding>,
    /// The conditions it backs (none: nothing to report, e.g. no GPU).
    pub conditions: Vec<Condition>,
}

/// The subsystems whose rounds make up the node's picture, by the name
/// `/healthz/<check>`, `STATUS=` and `NODEPROOF_CHECK=` use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Subsystem {
    Profiles,
    Pods,
    Tracing,
    Gpu,
    Reporter,
}

impl Subsystem {
    /// In the order `STATUS=` lists them.
    pub const ALL: [Subsystem; 5] = [
        Subsystem::Profiles,
        Subsystem::Pods,
        Subsystem::Tracing,
        Subsystem::Gpu,
        Subsystem::Reporter,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Subsystem::Profiles => "profiles",
            Subsystem::Pods => "pods",
            Subsystem::Tracing => "tracing",
            Subsystem::Gpu => "gpu",
            Subsystem::Reporter => "reporter",
        }
    }

    pub fn parse(name: &str) -> Option<Subsystem> {
        Subsystem::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

impl std::fmt::Display for Subsystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// The Node's conditions from each subsystem's latest conditions: the
/// pods' part of `SeccompProfilesReady` is folded into the files' one
/// ([`pods::combine`]); every other condition is its check's own. In
/// [`Subsystem::ALL`] order, so `check` and the daemon list them alike.
pub fn node_conditions<'a>(
    rounds: impl IntoIterator<Item = (Subsystem, &'a [Condition])>,
) -> Vec<Condition> {
    let mut rounds: Vec<(Subsystem, &[Condition])> = rounds.into_iter().collect();
    rounds.sort_by_key(|(s, _)| *s);
    let mut out: Vec<Condition> = rounds
        .iter()
        .filter(|(s, _)| *s != Subsystem::Pods)
        .flat_map(|(_, c)| c.iter().cloned())
        .collect();
    let pods = rounds
        .iter()
        .filter(|(s, _)| *s == Subsystem::Pods)
        .flat_map(|(_, c)| c.iter());
    for pods in pods {
        match out.iter_mut().find(|c| c.kind == pods.kind) {
            Some(files) => *files = pods::combine(files.clone(), pods.clone()),
            None => out.push(pods.clone()),
        }
    }
    out
}

/// One round of every check ([`node_round`]): the node's findings and
/// conditions, the Events the agent writes on pods for them, and what was
/// not judged and why.
#[derive(Debug, Clone, Default)]
pub struct NodeRound {
    pub findings: Vec<Finding>,
    pub conditions: Vec<Condition>,
    /// One Warning Event per pod reference found unusable, as the agent's
    /// pods watcher writes on a pod's first judgement.
    pub events: Vec<PodEvent>,
    pub not_judged: Vec<NotJudged>,
}

/// One round of every check, as the agent runs them: the profiles under
/// `seccomp_root`, the tracer (loaded, judged, detached), one GPU cycle
/// and, when credentials are found, the pods bound to this node. The
/// conditions are folded by [`node_conditions`], as the daemon folds its
/// subsystems' latest rounds.
pub fn node_round(seccomp_root: &Path, config: &Config) -> NodeRound {
    let (lint, runtime) = profiles::lint_setup(&config.seccomp);
    let mut files = profiles::round(seccomp_root, &profiles::lint_root(seccomp_root, &lint));
    files.findings.push(runtime);
    let pods = pods::judge_once(&pods::options(config, seccomp_root));
    let tracing = tracing::probe();
    let gpu = gpu::round(&gpu::cycle_once(config));
    let mut rounds = vec![
        (Subsystem::Profiles, files),
        (Subsystem::Tracing, tracing),
        (Subsystem::Gpu, gpu),
    ];
    let mut events = Vec::new();
    let mut not_judged = Vec::new();
    match pods {
        Ok(once) => {
            events.extend(once.findings.iter().map(crate::pods::watch::finding_event));
            rounds.push((Subsystem::Pods, pods::round(&once)));
        }
        Err(n) => not_judged.push(n),
    }
    rounds.sort_by_key(|(s, _)| *s);
    NodeRound {
        conditions: node_conditions(rounds.iter().map(|(s, r)| (*s, &r.conditions[..]))),
        findings: rounds.into_iter().flat_map(|(_, r)| r.findings).collect(),
        events,
        not_judged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeproof_findings::{ConditionStatus, ConditionType};

    fn cond(kind: ConditionType, status: ConditionStatus, reason: &str) -> Condition {
        Condition::new(kind, status, reason, "m")
    }

    #[test]
    fn pods_fold_into_the_files_condition_and_the_order_is_fixed() {
        use ConditionStatus::*;
        use ConditionType::*;
        let files = [cond(SeccompProfilesReady, True, "NoProfiles")];
        let pods = [cond(SeccompProfilesReady, False, "ProfileMissing")];
        let tracing = [cond(SeccompTracingReady, True, "StrategyLoaded")];
        let got = node_conditions([
            (Subsystem::Tracing, &tracing[..]),
            (Subsystem::Pods, &pods[..]),
            (Subsystem::Profiles, &files[..]),
        ]);
        let got: Vec<_> = got
            .iter()
            .map(|c| (c.kind, c.status, c.reason.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (SeccompProfilesReady, False, "ProfileMissing"),
                (SeccompTracingReady, True, "StrategyLoaded")
            ]
        );
        // Pods without a files round (the profiles task not done yet) still count.
        let got = node_conditions([(Subsystem::Pods, &pods[..])]);
        assert_eq!(got, pods);
        assert_eq!(Subsystem::parse("gpu"), Some(Subsystem::Gpu));
    }
}
