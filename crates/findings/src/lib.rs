//! The vocabulary every check speaks: a [`Finding`] per checked subject and
//! the node [`Condition`]s derived from them, with typed condition types,
//! statuses and check names. What `nodeproof check` prints is what the
//! daemon reports, so what a user sees by hand is what the cluster sees.

use std::fmt;

use serde::{Deserialize, Serialize};
use strum::{EnumString, IntoStaticStr};

pub mod denial_change;
pub mod errors;
pub mod reason;

pub use reason::Reason;

/// How bad a finding is for the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, IntoStaticStr)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Status {
    Ok,
    Warning,
    /// Loud in the STATUS column; `failed` in JSON.
    #[strum(serialize = "FAILED")]
    Failed,
    /// The check did not apply here (preflight: no GPU, no rootless
    /// kubelet); the finding's message says why.
    Skipped,
}

impl Status {
    /// The STATUS column of `check` and `preflight`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Which check produced a finding (the CHECK column of `nodeproof check`,
/// `check` in `-o json`): a kebab-case name, defined once as a constant by
/// the code that makes the finding. The checks the crates below the agent
/// judge (a profile's lint, the tracer, NVML) are named here; a check of the
/// agent's own names itself in its module (`Check::named`), so adding one
/// touches no list here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Check(&'static str);

impl Check {
    /// One profile under the kubelet seccomp root.
    pub const SECCOMP_PROFILE: Check = Check::named("seccomp-profile");
    /// Whether the eBPF tracer loads.
    pub const SECCOMP_TRACING: Check = Check::named("seccomp-tracing");
    /// The NVIDIA driver as NVML and the PCI bus see it.
    pub const GPU_DRIVER: Check = Check::named("gpu-driver");
    /// One GPU's health.
    pub const GPU_HEALTH: Check = Check::named("gpu-health");
    /// What the kubelet offers against the GPUs NVML calls healthy.
    pub const GPU_ADVERTISED: Check = Check::named("gpu-advertised");
    /// A seccomp reference of a pod bound to this node.
    pub const POD_PROFILE: Check = Check::named("pod-profile");
    /// An annotated RuntimeClass's contract on this node.
    pub const RUNTIMECLASS_CONTRACT: Check = Check::named("runtimeclass-contract");
    /// The OCI runtime (and its release) whose behaviour profiles are judged by.
    pub const OCI_RUNTIME: Check = Check::named("oci-runtime");

    /// Every check named here, for the tests that hold each one to a check
    /// that makes it.
    pub const BUILT_IN: [Check; 8] = [
        Check::SECCOMP_PROFILE,
        Check::SECCOMP_TRACING,
        Check::GPU_DRIVER,
        Check::GPU_HEALTH,
        Check::GPU_ADVERTISED,
        Check::POD_PROFILE,
        Check::RUNTIMECLASS_CONTRACT,
        Check::OCI_RUNTIME,
    ];

    /// A check's name: lower-case ASCII letters and digits in words joined
    /// by `-` (refused at compile time otherwise, in a `const`).
    pub const fn named(name: &'static str) -> Check {
        let b = name.as_bytes();
        assert!(!b.is_empty(), "a check's name is not empty");
        assert!(
            b[0] != b'-' && b[b.len() - 1] != b'-',
            "a check's name neither starts nor ends with '-'"
        );
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            assert!(
                c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-',
                "a check's name is kebab-case"
            );
            i += 1;
        }
        Check(name)
    }

    pub fn as_str(self) -> &'static str {
        self.0
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// One checked subject: a profile, a GPU, the tracer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub check: Check,
    /// What was checked, e.g. a profile path.
    pub subject: String,
    pub status: Status,
    /// Why, in its check's vocabulary; serialized CamelCase, e.g. `ProfileRejected`.
    pub reason: Reason,
    /// One line naming the cause.
    pub message: String,
    /// What a person needs only when digging (a verifier's log, the errors of
    /// every attempt): in `-o json` and the journal, never in the table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Why something a command was to judge was not judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NotJudgedCause {
    /// No API credentials given or found on this node: an offline node,
    /// where the pods are not part of what is asked.
    NoCredentials,
    /// The credentials given or found cannot be used (unreadable, not a
    /// kubeconfig, a certificate that does not load).
    CredentialsUnusable,
    /// The Node's name is not known (no `--node-name`, `NODE_NAME` or hostname).
    NoNodeName,
    /// The credential is another Node's.
    OtherNode,
    /// The API server refused, failed or did not answer.
    ApiServer,
}

impl NotJudgedCause {
    /// Whether not judging fails the command: everything but
    /// [`NotJudgedCause::NoCredentials`], where nothing asked for it.
    pub fn fails(self) -> bool {
        self != NotJudgedCause::NoCredentials
    }
}

/// Something a command was to judge and could not: what, why, and what
/// to do, in one line (`check` prints `pods: not judged (<message>)`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotJudged {
    pub check: Check,
    /// What was not judged, e.g. `pods`.
    pub subject: String,
    pub cause: NotJudgedCause,
    /// Whether it fails the command ([`NotJudgedCause::fails`]).
    pub fails: bool,
    /// Why, and the remedy.
    pub message: String,
}

