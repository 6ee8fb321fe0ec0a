//! What the rest of the node says about its GPUs, as the GPU checks use it:
//! the kubelet's pod-resources (allocatable devices and who holds them),
//! the Node's allocatable NVIDIA resources, and the node's Dynamic Resource
//! Allocation view (the devices its ResourceSlices publish and the claims
//! that hold them). Plain data: the agent's `observe` reads them (the
//! kubelet's socket, the API through `nodeproof-apiclient`'s DRA reader) and its
//! `checks::gpu` judges them with NVML's picture. Here, not in the crates
//! that read them, because the GPU checks, the pods watcher and the daemon
//! all pass them around, and they are GPU vocabulary.

use std::collections::BTreeMap;

use crate::faults::Allocation;

/// A DRA device a container holds, as pod-resources names it (driver,
/// pool, device): joined to a UUID through the node's ResourceSlices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedDevice {
    pub driver: String,
    pub pool: String,
    pub device: String,
}

/// One device a ResourceSlice of this node publishes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SliceDevice {
    pub driver: String,
    pub pool: String,
    pub name: String,
    /// The `uuid` attribute (`GPU-…` or `MIG-…` for NVIDIA's driver).
    pub uuid: Option<String>,
    /// The `parentUUID` attribute of a MIG device.
    pub parent_uuid: Option<String>,
}

/// One device of a claim in one container of a pod.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DraAllocation {
    pub namespace: String,
    pub pod: String,
    /// Empty when no container of the pod names the claim.
    pub container: String,
    pub claim: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
    /// The device's UUID from the slices (`None`: no slice of this node publishes it).
    pub uuid: Option<String>,
}

/// What one read found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DraView {
    /// The `resource.k8s.io` version read.
    pub version: String,
    pub devices: Vec<SliceDevice>,
    pub allocations: Vec<DraAllocation>,
    /// Claims that could not be read, and why.
    pub notes: Vec<String>,
}

impl DraView {
    /// The UUID a slice of this node publishes for (driver, pool, device).
    pub fn uuid_of(&self, driver: &str, pool: &str, device: &str) -> Option<&str> {
        self.devices
            .iter()
            .find(|d| d.driver == driver && d.pool == pool && d.name == device)
            .and_then(|d| d.uuid.as_deref())
    }
}

/// What the kubelet says about NVIDIA devices in one read.
#[derive(Debug, Default)]
pub struct KubeletGpus {
    /// Allocatable device ids by NVIDIA resource.
    pub allocatable: BTreeMap<String, Vec<String>>,
    /// Every NVIDIA device held by a container of a pod the kubelet lists
    /// (terminated pods included: the caller filters).
    pub allocations: Vec<Allocation>,
    /// Devices of DRA claims in containers (kubelets with
    /// KubeletPodResourcesDynamicResources): named by driver, pool and
    /// device, mapped to UUIDs through the node's ResourceSlices.
    pub claims: Vec<(Allocation, ClaimedDevice)>,
}

/// This node's DRA view as the pods watcher (or a one-shot command) last
/// read it.
#[derive(Debug, Clone, Default)]
pub enum NodeDra {
    /// Not read yet, or nothing to read it with (no credentials, no node name).
    #[default]
    Unread,
    /// `resource.k8s.io` is not served.
    NotServed,
    /// The read failed, and why (one line, with its causes).
    Failed(String),
    Read(DraView),
}

impl NodeDra {
    /// The view, when one was read.
    pub fn view(&self) -> Option<&DraView> {
        match self {
            NodeDra::Read(v) => Some(v),
            _ => None,
        }
    }

    /// From a read: `Ok(None)` when the API is not served.
    pub fn of(read: Result<Option<DraView>, String>) -> NodeDra {
        match read {
            Ok(Some(v)) => NodeDra::Read(v),
            Ok(None) => NodeDra::NotServed,
            Err(e) => NodeDra::Failed(e),
        }
    }
}

/// A Node's allocatable NVIDIA resources by name (`None`: no Node seen).
pub type NodeGpus = Option<BTreeMap<String, u64>>;
