//! pgmux as an external Lambda extension: register for SHUTDOWN only, poll `event/next` at once in the
//! background so Init is not held up, and hand the SHUTDOWN event (reason, epoch-ms deadline) to the caller.
//!
//! Built on the lambda-extension crate's pieces (its Runtime API client, event types and error request
//! builder) rather than its `Extension` runner, which reads `AWS_LAMBDA_RUNTIME_API` from the process
//! environment (and panics without it), cannot be pointed at a test simulator, polls `event/next` again after
//! SHUTDOWN, and hides its register and next request builders. The `*_with` variants here take the Runtime
//! API address explicitly; the others read it from `AWS_LAMBDA_RUNTIME_API`. `event/next` goes out on a
//! hyper connection of its own, which can say when its request has been written.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Method, Request, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use lambda_extension::requests::{ErrorRequest, init_error};
use lambda_extension::{NextEvent, ShutdownEvent};
use lambda_runtime_api_client::body::Body;
use lambda_runtime_api_client::{PooledClient, build_request};
use parking_lot::{Mutex, MutexGuard};
use serde::Deserialize;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::AwsError;
use crate::error::{chain, snippet};

const SERVICE: &str = "the Lambda Extensions API";
const ID_HEADER: &str = "Lambda-Extension-Identifier";
/// Register and init/error are local calls that answer at once; only `event/next` blocks (without limit).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Registrations made by this process, by Runtime API address: Lambda accepts one registration per
/// extension process, and [`report_init_error`] must reuse it when [`start`] already registered.
static REGISTRATIONS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// What Lambda said when the extension registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The `Lambda-Extension-Identifier` sent on every later call.
    pub extension_id: String,
    /// The function this environment runs.
    pub function_name: String,
    /// Its version (`$LATEST`, or the published version on Lambda Managed Instances).
    pub function_version: String,
    /// The account id (Lambda sends it because the registration asks for the `accountId` feature).
    pub account_id: Option<String>,
}

/// The SHUTDOWN event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shutdown {
    /// `spindown`, `timeout` or `failure` in any case Lambda sent it, normalised to lower case; any other
    /// value as sent.
    pub reason: String,
    /// When Lambda kills the process: Unix epoch milliseconds (not a duration, whatever older docs say).
    pub deadline_ms: u64,
}

impl Shutdown {
    /// The deadline as a point in time.
    pub fn deadline(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(self.deadline_ms)
    }

    /// Time left until the deadline as seen from `now` (zero once past it).
    pub fn remaining(&self, now: SystemTime) -> Duration {
        self.deadline().duration_since(now).unwrap_or(Duration::ZERO)
    }
}

/// A registered extension whose background task is waiting in `event/next`.
#[derive(Debug)]
pub struct Running {
    registration: Registration,
    events: Option<oneshot::Receiver<Result<Shutdown, AwsError>>>,
    /// Fires once the first `event/next` request has left this process.
    next_called: Option<oneshot::Receiver<()>>,
    poller: JoinHandle<()>,
}

impl Running {
    /// What Lambda answered to the registration.
    pub fn registration(&self) -> &Registration {
        &self.registration
    }

    /// A signal that fires once the first `event/next` request has been written to the Runtime API's socket,
    /// which ends this extension's Init: whatever must not run during Init waits for it. It is dropped
    /// instead when the request cannot be sent. Given out once.
    pub fn take_next_called(&mut self) -> Option<oneshot::Receiver<()>> {
        self.next_called.take()
    }

