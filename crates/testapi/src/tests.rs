//! The Kubernetes behaviours the server imitates, pinned. Each test cites
//! where upstream defines the behaviour, so the server can be checked
//! against it.

use axum::http::{HeaderMap, Method, Uri};
use serde_json::{json, Value};

use crate::auth::{Authn, Identity, PeerCert};
use crate::dra::DraState;
use crate::kinds::Object;
use crate::pods::PodState;
use crate::state::State;
use crate::status::Answer;
use crate::{merge, nodes, pods, router, watch};

const SMP: &str = "application/strategic-merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";

/// A server state with Nodes n1 and n2, a node token for n1 (`n1`) and a
/// ServiceAccount's (`sa`).
fn state() -> State {
    let mut s = State::default();
    let authn = s.part::<Authn>();
    authn
        .tokens
        .insert("n1".into(), Identity::Node("n1".into()));
    authn
        .tokens
        .insert("sa".into(), Identity::GateControllerServiceAccount);
    for n in ["n1", "n2"] {
        nodes::put(
            &mut s.store,
            nodes::registered(
                n,
                &format!("uid-{n}"),
                json!([{"type": "Ready", "status": "True", "reason": "KubeletReady"}]),
            ),
        );
    }
    s
}

fn call(s: &mut State, token: &str, method: &str, path: &str, ct: &str, body: Value) -> Answer {
    let uri: Uri = path.parse().unwrap();
    let mut headers = HeaderMap::new();
    headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
    let method = Method::from_bytes(method.as_bytes()).unwrap();
    router::route(s, &method, &uri, &headers, &PeerCert::default(), ct, &body)
}

fn pod(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}")},
           "spec": spec})
}

fn put(s: &mut State, resource: &'static str, v: Value) {
    let o = Object::decode(resource, v).unwrap();
    s.store.write(resource, o);
}

fn condition_types(s: &State, node: &str) -> Vec<String> {
    let n = s.store.node(node).unwrap();
    n.status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.type_.clone())
        .collect()
}

/// Strategic merge of `status.conditions` by `type`: an item merges into
/// the condition of its type or is appended; `$patch: delete` removes one
/// (staging/src/k8s.io/apimachinery/pkg/util/strategicpatch/patch.go,
/// `mergeSlice`/`mergeSliceWithSpecialElements`; the merge key `type` is
/// the `patchMergeKey` of NodeStatus.Conditions in
/// staging/src/k8s.io/api/core/v1/types.go).
#[test]
fn strategic_merge_of_conditions_by_type_with_patch_delete() {
    let merged = merge::merge_by_type(
        vec![
            json!({"type": "Ready", "status": "True", "reason": "KubeletReady"}),
            json!({"type": "Old", "status": "True"}),
        ],
        &json!([
            {"type": "Ready", "status": "False"},
            {"type": "Old", "$patch": "delete"},
            {"type": "New", "status": "True"},
        ]),
    );
    assert_eq!(
        merged,
        vec![
            json!({"type": "Ready", "status": "False", "reason": "KubeletReady"}),
            json!({"type": "New", "status": "True"}),
        ]
    );
    // Through the API: a node patches its own status.
    let mut s = state();
    let (code, _) = call(
        &mut s,
        "n1",
        "PATCH",
        "/api/v1/nodes/n1/status",
        SMP,
        json!({"status": {"conditions": [{"type": "SeccompProfilesReady", "status": "True"}]}}),
    );
    assert_eq!(code, 200);
    assert_eq!(condition_types(&s, "n1"), ["Ready", "SeccompProfilesReady"]);
    let (code, _) = call(
        &mut s,
        "n1",
        "PATCH",
        "/api/v1/nodes/n1/status",
        SMP,
        json!({"status": {"conditions": [{"type": "SeccompProfilesReady", "$patch": "delete"}]}}),
    );
    assert_eq!(code, 200);
    assert_eq!(condition_types(&s, "n1"), ["Ready"]);
}

