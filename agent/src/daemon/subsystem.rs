//! What has a state of its own in `nodeproof run`, by the name
//! `/healthz/<name>`, `STATUS=` and journald's `NODEPROOF_CHECK=` use: the
//! checks of `crate::checks::REGISTRY` the daemon runs (the four with a
//! task of their own, and each one the check runner schedules), and the
//! reporter.

use std::fmt;

use crate::checks::{NodeCheck, Schedule, REGISTRY};
use crate::judge::Origin;

/// A subsystem of the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Subsystem {
    /// The profiles task (inotify on the seccomp root).
    Profiles,
    /// The pods watcher.
    Pods,
    /// The tracer's thread.
    Tracing,
    /// The GPU probe's thread.
    Gpu,
    /// A check the check runner runs on its period.
    Scheduled(Scheduled),
    /// The reporter (the API server's writes).
    Reporter,
}

/// A check of the registry the check runner runs ([`Schedule::Every`]),
/// by its place there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Scheduled(usize);

impl Scheduled {
    /// Every check the runner runs, in the registry's order.
    pub fn all() -> impl Iterator<Item = Scheduled> {
        REGISTRY
            .iter()
            .enumerate()
            .filter(|(_, c)| matches!(c.schedule(), Schedule::Every(_)))
            .map(|(i, _)| Scheduled(i))
    }

    pub fn check(self) -> &'static dyn NodeCheck {
        REGISTRY[self.0]
    }
}

impl Subsystem {
    /// Every subsystem, in the order `STATUS=` lists them.
    pub fn all() -> Vec<Subsystem> {
        let mut all = vec![
            Subsystem::Profiles,
            Subsystem::Pods,
            Subsystem::Tracing,
            Subsystem::Gpu,
        ];
        all.extend(Scheduled::all().map(Subsystem::Scheduled));
        all.push(Subsystem::Reporter);
        all
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Subsystem::Profiles => "profiles",
            Subsystem::Pods => crate::pods::CHECK_NAME,
            Subsystem::Tracing => "tracing",
            Subsystem::Gpu => crate::judge::gpu::CHECK_NAME,
            Subsystem::Scheduled(s) => s.check().name(),
            Subsystem::Reporter => "reporter",
        }
    }

    pub fn parse(name: &str) -> Option<Subsystem> {
        Subsystem::all().into_iter().find(|s| s.as_str() == name)
    }

    /// How its conditions fold (`judge::node_conditions`).
    pub fn origin(self) -> Origin {
        match self {
            Subsystem::Pods => Origin::PodReferences,
            _ => Origin::Own,
        }
    }
}

impl fmt::Display for Subsystem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::Command;

    /// Each check `run` runs has a subsystem of its name (so its
    /// `/healthz/<name>` and `STATUS=` part), and no subsystem but the
    /// reporter is not a registered check.
    #[test]
    fn every_check_run_runs_is_a_subsystem_of_its_name() {
        for c in REGISTRY
            .iter()
            .filter(|c| c.commands().contains(&Command::Run))
        {
            let s = Subsystem::parse(c.name())
                .unwrap_or_else(|| panic!("{} has no subsystem", c.name()));
            assert_eq!(
                matches!(s, Subsystem::Scheduled(_)),
                matches!(c.schedule(), Schedule::Every(_)),
                "{}",
                c.name()
            );
        }
        for s in Subsystem::all() {
            assert!(
                s == Subsystem::Reporter || crate::checks::named(s.as_str()).is_some(),
                "{s} is not a registered check"
            );
        }
        assert_eq!(Subsystem::parse("gpu"), Some(Subsystem::Gpu));
        assert_eq!(
            Subsystem::parse("seccomp-default").map(|s| s.as_str()),
            Some("seccomp-default")
        );
    }
}
