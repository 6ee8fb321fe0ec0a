//! The one result type every check produces, and the node conditions
//! derived from them. What `nodeproof check` prints is what the daemon
//! reports, so what a user sees by hand is what the cluster sees.

use serde::Serialize;

/// How bad a finding is for the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warning,
    Failed,
}

/// One checked subject: a profile, a GPU, the tracer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Which check produced it, e.g. `seccomp-profile`.
    pub check: &'static str,
    /// What was checked, e.g. a profile path.
    pub subject: String,
    pub status: Status,
    /// CamelCase reason, e.g. `ProfileRejected`.
    pub reason: String,
    /// One line naming the cause.
    pub message: String,
}

/// A node condition nodeproof owns (positive: True = good).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// "True", "False" or "Unknown", as the API spells them.
    pub status: &'static str,
    pub reason: String,
    pub message: String,
}

/// The node condition types nodeproof owns: the only ones it ever writes
/// or removes on a Node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum ConditionType {
    SeccompProfilesReady,
    SeccompTracingReady,
    GPUDriverReady,
    GPUHealthy,
}

impl ConditionType {
    pub const ALL: [ConditionType; 4] = [
        ConditionType::SeccompProfilesReady,
        ConditionType::SeccompTracingReady,
        ConditionType::GPUDriverReady,
        ConditionType::GPUHealthy,
    ];

    /// The type as the Node's `status.conditions[].type` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::SeccompProfilesReady => "SeccompProfilesReady",
            ConditionType::SeccompTracingReady => "SeccompTracingReady",
            ConditionType::GPUDriverReady => "GPUDriverReady",
            ConditionType::GPUHealthy => "GPUHealthy",
        }
    }

    /// The owned type spelled `name`, if any.
    pub fn parse(name: &str) -> Option<ConditionType> {
        ConditionType::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

impl std::fmt::Display for ConditionType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