/// Pages of one list are cut from the snapshot the first page was read at
/// (the continue token carries its revision), so writes between pages do
/// not show; a continue token older than the compacted revision is 410
/// Gone with reason Expired
/// (staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go `GetList`,
/// staging/src/k8s.io/apiserver/pkg/storage/continue.go; the message is
/// staging/src/k8s.io/apiserver/pkg/storage/etcd3/errors.go's
/// `interpretListError` for ErrCompacted).
#[test]
fn list_pages_come_from_one_snapshot_and_a_compacted_continue_is_gone() {
    let mut s = state();
    for p in ["a", "b", "c"] {
        put(
            &mut s,
            "pods",
            pod(p, json!({"containers": [{"name": "c"}]})),
        );
    }
    let (code, page) = call(&mut s, "sa", "GET", "/api/v1/pods?limit=2", "", Value::Null);
    assert_eq!(code, 200);
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    assert_eq!(page["metadata"]["remainingItemCount"], 1);
    let token = page["metadata"]["continue"].as_str().unwrap().to_string();
    // Written after the first page: not in this list.
    put(
        &mut s,
        "pods",
        pod("d", json!({"containers": [{"name": "c"}]})),
    );
    s.store.remove("pods", "ml/c");
    let (code, rest) = call(
        &mut s,
        "sa",
        "GET",
        &format!("/api/v1/pods?limit=2&continue={token}"),
        "",
        Value::Null,
    );
    assert_eq!(code, 200);
    let names: Vec<&str> = rest["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c"]);
    assert!(rest["metadata"].get("continue").is_none());
    s.store.compacted = s.store.rv;
    let (code, gone) = call(
        &mut s,
        "sa",
        "GET",
        &format!("/api/v1/pods?limit=2&continue={token}"),
        "",
        Value::Null,
    );
    assert_eq!((code, gone["reason"].as_str()), (410, Some("Expired")));
}

/// A watch from resourceVersion V sends every change after V, as its field
/// selector sees it (an object that stops matching is DELETED), and with
/// `allowWatchBookmarks` a BOOKMARK carrying the current version before it
/// ends; a watch from a compacted version gets one ERROR event with a 410
/// Status (staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go,
/// cache_watcher.go; watch_cache.go "too old resource version";
/// bookmarks: KEP-956).
#[tokio::test]
async fn watch_from_a_version_with_bookmarks_and_gone_after_compaction() {
    let mut s = state();
    put(
        &mut s,
        "pods",
        pod(
            "a",
            json!({"nodeName": "n1", "containers": [{"name": "c"}]}),
        ),
    );
    let from = s.store.rv;
    put(
        &mut s,
        "pods",
        pod(
            "b",
            json!({"nodeName": "n1", "containers": [{"name": "c"}]}),
        ),
    );
    put(
        &mut s,
        "pods",
        pod(
            "a",
            json!({"nodeName": "n2", "containers": [{"name": "c"}]}),
        ),
    );
    let lines = watch::events_since(&s.store, "pods", Some("spec.nodeName=n1"), from);
    let seen: Vec<(String, String)> = lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_string(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [("ADDED".into(), "b".into()), ("DELETED".into(), "a".into())]
    );
    let now = s.store.rv;
    let st = std::sync::Arc::new(std::sync::Mutex::new(s));
    let who = Identity::Node("n1".into());
    let body = |uri: &str| {
        let resp = watch::watch(&st, State::store_of, &uri.parse().unwrap(), &who, "pods");
        async move {
            let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .unwrap();
            String::from_utf8(bytes.to_vec()).unwrap()
        }
    };
    let text = body(&format!(
        "/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dn1&resourceVersion={now}&allowWatchBookmarks=true&timeoutSeconds=0"
    ))
    .await;
    let mark: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(mark["type"], "BOOKMARK");
    assert_eq!(
        mark["object"]["metadata"]["resourceVersion"],
        now.to_string()
    );
    st.lock().unwrap().store.compacted = now;
    let text = body(&format!(
        "/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dn1&resourceVersion={from}"
    ))
    .await;
    let err: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(err["type"], "ERROR");
    assert_eq!(err["object"]["code"], 410);
}

/// A write carrying a `metadata.resourceVersion` that is not the stored
/// one is refused with 409 Conflict (optimistic concurrency:
/// staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go
/// `Update`, staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go
/// `GuaranteedUpdate`).
#[test]
fn a_stale_resource_version_is_a_conflict() {
    let mut s = state();
    let stale = s
        .store
        .node("n1")
        .unwrap()
        .metadata
        .resource_version
        .clone()
        .unwrap();
    nodes::merge(
        &mut s.store,
        "n1",
        &json!({"metadata": {"labels": {"x": "y"}}}),
    );
    let (code, v) = call(
        &mut s,
        "n1",
        "PATCH",
        "/api/v1/nodes/n1/status",
        SMP,
        json!({"metadata": {"resourceVersion": stale}, "status": {"conditions": []}}),
    );
    assert_eq!((code, v["reason"].as_str()), (409, Some("Conflict")));
}

