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

/// Why an endpoint URL cannot be used; each message quotes the URL.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EndpointError {
    #[error("{url:?} is not a URL: {reason}")]
    NotAUrl { url: String, reason: String },
    #[error("{0:?} must start with https:// (or http:// for a local stand-in)")]
    Scheme(String),
    #[error("{0:?} has no host")]
    NoHost(String),
    #[error("{0:?} must not contain user information")]
    UserInfo(String),
    #[error("{0:?} must not have a query string")]
    Query(String),
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, EndpointError> {
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| EndpointError::NotAUrl { url: url.into(), reason: e.to_string() })?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(EndpointError::Scheme(url.into())),
        };
        let authority = uri.authority().ok_or_else(|| EndpointError::NoHost(url.into()))?;
        let host = authority.host().trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(EndpointError::NoHost(url.into()));
        }
        if authority.as_str().contains('@') {
            return Err(EndpointError::UserInfo(url.into()));
        }
        if uri.query().is_some() {
            return Err(EndpointError::Query(url.into()));
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
        match pgmux_timer::timeout(timeout, self.send_inner(endpoint, request)).await {
            Ok(result) => result.map_err(|failure| AwsError::Transport {
                service: self.service,
                endpoint: endpoint.url.clone(),
                reason: failure.to_string(),
            }),
            Err(_) => Err(AwsError::Timeout { service: self.service, endpoint: endpoint.url.clone(), timeout }),
        }
    }

    async fn send_inner(&self, endpoint: &Endpoint, request: Request<Full<Bytes>>) -> Result<Response, Failure> {
        let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
            .await
            .map_err(|source| Failure::Connect { host: endpoint.host.clone(), port: endpoint.port, source })?;
        // Best effort: a request is one or two segments, so Nagle only adds latency.
        let _ = tcp.set_nodelay(true);
        if !endpoint.https {
            return exchange(tcp, request).await;
        }
        let server_name = ServerName::try_from(endpoint.host.clone())
            .map_err(|source| Failure::ServerName { host: endpoint.host.clone(), source })?;
        let connector = TlsConnector::from(self.tls_config().map_err(Failure::TlsSetup)?);
        let tls = connector.connect(server_name, tcp).await.map_err(Failure::TlsHandshake)?;
        exchange(tls, request).await
    }

    fn tls_config(&self) -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
        if let Some(config) = self.tls.get() {
            return Ok(config.clone());
        }
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        // An explicit provider: never depend on a process-wide default that another crate may have set.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(self.tls.get_or_init(|| Arc::new(config)).clone())
    }
}

/// Why a request got no HTTP answer (`AwsError::Transport` carries the message).
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("cannot connect to {host}:{port}: {source}")]
    Connect { host: String, port: u16, source: std::io::Error },
    #[error("{host:?} is not a valid TLS server name: {source}")]
    ServerName { host: String, source: rustls::pki_types::InvalidDnsNameError },
    #[error("TLS setup failed: {0}")]
    TlsSetup(rustls::Error),
    #[error("TLS handshake failed: {0}")]
    TlsHandshake(std::io::Error),
    #[error("HTTP handshake failed: {}", chain(.0))]
    HttpHandshake(hyper::Error),
    #[error("HTTP request failed: {}", chain(.0))]
    Request(hyper::Error),
    #[error("reading the response failed: {}", chain(.0.as_ref()))]
    Body(Box<dyn std::error::Error + Send + Sync>),
}

async fn exchange<S>(stream: S, request: Request<Full<Bytes>>) -> Result<Response, Failure>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(Failure::HttpHandshake)?;
    // The connection task ends when `sender` is dropped at the end of this function.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let response = sender.send_request(request).await.map_err(Failure::Request)?;
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, MAX_BODY).collect().await.map_err(Failure::Body)?.to_bytes();
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

        assert!(matches!(Endpoint::parse("secretsmanager.us-east-1.amazonaws.com"), Err(EndpointError::Scheme(_))));
        let err = Endpoint::parse("ftp://x").unwrap_err();
        assert_eq!(err.to_string(), "\"ftp://x\" must start with https:// (or http:// for a local stand-in)");
        assert_eq!(
            Endpoint::parse("https://user:pw@x").unwrap_err(),
            EndpointError::UserInfo("https://user:pw@x".into())
        );
        assert_eq!(Endpoint::parse("https://x/?a=b").unwrap_err(), EndpointError::Query("https://x/?a=b".into()));
        assert!(matches!(Endpoint::parse("http://a b"), Err(EndpointError::NotAUrl { .. })));
    }

    #[tokio::test]
    async fn a_refused_connection_names_the_address() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let endpoint = Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let request = Request::get("/").body(Full::new(Bytes::new())).unwrap();
        let err = HttpsClient::new("test").send(&endpoint, request, Duration::from_secs(5)).await.unwrap_err();
        let AwsError::Transport { reason, .. } = err else { panic!("{err:?}") };
        assert!(reason.starts_with(&format!("cannot connect to 127.0.0.1:{port}: ")), "{reason}");
    }

    #[test]
    fn tls_config_builds_with_ring() {
        let client = HttpsClient::new("test");
        let config = client.tls_config().unwrap();
        assert!(Arc::ptr_eq(&config, &client.tls_config().unwrap()));
    }
}
