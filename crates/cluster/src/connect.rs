//! The cluster commands' credentials: a cluster reader's, not a node's.
//! `--kubeconfig F` when given (read as the agent reads its own, with
//! credential files reloaded when they change), else kubectl's lookup
//! (`KUBECONFIG`, `~/.kube/config`, then the pod's ServiceAccount).

use std::path::Path;

use nodeproof_kube::client::{self, ReportError};
use nodeproof_kube::credentials::Source;

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("unusable kubeconfig {}", path.display())]
    Kubeconfig {
        path: std::path::PathBuf,
        #[source]
        source: Box<ReportError>,
    },
    #[error("no cluster credentials (KUBECONFIG, ~/.kube/config, in-cluster ServiceAccount); try --kubeconfig")]
    Default(#[source] kube::Error),
}

pub async fn client(kubeconfig: Option<&Path>) -> Result<kube::Client, ConnectError> {
    let Some(path) = kubeconfig else {
        return kube::Client::try_default()
            .await
            .map_err(ConnectError::Default);
    };
    let failed = |source| ConnectError::Kubeconfig {
        path: path.to_path_buf(),
        source: Box::new(source),
    };
    client::connect(&Source::Kubeconfig(path.to_path_buf()))
        .await
        .map_err(failed)?
        .ok_or_else(|| unreachable_none(path))
}

/// `client::connect` answers `None` only for `Source::None`.
fn unreachable_none(path: &Path) -> ConnectError {
    ConnectError::Kubeconfig {
        path: path.to_path_buf(),
        source: Box::new(ReportError::Credentials {
            source_desc: format!("kubeconfig {}", path.display()),
            source: "no client for this kubeconfig".into(),
        }),
    }
}