    /// Waits for the SHUTDOWN event. Cancel-safe: dropping the future (say in `select!`) loses nothing.
    /// Errors when the Runtime API failed or refused `event/next` (Lambda then expects the process to exit).
    pub async fn shutdown(&mut self) -> Result<Shutdown, AwsError> {
        let events = self.events.as_mut().ok_or(AwsError::ShutdownAlreadyDelivered)?;
        let result = events.await;
        self.events = None;
        result.unwrap_or_else(|_| {
            Err(AwsError::Transport {
                service: SERVICE,
                endpoint: "event/next".into(),
                reason: "the event poller stopped without a result".into(),
            })
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.poller.abort();
    }
}

/// Registers the extension `name` (the executable's file name in `/opt/extensions`) for SHUTDOWN, with the
/// Runtime API at `AWS_LAMBDA_RUNTIME_API`, and starts polling `event/next`. See [`start_with`].
pub async fn start(name: &str) -> Result<Running, AwsError> {
    start_with(&runtime_api_from_env()?, name).await
}

/// Registers the extension `name` for SHUTDOWN only (Lambda Managed Instances rejects INVOKE, and pgmux
/// has no per-invocation work) with the Runtime API at `runtime_api` (`host:port` or a URL), then spawns the
/// task that calls `event/next` at once, which tells Lambda this extension's Init is done. Returns as soon
/// as the registration succeeded. Needs a tokio runtime (on a current-thread runtime the first `event/next`
/// goes out at the caller's next `.await`).
pub async fn start_with(runtime_api: &str, name: &str) -> Result<Running, AwsError> {
    let endpoint = endpoint_for(runtime_api)?;
    let client = PooledClient::builder().with_endpoint(endpoint.clone()).build();
    let registration = register(&client, runtime_api, name).await?;
    let (tx, rx) = oneshot::channel();
    let (called_tx, called_rx) = oneshot::channel();
    let id = registration.extension_id.clone();
    let poller = tokio::spawn(async move {
        let _ = tx.send(next_shutdown(&endpoint, &id, called_tx).await);
    });
    Ok(Running { registration, events: Some(rx), next_called: Some(called_rx), poller })
}

/// Reports a fatal initialisation error to Lambda with the Runtime API at `AWS_LAMBDA_RUNTIME_API`.
/// See [`report_init_error_with`].
pub async fn report_init_error(name: &str, error_type: &str, message: &str) -> Result<(), AwsError> {
    report_init_error_with(&runtime_api_from_env()?, name, error_type, message).await
}

/// Reports a fatal initialisation error: registers `name` (for SHUTDOWN only) unless this process already
/// did, then posts `init/error` with `Lambda-Extension-Function-Error-Type: error_type` (a `Category.Reason`
/// such as `Extension.ConfigInvalid`: Lambda keeps an extension's own type only when it starts with `Extension.`) and the JSON body `{errorMessage, errorType, stackTrace: []}`. Lambda
/// then fails the Init; the process should exit. `message` is shown in the function's logs: no secrets.
pub async fn report_init_error_with(
    runtime_api: &str,
    name: &str,
    error_type: &str,
    message: &str,
) -> Result<(), AwsError> {
    let client = client_for(runtime_api)?;
    let known = registered_id(runtime_api);
    let id = match known {
        Some(id) => id,
        None => register(&client, runtime_api, name).await?.extension_id,
    };
    let body = ErrorRequest { error_message: message, error_type, stack_trace: Vec::new() };
    let mut request = init_error(&id, error_type, Some(body)).map_err(|e| AwsError::InvalidSetting {
        what: "init/error request",
        reason: format!("cannot build it (is the error type a valid header value?): {e}"),
    })?;
    request.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    let (status, _headers, body) = call(&client, "init/error", request).await?;
    check(status, "init/error", &body)
}

fn runtime_api_from_env() -> Result<String, AwsError> {
    crate::credentials::env_var("AWS_LAMBDA_RUNTIME_API").ok_or(AwsError::MissingEnv {
        name: "AWS_LAMBDA_RUNTIME_API",
        purpose: "the Lambda Runtime API address; it is set only inside Lambda",
    })
}

fn registrations() -> MutexGuard<'static, Vec<(String, String)>> {
    REGISTRATIONS.lock()
}

fn registered_id(runtime_api: &str) -> Option<String> {
    registrations().iter().find(|(api, _)| api == runtime_api).map(|(_, id)| id.clone())
}

/// The Runtime API's address from `host:port` or `http://host:port[/base]` (how cargo-lambda and simulators
/// give it).
fn endpoint_for(runtime_api: &str) -> Result<Uri, AwsError> {
    let with_scheme =
        if runtime_api.contains("://") { runtime_api.to_string() } else { format!("http://{runtime_api}") };
    let invalid = |reason: String| AwsError::InvalidSetting { what: "Lambda Runtime API address", reason };
    let uri: Uri = with_scheme.parse().map_err(|e| invalid(format!("{runtime_api:?}: {e}")))?;
    if uri.authority().is_none() || uri.scheme_str() != Some("http") {
        return Err(invalid(format!("{runtime_api:?} is not host:port or http://host:port")));
    }
    Ok(uri)
}

fn client_for(runtime_api: &str) -> Result<PooledClient, AwsError> {
    Ok(PooledClient::builder().with_endpoint(endpoint_for(runtime_api)?).build())
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RegisterBody {
    function_name: String,
    function_version: String,
    account_id: Option<String>,
}

async fn register(client: &PooledClient, runtime_api: &str, name: &str) -> Result<Registration, AwsError> {
    let request = build_request()
        .method(Method::POST)
        .uri("/2020-01-01/extension/register")
        .header("Lambda-Extension-Name", name)
        .header("Lambda-Extension-Accept-Feature", "accountId")
        .header("Content-Type", "application/json")
        .body(Body::from(r#"{"events":["SHUTDOWN"]}"#))
        .map_err(|e| AwsError::InvalidSetting { what: "extension name", reason: format!("{name:?}: {e}") })?;
    let (status, headers, body) = call(client, "register", request).await?;
    check(status, "register", &body)?;
    let extension_id = headers
        .get(ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| AwsError::InvalidResponse {
            service: SERVICE,
            reason: format!("register answered {status} without a {ID_HEADER} header"),
        })?
        .to_string();
    // The body is informational; a Runtime API that sends less is still usable.
    let info: RegisterBody = serde_json::from_slice(&body).unwrap_or_default();
    registrations().push((runtime_api.to_string(), extension_id.clone()));
    Ok(Registration {
        extension_id,
        function_name: info.function_name,
        function_version: info.function_version,
        account_id: info.account_id,
    })
}

/// Polls `event/next` until SHUTDOWN (an INVOKE, which a SHUTDOWN-only registration never gets, is
/// skipped). Does not poll again afterwards: Lambda waits for the process to exit.
///
/// The long poll has a connection of its own, so that `sent` can fire once the first request's bytes are
/// in the socket: a pooled client's first poll only queues the request for a connection task, and what
/// waits for `sent` could reach the database before Lambda has heard that Init is done.
async fn next_shutdown(endpoint: &Uri, id: &str, sent: oneshot::Sender<()>) -> Result<Shutdown, AwsError> {
    let failed = |reason: String| AwsError::Transport { service: SERVICE, endpoint: "event/next".into(), reason };
    let authority = endpoint.authority().ok_or_else(|| failed("the address has no host".into()))?;
    let host = authority.host().trim_start_matches('[').trim_end_matches(']');
    let stream = tokio::net::TcpStream::connect((host, authority.port_u16().unwrap_or(80)))
        .await
        .map_err(|e| failed(format!("cannot connect to {authority}: {e}")))?;
    let io = Announcing { io: TokioIo::new(stream), wrote: false, sent: Some(sent) };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.map_err(|e| failed(chain(&e)))?;
    // The connection task ends when `sender` is dropped, when this function returns.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let path = format!("{}/2020-01-01/extension/event/next", endpoint.path().trim_end_matches('/'));
    loop {
        let request = Request::get(path.as_str())
            .header(http::header::HOST, authority.as_str())
            .header(ID_HEADER, id)
            .body(Empty::<Bytes>::new())
            .map_err(|e| AwsError::InvalidSetting { what: "extension id", reason: e.to_string() })?;
        // Ready at once the first time; after a skipped INVOKE, once the connection has read its answer.
        sender.ready().await.map_err(|e| transport("event/next", &e))?;
        let response = sender.send_request(request).await.map_err(|e| transport("event/next", &e))?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.map_err(|e| transport("event/next", &e))?.to_bytes();
        check(parts.status.as_u16(), "event/next", &body)?;
        if let Some(shutdown) = parse_next_event(&body)? {
            return Ok(shutdown);
        }
    }
}

/// The `event/next` connection's I/O: fires `sent` at the first flush that follows written bytes (hyper
/// flushes once a request is wholly written).
struct Announcing {
    io: TokioIo<tokio::net::TcpStream>,
    wrote: bool,
    sent: Option<oneshot::Sender<()>>,
}

impl hyper::rt::Read for Announcing {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Announcing {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write(cx, buf);
        self.wrote |= matches!(written, Poll::Ready(Ok(n)) if n > 0);
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.wrote |= matches!(written, Poll::Ready(Ok(n)) if n > 0);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let flushed = Pin::new(&mut self.io).poll_flush(cx);
        if self.wrote
            && matches!(flushed, Poll::Ready(Ok(())))
            && let Some(sent) = self.sent.take()
        {
            let _ = sent.send(());
        }
        flushed
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The SHUTDOWN event in an `event/next` body, `None` for INVOKE.
pub(crate) fn parse_next_event(body: &[u8]) -> Result<Option<Shutdown>, AwsError> {
    let event: NextEvent = serde_json::from_slice(body).map_err(|e| AwsError::InvalidResponse {
        service: SERVICE,
        reason: format!("event/next returned an event this extension cannot read ({e}): {}", snippet(body, 300)),
    })?;
    Ok(match event {
        NextEvent::Invoke(_) => None,
        NextEvent::Shutdown(ShutdownEvent { shutdown_reason, deadline_ms }) => {
            Some(Shutdown { reason: normalise_reason(shutdown_reason), deadline_ms })
        }
    })
}

/// The documented reasons in lower case (the RIE and simulators send `spindown`, the docs `SPINDOWN`).
fn normalise_reason(reason: String) -> String {
    let lower = reason.to_ascii_lowercase();
    match lower.as_str() {
        "spindown" | "timeout" | "failure" => lower,
        _ => reason,
    }
}

/// One call with [`CALL_TIMEOUT`]; the whole body is read.
async fn call(
    client: &PooledClient,
    operation: &'static str,
    request: Request<Body>,
) -> Result<(u16, http::HeaderMap, Bytes), AwsError> {
    let exchange = async {
        let response = client.call(request).await.map_err(|e| transport(operation, e.as_ref()))?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.map_err(|e| transport(operation, &e))?.to_bytes();
        Ok((parts.status.as_u16(), parts.headers, body))
    };
    pgmux_timer::timeout(CALL_TIMEOUT, exchange).await.unwrap_or_else(|_| {
        Err(AwsError::Timeout { service: SERVICE, endpoint: operation.into(), timeout: CALL_TIMEOUT })
    })
}

fn transport(operation: &'static str, error: &(dyn std::error::Error + 'static)) -> AwsError {
    AwsError::Transport { service: SERVICE, endpoint: operation.into(), reason: chain(error) }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct LambdaErrorBody {
    error_type: Option<String>,
    error_message: Option<String>,
}

/// 2xx, or the Lambda error (`{errorType, errorMessage}` when the body has it).
fn check(status: u16, operation: &'static str, body: &[u8]) -> Result<(), AwsError> {
    if (200..300).contains(&status) {
        return Ok(());
    }
    let parsed: LambdaErrorBody = serde_json::from_slice(body).unwrap_or_default();
    Err(AwsError::Extension {
        operation,
        status,
        error_type: parsed.error_type.unwrap_or_else(|| "Unknown".into()),
        message: parsed.error_message.unwrap_or_else(|| snippet(body, 300)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shutdown(json: &str) -> Shutdown {
        parse_next_event(json.as_bytes()).unwrap().unwrap()
    }

    #[test]
    fn shutdown_reasons_in_any_case() {
        for (sent, expected) in [
            ("spindown", "spindown"),
            ("SPINDOWN", "spindown"),
            ("Spindown", "spindown"),
            ("TIMEOUT", "timeout"),
            ("timeout", "timeout"),
            ("Failure", "failure"),
            ("FAILURE", "failure"),
            ("SandboxTerminated", "SandboxTerminated"),
        ] {
            let event = shutdown(&format!(
                r#"{{"eventType":"SHUTDOWN","shutdownReason":"{sent}","deadlineMs":1700000002000}}"#
            ));
            assert_eq!(event.reason, expected);
            assert_eq!(event.deadline_ms, 1_700_000_002_000);
        }
    }

    #[test]
    fn deadline_is_epoch_milliseconds() {
        let event = shutdown(r#"{"eventType":"SHUTDOWN","shutdownReason":"spindown","deadlineMs":1700000002000}"#);
        let now = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_500);
        assert_eq!(event.remaining(now), Duration::from_millis(1500));
        assert_eq!(event.remaining(now + Duration::from_secs(5)), Duration::ZERO);
    }

    #[test]
    fn invoke_is_skipped_and_garbage_is_an_error() {
        let invoke = r#"{"eventType":"INVOKE","deadlineMs":1,"requestId":"r","invokedFunctionArn":"a","tracing":{"type":"X-Amzn-Trace-Id","value":"v"}}"#;
        assert_eq!(parse_next_event(invoke.as_bytes()).unwrap(), None);
        let err = parse_next_event(b"Extension not found").unwrap_err();
        assert!(err.to_string().contains("Extension not found"), "{err}");
        assert!(parse_next_event(br#"{"eventType":"SHUTDOWN","shutdownReason":"spindown"}"#).is_err());
    }

    #[test]
    fn lambda_errors_are_decoded() {
        let err = check(
            403,
            "register",
            br#"{"errorMessage":"INVOKE not allowed","errorType":"Extension.InvalidEventType"}"#,
        )
        .unwrap_err();
        assert_eq!(err.aws_error_type(), Some("Extension.InvalidEventType"));
        assert_eq!(
            err.to_string(),
            "the Lambda Extensions API refused register: HTTP 403 Extension.InvalidEventType: INVOKE not allowed"
        );
        let err = check(500, "event/next", b"Extension not found").unwrap_err();
        assert!(err.to_string().contains("HTTP 500 Unknown: Extension not found"), "{err}");
        assert!(check(202, "init/error", b"").is_ok());
    }

    #[test]
    fn runtime_api_addresses() {
        assert!(client_for("127.0.0.1:9001").is_ok());
        assert!(client_for("http://[::]:9000/.rt").is_ok());
        assert!(client_for("https://127.0.0.1:9001").is_err());
        assert!(client_for("").is_err());
        assert!(client_for("not an address").is_err());
    }
}
