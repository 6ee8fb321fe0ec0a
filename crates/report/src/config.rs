//! The `[report]` section of the agent config: where and as whom to
//! report, and the reporter's policy (docs/reporting.md).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use nodeproof_findings::ConditionType;
use serde::Deserialize;

use crate::conditions::{Hysteresis, Policy};
use crate::ratelimit::{self, LoadPolicy};

/// Reporting to the API server (docs/reporting.md); flags override it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ReportConfig {
    /// The Node's name (default: NODE_NAME, then the hostname).
    pub node_name: Option<String>,
    /// Credentials (default: the kubelet's kubeconfig where its unit files or
    /// the distribution put it, then in-cluster, else log only).
    pub kubeconfig: Option<PathBuf>,
    /// The context of `kubeconfig` to use instead of its current-context (as
    /// `kubectl --context`); only with `kubeconfig`.
    pub context: Option<String>,
    /// Where the host's `/` is for that search (default `/`; a pod that
    /// mounts the host elsewhere, or a test's temp dir).
    pub host_root: Option<PathBuf>,
    /// Label the Node `nodeproof.dev/<condition>=true|false` (node identity suffices).
    #[serde(default)]
    pub labels: bool,
    /// Label the Node `runtimeclass.nodeproof.dev/<class>=ready|not-ready`
    /// for each RuntimeClass carrying `nodeproof.dev/localhost-profiles`
    /// (default true; node identity suffices).
    pub runtimeclass_labels: Option<bool>,
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
    /// Sustained API requests per second of this agent (default 0.2).
    pub qps: Option<Qps>,
    /// Requests allowed at once before `qps` applies (default 10).
    pub burst: Option<u32>,
    /// Each heartbeat period is drawn from heartbeat-s ± this % (default 10).
    pub heartbeat_jitter_pct: Option<u32>,
    /// The first request after start waits 0..this many seconds (default 30).
    pub start_spread_s: Option<u64>,
    /// A status change waits 0..this many seconds, per node (default 0).
    pub change_spread_s: Option<u64>,
}

/// A float key compared by its bits, so the config stays `Eq` (a reload
/// compares configs); NaN and infinities are refused by `problems`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(transparent)]
pub struct Qps(pub f64);

impl PartialEq for Qps {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Qps {}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct HysteresisConfig {
    pub to_bad: Option<u32>,
    pub to_good: Option<u32>,
}

impl ReportConfig {
    /// `runtimeclass-labels`, on unless turned off.
    pub fn runtimeclass_labels(&self) -> bool {
        self.runtimeclass_labels.unwrap_or(true)
    }

    /// Every problem of the section, each naming its key.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.heartbeat_s == Some(0) {
            out.push("report.heartbeat-s must be at least 1".to_string());
        }
        if self.context.is_some() && self.kubeconfig.is_none() {
            out.push(
                "report.context: picks a context of report.kubeconfig, which is not set (the kubelet's kubeconfig has one)"
                    .to_string(),
            );
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
        out.extend(self.load_problems());
        out
    }

