//! Arbitrary bytes as the API server's JSON where the reading is ours: a Pod
//! (k8s-openapi's types decode it) → its containers' seccomp references
//! (`nodeproof_report::refs::pod_refs`: annotations, fields, precedence, the
//! kubelet's noNewPrivileges rule) → where a `Localhost` one is looked for on
//! the node (`profile_path`); a RuntimeClass's contract annotations; a Node's
//! labels, taints and GPU conditions; the kubelet unit text's `--kubeconfig`.

#![no_main]

use std::collections::BTreeMap;
use std::path::{Component, Path};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use libfuzzer_sys::fuzz_target;
use nodeproof::pods::verdict::{gpu_conditions, labels_and_taints, profile_path};
use nodeproof_report::contract::{contract_of, ContractState};
use nodeproof_report::credentials::kubeconfig_flag;
use nodeproof_report::refs::{from_annotation, pod_refs, Profile};

fn check_pod(pod: &Pod) {
    let refs = pod_refs(pod);
    let root = Path::new("/var/lib/kubelet/seccomp");
    for c in &refs.containers {
        let Some((profile, _)) = &c.profile else {
            continue;
        };
        let _ = profile.display();
        if let Profile::Localhost(rel) = profile {
            // Never outside the seccomp root.
            if let Some(p) = profile_path(root, rel) {
                assert!(p.starts_with(root), "{rel:?} → {}", p.display());
                assert!(
                    !p.components().any(|c| matches!(c, Component::ParentDir)),
                    "{rel:?} → {}",
                    p.display()
                );
            }
        }
    }
    let _ = refs.key();
    for v in pod.metadata.annotations.iter().flat_map(|a| a.values()) {
        let _ = from_annotation(v);
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(pod) = serde_json::from_slice::<Pod>(data) {
        check_pod(&pod);
    }
    if let Ok(class) = serde_json::from_slice::<RuntimeClass>(data) {
        let name = class.metadata.name.clone().unwrap_or_default();
        let annotations: BTreeMap<String, String> =
            class.metadata.annotations.clone().unwrap_or_default();
        if let Some(Ok(contract)) = contract_of(&name, &annotations) {
            let _ = contract.label_key();
        }
    }
    if let Ok(node) = serde_json::from_slice::<Node>(data) {
        let _ = gpu_conditions(&node);
        let _ = labels_and_taints(&node);
    }
    let text = String::from_utf8_lossy(data);
    let _ = ContractState::parse(&text);
    if let Some(path) = kubeconfig_flag(&text) {
        assert!(!path.is_empty());
    }
});