impl NotJudged {
    pub fn new(
        check: Check,
        subject: impl Into<String>,
        cause: NotJudgedCause,
        message: impl Into<String>,
    ) -> NotJudged {
        NotJudged {
            check,
            subject: subject.into(),
            cause,
            fails: cause.fails(),
            message: message.into(),
        }
    }
}

impl fmt::Display for NotJudged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: not judged ({})", self.subject, self.message)
    }
}

/// The most characters a condition's message may have. It is read in
/// `kubectl describe node` and by alerting on the Node: one or two short
/// sentences naming the state and the cause; the detail (a verifier's
/// output, every refused attempt) goes to the journal and the finding
/// (`check -o json`).
pub const CONDITION_MESSAGE_MAX: usize = 200;

/// Whether `message` is fit for a condition: at most
/// [`CONDITION_MESSAGE_MAX`] characters, at most two sentences, one line.
pub fn fits_condition(message: &str) -> bool {
    let sentences = message.trim_end_matches('.').matches(". ").count() + 1;
    message.chars().count() <= CONDITION_MESSAGE_MAX && sentences <= 2 && !message.contains('\n')
}

/// A node condition nodeproof owns (positive: True = good).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: ConditionType,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
}

impl Condition {
    pub fn new(
        kind: ConditionType,
        status: ConditionStatus,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Condition {
        Condition {
            kind,
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// Whether the condition says the node is fine.
    pub fn is_true(&self) -> bool {
        self.status == ConditionStatus::True
    }
}

/// The node condition types nodeproof owns: the only ones it ever writes
/// or removes on a Node.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    IntoStaticStr,
    EnumString,
)]
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
        self.into()
    }

    /// The owned type spelled `name`, if any.
    pub fn parse(name: &str) -> Option<ConditionType> {
        name.parse().ok()
    }
}

impl fmt::Display for ConditionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// A condition's status, as the API spells it (`core/v1 ConditionStatus`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    Serialize,
    Deserialize,
    IntoStaticStr,
    EnumString,
)]
pub enum ConditionStatus {
    True,
    False,
    #[default]
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The status an API object carries; anything but the three the API
    /// defines reads as Unknown, which is what it tells a reader.
    pub fn parse(s: &str) -> ConditionStatus {
        s.parse().unwrap_or(ConditionStatus::Unknown)
    }

    /// `True` when `good`, else `False`.
    pub fn from_bool(good: bool) -> ConditionStatus {
        if good {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// `n` with the noun that agrees with it, for messages people read:
/// `count(1, "profile", "profiles")` is `1 profile`, `count(3, ...)` `3 profiles`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_message_is_two_short_sentences_at_most() {
        assert!(fits_condition("tracing seccomp denials with fexit."));
        assert!(fits_condition("no seccomp tracing: this process lacks CAP_BPF. Grant CAP_BPF and CAP_PERFMON, or run as root."));
        assert!(!fits_condition("One. Two. Three."));
        assert!(!fits_condition("two\nlines"));
        assert!(!fits_condition(&"x".repeat(CONDITION_MESSAGE_MAX + 1)));
    }

    #[test]
    fn only_a_node_without_credentials_is_not_judged_without_failing() {
        let offline = NotJudged::new(
            Check::POD_PROFILE,
            "pods",
            NotJudgedCause::NoCredentials,
            "no API credentials found",
        );
        assert!(!offline.fails);
        assert_eq!(
            offline.to_string(),
            "pods: not judged (no API credentials found)"
        );
        let v = serde_json::to_value(&offline).unwrap();
        assert_eq!(v["cause"], "no-credentials");
        assert_eq!(v["check"], "pod-profile");
        for cause in [
            NotJudgedCause::CredentialsUnusable,
            NotJudgedCause::NoNodeName,
            NotJudgedCause::OtherNode,
            NotJudgedCause::ApiServer,
        ] {
            assert!(NotJudged::new(Check::POD_PROFILE, "pods", cause, "m").fails);
        }
        assert_eq!(serde_json::to_value(Status::Skipped).unwrap(), "skipped");
        assert_eq!(serde_json::to_value(Status::Failed).unwrap(), "failed");
        assert_eq!(Status::Failed.as_str(), "FAILED");
    }

    #[test]
    fn counts_agree_with_their_noun() {
        assert_eq!(count(0, "profile", "profiles"), "0 profiles");
        assert_eq!(count(1, "profile", "profiles"), "1 profile");
        assert_eq!(count(2, "error", "errors"), "2 errors");
    }

    #[test]
    fn names_round_trip_and_serialize_as_the_api_spells_them() {
        for t in ConditionType::ALL {
            assert_eq!(ConditionType::parse(t.as_str()), Some(t));
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
        assert_eq!(ConditionType::parse("Ready"), None);
        for s in [
            ConditionStatus::True,
            ConditionStatus::False,
            ConditionStatus::Unknown,
        ] {
            assert_eq!(ConditionStatus::parse(s.as_str()), s);
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        assert_eq!(ConditionStatus::parse("true"), ConditionStatus::Unknown);
        assert_eq!(
            serde_json::to_value(Check::named("static-pod-profile")).unwrap(),
            "static-pod-profile"
        );
        // JSON says what the table says.
        assert_eq!(
            serde_json::to_value(Check::RUNTIMECLASS_CONTRACT).unwrap(),
            Check::RUNTIMECLASS_CONTRACT.as_str()
        );
    }
}
