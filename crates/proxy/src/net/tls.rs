//! TLS on both sides of pgmux, with rustls: towards the database with libpq's `sslmode` semantics, and
//! towards clients when a certificate is configured.
//!
//! The trust anchors for the database are those the binary passes in (the RDS CA bundle) plus an optional
//! PEM file. `verify-full` checks the chain and the host name, `verify-ca` the chain only, and `require` /
//! `prefer` encrypt without checking, as libpq does.

use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
pub use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::SslMode;

/// TLS could not be set up from the configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{key}: {reason}")]
    File {
        /// The configuration key naming the file.
        key: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// rustls refused the material.
    #[error("{key}: {source}")]
    Rustls {
        /// The configuration key.
        key: &'static str,
        /// rustls's error.
        source: rustls::Error,
    },
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads every certificate in a PEM file.
pub fn certs_from_pem_file(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let bytes = std::fs::read(path)
        .map_err(|e| TlsSetupError::File { key, reason: format!("cannot read {}: {e}", path.display()) })?;
    certs_from_pem(key, &bytes)
}

/// Reads every certificate in PEM text.
pub fn certs_from_pem(key: &'static str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsSetupError::File { key, reason: format!("not a PEM certificate list: {e}") })?;
    if certs.is_empty() {
        return Err(TlsSetupError::File { key, reason: "holds no certificate".into() });
    }
    Ok(certs)
}

/// How pgmux speaks TLS to the database.
#[derive(Clone)]
pub struct ServerTls {
    mode: SslMode,
    connector: Option<TlsConnector>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").field("mode", &self.mode).finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Builds the client-side TLS settings for `mode`, trusting `roots` (for the verifying modes).
    pub fn new(mode: SslMode, roots: Vec<CertificateDer<'static>>) -> Result<Self, TlsSetupError> {
        if mode == SslMode::Disable {
            return Ok(ServerTls { mode, connector: None });
        }
        let provider = provider();
        let verifier: Arc<dyn ServerCertVerifier> = match mode {
            SslMode::VerifyCa | SslMode::VerifyFull => {
                let mut store = RootCertStore::empty();
                let (added, _ignored) = store.add_parsable_certificates(roots);
                if added == 0 {
                    return Err(TlsSetupError::File {
                        key: "ssl_root_cert",
                        reason: format!("sslmode={mode} needs trusted CA certificates and none were given"),
                    });
                }
                let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(store), Arc::clone(&provider))
                    .build()
                    .map_err(|e| TlsSetupError::File { key: "ssl_root_cert", reason: e.to_string() })?;
                if mode == SslMode::VerifyFull { webpki } else { Arc::new(AnyHostName(webpki)) }
            }
            _ => Arc::new(NoCheck(provider.signature_verification_algorithms)),
        };
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|source| TlsSetupError::Rustls { key: "sslmode", source })?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(ServerTls { mode, connector: Some(TlsConnector::from(Arc::new(config))) })
    }

    /// The mode.
    pub fn mode(&self) -> SslMode {
        self.mode
    }

    /// Completes the handshake after the server answered an SSLRequest with `S`.
    pub(crate) async fn handshake(
        &self,
        tcp: TcpStream,
        host: &str,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let connector = self.connector.as_ref().ok_or_else(|| std::io::Error::other("TLS is disabled"))?;
        let name = ServerName::try_from(host.to_owned())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("bad host name {host:?}")))?;
        connector.connect(name, tcp).await
    }
}

/// TLS towards the database and towards clients, as the configuration says; `extra_roots` are trusted
/// for the database besides `ssl_root_cert`.
pub(crate) fn from_config(
    config: &crate::config::Config,
    mut extra_roots: Vec<CertificateDer<'static>>,
) -> Result<(ServerTls, Option<TlsAcceptor>), TlsSetupError> {
    if let Some(path) = &config.ssl_root_cert {
        extra_roots.extend(certs_from_pem_file("ssl_root_cert", path)?);
    }
    let server = ServerTls::new(config.effective_sslmode(), extra_roots)?;
    Ok((server, client_from_config(config)?))
}

