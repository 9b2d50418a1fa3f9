//! The Prometheus endpoint of a sidecar (`metrics_listen`): `GET /metrics` in Prometheus text or
//! OpenMetrics (by `Accept`), `GET /healthz` for load balancers and probes (503 once shutdown began).
//!
//! A tiny HTTP/1.1 server on tokio rather than a web framework: two paths, one answer per connection
//! (`Connection: close`), a request head of at most 8 KiB read within 5 s. It follows `metrics_listen` as a
//! reload changes it (binds the new address, lets the old one go) and answers until pgmux exits, through a
//! graceful shutdown, so a scraper sees the drain.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pgmux_metrics::{Encoder, Format, encode_all, encode_readers};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::client::shared::Shared;
use crate::runtime::stop::{Level, Stop};

/// Longest request head read.
const MAX_HEAD: usize = 8 * 1024;
/// Time a scraper gets to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the configured address is looked at.
const FOLLOW: Duration = Duration::from_secs(1);

/// Serves `metrics_listen` (whatever it is at the moment) until pgmux stops.
pub(crate) async fn serve(shared: Arc<Shared>, stop: Stop) {
    let mut bound: Option<(SocketAddr, TcpListener)> = None;
    // On the process's beat, with maintenance.
    let mut follow = pgmux_timer::beat(FOLLOW);
    loop {
        let wanted = shared.config().metrics_listen;
        if bound.as_ref().map(|(a, _)| *a) != wanted {
            bound = None;
            if let Some(addr) = wanted {
                match TcpListener::bind(addr).await {
                    Ok(l) => {
                        tracing::info!(%addr, "serving /metrics and /healthz");
                        bound = Some((addr, l));
                    }
                    Err(e) => tracing::error!(%addr, error = %e, "cannot listen for /metrics; retrying"),
                }
            }
        }
        let accepted = async {
            match &bound {
                Some((_, l)) => l.accept().await.ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.reached(Level::Hard) => return,
            _ = follow.tick() => {}
            Some((stream, _)) = accepted => {
                let shared = Arc::clone(&shared);
                let stop = stop.clone();
                tokio::spawn(async move {
                    let _ = pgmux_timer::timeout(READ_TIMEOUT * 2, answer(&shared, &stop, stream)).await;
                });
            }
        }
    }
}

/// One request, one answer.
async fn answer(shared: &Shared, stop: &Stop, mut stream: TcpStream) -> std::io::Result<()> {
    let head = match pgmux_timer::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(Some(head))) => head,
        Ok(Ok(None)) => return respond(&mut stream, 400, "text/plain", "bad request\n", false).await,
        _ => return Ok(()),
    };
    let request = Request::parse(&head);
    let Some(request) = request.filter(|r| r.method == "GET" || r.method == "HEAD") else {
        return respond(&mut stream, 405, "text/plain", "only GET and HEAD\n", false).await;
    };
    let head_only = request.method == "HEAD";
    match request.path {
        "/metrics" => {
            let format = Format::from_accept(request.accept);
            let body = metrics_text(shared, format);
            respond(&mut stream, 200, format.content_type(), &body, head_only).await
        }
        "/healthz" if stop.level() == Level::Running => {
            respond(&mut stream, 200, "text/plain", "ok\n", head_only).await
        }
        "/healthz" => respond(&mut stream, 503, "text/plain", "shutting down\n", head_only).await,
        _ => respond(&mut stream, 404, "text/plain", "not found: try /metrics or /healthz\n", head_only).await,
    }
}

/// Every metric now, in `format`.
pub(crate) fn metrics_text(shared: &Shared, format: Format) -> String {
    let obs = shared.observer();
    obs.tick();
    let snap = obs.snapshot(shared.pools.gauges());
    let mut e = Encoder::new(format).with_created(obs.started_unix());
    encode_all(&mut e, &snap);
    encode_readers(&mut e, &crate::pools::readers::samples(&shared.pools));
    e.finish()
}

/// The request head up to its blank line; `None` if it is too long or the peer closed first.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(Some(String::from_utf8_lossy(&buf[..end]).into_owned()));
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
    }
}

/// What pgmux reads of a request.
#[derive(Debug, PartialEq, Eq)]
struct Request<'a> {
    method: &'a str,
    path: &'a str,
    accept: Option<&'a str>,
}

impl<'a> Request<'a> {
    fn parse(head: &'a str) -> Option<Request<'a>> {
        let mut lines = head.split("\r\n");
        let mut first = lines.next()?.split(' ');
        let (method, target) = (first.next()?, first.next()?);
        let path = target.split('?').next().unwrap_or(target);
        let accept = lines
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("accept"))
            .map(|(_, v)| v.trim());
        Some(Request { method, path, accept })
    }
}

async fn respond(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &str,
    head_only: bool,
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Service Unavailable",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    if !head_only {
        stream.write_all(body.as_bytes()).await?;
    }
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_request_line_and_accept() {
        let r = Request::parse("GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nACCEPT: application/openmetrics-text").unwrap();
        assert_eq!(r, Request { method: "GET", path: "/metrics", accept: Some("application/openmetrics-text") });
        assert_eq!(Request::parse("GET /healthz HTTP/1.0").unwrap().accept, None);
        assert!(Request::parse("").is_none());
    }
}
