//! TLS: the serving certificate (self-signed, rcgen), the client CA, and a
//! handshake that asks for a client certificate without requiring one
//! (Go's `tls.RequestClientCert`, as kube-apiserver's): whether it
//! authenticates anyone is decided per request (`auth`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_rustls::rustls;

use crate::state::TestApiServer;

/// A serving certificate and its key, PEM.
#[derive(Clone)]
pub struct ServingCert {
    pub cert_pem: String,
    pub key_pem: String,
}

impl ServingCert {
    /// A fresh self-signed certificate for 127.0.0.1.
    pub fn generate() -> ServingCert {
        let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()])
            .expect("self-signed certificate");
        ServingCert {
            cert_pem: certified.cert.pem(),
            key_pem: certified.signing_key.serialize_pem(),
        }
    }

    /// `dir/serving.pem` and `dir/serving.key`, made and kept on first use.
    pub fn kept_in(dir: &Path) -> ServingCert {
        let (c, k) = (dir.join("serving.pem"), dir.join("serving.key"));
        if let (Ok(cert_pem), Ok(key_pem)) =
            (std::fs::read_to_string(&c), std::fs::read_to_string(&k))
        {
            return ServingCert { cert_pem, key_pem };
        }
        let fresh = ServingCert::generate();
        std::fs::write(&c, &fresh.cert_pem).expect("write serving.pem");
        std::fs::write(&k, &fresh.key_pem).expect("write serving.key");
        fresh
    }

    /// The server's TLS configuration: this certificate, client
    /// certificates asked for and checked per request.
    pub fn server_config(&self) -> rustls::ServerConfig {
        use rustls::pki_types::pem::PemObject;
        let cert_der = rustls::pki_types::CertificateDer::from_pem_slice(self.cert_pem.as_bytes())
            .expect("certificate PEM");
        let key_der = rustls::pki_types::PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .expect("key PEM");
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_client_cert_verifier(Arc::new(RequestClientCert))
        .with_single_cert(vec![cert_der], key_der)
        .expect("server certificate")
    }
}

/// Asks every client for a certificate and accepts whatever it presents:
/// whether it authenticates anyone is decided per request.
#[derive(Debug)]
struct RequestClientCert;

impl rustls::server::danger::ClientCertVerifier for RequestClientCert {
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &rustls::crypto::ring::default_provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &rustls::crypto::ring::default_provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The client CA: its issuer (to sign with) and its certificate (DER).
pub fn client_ca() -> (rcgen::Issuer<'static, rcgen::KeyPair>, Vec<u8>) {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "nodeproof test client CA");
    let key = rcgen::KeyPair::generate().expect("CA key");
    let der = params
        .self_signed(&key)
        .expect("CA certificate")
        .der()
        .to_vec();
    (rcgen::Issuer::new(params, key), der)
}

/// A client certificate and key (PEM) for `system:node:<node>` in group
/// `system:nodes`, signed by `ca`, valid from a minute ago for `valid_for`.
pub fn node_client_cert(
    ca: &rcgen::Issuer<'static, rcgen::KeyPair>,
    node: &str,
    valid_for: Duration,
) -> (String, String) {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - Duration::from_secs(60);
    params.not_after = now + valid_for;
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, ca).expect("certificate");
    (cert.pem(), key.serialize_pem())
}

/// A self-signed certificate and key (PEM), CN `common_name`, O
/// `system:nodes`: what a kubeconfig carries for the agent to read its
/// node name from.
pub fn self_signed_client_cert(common_name: &str) -> (String, String) {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

// Credentials and kubeconfigs, as tests hand them to the agent.

impl TestApiServer {
    /// The CA a client needs to trust this server (its self-signed certificate).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A client certificate and key (PEM) for `system:node:<node>` in group
    /// `system:nodes`, as the kubelet's, valid from a minute ago for `valid_for`.
    pub fn node_client_cert(&self, node: &str, valid_for: Duration) -> (String, String) {
        node_client_cert(&self.client_ca, node, valid_for)
    }

    fn write_kubeconfig(&self, dir: &Path, file: &str, user: &str) -> PathBuf {
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, &self.ca_pem).unwrap();
        let path = dir.join(file);
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: https://{addr}\n    certificate-authority: {ca}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: u\ncurrent-context: test\nusers:\n- name: u\n  user:\n{user}",
                addr = self.addr,
                ca = ca.display()
            ),
        )
        .unwrap();
        path
    }

    /// A kubeconfig for `token` (the CA as a file, as kubeadm's are).
    pub fn kubeconfig(&self, dir: &Path, token: &str) -> PathBuf {
        self.write_kubeconfig(
            dir,
            &format!("{token}.kubeconfig"),
            &format!("    token: {token}\n"),
        )
    }

    /// [`TestApiServer::kubeconfig`] with a second context, `gone`, made the
    /// current one, on a port nothing listens on: only `--context test`
    /// reaches this server (`kubectl --context` semantics).
    pub fn kubeconfig_two_contexts(&self, dir: &Path, token: &str) -> PathBuf {
        let good = std::fs::read_to_string(self.kubeconfig(dir, token)).unwrap();
        let two = good
            .replace("current-context: test", "current-context: gone")
            .replace(
                "contexts:\n",
                "contexts:\n- name: gone\n  context:\n    cluster: gone\n    user: u\n",
            )
            .replace(
                "clusters:\n",
                "clusters:\n- name: gone\n  cluster:\n    server: https://127.0.0.1:9\n",
            );
        let path = dir.join(format!("{token}-two.kubeconfig"));
        std::fs::write(&path, two).unwrap();
        path
    }

    /// A kubeconfig whose user reads its bearer token from `token_file`.
    pub fn token_file_kubeconfig(&self, dir: &Path, token_file: &Path) -> PathBuf {
        self.write_kubeconfig(
            dir,
            "token-file.kubeconfig",
            &format!("    tokenFile: {}\n", token_file.display()),
        )
    }

    /// A kubeconfig authenticating with a client certificate and key file,
    /// as kubeadm's kubelet.conf does.
    pub fn cert_kubeconfig(&self, dir: &Path, cert: &Path, key: &Path) -> PathBuf {
        self.write_kubeconfig(
            dir,
            "kubelet.conf",
            &format!(
                "    client-certificate: {}\n    client-key: {}\n",
                cert.display(),
                key.display()
            ),
        )
    }

    /// A kubeconfig for `token` that also carries a client certificate
    /// (`client-certificate-data`, CN `common_name`, O `system:nodes`), as a
    /// kubelet's does; the server authenticates by the token, the agent
    /// reads the certificate to know which Node it is.
    pub fn kubeconfig_with_client_cert(
        &self,
        dir: &Path,
        token: &str,
        common_name: &str,
    ) -> PathBuf {
        let (cert, key) = self_signed_client_cert(common_name);
        use base64::Engine as _;
        let b64 = |s: String| base64::engine::general_purpose::STANDARD.encode(s);
        let plain = self.kubeconfig(dir, token);
        let text = std::fs::read_to_string(&plain).unwrap().replace(
            &format!("    token: {token}\n"),
            &format!(
                "    token: {token}\n    client-certificate-data: {}\n    client-key-data: {}\n",
                b64(cert),
                b64(key)
            ),
        );
        let path = dir.join(format!("{token}-cert.kubeconfig"));
        std::fs::write(&path, text).unwrap();
        path
    }
}
