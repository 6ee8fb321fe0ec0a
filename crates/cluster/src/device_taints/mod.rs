//! Unhealthy GPUs kept from new DRA claims: one `DeviceTaintRule` with
//! effect `NoSchedule` per device the node agent judges unhealthy, deleted
//! on recovery (docs/gate-controller.md, "Unhealthy DRA devices").
//!
//! The agent publishes the UUIDs of its unhealthy GPUs on its own Node
//! (`nodeproof_report::device_health`, annotation
//! `gpu.nodeproof.dev/unhealthy-devices`); the node's ResourceSlices name
//! each device by driver, pool and device and publish its `uuid` attribute
//! (`nodeproof_apiclient::dra::slice_devices`): the UUID joins the two. A MIG
//! device whose parent GPU is unhealthy (its `parentUUID`) is unhealthy too.
//!
//! Pure here, the I/O in `controller`:
//! - [`SliceFacts::of`]: what is read of one ResourceSlice;
//! - [`wanted`]: the rules the Nodes and slices call for;
//! - [`RuleFacts::of`]: what is read of one existing rule;
//! - [`plan`]: what to create and delete, never touching a rule that does
//!   not carry our `app.kubernetes.io/managed-by` label.
//!
//! The API (resource.k8s.io/v1beta2, staging/src/k8s.io/api/resource/v1beta2
//! `DeviceTaintRule`, KEP-5055 "DRA: device taints and tolerations"):
//!
//! ```text
//! DeviceTaintRule{metadata, spec: DeviceTaintRuleSpec, status}
//! DeviceTaintRuleSpec{deviceSelector *DeviceTaintSelector, taint DeviceTaint (required)}
//! DeviceTaintSelector{driver *string, pool *string, device *string}   // all must match; empty matches all
//! DeviceTaint{key (label name, required), value (label value), effect (None|NoSchedule|NoExecute, required), timeAdded}
//! ```
//!
//! Validation (pkg/apis/resource/validation `ValidateDeviceTaintRule`): the
//! name is a DNS subdomain, the selector's driver a driver name, pool a pool
//! name, device a DNS label, the key a label name, the value a label value.
//! An empty selector taints every device of the cluster, so a rule of ours
//! whose selector is not exactly the one we write is deleted (and written
//! again), never left.

pub mod controller;
pub mod metrics;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use nodeproof_apiclient::dra::{slice_devices, DraError};
use nodeproof_gpu::views::SliceDevice;
use nodeproof_report::device_health::UnhealthyDevices;

/// The API group; DeviceTaintRule is served in [`RULE_VERSION`] only here.
pub const GROUP: &str = "resource.k8s.io";
/// Kubernetes 1.36 serves DeviceTaintRule as `v1beta2` (with the
/// `DRADeviceTaints` and `DRADeviceTaintRules` feature gates and that
/// version enabled); ResourceSlices are `v1` there.
pub const RULE_VERSION: &str = "v1beta2";
/// The taint's key.
pub const TAINT_KEY: &str = "nodeproof.dev/gpu-unhealthy";
/// New claims that do not tolerate it are not allocated the device; pods
/// already running keep it (`NoExecute` would evict them).
pub const EFFECT: &str = "NoSchedule";
/// The label that makes a rule ours: only rules carrying it are deleted.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "nodeproof";
/// Which node's agent the rule comes from (an annotation: a node name can
/// be longer than a label value may be).
pub const NODE_ANNOTATION: &str = "nodeproof.dev/node";
/// The device's UUID, for a person reading the rule.
pub const UUID_ANNOTATION: &str = "gpu.nodeproof.dev/uuid";

/// A DNS subdomain's length limit (a rule's name).
const NAME_MAX: usize = 253;
/// Hex digits of SHA-256 in a rule's name.
const HASH_HEX: usize = 10;

