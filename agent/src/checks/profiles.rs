//! `profiles`: each seccomp profile under the kubelet's root, linted as the
//! node's runtime (containerd or CRI-O, runc or crun, at its release) will
//! load it, and which runtime that is (`oci-runtime`). Backs
//! `SeccompProfilesReady` with the pods' references. The daemon's profiles
//! task runs it on every change (inotify), reload and resync.

use nodeproof_findings::reason::ProfileReason;
use nodeproof_findings::{Check, ConditionType};

use super::{absent_or, skipped, Command, Context, NodeCheck, Outcome, Schedule};
use crate::judge::profiles as judge;
use crate::observe::profiles as observe;

pub struct Profiles;

impl NodeCheck for Profiles {
    fn name(&self) -> &'static str {
        "profiles"
    }
    fn about(&self) -> &'static str {
        "Each seccomp profile under the kubelet's root, as the node's container runtime will load it, and which runtime that is"
    }
    fn findings(&self) -> &'static [Check] {
        &[Check::SECCOMP_PROFILE, Check::OCI_RUNTIME]
    }
    fn conditions(&self) -> &'static [ConditionType] {
        &[ConditionType::SeccompProfilesReady]
    }
    fn commands(&self) -> &'static [Command] {
        &[Command::Check, Command::Preflight, Command::Run]
    }
    fn schedule(&self) -> Schedule {
        Schedule::OwnTask
    }
    fn round(&self, cx: &Context<'_>, command: Command) -> Outcome {
        let root = cx.seccomp_root;
        if command == Command::Preflight {
            // Before the kubelet: the files alone, each said, or why none.
            let opts = observe::lint_options(&cx.config.seccomp);
            let reports = observe::lint_root_cached(root, &opts, cx.lints);
            let mut findings = judge::findings(&reports);
            if !reports.iter().any(|r| r.is_profile()) {
                let why = format!("no profiles under {}", root.display());
                findings.push(skipped(
                    Check::SECCOMP_PROFILE,
                    root,
                    ProfileReason::NoProfiles,
                    absent_or(root, why),
                ));
            }
            return crate::judge::Round {
                findings,
                conditions: Vec::new(),
            }
            .into();
        }
        let (lint, runtime) = observe::lint_setup(&cx.config.seccomp);
        let mut round = judge::round(root, &observe::lint_root_cached(root, &lint, cx.lints));
        round.findings.push(runtime);
        round.into()
    }
}
