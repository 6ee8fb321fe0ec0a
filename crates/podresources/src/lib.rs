//! The kubelet's pod-resources API (v1): which devices the kubelet can
//! allocate and which pod's container got which device.
//!
//! `proto/api.proto` is the published API; `build.rs` generates its messages,
//! client and server ([`api`]). [`PodResourcesSource`] is the edge the agent
//! reads through: [`KubeletPodResources`] over the kubelet's unix socket in
//! the agent, a fake in tests. What comes back is plain data
//! ([`DeviceSet`], [`PodAllocation`]), independent of the generated types.

pub mod client;
#[cfg(feature = "fake")]
pub mod fake;

/// The generated v1 messages, client and server.
#[allow(clippy::all, clippy::pedantic)]
pub mod api {
    tonic::include_proto!("v1");
}

pub use client::{KubeletPodResources, DEFAULT_SOCKET};

use std::path::PathBuf;

/// Devices of one extended resource (e.g. `nvidia.com/gpu`): the ids are
/// what the device plugin registered (GPU or MIG UUIDs for NVIDIA's plugin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSet {
    pub resource: String,
    pub ids: Vec<String>,
}

/// One device allocated through a DRA ResourceClaim, as the kubelet names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimDevice {
    pub claim_namespace: String,
    pub claim_name: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
}

/// What one container was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerAllocation {
    pub name: String,
    pub devices: Vec<DeviceSet>,
    pub claims: Vec<ClaimDevice>,
}

/// What one pod's containers were given. The kubelet lists every pod it
/// still knows, terminated ones included: the caller filters by phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodAllocation {
    pub namespace: String,
    pub name: String,
    pub containers: Vec<ContainerAllocation>,
}

/// Which call of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    List,
    GetAllocatableResources,
    Get,
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Call::List => "List",
            Call::GetAllocatableResources => "GetAllocatableResources",
            Call::Get => "Get",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    /// Not a fault of the node by itself: no kubelet here (a workstation),
    /// or a kubelet older than the API. Reported as a state.
    #[error("the kubelet's pod-resources socket {} does not exist", path.display())]
    SocketMissing { path: PathBuf },
    #[error("cannot connect to the kubelet's pod-resources socket {}", path.display())]
    Connect {
        path: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("pod-resources {call} did not answer within {timeout_ms} ms")]
    Timeout { call: Call, timeout_ms: u64 },
    #[error("pod-resources {call} failed")]
    Call {
        call: Call,
        #[source]
        source: Box<tonic::Status>,
    },
    #[error("cannot start the pod-resources client's runtime")]
    Runtime {
        #[source]
        source: std::io::Error,
    },
}

/// The edge: the kubelet's pod-resources API, or a fake.
pub trait PodResourcesSource: Send {
    /// Devices the kubelet can allocate (only those its device plugins call healthy).
    fn allocatable(&mut self) -> Result<Vec<DeviceSet>, PodResourcesError>;
    /// Every pod the kubelet knows, with its containers' devices.
    fn list(&mut self) -> Result<Vec<PodAllocation>, PodResourcesError>;
    /// One pod's devices; `None` when the kubelet does not know the pod.
    fn get(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<PodAllocation>, PodResourcesError>;
}

impl From<api::ContainerDevices> for DeviceSet {
    fn from(d: api::ContainerDevices) -> Self {
        DeviceSet {
            resource: d.resource_name,
            ids: d.device_ids,
        }
    }
}

impl From<api::PodResources> for PodAllocation {
    fn from(p: api::PodResources) -> Self {
        PodAllocation {
            namespace: p.namespace,
            name: p.name,
            containers: p
                .containers
                .into_iter()
                .map(|c| ContainerAllocation {
                    name: c.name,
                    devices: c.devices.into_iter().map(DeviceSet::from).collect(),
                    claims: c
                        .dynamic_resources
                        .into_iter()
                        .flat_map(|d| {
                            let (ns, claim) = (d.claim_namespace, d.claim_name);
                            d.claim_resources.into_iter().map(move |r| ClaimDevice {
                                claim_namespace: ns.clone(),
                                claim_name: claim.clone(),
                                driver: r.driver_name,
                                pool: r.pool_name,
                                device: r.device_name,
                            })
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}
