//! The smallest HTTP(S) client that AWS API calls need: one request per connection over hyper's HTTP/1
//! connection API, TLS by rustls (ring) against the Mozilla roots. Secrets Manager is asked a handful of
//! times per process lifetime, so a pool, HTTP/2 or a client crate would buy nothing and cost binary size.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::{self, pki_types::ServerName};

use crate::AwsError;
use crate::error::chain;

/// Largest response body accepted (a secret value is at most 64 KiB).
const MAX_BODY: usize = 1024 * 1024;

/// Where requests go: parsed once from an endpoint URL such as `https://secretsmanager.us-east-1.amazonaws.com`
/// or `http://127.0.0.1:5000` (plain HTTP is for local stand-ins such as moto).
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// The URL as configured, for messages.
    pub url: String,
    pub https: bool,
    /// Host name or IP address, without IPv6 brackets: what is resolved, connected to and verified.
    host: String,
    port: u16,
    /// `host[:port]` as written in the URL: the `Host` header, and what gets signed.
    pub authority: String,
    /// The request path (`/` unless the URL has one).
    pub path: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let uri: Uri = url.parse().map_err(|e| format!("{url:?} is not a URL: {e}"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(format!("{url:?} must start with https:// (or http:// for a local stand-in)")),
        };
        let authority = uri.authority().ok_or_else(|| format!("{url:?} has no host"))?;
        let host = authority.host().trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("{url:?} has no host"));
        }
        if authority.as_str().contains('@') {
            return Err(format!("{url:?} must not contain user information"));
        }
        if uri.query().is_some() {
            return Err(format!("{url:?} must not have a query string"));
        }
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let path = match uri.path() {
            "" => "/".to_string(),
            path => path.to_string(),
        };
        Ok(Endpoint {
            url: url.to_string(),
            https,
            host: host.to_string(),
            port,
            authority: authority.as_str().to_string(),
            path,
        })
    }

    /// The host name or address, without IPv6 brackets.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The full URL of a request to this endpoint's path (what SigV4 signs).
    pub fn request_url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}{}", self.authority, self.path)
    }
}

/// A response, read whole.
#[derive(Debug)]
pub(crate) struct Response {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Sends requests for one AWS service; builds its TLS configuration on first HTTPS use.
#[derive(Debug)]
pub(crate) struct HttpsClient {
    service: &'static str,
    tls: OnceLock<Arc<rustls::ClientConfig>>,
}

impl HttpsClient {
    pub fn new(service: &'static str) -> Self {
        HttpsClient { service, tls: OnceLock::new() }
    }

    /// Sends `request` to `endpoint` on a new connection and reads the whole response, all within `timeout`.
    pub async fn send(
        &self,
        endpoint: &Endpoint,
        request: Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<Response, AwsError> {
        match tokio::time::timeout(timeout, self.send_inner(endpoint, request)).await {
            Ok(result) => result.map_err(|reason| AwsError::Transport {
                service: self.service,
                endpoint: endpoint.url.clone(),
                reason,
            }),
            Err(_) => Err(AwsError::Timeout { service: self.service, endpoint: endpoint.url.clone(), timeout }),
        }
    }

    async fn send_inner(&self, endpoint: &Endpoint, request: Request<Full<Bytes>>) -> Result<Response, String> {
        let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
            .await
            .map_err(|e| format!("cannot connect to {}:{}: {e}", endpoint.host, endpoint.port))?;
        // Best effort: a request is one or two segments, so Nagle only adds latency.
        let _ = tcp.set_nodelay(true);
        if !endpoint.https {
            return exchange(tcp, request).await;
        }
        let server_name = ServerName::try_from(endpoint.host.clone())
            .map_err(|e| format!("{:?} is not a valid TLS server name: {e}", endpoint.host))?;
        let connector = TlsConnector::from(self.tls_config()?);
        let tls = connector.connect(server_name, tcp).await.map_err(|e| format!("TLS handshake failed: {e}"))?;
        exchange(tls, request).await
    }

    fn tls_config(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        if let Some(config) = self.tls.get() {
            return Ok(config.clone());
        }
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        // An explicit provider: never depend on a process-wide default that another crate may have set.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup failed: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(self.tls.get_or_init(|| Arc::new(config)).clone())
    }
}

async fn exchange<S>(stream: S, request: Request<Full<Bytes>>) -> Result<Response, String>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake failed: {}", chain(&e)))?;
    // The connection task ends when `sender` is dropped at the end of this function.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let response = sender.send_request(request).await.map_err(|e| format!("HTTP request failed: {}", chain(&e)))?;
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|e| format!("reading the response failed: {}", chain(e.as_ref())))?
        .to_bytes();
    Ok(Response { status: parts.status.as_u16(), headers: parts.headers, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("https://secretsmanager.us-east-1.amazonaws.com").unwrap();
        assert!(e.https);
        assert_eq!((e.host.as_str(), e.port), ("secretsmanager.us-east-1.amazonaws.com", 443));
        assert_eq!(e.authority, "secretsmanager.us-east-1.amazonaws.com");
        assert_eq!(e.path, "/");
        assert_eq!(e.request_url(), "https://secretsmanager.us-east-1.amazonaws.com/");

        let e = Endpoint::parse("http://127.0.0.1:5000/").unwrap();
        assert!(!e.https);
        assert_eq!((e.host.as_str(), e.port, e.authority.as_str()), ("127.0.0.1", 5000, "127.0.0.1:5000"));

        let e = Endpoint::parse("http://[::1]:4566").unwrap();
        assert_eq!((e.host.as_str(), e.port, e.authority.as_str()), ("::1", 4566, "[::1]:4566"));

        assert!(Endpoint::parse("secretsmanager.us-east-1.amazonaws.com").is_err());
        assert!(Endpoint::parse("ftp://x").is_err());
        assert!(Endpoint::parse("https://user:pw@x").is_err());
        assert!(Endpoint::parse("https://x/?a=b").is_err());
    }

    #[test]
    fn tls_config_builds_with_ring() {
        let client = HttpsClient::new("test");
        let config = client.tls_config().unwrap();
        assert!(Arc::ptr_eq(&config, &client.tls_config().unwrap()));
    }
}
