//! Pods whose seccomp denials began after their profile changed, across
//! nodes: the agents' `SeccompDenied` Events that carry the change
//! ([`DenialChange`] annotations: the version the container started with
//! and the one before), grouped by profile and change. Pure.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Event;
use serde::Serialize;

use nodeproof_report::denial_change::{DenialChange, PreviousVerdict, DENIED_REASON};

/// One profile change and the pods denied after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProfileChange {
    pub profile: String,
    /// sha256 of the version before, and of the one the pods started with.
    pub previous: String,
    pub version: String,
    /// When the agents first saw `version` (the earliest any node says).
    pub since: String,
    pub pods: Vec<ChangedPod>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChangedPod {
    pub namespace: String,
    pub pod: String,
    /// The node whose agent saw the denials.
    pub node: String,
    /// Each denied syscall and what the previous version did with it.
    pub syscalls: Vec<(String, PreviousVerdict)>,
}

impl ProfileChange {
    /// The change broke calls: the previous version allowed one the pods
    /// are now denied.
    pub fn broke(&self) -> bool {
        self.pods
            .iter()
            .flat_map(|p| &p.syscalls)
            .any(|(_, v)| *v == PreviousVerdict::Allowed)
    }

    /// The syscalls the previous version allowed, each once.
    pub fn broken_syscalls(&self) -> Vec<String> {
        let s: BTreeSet<&str> = self
            .pods
            .iter()
            .flat_map(|p| &p.syscalls)
            .filter(|(_, v)| *v == PreviousVerdict::Allowed)
            .map(|(s, _)| s.as_str())
            .collect();
        s.into_iter().map(str::to_string).collect()
    }

    pub fn nodes(&self) -> usize {
        self.pods
            .iter()
            .map(|p| p.node.as_str())
            .collect::<BTreeSet<_>>()
            .len()
    }
}

/// Short enough for a line: the first 12 hex digits, as `git` shortens.
pub fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// The changes the Events name, by profile then version; Events without
/// the annotations (a container whose profile never changed) are not theirs.
pub fn changes(events: &[Event]) -> Vec<ProfileChange> {
    // (profile, previous, version) → (since, pod key → pod).
    type Pods = BTreeMap<(String, String, String), ChangedPod>;
    let mut groups: BTreeMap<(String, String, String), (String, Pods)> = BTreeMap::new();
    for e in events {
        if e.reason.as_deref() != Some(DENIED_REASON) {
            continue;
        }
        let Some(change) = e
            .metadata
            .annotations
            .as_ref()
            .and_then(DenialChange::from_annotations)
        else {
            continue;
        };
        let namespace = e.involved_object.namespace.clone().unwrap_or_default();
        let pod = e.involved_object.name.clone().unwrap_or_default();
        let node = e
            .reporting_instance
            .clone()
            .or_else(|| e.source.as_ref().and_then(|s| s.host.clone()))
            .unwrap_or_default();
        let (since, pods) = groups
            .entry((
                change.profile.clone(),
                change.previous.clone(),
                change.version.clone(),
            ))
            .or_insert_with(|| (change.version_since.clone(), BTreeMap::new()));
        // RFC 3339 in UTC sorts as time.
        if change.version_since < *since {
            since.clone_from(&change.version_since);
        }
        let p = pods
            .entry((namespace.clone(), pod.clone(), node.clone()))
            .or_insert_with(|| ChangedPod {
                namespace,
                pod,
                node,
                syscalls: Vec::new(),
            });
        if !p
            .syscalls
            .iter()
            .any(|(s, v)| *s == change.syscall && *v == change.previous_verdict)
        {
            p.syscalls.push((change.syscall, change.previous_verdict));
            p.syscalls.sort();
        }
    }
    groups
        .into_iter()
        .map(
            |((profile, previous, version), (since, pods))| ProfileChange {
                profile,
                previous,
                version,
                since,
                pods: pods.into_values().collect(),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(pod: &str, node: &str, syscall: &str, verdict: &str, version: &str) -> Event {
        let change = DenialChange {
            profile: "profiles/app.json".into(),
            syscall: syscall.into(),
            version: version.into(),
            version_since: format!("2026-12-06T14:22:0{}Z", node.len() % 10),
            previous: "9a8b7c6d5e4f3a2b".into(),
            previous_verdict: PreviousVerdict::parse(verdict).unwrap(),
        };
        serde_json::from_value(json!({
            "metadata": {"name": format!("{pod}.1"), "namespace": "ml",
                "annotations": change.to_annotations()},
            "involvedObject": {"kind": "Pod", "namespace": "ml", "name": pod},
            "reason": "SeccompDenied", "type": "Warning",
            "message": format!("denied {syscall} ×3 (EPERM) in container app, profile profiles/app.json"),
            "reportingInstance": node,
        }))
        .unwrap()
    }

    #[test]
    fn events_group_by_profile_and_change_across_nodes() {
        let mut plain = event("other", "n1", "mount", "denied", "1f2e");
        plain.metadata.annotations = None;
        let events = vec![
            event("web-0", "n1", "mkdir", "allowed", "1f2e3d4c5b6a7988"),
            event("web-0", "n1", "mkdir", "allowed", "1f2e3d4c5b6a7988"),
            event("web-1", "node-22", "mkdir", "allowed", "1f2e3d4c5b6a7988"),
            event("web-1", "node-22", "mount", "denied", "1f2e3d4c5b6a7988"),
            event("web-2", "n1", "mount", "denied", "77aa"),
            plain,
        ];
        let c = changes(&events);
        assert_eq!(c.len(), 2, "{c:#?}");
        let first = c.iter().find(|c| c.version.starts_with("1f2e")).unwrap();
        assert_eq!(first.pods.len(), 2);
        assert_eq!(first.nodes(), 2);
        assert!(first.broke());
        assert_eq!(first.broken_syscalls(), ["mkdir"]);
        assert_eq!(first.since, "2026-12-06T14:22:02Z");
        assert_eq!(
            first.pods[1].syscalls,
            [
                ("mkdir".to_string(), PreviousVerdict::Allowed),
                ("mount".to_string(), PreviousVerdict::Denied)
            ]
        );
        // Denied by the previous version too: listed, not broken by the change.
        let second = c.iter().find(|c| c.version == "77aa").unwrap();
        assert!(!second.broke());
        assert_eq!(short("1f2e3d4c5b6a7988"), "1f2e3d4c5b6a");
    }
}
