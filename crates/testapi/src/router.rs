//! Routing: faults first, then authentication, then each concern's
//! requests; everything is encoded to JSON here, at the edge.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::admission::Namespaces;
use crate::auth::{self, Authn, PeerCert};
use crate::cluster_check::ClusterState;
use crate::dra::{device_taint_rules, DraState};
use crate::faults::{fault_status, write_fault, Fault, FaultState};
use crate::kinds::listed_resource;
use crate::leases::LeaseState;
use crate::persist::{record, Logged};
use crate::pods::PodState;
use crate::query::query_param;
use crate::state::State;
use crate::status::{status, Answer};
use crate::{cluster_check, dra, events, leases, nodes, pods, watch};

fn logged(method: &Method, uri: &Uri, content_type: &str, body: Value, status: u16) -> Logged {
    Logged {
        method: method.to_string(),
        path: uri.path().to_string(),
        query: uri.query().unwrap_or("").to_string(),
        content_type: content_type.to_string(),
        body,
        status,
        at: std::time::SystemTime::now(),
    }
}

pub async fn handle(
    axum::extract::State(st): axum::extract::State<Arc<Mutex<State>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    axum::Extension(peer): axum::Extension<PeerCert>,
    body: Bytes,
) -> Response {
    let fault = st.lock().unwrap().part::<FaultState>().fault;
    if let Some(Fault::Slow(d)) = fault {
        tokio::time::sleep(d).await;
    }
    let metrics_delay = st.lock().unwrap().part::<ClusterState>().metrics_delay;
    if let (Some(d), true) = (
        metrics_delay,
        uri.path().starts_with("/apis/metrics.k8s.io/"),
    ) {
        tokio::time::sleep(d).await;
    }
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body_json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let faulted = fault_status(fault);
    if let (Some(resource), Some("true" | "1"), None) = (
        listed_resource(uri.path()),
        query_param(&uri, "watch").as_deref(),
        &faulted,
    ) {
        let who = st
            .lock()
            .unwrap()
            .part::<Authn>()
            .authenticate(&headers, &peer);
        let Some(who) = who else {
            return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response();
        };
        let not_served =
            device_taint_rules::not_served(st.lock().unwrap().part::<DraState>(), uri.path());
        let resp = match not_served {
            Some((code, v)) => (StatusCode::from_u16(code).unwrap(), v.to_string()).into_response(),
            None => watch::watch(&st, State::store_of, &uri, &who, resource),
        };
        // Logged when the stream starts: a watch from version V means every event up to V arrived.
        let code = resp.status().as_u16();
        record(
            &mut st.lock().unwrap(),
            logged(&method, &uri, &content_type, Value::Null, code),
        );
        return resp;
    }
    if let Some(resp) = write_fault(fault, &method, &uri) {
        let code = resp.status().as_u16();
        record(
            &mut st.lock().unwrap(),
            logged(&method, &uri, &content_type, body_json, code),
        );
        return resp;
    }
    let mut retry_after = None;
    let (code, out) = match faulted {
        Some((answer, after)) => {
            retry_after = after;
            answer
        }
        None => route(
            &mut st.lock().unwrap(),
            &method,
            &uri,
            &headers,
            &peer,
            &content_type,
            &body_json,
        ),
    };
    record(
        &mut st.lock().unwrap(),
        logged(&method, &uri, &content_type, body_json, code),
    );
    let mut resp = (
        StatusCode::from_u16(code).unwrap(),
        [("content-type", "application/json")],
        out.to_string(),
    )
        .into_response();
    if let Some(secs) = retry_after {
        resp.headers_mut()
            .insert("retry-after", secs.to_string().parse().unwrap());
    }
    resp
}

