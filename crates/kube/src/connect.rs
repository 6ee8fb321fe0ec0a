//! The one way nodeproof reaches the API server: the Node's name and the
//! credentials found from the `[report]` section (credentials::choose), a
//! client for them, the separate taint credential, and the marks that
//! follow from what connected. `check --report`, `pods` and the daemon's
//! reporter all start here.

use crate::client::{self, ReportError};
use crate::config::ReportConfig;
use crate::credentials::{self, Source};
use crate::marks::MarkPolicy;

/// What [`connect`] found.
pub struct Connection {
    pub node: String,
    /// Where the credentials came from, for the journal.
    pub credentials: String,
    /// `None`: no credentials anywhere (the caller logs instead of writing).
    pub client: Option<kube::Client>,
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

/// The client for the configured credentials and where they came from,
/// without a Node (reading one object by name needs none).
pub async fn api_client(
    config: &ReportConfig,
) -> Result<(Option<kube::Client>, String), ConnectError> {
    let source = credentials::choose_here(config.kubeconfig.as_deref());
    let described = source.describe();
    let client = client::connect(&source)
        .await
        .map_err(|e| ConnectError::Credentials {
            credentials: described.clone(),
            source: Box::new(e),
        })?;
    Ok((client, described))
}

/// Finds the Node's name and credentials and builds the clients. Contacts
/// nothing: a kube client connects on its first request.
pub async fn connect(config: &ReportConfig) -> Result<Connection, ConnectError> {
    let node =
        credentials::node_name_here(config.node_name.as_deref()).ok_or(ConnectError::NoNodeName)?;
    let (client, described) = api_client(config).await?;
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
    };
    Ok(Connection {
        node,
        credentials: described,
        client,
        taint_client,
        marks,
    })
}