/// The TLS offered to clients, as `tls_mode`, `tls_cert`, `tls_key` and `tls_client_ca` say; `None` when
/// none is offered.
pub(crate) fn client_from_config(config: &crate::config::Config) -> Result<Option<TlsAcceptor>, TlsSetupError> {
    let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) else { return Ok(None) };
    if !config.offers_client_tls() {
        return Ok(None);
    }
    let cert_logins = matches!(config.client_auth, crate::config::ClientAuth::Hba | crate::config::ClientAuth::Cert);
    let (client_cas, optional) = match &config.tls_client_ca {
        Some(ca) if config.tls_mode.verifies_certificate() => (Some(ca.as_path()), false),
        // client_auth = hba or cert: a certificate is asked for, and checked if given; whether the login needs
        // one is the rules' business (a `cert` line), not the handshake's.
        Some(ca) if cert_logins => (Some(ca.as_path()), true),
        _ => (None, false),
    };
    acceptor(cert, key, client_cas, optional).map(Some)
}

/// Offers clients TLS with a configured certificate; with `client_cas`, asks each client for a certificate
/// and accepts only one whose chain leads to one of them.
pub fn client_acceptor(cert: &Path, key: &Path, client_cas: Option<&Path>) -> Result<TlsAcceptor, TlsSetupError> {
    acceptor(cert, key, client_cas, false)
}

/// [`client_acceptor`]; with `optional`, a client without a certificate is let through the handshake.
fn acceptor(cert: &Path, key: &Path, client_cas: Option<&Path>, optional: bool) -> Result<TlsAcceptor, TlsSetupError> {
    let certs = certs_from_pem_file("tls_cert", cert)?;
    let key_bytes = std::fs::read(key)
        .map_err(|e| TlsSetupError::File { key: "tls_key", reason: format!("cannot read {}: {e}", key.display()) })?;
    let private = PrivateKeyDer::from_pem_slice(&key_bytes)
        .map_err(|e| TlsSetupError::File { key: "tls_key", reason: format!("not a PEM private key: {e}") })?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsSetupError::Rustls { key: "tls_cert", source })?;
    let builder = match client_cas {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            let cas = certs_from_pem_file("tls_client_ca", path)?;
            for ca in cas.iter().cloned() {
                roots.add(ca).map_err(|source| TlsSetupError::Rustls { key: "tls_client_ca", source })?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
            let verifier = if optional { verifier.allow_unauthenticated() } else { verifier };
            let verifier =
                verifier.build().map_err(|e| TlsSetupError::File { key: "tls_client_ca", reason: e.to_string() })?;
            // X.509 v1 client certificates, which rustls's own verifier refuses, checked against the same CAs.
            let algorithms = provider().signature_verification_algorithms;
            builder.with_client_cert_verifier(Arc::new(super::v1_cert::WithV1::new(verifier, cas, algorithms)))
        }
    };
    let signer = provider()
        .key_provider
        .load_private_key(private)
        .map_err(|source| TlsSetupError::Rustls { key: "tls_key", source })?;
    let certified = rustls::sign::CertifiedKey::new(certs, signer);
    match certified.keys_match() {
        // A certificate rustls cannot read for its key (an X.509 v1 certificate, as `openssl x509 -req`
        // makes without extensions) is still one clients accept: it is offered as it is.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InvalidCertificate(e)) if format!("{e:?}").contains("UnsupportedCertVersion") => {}
        Err(source) => return Err(TlsSetupError::Rustls { key: "tls_key", source }),
    }
    let config = builder.with_cert_resolver(Arc::new(OneCertificate(Arc::new(certified))));
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The one certificate pgmux offers every client.
#[derive(Debug)]
struct OneCertificate(Arc<rustls::sign::CertifiedKey>);

impl rustls::server::ResolvesServerCert for OneCertificate {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }
}

/// `verify-ca`: the chain must lead to a trusted CA; the name in the certificate may be any.
#[derive(Debug)]
struct AnyHostName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `require` / `prefer`: encryption without authentication, as libpq does in those modes. The handshake's
/// own signatures are still checked.
#[derive(Debug)]
struct NoCheck(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for NoCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}
