//! Which Node a credential is: the kubelet's client certificate says
//! `CN=system:node:<name>, O=system:nodes` (the Node authorizer's identity,
//! kubernetes/plugin/pkg/auth/authorizer/node and `NodeIdentifier`), and a
//! credential whose identity the file does not show (a token, an exec
//! plugin) is asked through a SelfSubjectReview (authentication.k8s.io/v1,
//! GA in 1.28, allowed to every authenticated user by `system:basic-user`).
//! Pure apart from [`who_am_i`]: files are read through a function.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Api, PostParams};

/// The prefix of a node identity's user name (`system:node:<name>`).
pub const NODE_USER_PREFIX: &str = "system:node:";

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot parse kubeconfig {path}")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cannot read client certificate {path}")]
    ReadCertificate {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("client-certificate-data of user {user:?} is not base64")]
    Base64 {
        user: String,
        #[source]
        source: base64::DecodeError,
    },
    #[error("no PEM certificate in the client certificate of user {user:?}")]
    NoCertificate { user: String },
    #[error("cannot parse the client certificate of user {user:?}")]
    Certificate {
        user: String,
        #[source]
        source: x509_parser::nom::Err<x509_parser::error::X509Error>,
    },
}

/// The Node of a user name: `system:node:<name>` → `<name>`.
pub fn node_of_user(user: &str) -> Option<&str> {
    user.strip_prefix(NODE_USER_PREFIX)
        .filter(|n| !n.is_empty())
}

/// The Node the kubeconfig's current user is, from its client certificate
/// (`client-certificate-data`, or `client-certificate`, relative to the
/// kubeconfig's directory as client-go resolves it). `None`: no certificate
/// (token, exec plugin) or not a node's. `read` reads a file the
/// kubeconfig names (below the host root when it is the kubelet's).
pub fn node_of_kubeconfig(
    path: &Path,
    text: &str,
    read: impl Fn(&Path) -> std::io::Result<Vec<u8>>,
) -> Result<Option<String>, IdentityError> {
    let config =
        kube::config::Kubeconfig::from_yaml(text).map_err(|source| IdentityError::Kubeconfig {
            path: path.to_path_buf(),
            source,
        })?;
    let user_name = config
        .current_context
        .as_ref()
        .and_then(|c| config.contexts.iter().find(|n| &n.name == c))
        .and_then(|n| n.context.as_ref())
        .and_then(|c| c.user.clone());
    let Some(user_name) = user_name else {
        return Ok(None);
    };
    let Some(user) = config
        .auth_infos
        .iter()
        .find(|a| a.name == user_name)
        .and_then(|a| a.auth_info.as_ref())
    else {
        return Ok(None);
    };
    let pem = if let Some(data) = &user.client_certificate_data {
        base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|source| IdentityError::Base64 {
                user: user_name.clone(),
                source,
            })?
    } else if let Some(file) = &user.client_certificate {
        let file = path.parent().unwrap_or(Path::new("/")).join(file);
        read(&file).map_err(|source| IdentityError::ReadCertificate { path: file, source })?
    } else {
        return Ok(None);
    };
    node_of_pem(&pem, &user_name)
}

/// The Node of the first certificate in `pem` (kubeadm's
/// `kubelet-client-current.pem` holds the certificate and its key).
pub fn node_of_pem(pem: &[u8], user: &str) -> Result<Option<String>, IdentityError> {
    let block = x509_parser::pem::Pem::iter_from_buffer(pem)
        .flatten()
        .find(|p| p.label == "CERTIFICATE")
        .ok_or_else(|| IdentityError::NoCertificate { user: user.into() })?;
    let cert = block
        .parse_x509()
        .map_err(|source| IdentityError::Certificate {
            user: user.into(),
            source,
        })?;
    // The API server's x509 authenticator takes the user name from the
    // subject's CommonName (k8s.io/apiserver/pkg/authentication/request/x509);
    // Go's pkix.Name keeps the last CN of the RDN sequence.
    let cn = cert
        .subject()
        .iter_common_name()
        .last()
        .and_then(|cn| cn.as_str().ok());
    Ok(cn.and_then(node_of_user).map(str::to_string))
}