/// The Node authorizer: a node reads only its own Node (since 1.32), never
/// `nodes/<n>/status`, modifies only its own Node, lists pods only with
/// `spec.nodeName=<itself>` (AuthorizeNodeWithSelectors), and reads only
/// the pods bound to it
/// (plugin/pkg/auth/authorizer/node/node_authorizer.go; measured on 1.36:
/// shared/notes/kube-apiserver-1.36.md).
#[test]
fn the_node_authorizer_denies_what_is_not_the_nodes() {
    let mut s = state();
    put(
        &mut s,
        "pods",
        pod(
            "theirs",
            json!({"nodeName": "n2", "containers": [{"name": "c"}]}),
        ),
    );
    let asks: [(&str, &str, Value); 6] = [
        ("GET", "/api/v1/nodes/n2", Value::Null),
        ("GET", "/api/v1/nodes/n1/status", Value::Null),
        ("PATCH", "/api/v1/nodes/n2/status", json!({"status": {}})),
        ("GET", "/api/v1/pods", Value::Null),
        (
            "GET",
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dn2",
            Value::Null,
        ),
        ("GET", "/api/v1/namespaces/ml/pods/theirs", Value::Null),
    ];
    for (method, path, body) in asks {
        let (code, _) = call(&mut s, "n1", method, path, SMP, body);
        assert_eq!(code, 403, "{method} {path}");
    }
    for path in [
        "/api/v1/nodes/n1",
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1",
    ] {
        assert_eq!(
            call(&mut s, "n1", "GET", path, "", Value::Null).0,
            200,
            "{path}"
        );
    }
}

/// NodeRestriction: a node may not set or change labels under
/// `node-restriction.kubernetes.io/`, nor `kubernetes.io`/`k8s.io` labels
/// that are not the kubelet's own; other prefixes are the node's
/// (plugin/pkg/admission/noderestriction/admission.go `admitNode`,
/// `getForbiddenLabels`; pkg/kubelet/apis/well_known_labels.go `IsKubeletLabel`).
#[test]
fn node_restriction_refuses_forbidden_labels() {
    let mut s = state();
    for (label, want) in [
        ("node-restriction.kubernetes.io/gpu", 403),
        ("example.k8s.io/role", 403),
        (
            "node.kubernetes.io/exclude-from-external-load-balancers",
            200,
        ),
        ("nodeproof.dev/seccomp", 200),
    ] {
        let (code, _) = call(
            &mut s,
            "n1",
            "PATCH",
            "/api/v1/nodes/n1",
            SMP,
            json!({"metadata": {"labels": {label: "true"}}}),
        );
        assert_eq!(code, want, "{label}");
    }
    // A node may not touch its taints either (an empty list where there
    // were none is no change: apimachinery's forked `reflect.DeepEqual`,
    // under `apiequality.Semantic`, takes nil and empty slices as equal).
    for (taints, want) in [
        (json!([]), 200),
        (json!([{"key": "k", "effect": "NoSchedule"}]), 403),
    ] {
        let (code, _) = call(
            &mut s,
            "n1",
            "PATCH",
            "/api/v1/nodes/n1",
            SMP,
            json!({"spec": {"taints": taints}}),
        );
        assert_eq!(code, want);
    }
}

/// KEP-3838 (mutable scheduling directives of gated pods): while gated,
/// nodeSelector keys may be added but not changed; required node affinity
/// may be set where there was none, narrowed by appending to a term, not
/// widened by a new term; once ungated nothing may change; gates may only
/// be removed (pkg/apis/core/validation/validation.go `ValidatePodUpdate`,
/// `validateNodeSelectorMutation`, `validateNodeAffinityMutation`,
/// `validateSchedulingGates`).
#[test]
fn gated_pods_may_only_narrow_their_placement() {
    let mut s = state();
    pods::create(
        &mut s.store,
        pod(
            "g",
            json!({"schedulingGates": [{"name": "nodeproof.dev/ready"}],
                   "nodeSelector": {"a": "1"}, "containers": [{"name": "c"}]}),
        ),
    );
    let mut patch = |ops: Value| {
        call(
            &mut s,
            "sa",
            "PATCH",
            "/api/v1/namespaces/ml/pods/g",
            JSON_PATCH,
            ops,
        )
        .0
    };
    assert_eq!(
        patch(json!([{"op": "add", "path": "/spec/nodeSelector/b", "value": "2"}])),
        200
    );
    assert_eq!(
        patch(json!([{"op": "replace", "path": "/spec/nodeSelector/a", "value": "9"}])),
        422
    );
    let term = |key: &str| json!({"matchExpressions": [{"key": key, "operator": "Exists"}]});
    let required = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term("x")]}}});
    assert_eq!(
        patch(json!([{"op": "add", "path": "/spec/affinity", "value": required}])),
        200
    );
    let terms = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms";
    assert_eq!(
        patch(json!([{"op": "add", "path": format!("{terms}/-"), "value": term("y")}])),
        422
    );
    assert_eq!(
        patch(
            json!([{"op": "add", "path": format!("{terms}/0/matchExpressions/-"),
                      "value": {"key": "z", "operator": "Exists"}}])
        ),
        200
    );
    assert_eq!(
        patch(json!([{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "new"}}])),
        422
    );
    assert_eq!(
        patch(json!([{"op": "remove", "path": "/spec/schedulingGates"}])),
        200
    );
    assert_eq!(
        patch(json!([{"op": "add", "path": "/spec/nodeSelector/c", "value": "3"}])),
        422
    );
    assert!(s.part::<PodState>().schedulable_at.contains_key("ml/g"));
}

