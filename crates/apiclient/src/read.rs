//! The agent's one-shot reads: a Node, a pod, the pods bound to a node,
//! the RuntimeClasses. Lists are paged ([`crate::list::list_all`]).

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{Api, ListParams};
use kube::{Client, Error};

use crate::list::list_all;

/// The Node `name` (a node identity may read its own only).
pub async fn node(client: &Client, name: &str) -> Result<Node, Error> {
    Api::<Node>::all(client.clone()).get(name).await
}

/// The pod `namespace/name`.
pub async fn pod(client: &Client, namespace: &str, name: &str) -> Result<Pod, Error> {
    Api::<Pod>::namespaced(client.clone(), namespace)
        .get(name)
        .await
}

/// The pods bound to `node` (`spec.nodeName`, which the Node authorizer
/// allows a node identity), every page.
pub async fn pods_on(client: &Client, node: &str) -> Result<Vec<Pod>, Error> {
    list_all(
        &Api::<Pod>::all(client.clone()),
        ListParams::default().fields(&format!("spec.nodeName={node}")),
    )
    .await
}

/// Every RuntimeClass, every page.
pub async fn runtime_classes(client: &Client) -> Result<Vec<RuntimeClass>, Error> {
    list_all(
        &Api::<RuntimeClass>::all(client.clone()),
        ListParams::default(),
    )
    .await
}

/// Whether the API server answered `code` (403, 404, ...) to the request.
pub fn answered(e: &Error, code: u16) -> bool {
    matches!(e, Error::Api(s) if s.code == code)
}
