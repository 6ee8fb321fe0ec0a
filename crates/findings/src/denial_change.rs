//! The profile change a pod's seccomp denials followed, as the agent writes
//! it on its `SeccompDenied` Event (annotations) and `cluster check` reads it
//! back across nodes: typed both ways, so neither side matches message text.
//!
//! A seccomp filter is fixed when a container starts (runc loads it in
//! `runc init`, before the process runs), so a profile file edited under a
//! running container changes nothing for it: the version that counts is the
//! one on disk when the container started. The Event says that version and
//! the one before it, and whether the one before allowed the denied call.

use std::collections::BTreeMap;

/// The reason of the Event a pod's denials make (one per pod, container,
/// syscall and outcome per interval).
pub const DENIED_REASON: &str = "SeccompDenied";

/// The profile, as the pod spec names it under the seccomp root
/// (`profiles/app.json`).
pub const PROFILE: &str = "seccomp.nodeproof.dev/profile";
/// sha256 (hex) of the version the container started with.
pub const VERSION: &str = "seccomp.nodeproof.dev/version";
/// When the agent first saw that version on disk, RFC 3339.
pub const VERSION_SINCE: &str = "seccomp.nodeproof.dev/version-since";
/// sha256 (hex) of the version before it.
pub const PREVIOUS: &str = "seccomp.nodeproof.dev/previous-version";
/// What the version before did with the denied call: [`PreviousVerdict`].
pub const PREVIOUS_VERDICT: &str = "seccomp.nodeproof.dev/previous-verdict";
/// The syscall denied.
pub const SYSCALL: &str = "seccomp.nodeproof.dev/syscall";

/// What the previous version of the profile did with the call the current
/// one denied.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum PreviousVerdict {
    /// It allowed it: the change broke this call.
    Allowed,
    /// It denied it too (maybe with another errno): the change did not.
    Denied,
    /// It could not be judged (no compiled filter for the arch or mode, or
    /// the call's arguments were not seen).
    Unknown,
}

impl PreviousVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            PreviousVerdict::Allowed => "allowed",
            PreviousVerdict::Denied => "denied",
            PreviousVerdict::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<PreviousVerdict> {
        [
            PreviousVerdict::Allowed,
            PreviousVerdict::Denied,
            PreviousVerdict::Unknown,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }
}

/// The change one Event's denials followed.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct DenialChange {
    pub profile: String,
    pub syscall: String,
    /// sha256 hex of the version the container started with.
    pub version: String,
    /// RFC 3339.
    pub version_since: String,
    pub previous: String,
    pub previous_verdict: PreviousVerdict,
}

impl DenialChange {
    pub fn to_annotations(&self) -> BTreeMap<String, String> {
        [
            (PROFILE, self.profile.clone()),
            (SYSCALL, self.syscall.clone()),
            (VERSION, self.version.clone()),
            (VERSION_SINCE, self.version_since.clone()),
            (PREVIOUS, self.previous.clone()),
            (PREVIOUS_VERDICT, self.previous_verdict.as_str().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// The change an Event's annotations name; `None` when any is missing
    /// or the verdict is not one of ours (an Event about a container whose
    /// profile never changed carries none).
    pub fn from_annotations(a: &BTreeMap<String, String>) -> Option<DenialChange> {
        Some(DenialChange {
            profile: a.get(PROFILE)?.clone(),
            syscall: a.get(SYSCALL)?.clone(),
            version: a.get(VERSION)?.clone(),
            version_since: a.get(VERSION_SINCE)?.clone(),
            previous: a.get(PREVIOUS)?.clone(),
            previous_verdict: PreviousVerdict::parse(a.get(PREVIOUS_VERDICT)?)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_round_trips_through_annotations_and_a_missing_key_is_none() {
        let c = DenialChange {
            profile: "profiles/app.json".into(),
            syscall: "mkdir".into(),
            version: "1f2e".into(),
            version_since: "2026-12-06T14:22:05Z".into(),
            previous: "9a8b".into(),
            previous_verdict: PreviousVerdict::Allowed,
        };
        let mut a = c.to_annotations();
        assert_eq!(a[PREVIOUS_VERDICT], "allowed");
        assert_eq!(DenialChange::from_annotations(&a), Some(c));
        a.insert(PREVIOUS_VERDICT.into(), "maybe".into());
        assert_eq!(DenialChange::from_annotations(&a), None);
        a.remove(PREVIOUS_VERDICT);
        assert_eq!(DenialChange::from_annotations(&a), None);
    }
}
