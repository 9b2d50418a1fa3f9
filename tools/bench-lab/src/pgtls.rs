//! TLS for the benchmark's own tokio-postgres clients, the way libpq does `sslmode=verify-full`: rustls
//! checks the server's chain against one CA file and its certificate against the host name connected to,
//! and SCRAM gets the `tls-server-end-point` channel binding (libpq's `channel_binding=prefer`), so that a
//! direct connection pays what libpq's would.

use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// `sslmode=verify-full` against one CA.
#[derive(Clone, Debug)]
pub struct VerifyFull {
    config: Arc<ClientConfig>,
}

impl VerifyFull {
    /// Trust exactly the certificates in the PEM file `ca`.
    pub fn new(ca: &Path) -> Result<VerifyFull, String> {
        let pem = std::fs::read(ca).map_err(|e| format!("reading {}: {e}", ca.display()))?;
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("{}: {e}", ca.display()))?;
            roots.add(cert).map_err(|e| format!("{}: {e}", ca.display()))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(VerifyFull { config: Arc::new(config) })
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> MakeTlsConnect<S> for VerifyFull {
    type Stream = Tls<S>;
    type TlsConnect = Handshake;
    type Error = io::Error;

    fn make_tls_connect(&mut self, host: &str) -> io::Result<Handshake> {
        let name = ServerName::try_from(host.to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{host:?}: {e}")))?;
        Ok(Handshake { connector: TlsConnector::from(Arc::clone(&self.config)), name })
    }
}

/// One handshake, with the name to check.
pub struct Handshake {
    connector: TlsConnector,
    name: ServerName<'static>,
}

impl std::fmt::Debug for Handshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handshake").field("name", &self.name).finish_non_exhaustive()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> TlsConnect<S> for Handshake {
    type Stream = Tls<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Tls<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move { self.connector.connect(self.name, stream).await.map(Tls) })
    }
}

/// A TLS stream tokio-postgres can run on.
#[derive(Debug)]
pub struct Tls<S>(TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for Tls<S> {
    /// `tls-server-end-point`: the hash of the server's certificate, SHA-256 for the certificates this lab
    /// makes (RFC 5929 uses the certificate's own hash, SHA-256 for anything weaker).
    fn channel_binding(&self) -> ChannelBinding {
        match self.0.get_ref().1.peer_certificates().and_then(|certs| certs.first()) {
            Some(cert) => ChannelBinding::tls_server_end_point(Sha256::digest(cert.as_ref()).to_vec()),
            None => ChannelBinding::none(),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Tls<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Tls<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