#[derive(Debug, thiserror::Error)]
pub enum DeviceTaintError {
    #[error("ResourceSlice {name} is not what the API documents")]
    Slice {
        name: String,
        #[source]
        source: DraError,
    },
    #[error("listing {resource} ({GROUP}/{version}) failed")]
    List {
        resource: &'static str,
        version: &'static str,
        #[source]
        source: Box<nodeproof_apiclient::Error>,
    },
    #[error("creating DeviceTaintRule {name} ({GROUP}/{RULE_VERSION}) failed")]
    Create {
        name: String,
        #[source]
        source: Box<nodeproof_apiclient::Error>,
    },
    #[error("deleting DeviceTaintRule {name} ({GROUP}/{RULE_VERSION}) failed")]
    Delete {
        name: String,
        #[source]
        source: Box<nodeproof_apiclient::Error>,
    },
}

/// What is read of one ResourceSlice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceFacts {
    /// `spec.nodeName`: only node-local slices are matched to a Node.
    pub node: Option<String>,
    pub driver: String,
    pub pool: String,
    /// `spec.pool.generation`: consumers use only a pool's highest one.
    pub generation: i64,
    pub devices: Vec<SliceDevice>,
}

impl SliceFacts {
    pub fn of(
        name: &str,
        spec: &Value,
        version: &'static str,
    ) -> Result<SliceFacts, DeviceTaintError> {
        let devices = slice_devices(spec, version).map_err(|source| DeviceTaintError::Slice {
            name: name.to_string(),
            source,
        })?;
        Ok(SliceFacts {
            node: spec["nodeName"]
                .as_str()
                .filter(|n| !n.is_empty())
                .map(String::from),
            driver: spec["driver"].as_str().unwrap_or_default().to_string(),
            pool: spec["pool"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            generation: spec["pool"]["generation"].as_i64().unwrap_or(0),
            devices,
        })
    }
}

/// One rule we want.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WantedRule {
    pub name: String,
    pub node: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
    /// The device's own UUID (a MIG device's, not its parent's).
    pub uuid: String,
    /// The taint's value: why the agent calls the GPU unhealthy.
    pub reason: String,
}

impl WantedRule {
    /// The object to create.
    pub fn to_json(&self) -> Value {
        json!({
            "apiVersion": format!("{GROUP}/{RULE_VERSION}"),
            "kind": "DeviceTaintRule",
            "metadata": {
                "name": self.name,
                "labels": {MANAGED_BY_LABEL: MANAGED_BY},
                "annotations": {NODE_ANNOTATION: self.node, UUID_ANNOTATION: self.uuid},
            },
            "spec": {
                "deviceSelector": {"driver": self.driver, "pool": self.pool, "device": self.device},
                "taint": {"key": TAINT_KEY, "value": self.reason, "effect": EFFECT},
            }
        })
    }
}

/// `nodeproof-<node>-<device>-<hash>`: the hash is the first [`HASH_HEX`]
/// hex digits of the SHA-256 of `<driver>/<pool>/<device>` (the device's
/// identity; `printf %s gpu.nvidia.com/n1/gpu-1 | sha256sum | cut -c1-10`),
/// and the readable part is cut so the whole stays a DNS subdomain of at
/// most 253 characters.
pub fn rule_name(node: &str, driver: &str, pool: &str, device: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{driver}/{pool}/{device}").as_bytes(),
    );
    let hash: String = digest.as_ref()[..HASH_HEX / 2]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    // Node names are DNS subdomains and device names DNS labels; anything
    // else is made one (lower case, other characters as `-`).
    let readable: String = format!("nodeproof-{node}-{device}")
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.' | '-') => c,
            _ => '-',
        })
        .collect();
    let mut readable: String = readable.chars().take(NAME_MAX - HASH_HEX - 1).collect();
    // A cut (or a dot next to a dash) must not leave a label that ends badly.
    while readable.ends_with(['-', '.']) {
        readable.pop();
    }
    let readable = readable.replace(".-", "-").replace("-.", "-");
    format!("{readable}-{hash}")
}

