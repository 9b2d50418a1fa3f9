//! The real `pgmux` binary as a Lambda extension: against lambda-simulator it registers for SHUTDOWN only,
//! serves concurrent clients, and on SHUTDOWN leaves no server connection open and exits before the
//! deadline; a bad configuration is reported to `extension/init/error`.

#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lambda_simulator::{EventType, ShutdownReason, Simulator};
use pgmux_testkit::{APP_USER, PgServer, free_port};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_postgres::NoTls;

/// Lambda gives extensions about 2 s after SHUTDOWN.
const SHUTDOWN_BUDGET: Duration = Duration::from_secs(2);

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// The binary started the way Lambda starts an extension: from `extensions/pgmux`, with the Runtime API
/// address and the function's environment.
fn extension(runtime_api: &str, env: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pgmux"));
    for (k, _) in std::env::vars() {
        if k.starts_with("PGMUX_") || k.starts_with("AWS_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("AWS_LAMBDA_RUNTIME_API", runtime_api).env("PGMUX_LOG_LEVEL", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stderr(Stdio::piped()).spawn().unwrap()
}

async fn client(port: u16) -> tokio_postgres::Client {
    let mut cfg = tokio_postgres::Config::new();
    // Lambda mode trusts loopback clients: no password.
    cfg.host("127.0.0.1").port(port).user(APP_USER.user).dbname("pgmux");
    let (client, conn) = cfg.connect(NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

/// pgmux's server connections, the control connection included.
fn pgmux_backends(pg: &PgServer) -> i64 {
    pg.psql("select count(*) from pg_stat_activity where usename = 'pgmux_app' and backend_type = 'client backend'")
        .parse()
        .unwrap()
}

/// pgmux's pool connections: its server connections but the control connection.
fn pool_backends(pg: &PgServer) -> i64 {
    pg.psql(
        "select count(*) from pg_stat_activity where usename = 'pgmux_app' and backend_type = 'client backend' \
         and application_name not like 'pgmux %'",
    )
    .parse()
    .unwrap()
}

/// When the control connection started (Unix epoch ms, truncated as [`now_ms`] truncates), waiting up to 10 s
/// for it to appear.
async fn control_started_ms(pg: &PgServer) -> i64 {
    let started = Instant::now();
    loop {
        let ms = pg.psql(
            "select floor(extract(epoch from backend_start) * 1000)::bigint from pg_stat_activity \
             where application_name like 'pgmux %'",
        );
        if let Ok(ms) = ms.parse() {
            return ms;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no control connection after 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_for_shutdown_only_serves_clients_and_leaves_nothing_open() {
    for mode in ["on-demand", "lambda-managed-instances"] {
        let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
        let sim = Simulator::builder().function_name("orders").shutdown_timeout(SHUTDOWN_BUDGET).build().await.unwrap();
        let port = free_port();
        let started = Instant::now();
        let (runtime_api, open_door) = door(sim.addr()).await;
        let mut child = extension(
            &runtime_api,
            &[
                ("PGMUX_DATABASE_URL", pg.url(&APP_USER)),
                ("PGMUX_LISTEN", format!("127.0.0.1:{port}")),
                // The test server has no TLS; in Lambda the default is verify-full.
                ("PGMUX_SSLMODE", "disable".into()),
                ("PGMUX_POOL_MAX", "2".into()),
                ("AWS_LAMBDA_INITIALIZATION_TYPE", mode.into()),
            ],
        );
        sim.wait_for(|| async { sim.extension_count().await == 1 }, Duration::from_secs(10)).await.unwrap();
        eprintln!("{mode}: exec to registered in {:?}", started.elapsed());
        let registered = sim.get_registered_extensions().await;
        assert_eq!(registered[0].name, "pgmux", "the name is the executable's file name");
        assert_eq!(registered[0].events, vec![EventType::Shutdown], "{mode}: SHUTDOWN only, never INVOKE");

        // The door keeps event/next from reaching Lambda: Init is not over, and pgmux keeps off the database.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            sim.first_next_poll_at(&registered[0].id).await.is_none(),
            "event/next reached Lambda past the door (on the registration's connection?)"
        );
        assert_eq!(pgmux_backends(&pg), 0, "{mode}: pgmux reached the database before Lambda heard event/next");
        let opened_ms = now_ms() as i64;
        open_door.send(()).unwrap();
        sim.wait_for(|| async { sim.first_next_poll_at(&registered[0].id).await.is_some() }, Duration::from_secs(10))
            .await
            .expect("event/next called once the door opened");
        assert_eq!(pool_backends(&pg), 0, "{mode}: no pool connection before a client needs it");
        if mode == "lambda-managed-instances" {
            // Sizing is on: the control connection opens once the extension's event/next has gone out.
            let control_ms = control_started_ms(&pg).await;
            assert!(control_ms >= opened_ms, "control connection at {control_ms} ms, door opened at {opened_ms} ms");
        } else {
            assert_eq!(pgmux_backends(&pg), 0, "{mode}: no control connection on classic Lambda");
        }

        // Concurrent invocations, as Managed Instances runs them.
        let mut tasks = Vec::new();
        for i in 0..8 {
            tasks.push(tokio::spawn(async move {
                let c = client(port).await;
                for j in 0..20 {
                    let row = c.query_one("select $1::int4 * 2", &[&(i * 100 + j)]).await.unwrap();
                    assert_eq!(row.get::<_, i32>(0), (i * 100 + j) * 2);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert!(pool_backends(&pg) <= 2);

        let before = now_ms();
        sim.graceful_shutdown(ShutdownReason::Spindown).await;
        let deadline = before + SHUTDOWN_BUDGET.as_millis() as u64;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(now_ms() < deadline + 1000, "{mode}: still running a second past the deadline");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let exited = now_ms();
        assert_eq!(status.code(), Some(0), "{mode}");
        assert!(exited < deadline, "{mode}: exited {} ms after the deadline", exited - deadline);
        assert_eq!(pgmux_backends(&pg), 0, "{mode}: server connections left open");
        let mut log = String::new();
        use std::io::Read;
        child.stderr.take().unwrap().read_to_string(&mut log).unwrap();
        assert!(log.contains("SHUTDOWN received"), "{log}");
        assert!(log.lines().all(|l| l.starts_with('{')), "Lambda mode logs JSON lines: {log}");
        assert!(!log.contains(APP_USER.password), "the log shows the password");
    }
}

/// A door in front of the simulator (returns its address, and what opens it). The extension's first
/// connection, its registration, goes through. Every later one cannot connect until the door opens: the
/// door's accept queue has one place, and a connection the door holds takes it, so the kernel drops the
/// next SYN and the client sends it again a second later. Writes cannot be held back this way: a connected
/// socket takes bytes whether or not anyone reads them.
async fn door(to: std::net::SocketAddr) -> (String, tokio::sync::oneshot::Sender<()>) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    let listener = socket.listen(0).unwrap();
    let (open, opened) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (first, _) = listener.accept().await.unwrap();
        let place_taken = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::spawn(forward(first, to));
        let _ = opened.await;
        drop(place_taken);
        while let Ok((next, _)) = listener.accept().await {
            tokio::spawn(forward(next, to));
        }
    });
    (addr.to_string(), open)
}

async fn forward(mut from: tokio::net::TcpStream, to: std::net::SocketAddr) {
    if let Ok(mut to) = tokio::net::TcpStream::connect(to).await {
        let _ = tokio::io::copy_bidirectional(&mut from, &mut to).await;
    }
}

/// A stand-in for the Extensions API that records every request (lambda-simulator has no init/error).
async fn recorder() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = vec![0u8; 4096];
                // Read headers, then as much body as Content-Length says.
                loop {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned())
                            })
                            .and_then(|v| v.parse::<usize>().ok())
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                // One request per connection (the answers say `Connection: close`), so that a second request
                // never goes to a socket this task has already left.
                let text = String::from_utf8_lossy(&buf).to_string();
                log.lock().unwrap().push(text.clone());
                let response = if text.starts_with("POST /2020-01-01/extension/register") {
                    let body = r#"{"functionName":"f","functionVersion":"$LATEST","handler":"h"}"#;
                    format!(
                        "HTTP/1.1 200 OK\r\nConnection: close\r\nLambda-Extension-Identifier: ext-1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    )
                } else {
                    "HTTP/1.1 202 Accepted\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}".to_owned()
                };
                let _ = sock.write_all(response.as_bytes()).await;
            });
        }
    });
    (addr, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_configuration_is_reported_to_init_error() {
    let (addr, seen) = recorder().await;
    let child = extension(
        &addr,
        &[("PGMUX_DATABASE_URL", "postgres://app@db.example/app".into()), ("PGMUX_POOL_MAX", "lots".into())],
    );
    let out = tokio::task::spawn_blocking(move || child.wait_with_output()).await.unwrap().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let requests = seen.lock().unwrap().clone();
    let init_error = requests
        .iter()
        .find(|r| r.starts_with("POST /2020-01-01/extension/init/error"))
        .unwrap_or_else(|| panic!("no init/error request among {requests:?}"));
    let lower = init_error.to_ascii_lowercase();
    assert!(lower.contains("lambda-extension-function-error-type: extension.configinvalid"), "{init_error}");
    assert!(lower.contains("lambda-extension-identifier: ext-1"), "{init_error}");
    assert!(init_error.contains("pool_max") && init_error.contains("PGMUX_POOL_MAX"), "{init_error}");
    let register = requests.iter().find(|r| r.starts_with("POST /2020-01-01/extension/register")).unwrap();
    assert!(register.contains("\"SHUTDOWN\"") && !register.contains("INVOKE"), "{register}");
}

/// SIGSTOP or SIGCONT to the extension: what Lambda's freezer does to an environment between invocations.
fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill").arg(format!("-{sig}")).arg(child.id().to_string()).status().unwrap();
    assert!(status.success(), "kill -{sig}");
}

async fn backend_pid(client: &tokio_postgres::Client) -> i32 {
    client.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0)
}

/// Classic Lambda freezes the extension as soon as the function has answered. What a frozen environment
/// holds, and what the invocation that thaws it pays: measured here with `server_idle_timeout` far shorter
/// than the freeze (docs/operations.md, "A frozen environment").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_environment_holds_its_pool_alone_and_the_thawing_invocation_logs_in_to_nothing() {
    const IDLE: Duration = Duration::from_secs(2);
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    let sim = Simulator::builder().function_name("orders").shutdown_timeout(SHUTDOWN_BUDGET).build().await.unwrap();
    let port = free_port();
    let mut child = extension(
        &format!("127.0.0.1:{}", sim.addr().port()),
        &[
            ("PGMUX_DATABASE_URL", pg.url(&APP_USER)),
            ("PGMUX_LISTEN", format!("127.0.0.1:{port}")),
            ("PGMUX_SSLMODE", "disable".into()),
            ("PGMUX_POOL_MAX", "4".into()),
            ("PGMUX_POOL_GROW_AFTER", "0s".into()),
            ("PGMUX_SERVER_IDLE_TIMEOUT", format!("{}s", IDLE.as_secs())),
        ],
    );
    sim.wait_for(|| async { sim.extension_count().await == 1 }, Duration::from_secs(10)).await.unwrap();

    // An invocation that runs two statements at once (a function's own pool of two clients).
    let (a, b) = (client(port).await, client(port).await);
    a.batch_execute("begin").await.unwrap();
    let used = [backend_pid(&a).await, backend_pid(&b).await];
    a.batch_execute("commit").await.unwrap();
    assert_ne!(used[0], used[1]);
    assert_eq!(pgmux_backends(&pg), 2, "the two pool connections, and no control connection on classic Lambda");

    // Frozen for three times server_idle_timeout: a process that does not run closes nothing.
    signal(&child, "STOP");
    let frozen = Instant::now();
    let mut held = Vec::new();
    while frozen.elapsed() < IDLE * 3 {
        held.push(pgmux_backends(&pg));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!("held while frozen for {:?}: {held:?}", frozen.elapsed());
    assert!(held.iter().all(|&n| n == 2), "{held:?}");

    // The invocation that thaws it finds its connections: no login, although they were idle past the timeout.
    signal(&child, "CONT");
    let thawed = Instant::now();
    let pid = backend_pid(&a).await;
    eprintln!("first statement after the thaw answered in {:?}", thawed.elapsed());
    assert!(used.contains(&pid), "backend {pid} is a new login; the invocation before used {used:?}");
    // Idle time counts from the thaw: the connections close server_idle_timeout after the last use.
    drop((a, b));
    let closed = Instant::now();
    while pgmux_backends(&pg) > 0 {
        assert!(closed.elapsed() < IDLE * 5, "still {} connections", pgmux_backends(&pg));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("closed {:?} after the last use", closed.elapsed());

    sim.graceful_shutdown(ShutdownReason::Spindown).await;
    let status = tokio::task::spawn_blocking(move || child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0));
}