/// A patch whose result does not decode as the kind is 422 Invalid on the
/// field `patch` (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go,
/// `applyPatchToObject`); a create whose body does not decode is 400
/// BadRequest (handlers/create.go via `transformDecodeError`). Nothing is
/// stored either way.
#[test]
fn objects_that_do_not_decode_are_refused() {
    let mut s = state();
    let rv = s.store.rv;
    let (code, v) = call(
        &mut s,
        "n1",
        "PATCH",
        "/api/v1/nodes/n1/status",
        SMP,
        json!({"status": {"conditions": [{"type": "X", "status": 1}]}}),
    );
    assert_eq!((code, v["reason"].as_str()), (422, Some("Invalid")), "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("patch: Invalid value"),
        "{v}"
    );
    let (code, v) = call(
        &mut s,
        "n1",
        "POST",
        "/api/v1/namespaces/default/events",
        "application/json",
        json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "Node", "name": "n1"}, "count": "three"}),
    );
    assert_eq!(
        (code, v["reason"].as_str()),
        (400, Some("BadRequest")),
        "{v}"
    );
    assert_eq!(s.store.rv, rv);
    assert!(s.store.events.is_empty());
    assert!(Object::decode("pods", json!({"apiVersion": "v1", "kind": "Node"})).is_err());
}

/// The JSON served is the typed object's: what was written comes back
/// (resourceVersion set by the server, uid kept, no managedFields added).
#[test]
fn objects_round_trip_through_their_types() {
    let mut s = state();
    let (code, n) = call(&mut s, "n1", "GET", "/api/v1/nodes/n1", "", Value::Null);
    assert_eq!(code, 200);
    assert_eq!(
        n,
        json!({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": "n1", "uid": "uid-n1", "labels": {},
                            "resourceVersion": n["metadata"]["resourceVersion"].clone()},
               "spec": {},
               "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}})
    );
    assert!(n["metadata"].get("managedFields").is_none());
}

const MERGE: &str = "application/merge-patch+json";

fn taints(s: &State, node: &str) -> Vec<(String, String)> {
    let n = s.store.node(node).unwrap();
    n.spec
        .as_ref()
        .and_then(|sp| sp.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.effect))
        .collect()
}

fn new_node(name: &str, extra: Value) -> Value {
    let mut n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}});
    merge::merge_json(&mut n, &extra);
    n
}

