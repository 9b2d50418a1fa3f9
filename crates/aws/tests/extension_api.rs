//! The extension lifecycle against lambda-simulator (register, `event/next`, SHUTDOWN), and `init/error`
//! against a small recording server (the simulator has no `init/error` route for extensions).
//!
//! The Runtime API address is passed explicitly (`*_with`), except in `start_reads_the_runtime_api_from_env`,
//! which sets `AWS_LAMBDA_RUNTIME_API` only in a child process (this test binary, re-run on one test).

#![allow(clippy::disallowed_methods)]

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use lambda_simulator::{EventType, ShutdownReason, Simulator};
use pgmux_aws::AwsError;
use pgmux_aws::extension::{report_init_error_with, start, start_with};
use tokio::net::TcpListener;

const SHUTDOWN_TIMEOUT: Duration = Duration::from_millis(700);

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_millis() as u64
}

async fn simulator() -> Simulator {
    Simulator::builder()
        .function_name("orders-api")
        .shutdown_timeout(SHUTDOWN_TIMEOUT)
        .build()
        .await
        .expect("simulator")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_for_shutdown_only_and_returns_the_shutdown_event() {
    let sim = simulator().await;
    let runtime_api = format!("127.0.0.1:{}", sim.addr().port());

    let mut running = start_with(&runtime_api, "pgmux").await.unwrap();
    assert!(!running.registration().extension_id.is_empty());
    assert_eq!(running.registration().function_name, "orders-api");

    let extensions = sim.get_registered_extensions().await;
    assert_eq!(extensions.len(), 1);
    assert_eq!(extensions[0].name, "pgmux");
    assert_eq!(extensions[0].events, vec![EventType::Shutdown], "SHUTDOWN only, never INVOKE");
    assert_eq!(extensions[0].id.to_string(), running.registration().extension_id);

    // start() returned without waiting for an event, and the poller is already in event/next.
    sim.wait_for(
        || async { sim.first_next_poll_at(&running.registration().extension_id).await.is_some() },
        Duration::from_secs(5),
    )
    .await
    .expect("event/next polled right after registering");

    let before = now_ms();
    let (shutdown, ()) = tokio::join!(running.shutdown(), sim.graceful_shutdown(ShutdownReason::Timeout));
    let after = now_ms();
    let shutdown = shutdown.unwrap();
    assert_eq!(shutdown.reason, "timeout");
    let timeout_ms = SHUTDOWN_TIMEOUT.as_millis() as u64;
    assert!(
        (before + timeout_ms..=after + timeout_ms).contains(&shutdown.deadline_ms),
        "deadline {} is not now + {timeout_ms} ms (epoch ms between {before} and {after})",
        shutdown.deadline_ms
    );

    let again = running.shutdown().await.unwrap_err();
    assert!(matches!(again, AwsError::ShutdownAlreadyDelivered), "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spindown_reason_and_cancel_safe_waiting() {
    let sim = simulator().await;
    let mut running = start_with(&sim.runtime_api_url(), "pgmux").await.unwrap();
    // A shutdown() future dropped before the event (as in a select! loop) loses nothing.
    assert!(tokio::time::timeout(Duration::from_millis(100), running.shutdown()).await.is_err());
    let (shutdown, ()) = tokio::join!(running.shutdown(), sim.graceful_shutdown(ShutdownReason::Spindown));
    assert_eq!(shutdown.unwrap().reason, "spindown");
}

/// `start()` (no address) reads `AWS_LAMBDA_RUNTIME_API`; it is set only in a child process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_reads_the_runtime_api_from_env() {
    if std::env::var_os("PGMUX_AWS_TEST_CHILD").is_some() {
        let mut running = start("pgmux-env").await.unwrap();
        let shutdown = running.shutdown().await.unwrap();
        println!("CHILD-SHUTDOWN {} {}", shutdown.reason, shutdown.deadline_ms);
        return;
    }
    let sim = simulator().await;
    let child = tokio::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "start_reads_the_runtime_api_from_env", "--nocapture", "--test-threads=1"])
        .env("PGMUX_AWS_TEST_CHILD", "1")
        .env("AWS_LAMBDA_RUNTIME_API", format!("127.0.0.1:{}", sim.addr().port()))
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("re-run this test binary");
    sim.wait_for(|| async { sim.extension_count().await == 1 }, Duration::from_secs(30))
        .await
        .expect("the child registered");
    assert_eq!(sim.get_registered_extensions().await[0].name, "pgmux-env");
    sim.graceful_shutdown(ShutdownReason::Failure).await;
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output()).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}");
    assert!(stdout.contains("CHILD-SHUTDOWN failure "), "{stdout}");
}

