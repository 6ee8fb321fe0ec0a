//! Dynamic Resource Allocation (`resource.k8s.io`) as a node sees it: the
//! devices this node's ResourceSlices publish and the ResourceClaims the
//! pods bound here hold, resolved to (pod, container, device UUID).
//!
//! The decoding is ours and pure ([`slice_devices`], [`claim_status`],
//! [`pod_claims`], [`allocations`]); [`DraReader`] reads the API:
//! - ResourceSlices are listed with `fieldSelector=spec.nodeName=<node>`: the
//!   Node authorizer (Kubernetes 1.32, AuthorizeNodeWithSelectors) lets a
//!   node list only its own slices that way;
//! - ResourceClaims are read one by one (GET): the Node authorizer lets a
//!   node get a claim only when a pod bound to it references it, and never
//!   list them;
//! - the version is the first of `v1` (1.34), `v1beta2` (1.33), `v1beta1`
//!   (1.32) the server serves (a 404 from a version's list path means the
//!   version is not served), remembered until it answers 404 again.
//!
//! NVIDIA's DRA driver (`gpu.nvidia.com`) names devices `gpu-<minor>` and
//! `gpu-<minor>-mig-…` and publishes each one's `uuid` attribute (a MIG
//! device also its `parentUUID`): the UUID is what NVML and pod-resources
//! call the device, so it is what joins the three views.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use serde::Deserialize;

use nodeproof_gpu::views::{DraAllocation, DraView, SliceDevice};

pub const GROUP: &str = "resource.k8s.io";
/// Served versions in the order they are tried.
pub const VERSIONS: [&str; 3] = ["v1", "v1beta2", "v1beta1"];

/// One device allocated to a claim.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ClaimResult {
    pub request: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
}

/// What a ResourceClaim's status says: its allocated devices and the pods
/// (by UID) it is reserved for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimStatus {
    pub results: Vec<ClaimResult>,
    pub reserved_for: Vec<String>,
}

/// One container's use of one of its pod's claims (`request`: only that
/// request's devices; `None`: all of the claim's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerClaim {
    pub container: String,
    pub request: Option<String>,
}

/// One claim of a pod: the ResourceClaim's name (once known) and the
/// containers that use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodClaim {
    /// The name in `pod.spec.resourceClaims`.
    pub name: String,
    /// The ResourceClaim object's name: given directly, or generated from a
    /// template and then read from `pod.status.resourceClaimStatuses`
    /// (`None` until the claim controller created it).
    pub claim: Option<String>,
    pub containers: Vec<ContainerClaim>,
}

/// A pod's claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodClaims {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub claims: Vec<PodClaim>,
}

