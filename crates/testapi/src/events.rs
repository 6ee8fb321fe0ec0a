//! Core Events (`/api/v1/namespaces/<ns>/events`): create and strategic
//! merge patch (a repeat's count), under NamespaceLifecycle and the Node
//! authorizer's rule that a node records Events about itself only.
//!
//! Also `events.k8s.io/v1` Events (create and JSON merge patch, which is
//! what kube-runtime's `events::Recorder` writes), kept apart from the core
//! ones: served so that the request counts of the two recorders can be
//! compared on one server (crates/cluster/tests/runtime_fit.rs). Nodes are
//! refused them, as before (the router).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::events::v1::Event as EventV1;
use serde_json::Value;

use crate::admission::{self, NamespacePhase};
use crate::auth::Identity;
use crate::kinds::{decode_refused, encode, patch_refused};
use crate::merge::merge_json;
use crate::state::TestApiServer;
use crate::status::{status, Answer};
use crate::store::Store;

/// `POST /api/v1/namespaces/<ns>/events`.
pub fn create(
    store: &mut Store,
    phase: Option<NamespacePhase>,
    who: &Identity,
    ns: &str,
    body: &Value,
) -> Answer {
    let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
    if let Some(refused) = admission::namespace_lifecycle(phase, ns, &name) {
        return refused;
    }
    let key = (ns.to_string(), name.clone());
    if store.events.contains_key(&key) {
        return status(
            409,
            "AlreadyExists",
            &format!("events \"{name}\" already exists"),
        );
    }
    if let Identity::Node(me) = who {
        if body["involvedObject"]["kind"] == "Node" && body["involvedObject"]["name"] != me.as_str()
        {
            return status(403, "Forbidden", "events about other nodes");
        }
    }
    let mut ev: Event = match serde_json::from_value(body.clone()) {
        Ok(ev) => ev,
        Err(e) => return decode_refused(&e.to_string()),
    };
    ev.metadata.resource_version = Some(store.next_rv());
    let out = encode(&ev);
    store.events.insert(key, ev);
    (201, out)
}

/// `PATCH /api/v1/namespaces/<ns>/events/<name>` (strategic merge; an
/// Event has no lists that merge by key the agent patches).
pub fn patch(store: &mut Store, ns: &str, name: &str, strategic: bool, body: &Value) -> Answer {
    if !strategic {
        return status(415, "UnsupportedMediaType", "strategic merge only here");
    }
    let rv = store.next_rv();
    let key = (ns.to_string(), name.to_string());
    let Some(ev) = store.events.get(&key) else {
        return status(404, "NotFound", &format!("events \"{name}\" not found"));
    };
    let mut json = encode(ev);
    merge_json(&mut json, body);
    let mut ev: Event = match serde_json::from_value(json) {
        Ok(ev) => ev,
        Err(e) => return patch_refused(body, &e.to_string()),
    };
    ev.metadata.resource_version = Some(rv);
    let out = encode(&ev);
    store.events.insert(key, ev);
    (200, out)
}

/// An Event as another component recorded it (a test's).
pub fn add(store: &mut Store, event: Value) {
    let mut ev: Event = crate::kinds::decode_own("an Event", event);
    ev.metadata.resource_version = Some(store.next_rv());
    let ns = ev
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = ev.metadata.name.clone().unwrap_or_default();
    store.events.insert((ns, name), ev);
}

/// The `events.k8s.io/v1` Events, by (namespace, name).
#[derive(Default)]
pub struct EventsV1(BTreeMap<(String, String), EventV1>);

/// `POST /apis/events.k8s.io/v1/namespaces/<ns>/events`.
pub fn create_v1(store: &mut Store, events: &mut EventsV1, ns: &str, body: &Value) -> Answer {
    let mut ev: EventV1 = match serde_json::from_value(body.clone()) {
        Ok(ev) => ev,
        Err(e) => return decode_refused(&e.to_string()),
    };
    let name = ev.metadata.name.clone().unwrap_or_default();
    let key = (ns.to_string(), name.clone());
    if events.0.contains_key(&key) {
        return status(
            409,
            "AlreadyExists",
            &format!("events.events.k8s.io \"{name}\" already exists"),
        );
    }
    ev.metadata.namespace = Some(ns.to_string());
    ev.metadata.resource_version = Some(store.next_rv());
    let out = encode(&ev);
    events.0.insert(key, ev);
    (201, out)
}

/// `PATCH /apis/events.k8s.io/v1/namespaces/<ns>/events/<name>`, JSON merge
/// patch (RFC 7386) as kube-runtime sends it.
pub fn patch_v1(
    store: &mut Store,
    events: &mut EventsV1,
    ns: &str,
    name: &str,
    content_type: &str,
    body: &Value,
) -> Answer {
    if content_type != "application/merge-patch+json" {
        return status(415, "UnsupportedMediaType", "JSON merge patch only here");
    }
    let key = (ns.to_string(), name.to_string());
    let Some(ev) = events.0.get(&key) else {
        return status(
            404,
            "NotFound",
            &format!("events.events.k8s.io \"{name}\" not found"),
        );
    };
    let mut json = encode(ev);
    merge_json(&mut json, body);
    let mut ev: EventV1 = match serde_json::from_value(json) {
        Ok(ev) => ev,
        Err(e) => return patch_refused(body, &e.to_string()),
    };
    ev.metadata.resource_version = Some(store.next_rv());
    let out = encode(&ev);
    events.0.insert(key, ev);
    (200, out)
}

impl TestApiServer {
    /// The `events.k8s.io/v1` Events written so far.
    pub fn events_v1(&self) -> Vec<Value> {
        self.with(|s| s.part::<EventsV1>().0.values().map(encode).collect())
    }

    pub fn events(&self) -> Vec<Value> {
        self.with(|s| s.store.events.values().map(encode).collect())
    }

    /// An Event as another component (the gate controller, the scheduler)
    /// recorded it, listed by `GET /api/v1/events`.
    pub fn add_event(&self, event: Value) {
        self.with(|s| add(&mut s.store, event));
    }
}
