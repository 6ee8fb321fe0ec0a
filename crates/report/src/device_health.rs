//! Which GPUs of a node the agent judges unhealthy, as it publishes them on
//! its own Node: the annotation [`UNHEALTHY_DEVICES`], written by the node
//! agent only when the set changes and removed when it is empty, read by
//! the cluster side (`nodeproof_cluster::device_taints`) to taint those
//! devices for DRA. Pure: the value's grammar, both ways.
//!
//! The value is `<uuid>=<reason>` pairs joined by `,`, sorted by UUID:
//! `GPU-1f2e…=GPULost,GPU-77aa…=FatalXid`. The UUID is NVML's (`GPU-…`),
//! which NVIDIA's DRA driver publishes as each device's `uuid` attribute;
//! the reason is the first failing check's (`GpuReason`, CamelCase), so it
//! is a valid label value and can be a device taint's value.
//!
//! A node may set annotations on its own Node: NodeRestriction limits a
//! node's changes to its own Node object and, among metadata, only to
//! labels under restricted prefixes (plugin/pkg/admission/noderestriction).

use std::collections::BTreeMap;

/// The annotation on the Node (`gpu.nodeproof.dev/` is nodeproof's own).
pub const UNHEALTHY_DEVICES: &str = "gpu.nodeproof.dev/unhealthy-devices";

/// Unhealthy devices by UUID, each with why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnhealthyDevices(BTreeMap<String, String>);

/// An entry of the annotation that is not `<uuid>=<reason>` (left out).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("entry `{entry}` of annotation {UNHEALTHY_DEVICES} is not <uuid>=<reason>")]
pub struct BadEntry {
    pub entry: String,
}

/// A UUID as NVML and the DRA driver write it: `GPU-`/`MIG-` and hex with dashes.
fn valid_uuid(s: &str) -> bool {
    !s.is_empty() && s.len() <= 128 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// A label value without dots or dashes at the ends (a `GpuReason` is CamelCase).
fn valid_reason(s: &str) -> bool {
    !s.is_empty() && s.len() <= 63 && s.chars().all(|c| c.is_ascii_alphanumeric())
}

impl UnhealthyDevices {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one device; the first reason given for a UUID is kept.
    pub fn insert(&mut self, uuid: &str, reason: &str) {
        self.0
            .entry(uuid.to_string())
            .or_insert_with(|| reason.to_string());
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The reason a device is unhealthy, if it is.
    pub fn reason(&self, uuid: &str) -> Option<&str> {
        self.0.get(uuid).map(String::as_str)
    }

    /// (uuid, reason), by UUID.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(u, r)| (u.as_str(), r.as_str()))
    }

    /// The annotation's value; `None` when nothing is unhealthy (the
    /// annotation is then removed). A UUID or reason outside the grammar
    /// (it cannot come from NVML and `GpuReason`) is left out.
    pub fn encode(&self) -> Option<String> {
        let parts: Vec<String> = self
            .0
            .iter()
            .filter(|(u, r)| valid_uuid(u) && valid_reason(r))
            .map(|(u, r)| format!("{u}={r}"))
            .collect();
        (!parts.is_empty()).then(|| parts.join(","))
    }

    /// Reads the annotation's value. Entries that are not `<uuid>=<reason>`
    /// are returned apart, so the reader can say so; the others still count.
    pub fn parse(value: &str) -> (UnhealthyDevices, Vec<BadEntry>) {
        let mut out = UnhealthyDevices::new();
        let mut bad = Vec::new();
        for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            match entry.split_once('=') {
                Some((u, r)) if valid_uuid(u) && valid_reason(r) => out.insert(u, r),
                _ => bad.push(BadEntry {
                    entry: entry.to_string(),
                }),
            }
        }
        (out, bad)
    }

    /// The strategic-merge PATCH of the Node that makes its annotation say
    /// this set (`null` removes it).
    pub fn node_patch(&self) -> serde_json::Value {
        serde_json::json!({"metadata": {"annotations": {UNHEALTHY_DEVICES: self.encode()}}})
    }
}

impl FromIterator<(String, String)> for UnhealthyDevices {
    fn from_iter<T: IntoIterator<Item = (String, String)>>(iter: T) -> Self {
        let mut out = UnhealthyDevices::new();
        for (u, r) in iter {
            out.insert(&u, &r);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_sorted_and_parses_back() {
        let mut d = UnhealthyDevices::new();
        d.insert("GPU-bbbb-0002", "FatalXid");
        d.insert("GPU-aaaa-0001", "GPULost");
        d.insert("GPU-aaaa-0001", "UncorrectableECC");
        let v = d.encode().unwrap();
        assert_eq!(v, "GPU-aaaa-0001=GPULost,GPU-bbbb-0002=FatalXid");
        assert_eq!(UnhealthyDevices::parse(&v), (d, vec![]));
        assert_eq!(UnhealthyDevices::new().encode(), None);
    }

    #[test]
    fn bad_entries_are_returned_apart_and_the_rest_counts() {
        let (d, bad) =
            UnhealthyDevices::parse("GPU-a=GPULost, nonsense ,GPU-b=,=X,GPU c=Y,GPU-d=Fatal.Xid");
        assert_eq!(d.len(), 1);
        assert_eq!(d.reason("GPU-a"), Some("GPULost"));
        let bad: Vec<&str> = bad.iter().map(|b| b.entry.as_str()).collect();
        assert_eq!(
            bad,
            ["nonsense", "GPU-b=", "=X", "GPU c=Y", "GPU-d=Fatal.Xid"]
        );
        assert_eq!(UnhealthyDevices::parse("").0, UnhealthyDevices::new());
    }

    #[test]
    fn the_patch_sets_or_removes_the_annotation() {
        let d: UnhealthyDevices = [("GPU-a".to_string(), "GPULost".to_string())]
            .into_iter()
            .collect();
        assert_eq!(
            d.node_patch(),
            serde_json::json!({"metadata": {"annotations": {UNHEALTHY_DEVICES: "GPU-a=GPULost"}}})
        );
        assert_eq!(
            UnhealthyDevices::new().node_patch(),
            serde_json::json!({"metadata": {"annotations": {UNHEALTHY_DEVICES: null}}})
        );
    }
}