#[derive(Debug, thiserror::Error)]
pub enum DraError {
    #[error("listing the ResourceSlices of node {node} ({GROUP}/{version}) failed")]
    ListSlices {
        node: String,
        version: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("reading ResourceClaim {namespace}/{name} ({GROUP}/{version}) failed")]
    GetClaim {
        namespace: String,
        name: String,
        version: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("a {kind} of {GROUP}/{version} is not what the API documents")]
    Decode {
        kind: &'static str,
        version: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

// The fields read, as the API documents them. v1beta1 wraps a device's
// attributes in `basic`; v1beta2 and v1 put them on the device itself.
#[derive(Deserialize)]
struct SliceSpec {
    #[serde(default)]
    driver: String,
    #[serde(default)]
    pool: SlicePool,
    #[serde(default)]
    devices: Vec<SliceDeviceDoc>,
}

#[derive(Deserialize, Default)]
struct SlicePool {
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct SliceDeviceDoc {
    name: String,
    #[serde(default)]
    attributes: BTreeMap<String, Attribute>,
    #[serde(default)]
    basic: Option<BasicDevice>,
}

#[derive(Deserialize)]
struct BasicDevice {
    #[serde(default)]
    attributes: BTreeMap<String, Attribute>,
}

#[derive(Deserialize)]
struct Attribute {
    #[serde(default)]
    string: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ClaimStatusDoc {
    #[serde(default)]
    allocation: Option<AllocationDoc>,
    #[serde(default)]
    reserved_for: Vec<ConsumerDoc>,
}

#[derive(Deserialize)]
struct AllocationDoc {
    #[serde(default)]
    devices: Option<DeviceAllocationDoc>,
}

#[derive(Deserialize)]
struct DeviceAllocationDoc {
    #[serde(default)]
    results: Vec<ResultDoc>,
}

#[derive(Deserialize)]
struct ResultDoc {
    #[serde(default)]
    request: String,
    driver: String,
    pool: String,
    device: String,
}

#[derive(Deserialize)]
struct ConsumerDoc {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    uid: String,
}

/// An attribute by its name: unqualified, or qualified with the driver's
/// own domain (the API treats `uuid` and `gpu.nvidia.com/uuid` of driver
/// `gpu.nvidia.com` as the same attribute).
fn attribute(attrs: &BTreeMap<String, Attribute>, driver: &str, name: &str) -> Option<String> {
    attrs
        .get(name)
        .or_else(|| attrs.get(&format!("{driver}/{name}")))
        .and_then(|a| a.string.clone())
}

/// The devices of one ResourceSlice's `spec`.
pub fn slice_devices(
    spec: &serde_json::Value,
    version: &'static str,
) -> Result<Vec<SliceDevice>, DraError> {
    let spec = SliceSpec::deserialize(spec).map_err(|source| DraError::Decode {
        kind: "ResourceSlice",
        version,
        source,
    })?;
    Ok(spec
        .devices
        .into_iter()
        .map(|d| {
            let attrs = match d.basic {
                Some(b) if d.attributes.is_empty() => b.attributes,
                _ => d.attributes,
            };
            SliceDevice {
                uuid: attribute(&attrs, &spec.driver, "uuid"),
                parent_uuid: attribute(&attrs, &spec.driver, "parentUUID"),
                driver: spec.driver.clone(),
                pool: spec.pool.name.clone(),
                name: d.name,
            }
        })
        .collect())
}

/// A ResourceClaim's `status` (absent: not allocated).
pub fn claim_status(
    status: Option<&serde_json::Value>,
    version: &'static str,
) -> Result<ClaimStatus, DraError> {
    let Some(status) = status else {
        return Ok(ClaimStatus::default());
    };
    let doc = ClaimStatusDoc::deserialize(status).map_err(|source| DraError::Decode {
        kind: "ResourceClaim",
        version,
        source,
    })?;
    Ok(ClaimStatus {
        results: doc
            .allocation
            .and_then(|a| a.devices)
            .map(|d| d.results)
            .unwrap_or_default()
            .into_iter()
            .map(|r| ClaimResult {
                request: r.request,
                driver: r.driver,
                pool: r.pool,
                device: r.device,
            })
            .collect(),
        reserved_for: doc
            .reserved_for
            .into_iter()
            .filter(|c| c.resource == "pods")
            .map(|c| c.uid)
            .collect(),
    })
}

/// A pod's claims (`None`: it has none). Containers, init containers
/// included, name a claim in `resources.claims`.
pub fn pod_claims(pod: &Pod) -> Option<PodClaims> {
    let spec = pod.spec.as_ref()?;
    let declared = spec.resource_claims.as_ref().filter(|c| !c.is_empty())?;
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref());
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    let mut uses: BTreeMap<&str, Vec<ContainerClaim>> = BTreeMap::new();
    for c in containers {
        for r in c
            .resources
            .as_ref()
            .and_then(|r| r.claims.as_ref())
            .into_iter()
            .flatten()
        {
            uses.entry(r.name.as_str())
                .or_default()
                .push(ContainerClaim {
                    container: c.name.clone(),
                    request: r.request.clone().filter(|r| !r.is_empty()),
                });
        }
    }
    let claims = declared
        .iter()
        .map(|d| PodClaim {
            // A template's claim is named by the claim controller and
            // recorded in the pod's status (KEP-4381's resourceClaimStatuses).
            claim: d.resource_claim_name.clone().or_else(|| {
                statuses?
                    .iter()
                    .find(|s| s.name == d.name)?
                    .resource_claim_name
                    .clone()
            }),
            containers: uses.remove(d.name.as_str()).unwrap_or_default(),
            name: d.name.clone(),
        })
        .collect();
    Some(PodClaims {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        pod: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        claims,
    })
}

/// Each device of each claim a pod holds, in each container that uses it,
/// with its UUID from this node's slices. A claim counts for a pod only
/// while it is reserved for that pod (the scheduler reserves it before
/// binding; the claim controller removes a finished pod).
pub fn allocations(
    pods: &[PodClaims],
    claims: &BTreeMap<(String, String), ClaimStatus>,
    devices: &[SliceDevice],
) -> Vec<DraAllocation> {
    let uuid = |driver: &str, pool: &str, name: &str| {
        devices
            .iter()
            .find(|d| d.driver == driver && d.pool == pool && d.name == name)
            .and_then(|d| d.uuid.clone())
    };
    let mut out = BTreeSet::new();
    for p in pods {
        for c in &p.claims {
            let Some(name) = &c.claim else { continue };
            let Some(status) = claims.get(&(p.namespace.clone(), name.clone())) else {
                continue;
            };
            if !status.reserved_for.contains(&p.uid) {
                continue;
            }
            for r in &status.results {
                let users: Vec<&str> = c
                    .containers
                    .iter()
                    .filter(|u| {
                        u.request
                            .as_deref()
                            .is_none_or(|q| same_request(q, &r.request))
                    })
                    .map(|u| u.container.as_str())
                    .collect();
                let users = if users.is_empty() { vec![""] } else { users };
                for container in users {
                    out.insert(DraAllocation {
                        namespace: p.namespace.clone(),
                        pod: p.pod.clone(),
                        container: container.to_string(),
                        claim: name.clone(),
                        driver: r.driver.clone(),
                        pool: r.pool.clone(),
                        device: r.device.clone(),
                        uuid: uuid(&r.driver, &r.pool, &r.device),
                    });
                }
            }
        }
    }
    out.into_iter().collect()
}

/// A container names a request; a result of a prioritized list
/// (`firstAvailable`) names `<request>/<subrequest>`.
fn same_request(named: &str, result: &str) -> bool {
    result == named
        || result
            .strip_prefix(named)
            .is_some_and(|rest| rest.starts_with('/'))
}

fn resource(version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, version, kind), plural)
}

fn not_served(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Reads this node's DRA view through the API.
pub struct DraReader {
    client: kube::Client,
    node: String,
    version: Option<&'static str>,
}

impl DraReader {
    pub fn new(client: kube::Client, node: &str) -> Self {
        DraReader {
            client,
            node: node.to_string(),
            version: None,
        }
    }

    /// Lists this node's slices in the first version served. `Ok(None)`:
    /// the server serves no `resource.k8s.io` version known here (DRA off).
    async fn slices(&mut self) -> Result<Option<(&'static str, Vec<SliceDevice>)>, DraError> {
        let start = self
            .version
            .map_or(0, |v| VERSIONS.iter().position(|x| *x == v).unwrap_or(0));
        for version in VERSIONS.into_iter().skip(start) {
            let api: Api<DynamicObject> = Api::all_with(
                self.client.clone(),
                &resource(version, "ResourceSlice", "resourceslices"),
            );
            let params = ListParams::default().fields(&format!("spec.nodeName={}", self.node));
            match crate::list::list_all(&api, params).await {
                Ok(items) => {
                    self.version = Some(version);
                    let mut devices = Vec::new();
                    for s in items {
                        let spec = s.data.get("spec").cloned().unwrap_or_default();
                        devices.extend(slice_devices(&spec, version)?);
                    }
                    devices.sort();
                    return Ok(Some((version, devices)));
                }
                Err(e) if not_served(&e) => continue,
                Err(e) => {
                    return Err(DraError::ListSlices {
                        node: self.node.clone(),
                        version,
                        source: Box::new(e),
                    })
                }
            }
        }
        self.version = None;
        Ok(None)
    }

    /// This node's slices and the claims of `pods` (the pods bound here).
    /// `Ok(None)`: DRA is not served. A claim that cannot be read is a note,
    /// not a failed read: the other pods' devices still count.
    pub async fn read(&mut self, pods: &[PodClaims]) -> Result<Option<DraView>, DraError> {
        let Some((version, devices)) = self.slices().await? else {
            return Ok(None);
        };
        let mut claims = BTreeMap::new();
        let mut notes = Vec::new();
        let wanted: BTreeSet<(String, String)> = pods
            .iter()
            .flat_map(|p| {
                p.claims
                    .iter()
                    .filter_map(|c| Some((p.namespace.clone(), c.claim.clone()?)))
            })
            .collect();
        for (namespace, name) in wanted {
            let api: Api<DynamicObject> = Api::namespaced_with(
                self.client.clone(),
                &namespace,
                &resource(version, "ResourceClaim", "resourceclaims"),
            );
            match api.get_opt(&name).await {
                Ok(Some(obj)) => {
                    let status = claim_status(obj.data.get("status"), version)?;
                    claims.insert((namespace, name), status);
                }
                // Deleted since the pod was seen: nothing allocated any more.
                Ok(None) => {}
                Err(e) => notes.push(nodeproof_findings::errors::error_chain(
                    &DraError::GetClaim {
                        namespace,
                        name,
                        version,
                        source: Box::new(e),
                    },
                )),
            }
        }
        Ok(Some(DraView {
            version: version.to_string(),
            allocations: allocations(pods, &claims, &devices),
            devices,
            notes,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gpu_slice_v1() -> serde_json::Value {
        json!({
            "driver": "gpu.nvidia.com", "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": "GPU-a"}, "index": {"int": 0}}},
                {"name": "gpu-1-mig-9-0-1", "attributes": {"type": {"string": "mig"}, "gpu.nvidia.com/uuid": {"string": "MIG-b"}, "parentUUID": {"string": "GPU-p"}}},
                {"name": "nic-0", "attributes": {}}
            ]
        })
    }

    #[test]
    fn slice_devices_read_v1_and_v1beta1_shapes_and_qualified_names() {
        let d = slice_devices(&gpu_slice_v1(), "v1").unwrap();
        assert_eq!(d.len(), 3);
        assert_eq!(
            (d[0].name.as_str(), d[0].uuid.as_deref()),
            ("gpu-0", Some("GPU-a"))
        );
        assert_eq!(d[1].uuid.as_deref(), Some("MIG-b"));
        assert_eq!(d[1].parent_uuid.as_deref(), Some("GPU-p"));
        assert_eq!((d[2].uuid.as_deref(), d[2].pool.as_str()), (None, "n1"));
        let beta = json!({
            "driver": "gpu.nvidia.com", "pool": {"name": "n1"},
            "devices": [{"name": "gpu-0", "basic": {"attributes": {"uuid": {"string": "GPU-a"}}}}]
        });
        let d = slice_devices(&beta, "v1beta1").unwrap();
        assert_eq!(d[0].uuid.as_deref(), Some("GPU-a"));
        // A spec that is not the API's shape is an error that names the kind.
        let e = slice_devices(&json!({"devices": [{"attributes": {}}]}), "v1").unwrap_err();
        assert!(e.to_string().contains("ResourceSlice"), "{e}");
    }

    fn pod(status_claim: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "vllm-0", "namespace": "ml", "uid": "u1"},
            "spec": {
                "resourceClaims": [
                    {"name": "gpus", "resourceClaimTemplateName": "two-gpus"},
                    {"name": "shared", "resourceClaimName": "shared-gpu"}
                ],
                "containers": [
                    {"name": "vllm", "resources": {"claims": [{"name": "gpus", "request": "big"}, {"name": "shared"}]}},
                    {"name": "sidecar", "resources": {"claims": [{"name": "gpus", "request": "small"}]}},
                    {"name": "log"}
                ]
            },
            "status": {"phase": "Running", "resourceClaimStatuses": status_claim.map(|c| vec![json!({"name": "gpus", "resourceClaimName": c})])}
        }))
        .unwrap()
    }

    #[test]
    fn a_template_claim_is_named_by_the_pods_status_and_requests_pick_containers() {
        let p = pod_claims(&pod(None)).unwrap();
        assert_eq!(p.claims[0].claim, None, "not created yet");
        assert_eq!(p.claims[1].claim.as_deref(), Some("shared-gpu"));
        let p = pod_claims(&pod(Some("vllm-0-gpus-x7k2"))).unwrap();
        assert_eq!(p.claims[0].claim.as_deref(), Some("vllm-0-gpus-x7k2"));
        let status = |reserved: &str| {
            claim_status(
                Some(&json!({
                    "allocation": {"devices": {"results": [
                        {"request": "big", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"},
                        {"request": "small", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-1-mig-9-0-1"}
                    ]}},
                    "reservedFor": [{"resource": "pods", "name": "vllm-0", "uid": reserved}]
                })),
                "v1",
            )
            .unwrap()
        };
        let devices = slice_devices(&gpu_slice_v1(), "v1").unwrap();
        let claims = BTreeMap::from([(
            ("ml".to_string(), "vllm-0-gpus-x7k2".to_string()),
            status("u1"),
        )]);
        let got = allocations(std::slice::from_ref(&p), &claims, &devices);
        let seen: Vec<(&str, &str, Option<&str>)> = got
            .iter()
            .map(|a| (a.container.as_str(), a.device.as_str(), a.uuid.as_deref()))
            .collect();
        assert_eq!(
            seen,
            [
                ("sidecar", "gpu-1-mig-9-0-1", Some("MIG-b")),
                ("vllm", "gpu-0", Some("GPU-a"))
            ]
        );
        // Reserved for another pod (a claim shared, or this pod gone and recreated): not this pod's.
        let claims = BTreeMap::from([(
            ("ml".to_string(), "vllm-0-gpus-x7k2".to_string()),
            status("u-other"),
        )]);
        assert!(allocations(&[p], &claims, &devices).is_empty());
    }

    #[test]
    fn an_unallocated_claim_has_nothing_and_non_pod_consumers_are_left_out() {
        assert_eq!(claim_status(None, "v1").unwrap(), ClaimStatus::default());
        let s = claim_status(
            Some(&json!({"reservedFor": [{"resource": "jobs", "name": "j", "uid": "j1"}]})),
            "v1",
        )
        .unwrap();
        assert!(s.results.is_empty() && s.reserved_for.is_empty());
    }

    #[test]
    fn a_prioritized_lists_subrequest_belongs_to_its_request() {
        assert!(same_request("gpu", "gpu"));
        assert!(same_request("gpu", "gpu/big-first"));
        assert!(!same_request("gpu", "gpus"));
        assert!(!same_request("gpu", "other/gpu"));
    }
}