/// The user name the API server authenticates this client as.
pub async fn who_am_i(client: &kube::Client) -> Result<String, kube::Error> {
    let reviews: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = reviews
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    Ok(review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_default())
}

/// The Node this client's credential is, if it is a node identity other
/// than `node` (asked with a SelfSubjectReview; `None` if that fails).
pub async fn other_node(client: &kube::Client, node: &str) -> Option<String> {
    match who_am_i(client).await {
        Ok(user) => node_of_user(&user)
            .filter(|me| *me != node)
            .map(str::to_string),
        Err(e) => {
            tracing::debug!(error = %e, "SelfSubjectReview failed; the 403 stands");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(cn: &str) -> String {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().unwrap();
        let c = params.self_signed(&key).unwrap();
        // As kubeadm's kubelet-client-current.pem: certificate, then key.
        c.pem() + &key.serialize_pem()
    }

    fn kubeconfig(user: &str) -> String {
        format!("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\ncontexts:\n- name: ctx\n  context:\n    cluster: c\n    user: kubelet\ncurrent-context: ctx\nusers:\n- name: other\n  user:\n    token: t\n- name: kubelet\n  user:\n{user}")
    }

    fn no_files(p: &Path) -> std::io::Result<Vec<u8>> {
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            p.display().to_string(),
        ))
    }

    #[test]
    fn node_from_client_certificate_data() {
        let data = base64::engine::general_purpose::STANDARD.encode(cert("system:node:worker-1"));
        let text = kubeconfig(&format!("    client-certificate-data: {data}\n"));
        let got = node_of_kubeconfig(Path::new("/k"), &text, no_files).unwrap();
        assert_eq!(got.as_deref(), Some("worker-1"));
    }

    #[test]
    fn node_from_a_certificate_file_relative_to_the_kubeconfig() {
        // kubeadm: client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem
        let pem = cert("system:node:worker-2");
        let text = kubeconfig("    client-certificate: pki/kubelet-client-current.pem\n    client-key: pki/kubelet-client-current.pem\n");
        let read = |p: &Path| {
            assert_eq!(
                p,
                Path::new("/etc/kubernetes/pki/kubelet-client-current.pem")
            );
            Ok(pem.clone().into_bytes())
        };
        let got = node_of_kubeconfig(Path::new("/etc/kubernetes/kubelet.conf"), &text, read);
        assert_eq!(got.unwrap().as_deref(), Some("worker-2"));
    }

    #[test]
    fn not_a_node_or_no_certificate() {
        let data = base64::engine::general_purpose::STANDARD.encode(cert("admin"));
        let text = kubeconfig(&format!("    client-certificate-data: {data}\n"));
        assert_eq!(
            node_of_kubeconfig(Path::new("/k"), &text, no_files).unwrap(),
            None
        );
        let token = kubeconfig("    token: abc\n");
        assert_eq!(
            node_of_kubeconfig(Path::new("/k"), &token, no_files).unwrap(),
            None
        );
    }

    #[test]
    fn unreadable_or_broken_certificates_say_which() {
        let text = kubeconfig("    client-certificate: /gone.pem\n");
        let e = node_of_kubeconfig(Path::new("/k"), &text, no_files).unwrap_err();
        assert!(
            matches!(e, IdentityError::ReadCertificate { ref path, .. } if path == Path::new("/gone.pem")),
            "{e}"
        );
        let text = kubeconfig("    client-certificate-data: '!!'\n");
        let e = node_of_kubeconfig(Path::new("/k"), &text, no_files).unwrap_err();
        assert!(matches!(e, IdentityError::Base64 { .. }), "{e}");
        let e = node_of_pem(b"no pem here", "u").unwrap_err();
        assert!(matches!(e, IdentityError::NoCertificate { .. }), "{e}");
    }

    #[test]
    fn user_names() {
        assert_eq!(node_of_user("system:node:n1"), Some("n1"));
        assert_eq!(node_of_user("system:node:"), None);
        assert_eq!(
            node_of_user("system:serviceaccount:kube-system:nodeproof"),
            None
        );
    }
}
