//! The cluster controllers' requests (`nodeproof gate-controller`: the gate
//! controller and the device taints, crates/cluster's `gate/` and
//! `device_taints/`): their watches, streamed event by event, and their
//! writes. What an event means, what is kept of an object and what to
//! write is crates/cluster's; the requests and kube-rs's types are here.
//!
//! The watches are kube-runtime's `watcher` with its `default_backoff()`,
//! handed on one event at a time with the list bracketed by
//! [`Event::Init`] and [`Event::InitDone`], not buffered as the agent's
//! [`crate::watch::follow`] does: the controllers keep a digest of each
//! object (20,000 gated Pods, 5,000 Nodes), and a whole list held at once
//! would cost what their digests save (measured in crates/cluster's
//! `gate/controller.rs` and `tests/runtime_fit.rs`).

use std::pin::Pin;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use kube::{Client, Error};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::cluster_read::DynamicKind;
use crate::watch::WatchError;

/// One event of a controller's watch (kube-runtime's `watcher::Event`).
#[derive(Debug, Clone, PartialEq)]
pub enum Event<K> {
    /// A (re)list starts: what it does not bring again is gone at `InitDone`.
    Init,
    /// An object of the list.
    InitApply(K),
    /// The list is complete.
    InitDone,
    /// Added or changed after the list.
    Apply(K),
    Delete(K),
}

impl<K> From<watcher::Event<K>> for Event<K> {
    fn from(e: watcher::Event<K>) -> Self {
        match e {
            watcher::Event::Init => Event::Init,
            watcher::Event::InitApply(o) => Event::InitApply(o),
            watcher::Event::InitDone => Event::InitDone,
            watcher::Event::Apply(o) => Event::Apply(o),
            watcher::Event::Delete(o) => Event::Delete(o),
        }
    }
}

/// A controller's watch: its events, or why it failed (the watcher retries
/// with backoff after each failure).
pub type Events<K> = Pin<Box<dyn Stream<Item = Result<Event<K>, WatchError>> + Send>>;

fn events<K>(api: Api<K>, config: watcher::Config, resource: &'static str) -> Events<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + 'static,
{
    watcher(api, config)
        .default_backoff()
        .map(move |e| e.map(Event::from).map_err(|s| WatchError::new(resource, s)))
        .boxed()
}

/// The pods no node is bound to (field selector `spec.nodeName=`, served
/// by the API server: a gated pod is never bound).
pub fn unbound_pods(client: &Client) -> Events<Pod> {
    events(
        Api::all(client.clone()),
        watcher::Config::default().fields("spec.nodeName="),
        "pods",
    )
}

/// Every Node.
pub fn nodes(client: &Client) -> Events<Node> {
    events(
        Api::all(client.clone()),
        watcher::Config::default(),
        "nodes",
    )
}

/// Every RuntimeClass.
pub fn runtime_classes(client: &Client) -> Events<RuntimeClass> {
    events(
        Api::all(client.clone()),
        watcher::Config::default(),
        "runtimeclasses",
    )
}

/// Every object of a kind without a k8s-openapi type (ResourceSlices of
/// the version served, DeviceTaintRules); `resource` names it in errors.
pub fn dynamic(
    client: &Client,
    kind: DynamicKind<'_>,
    resource: &'static str,
) -> Events<DynamicObject> {
    events(
        Api::all_with(client.clone(), &kind.resource()),
        watcher::Config::default(),
        resource,
    )
}

/// Whether `kind` is served: one list of one item, a 404 is `false`.
pub async fn served(client: &Client, kind: DynamicKind<'_>) -> Result<bool, Error> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource());
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(e) if crate::read::answered(&e, 404) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Creates `body`, an object of `kind`; the object as created.
pub async fn create_dynamic(
    client: &Client,
    kind: DynamicKind<'_>,
    body: &DynamicObject,
) -> Result<DynamicObject, Error> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource());
    api.create(&PostParams::default(), body).await
}

/// Deletes the object `name` of `kind`, only if its UID is still `uid`
/// (when given): an object made again under the name meanwhile is answered
/// with 409 and left.
pub async fn delete_dynamic(
    client: &Client,
    kind: DynamicKind<'_>,
    name: &str,
    uid: Option<String>,
) -> Result<(), Error> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource());
    let params = DeleteParams {
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    api.delete(name, &params).await.map(|_| ())
}

/// Applies an RFC 6902 JSON patch to the pod (the gate controller's
/// guarded removal of scheduling gates: a failed `test` op is a 422).
pub async fn patch_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    patch: json_patch::Patch,
) -> Result<(), Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    api.patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
        .map(|_| ())
}

/// A strategic merge patch of the pod's `status` subresource (its
/// conditions).
pub async fn patch_pod_status(
    client: &Client,
    namespace: &str,
    name: &str,
    patch: &Value,
) -> Result<(), Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map(|_| ())
}

/// A strategic merge patch of the Node (its labels); the Node as it now is.
pub async fn patch_node(client: &Client, name: &str, patch: &Value) -> Result<Node, Error> {
    let api: Api<Node> = Api::all(client.clone());
    api.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
}

/// Creates a core/v1 Event in `namespace`.
pub async fn create_event(client: &Client, namespace: &str, body: &CoreEvent) -> Result<(), Error> {
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), namespace);
    api.create(&PostParams::default(), body).await.map(|_| ())
}

/// A strategic merge patch of the Event `name` in `namespace` (its count,
/// message and last timestamp).
pub async fn patch_event(
    client: &Client,
    namespace: &str,
    name: &str,
    patch: &Value,
) -> Result<(), Error> {
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), namespace);
    api.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map(|_| ())
}
