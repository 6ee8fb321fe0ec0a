//! The cluster commands' credentials: a cluster reader's, not a node's
//! (`nodeproof cluster ...`, and the gate controller's: [`controller_client`]).
//! `--kubeconfig F` when given (read as the agent reads its own, with
//! credential files reloaded when they change), else kubectl's lookup
//! (`KUBECONFIG`, `~/.kube/config`, then the pod's ServiceAccount).
//! `--context NAME` picks that context of the kubeconfig, as `kubectl
//! --context` does, instead of its current-context.

use std::path::Path;

use crate::client;
use nodeproof_report::credentials::Source;
use nodeproof_report::reporter::ReportError;

#[derive(Debug, thiserror::Error)]
pub enum ClusterConnectError {
    #[error("unusable kubeconfig {}", path.display())]
    Kubeconfig {
        path: std::path::PathBuf,
        #[source]
        source: Box<ReportError>,
    },
    #[error("no cluster credentials (KUBECONFIG, ~/.kube/config, in-cluster ServiceAccount); try --kubeconfig")]
    Default(#[source] kube::Error),
    #[error("no context {context:?} in {kubeconfig} (it has {}): `kubectl config get-contexts` lists them", if .known.is_empty() { "none".to_string() } else { .known.join(", ") })]
    NoSuchContext {
        context: String,
        kubeconfig: String,
        known: Vec<String>,
    },
    #[error("cannot read kubeconfig {}", path.display())]
    ReadKubeconfig {
        path: std::path::PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("unusable kubeconfig {}", path.display())]
    UnusableKubeconfig {
        path: std::path::PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no in-cluster credentials and no kubeconfig")]
    Infer(#[source] kube::config::InferConfigError),
    #[error("cannot build the API client")]
    Build(#[source] kube::Error),
    #[error("context {context:?} of {kubeconfig} is unusable")]
    Context {
        context: String,
        kubeconfig: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The kube-rs configuration of `context` in `kubeconfig` (kubectl's file
/// when `None`: KUBECONFIG, else ~/.kube/config).
pub async fn config_for_context(
    kubeconfig: Option<&Path>,
    context: &str,
) -> Result<kube::Config, ClusterConnectError> {
    let named = kubeconfig.map_or_else(
        || "the kubeconfig (KUBECONFIG, ~/.kube/config)".to_string(),
        |p| format!("kubeconfig {}", p.display()),
    );
    let unusable =
        |source: Box<dyn std::error::Error + Send + Sync>| ClusterConnectError::Context {
            context: context.to_string(),
            kubeconfig: named.clone(),
            source,
        };
    let file = match kubeconfig {
        Some(p) => kube::config::Kubeconfig::read_from(p),
        None => kube::config::Kubeconfig::read(),
    }
    .map_err(|e| unusable(e.into()))?;
    if !file.contexts.iter().any(|c| c.name == context) {
        return Err(ClusterConnectError::NoSuchContext {
            context: context.to_string(),
            kubeconfig: named,
            known: file.contexts.iter().map(|c| c.name.clone()).collect(),
        });
    }
    let options = kube::config::KubeConfigOptions {
        context: Some(context.to_string()),
        ..Default::default()
    };
    kube::Config::from_custom_kubeconfig(file, &options)
        .await
        .map_err(|e| unusable(e.into()))
}

pub async fn client(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<kube::Client, ClusterConnectError> {
    if let Some(context) = context {
        let config = config_for_context(kubeconfig, context).await?;
        return kube::Client::try_from(config).map_err(|e| ClusterConnectError::Context {
            context: context.to_string(),
            kubeconfig: kubeconfig.map_or_else(String::new, |p| p.display().to_string()),
            source: e.into(),
        });
    }
    let Some(path) = kubeconfig else {
        return kube::Client::try_default()
            .await
            .map_err(ClusterConnectError::Default);
    };
    let failed = |source| ClusterConnectError::Kubeconfig {
        path: path.to_path_buf(),
        source: Box::new(source),
    };
    client::connect(&Source::Kubeconfig(path.to_path_buf()))
        .await
        .map_err(failed)?
        .ok_or_else(|| unreachable_none(path))
}

/// `client::connect` answers `None` only for `Source::None`.
fn unreachable_none(path: &Path) -> ClusterConnectError {
    ClusterConnectError::Kubeconfig {
        path: path.to_path_buf(),
        source: Box::new(ReportError::Credentials {
            source_desc: format!("kubeconfig {}", path.display()),
            source: "no client for this kubeconfig".into(),
        }),
    }
}

/// The gate controller's client: `context` of `kubeconfig` when given,
/// else `kubeconfig` as it is, else kube-rs's inference (in-cluster first,
/// then KUBECONFIG or ~/.kube/config): the controller runs as a Deployment.
pub async fn controller_client(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<kube::Client, ClusterConnectError> {
    if let Some(context) = context {
        let config = config_for_context(kubeconfig, context).await?;
        return kube::Client::try_from(config).map_err(ClusterConnectError::Build);
    }
    let config = match kubeconfig {
        Some(path) => {
            let k = kube::config::Kubeconfig::read_from(path).map_err(|source| {
                ClusterConnectError::ReadKubeconfig {
                    path: path.to_path_buf(),
                    source,
                }
            })?;
            kube::Config::from_custom_kubeconfig(k, &Default::default())
                .await
                .map_err(|source| ClusterConnectError::UnusableKubeconfig {
                    path: path.to_path_buf(),
                    source,
                })?
        }
        None => kube::Config::infer()
            .await
            .map_err(ClusterConnectError::Infer)?,
    };
    kube::Client::try_from(config).map_err(ClusterConnectError::Build)
}