/// TaintNodesByCondition: every Node created through the API gets
/// `node.kubernetes.io/not-ready:NoSchedule`, unless a taint with that key
/// and effect is there (plugin/pkg/admission/nodetaint/admission.go,
/// `Admit`/`addNotReadyTaint`, `Taint.MatchTaint`); the status the kubelet
/// registers with is kept (pkg/registry/core/node/strategy.go
/// `PrepareForCreate`). The node lifecycle controller lifts the taint once
/// Ready=True, other taints left alone
/// (pkg/controller/nodelifecycle/node_lifecycle_controller.go,
/// `doNoScheduleTaintingPass`; measured on 1.36:
/// shared/notes/kube-apiserver-1.36.md).
#[test]
fn a_created_node_carries_the_not_ready_taint_until_it_is_ready() {
    let mut s = state();
    s.part::<Authn>()
        .tokens
        .insert("n3".into(), Identity::Node("n3".into()));
    let body = new_node(
        "n3",
        json!({"spec": {"taints": [{"key": "gpu", "value": "a100", "effect": "NoSchedule"}]}}),
    );
    let (code, out) = call(&mut s, "n3", "POST", "/api/v1/nodes", "", body);
    assert_eq!(code, 201, "{out}");
    assert_eq!(out["status"]["conditions"][0]["reason"], "KubeletNotReady");
    assert!(out["metadata"]["uid"].is_string() && out["metadata"]["creationTimestamp"].is_string());
    let not_ready = (
        "node.kubernetes.io/not-ready".to_string(),
        "NoSchedule".to_string(),
    );
    let gpu = ("gpu".to_string(), "NoSchedule".to_string());
    assert_eq!(taints(&s, "n3"), [gpu.clone(), not_ready.clone()]);
    // Already there (a kubelet's --register-with-taints): not added twice.
    let body = new_node(
        "n4",
        json!({"spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}}),
    );
    let (code, _) =
        nodes::admit_and_store(&mut s.store, None, serde_json::from_value(body).unwrap());
    assert_eq!(code, 201);
    assert_eq!(taints(&s, "n4"), [not_ready]);
    // The node turns Ready: the controller lifts only its taint.
    let rv = s.store.rv;
    nodes::mark_ready(&mut s.store, "n3");
    assert_eq!(taints(&s, "n3"), [gpu]);
    assert_eq!(
        s.store.rv,
        rv + 2,
        "the kubelet's write, then the controller's"
    );
    let ready = &s
        .store
        .node("n3")
        .unwrap()
        .status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        (ready.type_.as_str(), ready.status.as_str()),
        ("Ready", "True")
    );
}

/// Who may create which Node: the Node authorizer allows a node `create`
/// on nodes (plugin/pkg/auth/authorizer/node/node_authorizer.go,
/// `authorizeNode`) and NodeRestriction lets it create only its own, with
/// no label it may not set and no `configSource`
/// (plugin/pkg/admission/noderestriction/admission.go, `admitNode`); no
/// role here grants a ServiceAccount `create` on nodes (deploy/), so RBAC
/// refuses it; a body of another kind is 400
/// (k8s.io/apiserver/pkg/endpoints/handlers/create.go); a name that is not
/// a DNS subdomain is 422 (pkg/apis/core/validation/validation.go
/// `ValidateNode`); a name that exists is 409 AlreadyExists.
#[test]
fn node_restriction_limits_a_node_to_creating_its_own_node() {
    let mut s = state();
    let cases: [(&str, Value, u16, &str); 6] = [
        ("n1", new_node("n9", json!({})), 403, "nodes \"n9\" is forbidden: node \"n1\" is not allowed to modify node \"n9\""),
        ("n1", new_node("n1", json!({})), 409, "nodes \"n1\" already exists"),
        (
            "sa",
            new_node("n9", json!({})),
            403,
            "nodes is forbidden: User \"system:serviceaccount:nodeproof:nodeproof-gate-controller\" cannot create resource \"nodes\"",
        ),
        ("sa", json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "n9"}}), 403, "cannot create resource"),
        ("n1", json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "n1"}}), 400, "cannot be handled as a Node"),
        ("n1", json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": 1}}), 400, "cannot be handled as a Node"),
    ];
    for (token, body, want, message) in cases {
        let (code, out) = call(&mut s, token, "POST", "/api/v1/nodes", "", body);
        assert_eq!(code, want, "{out}");
        assert!(out["message"].as_str().unwrap().contains(message), "{out}");
    }
    s.store.remove("nodes", "n1");
    for (extra, message) in [
        (
            json!({"metadata": {"labels": {"node-restriction.kubernetes.io/gpu": "a100"}}}),
            "node \"n1\" is not allowed to set the following labels: node-restriction.kubernetes.io/gpu",
        ),
        (
            json!({"spec": {"configSource": {"configMap": {"name": "c", "namespace": "kube-system", "kubeletConfigKey": "k"}}}}),
            "non-nil configSource",
        ),
    ] {
        let (code, out) = call(&mut s, "n1", "POST", "/api/v1/nodes", "", new_node("n1", extra));
        assert_eq!(code, 403, "{out}");
        assert!(out["message"].as_str().unwrap().contains(message), "{out}");
    }
    let (code, out) = call(
        &mut s,
        "n1",
        "POST",
        "/api/v1/nodes",
        "",
        new_node(
            "n1",
            json!({"metadata": {"labels": {"kubernetes.io/hostname": "n1"}}}),
        ),
    );
    assert_eq!(code, 201, "{out}");
    let bad: k8s_openapi::api::core::v1::Node =
        serde_json::from_value(new_node("Bad_Name", json!({}))).unwrap();
    let (code, out) = nodes::admit_and_store(&mut s.store, None, bad);
    assert_eq!(code, 422, "{out}");
}

