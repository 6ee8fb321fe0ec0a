//! What the kubelet offers the scheduler against what NVML calls healthy,
//! device by device (by UUID: NVIDIA's device plugin registers each GPU by
//! its `GPU-…` UUID and each MIG instance by its `MIG-…` UUID).
//!
//! The kubelet's pod-resources `GetAllocatableResources` lists only the
//! devices the device plugin reports healthy (kubelet devicemanager
//! `GetAllocatableDevices` filters `allDevices` with `healthyDevices`), and
//! `Node.status.allocatable` counts the same set. A device in that set that
//! NVML calls unhealthy, or cannot see, is one the scheduler still places
//! pods on: the pod gets a broken GPU (NVIDIA k8s-device-plugin #189, #234:
//! a plugin that never re-checks; PR #1641: a plugin that advertises every
//! GPU when NVML fails at start). The reverse, a healthy GPU not offered, is
//! capacity lost until the plugin restarts. Pure: views in, comparison out.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use super::policy::Evaluation;
use super::probe::Snapshot;
use super::reason::GpuReason;

/// The whole-GPU extended resource of NVIDIA's device plugin.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// MIG instances under the plugin's `mixed` strategy: `nvidia.com/mig-1g.10gb`.
pub const MIG_RESOURCE_PREFIX: &str = "nvidia.com/mig-";

pub fn is_nvidia_resource(name: &str) -> bool {
    name == GPU_RESOURCE || name.starts_with(MIG_RESOURCE_PREFIX)
}

/// What the kubelet offers, as far as it could be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeletView {
    /// `Node.status.allocatable` of NVIDIA resources (`None`: the Node was not read).
    pub node_allocatable: Option<BTreeMap<String, u64>>,
    /// pod-resources `GetAllocatableResources` device ids of NVIDIA
    /// resources (`None`: the API could not be read).
    pub allocatable_ids: Option<BTreeMap<String, Vec<String>>>,
    /// The device UUIDs this node's DRA ResourceSlices publish, by driver
    /// (`None`: DRA not served or not read). The scheduler allocates these
    /// through ResourceClaims; pod-resources' allocatable list leaves them out.
    pub dra_ids: Option<BTreeMap<String, Vec<String>>>,
}

/// One device NVML knows, as the kubelet may name it: a whole GPU or a MIG
/// instance (whose health is its parent's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NvmlDevice {
    pub id: String,
    /// The (parent) GPU's index.
    pub gpu: u32,
    /// The MIG instance's index on its parent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mig: Option<u32>,
    /// The resource the device plugin offers it as (`nvidia.com/gpu`, or
    /// `nvidia.com/mig-<profile>` from the instance's name).
    pub resource: String,
    pub healthy: bool,
    /// Why not, in the policy's words.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub why: String,
}

/// A device on the wrong side of the comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceGap {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    pub why: String,
}

/// One extended resource's comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceComparison {
    /// The extended resource, or the DRA driver's name.
    pub resource: String,
    /// Offered through DRA ResourceSlices, not by a device plugin.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dra: bool,
    /// What the kubelet offers: the pod-resources ids' count, else the Node's allocatable.
    pub offered: u64,
    /// Of what it offers, how many NVML calls healthy (by id), else NVML's
    /// healthy devices of this resource (by count).
    pub healthy: u64,
    /// Offered, but NVML calls it unhealthy or cannot see it.
    pub offered_unhealthy: Vec<DeviceGap>,
    /// Healthy in NVML, not offered.
    pub healthy_not_offered: Vec<DeviceGap>,
    /// Healthy devices not offered that cannot be named (counts only).
    pub unnamed_not_offered: u64,
}

/// The comparison of one cycle.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Comparison {
    pub devices: Vec<NvmlDevice>,
    pub resources: Vec<ResourceComparison>,
    /// What could not be compared and why (e.g. no pod-resources socket).
    pub notes: Vec<String>,
}

