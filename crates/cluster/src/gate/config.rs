//! The `[gate]` section of the config: which scheduling gates the controller
//! owns and what each waits for. Deserialized by the agent's config loader
//! (unknown keys and wrong types reported with their line:column); the
//! values are checked by [`GateConfig::problems`], then resolved into a
//! [`Policy`].
//!
//! ```toml
//! [gate]
//! heartbeat-s = 300        # the node agents' [report] heartbeat-s
//! stale-heartbeats = 3     # a condition older than 3 heartbeats counts as Unknown
//! [gate.gates."nodeproof.dev/gpu-driver-ready"]
//! conditions = ["GPUDriverReady", "GPUHealthy"]
//! [gate.gates."nodeproof.dev/seccomp-ready"]
//! conditions = ["SeccompProfilesReady"]
//! runtime-class-contract = true
//! ```
//!
//! `steer = false` turns off the narrowing at release (`steer.rs`): the gate
//! is then only removed, and the scheduler may pick any node.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use nodeproof_findings::ConditionType;

/// The agents' default heartbeat (`[report] heartbeat-s`).
const DEFAULT_HEARTBEAT_S: u64 = 300;
const DEFAULT_STALE_HEARTBEATS: u32 = 3;

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct GateConfig {
    /// Seconds between the node agents' heartbeats (default 300).
    pub heartbeat_s: Option<u64>,
    /// Heartbeats a condition may miss before it counts as Unknown (default 3).
    pub stale_heartbeats: Option<u32>,
    /// Gate name → what it waits for. Absent: [`default_gates`].
    pub gates: Option<BTreeMap<String, GateSpec>>,
    /// Narrow a pod to the nodes ready for its gate when removing the gate,
    /// through a readiness label the controller keeps on the Nodes
    /// (default true; docs/gate-controller.md, "Placement").
    pub steer: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct GateSpec {
    /// Node conditions that must be True (and fresh) on a node that could host the pod.
    pub conditions: Vec<ConditionType>,
    /// Also the pod's RuntimeClass contract label
    /// (`runtimeclass.nodeproof.dev/<class>=ready`), when its class declares one.
    #[serde(default)]
    pub runtime_class_contract: bool,
}

/// One configured gate, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    pub name: String,
    pub conditions: Vec<ConditionType>,
    pub contract: bool,
    /// The readiness label the controller keeps on the Nodes ready for this
    /// gate's conditions, and adds to a pod's nodeSelector as it removes the
    /// gate; `None` when not steering, or when the gate waits for no
    /// condition (its RuntimeClass's nodeSelector on the contract label
    /// steers it).
    pub label: Option<String>,
}

/// What the controller judges with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// In name order; only these are ever removed from a pod.
    pub gates: Vec<Gate>,
    /// A condition whose lastHeartbeatTime is older than this counts as Unknown.
    pub stale_after: Duration,
}

/// The prefix of every readiness label ([`Gate::label`]): the controller
/// owns the Nodes' labels under it and removes those no gate wants.
pub const READINESS_LABEL_PREFIX: &str = "gate.nodeproof.dev/";
/// The value of a readiness label on a ready node.
pub const READY: &str = "ready";

/// `gate.nodeproof.dev/<name>` for the gate `prefix/<name>` (or `<name>`):
/// a valid label key for every qualified gate name (the name part is at most
/// 63 characters, as a label name must be).
pub fn readiness_label(gate: &str) -> String {
    let name = gate.rsplit_once('/').map_or(gate, |(_, n)| n);
    format!("{READINESS_LABEL_PREFIX}{name}")
}

/// The pod condition the controller adds (through `pods/status`) as it
/// removes `gate`: the readiness label's key, so `kubectl describe pod`
/// names the gate next to PodScheduled. A pod condition type other than
/// the system ones must be a qualified name (`validatePodConditions`),
/// which it is.
pub fn pod_condition_type(gate: &str) -> String {
    readiness_label(gate)
}

impl Policy {
    pub fn gate(&self, name: &str) -> Option<&Gate> {
        self.gates.iter().find(|g| g.name == name)
    }
}

/// The default gates: a vLLM pod waiting for a node whose GPU driver is
/// loaded and healthy, and seccomp profiles with the pod's RuntimeClass
/// contract.
pub fn default_gates() -> BTreeMap<String, GateSpec> {
    BTreeMap::from([
        (
            "nodeproof.dev/gpu-driver-ready".to_string(),
            GateSpec {
                conditions: vec![ConditionType::GPUDriverReady, ConditionType::GPUHealthy],
                runtime_class_contract: false,
            },
        ),
        (
            "nodeproof.dev/seccomp-ready".to_string(),
            GateSpec {
                conditions: vec![ConditionType::SeccompProfilesReady],
                runtime_class_contract: true,
            },
        ),
    ])
}

