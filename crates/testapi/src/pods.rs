//! Pods: GET (Node authorizer), JSON patch of the pod under the update
//! rules that matter to scheduling gates (KEP-3838), strategic merge of
//! `pods/status`, and creation as admission leaves a pod.

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use serde_json::{json, Value};

use crate::admission;
use crate::auth::{self, Identity};
use crate::kinds::{decode_own, encode, patch_refused, Object};
use crate::merge::{json_patch, merge_by_type};
use crate::state::TestApiServer;
use crate::status::{invalid, status, Answer};
use crate::store::Store;

/// When each pod (`ns/name`) lost its last scheduling gate: from then on
/// the scheduler considers it.
#[derive(Default)]
pub struct PodState {
    pub schedulable_at: BTreeMap<String, Instant>,
}

/// `GET /api/v1/namespaces/<ns>/pods/<name>`.
pub fn get(store: &Store, who: &Identity, ns: &str, name: &str) -> Answer {
    match store.pod(&format!("{ns}/{name}")) {
        Some(p) => {
            let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
            if let Some(refused) = auth::node_may_get_pod(who, node, name) {
                return refused;
            }
            (200, encode(p))
        }
        None => status(404, "NotFound", &format!("pods \"{name}\" not found")),
    }
}

/// A JSON patch of a pod, as kube-apiserver applies one: the RFC 6902 ops
/// on the stored object (a failed `test`, or a path that is not there:
/// 422), the result decoded as a Pod (422 on the field `patch`), then pod
/// update validation: metadata identity immutable, the spec unchanged but
/// for the gates and, while gated, additions to the placement
/// ([`admission::placement_mutation`]), gates only removed; a
/// `metadata.resourceVersion` the patch changed is a 409.
pub fn patch(
    store: &mut Store,
    pods: &mut PodState,
    who: &Identity,
    ns: &str,
    name: &str,
    content_type: &str,
    body: &Value,
) -> Answer {
    if who.node().is_some() {
        return status(
            403,
            "Forbidden",
            "a node may patch only the status of its pods",
        );
    }
    if content_type != "application/json-patch+json" {
        return status(
            415,
            "UnsupportedMediaType",
            "only JSON patch is served for pods here",
        );
    }
    let key = format!("{ns}/{name}");
    let Some(before) = store.pod(&key).cloned() else {
        return status(404, "NotFound", &format!("pods \"{name}\" not found"));
    };
    let mut json = encode(&before);
    if let Err(refused) = json_patch(&mut json, body) {
        return refused;
    }
    let after: Pod = match serde_json::from_value(json) {
        Ok(p) => p,
        Err(e) => return patch_refused(body, &e.to_string()),
    };
    let (b, a) = (&before.metadata, &after.metadata);
    for (field, same) in [
        ("name", b.name == a.name),
        ("namespace", b.namespace == a.namespace),
        ("uid", b.uid == a.uid),
    ] {
        if !same {
            return invalid(
                "Pod",
                name,
                &format!("metadata.{field}: Invalid value: field is immutable"),
            );
        }
    }
    if let Some(refused) = admission::placement_mutation(&before, &after, name) {
        return refused;
    }
    if let Some(refused) = admission::gates_only_removed(&before, &after, name) {
        return refused;
    }
    if a.resource_version != b.resource_version {
        return status(409, "Conflict", &format!("Operation cannot be fulfilled on pods \"{name}\": the object has been modified; please apply your changes to the latest version and try again"));
    }
    if !admission::gate_names(&before).is_empty() && admission::gate_names(&after).is_empty() {
        pods.schedulable_at.insert(key, Instant::now());
    }
    (
        200,
        store.write("pods", Object::Pod(Box::new(after))).to_json(),
    )
}

/// `PATCH pods/<name>/status` (strategic or merge patch; the status
/// subresource ignores everything but `status.conditions` here, which
/// merge by `type` as the pod status's patch strategy says). A node may
/// patch only the status of the pods bound to it (the Node authorizer).
pub fn patch_status(
    store: &mut Store,
    who: &Identity,
    ns: &str,
    name: &str,
    content_type: &str,
    body: &Value,
) -> Answer {
    if content_type != "application/strategic-merge-patch+json"
        && content_type != "application/merge-patch+json"
    {
        return status(
            415,
            "UnsupportedMediaType",
            "strategic or merge patch only here",
        );
    }
    let key = format!("{ns}/{name}");
    let Some(before) = store.pod(&key).cloned() else {
        return status(404, "NotFound", &format!("pods \"{name}\" not found"));
    };
    if let Identity::Node(me) = who {
        let bound = before.spec.as_ref().and_then(|s| s.node_name.as_deref());
        if bound != Some(me.as_str()) {
            return status(
                403,
                "Forbidden",
                &format!("pods \"{name}\" is forbidden: node \"{me}\" can only update pod status for pods with its spec.nodeName"),
            );
        }
    }
    let mut json = encode(&before);
    if let Some(conditions) = body["status"]["conditions"].as_array() {
        for c in conditions {
            if c["type"].as_str().is_none_or(|t| t.is_empty()) {
                return invalid("Pod", name, "status.conditions.type: Required value");
            }
            let list = json["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            json["status"]["conditions"] = json!(merge_by_type(list, &json!([c])));
        }
    }
    let after: Pod = match serde_json::from_value(json) {
        Ok(p) => p,
        Err(e) => return patch_refused(body, &e.to_string()),
    };
    (
        200,
        store.write("pods", Object::Pod(Box::new(after))).to_json(),
    )
}

/// Sets (or replaces) a pod condition by type.
pub fn set_condition(pod: &mut Pod, condition: PodCondition) {
    let list = pod
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new);
    match list.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(c) => {
            c.status = condition.status;
            if condition.reason.is_some() {
                c.reason = condition.reason;
            }
        }
        None => list.push(condition),
    }
}

/// Creates a pod as kube-apiserver's admission leaves it: the RuntimeClass
/// plugin merges the class's `scheduling` in (a conflict panics: a test's
/// mistake), and a gated pod carries `PodScheduled=False` reason
/// `SchedulingGated` (as the scheduler's SchedulingGates plugin reports it).
pub fn create(store: &mut Store, pod: Value) {
    let mut pod: Pod = decode_own("a Pod", pod);
    let class = pod.spec.as_ref().and_then(|s| s.runtime_class_name.clone());
    if let Some(Object::RuntimeClass(rc)) = class.and_then(|c| store.get("runtimeclasses", &c)) {
        if let Err(e) = admission::runtime_class_scheduling(&mut pod, rc) {
            panic!("{e}");
        }
    }
    if !admission::gate_names(&pod).is_empty() {
        pod.status.get_or_insert_with(Default::default).conditions = Some(vec![PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("SchedulingGated".into()),
            ..Default::default()
        }]);
    }
    store.write("pods", Object::Pod(Box::new(pod)));
}

impl TestApiServer {
    /// The pod `ns/name` as stored.
    pub fn pod(&self, key: &str) -> Option<Value> {
        self.with(|s| s.store.pod(key).map(encode))
    }

    /// When the pod's last scheduling gate was removed: from then on the
    /// scheduler considers it (`None`: still gated, or never was).
    pub fn schedulable_at(&self, key: &str) -> Option<Instant> {
        self.with(|s| s.part::<PodState>().schedulable_at.get(key).copied())
    }

    /// Creates a pod as kube-apiserver's admission leaves it (see [`create`]).
    pub fn create_pod(&self, pod: Value) {
        self.with(|s| create(&mut s.store, pod));
    }
}
