//! Dynamic Resource Allocation.
//!
//! `resource.k8s.io`: only the versions set with `serve_dra` are served
//! (none by default, as on a cluster without DRA); any other version's
//! path is a 404, as kube-apiserver answers for a group version it does not
//! serve. ResourceSlices (cluster-scoped) are listed through the generic
//! list path (a node only with `fieldSelector=spec.nodeName=<itself>`);
//! ResourceClaims are read one by one, and the Node authorizer's graph lets
//! a node get a claim only when a pod bound to it references it (by
//! `resourceClaimName` in its spec, or in its status for a template's
//! claim). DeviceTaintRules: [`device_taint_rules`].

pub mod device_taint_rules;

use axum::http::Method;

use crate::auth::Identity;
use crate::state::TestApiServer;
use crate::status::{no_such_resource, status, Answer};
use crate::store::Store;

/// The `resource.k8s.io` versions served.
#[derive(Default)]
pub struct DraState {
    /// ResourceSlices and ResourceClaims.
    pub versions: Vec<&'static str>,
    /// DeviceTaintRules.
    pub device_taint_versions: Vec<&'static str>,
}

impl TestApiServer {
    /// Serve these `resource.k8s.io` versions (objects are stored as put).
    pub fn serve_dra(&self, versions: &[&'static str]) {
        self.with(|s| s.part::<DraState>().versions = versions.to_vec());
    }
}

fn claim_referenced_by_pod_of(store: &Store, node: &str, ns: &str, claim: &str) -> bool {
    store
        .pods()
        .map(|(_, p)| p)
        .filter(|p| {
            p.metadata.namespace.as_deref() == Some(ns)
                && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
        })
        .any(|p| {
            let in_spec = p
                .spec
                .as_ref()
                .and_then(|s| s.resource_claims.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.resource_claim_name.as_deref() == Some(claim));
            let in_status = p
                .status
                .as_ref()
                .and_then(|s| s.resource_claim_statuses.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.resource_claim_name.as_deref() == Some(claim));
            in_spec || in_status
        })
}

pub fn route(
    dra: &DraState,
    store: &Store,
    who: &Identity,
    method: &Method,
    parts: &[&str],
) -> Option<Answer> {
    let ["apis", "resource.k8s.io", version, rest @ ..] = parts else {
        return None;
    };
    if rest.first() == Some(&"devicetaintrules") {
        // Served on their own terms: see `device_taint_rules`.
        return None;
    }
    if !dra.versions.contains(version) {
        return Some(no_such_resource());
    }
    match (method.as_str(), rest) {
        ("GET", ["namespaces", ns, "resourceclaims", name]) => {
            if let Identity::Node(me) = who {
                if !claim_referenced_by_pod_of(store, me, ns, name) {
                    return Some(status(
                        403,
                        "Forbidden",
                        &format!(
                            "resourceclaims.resource.k8s.io \"{name}\" is forbidden: User \"system:node:{me}\" cannot get resource \"resourceclaims\" in API group \"resource.k8s.io\" in the namespace \"{ns}\": no relationship found between node '{me}' and this object"
                        ),
                    ));
                }
            }
            Some(match store.get("resourceclaims", &format!("{ns}/{name}")) {
                Some(c) => (200, c.to_json()),
                None => status(
                    404,
                    "NotFound",
                    &format!("resourceclaims.resource.k8s.io \"{name}\" not found"),
                ),
            })
        }
        // A node may not list claims: the authorizer has no selector for it.
        ("GET", ["resourceclaims"] | ["namespaces", _, "resourceclaims"])
            if matches!(who, Identity::Node(_)) =>
        {
            Some(status(
                403,
                "Forbidden",
                "resourceclaims.resource.k8s.io is forbidden: a node may not list resourceclaims",
            ))
        }
        ("GET", ["resourceslices"]) => None,
        _ => Some(no_such_resource()),
    }
}
