//! A small client of Toxiproxy's REST API: proxies and toxics, over one hand-written HTTP/1.1 request per
//! call on a std `TcpStream`, so that the test kit needs no HTTP or JSON crate. Bodies are built from
//! checked names and numbers only, so no JSON escaping is needed.

use std::fmt;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Toxiproxy answers within its own 25 s handler timeout; anything longer is a hung server.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// Responses are a few hundred bytes (a proxy with its toxics); more is a wrong server.
const MAX_RESPONSE: u64 = 1 << 20;

/// Which direction of a proxied connection a toxic acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Client to server.
    Upstream,
    /// Server to client.
    Downstream,
}

impl Stream {
    fn as_str(self) -> &'static str {
        match self {
            Stream::Upstream => "upstream",
            Stream::Downstream => "downstream",
        }
    }
}

/// The toxics the fault tests use, with Toxiproxy's attributes (times in milliseconds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ToxicKind {
    /// Delay every chunk by `latency` ± `jitter`.
    Latency { latency_ms: u64, jitter_ms: u64 },
    /// Pass nothing; close after `timeout_ms`, or never when 0 (a black hole).
    Timeout { timeout_ms: u64 },
    /// Reset the connection (RST) after `timeout_ms` once data arrives.
    ResetPeer { timeout_ms: u64 },
    /// At most `rate_kb` KB/s.
    Bandwidth { rate_kb: u64 },
    /// Delay the close by `delay_ms`.
    SlowClose { delay_ms: u64 },
    /// Close after `bytes` bytes.
    LimitData { bytes: u64 },
}

