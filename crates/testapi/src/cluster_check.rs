//! Cluster check: the aggregation layer's APIServices
//! (`apiregistration.k8s.io/v1`), the Metrics API's NodeMetrics and
//! PodMetrics behind them (`metrics.k8s.io/v1beta1`, and `v1` where an
//! APIService registers it), and a cluster-wide list of core Events.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::http::{Method, Uri};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::kinds::{decode_own, encode};
use crate::query::query_param;
use crate::state::TestApiServer;
use crate::status::{status, Answer};
use crate::store::Store;

/// metrics.k8s.io's NodeMetrics (k8s.io/metrics/pkg/apis/metrics/v1beta1):
/// not an OpenAPI type of kube-apiserver's (metrics-server serves it), so
/// k8s-openapi has none.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeMetrics {
    pub kind: String,
    pub metadata: ObjectMeta,
    pub timestamp: String,
    pub window: String,
    pub usage: BTreeMap<String, Quantity>,
}

/// metrics.k8s.io's PodMetrics, as [`NodeMetrics`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodMetrics {
    pub kind: String,
    pub metadata: ObjectMeta,
    pub timestamp: String,
    pub window: String,
    pub containers: Vec<ContainerMetrics>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContainerMetrics {
    pub name: String,
    pub usage: BTreeMap<String, Quantity>,
}

#[derive(Default)]
pub struct ClusterState {
    /// APIServices by name.
    pub api_services: BTreeMap<String, APIService>,
    /// NodeMetrics by node name, as metrics-server serves them.
    pub node_metrics: BTreeMap<String, NodeMetrics>,
    /// PodMetrics by `namespace/name`.
    pub pod_metrics: BTreeMap<String, PodMetrics>,
    /// How long each Metrics API request takes to answer.
    pub metrics_delay: Option<Duration>,
}

