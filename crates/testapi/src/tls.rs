//! TLS: the serving certificate (self-signed, rcgen), the client CA, and a
//! handshake that asks for a client certificate without requiring one
//! (Go's `tls.RequestClientCert`, as kube-apiserver's): whether it
//! authenticates anyone is decided per request (`auth`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_rustls::rustls;

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
