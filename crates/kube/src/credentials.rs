//! Which credentials to report with, and as which Node. Pure: the file
//! system and environment are passed in, so the order is tested as data.

use std::path::{Path, PathBuf};

/// The kubelet's own kubeconfig: with it nodeproof acts as
/// `system:node:<name>` under the Node authorizer and NodeRestriction.
pub const KUBELET_KUBECONFIG: &str = "/etc/kubernetes/kubelet.conf";

/// Where in-cluster credentials live (a ServiceAccount token).
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `--kubeconfig` or the config file's `report.kubeconfig`.
    Kubeconfig(PathBuf),
    /// The kubelet's kubeconfig (node identity).
    Kubelet(PathBuf),
    /// A pod's ServiceAccount.
    InCluster,
    /// Nothing found: log what would be written instead.
    None,
}

impl Source {
    pub fn describe(&self) -> String {
        match self {
            Source::Kubeconfig(p) => format!("kubeconfig {}", p.display()),
            Source::Kubelet(p) => format!("the kubelet's kubeconfig {}", p.display()),
            Source::InCluster => "in-cluster ServiceAccount".into(),
            Source::None => "no credentials (log only)".into(),
        }
    }
}

/// The lookup order: explicit kubeconfig, the kubelet's kubeconfig (if
/// readable), in-cluster, none.
pub fn choose(
    explicit: Option<&Path>,
    readable: impl Fn(&Path) -> bool,
    env: impl Fn(&str) -> Option<String>,
) -> Source {
    if let Some(path) = explicit {
        // Explicit wins even if unreadable: loading it then says why.
        return Source::Kubeconfig(path.to_path_buf());
    }
    let kubelet = Path::new(KUBELET_KUBECONFIG);
    if readable(kubelet) {
        return Source::Kubelet(kubelet.to_path_buf());
    }
    if env("KUBERNETES_SERVICE_HOST").is_some() && readable(Path::new(SERVICE_ACCOUNT_TOKEN)) {
        return Source::InCluster;
    }
    Source::None
}

/// `choose` against this machine.
pub fn choose_here(explicit: Option<&Path>) -> Source {
    choose(
        explicit,
        |p| std::fs::File::open(p).is_ok(),
        |k| std::env::var(k).ok(),
    )
}

/// The Node to report on: configured, then `NODE_NAME`, then the hostname
/// (lowercased, as the kubelet registers it).
pub fn node_name(
    configured: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
    hostname: impl FnOnce() -> Option<String>,
) -> Option<String> {
    configured
        .map(str::to_string)
        .or_else(|| env("NODE_NAME"))
        .filter(|n| !n.trim().is_empty())
        .or_else(|| hostname().map(|h| h.trim().to_lowercase()))
        .filter(|n| !n.is_empty())
}

/// `node_name` against this machine.
pub fn node_name_here(configured: Option<&str>) -> Option<String> {
    node_name(
        configured,
        |k| std::env::var(k).ok(),
        || std::fs::read_to_string("/proc/sys/kernel/hostname").ok(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_order() {
        let none = |_: &str| None;
        let all = |_: &Path| true;
        let only_sa = |p: &Path| p == Path::new(SERVICE_ACCOUNT_TOKEN);
        let in_cluster = |k: &str| (k == "KUBERNETES_SERVICE_HOST").then(|| "10.0.0.1".into());
        assert_eq!(
            choose(Some(Path::new("/k")), all, in_cluster),
            Source::Kubeconfig("/k".into())
        );
        assert_eq!(
            choose(None, all, in_cluster),
            Source::Kubelet(KUBELET_KUBECONFIG.into())
        );
        assert_eq!(choose(None, only_sa, in_cluster), Source::InCluster);
        assert_eq!(choose(None, only_sa, none), Source::None);
        assert_eq!(choose(None, |_| false, in_cluster), Source::None);
    }

    #[test]
    fn node_name_order() {
        let env = |k: &str| (k == "NODE_NAME").then(|| "from-env".into());
        let host = || Some("Worker-1\n".into());
        assert_eq!(node_name(Some("cfg"), env, host).as_deref(), Some("cfg"));
        assert_eq!(node_name(None, env, host).as_deref(), Some("from-env"));
        assert_eq!(node_name(None, |_| None, host).as_deref(), Some("worker-1"));
        assert_eq!(node_name(None, |_| None, || None), None);
    }
}