impl ClusterState {
    /// Registers (or replaces) the APIService `<version>.metrics.k8s.io`
    /// with its `Available` condition, as kube-aggregator's availability
    /// controller sets it.
    pub fn set_metrics_api_version(
        &mut self,
        version: &str,
        available: bool,
        reason: &str,
        message: &str,
    ) {
        let name = format!("{version}.metrics.k8s.io");
        let svc = json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": name},
            "spec": {"group": "metrics.k8s.io", "version": version,
                     "service": {"namespace": "kube-system", "name": "metrics-server", "port": 443},
                     "groupPriorityMinimum": 100, "versionPriority": 100},
            "status": {"conditions": [{"type": "Available",
                "status": if available { "True" } else { "False" },
                "reason": reason, "message": message,
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        });
        self.api_services
            .insert(name, decode_own("an APIService", svc));
    }

    pub fn set_node_metrics(&mut self, node: &str, timestamp: &str) {
        let m = json!({
            "kind": "NodeMetrics",
            "metadata": {"name": node, "creationTimestamp": timestamp},
            "timestamp": timestamp, "window": "15s",
            "usage": {"cpu": "250m", "memory": "1024Mi"},
        });
        self.node_metrics
            .insert(node.into(), decode_own("NodeMetrics", m));
    }

    pub fn set_pod_metrics(&mut self, namespace: &str, pod: &str, timestamp: &str) {
        let m = json!({
            "kind": "PodMetrics",
            "metadata": {"name": pod, "namespace": namespace, "creationTimestamp": timestamp},
            "timestamp": timestamp, "window": "15s",
            "containers": [{"name": "main", "usage": {"cpu": "100m", "memory": "256Mi"}}],
        });
        self.pod_metrics
            .insert(format!("{namespace}/{pod}"), decode_own("PodMetrics", m));
    }
}

/// The requests of this section:
/// - `GET /apis/apiregistration.k8s.io/v1/apiservices/<name>`: the object
///   or 404;
/// - `GET /apis/metrics.k8s.io/<version>/{nodes,pods}`: what kube-aggregator
///   answers for a group version it proxies: 404 when no APIService
///   `<version>.metrics.k8s.io` registers it (the path is then nobody's),
///   503 when the APIService is not Available (the proxy has no healthy
///   backend; shared/notes/kube-apiserver-1.36.md), else metrics-server's
///   list in that version (it has no pagination: `limit` is ignored and no
///   `continue` is sent);
/// - `GET /api/v1/events` (all namespaces), with the `involvedObject.kind`
///   and `type` field selectors (comma-separated, all must match, as
///   kube-apiserver's `fields.ParseSelector` reads them; core/v1 Event
///   field selectors are registered in pkg/registry/core/event/strategy.go),
///   paged with `limit`/`continue` in key order.
pub fn route(
    cluster: &ClusterState,
    store: &Store,
    method: &Method,
    uri: &Uri,
    parts: &[&str],
) -> Option<Answer> {
    if method != Method::GET {
        return None;
    }
    match parts {
        ["apis", "apiregistration.k8s.io", "v1", "apiservices", name] => {
            Some(match cluster.api_services.get(*name) {
                Some(svc) => (200, encode(svc)),
                None => status(
                    404,
                    "NotFound",
                    &format!("apiservices.apiregistration.k8s.io \"{name}\" not found"),
                ),
            })
        }
        ["apis", "metrics.k8s.io", version, resource @ ("nodes" | "pods")] => {
            let Some(svc) = cluster
                .api_services
                .get(&format!("{version}.metrics.k8s.io"))
            else {
                return Some(crate::status::no_such_resource());
            };
            let available = svc
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Available" && c.status == "True");
            if !available {
                return Some(status(503, "ServiceUnavailable", "service unavailable"));
            }
            let api_version = format!("metrics.k8s.io/{version}");
            let with_version = |mut m: Value| {
                m["apiVersion"] = json!(api_version);
                m
            };
            let (items, kind): (Vec<Value>, _) = match *resource {
                "nodes" => (
                    cluster
                        .node_metrics
                        .values()
                        .map(|m| with_version(encode(m)))
                        .collect(),
                    "NodeMetricsList",
                ),
                _ => (
                    cluster
                        .pod_metrics
                        .values()
                        .map(|m| with_version(encode(m)))
                        .collect(),
                    "PodMetricsList",
                ),
            };
            Some((
                200,
                json!({"apiVersion": api_version, "kind": kind, "metadata": {}, "items": items}),
            ))
        }
        ["api", "v1", "events"] => Some(list_events(store, uri)),
        _ => None,
    }
}

fn list_events(store: &Store, uri: &Uri) -> Answer {
    let selector = query_param(uri, "fieldSelector").unwrap_or_default();
    let mut kind = None;
    let mut type_ = None;
    let mut reason = None;
    // kube-apiserver selects Events by these fields among others
    // (pkg/registry/core/event/strategy.go, ToSelectableFields).
    for term in selector.split(',').filter(|t| !t.is_empty()) {
        match term.split_once('=') {
            Some(("involvedObject.kind", v)) => kind = Some(v.to_string()),
            Some(("type", v)) => type_ = Some(v.to_string()),
            Some(("reason", v)) => reason = Some(v.to_string()),
            _ => {
                return status(
                    400,
                    "BadRequest",
                    &format!("\"{term}\" is not a known field selector: only \"involvedObject.kind\", \"type\", \"reason\" are served here"),
                )
            }
        }
    }
    let limit: usize = query_param(uri, "limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let after = query_param(uri, "continue").filter(|c| !c.is_empty());
    let mut matching = store
        .events
        .iter()
        .map(|((ns, name), ev)| (format!("{ns}/{name}"), ev))
        .filter(|(key, _)| after.as_ref().is_none_or(|a| key > a))
        .filter(|(_, ev)| {
            kind.as_deref()
                .is_none_or(|k| ev.involved_object.kind.as_deref() == Some(k))
        })
        .filter(|(_, ev)| {
            type_
                .as_deref()
                .is_none_or(|t| ev.type_.as_deref() == Some(t))
        })
        .filter(|(_, ev)| {
            reason
                .as_deref()
                .is_none_or(|r| ev.reason.as_deref() == Some(r))
        });
    let items: Vec<(String, Value)> = matching
        .by_ref()
        .take(limit)
        .map(|(k, ev)| (k, encode(ev)))
        .collect();
    let mut metadata = json!({"resourceVersion": store.rv.to_string()});
    if let (true, Some((last, _))) = (matching.next().is_some(), items.last()) {
        metadata["continue"] = json!(last);
    }
    let items: Vec<Value> = items.into_iter().map(|(_, ev)| ev).collect();
    (
        200,
        json!({"apiVersion": "v1", "kind": "EventList", "metadata": metadata, "items": items}),
    )
}

impl TestApiServer {
    /// Registers (or replaces) the Metrics API's `v1beta1` APIService, as
    /// metrics-server does; see [`Self::set_metrics_api_version`].
    pub fn set_metrics_api_service(&self, available: bool, reason: &str, message: &str) {
        self.set_metrics_api_version("v1beta1", available, reason, message);
    }

    /// Registers (or replaces) the APIService `<version>.metrics.k8s.io`
    /// with its `Available` condition, as kube-aggregator's availability
    /// controller sets it (`Passed`, or e.g. `FailedDiscoveryCheck` /
    /// `MissingEndpoints`).
    pub fn set_metrics_api_version(
        &self,
        version: &str,
        available: bool,
        reason: &str,
        message: &str,
    ) {
        self.with(|s| {
            s.part::<ClusterState>()
                .set_metrics_api_version(version, available, reason, message)
        });
    }

    /// Unregisters the Metrics API, every version (metrics-server uninstalled).
    pub fn remove_metrics_api_service(&self) {
        self.with(|s| {
            s.part::<ClusterState>()
                .api_services
                .retain(|name, _| !name.ends_with(".metrics.k8s.io"))
        });
    }

    /// Unregisters one version's APIService.
    pub fn remove_metrics_api_version(&self, version: &str) {
        self.with(|s| {
            s.part::<ClusterState>()
                .api_services
                .remove(&format!("{version}.metrics.k8s.io"))
        });
    }

    /// Every Metrics API request answers after `delay` (an overloaded
    /// metrics-server).
    pub fn set_metrics_delay(&self, delay: Duration) {
        self.with(|s| s.part::<ClusterState>().metrics_delay = Some(delay));
    }

    /// metrics-server's NodeMetrics of `node`, scraped at `timestamp` (RFC 3339).
    pub fn set_node_metrics(&self, node: &str, timestamp: &str) {
        self.with(|s| s.part::<ClusterState>().set_node_metrics(node, timestamp));
    }

    pub fn remove_node_metrics(&self, node: &str) {
        self.with(|s| s.part::<ClusterState>().node_metrics.remove(node));
    }

    /// metrics-server's PodMetrics of `namespace/pod`, scraped at `timestamp`.
    pub fn set_pod_metrics(&self, namespace: &str, pod: &str, timestamp: &str) {
        self.with(|s| {
            s.part::<ClusterState>()
                .set_pod_metrics(namespace, pod, timestamp)
        });
    }

    pub fn remove_pod_metrics(&self, namespace: &str, pod: &str) {
        self.with(|s| {
            s.part::<ClusterState>()
                .pod_metrics
                .remove(&format!("{namespace}/{pod}"))
        });
    }
}