/// A node patches its own status with a strategic merge or a JSON merge
/// patch (measured on 1.36: shared/notes/kube-apiserver-1.36.md); a merge
/// patch replaces `status.conditions` whole (RFC 7386: lists are values);
/// a patch of the Node object leaves the status alone
/// (pkg/registry/core/node/strategy.go, `nodeStrategy.PrepareForUpdate`),
/// and NodeRestriction refuses a node's change of its taints, not a patch
/// that restates them (`admitNode`: `apiequality.Semantic.DeepEqual`).
#[test]
fn a_node_merge_patches_its_status_and_not_its_taints() {
    let mut s = state();
    let body = json!({"status": {"conditions": [{"type": "GPUHealthy", "status": "True"}]}});
    let (code, out) = call(
        &mut s,
        "n1",
        "PATCH",
        "/api/v1/nodes/n1/status",
        MERGE,
        body,
    );
    assert_eq!(code, 200, "{out}");
    assert_eq!(condition_types(&s, "n1"), ["GPUHealthy"]);
    let body =
        json!({"status": {"conditions": []}, "metadata": {"labels": {"nodeproof.dev/x": "y"}}});
    let (code, out) = call(&mut s, "n1", "PATCH", "/api/v1/nodes/n1", MERGE, body);
    assert_eq!(code, 200, "{out}");
    assert_eq!(condition_types(&s, "n1"), ["GPUHealthy"]);
    nodes::merge(
        &mut s.store,
        "n1",
        &json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}),
    );
    let same = json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}});
    assert_eq!(
        call(&mut s, "n1", "PATCH", "/api/v1/nodes/n1", SMP, same).0,
        200
    );
    let (code, out) = call(
        &mut s,
        "n1",
        "PATCH",
        "/api/v1/nodes/n1",
        SMP,
        json!({"spec": {"taints": []}}),
    );
    assert_eq!(code, 403, "{out}");
    assert_eq!(
        call(
            &mut s,
            "n1",
            "PATCH",
            "/api/v1/nodes/n1/status",
            JSON_PATCH,
            json!([])
        )
        .0,
        415
    );
}

/// DeviceTaintRules are decoded first (a field of the wrong type is 400,
/// whatever else is wrong: k8s.io/apiserver/pkg/endpoints/handlers/create.go),
/// then the typed rule validated (pkg/apis/resource/validation/validation.go
/// `ValidateDeviceTaintRule`: a missing effect decodes as "" and is
/// "Required", 422), then stored unless the name exists (409).
#[test]
fn device_taint_rules_are_decoded_then_validated() {
    let mut s = state();
    s.part::<DraState>().device_taint_versions = vec!["v1beta2"];
    let path = "/apis/resource.k8s.io/v1beta2/devicetaintrules";
    let rule = |name: &str, taint: Value| {
        json!({"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule",
               "metadata": {"name": name},
               "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "device": "gpu-0"}, "taint": taint}})
    };
    let (code, out) = call(
        &mut s,
        "sa",
        "POST",
        path,
        "",
        rule("Bad", json!({"key": 5})),
    );
    assert_eq!(code, 400, "{out}");
    let (code, out) = call(
        &mut s,
        "sa",
        "POST",
        path,
        "",
        rule("Bad", json!({"key": "k"})),
    );
    assert_eq!(code, 422, "{out}");
    let message = out["message"].as_str().unwrap();
    assert!(
        message.contains("metadata.name: Invalid value: \"Bad\""),
        "{message}"
    );
    assert!(
        message.contains("spec.taint.effect: Required value"),
        "{message}"
    );
    let ok = rule(
        "gpu-0",
        json!({"key": "nodeproof.dev/unhealthy", "effect": "NoSchedule"}),
    );
    let (code, out) = call(&mut s, "sa", "POST", path, "", ok.clone());
    assert_eq!(code, 201, "{out}");
    assert_eq!(out["metadata"]["generation"], 1);
    assert!(out["spec"]["taint"]["timeAdded"].is_string(), "{out}");
    assert_eq!(call(&mut s, "sa", "POST", path, "", ok).0, 409);
}
