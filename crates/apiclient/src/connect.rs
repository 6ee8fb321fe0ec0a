//! The one way nodeproof reaches the API server: the Node's name and the
//! credentials found from the `[report]` section (credentials::lookup), a
//! client for them, the separate taint credential, and the marks that
//! follow from what connected. `check --report`, `pods` and the daemon's
//! reporter all start here.

use std::path::Path;

use nodeproof_report::config::ReportConfig;
use nodeproof_report::credentials::{self, Host, Lookup, NameFrom, Source};
use nodeproof_report::marks::MarkPolicy;
use nodeproof_report::reporter::ReportError;

use crate::client;
use crate::identity;

/// What [`connect`] found.
pub struct Connection {
    pub node: String,
    /// Where the credentials came from, for the journal.
    pub credentials: String,
    /// The Node the credential is (`system:node:<name>` in its client
    /// certificate), when the kubeconfig shows it.
    pub identity: Option<String>,
    /// `None`: no credentials anywhere (the caller logs instead of writing).
    pub client: Option<kube::Client>,
    /// The successes of `client`'s API server, heard from every client of
    /// this process (see [`client::Answered`]); `None` without a client.
    pub answered: Option<client::Answered>,
    /// The client for taints (NodeRestriction refuses a node's own taint
    /// changes); `None` when `taint-kubeconfig` is unset.
    pub taint_client: Option<kube::Client>,
    /// Labels as configured; taints only when the taint credential
    /// connected, so nothing is wanted that nothing can write.
    pub marks: MarkPolicy,
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot tell which Node this is: set --node-name, report.node-name or NODE_NAME")]
    NoNodeName,
    /// The Node authorizer lets a node identity read and write only its own
    /// Node: reporting as another one can only be refused.
    #[error("this credential is node {identity}; configured node name is {configured} (from {}, credentials: {credentials})", from.as_str())]
    NodeNameMismatch {
        identity: String,
        configured: String,
        from: NameFrom,
        credentials: String,
    },
    #[error("unusable credentials ({credentials})")]
    Credentials {
        credentials: String,
        #[source]
        source: Box<ReportError>,
    },
    #[error("unusable taint credentials ({credentials})")]
    TaintCredentials {
        credentials: String,
        #[source]
        source: Box<ReportError>,
    },
}

/// Where the credentials are, as `connect` finds them (for `check` to say).
pub fn lookup(config: &ReportConfig) -> Lookup {
    let mut found =
        credentials::lookup_here(config.kubeconfig.as_deref(), config.host_root.as_deref());
    // The context picks within the kubeconfig given; the kubelet's has one.
    if let (Source::Kubeconfig(path), Some(context)) = (&found.source, &config.context) {
        found.source = Source::KubeconfigContext {
            path: path.clone(),
            context: context.clone(),
        };
    }
    found
}

/// The client for the configured credentials and where they came from,
/// without a Node (reading one object by name needs none).
pub async fn api_client(
    config: &ReportConfig,
) -> Result<(Option<kube::Client>, String), ConnectError> {
    let (client, found) = client_for(&lookup(config)).await?;
    Ok((client, found))
}

async fn client_for(found: &Lookup) -> Result<(Option<kube::Client>, String), ConnectError> {
    let (client, described, _) = answered_client_for(found).await?;
    Ok((client, described))
}

async fn answered_client_for(
    found: &Lookup,
) -> Result<(Option<kube::Client>, String, Option<client::Answered>), ConnectError> {
    let described = found.describe();
    let connected =
        client::connect_answered(&found.source)
            .await
            .map_err(|e| ConnectError::Credentials {
                credentials: described.clone(),
                source: Box::new(e),
            })?;
    let (client, answered) = connected.unzip();
    Ok((client, described, answered))
}

/// The Node the found kubeconfig's client certificate is. A certificate
/// that cannot be read or parsed is logged and passed over: loading the
/// kubeconfig says what is wrong with it, or the API server does.
fn identity_of(found: &Lookup, host: &Host) -> Option<String> {
    // An explicit kubeconfig names files on this machine; the kubelet's, on the host.
    let below_host = matches!(found.source, Source::Kubelet(_));
    let (path, host_path) = match (&found.source, &found.host_path) {
        (Source::Kubeconfig(p), _) | (Source::KubeconfigContext { path: p, .. }, _) => (p, p),
        (Source::Kubelet(p), Some(h)) => (p, h),
        _ => return None,
    };
    let read = |p: &Path| {
        if below_host {
            host.read(p)
        } else {
            std::fs::read(p)
        }
    };
    let text = std::fs::read_to_string(path).ok()?;
    match identity::node_of_kubeconfig(host_path, &text, read) {
        Ok(node) => node,
        Err(e) => {
            tracing::warn!(error = %nodeproof_findings::errors::error_chain(&e), "cannot tell which node the credential is");
            None
        }
    }
}

/// Finds the Node's name and credentials and builds the clients. Contacts
/// nothing: a kube client connects on its first request.
pub async fn connect(config: &ReportConfig) -> Result<Connection, ConnectError> {
    let host = config
        .host_root
        .as_deref()
        .map_or_else(Host::real, Host::new);
    let found = lookup(config);
    let identity = identity_of(&found, &host);
    let (node, from) =
        credentials::node_name_from_here(config.node_name.as_deref(), identity.as_deref())
            .ok_or(ConnectError::NoNodeName)?;
    if let Some(identity) = identity.as_ref().filter(|i| **i != node) {
        return Err(ConnectError::NodeNameMismatch {
            identity: identity.clone(),
            configured: node,
            from,
            credentials: found.describe(),
        });
    }
    let (client, described, answered) = answered_client_for(&found).await?;
    let taint_client = match &config.taint_kubeconfig {
        Some(path) => {
            let taints = Source::Kubeconfig(path.clone());
            client::connect(&taints)
                .await
                .map_err(|e| ConnectError::TaintCredentials {
                    credentials: taints.describe(),
                    source: Box::new(e),
                })?
        }
        None => None,
    };
    let marks = MarkPolicy {
        labels: config.labels,
        taint_kinds: if taint_client.is_some() {
            MarkPolicy::default_taint_kinds()
        } else {
            Default::default()
        },
        contract_labels: config.runtimeclass_labels(),
    };
    Ok(Connection {
        node,
        credentials: described,
        identity,
        client,
        answered,
        taint_client,
        marks,
    })
}