/// One request, authenticated, answered from the state.
pub fn route(
    s: &mut State,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    peer: &PeerCert,
    content_type: &str,
    body: &Value,
) -> Answer {
    let Some(who) = s.part::<Authn>().authenticate(headers, peer) else {
        return status(401, "Unauthorized", "Unauthorized");
    };
    let parts: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    let strategic = content_type == "application/strategic-merge-patch+json";
    let m = method.as_str();
    match (m, parts.as_slice()) {
        ("POST", ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"]) => {
            return auth::self_subject_review(&who)
        }
        // Readable by every authenticated user (system:public-info-viewer); the
        // agent's watches ask it while they wait for the API server to come back.
        ("GET", ["readyz"]) => return (200, json!("ok")),
        ("PATCH", ["api", "v1", "namespaces", ns, "pods", name]) => {
            let (store, pod_state) = s.store_and::<PodState>();
            return pods::patch(store, pod_state, &who, ns, name, content_type, body);
        }
        ("PATCH", ["api", "v1", "namespaces", ns, "pods", name, "status"]) => {
            return pods::patch_status(&mut s.store, &who, ns, name, content_type, body)
        }
        (_, ["apis", "coordination.k8s.io", "v1", "namespaces", ns, "leases", rest @ ..]) => {
            let manager = query_param(uri, "fieldManager");
            let force = query_param(uri, "force").as_deref() == Some("true");
            let (store, lease_state) = s.store_and::<LeaseState>();
            return leases::request(
                store,
                lease_state,
                m,
                ns,
                rest,
                content_type,
                body,
                manager,
                force,
            );
        }
        _ => {}
    }
    let (store, cluster) = s.store_and::<ClusterState>();
    if let Some(answer) = cluster_check::route(cluster, store, method, uri, &parts) {
        return answer;
    }
    let (store, dra_state) = s.store_and::<DraState>();
    if let Some(answer) = device_taint_rules::route(dra_state, store, &who, method, &parts, body) {
        return answer;
    }
    if let Some(answer) = dra::route(dra_state, store, &who, method, &parts) {
        return answer;
    }
    if let (true, Some(resource)) = (method == Method::GET, listed_resource(uri.path())) {
        let selector = query_param(uri, "fieldSelector");
        if !auth::list_allowed(&who, resource, selector.as_deref()) {
            return auth::forbidden_list(resource);
        }
        let limit: Option<usize> = query_param(uri, "limit")
            .and_then(|l| l.parse().ok())
            .filter(|l| *l > 0);
        let token = query_param(uri, "continue");
        return s
            .store
            .list_page(resource, selector.as_deref(), limit, token.as_deref());
    }
    match (m, parts.as_slice()) {
        ("GET", ["api", "v1", "namespaces", ns, "pods", name]) => {
            pods::get(&s.store, &who, ns, name)
        }
        ("POST", ["api", "v1", "nodes"]) => nodes::create(&mut s.store, &who, body),
        ("GET", ["api", "v1", "nodes", name]) => nodes::get(&s.store, &who, name, false),
        ("GET", ["api", "v1", "nodes", name, "status"]) => nodes::get(&s.store, &who, name, true),
        ("PATCH", ["api", "v1", "nodes", name, rest @ ..]) => {
            let sub = match rest {
                [] => None,
                [sub] => Some(*sub),
                _ => return status(404, "NotFound", "no such subresource"),
            };
            let (store, faults) = s.store_and::<FaultState>();
            nodes::patch(
                store,
                &mut faults.fault,
                &who,
                name,
                sub,
                content_type,
                body,
            )
        }
        ("POST", ["api", "v1", "namespaces", ns, "events"]) => {
            let phase = s.part::<Namespaces>().0.get(*ns).copied();
            events::create(&mut s.store, phase, &who, ns, body)
        }
        ("PATCH", ["api", "v1", "namespaces", ns, "events", name]) => {
            events::patch(&mut s.store, ns, name, strategic, body)
        }
        (_, ["apis", "events.k8s.io", ..]) if who.node().is_some() => {
            status(403, "Forbidden", "events.k8s.io is forbidden for nodes")
        }
        ("POST", ["apis", "events.k8s.io", "v1", "namespaces", ns, "events"]) => {
            let (store, events) = s.store_and::<events::EventsV1>();
            events::create_v1(store, events, ns, body)
        }
        ("PATCH", ["apis", "events.k8s.io", "v1", "namespaces", ns, "events", name]) => {
            let (store, events) = s.store_and::<events::EventsV1>();
            events::patch_v1(store, events, ns, name, content_type, body)
        }
        _ => status(404, "NotFound", "not served by the test API server"),
    }
}