/// One request as the recording server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: http::HeaderMap,
    body: String,
}

/// A stand-in Runtime API that records requests: register answers 200 with an id (or `register_status`
/// with a Lambda error), init/error 202, event/next never.
async fn recording_server(register_status: u16) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let log = Arc::clone(&log);
            let service = service_fn(move |req: Request<Incoming>| {
                let log = Arc::clone(&log);
                async move {
                    let (parts, body) = req.into_parts();
                    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                    let path = parts.uri.path().to_string();
                    log.lock().expect("log").push(Seen {
                        method: parts.method.to_string(),
                        path: path.clone(),
                        headers: parts.headers,
                        body: String::from_utf8_lossy(&body).into_owned(),
                    });
                    let response = match path.as_str() {
                        "/2020-01-01/extension/register" if register_status == 200 => Response::builder()
                            .header("Lambda-Extension-Identifier", "ext-id-42")
                            .body(Full::new(Bytes::from(
                                r#"{"functionName":"f","functionVersion":"$LATEST","handler":"h"}"#,
                            ))),
                        "/2020-01-01/extension/register" => Response::builder().status(register_status).body(Full::new(
                            Bytes::from(r#"{"errorMessage":"INVOKE is not supported","errorType":"Extension.InvalidEventType"}"#),
                        )),
                        "/2020-01-01/extension/init/error" => {
                            Response::builder().status(202).body(Full::new(Bytes::from(r#"{"status":"OK"}"#)))
                        }
                        _ => std::future::pending().await,
                    };
                    Ok::<_, Infallible>(response.expect("response"))
                }
            });
            tokio::spawn(async move {
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    (addr, seen)
}

fn header<'a>(seen: &'a Seen, name: &str) -> &'a str {
    seen.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

#[tokio::test]
async fn init_error_registers_first_then_reports() {
    let (addr, seen) = recording_server(200).await;
    report_init_error_with(&addr, "pgmux", "Extension.ConfigInvalid", "database_url: missing host").await.unwrap();

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:#?}");
    let (register, error) = (&seen[0], &seen[1]);
    assert_eq!((register.method.as_str(), register.path.as_str()), ("POST", "/2020-01-01/extension/register"));
    assert_eq!(header(register, "lambda-extension-name"), "pgmux");
    let events: serde_json::Value = serde_json::from_str(&register.body).unwrap();
    assert_eq!(events, serde_json::json!({"events": ["SHUTDOWN"]}));

    assert_eq!((error.method.as_str(), error.path.as_str()), ("POST", "/2020-01-01/extension/init/error"));
    assert_eq!(header(error, "lambda-extension-identifier"), "ext-id-42");
    assert_eq!(header(error, "lambda-extension-function-error-type"), "Extension.ConfigInvalid");
    assert_eq!(header(error, "content-type"), "application/json");
    let body: serde_json::Value = serde_json::from_str(&error.body).unwrap();
    assert_eq!(body["errorMessage"], "database_url: missing host");
    assert_eq!(body["errorType"], "Extension.ConfigInvalid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_error_after_start_reuses_the_registration() {
    let (addr, seen) = recording_server(200).await;
    let _running = start_with(&addr, "pgmux").await.unwrap();
    report_init_error_with(&addr, "pgmux", "Extension.SecretUnreadable", "cannot read the secret").await.unwrap();

    let seen = seen.lock().unwrap().clone();
    let registers = seen.iter().filter(|s| s.path.ends_with("/register")).count();
    assert_eq!(registers, 1, "registered once: {seen:#?}");
    let error = seen.iter().find(|s| s.path.ends_with("/init/error")).expect("init/error sent");
    assert_eq!(header(error, "lambda-extension-identifier"), "ext-id-42");
    assert_eq!(header(error, "lambda-extension-function-error-type"), "Extension.SecretUnreadable");
}

#[tokio::test]
async fn refused_registration_is_an_actionable_error() {
    let (addr, _) = recording_server(403).await;
    let err = start_with(&addr, "pgmux").await.unwrap_err();
    assert_eq!(err.aws_error_type(), Some("Extension.InvalidEventType"));
    assert!(err.to_string().contains("HTTP 403") && err.to_string().contains("register"), "{err}");

    let err = report_init_error_with(&addr, "pgmux", "Extension.ConfigInvalid", "x").await.unwrap_err();
    assert_eq!(err.aws_error_type(), Some("Extension.InvalidEventType"));
}

#[tokio::test]
async fn unreachable_runtime_api_is_a_transport_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let err = start_with(&format!("127.0.0.1:{port}"), "pgmux").await.unwrap_err();
    assert!(matches!(err, AwsError::Transport { .. }), "{err}");
}

/// A raw stand-in's side of one HTTP/1.1 exchange: the request's head, read byte by byte (nothing after it).
fn read_head(stream: &mut std::net::TcpStream) -> String {
    use std::io::Read;
    let mut head = Vec::new();
    let mut byte = [0; 1];
    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).expect("read the request") == 1 {
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Reads a SHUTDOWN-only registration and answers it with extension id `id`.
fn answer_register(stream: &mut std::net::TcpStream, id: &str) {
    use std::io::{Read, Write};
    read_head(stream);
    let mut body = vec![0; r#"{"events":["SHUTDOWN"]}"#.len()];
    stream.read_exact(&mut body).expect("read the registration's body");
    let answer = format!("HTTP/1.1 200 OK\r\nLambda-Extension-Identifier: {id}\r\nContent-Length: 2\r\n\r\n{{}}");
    stream.write_all(answer.as_bytes()).expect("answer the registration");
}

/// Whatever waits for `take_next_called` (pgmux's own database work) starts only once the `event/next`
/// request is in the Runtime API's socket. A stand-in answers register on one connection and then reads
/// nothing; when the signal fires, the test looks, without waiting, at what has reached it on any
/// connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_called_signal_fires_once_the_request_has_left() {
    for round in 0..20 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let registrar = listener.try_clone().unwrap();
        let (streams, registered) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mut stream, _) = registrar.accept().unwrap();
            answer_register(&mut stream, "ext-id-7");
            streams.send(stream).unwrap();
        });
        let mut running = start_with(&addr, "pgmux").await.unwrap();
        let mut connections = vec![registered.recv_timeout(Duration::from_secs(5)).unwrap()];
        let called = running.take_next_called().unwrap();
        tokio::time::timeout(Duration::from_secs(5), called).await.unwrap().unwrap();

        // Now, with no await in between: every connection made so far, and what each holds.
        listener.set_nonblocking(true).unwrap();
        while let Ok((stream, _)) = listener.accept() {
            connections.push(stream);
        }
        let mut held = Vec::new();
        for stream in &connections {
            stream.set_nonblocking(true).unwrap();
            let mut buf = [0; 1024];
            let n = stream.peek(&mut buf).unwrap_or(0);
            held.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        assert!(
            held.iter().any(|h| h.starts_with("GET /2020-01-01/extension/event/next ") && h.ends_with("\r\n\r\n")),
            "round {round}: the signal fired before the request was sent; the Runtime API holds {held:?}"
        );
    }
}

/// An INVOKE (which a SHUTDOWN-only registration never gets, but a Runtime API could send) is skipped, and
/// the next `event/next` goes out on the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invoke_is_skipped_and_the_next_request_brings_the_shutdown() {
    use std::io::Write;
    fn answer(stream: &mut std::net::TcpStream, body: &str) {
        let text = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        stream.write_all(text.as_bytes()).unwrap();
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let api = std::thread::spawn(move || {
        let (mut register, _) = listener.accept().unwrap();
        answer_register(&mut register, "ext-id-9");
        let (mut next, _) = listener.accept().unwrap();
        let mut asked = vec![read_head(&mut next)];
        answer(
            &mut next,
            r#"{"eventType":"INVOKE","deadlineMs":1,"requestId":"r1","invokedFunctionArn":"arn:aws:lambda:us-east-1:123456789012:function:f","tracing":{"type":"X-Amzn-Trace-Id","value":"Root=1-2-3"}}"#,
        );
        asked.push(read_head(&mut next));
        answer(&mut next, r#"{"eventType":"SHUTDOWN","shutdownReason":"spindown","deadlineMs":42}"#);
        asked
    });
    let mut running = start_with(&addr, "pgmux").await.unwrap();
    let shutdown = tokio::time::timeout(Duration::from_secs(10), running.shutdown()).await.unwrap().unwrap();
    assert_eq!((shutdown.reason.as_str(), shutdown.deadline_ms), ("spindown", 42));
    let asked = api.join().unwrap();
    for request in &asked {
        assert!(request.starts_with("GET /2020-01-01/extension/event/next HTTP/1.1\r\n"), "{request}");
        assert!(request.to_ascii_lowercase().contains("lambda-extension-identifier: ext-id-9\r\n"), "{request}");
    }
}