/// The rules the Nodes' unhealthy devices call for, by name: every device
/// of a node-local slice (of its pool's highest generation) whose `uuid`,
/// or `parentUUID` for a MIG device, the slice's Node names unhealthy.
pub fn wanted(
    nodes: &BTreeMap<String, UnhealthyDevices>,
    slices: &BTreeMap<String, SliceFacts>,
) -> BTreeMap<String, WantedRule> {
    let mut newest: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    for s in slices.values() {
        let g = newest.entry((&s.driver, &s.pool)).or_insert(s.generation);
        *g = (*g).max(s.generation);
    }
    let mut out = BTreeMap::new();
    for s in slices.values() {
        if newest.get(&(s.driver.as_str(), s.pool.as_str())) != Some(&s.generation) {
            continue;
        }
        let Some(node) = &s.node else { continue };
        let Some(unhealthy) = nodes.get(node).filter(|u| !u.is_empty()) else {
            continue;
        };
        for d in &s.devices {
            let Some(uuid) = &d.uuid else { continue };
            let reason = unhealthy
                .reason(uuid)
                .or_else(|| d.parent_uuid.as_deref().and_then(|p| unhealthy.reason(p)));
            let Some(reason) = reason else { continue };
            let name = rule_name(node, &d.driver, &d.pool, &d.name);
            out.insert(
                name.clone(),
                WantedRule {
                    name,
                    node: node.clone(),
                    driver: d.driver.clone(),
                    pool: d.pool.clone(),
                    device: d.name.clone(),
                    uuid: uuid.clone(),
                    reason: reason.to_string(),
                },
            );
        }
    }
    out
}

/// What is read of one existing DeviceTaintRule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleFacts {
    pub name: String,
    /// `metadata.uid`, the precondition of its deletion.
    pub uid: Option<String>,
    /// Carries `app.kubernetes.io/managed-by: nodeproof`.
    pub ours: bool,
    /// `spec.deviceSelector` (driver, pool, device), each `None` when unset.
    pub selector: (Option<String>, Option<String>, Option<String>),
    pub key: String,
    pub effect: String,
}

