//! Authentication (bearer tokens, client certificates) and authorization:
//! the Node authorizer's rules for a node identity
//! (plugin/pkg/auth/authorizer/node/node_authorizer.go) and who else may
//! do what here. RBAC for the ServiceAccounts is not enforced: what they
//! ask is checked against the request log by the tests (rbac_agent.rs,
//! gate_controller.rs).

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use serde_json::{json, Value};
use tokio_rustls::rustls;

use crate::state::TestApiServer;
use crate::status::{status, Answer};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// `system:node:<name>`, as the kubelet's credentials authenticate.
    Node(String),
    /// A ServiceAccount with the taint ClusterRole (deploy/rbac-taints.yaml).
    TaintServiceAccount,
    /// The in-cluster agent's ServiceAccount (deploy/base/rbac-agent.yaml). Not
    /// under the Node authorizer; what RBAC allows it is checked against the
    /// request log by `tests/apiserver/rbac_agent.rs`.
    AgentServiceAccount,
    /// `nodeproof cluster check`'s reader (deploy/base/rbac-cluster-check.yaml).
    ClusterReader,
    /// The gate controller's ServiceAccount (deploy/base/gate-controller.yaml);
    /// its RBAC is checked against the request log by `tests/apiserver/gate_controller.rs`.
    GateControllerServiceAccount,
}

impl Identity {
    /// The node this identity is, if it is one.
    pub fn node(&self) -> Option<&str> {
        match self {
            Identity::Node(n) => Some(n),
            _ => None,
        }
    }
}

/// The user name the API server authenticates `who` as.
pub fn user_name(who: &Identity) -> String {
    match who {
        Identity::Node(name) => format!("system:node:{name}"),
        Identity::TaintServiceAccount => {
            "system:serviceaccount:kube-system:nodeproof-taints".into()
        }
        Identity::AgentServiceAccount => "system:serviceaccount:kube-system:nodeproof".into(),
        Identity::ClusterReader => {
            "system:serviceaccount:kube-system:nodeproof-cluster-check".into()
        }
        Identity::GateControllerServiceAccount => {
            "system:serviceaccount:nodeproof:nodeproof-gate-controller".into()
        }
    }
}

// Client certificates, as kube-apiserver's x509 authenticator: the TLS
// handshake only asks for one; each request is then authenticated from it:
// signed by the client CA, within its validity (an expired certificate is
// 401 Unauthorized, not a failed handshake), CN `system:node:<name>` the
// node identity.

/// The client certificate a connection presented (DER), if any.
#[derive(Debug, Clone, Default)]
pub struct PeerCert(pub Option<Vec<u8>>);

impl PeerCert {
    pub fn of(conn: &rustls::ServerConnection) -> Self {
        PeerCert(
            conn.peer_certificates()
                .and_then(|c| c.first())
                .map(|c| c.as_ref().to_vec()),
        )
    }
}

/// Who the credentials are (the authenticators' part of the state): bearer
/// tokens, and the CA client certificates are verified against.
#[derive(Default)]
pub struct Authn {
    pub tokens: BTreeMap<String, Identity>,
    pub client_ca_der: Vec<u8>,
}

impl Authn {
    /// Bearer token first, then the client certificate.
    pub fn authenticate(&self, headers: &HeaderMap, peer: &PeerCert) -> Option<Identity> {
        let token = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if let Some(t) = token {
            return self.tokens.get(t).cloned();
        }
        cert_identity(&self.client_ca_der, peer.0.as_deref()?)
    }
}

fn cert_identity(ca_der: &[u8], der: &[u8]) -> Option<Identity> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, ca) = X509Certificate::from_der(ca_der).ok()?;
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    cert.verify_signature(Some(ca.public_key())).ok()?;
    if !cert.validity().is_valid() {
        return None;
    }
    let cn = cert.subject().iter_common_name().next()?.as_str().ok()?;
    Some(Identity::Node(cn.strip_prefix("system:node:")?.to_string()))
}

/// The Node authorizer's rules on lists and watches: a node lists and
/// watches only the pods bound to it, only its own Node, and only its own
/// ResourceSlices (with selectors, as Kubernetes 1.32's
/// AuthorizeNodeWithSelectors requires).
pub fn list_allowed(who: &Identity, resource: &str, selector: Option<&str>) -> bool {
    match (who, resource) {
        (Identity::Node(me), "pods") => selector == Some(&format!("spec.nodeName={me}")),
        (Identity::Node(me), "nodes") => selector == Some(&format!("metadata.name={me}")),
        (Identity::Node(me), "resourceslices") => selector == Some(&format!("spec.nodeName={me}")),
        _ => true,
    }
}