    fn load_problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(Qps(q)) = self.qps {
            // Above the kubelet's own kubeAPIQPS would defeat the point.
            if !(q > 0.0 && q <= ratelimit::MAX_QPS) {
                out.push(format!(
                    "report.qps must be above 0 and at most {} (the kubelet's own kubeAPIQPS), not {q}",
                    ratelimit::MAX_QPS
                ));
            }
        }
        if let Some(b) = self.burst {
            if !(1..=ratelimit::MAX_BURST).contains(&b) {
                out.push(format!(
                    "report.burst must be 1 to {} (the kubelet's own kubeAPIBurst), not {b}",
                    ratelimit::MAX_BURST
                ));
            }
        }
        if let Some(p) = self.heartbeat_jitter_pct {
            if p > ratelimit::MAX_HEARTBEAT_JITTER_PCT {
                out.push(format!(
                    "report.heartbeat-jitter-pct must be 0 to {}, not {p}",
                    ratelimit::MAX_HEARTBEAT_JITTER_PCT
                ));
            }
        }
        if let Some(s) = self.start_spread_s {
            if s > ratelimit::MAX_START_SPREAD_S {
                out.push(format!(
                    "report.start-spread-s must be 0 to {}, not {s}",
                    ratelimit::MAX_START_SPREAD_S
                ));
            }
        }
        if let Some(s) = self.change_spread_s {
            if s > ratelimit::MAX_CHANGE_SPREAD_S {
                out.push(format!(
                    "report.change-spread-s must be 0 to {}, not {s}",
                    ratelimit::MAX_CHANGE_SPREAD_S
                ));
            }
        }
        out
    }

    /// The daemon's load limits (`ratelimit::LoadPolicy`): the defaults
    /// there, overridden key by key. Applied at start, not on reload.
    pub fn load(&self) -> LoadPolicy {
        let d = LoadPolicy::default();
        LoadPolicy {
            qps: self.qps.map_or(d.qps, |q| q.0),
            burst: self.burst.unwrap_or(d.burst),
            heartbeat_jitter_pct: self.heartbeat_jitter_pct.unwrap_or(d.heartbeat_jitter_pct),
            start_spread: self
                .start_spread_s
                .map_or(d.start_spread, Duration::from_secs),
            change_spread: self
                .change_spread_s
                .map_or(d.change_spread, Duration::from_secs),
        }
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
        // pod problem that must be said within 5 s. Configurable still.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> ReportConfig {
        toml::from_str(text).expect("a [report] section")
    }

    #[test]
    fn a_context_needs_the_kubeconfig_it_picks_from() {
        let alone = parse("context = \"prod\"\n");
        assert_eq!(alone.problems().len(), 1);
        assert!(alone.problems()[0].starts_with("report.context: "));
        let with = parse("kubeconfig = \"/k\"\ncontext = \"prod\"\n");
        assert!(with.problems().is_empty(), "{:?}", with.problems());
        assert_eq!(with.context.as_deref(), Some("prod"));
    }

    #[test]
    fn load_keys_default_parse_and_apply() {
        assert_eq!(ReportConfig::default().load(), LoadPolicy::default());
        let c = parse(
            "qps = 1.5\nburst = 20\nheartbeat-jitter-pct = 25\nstart-spread-s = 60\nchange-spread-s = 30\n",
        );
        assert!(c.problems().is_empty(), "{:?}", c.problems());
        assert_eq!(
            c.load(),
            LoadPolicy {
                qps: 1.5,
                burst: 20,
                heartbeat_jitter_pct: 25,
                start_spread: Duration::from_secs(60),
                change_spread: Duration::from_secs(30),
            }
        );
        // Integers are accepted for the float key too.
        assert_eq!(parse("qps = 2").load().qps, 2.0);
    }

    #[test]
    fn load_key_problems_name_their_keys() {
        for (text, key) in [
            ("qps = 0.0", "report.qps"),
            ("qps = -1.0", "report.qps"),
            ("qps = nan", "report.qps"),
            ("qps = inf", "report.qps"),
            ("qps = 51.0", "report.qps"),
            ("burst = 0", "report.burst"),
            ("burst = 101", "report.burst"),
            ("heartbeat-jitter-pct = 51", "report.heartbeat-jitter-pct"),
            ("start-spread-s = 3601", "report.start-spread-s"),
            ("change-spread-s = 301", "report.change-spread-s"),
        ] {
            let problems = parse(text).problems();
            assert_eq!(problems.len(), 1, "{text}: {problems:?}");
            assert!(problems[0].starts_with(key), "{text}: {problems:?}");
        }
        // The edges are allowed.
        let edges = parse(
            "qps = 50.0\nburst = 1\nheartbeat-jitter-pct = 0\nstart-spread-s = 0\nchange-spread-s = 300\n",
        );
        assert!(edges.problems().is_empty(), "{:?}", edges.problems());
        // Problems of several keys come together.
        assert_eq!(parse("qps = 0.0\nburst = 0").problems().len(), 2);
    }
}