impl RuleFacts {
    /// From the object as the API returns it.
    pub fn of(obj: &Value) -> RuleFacts {
        let sel = &obj["spec"]["deviceSelector"];
        let field = |v: &Value| v.as_str().map(String::from);
        RuleFacts {
            name: obj["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            uid: obj["metadata"]["uid"].as_str().map(String::from),
            ours: obj["metadata"]["labels"][MANAGED_BY_LABEL].as_str() == Some(MANAGED_BY),
            selector: (
                field(&sel["driver"]),
                field(&sel["pool"]),
                field(&sel["device"]),
            ),
            key: obj["spec"]["taint"]["key"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            effect: obj["spec"]["taint"]["effect"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        }
    }

    /// Selects exactly the wanted device with our taint. The value (the
    /// reason when it was written) is not compared: a GPU that fails for
    /// another reason stays tainted without a rewrite.
    fn is(&self, w: &WantedRule) -> bool {
        self.selector
            == (
                Some(w.driver.clone()),
                Some(w.pool.clone()),
                Some(w.device.clone()),
            )
            && self.key == TAINT_KEY
            && self.effect == EFFECT
    }
}

/// What to do to make the rules what the Nodes call for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub create: Vec<WantedRule>,
    /// Our rules no longer wanted, or not as we write them (those are
    /// created again once their deletion is seen).
    pub delete: Vec<String>,
    /// Wanted names held by a rule that is not ours: left alone, said once.
    pub taken: Vec<String>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.delete.is_empty()
    }
}

pub fn plan(wanted: &BTreeMap<String, WantedRule>, existing: &BTreeMap<String, RuleFacts>) -> Plan {
    let mut p = Plan::default();
    for (name, w) in wanted {
        match existing.get(name) {
            None => p.create.push(w.clone()),
            Some(r) if !r.ours => p.taken.push(name.clone()),
            Some(r) if !r.is(w) => p.delete.push(name.clone()),
            Some(_) => {}
        }
    }
    let wanted_names: BTreeSet<&String> = wanted.keys().collect();
    p.delete.extend(
        existing
            .values()
            .filter(|r| r.ours && !wanted_names.contains(&r.name))
            .map(|r| r.name.clone()),
    );
    p.delete.sort();
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// apimachinery's IsDNS1123Subdomain.
    fn is_dns_subdomain(s: &str) -> bool {
        s.len() <= 253
            && s.split('.').all(|l| {
                !l.is_empty()
                    && l.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            })
    }

    fn slice(node: &str, generation: i64, devices: &[(&str, &str, Option<&str>)]) -> SliceFacts {
        let spec = json!({
            "driver": "gpu.nvidia.com", "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices.iter().map(|(name, uuid, parent)| {
                let mut attrs = json!({"uuid": {"string": uuid}});
                if let Some(p) = parent {
                    attrs["parentUUID"] = json!({"string": p});
                }
                json!({"name": name, "attributes": attrs})
            }).collect::<Vec<_>>(),
        });
        SliceFacts::of("s", &spec, "v1").unwrap()
    }

    fn unhealthy(pairs: &[(&str, &str)]) -> UnhealthyDevices {
        pairs
            .iter()
            .map(|(u, r)| (u.to_string(), r.to_string()))
            .collect()
    }

    #[test]
    fn one_rule_per_unhealthy_device_joined_by_uuid_mig_by_its_parent() {
        let slices = BTreeMap::from([
            (
                "n1-gpu".to_string(),
                slice(
                    "n1",
                    1,
                    &[
                        ("gpu-0", "GPU-a", None),
                        ("gpu-1", "GPU-b", None),
                        ("gpu-1-mig-9-0-1", "MIG-c", Some("GPU-b")),
                    ],
                ),
            ),
            (
                "n2-gpu".to_string(),
                slice("n2", 1, &[("gpu-0", "GPU-z", None)]),
            ),
        ]);
        let nodes = BTreeMap::from([
            ("n1".to_string(), unhealthy(&[("GPU-b", "GPULost")])),
            // Another node's UUID on n2's annotation joins nothing.
            ("n2".to_string(), unhealthy(&[("GPU-a", "FatalXid")])),
        ]);
        let w = wanted(&nodes, &slices);
        let got: Vec<(&str, &str, &str)> = w
            .values()
            .map(|r| (r.device.as_str(), r.uuid.as_str(), r.reason.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("gpu-1", "GPU-b", "GPULost"),
                ("gpu-1-mig-9-0-1", "MIG-c", "GPULost")
            ]
        );
        let r = w.values().find(|r| r.device == "gpu-1").unwrap();
        assert_eq!(r.name, rule_name("n1", "gpu.nvidia.com", "n1", "gpu-1"));
        let obj = r.to_json();
        assert_eq!(obj["apiVersion"], "resource.k8s.io/v1beta2");
        assert_eq!(obj["metadata"]["labels"][MANAGED_BY_LABEL], "nodeproof");
        assert_eq!(
            obj["spec"],
            json!({"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-1"},
                   "taint": {"key": "nodeproof.dev/gpu-unhealthy", "value": "GPULost", "effect": "NoSchedule"}})
        );
        // Read back, the rule is what we want: nothing to do.
        let existing = BTreeMap::from([(r.name.clone(), RuleFacts::of(&obj))]);
        let only: BTreeMap<_, _> = [(r.name.clone(), r.clone())].into();
        assert!(plan(&only, &existing).is_empty());
    }

    #[test]
    fn an_old_generation_and_a_slice_without_a_node_are_not_matched() {
        let mut shared = slice("n1", 1, &[("gpu-0", "GPU-a", None)]);
        shared.node = None;
        let slices = BTreeMap::from([
            (
                "old".to_string(),
                slice("n1", 1, &[("gpu-0", "GPU-a", None)]),
            ),
            (
                "new".to_string(),
                slice("n1", 2, &[("gpu-1", "GPU-a", None)]),
            ),
            (
                "shared".to_string(),
                SliceFacts {
                    pool: "shared".into(),
                    ..shared
                },
            ),
        ]);
        let nodes = BTreeMap::from([("n1".to_string(), unhealthy(&[("GPU-a", "GPULost")]))]);
        let w = wanted(&nodes, &slices);
        assert_eq!(
            w.values().map(|r| r.device.as_str()).collect::<Vec<_>>(),
            ["gpu-1"]
        );
        assert!(wanted(&BTreeMap::new(), &slices).is_empty());
    }

    #[test]
    fn names_are_valid_deterministic_and_distinct_even_when_cut() {
        let a = rule_name("n1", "gpu.nvidia.com", "n1", "gpu-1");
        assert!(a.starts_with("nodeproof-n1-gpu-1-"), "{a}");
        assert_eq!(a, rule_name("n1", "gpu.nvidia.com", "n1", "gpu-1"));
        assert_ne!(a, rule_name("n1", "other.example.com", "n1", "gpu-1"));
        // printf %s gpu.nvidia.com/n1/gpu-1 | sha256sum | cut -c1-10
        let digest = ring::digest::digest(&ring::digest::SHA256, b"gpu.nvidia.com/n1/gpu-1");
        let hex: String = digest.as_ref()[..5]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(a.ends_with(&hex), "{a}");
        let long_node = format!("{}.{}", "a".repeat(63), "b".repeat(63)).repeat(2);
        let long_node = &long_node[..253];
        for node in [long_node, "Node_1", "x.y", "gpu-node-7.example.com"] {
            for device in ["gpu-0", "gpu-1-mig-9-0-1"] {
                let n = rule_name(node, "gpu.nvidia.com", "p", device);
                assert!(is_dns_subdomain(&n), "{n}");
                assert!(n.len() <= 253);
            }
        }
        let cut1 = rule_name(long_node, "gpu.nvidia.com", "p", "gpu-0");
        let cut2 = rule_name(long_node, "gpu.nvidia.com", "p", "gpu-1");
        assert_ne!(cut1, cut2, "the hash tells apart what the cut hides");
    }

    #[test]
    fn the_plan_creates_the_missing_deletes_ours_unwanted_and_never_touches_others() {
        let slices = BTreeMap::from([(
            "s".to_string(),
            slice(
                "n1",
                1,
                &[("gpu-0", "GPU-a", None), ("gpu-1", "GPU-b", None)],
            ),
        )]);
        let nodes = BTreeMap::from([(
            "n1".to_string(),
            unhealthy(&[("GPU-a", "GPULost"), ("GPU-b", "FatalXid")]),
        )]);
        let w = wanted(&nodes, &slices);
        let gpu0 = w.values().find(|r| r.device == "gpu-0").unwrap().clone();
        let gpu1 = w.values().find(|r| r.device == "gpu-1").unwrap().clone();
        let foreign = RuleFacts::of(&json!({
            "metadata": {"name": "admin-maintenance"},
            "spec": {"deviceSelector": {"driver": "gpu.nvidia.com"}, "taint": {"key": "maintenance", "effect": "NoExecute"}}
        }));
        // Ours, for a device that recovered.
        let stale = RuleFacts::of(
            &WantedRule {
                name: "nodeproof-n1-gpu-7-0000000000".into(),
                device: "gpu-7".into(),
                ..gpu0.clone()
            }
            .to_json(),
        );
        // Ours by name and label, but someone widened its selector to every device.
        let mut widened = gpu1.to_json();
        widened["spec"]["deviceSelector"] = json!({});
        let existing = BTreeMap::from([
            (foreign.name.clone(), foreign.clone()),
            (stale.name.clone(), stale.clone()),
            (gpu1.name.clone(), RuleFacts::of(&widened)),
        ]);
        let p = plan(&w, &existing);
        assert_eq!(p.create, std::slice::from_ref(&gpu0));
        let mut delete = vec![stale.name.clone(), gpu1.name.clone()];
        delete.sort();
        assert_eq!(p.delete, delete);
        assert!(p.taken.is_empty());
        // A rule not ours holding a wanted name is left alone and said.
        let mut squatter = gpu0.to_json();
        squatter["metadata"]["labels"] = json!({});
        let existing = BTreeMap::from([(gpu0.name.clone(), RuleFacts::of(&squatter))]);
        let only: BTreeMap<_, _> = [(gpu0.name.clone(), gpu0.clone())].into();
        let p = plan(&only, &existing);
        assert_eq!((p.create.len(), p.delete.len(), p.taken.len()), (0, 0, 1));
        // Recovery: nothing wanted, only ours go.
        let existing = BTreeMap::from([
            (foreign.name.clone(), foreign),
            (stale.name.clone(), stale.clone()),
        ]);
        assert_eq!(plan(&BTreeMap::new(), &existing).delete, [stale.name]);
    }
}