pub fn forbidden_list(resource: &str) -> Answer {
    let message = match resource {
        "nodes" => "a node may only list and watch its own Node",
        "resourceslices" => "a node may only list and watch the ResourceSlices of its own node (fieldSelector spec.nodeName)",
        _ => "a node may only list and watch pods bound to it",
    };
    status(403, "Forbidden", message)
}

/// A node reads only the pods bound to it (the Node authorizer's graph).
pub fn node_may_get_pod(who: &Identity, pod_node: Option<&str>, name: &str) -> Option<Answer> {
    let me = who.node()?;
    (pod_node != Some(me)).then(|| {
        status(
            403,
            "Forbidden",
            &format!("pods \"{name}\" is forbidden: no relationship found between the node and this object"),
        )
    })
}

/// Since 1.32 the Node authorizer refuses a node's GET of another Node with
/// 403 (before, any node could read any Node), with kube-apiserver's
/// RBAC-style message and the authorizer's reason; nodes/status may be
/// patched by its node, not read.
pub fn node_may_get_node(who: &Identity, name: &str, status_subresource: bool) -> Option<Answer> {
    let me = who.node()?;
    if status_subresource {
        return Some(status(
            403,
            "Forbidden",
            "nodes/status \"get\" is forbidden for the node identity",
        ));
    }
    (me != name).then(|| status(
        403,
        "Forbidden",
        &format!(
            "nodes \"{name}\" is forbidden: User \"system:node:{me}\" cannot get resource \"nodes\" in API group \"\" at the cluster scope: node '{me}' cannot read '{name}', only its own Node object"
        ),
    ))
}

/// A node modifies only its own Node.
pub fn node_may_modify_node(who: &Identity, name: &str) -> Option<Answer> {
    let me = who.node()?;
    (me != name).then(|| {
        status(
            403,
            "Forbidden",
            &format!("node \"{me}\" is not allowed to modify node \"{name}\""),
        )
    })
}

/// Who may create a Node: a node identity (the Node authorizer allows
/// `create` on nodes and leaves to NodeRestriction which one:
/// plugin/pkg/auth/authorizer/node/node_authorizer.go, `authorizeNode`);
/// none of the ServiceAccounts here (no role in deploy/ grants `create` on
/// nodes), refused as RBAC refuses (403 with the authorizer's message,
/// k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go
/// `forbiddenMessage`; a create has no name yet).
pub fn may_create_node(who: &Identity) -> Option<Answer> {
    if who.node().is_some() {
        return None;
    }
    let (code, mut v) = status(
        403,
        "Forbidden",
        &format!(
            "nodes is forbidden: User \"{}\" cannot create resource \"nodes\" in API group \"\" at the cluster scope",
            user_name(who)
        ),
    );
    v["details"] = json!({"kind": "nodes"});
    Some((code, v))
}

/// `POST /apis/authentication.k8s.io/v1/selfsubjectreviews`, allowed to
/// every authenticated user by the default `system:basic-user` role.
pub fn self_subject_review(who: &Identity) -> Answer {
    let groups = match who {
        Identity::Node(_) => json!(["system:nodes", "system:authenticated"]),
        Identity::GateControllerServiceAccount => json!([
            "system:serviceaccounts",
            "system:serviceaccounts:nodeproof",
            "system:authenticated"
        ]),
        _ => json!([
            "system:serviceaccounts",
            "system:serviceaccounts:kube-system",
            "system:authenticated"
        ]),
    };
    let review: Value = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
           "metadata": {"creationTimestamp": null},
           "status": {"userInfo": {"username": user_name(who), "groups": groups}}});
    (201, review)
}

impl TestApiServer {
    pub fn add_token(&self, token: &str, who: Identity) {
        self.with(|s| s.part::<Authn>().tokens.insert(token.into(), who));
    }

    /// A token no longer authenticates anyone (a rotated-out ServiceAccount token).
    pub fn revoke_token(&self, token: &str) {
        self.with(|s| s.part::<Authn>().tokens.remove(token));
    }
}
