//! Nodes: GET, and PATCH of the object and of `nodes/status` (strategic
//! merge; status conditions merge by type), under the Node authorizer and
//! NodeRestriction; and the test's own writes (another client's).

use k8s_openapi::api::core::v1::Node;
use serde_json::{json, Value};

use crate::admission;
use crate::auth::{self, Identity};
use crate::faults::{self, Fault};
use crate::kinds::{decode_own, encode, patch_refused, Object};
use crate::merge::{merge_json, merge_status};
use crate::state::TestApiServer;
use crate::status::{status, Answer};
use crate::store::Store;

/// Stores a Node (a test's registration) under a new resourceVersion.
pub fn put(store: &mut Store, node: Value) -> Node {
    let node: Node = decode_own("a Node", node);
    match store.write("nodes", Object::Node(Box::new(node))) {
        Object::Node(n) => *n,
        _ => unreachable!(),
    }
}

/// A Node as the kubelet registers it: the conditions given, no labels.
pub fn registered(name: &str, uid: &str, conditions: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": uid, "labels": {}},
        "spec": {},
        "status": {"conditions": conditions},
    })
}

/// The stored Node as JSON.
pub fn get_json(store: &Store, name: &str) -> Option<Value> {
    store.get("nodes", name).map(Object::to_json)
}

/// `GET /api/v1/nodes/<name>[/status]`.
pub fn get(store: &Store, who: &Identity, name: &str, status_subresource: bool) -> Answer {
    if let Some(refused) = auth::node_may_get_node(who, name, status_subresource) {
        return refused;
    }
    match store.get("nodes", name) {
        Some(n) => (200, n.to_json()),
        None => status(404, "NotFound", &format!("nodes \"{name}\" not found")),
    }
}

/// `PATCH /api/v1/nodes/<name>[/status]`: strategic merge or JSON merge
/// patch (a node patches its status either way:
/// shared/notes/kube-apiserver-1.36.md). A stale
/// `metadata.resourceVersion` in the patch is a 409 (the registry's
/// optimistic concurrency, staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go
/// `Update`); a node may not change its taints or a label NodeRestriction
/// forbids; the result must decode as a Node (422). A patch of the object
/// leaves the status as it was, one of `nodes/status` the rest
/// (pkg/registry/core/node/strategy.go: `nodeStrategy.PrepareForUpdate`
/// keeps the old status, `nodeStatusStrategy.PrepareForUpdate` the old
/// spec).
pub fn patch(
    store: &mut Store,
    fault: &mut Option<Fault>,
    who: &Identity,
    name: &str,
    subresource: Option<&str>,
    content_type: &str,
    body: &Value,
) -> Answer {
    if let Some(refused) = auth::node_may_modify_node(who, name) {
        return refused;
    }
    let strategic = match content_type {
        "application/strategic-merge-patch+json" => true,
        "application/merge-patch+json" => false,
        _ => {
            return status(
                415,
                "UnsupportedMediaType",
                "strategic merge or merge patch only here",
            )
        }
    };
    let Some(before) = store.node(name).cloned() else {
        return status(404, "NotFound", &format!("nodes \"{name}\" not found"));
    };
    if let Some(rv) = body["metadata"]["resourceVersion"].as_str() {
        if before.metadata.resource_version.as_deref() != Some(rv) {
            return status(409, "Conflict", "the object has been modified");
        }
    }
    if faults::take_conflict(fault) {
        return status(409, "Conflict", "the object has been modified");
    }
    let mut node = encode(&before);
    match (subresource, strategic) {
        (Some("status"), true) => merge_status(&mut node, body),
        (Some("status"), false) => {
            if let Some(status_patch) = body.get("status") {
                merge_json(&mut node["status"], status_patch);
            }
        }
        (None, _) => merge_json(&mut node, body),
        (Some(_), _) => return status(404, "NotFound", "no such subresource"),
    }
    let mut after: Node = match serde_json::from_value(node) {
        Ok(n) => n,
        Err(e) => return patch_refused(body, &e.to_string()),
    };
    if subresource.is_none() {
        after.status = before.status.clone();
    }
    if subresource.is_none() && who.node().is_some() {
        // NodeRestriction compares the taints before and after
        // (`apiequality.Semantic.DeepEqual`): a patch that restates them passes.
        let taints = |n: &Node| {
            n.spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default()
        };
        if taints(&before) != taints(&after) {
            return status(403, "Forbidden", "node is not allowed to modify taints");
        }
        if let Some(refused) = admission::node_labels(
            before.metadata.labels.as_ref(),
            after.metadata.labels.as_ref(),
        ) {
            return refused;
        }
    }
    (
        200,
        store
            .write("nodes", Object::Node(Box::new(after)))
            .to_json(),
    )
}

/// Someone else's merge patch of a Node (a taint, a label, a status).
pub fn merge(store: &mut Store, name: &str, patch: &Value) {
    let mut node = get_json(store, name).unwrap_or_else(|| panic!("no Node {name}"));
    merge_json(&mut node, patch);
    put(store, node);
}

/// Another client (kubectl edit, a controller) removes a condition.
pub fn remove_condition(store: &mut Store, name: &str, kind: &str) {
    let mut node = store
        .node(name)
        .cloned()
        .unwrap_or_else(|| panic!("no Node {name}"));
    if let Some(list) = node.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        list.retain(|c| c.type_ != kind);
    }
    store.write("nodes", Object::Node(Box::new(node)));
}

impl TestApiServer {
    /// Register a Node, with the kubelet's own conditions on it.
    pub fn add_node(&self, name: &str, conditions: Value) {
        let node = registered(name, &format!("uid-{name}"), conditions);
        self.with(|s| put(&mut s.store, node));
    }

    /// Someone else's taint (or label, or status) on a Node; its new resourceVersion.
    pub fn merge_node(&self, name: &str, patch: Value) -> u64 {
        self.with(|s| {
            merge(&mut s.store, name, &patch);
            s.store.rv
        })
    }

    pub fn node(&self, name: &str) -> Value {
        self.with(|s| get_json(&s.store, name))
            .unwrap_or_else(|| panic!("no Node {name}"))
    }

    /// The Node's condition of `kind`, if any.
    pub fn condition(&self, node: &str, kind: &str) -> Option<Value> {
        self.with(|s| {
            let n = s.store.node(node)?;
            let c = n
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == kind)?;
            Some(encode(c))
        })
    }

    /// Whether a Node of that name is stored.
    pub fn has_node(&self, name: &str) -> bool {
        self.with(|s| s.store.node(name).is_some())
    }

    pub fn delete_node(&self, name: &str) {
        self.with(|s| s.store.remove("nodes", name));
    }

    /// Registers `name` again under `uid`, with the kubelet's Ready only
    /// (the kubelet re-registers a deleted Node with a new UID).
    pub fn register_node_again(&self, name: &str, uid: &str) {
        let conditions = json!([{"type": "Ready", "status": "True", "reason": "KubeletReady"}]);
        let node = registered(name, uid, conditions);
        self.with(|s| put(&mut s.store, node));
    }

    /// Another client (kubectl edit, a controller) removes a condition.
    pub fn remove_condition(&self, name: &str, kind: &str) {
        self.with(|s| remove_condition(&mut s.store, name, kind));
    }
}
