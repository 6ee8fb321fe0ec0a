//! What a seccomp oracle is: something that runs a profile's bytes through a
//! real runtime and says what happened. The splice oracle (`splice`: a busybox
//! bundle run by runc or crun) implements it; so can a path through
//! containerd's CRI API. The campaign and the agreement tests take any
//! [`SeccompOracle`].

use std::fmt;
use std::io;
use strum::{EnumString, IntoStaticStr};

/// What the runtime did with the profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, IntoStaticStr, EnumString)]
#[strum(serialize_all = "kebab-case")]
pub enum Verdict {
    /// The container's command ran and exited 0.
    Accepted,
    /// The profile was refused before any container process existed.
    Rejected,
    /// The container's process existed but the command did not run to exit 0.
    StartFailed,
}

impl Verdict {
    /// The spelling used in `runc-results.json`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<Verdict> {
        s.parse().ok()
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of one run through a runtime.
#[derive(Debug, Clone)]
pub struct RuntimeRun {
    pub verdict: Verdict,
    /// Exit status of the runtime under `timeout` (124 = timed out; 128+N =
    /// killed by signal N; -1 = refused before the runtime ran).
    pub exit: i32,
    /// The runtime's stderr (its own error lines and whatever the container wrote there).
    pub stderr: String,
    /// Whether the container's init process was started (the createRuntime marker exists).
    pub init_started: bool,
    pub timed_out: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum OracleError {
    #[error("oracle unavailable: {0}")]
    Unavailable(String),
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("the runtime binary")]
    Runtime(#[from] crate::runtimes::RuntimeError),
    #[error("`{runtime} spec` failed: {stderr}")]
    Spec { runtime: String, stderr: String },
    #[error("bad config.json from `spec`: {0}")]
    Config(String),
}

/// A real runtime that judges seccomp profiles.
pub trait SeccompOracle: Sync {
    /// Which runtime judges (`runc-1.1.5`, `crun-1.21`, `containerd-1.6+runc-1.1.5`, ...).
    fn name(&self) -> &str;

    /// What the runtime does with a container whose seccomp profile is
    /// `profile` (the file's raw bytes) and whose `noNewPrivileges` is as
    /// given, running `/bin/true`. `Err` only when the oracle itself failed.
    fn judge(&self, profile: &[u8], no_new_privileges: bool) -> Result<RuntimeRun, OracleError>;

    /// Like [`SeccompOracle::judge`], with the runtime's usual time for a
    /// start that timed out under a short one (libseccomp takes seconds on
    /// thousands of rules). The same as `judge` where there is no short one.
    fn judge_patiently(
        &self,
        profile: &[u8],
        no_new_privileges: bool,
    ) -> Result<RuntimeRun, OracleError> {
        self.judge(profile, no_new_privileges)
    }
}
