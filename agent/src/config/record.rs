//! The `[record]` section: which pods the agent records (`nodeproof run`
//! keeps each selected pod's recording under its state directory, as
//! `nodeproof record --pod` writes one). Off by default: recording costs a
//! recorded task about 5% on each syscall (docs/trace.md).

use std::collections::BTreeMap;

use kube_core::{Expression, SelectorExt};
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RecordConfig {
    /// Record the selected pods.
    #[serde(default)]
    pub enabled: bool,
    /// Only pods of these namespaces (empty: any namespace).
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Only pods whose labels match, in kubectl's `-l` equality grammar
    /// (`app=vllm,tier!=batch,canary`; empty: any labels).
    #[serde(default)]
    pub selector: String,
    /// Seconds between writes of the recordings (and at stop), to
    /// `recordings/<namespace>/<pod>.json` under the daemon's state
    /// directory (`daemon.state-dir`).
    #[serde(default = "default_interval")]
    pub interval_s: u64,
    /// The rollout guard: a RuntimeClass contract whose profile's latest
    /// version stops a call that a recording kept here holds turns
    /// `not-ready` (`pods::rollout_guard`). Off by default.
    #[serde(default)]
    pub rollout_guard: bool,
}

fn default_interval() -> u64 {
    60
}

impl Default for RecordConfig {
    fn default() -> Self {
        RecordConfig {
            enabled: false,
            namespaces: Vec::new(),
            selector: String::new(),
            interval_s: default_interval(),
            rollout_guard: false,
        }
    }
}

/// `app=vllm,tier!=batch,canary,!legacy` (also `==`) as kube-core's
/// selector expressions, whose matching is theirs (kube-core has no parser
/// of the string form); `Err` names the part that is none of these.
pub fn parse_selector(s: &str) -> Result<Vec<Expression>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let valid = |k: &str| !k.is_empty() && !k.contains(['=', '!', ' ']);
            let r = if let Some((k, v)) = p.split_once("!=") {
                Expression::NotEqual(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once("==").or_else(|| p.split_once('=')) {
                Expression::Equal(k.trim().into(), v.trim().into())
            } else if let Some(k) = p.strip_prefix('!') {
                Expression::DoesNotExist(k.trim().into())
            } else {
                Expression::Exists(p.into())
            };
            let key = match &r {
                Expression::Equal(k, _)
                | Expression::NotEqual(k, _)
                | Expression::Exists(k)
                | Expression::DoesNotExist(k)
                | Expression::In(k, _)
                | Expression::NotIn(k, _) => k,
            };
            if valid(key) {
                Ok(r)
            } else {
                Err(format!(
                    "{p:?} is not a label requirement (key=value, key!=value, key, !key)"
                ))
            }
        })
        .collect()
}

impl RecordConfig {
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.interval_s == 0 {
            p.push("record.interval-s must be at least 1".to_string());
        }
        if let Err(e) = parse_selector(&self.selector) {
            p.push(format!("record.selector: {e}"));
        }
        if self.enabled && self.namespaces.is_empty() && self.selector.trim().is_empty() {
            p.push(
                "record.enabled needs record.namespaces or record.selector: recording every pod is not a default"
                    .to_string(),
            );
        }
        p
    }

    /// Whether a pod of `namespace` with `labels` is recorded.
    pub fn selects(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        let in_namespace =
            self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == namespace);
        in_namespace
            && parse_selector(&self.selector)
                .map(|rs| rs.iter().all(|r| r.matches(labels)))
                .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn pods_are_selected_by_namespace_and_labels() {
        let c = RecordConfig {
            enabled: true,
            namespaces: vec!["ml".into()],
            selector: "app=vllm, tier!=batch,!legacy".into(),
            ..RecordConfig::default()
        };
        assert!(c.problems().is_empty(), "{:?}", c.problems());
        assert!(c.selects("ml", &labels(&[("app", "vllm")])));
        assert!(c.selects("ml", &labels(&[("app", "vllm"), ("tier", "web")])));
        assert!(!c.selects("ml", &labels(&[("app", "vllm"), ("tier", "batch")])));
        assert!(!c.selects("ml", &labels(&[("app", "vllm"), ("legacy", "")])));
        assert!(!c.selects("other", &labels(&[("app", "vllm")])));
        let any_ns = RecordConfig {
            namespaces: vec![],
            selector: "canary".into(),
            ..c
        };
        assert!(any_ns.selects("x", &labels(&[("canary", "1")])));
        assert!(!any_ns.selects("x", &labels(&[])));
    }

    #[test]
    fn what_the_section_refuses() {
        let c = RecordConfig {
            enabled: true,
            interval_s: 0,
            selector: "a=b,=x".into(),
            ..RecordConfig::default()
        };
        let p = c.problems();
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("interval-s"));
        assert!(p[1].contains("\"=x\" is not a label requirement"), "{p:?}");
        let everything = RecordConfig {
            enabled: true,
            ..RecordConfig::default()
        };
        assert!(everything.problems()[0].contains("needs record.namespaces or record.selector"));
        // Off, nothing is asked for.
        assert!(RecordConfig::default().problems().is_empty());
    }
}
