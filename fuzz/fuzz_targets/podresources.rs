//! Arbitrary bytes as the kubelet's pod-resources answers (protobuf, decoded
//! by prost) → our plain data (`PodAllocation`, `DeviceSet`, `ClaimDevice`):
//! nothing lost or invented on the way.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nodeproof_podresources::api::{
    AllocatableResourcesResponse, GetPodResourcesResponse, ListPodResourcesResponse,
};
use nodeproof_podresources::{DeviceSet, PodAllocation};
use prost::Message;

fn check(p: nodeproof_podresources::api::PodResources) {
    let (namespace, name) = (p.namespace.clone(), p.name.clone());
    let containers: Vec<(String, usize, usize)> = p
        .containers
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                c.devices.len(),
                c.dynamic_resources
                    .iter()
                    .map(|d| d.claim_resources.len())
                    .sum(),
            )
        })
        .collect();
    let ours = PodAllocation::from(p);
    assert_eq!((ours.namespace, ours.name), (namespace, name));
    assert_eq!(ours.containers.len(), containers.len());
    for (c, (name, devices, claims)) in ours.containers.iter().zip(containers) {
        assert_eq!(c.name, name);
        assert_eq!(c.devices.len(), devices);
        assert_eq!(c.claims.len(), claims);
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(list) = ListPodResourcesResponse::decode(data) {
        for p in list.pod_resources {
            check(p);
        }
    }
    if let Ok(get) = GetPodResourcesResponse::decode(data) {
        if let Some(p) = get.pod_resources {
            check(p);
        }
    }
    if let Ok(alloc) = AllocatableResourcesResponse::decode(data) {
        for d in alloc.devices {
            let ids = d.device_ids.clone();
            assert_eq!(DeviceSet::from(d).ids, ids);
        }
    }
});
