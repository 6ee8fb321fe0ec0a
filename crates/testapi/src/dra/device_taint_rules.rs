//! DRA device taints.
//!
//! `resource.k8s.io` DeviceTaintRules, cluster-scoped, served only in the
//! versions set with `serve_device_taint_rules` (none by default: as on
//! kube-apiserver without the DRADeviceTaints/DRADeviceTaintRules feature
//! gates, or with resource.k8s.io/v1beta2 off, whose paths answer 404).
//! List and watch go through the generic paths (stored in `objects` under
//! "devicetaintrules"); create, get and delete are here, as upstream's
//! registry and validation have them:
//! - pkg/registry/resource/devicetaintrule/strategy.go: PrepareForCreate sets
//!   `metadata.generation` 1 and drops any status; the taint's `timeAdded` is
//!   set on create when absent (KEP-5055: "Added automatically during create
//!   or update if not set");
//! - pkg/apis/resource/validation/validation.go, ValidateDeviceTaintRule, on
//!   the decoded rule (a body that does not decode is 400 first): the
//!   name a DNS subdomain (NameIsDNSSubdomain), the selector's device a DNS
//!   label, the taint's key a label name (required), its value a label value,
//!   its effect required and one of None, NoSchedule, NoExecute: 422 Invalid;
//! - the generic registry: a name that exists is 409 AlreadyExists, a delete
//!   whose `preconditions.uid` is not the object's 409 Conflict, a missing one
//!   404 NotFound. A node may not write them (no Node-authorizer rule for it).

use axum::http::Method;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;

use super::DraState;
use crate::auth::Identity;
use crate::kinds::{decode_refused, DeviceTaintRule, Object};
use crate::state::TestApiServer;
use crate::status::{invalid, no_such_resource, status, Answer};
use crate::store::Store;
use crate::validation::{is_dns_label, is_dns_subdomain, is_label_name, is_label_value};

impl TestApiServer {
    /// Serve DeviceTaintRules in these `resource.k8s.io` versions (e.g. `&["v1beta2"]`).
    pub fn serve_device_taint_rules(&self, versions: &[&'static str]) {
        self.with(|s| s.part::<DraState>().device_taint_versions = versions.to_vec());
    }

    /// The DeviceTaintRules stored, by name.
    pub fn device_taint_rules(&self) -> Vec<Value> {
        self.with(|s| {
            s.store
                .all("devicetaintrules")
                .map(|(_, o)| o.to_json())
                .collect()
        })
    }
}

/// `devicetaintrules` under `apis/resource.k8s.io/<version>`, if that is the path.
pub fn device_taint_path<'a>(parts: &'a [&'a str]) -> Option<(&'a str, &'a [&'a str])> {
    match parts {
        ["apis", "resource.k8s.io", version, rest @ ..]
            if rest.first() == Some(&"devicetaintrules") =>
        {
            Some((version, rest))
        }
        _ => None,
    }
}

/// The 404 of a version that does not serve DeviceTaintRules (list, watch
/// or any other request on that path).
pub fn not_served(dra: &DraState, path: &str) -> Option<Answer> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (version, _) = device_taint_path(&parts)?;
    (!dra.device_taint_versions.contains(&version)).then(no_such_resource)
}

