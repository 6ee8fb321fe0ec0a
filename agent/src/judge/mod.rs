//! The pure judgement the checks share: each function here turns what a
//! check observed (lint reports, the tracer's start, a GPU cycle) into one
//! [`Round`] of findings and conditions, and [`node_conditions`] folds the
//! latest rounds into the Node's conditions. The checks themselves (what
//! each observes, when it runs, its vocabulary) are `crate::checks`, which
//! calls these, as the daemon's own tasks do; so what `nodeproof check`
//! prints is what the agent writes. Nothing here does I/O.

pub mod gpu;
pub mod oci_runtime;
pub mod profiles;
pub mod tracing;
pub mod versions;

use nodeproof_findings::{Condition, ConditionStatus, Finding};

/// One round of one check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Round {
    pub findings: Vec<Finding>,
    /// The conditions it backs (none: nothing to report, e.g. no GPU).
    pub conditions: Vec<Condition>,
}

/// Whose conditions a round's are, for [`node_conditions`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The check's own: it alone backs its condition types.
    Own,
    /// The pods' references: folded into the files' condition of the same
    /// type ([`combine`]).
    PodReferences,
}

/// The Node's conditions from each check's latest conditions, in the
/// order given (the registry's, `crate::checks::REGISTRY`): the pods' part
/// of `SeccompProfilesReady` is folded into the files' one ([`combine`]);
/// every other condition is its check's own.
pub fn node_conditions<'a>(
    rounds: impl IntoIterator<Item = (Origin, &'a [Condition])>,
) -> Vec<Condition> {
    let rounds: Vec<(Origin, &[Condition])> = rounds.into_iter().collect();
    let mut out: Vec<Condition> = rounds
        .iter()
        .filter(|(o, _)| *o == Origin::Own)
        .flat_map(|(_, c)| c.iter().cloned())
        .collect();
    let pods = rounds
        .iter()
        .filter(|(o, _)| *o == Origin::PodReferences)
        .flat_map(|(_, c)| c.iter());
    for pods in pods {
        match out.iter_mut().find(|c| c.kind == pods.kind) {
            Some(files) => *files = combine(files.clone(), pods.clone()),
            None => out.push(pods.clone()),
        }
    }
    out
}

/// One condition from the node's own profile lint and the pods' references:
/// a pod that cannot start is the more urgent, more concrete cause, so its
/// reason leads; the files' problem, if any, is still named.
pub fn combine(node_files: Condition, pods: Condition) -> Condition {
    if pods.status == ConditionStatus::False {
        if node_files.status == ConditionStatus::True {
            return pods;
        }
        return Condition {
            message: format!("{}; node profiles: {}", pods.message, node_files.message),
            ..pods
        };
    }
    // Files that say nothing (there are none) give way to what the pods say.
    if profiles::Reason::of(&node_files) == Some(profiles::Reason::NoProfiles) {
        pods
    } else {
        node_files
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
    fn pods_fold_into_the_files_condition_in_the_order_given() {
        use ConditionStatus::*;
        use ConditionType::*;
        let files = [cond(SeccompProfilesReady, True, "NoProfiles")];
        let pods = [cond(SeccompProfilesReady, False, "ProfileMissing")];
        let tracing = [cond(SeccompTracingReady, True, "StrategyLoaded")];
        let got = node_conditions([
            (Origin::Own, &files[..]),
            (Origin::PodReferences, &pods[..]),
            (Origin::Own, &tracing[..]),
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
        let got = node_conditions([(Origin::PodReferences, &pods[..])]);
        assert_eq!(got, pods);
    }

    #[test]
    fn combine_prefers_pod_problems() {
        let ok = |reason: &str| Condition {
            kind: ConditionType::SeccompProfilesReady,
            status: ConditionStatus::True,
            reason: reason.into(),
            message: String::new(),
        };
        let bad = Condition {
            status: ConditionStatus::False,
            reason: "ProfileMissing".into(),
            ..ok("")
        };
        assert_eq!(
            combine(ok("ProfilesValid"), bad.clone()).reason,
            "ProfileMissing"
        );
        assert_eq!(
            combine(ok("ProfilesValid"), ok("PodProfilesReady")).reason,
            "ProfilesValid"
        );
        assert_eq!(
            combine(ok("NoProfiles"), ok("PodProfilesReady")).reason,
            "PodProfilesReady"
        );
        let files_bad = Condition {
            status: ConditionStatus::False,
            reason: "ProfileRejected".into(),
            message: "1 of 2 profiles fails".into(),
            ..ok("")
        };
        assert_eq!(
            combine(files_bad.clone(), ok("PodProfilesReady")),
            files_bad
        );
        let pods_bad = Condition {
            message: "1 of 3 pods references unusable seccomp profiles".into(),
            ..bad
        };
        let both = combine(files_bad, pods_bad);
        assert_eq!(
            (both.status, both.reason.as_str()),
            (ConditionStatus::False, "ProfileMissing")
        );
        assert_eq!(
            both.message,
            "1 of 3 pods references unusable seccomp profiles; node profiles: 1 of 2 profiles fails"
        );
    }
}
