//! Leases (`coordination.k8s.io/v1`): create, get, update with
//! resourceVersion conflicts, server-side apply with field-ownership
//! conflicts, and merge patches.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use serde_json::{json, Value};

use crate::kinds::{decode_refused, encode, patch_refused};
use crate::state::TestApiServer;
use crate::status::{status, Answer};
use crate::store::Store;

#[derive(Default)]
pub struct LeaseState {
    /// Leases by `ns/name`.
    pub leases: BTreeMap<String, Lease>,
    /// Server-side apply's ownership of Lease `spec` fields: (lease, field) → field manager.
    pub owners: BTreeMap<(String, String), String>,
}

/// The `spec` fields of a Lease, as JSON (ownership is per JSON field, as
/// managedFields' fieldsV1 records it).
fn spec_fields(lease: &Value) -> Vec<(String, Value)> {
    lease["spec"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn not_found(name: &str) -> Answer {
    status(
        404,
        "NotFound",
        &format!("leases.coordination.k8s.io \"{name}\" not found"),
    )
}

/// A request under `/apis/coordination.k8s.io/v1/namespaces/<ns>/leases`.
#[allow(clippy::too_many_arguments)]
pub fn request(
    store: &mut Store,
    st: &mut LeaseState,
    method: &str,
    ns: &str,
    rest: &[&str],
    content_type: &str,
    body: &Value,
    manager: Option<String>,
    force: bool,
) -> Answer {
    let manager = manager.unwrap_or_else(|| "unknown".into());
    match (method, rest) {
        ("POST", []) => {
            let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
            let key = format!("{ns}/{name}");
            if st.leases.contains_key(&key) {
                return status(
                    409,
                    "AlreadyExists",
                    &format!("leases.coordination.k8s.io \"{name}\" already exists"),
                );
            }
            let mut lease: Lease = match serde_json::from_value(body.clone()) {
                Ok(l) => l,
                Err(e) => return decode_refused(&e.to_string()),
            };
            lease.metadata.namespace = Some(ns.into());
            lease.metadata.resource_version = Some(store.next_rv());
            for (field, _) in spec_fields(body) {
                st.owners.insert((key.clone(), field), manager.clone());
            }
            let out = encode(&lease);
            st.leases.insert(key, lease);
            (201, out)
        }
        ("GET", [name]) => match st.leases.get(&format!("{ns}/{name}")) {
            Some(l) => (200, encode(l)),
            None => not_found(name),
        },
        ("PUT", [name]) => {
            let key = format!("{ns}/{name}");
            let Some(current) = st.leases.get(&key).cloned() else {
                return not_found(name);
            };
            let mut lease: Lease = match serde_json::from_value(body.clone()) {
                Ok(l) => l,
                Err(e) => return decode_refused(&e.to_string()),
            };
            if lease.metadata.resource_version != current.metadata.resource_version {
                return status(409, "Conflict", &format!("Operation cannot be fulfilled on leases.coordination.k8s.io \"{name}\": the object has been modified; please apply your changes to the latest version and try again"));
            }
            let live = encode(&current);
            for (field, v) in spec_fields(&encode(&lease)) {
                if live["spec"][&field] != v {
                    st.owners.insert((key.clone(), field), manager.clone());
                }
            }
            lease.metadata.resource_version = Some(store.next_rv());
            let out = encode(&lease);
            st.leases.insert(key, lease);
            (200, out)
        }
        ("PATCH", [name]) => {
            let key = format!("{ns}/{name}");
            let apply = content_type == "application/apply-patch+yaml";
            let merge = matches!(
                content_type,
                "application/strategic-merge-patch+json" | "application/merge-patch+json"
            );
            if !apply && !merge {
                return status(
                    415,
                    "UnsupportedMediaType",
                    "apply, strategic or merge patch only here",
                );
            }
            let current = st.leases.get(&key).map(encode);
            if merge && current.is_none() {
                return not_found(name);
            }
            let mut lease = current.clone().unwrap_or_else(|| {
                json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": name, "namespace": ns}, "spec": {}})
            });
            if lease.get("spec").is_none_or(Value::is_null) {
                lease["spec"] = json!({});
            }
            if apply {
                // Server-side apply: a field this manager sets to another
                // value than the live one, while another manager owns it,
                // is a conflict unless forced (fieldmanager's
                // ConflictError: 409, reason Conflict).
                let conflicts: Vec<String> = spec_fields(body)
                    .into_iter()
                    .filter(|(f, v)| {
                        let live = &lease["spec"][f];
                        !live.is_null()
                            && live != v
                            && st
                                .owners
                                .get(&(key.clone(), f.clone()))
                                .is_some_and(|o| *o != manager)
                    })
                    .map(|(f, _)| {
                        let owner = &st.owners[&(key.clone(), f.clone())];
                        format!("conflict with \"{owner}\": .spec.{f}")
                    })
                    .collect();
                if !conflicts.is_empty() && !force {
                    return status(
                        409,
                        "Conflict",
                        &format!(
                            "Apply failed with {} conflict(s): {}",
                            conflicts.len(),
                            conflicts.join(", ")
                        ),
                    );
                }
            }
            let mut owners = Vec::new();
            for (field, v) in spec_fields(body) {
                if v.is_null() {
                    lease["spec"].as_object_mut().map(|o| o.remove(&field));
                    owners.push((field, None));
                } else {
                    lease["spec"][&field] = v;
                    owners.push((field, Some(manager.clone())));
                }
            }
            let mut typed: Lease = match serde_json::from_value(lease) {
                Ok(l) => l,
                Err(e) => return patch_refused(body, &e.to_string()),
            };
            for (field, owner) in owners {
                match owner {
                    Some(m) => st.owners.insert((key.clone(), field), m),
                    None => st.owners.remove(&(key.clone(), field)),
                };
            }
            typed.metadata.resource_version = Some(store.next_rv());
            let out = encode(&typed);
            st.leases.insert(key, typed);
            (if current.is_some() { 200 } else { 201 }, out)
        }
        _ => status(405, "MethodNotAllowed", "not served for leases here"),
    }
}

impl TestApiServer {
    pub fn lease(&self, ns: &str, name: &str) -> Option<Value> {
        self.with(|s| {
            s.part::<LeaseState>()
                .leases
                .get(&format!("{ns}/{name}"))
                .map(encode)
        })
    }
}