impl ToxicKind {
    fn type_name(self) -> &'static str {
        match self {
            ToxicKind::Latency { .. } => "latency",
            ToxicKind::Timeout { .. } => "timeout",
            ToxicKind::ResetPeer { .. } => "reset_peer",
            ToxicKind::Bandwidth { .. } => "bandwidth",
            ToxicKind::SlowClose { .. } => "slow_close",
            ToxicKind::LimitData { .. } => "limit_data",
        }
    }

    fn attributes(self) -> String {
        match self {
            ToxicKind::Latency { latency_ms, jitter_ms } => {
                format!(r#"{{"latency":{latency_ms},"jitter":{jitter_ms}}}"#)
            }
            ToxicKind::Timeout { timeout_ms } | ToxicKind::ResetPeer { timeout_ms } => {
                format!(r#"{{"timeout":{timeout_ms}}}"#)
            }
            ToxicKind::Bandwidth { rate_kb } => format!(r#"{{"rate":{rate_kb}}}"#),
            ToxicKind::SlowClose { delay_ms } => format!(r#"{{"delay":{delay_ms}}}"#),
            ToxicKind::LimitData { bytes } => format!(r#"{{"bytes":{bytes}}}"#),
        }
    }
}

/// One toxic on one direction of a proxy. `toxicity` is the share of connections it applies to (Toxiproxy
/// draws it once per connection, not per packet).
#[derive(Clone, Debug, PartialEq)]
pub struct Toxic {
    pub name: String,
    pub stream: Stream,
    pub toxicity: f32,
    pub kind: ToxicKind,
}

impl Toxic {
    /// A toxic on every connection, server to client (where a delay is felt once per round trip).
    pub fn new(name: &str, kind: ToxicKind) -> Toxic {
        Toxic { name: name.to_owned(), stream: Stream::Downstream, toxicity: 1.0, kind }
    }

    pub fn latency(name: &str, latency_ms: u64, jitter_ms: u64) -> Toxic {
        Toxic::new(name, ToxicKind::Latency { latency_ms, jitter_ms })
    }

    /// A black hole: nothing passes and the connection stays open.
    pub fn black_hole(name: &str) -> Toxic {
        Toxic::new(name, ToxicKind::Timeout { timeout_ms: 0 })
    }

    pub fn on(mut self, stream: Stream) -> Toxic {
        self.stream = stream;
        self
    }

    pub fn with_toxicity(mut self, toxicity: f32) -> Toxic {
        self.toxicity = toxicity;
        self
    }

    fn json(&self) -> Result<String, ApiError> {
        check_name(&self.name)?;
        if !(0.0..=1.0).contains(&self.toxicity) {
            return Err(ApiError::BadInput(format!("toxicity {} is not within 0..=1", self.toxicity)));
        }
        Ok(format!(
            r#"{{"name":"{}","type":"{}","stream":"{}","toxicity":{},"attributes":{}}}"#,
            self.name,
            self.kind.type_name(),
            self.stream.as_str(),
            self.toxicity,
            self.kind.attributes()
        ))
    }
}

/// What went wrong talking to Toxiproxy.
#[derive(Debug)]
pub enum ApiError {
    /// A name or value we refuse to send.
    BadInput(String),
    /// The API could not be reached, or the connection failed.
    Io(std::io::Error),
    /// Toxiproxy answered with an error status; its body says why.
    Status { status: u16, body: String },
    /// Not an HTTP response we understand.
    Malformed(String),
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::BadInput(what) => write!(f, "refused to send to Toxiproxy: {what}"),
            ApiError::Io(e) => write!(f, "Toxiproxy API: {e}"),
            ApiError::Status { status, body } => write!(f, "Toxiproxy API answered {status}: {}", body.trim()),
            ApiError::Malformed(what) => write!(f, "Toxiproxy API: malformed response: {what}"),
        }
    }
}

impl std::error::Error for ApiError {}

impl From<ApiError> for String {
    fn from(e: ApiError) -> String {
        e.to_string()
    }
}

/// A client of one Toxiproxy server's API.
#[derive(Clone, Copy, Debug)]
pub struct ToxiClient {
    api: SocketAddr,
}

impl ToxiClient {
    pub fn new(api: SocketAddr) -> ToxiClient {
        ToxiClient { api }
    }

    /// The server's version string (`/version`).
    pub fn version(&self) -> Result<String, ApiError> {
        self.request("GET", "/version", None)
    }

    /// Create an enabled proxy `name` listening on `listen` (`ip:0` picks a port) that forwards to
    /// `upstream`; returns the address it listens on.
    pub fn create_proxy(&self, name: &str, listen: &str, upstream: &str) -> Result<SocketAddr, ApiError> {
        check_name(name)?;
        check_address(listen)?;
        check_address(upstream)?;
        let body = format!(r#"{{"name":"{name}","listen":"{listen}","upstream":"{upstream}","enabled":true}}"#);
        let answer = self.request("POST", "/proxies", Some(&body))?;
        json_string_field(&answer, "listen")
            .and_then(|listen| listen.parse().ok())
            .ok_or_else(|| ApiError::Malformed(format!("no listen address in {answer:?}")))
    }

    pub fn delete_proxy(&self, name: &str) -> Result<(), ApiError> {
        check_name(name)?;
        self.request("DELETE", &format!("/proxies/{name}"), None).map(drop)
    }

    /// Disable (close every connection and refuse new ones) or enable a proxy.
    pub fn set_enabled(&self, name: &str, enabled: bool) -> Result<(), ApiError> {
        check_name(name)?;
        self.request("PATCH", &format!("/proxies/{name}"), Some(&format!(r#"{{"enabled":{enabled}}}"#))).map(drop)
    }

    pub fn add_toxic(&self, proxy: &str, toxic: &Toxic) -> Result<(), ApiError> {
        check_name(proxy)?;
        self.request("POST", &format!("/proxies/{proxy}/toxics"), Some(&toxic.json()?)).map(drop)
    }

    pub fn remove_toxic(&self, proxy: &str, toxic: &str) -> Result<(), ApiError> {
        check_name(proxy)?;
        check_name(toxic)?;
        self.request("DELETE", &format!("/proxies/{proxy}/toxics/{toxic}"), None).map(drop)
    }

    /// Enable every proxy and remove every toxic.
    pub fn reset(&self) -> Result<(), ApiError> {
        self.request("POST", "/reset", None).map(drop)
    }

    /// One request on a fresh connection (`Connection: close`); the body of a 2xx answer.
    fn request(&self, method: &str, path: &str, body: Option<&str>) -> Result<String, ApiError> {
        let mut stream = TcpStream::connect_timeout(&self.api, IO_TIMEOUT).map_err(ApiError::Io)?;
        stream.set_read_timeout(Some(IO_TIMEOUT)).map_err(ApiError::Io)?;
        stream.set_write_timeout(Some(IO_TIMEOUT)).map_err(ApiError::Io)?;
        let body = body.unwrap_or("");
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: pgmux-testkit\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.api,
            body.len()
        );
        stream.write_all(request.as_bytes()).map_err(ApiError::Io)?;
        let mut raw = Vec::new();
        stream.take(MAX_RESPONSE).read_to_end(&mut raw).map_err(ApiError::Io)?;
        let (status, body) = parse_response(&raw)?;
        if (200..300).contains(&status) { Ok(body) } else { Err(ApiError::Status { status, body }) }
    }
}

/// Status code and body of a whole HTTP/1.1 response (the server closes after it; chunked bodies, which Go
/// uses only for streamed answers, are decoded too).
pub(crate) fn parse_response(raw: &[u8]) -> Result<(u16, String), ApiError> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) =
        text.split_once("\r\n\r\n").ok_or_else(|| ApiError::Malformed(format!("no end of headers in {text:?}")))?;
    let status = head
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("HTTP/1.1 ").or_else(|| line.strip_prefix("HTTP/1.0 ")))
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| ApiError::Malformed(format!("no status line in {head:?}")))?;
    let chunked = head.lines().any(|l| l.to_ascii_lowercase().replace(' ', "") == "transfer-encoding:chunked");
    let body = if chunked { dechunk(body)? } else { body.to_owned() };
    Ok((status, body))
}

fn dechunk(mut body: &str) -> Result<String, ApiError> {
    let mut out = String::new();
    loop {
        let (size, rest) =
            body.split_once("\r\n").ok_or_else(|| ApiError::Malformed("truncated chunk size".to_owned()))?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| ApiError::Malformed(format!("bad chunk size {size:?}")))?;
        if size == 0 {
            return Ok(out);
        }
        let chunk = rest.get(..size).ok_or_else(|| ApiError::Malformed("truncated chunk".to_owned()))?;
        out.push_str(chunk);
        body = rest.get(size..).and_then(|r| r.strip_prefix("\r\n")).unwrap_or("");
    }
}

/// The value of `"field":"..."` in a flat JSON answer (Toxiproxy's proxy object), without unescaping: the
/// fields we read are addresses.
pub(crate) fn json_string_field(json: &str, field: &str) -> Option<String> {
    let key = format!("\"{field}\":");
    let start = json.find(&key)? + key.len();
    let rest = json[start..].trim_start().strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_owned())
}

/// Proxy and toxic names: what Toxiproxy accepts in a URL path and we can put in JSON unescaped.
fn check_name(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok { Ok(()) } else { Err(ApiError::BadInput(format!("name {name:?} (use [A-Za-z0-9_.-], at most 64)"))) }
}

fn check_address(address: &str) -> Result<(), ApiError> {
    let ok = !address.is_empty()
        && address.len() <= 255
        && address.bytes().all(|b| b.is_ascii_alphanumeric() || b".:-[]".contains(&b));
    if ok { Ok(()) } else { Err(ApiError::BadInput(format!("address {address:?}"))) }
}
