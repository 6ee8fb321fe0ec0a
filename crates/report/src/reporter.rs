//! The `Reporter` trait (the API server, or a stand-in for it), what a GET
//! of the Node tells it, and what can go wrong with a write.
//!
//! Request shapes are chosen for a node identity under the Node authorizer:
//! it may GET its Node, PATCH (not GET) `nodes/<name>/status`, and create and
//! patch core/v1 Events (events.k8s.io/v1 is refused to nodes). The kube-rs
//! implementation is `nodeproof_apiclient::client::KubeReporter`; it maps the
//! API server's answers to [`ReportError`], so no kube-rs type is named here.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::conditions::{NodeCondition, StatusUpdate};
use crate::events::EventWrite;
use crate::marks::Taint;
use strum::IntoStaticStr;

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "nodeproof";

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(
        "node {node:?} does not exist in the cluster (set --node-name or NODE_NAME to the Node's name)"
    )]
    NodeNotFound { node: String },
    #[error("{op} for node {node} forbidden: {message}")]
    Forbidden {
        op: &'static str,
        node: String,
        message: String,
    },
    /// A 403 on the Node's GET from a node identity of another Node: since
    /// Kubernetes 1.32 the Node authorizer answers 403, not 404, to a node
    /// reading another Node (see `unreadable_node`).
    #[error("this credential is node {identity}; the Node {node} cannot be read with it (set --node-name, report.node-name or NODE_NAME to {identity}, or use that node's credentials)")]
    NotOwnNode { identity: String, node: String },
    #[error("{op} for node {node} conflicted")]
    Conflict { op: &'static str, node: String },
    /// Not a failure: the client-side token bucket (`limited::Limited`)
    /// is empty, no request was made; the loop waits `wait`.
    #[error("request for node {node} held back by the client-side rate limit for {wait:?}")]
    ClientLimited { node: String, wait: Duration },
    #[error("{op} for node {node} throttled (HTTP 429)")]
    Throttled {
        op: &'static str,
        node: String,
        retry_after: Option<Duration>,
    },
    #[error("{op} for node {node}: event {name} no longer exists")]
    EventGone {
        op: &'static str,
        node: String,
        name: String,
    },
    #[error("{op} for node {node} failed: HTTP {code}: {message}")]
    Api {
        op: &'static str,
        node: String,
        code: u16,
        message: String,
    },
    /// The request did not get an answer from the API server (connection,
    /// TLS, authentication, a body that cannot be read): retried. The edge's
    /// own error is the source (`kube::Error` from `nodeproof-apiclient`).
    #[error("{op} for node {node} failed")]
    Transport {
        op: &'static str,
        node: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{op} for node {node} timed out after {after:?}")]
    Timeout {
        op: &'static str,
        node: String,
        after: Duration,
    },
    #[error("taints for node {node} need their own credential (NodeRestriction refuses them to the node identity; see deploy/rbac-taints.yaml)")]
    NoTaintCredential { node: String },
    #[error("cannot load credentials from {source_desc}")]
    Credentials {
        source_desc: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{op} for node {node} refused ({refusal}): {message}")]
    Refused {
        op: &'static str,
        node: String,
        refusal: Refusal,
        message: String,
    },
    #[error("{op} for node {node}: invalid {what}")]
    Encode {
        op: &'static str,
        node: String,
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

impl ReportError {
    /// Errors retrying cannot fix: stop and say so.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            ReportError::NodeNotFound { .. }
                | ReportError::NotOwnNode { .. }
                | ReportError::Forbidden { .. }
                | ReportError::Credentials { .. }
                | ReportError::NoTaintCredential { .. }
                | ReportError::Encode { .. }
                | ReportError::Refused { .. }
        )
    }

    /// Why the API server refused this write for good, if it did.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            ReportError::Refused { refusal, .. } => Some(*refusal),
            _ => None,
        }
    }

    /// What the API server asked us to wait (429 `Retry-After`).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ReportError::Throttled { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Why a write was refused in a way that sending it again cannot change.
/// client-go's event recorder (tools/record `recordToSink`) gives up on
/// every Status error and retries only transport failures; the reporter
/// keeps retrying 5xx and 429 (transient by definition) and drops these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Refusal {
    /// 403 from the NamespaceLifecycle admission plugin, which marks it with
    /// the cause `NamespaceTerminating`: no new objects in a namespace being
    /// deleted.
    NamespaceTerminating,
    /// 404 naming the namespace (`details.kind: namespaces`): it is gone.
    NamespaceGone,
    /// 404 for the object itself where it cannot be created again.
    ObjectGone,
    /// 422 Invalid: the same body is refused again.
    Invalid,
    /// Any other 403 of an Event write: an authorizer or admission plugin
    /// said no to this object, and will again.
    Forbidden,
}

impl Refusal {
    /// The `reason` label of `nodeproof_reporter_dropped_total`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a GET of the Node tells the reporter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeState {
    pub uid: Option<String>,
    /// nodeproof's own condition types only.
    pub conditions: Vec<NodeCondition>,
    /// nodeproof's own labels only (`marks::owns_label`: `nodeproof.dev/`
    /// and the RuntimeClass contract labels).
    pub labels: BTreeMap<String, String>,
    /// nodeproof's own taints only.
    pub taints: Vec<Taint>,
    /// The `gpu.nodeproof.dev/unhealthy-devices` annotation, as it is.
    pub unhealthy_devices: Option<String>,
}

/// The API server, or a stand-in for it.
// Used with concrete types on a current-thread runtime, so the futures need no `Send` bound.
#[allow(async_fn_in_trait)]
pub trait Reporter {
    fn node(&self) -> &str;
    /// GET the Node: it exists, its UID, its current own conditions.
    async fn read_node(&self) -> Result<NodeState, ReportError>;
    /// PATCH `nodes/<name>/status` with `update`.
    async fn patch_status(&self, update: &StatusUpdate) -> Result<(), ReportError>;
    /// Create or patch one core/v1 Event.
    async fn write_event(&self, write: &EventWrite) -> Result<(), ReportError>;
    /// Strategic-merge PATCH of the Node's metadata: its labels
    /// (`marks::label_patch`) or the unhealthy-devices annotation
    /// (`device_health::UnhealthyDevices::node_patch`).
    async fn patch_labels(&self, body: &serde_json::Value) -> Result<(), ReportError>;
    /// Make nodeproof's taints on the Node exactly `ours`, keeping others'.
    async fn set_taints(&self, ours: &[Taint]) -> Result<(), ReportError>;
}