/// ValidateDeviceTaintRule (pkg/apis/resource/validation/validation.go) on
/// the decoded rule, as kube-apiserver validates the typed object after
/// decoding it: the name a DNS subdomain, the selector's device a DNS
/// label and driver a DNS subdomain of at most 63 characters, the taint's
/// key a qualified name (required), its value a label value, its effect
/// required and one of None, NoSchedule, NoExecute.
pub fn validate_device_taint_rule(rule: &DeviceTaintRule) -> Vec<String> {
    let mut errs = Vec::new();
    let name = rule.metadata.name.as_deref().unwrap_or("");
    if name.is_empty() {
        errs.push("metadata.name: Required value: name or generateName is required".into());
    } else if !is_dns_subdomain(name) {
        errs.push(format!(
            "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        ));
    }
    let sel = rule.spec.device_selector.as_ref();
    if let Some(device) = sel.and_then(|s| s.device.as_deref()) {
        if !is_dns_label(device) {
            errs.push(format!(
                "spec.deviceSelector.device: Invalid value: \"{device}\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"
            ));
        }
    }
    if let Some(driver) = sel.and_then(|s| s.driver.as_deref()) {
        if driver.len() > 63 || !is_dns_subdomain(driver) {
            errs.push(format!(
                "spec.deviceSelector.driver: Invalid value: \"{driver}\": must be a DNS subdomain of at most 63 characters"
            ));
        }
    }
    let taint = &rule.spec.taint;
    match taint.key.as_str() {
        "" => errs.push("spec.taint.key: Required value: name part must be non-empty".into()),
        k if !is_label_name(k) => errs.push(format!(
            "spec.taint.key: Invalid value: \"{k}\": must be a qualified name"
        )),
        _ => {}
    }
    if let Some(v) = taint.value.as_deref() {
        if !is_label_value(v) {
            errs.push(format!(
                "spec.taint.value: Invalid value: \"{v}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
            ));
        }
    }
    match taint.effect.as_str() {
        "" => errs.push("spec.taint.effect: Required value".into()),
        "None" | "NoSchedule" | "NoExecute" => {}
        e => errs.push(format!(
            "spec.taint.effect: Unsupported value: \"{e}\": supported values: \"NoExecute\", \"NoSchedule\", \"None\""
        )),
    }
    errs
}

pub fn route(
    dra: &DraState,
    store: &mut Store,
    who: &Identity,
    method: &Method,
    parts: &[&str],
    body: &Value,
) -> Option<Answer> {
    let (version, rest) = device_taint_path(parts)?;
    if !dra.device_taint_versions.contains(&version) {
        return Some(no_such_resource());
    }
    if let (Identity::Node(me), false) = (who, method == Method::GET) {
        return Some(status(
            403,
            "Forbidden",
            &format!("devicetaintrules.resource.k8s.io is forbidden: User \"system:node:{me}\" cannot {} resource \"devicetaintrules\" in API group \"resource.k8s.io\" at the cluster scope", method.as_str().to_lowercase()),
        ));
    }
    match (method.as_str(), rest) {
        // Lists and watches: the generic paths.
        ("GET", ["devicetaintrules"]) => None,
        ("GET", ["devicetaintrules", name]) => Some(match store.get("devicetaintrules", name) {
            Some(o) => (200, o.to_json()),
            None => status(
                404,
                "NotFound",
                &format!("devicetaintrules.resource.k8s.io \"{name}\" not found"),
            ),
        }),
        ("POST", ["devicetaintrules"]) => Some(create(store, version, body)),
        ("DELETE", ["devicetaintrules", name]) => Some(delete(store, name, body)),
        _ => Some(status(
            405,
            "MethodNotAllowed",
            "not served for devicetaintrules here",
        )),
    }
}

/// Create, in kube-apiserver's order: decoded (400 when it does not
/// decode), validated as the typed rule (422), then stored unless the name
/// exists (409); as PrepareForCreate leaves it: uid, generation 1, no
/// status, the taint's `timeAdded` set when absent.
fn create(store: &mut Store, version: &str, body: &Value) -> Answer {
    let mut rule: DeviceTaintRule = match serde_json::from_value(body.clone()) {
        Ok(r) => r,
        Err(e) => return decode_refused(&e.to_string()),
    };
    let name = rule.metadata.name.clone().unwrap_or_default();
    let errs = validate_device_taint_rule(&rule);
    if !errs.is_empty() {
        return invalid(
            "DeviceTaintRule.resource.k8s.io",
            &name,
            &format!("[{}]", errs.join(", ")),
        );
    }
    if store.get("devicetaintrules", &name).is_some() {
        return status(
            409,
            "AlreadyExists",
            &format!("devicetaintrules.resource.k8s.io \"{name}\" already exists"),
        );
    }
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    rule.api_version = format!("resource.k8s.io/{version}");
    rule.kind = "DeviceTaintRule".into();
    rule.metadata.uid = Some(format!("uid-dtr-{}", store.rv + 1));
    rule.metadata.generation = Some(1);
    rule.metadata.creation_timestamp = Some(now.clone());
    rule.spec.taint.time_added.get_or_insert(now);
    let stored = store.write("devicetaintrules", Object::DeviceTaintRule(Box::new(rule)));
    (201, stored.to_json())
}

/// Delete, with `preconditions.uid` (409 when it is not the object's).
fn delete(store: &mut Store, name: &str, body: &Value) -> Answer {
    let Some(current) = store.get("devicetaintrules", name) else {
        return status(
            404,
            "NotFound",
            &format!("devicetaintrules.resource.k8s.io \"{name}\" not found"),
        );
    };
    let uid = current.metadata().uid.clone().unwrap_or_default();
    if let Some(want) = body["preconditions"]["uid"].as_str() {
        if uid != want {
            return status(
                409,
                "Conflict",
                &format!(
                    "Operation cannot be fulfilled on devicetaintrules.resource.k8s.io \"{name}\": Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"
                ),
            );
        }
    }
    let gone = store
        .remove("devicetaintrules", name)
        .expect("the rule is there");
    (200, gone.to_json())
}