/// The devices NVML knows this cycle with their health: GPUs not in MIG
/// mode as `nvidia.com/gpu`, instances of GPUs in MIG mode by profile.
pub fn nvml_devices(snapshot: &Snapshot, evaluation: &Evaluation) -> Vec<NvmlDevice> {
    let mut out = Vec::new();
    for g in &snapshot.gpus {
        let verdict = evaluation.gpus.iter().find(|v| v.index == g.index);
        let healthy = verdict.is_some_and(|v| v.healthy);
        let why = verdict.map_or_else(
            || "not judged".to_string(),
            |v| {
                v.checks
                    .iter()
                    .filter(|c| !c.ok)
                    .map(|c| c.message.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            },
        );
        let uuid = g
            .uuid
            .clone()
            .or_else(|| verdict.and_then(|v| v.uuid.clone()));
        if g.mig.is_empty() {
            if let Some(id) = uuid {
                out.push(NvmlDevice {
                    id,
                    gpu: g.index,
                    mig: None,
                    resource: GPU_RESOURCE.into(),
                    healthy,
                    why: why.clone(),
                });
            }
        }
        for m in &g.mig {
            let Some(id) = m.uuid.clone() else { continue };
            out.push(NvmlDevice {
                id,
                gpu: g.index,
                mig: Some(m.index),
                resource: m.name.as_deref().and_then(mig_profile).map_or_else(
                    || GPU_RESOURCE.into(),
                    |p| format!("{MIG_RESOURCE_PREFIX}{p}"),
                ),
                healthy,
                why: why.clone(),
            });
        }
    }
    out
}

/// The resource a device counts under: the plugin's `single` strategy
/// offers MIG instances as `nvidia.com/gpu`.
fn offered_as(single: bool, d: &NvmlDevice) -> &str {
    if single && d.mig.is_some() {
        GPU_RESOURCE
    } else {
        &d.resource
    }
}

/// `NVIDIA H100 80GB HBM3 MIG 1g.10gb` → `1g.10gb`: the profile the device
/// plugin's `mixed` strategy names the resource after.
fn mig_profile(name: &str) -> Option<&str> {
    name.rsplit_once(" MIG ").map(|(_, p)| p.trim())
}

/// Compares the kubelet's view with NVML's devices. By id where the
/// pod-resources ids are known; by count from the Node otherwise.
pub fn compare(view: &KubeletView, devices: Vec<NvmlDevice>) -> Comparison {
    let mut resources = Vec::new();
    let mut notes = Vec::new();
    let by_id: BTreeMap<&str, &NvmlDevice> = devices.iter().map(|d| (d.id.as_str(), d)).collect();
    // A device a DRA driver publishes is offered, though not by a device plugin.
    let dra_offered: BTreeSet<&str> = view
        .dra_ids
        .iter()
        .flat_map(|m| m.values().flatten())
        .map(String::as_str)
        .collect();
    let gap = |id: &String| match by_id.get(id.as_str()) {
        Some(d) if d.healthy => None,
        Some(d) => Some(DeviceGap {
            id: id.clone(),
            gpu: Some(d.gpu),
            why: d.why.clone(),
        }),
        None => Some(DeviceGap {
            id: id.clone(),
            gpu: None,
            why: "NVML does not see it".into(),
        }),
    };
    if let Some(ids) = &view.allocatable_ids {
        let mut offered_ids: BTreeSet<&str> = ids.values().flatten().map(String::as_str).collect();
        offered_ids.extend(&dra_offered);
        let mut names: BTreeSet<&str> = ids.keys().map(String::as_str).collect();
        names.extend(devices.iter().map(|d| d.resource.as_str()));
        for resource in names {
            let list = ids.get(resource).map(Vec::as_slice).unwrap_or_default();
            let offered_unhealthy: Vec<DeviceGap> = list.iter().filter_map(gap).collect();
            let healthy = (list.len() - offered_unhealthy.len()) as u64;
            let healthy_not_offered: Vec<DeviceGap> = devices
                .iter()
                .filter(|d| {
                    d.resource == resource && d.healthy && !offered_ids.contains(d.id.as_str())
                })
                .map(|d| DeviceGap {
                    id: d.id.clone(),
                    gpu: Some(d.gpu),
                    why: "healthy in NVML, not offered by the kubelet".into(),
                })
                .collect();
            if list.is_empty() && healthy_not_offered.is_empty() && !dra_offered.is_empty() {
                // Every device of this resource is offered through DRA.
                continue;
            }
            resources.push(ResourceComparison {
                resource: resource.to_string(),
                dra: false,
                offered: list.len() as u64,
                healthy,
                offered_unhealthy,
                healthy_not_offered,
                unnamed_not_offered: 0,
            });
        }
    } else if let Some(alloc) = &view.node_allocatable {
        let mut names: BTreeSet<&str> = alloc.keys().map(String::as_str).collect();
        // The plugin's `single` strategy offers MIG instances as nvidia.com/gpu.
        let single = !alloc.keys().any(|k| k.starts_with(MIG_RESOURCE_PREFIX));
        names.extend(devices.iter().map(|d| offered_as(single, d)));
        for resource in names {
            let offered = alloc.get(resource).copied().unwrap_or(0);
            let mine: Vec<&NvmlDevice> = devices
                .iter()
                .filter(|d| {
                    offered_as(single, d) == resource && !dra_offered.contains(d.id.as_str())
                })
                .collect();
            if offered == 0 && mine.is_empty() && !dra_offered.is_empty() {
                continue;
            }
            let healthy = mine.iter().filter(|d| d.healthy).count() as u64;
            // Without ids the unhealthy devices are the likely ones offered
            // (a plugin that never re-checked offers all it registered).
            let offered_unhealthy = if offered > healthy {
                let mut gaps: Vec<DeviceGap> = mine
                    .iter()
                    .filter(|d| !d.healthy)
                    .take((offered - healthy) as usize)
                    .map(|d| DeviceGap {
                        id: d.id.clone(),
                        gpu: Some(d.gpu),
                        why: d.why.clone(),
                    })
                    .collect();
                for _ in gaps.len() as u64..offered - healthy {
                    gaps.push(DeviceGap {
                        id: "?".into(),
                        gpu: None,
                        why: "NVML does not see it".into(),
                    });
                }
                gaps
            } else {
                Vec::new()
            };
            resources.push(ResourceComparison {
                resource: resource.to_string(),
                dra: false,
                offered,
                healthy: healthy.min(offered),
                offered_unhealthy,
                healthy_not_offered: Vec::new(),
                unnamed_not_offered: healthy.saturating_sub(offered),
            });
        }
        notes.push("pod-resources not read: compared by count from the Node".into());
    } else if view.dra_ids.is_none() {
        notes.push("neither the Node nor pod-resources could be read: nothing compared".into());
    }
    for (driver, ids) in view.dra_ids.iter().flatten() {
        let offered_unhealthy: Vec<DeviceGap> = ids.iter().filter_map(gap).collect();
        resources.push(ResourceComparison {
            resource: driver.clone(),
            dra: true,
            offered: ids.len() as u64,
            healthy: (ids.len() - offered_unhealthy.len()) as u64,
            offered_unhealthy,
            healthy_not_offered: Vec::new(),
            unnamed_not_offered: 0,
        });
    }
    Comparison {
        devices,
        resources,
        notes,
    }
}

impl Comparison {
    /// Some device is offered that NVML calls unhealthy or cannot see.
    pub fn offers_unhealthy(&self) -> bool {
        self.resources
            .iter()
            .any(|r| !r.offered_unhealthy.is_empty())
    }

    /// "kubelet offers 8 nvidia.com/gpu, 7 are healthy: GPU 3 (GPU-8f…) XID 79 …"
    pub fn unhealthy_message(&self) -> Option<String> {
        let parts: Vec<String> = self
            .resources
            .iter()
            .filter(|r| !r.offered_unhealthy.is_empty())
            .map(|r| {
                let is = if r.healthy == 1 { "is" } else { "are" };
                let mut s = if r.dra {
                    format!(
                        "DRA ResourceSlices of this node publish {} {} devices, {} {is} healthy: ",
                        r.offered, r.resource, r.healthy
                    )
                } else {
                    format!(
                        "kubelet offers {} {}, {} {is} healthy: ",
                        r.offered, r.resource, r.healthy
                    )
                };
                let gaps: Vec<String> = r.offered_unhealthy.iter().map(gap_text).collect();
                s.push_str(&gaps.join(", "));
                s
            })
            .collect();
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// "2 healthy nvidia.com/gpu not offered by the kubelet: GPU 5 (GPU-…)"
    pub fn not_offered_message(&self) -> Option<String> {
        let parts: Vec<String> = self
            .resources
            .iter()
            .filter(|r| !r.healthy_not_offered.is_empty() || r.unnamed_not_offered > 0)
            .map(|r| {
                let n = r.healthy_not_offered.len() as u64 + r.unnamed_not_offered;
                let mut s = format!("{n} healthy {} not offered by the kubelet", r.resource);
                if !r.healthy_not_offered.is_empty() {
                    let names: Vec<String> = r
                        .healthy_not_offered
                        .iter()
                        .map(|g| device_name(g.gpu, &g.id))
                        .collect();
                    let _ = write!(s, ": {}", names.join(", "));
                }
                s
            })
            .collect();
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

fn device_name(gpu: Option<u32>, id: &str) -> String {
    match gpu {
        Some(g) => format!("GPU {g} ({})", short(id)),
        None => short(id),
    }
}

fn gap_text(g: &DeviceGap) -> String {
    format!("{} {}", device_name(g.gpu, &g.id), g.why)
}

/// `GPU-8f3a2b1c-…` → `GPU-8f3a2b1c…`: enough to find it, short enough to read.
pub fn short(id: &str) -> String {
    match id.char_indices().nth(12) {
        Some((i, _)) => format!("{}…", &id[..i]),
        None => id.to_string(),
    }
}

/// `GPUHealthy` with the comparison folded in: a device offered but
/// unhealthy is the failure pods hit, so it leads the reason and message.
pub fn apply(evaluation: &mut Evaluation, comparison: &Comparison) {
    let Some(message) = comparison.unhealthy_message() else {
        return;
    };
    let v = &mut evaluation.gpu_healthy;
    v.message = if v.status == nodeproof_findings::ConditionStatus::False {
        format!("{message}; {}", v.message)
    } else {
        message
    };
    v.status = nodeproof_findings::ConditionStatus::False;
    v.reason = GpuReason::AdvertisedUnhealthy;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{self, GpuConfig, PolicyState};
    use crate::probe::{DriverState, GpuInfo, MigInfo};
    use std::time::Duration;

    fn gpu(i: u32) -> GpuInfo {
        GpuInfo {
            index: i,
            uuid: Some(format!("GPU-8f00000{i}-0000-4000-8000-00000000000{i}")),
            pci_bus_id: Some(format!("0000:{:02x}:00.0", 0x18 + i)),
            ..GpuInfo::default()
        }
    }

    fn judged(gpus: Vec<GpuInfo>) -> (Snapshot, Evaluation) {
        let s = Snapshot {
            driver: DriverState::Ready,
            system: None,
            gpus,
            xids: Vec::new(),
            notes: Vec::new(),
            elapsed: Duration::from_millis(1),
            cuda: None,
        };
        let e = policy::evaluate(
            &GpuConfig::default(),
            &mut PolicyState::default(),
            Err("not read".into()),
            Some(&s),
            0,
        );
        (s, e)
    }

    fn ids(list: &[(&str, Vec<String>)]) -> KubeletView {
        KubeletView {
            node_allocatable: None,
            allocatable_ids: Some(
                list.iter()
                    .cloned()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            ),
            dra_ids: None,
        }
    }

    fn uuid(i: u32) -> String {
        format!("GPU-8f00000{i}-0000-4000-8000-00000000000{i}")
    }

    #[test]
    fn offered_but_lost_is_advertised_unhealthy_by_id() {
        let mut gpus: Vec<GpuInfo> = (0..8).map(gpu).collect();
        gpus[3].lost = true;
        let (s, mut e) = judged(gpus);
        let view = ids(&[(GPU_RESOURCE, (0..8).map(uuid).collect())]);
        let c = compare(&view, nvml_devices(&s, &e));
        assert!(c.offers_unhealthy());
        apply(&mut e, &c);
        assert_eq!(e.gpu_healthy.reason, "AdvertisedUnhealthy");
        assert!(
            e.gpu_healthy.message.starts_with(
                "kubelet offers 8 nvidia.com/gpu, 7 are healthy: GPU 3 (GPU-8f000003…) fallen off the bus"
            ),
            "{}",
            e.gpu_healthy.message
        );
        assert_eq!(c.not_offered_message(), None);
    }

    #[test]
    fn an_offered_id_nvml_cannot_see_is_named() {
        let (s, mut e) = judged((0..7).map(gpu).collect());
        let view = ids(&[(GPU_RESOURCE, (0..8).map(uuid).collect())]);
        let c = compare(&view, nvml_devices(&s, &e));
        apply(&mut e, &c);
        assert_eq!(
            e.gpu_healthy.message,
            "kubelet offers 8 nvidia.com/gpu, 7 are healthy: GPU-8f000007… NVML does not see it"
        );
    }

    #[test]
    fn healthy_not_offered_is_a_warning_not_a_failure() {
        let (s, mut e) = judged((0..8).map(gpu).collect());
        let view = ids(&[(GPU_RESOURCE, (0..6).map(uuid).collect())]);
        let c = compare(&view, nvml_devices(&s, &e));
        assert!(!c.offers_unhealthy());
        apply(&mut e, &c);
        assert_eq!(e.gpu_healthy.reason, "GPUsHealthy");
        assert_eq!(
            c.not_offered_message().as_deref(),
            Some("2 healthy nvidia.com/gpu not offered by the kubelet: GPU 6 (GPU-8f000006…), GPU 7 (GPU-8f000007…)")
        );
    }

    #[test]
    fn by_count_from_the_node_when_pod_resources_is_absent() {
        let mut gpus: Vec<GpuInfo> = (0..8).map(gpu).collect();
        gpus[3].lost = true;
        let (s, e) = judged(gpus);
        let view = KubeletView {
            node_allocatable: Some([(GPU_RESOURCE.to_string(), 8)].into()),
            allocatable_ids: None,
            dra_ids: None,
        };
        let c = compare(&view, nvml_devices(&s, &e));
        assert_eq!(
            c.unhealthy_message().as_deref(),
            Some("kubelet offers 8 nvidia.com/gpu, 7 are healthy: GPU 3 (GPU-8f000003…) fallen off the bus (NVML_ERROR_GPU_IS_LOST)")
        );
        let view = KubeletView {
            node_allocatable: Some([(GPU_RESOURCE.to_string(), 6)].into()),
            allocatable_ids: None,
            dra_ids: None,
        };
        let (s, e) = judged((0..8).map(gpu).collect());
        let c = compare(&view, nvml_devices(&s, &e));
        assert_eq!(
            c.not_offered_message().as_deref(),
            Some("2 healthy nvidia.com/gpu not offered by the kubelet")
        );
    }

    #[test]
    fn mig_instances_are_offered_by_profile_and_share_the_parent_health() {
        let mut gpus: Vec<GpuInfo> = (0..2).map(gpu).collect();
        for g in &mut gpus {
            g.mig_enabled = Some(true);
            g.mig = (0..2)
                .map(|k| MigInfo {
                    index: k,
                    uuid: Some(format!("MIG-{}-{k}", g.index)),
                    name: Some("NVIDIA H100 80GB HBM3 MIG 1g.10gb".into()),
                    memory: None,
                })
                .collect();
        }
        gpus[1].ecc_uncorrected_volatile = Some(2);
        let (s, e) = judged(gpus);
        let devices = nvml_devices(&s, &e);
        assert_eq!(
            devices.len(),
            4,
            "MIG instances replace their GPUs: {devices:?}"
        );
        let view = ids(&[(
            "nvidia.com/mig-1g.10gb",
            vec![
                "MIG-0-0".into(),
                "MIG-0-1".into(),
                "MIG-1-0".into(),
                "MIG-1-1".into(),
            ],
        )]);
        let c = compare(&view, devices);
        let msg = c.unhealthy_message().unwrap();
        assert!(
            msg.starts_with("kubelet offers 4 nvidia.com/mig-1g.10gb, 2 are healthy: GPU 1 (MIG-1-0) 2 uncorrectable ECC"),
            "{msg}"
        );
        assert_eq!(c.resources.len(), 1, "{c:?}");
    }

    #[test]
    fn dra_devices_count_as_offered_and_an_unhealthy_one_is_named() {
        let mut gpus: Vec<GpuInfo> = (0..4).map(gpu).collect();
        gpus[2].lost = true;
        let (s, e) = judged(gpus);
        // A DRA-only node: the device plugin offers nothing, the slices publish GPUs 0-2.
        let view = KubeletView {
            node_allocatable: Some(BTreeMap::new()),
            allocatable_ids: Some(BTreeMap::new()),
            dra_ids: Some([("gpu.nvidia.com".to_string(), (0..3).map(uuid).collect())].into()),
        };
        let c = compare(&view, nvml_devices(&s, &e));
        assert_eq!(
            c.unhealthy_message().as_deref(),
            Some("DRA ResourceSlices of this node publish 3 gpu.nvidia.com devices, 2 are healthy: GPU 2 (GPU-8f000002…) fallen off the bus (NVML_ERROR_GPU_IS_LOST)")
        );
        // GPU 3 is published by nobody: the one healthy device not offered.
        assert_eq!(
            c.not_offered_message().as_deref(),
            Some("1 healthy nvidia.com/gpu not offered by the kubelet: GPU 3 (GPU-8f000003…)")
        );
        // Counted from the Node only (pod-resources unreadable): DRA's devices are not missing either.
        let view = KubeletView {
            allocatable_ids: None,
            ..view
        };
        let c = compare(&view, nvml_devices(&s, &e));
        assert_eq!(
            c.not_offered_message().as_deref(),
            Some("1 healthy nvidia.com/gpu not offered by the kubelet")
        );
    }
}
