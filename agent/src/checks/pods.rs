//! `pods`: the seccomp references of the pods bound to this node, judged
//! against the files here, and the annotated RuntimeClasses' contracts.
//! Their part of `SeccompProfilesReady` folds into the files' one. The
//! daemon's pods watcher judges them on every change; `check` lists them
//! once through the command's connection.

use nodeproof_findings::{Check, ConditionType};

use super::{Command, Context, NodeCheck, Outcome, Schedule};
use crate::judge::Origin;

pub struct Pods;

impl NodeCheck for Pods {
    fn name(&self) -> &'static str {
        crate::pods::CHECK_NAME
    }
    fn about(&self) -> &'static str {
        "The seccomp references of the pods bound to this node, and the annotated RuntimeClasses' contracts"
    }
    fn findings(&self) -> &'static [Check] {
        &[Check::POD_PROFILE, Check::RUNTIMECLASS_CONTRACT]
    }
    fn conditions(&self) -> &'static [ConditionType] {
        &[ConditionType::SeccompProfilesReady]
    }
    fn origin(&self) -> Origin {
        Origin::PodReferences
    }
    fn commands(&self) -> &'static [Command] {
        &[Command::Check, Command::Run]
    }
    fn schedule(&self) -> Schedule {
        Schedule::OwnTask
    }
    fn round(&self, cx: &Context<'_>, _command: Command) -> Outcome {
        let Some(api) = cx.api else {
            return Outcome::default();
        };
        match api.pods(cx.lints.clone()) {
            Ok(once) => Outcome {
                round: crate::pods::round::round(&once),
                events: once
                    .findings
                    .iter()
                    .map(crate::pods::state::finding_event)
                    .collect(),
                not_judged: Vec::new(),
            },
            Err(n) => Outcome {
                not_judged: vec![n],
                ..Outcome::default()
            },
        }
    }
}