impl GateConfig {
    /// Every problem of the section, each naming its key.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.heartbeat_s == Some(0) {
            out.push("gate.heartbeat-s must be at least 1".to_string());
        }
        if self.stale_heartbeats == Some(0) {
            out.push("gate.stale-heartbeats must be at least 1".to_string());
        }
        let mut labels: BTreeMap<String, &str> = BTreeMap::new();
        for (name, spec) in self.gates.iter().flatten() {
            if let Some(other) = labels.insert(readiness_label(name), name) {
                out.push(format!(
                    "gate.gates.{name:?}: shares its readiness label {} with {other:?} (the part after the last `/` must differ between gates)",
                    readiness_label(name)
                ));
            }
            if !is_qualified_name(name) {
                out.push(format!(
                    "gate.gates.{name:?}: not a qualified name (a scheduling gate's name is `prefix/name` or `name`, as a label key)"
                ));
            }
            if spec.conditions.is_empty() && !spec.runtime_class_contract {
                out.push(format!(
                    "gate.gates.{name:?}: waits for nothing (list conditions, or set runtime-class-contract)"
                ));
            }
        }
        out
    }

    /// The policy; call after [`GateConfig::problems`] found none.
    pub fn policy(&self) -> Policy {
        let heartbeat = Duration::from_secs(self.heartbeat_s.unwrap_or(DEFAULT_HEARTBEAT_S));
        let stale = self.stale_heartbeats.unwrap_or(DEFAULT_STALE_HEARTBEATS);
        let gates = self.gates.clone().unwrap_or_else(default_gates);
        let steer = self.steer.unwrap_or(true);
        Policy {
            gates: gates
                .into_iter()
                .map(|(name, spec)| {
                    let mut conditions = Vec::new();
                    for c in spec.conditions {
                        if !conditions.contains(&c) {
                            conditions.push(c);
                        }
                    }
                    Gate {
                        label: (steer && !conditions.is_empty()).then(|| readiness_label(&name)),
                        name,
                        conditions,
                        contract: spec.runtime_class_contract,
                    }
                })
                .collect(),
            stale_after: heartbeat * stale,
        }
    }
}

/// A scheduling gate's name is validated as a qualified name
/// (`ValidateSchedulingGates` → `IsQualifiedName`): an optional DNS-subdomain
/// prefix and `/`, then 1..=63 alphanumerics, `-`, `_`, `.`, alphanumeric at
/// both ends.
fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            })
    });
    name_ok && prefix_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_two_gates_of_the_issue_with_three_heartbeats() {
        let p = GateConfig::default().policy();
        assert_eq!(p.stale_after, Duration::from_secs(900));
        assert_eq!(
            p.gates.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(),
            [
                "nodeproof.dev/gpu-driver-ready",
                "nodeproof.dev/seccomp-ready"
            ]
        );
        assert!(p.gate("nodeproof.dev/seccomp-ready").unwrap().contract);
        assert!(GateConfig::default().problems().is_empty());
    }

    #[test]
    fn problems_name_their_key() {
        let c = GateConfig {
            heartbeat_s: Some(0),
            stale_heartbeats: Some(0),
            steer: None,
            gates: Some(BTreeMap::from([
                (
                    "Bad_Prefix/x".to_string(),
                    GateSpec {
                        conditions: vec![ConditionType::GPUHealthy],
                        runtime_class_contract: false,
                    },
                ),
                (
                    "example.com/nothing".to_string(),
                    GateSpec {
                        conditions: vec![],
                        runtime_class_contract: false,
                    },
                ),
            ])),
        };
        let p = c.problems();
        assert_eq!(p.len(), 4, "{p:?}");
        assert!(p[2].contains("\"Bad_Prefix/x\": not a qualified name"));
        assert!(p[3].contains("waits for nothing"));
    }

    #[test]
    fn readiness_labels_are_label_keys_and_unique_per_gate() {
        let p = GateConfig::default().policy();
        let gpu = p.gate("nodeproof.dev/gpu-driver-ready").unwrap();
        assert_eq!(
            gpu.label.as_deref(),
            Some("gate.nodeproof.dev/gpu-driver-ready")
        );
        assert_eq!(readiness_label("plain"), "gate.nodeproof.dev/plain");
        let off = GateConfig {
            steer: Some(false),
            ..GateConfig::default()
        };
        assert!(off.policy().gates.iter().all(|g| g.label.is_none()));
        let spec = GateSpec {
            conditions: vec![ConditionType::GPUHealthy],
            runtime_class_contract: false,
        };
        let clash = GateConfig {
            gates: Some(BTreeMap::from([
                ("a.example/x".to_string(), spec.clone()),
                ("b.example/x".to_string(), spec.clone()),
            ])),
            ..GateConfig::default()
        };
        let p = clash.problems();
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("shares its readiness label gate.nodeproof.dev/x"));
        // A contract-only gate is steered by its RuntimeClass, not a label.
        let contract_only = GateConfig {
            gates: Some(BTreeMap::from([(
                "c.example/rc".to_string(),
                GateSpec {
                    conditions: vec![],
                    runtime_class_contract: true,
                },
            )])),
            ..GateConfig::default()
        };
        assert!(contract_only.policy().gates[0].label.is_none());
    }

    #[test]
    fn qualified_names() {
        for ok in ["gate", "nodeproof.dev/gpu-driver-ready", "a.b-c/x_y.z"] {
            assert!(is_qualified_name(ok), "{ok}");
        }
        for bad in [
            "",
            "/x",
            "x/",
            "-x",
            "x-",
            "a/b/c",
            "A.com/x",
            &"x".repeat(64),
        ] {
            assert!(!is_qualified_name(bad), "{bad}");
        }
    }
}
