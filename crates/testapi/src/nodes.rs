//! Nodes: create (POST, with TaintNodesByCondition's not-ready taint), GET,
//! and PATCH of the object and of `nodes/status` (strategic merge, status
//! conditions merging by type, or JSON merge patch), under the Node
//! authorizer and NodeRestriction; the test's own writes (another
//! client's); and what the node lifecycle controller does once a node is
//! Ready ([`TestApiServer::mark_node_ready`]).

use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{json, Value};

use crate::admission;
use crate::auth::{self, Identity};
use crate::faults::{self, Fault};
use crate::kinds::{decode_own, decode_refused, encode, patch_refused, Object};
use crate::merge::{merge_json, merge_status};
use crate::state::TestApiServer;
use crate::status::{invalid, status, Answer};
use crate::store::Store;
use crate::validation::is_dns_subdomain;

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

/// `POST /api/v1/nodes`, in kube-apiserver's order: authorization (the
/// Node authorizer lets a node create Nodes, leaving to NodeRestriction
/// which: plugin/pkg/auth/authorizer/node/node_authorizer.go,
/// `authorizeNode`; no ServiceAccount here is granted it), decoding (400),
/// then [`admit_and_store`].
pub fn create(store: &mut Store, who: &Identity, body: &Value) -> Answer {
    if let Some(refused) = auth::may_create_node(who) {
        return refused;
    }
    let node: Node = match decode_node(body) {
        Ok(n) => n,
        Err(refused) => return refused,
    };
    admit_and_store(store, who.node(), node)
}

/// A create's body as a Node: 400 when it is another kind or does not
/// decode (k8s.io/apiserver/pkg/endpoints/handlers/create.go, the decoder's
/// error through `transformDecodeError`).
fn decode_node(body: &Value) -> Result<Node, Answer> {
    let kind = body["kind"].as_str().unwrap_or("Node");
    let version = body["apiVersion"].as_str().unwrap_or("v1");
    if kind != "Node" || version != "v1" {
        return Err(decode_refused(&format!(
            "{kind} in version \"{version}\" cannot be handled as a Node: the object provided is unrecognized (must be of type Node)"
        )));
    }
    serde_json::from_value(body.clone()).map_err(|e| {
        decode_refused(&format!(
            "Node in version \"v1\" cannot be handled as a Node: {e}"
        ))
    })
}

/// A decoded Node through admission and the registry's create, `by_node`
/// the node identity that asked (none: a cluster admin):
/// - NodeRestriction ([`admission::node_create`]), for a node identity;
/// - TaintNodesByCondition ([`admission::taint_at_creation`]);
/// - pkg/registry/core/node/strategy.go `PrepareForCreate`
///   (`dropDisabledFields`: no `spec.configSource`, no `status.config`;
///   the rest of the status is kept, as the kubelet registers with it), and
///   the registry's uid and creationTimestamp
///   (staging/src/k8s.io/apiserver/pkg/registry/rest/create.go `BeforeCreate`);
/// - `ValidateNode` (pkg/apis/core/validation/validation.go): a name,
///   a DNS subdomain (`ValidateNodeName`), 422;
/// - the store: a name that exists is 409 AlreadyExists.
///
/// 201 with the Node as stored.
pub fn admit_and_store(store: &mut Store, by_node: Option<&str>, mut node: Node) -> Answer {
    let name = node.metadata.name.clone().unwrap_or_default();
    if let Some(me) = by_node {
        if let Some(refused) = admission::node_create(me, &node) {
            return refused;
        }
    }
    admission::taint_at_creation(&mut node);
    if let Some(spec) = node.spec.as_mut() {
        spec.config_source = None;
    }
    if let Some(st) = node.status.as_mut() {
        st.config = None;
    }
    if name.is_empty() {
        return invalid(
            "Node",
            "",
            "metadata.name: Required value: name or generateName is required",
        );
    }
    if !is_dns_subdomain(&name) {
        return invalid(
            "Node",
            &name,
            &format!("metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"),
        );
    }
    if store.node(&name).is_some() {
        return status(
            409,
            "AlreadyExists",
            &format!("nodes \"{name}\" already exists"),
        );
    }
    node.metadata.uid = Some(format!("uid-{name}-{}", store.rv + 1));
    node.metadata.creation_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    node.metadata.resource_version = None;
    (
        201,
        store.write("nodes", Object::Node(Box::new(node))).to_json(),
    )
}

/// The taints the node lifecycle controller keeps in step with the Ready
/// condition: `not-ready` for Ready=False, `unreachable` for Unknown, each
/// as NoSchedule (`doNoScheduleTaintingPass`, `nodeConditionToTaintKeyStatusMap`)
/// and NoExecute (`doNoExecuteTaintingPass` / `markNodeAsReachable`), in
/// pkg/controller/nodelifecycle/node_lifecycle_controller.go.
pub const READY_TAINT_KEYS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

/// What a Ready node comes to, in two writes by two clients: the kubelet's
/// status update sets `Ready=True` (reason `KubeletReady`, as
/// pkg/kubelet/nodestatus/setters.go `ReadyCondition` does), then the node
/// lifecycle controller lifts the taints of [`READY_TAINT_KEYS`] (the
/// second write only when there was one to lift).
pub fn mark_ready(store: &mut Store, name: &str) {
    let mut node = store
        .node(name)
        .cloned()
        .unwrap_or_else(|| panic!("no Node {name}"));
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let conditions = node
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new);
    let ready = NodeCondition {
        type_: "Ready".into(),
        status: "True".into(),
        reason: Some("KubeletReady".into()),
        message: Some("kubelet is posting ready status".into()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now),
    };
    match conditions.iter_mut().find(|c| c.type_ == "Ready") {
        Some(c) if c.status == "True" => {
            c.last_heartbeat_time = ready.last_heartbeat_time;
        }
        Some(c) => *c = ready,
        None => conditions.push(ready),
    }
    store.write("nodes", Object::Node(Box::new(node.clone())));
    let Some(taints) = node.spec.as_mut().and_then(|s| s.taints.as_mut()) else {
        return;
    };
    let before = taints.len();
    taints.retain(|t| !READY_TAINT_KEYS.contains(&t.key.as_str()));
    if taints.len() != before {
        store.write("nodes", Object::Node(Box::new(node)));
    }
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
    /// Creates a Node as a cluster admin's `POST /api/v1/nodes` leaves it
    /// (see [`admit_and_store`]): with `node.kubernetes.io/not-ready:NoSchedule`
    /// added by TaintNodesByCondition, until [`Self::mark_node_ready`].
    /// Panics when kube-apiserver would refuse it (a test's mistake).
    pub fn create_node(&self, node: Value) -> Value {
        let node: Node = decode_own("a Node", node);
        let (code, out) = self.with(|s| admit_and_store(&mut s.store, None, node));
        assert_eq!(code, 201, "the Node is refused: {out}");
        out
    }

    /// The node turns Ready and the node lifecycle controller lifts its
    /// not-ready taint (see [`mark_ready`]).
    pub fn mark_node_ready(&self, name: &str) {
        self.with(|s| mark_ready(&mut s.store, name));
    }

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
