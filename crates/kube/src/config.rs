//! The `[report]` section of the agent config: where and as whom to
//! report, and the reporter's policy (docs/reporting.md).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use nodeproof_findings::ConditionType;
use serde::Deserialize;

use crate::conditions::{Hysteresis, Policy};

/// Reporting to the API server (docs/reporting.md); flags override it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ReportConfig {
    /// The Node's name (default: NODE_NAME, then the hostname).
    pub node_name: Option<String>,
    /// Credentials (default: the kubelet's kubeconfig where its unit files or
    /// the distribution put it, then in-cluster, else log only).
    pub kubeconfig: Option<PathBuf>,
    /// Where the host's `/` is for that search (default `/`; a pod that
    /// mounts the host elsewhere, or a test's temp dir).
    pub host_root: Option<PathBuf>,
    /// Label the Node `nodeproof.dev/<condition>=true|false` (node identity suffices).
    #[serde(default)]
    pub labels: bool,
    /// Taint the Node while a GPU condition is bad, with this separate
    /// credential (deploy/rbac-taints.yaml); unset: no taints.
    pub taint_kubeconfig: Option<PathBuf>,
    /// Seconds between heartbeat writes when nothing changed (default 300).
    pub heartbeat_s: Option<u64>,
    /// Consecutive bad results before a condition goes False (default 2).
    pub to_bad: Option<u32>,
    /// Consecutive good results before it recovers (default 3).
    pub to_good: Option<u32>,
    /// Per condition type, e.g. `[report.hysteresis.GPUHealthy] to-bad = 1`.
    #[serde(default)]
    pub hysteresis: BTreeMap<String, HysteresisConfig>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct HysteresisConfig {
    pub to_bad: Option<u32>,
    pub to_good: Option<u32>,
}

impl ReportConfig {
    /// Every problem of the section, each naming its key.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.heartbeat_s == Some(0) {
            out.push("report.heartbeat-s must be at least 1".to_string());
        }
        let mut counts = vec![
            ("report.to-bad".to_string(), self.to_bad),
            ("report.to-good".to_string(), self.to_good),
        ];
        for (kind, h) in &self.hysteresis {
            if ConditionType::parse(kind).is_none() {
                let owned: Vec<_> = ConditionType::ALL.map(ConditionType::as_str).into();
                out.push(format!(
                    "report.hysteresis.{kind}: not a condition nodeproof reports (one of {})",
                    owned.join(", ")
                ));
            }
            counts.push((format!("report.hysteresis.{kind}.to-bad"), h.to_bad));
            counts.push((format!("report.hysteresis.{kind}.to-good"), h.to_good));
        }
        out.extend(
            counts
                .into_iter()
                .filter(|(_, v)| *v == Some(0))
                .map(|(k, _)| format!("{k} must be at least 1")),
        );
        out
    }

    /// The reporter's policy for a long-running agent (a one-shot run has no history to smooth).
    pub fn policy(&self) -> Policy {
        let mut policy = Policy::default();
        if let Some(s) = self.heartbeat_s {
            policy.heartbeat = Duration::from_secs(s);
        }
        let base = Hysteresis {
            to_bad: self.to_bad.unwrap_or(policy.hysteresis.to_bad),
            to_good: self.to_good.unwrap_or(policy.hysteresis.to_good),
        };
        policy.hysteresis = base;
        // Profiles and pod references are judged from files and API
        // objects, not noisy probes: smoothing would only hold back the
        // pod problem the issue wants said within 5 s. Configurable still.
        policy
            .per_kind
            .insert(ConditionType::SeccompProfilesReady, Hysteresis::IMMEDIATE);
        // Unknown kinds were refused by `problems`.
        let owned = self
            .hysteresis
            .iter()
            .filter_map(|(k, h)| Some((ConditionType::parse(k)?, h)));
        for (kind, h) in owned {
            policy.per_kind.insert(
                kind,
                Hysteresis {
                    to_bad: h.to_bad.unwrap_or(base.to_bad),
                    to_good: h.to_good.unwrap_or(base.to_good),
                },
            );
        }
        policy
    }
}
