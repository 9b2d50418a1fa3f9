//! Clients on a Unix-domain socket (`unix_socket_dir`): found the way libpq finds a server, pooled and
//! authenticated as over TCP, cancellable, and the socket file gone after shutdown.

use std::process::Command;
use std::time::Duration;

use pgmux_testkit::{APP_USER, DATABASE, Role};
use tokio_postgres::NoTls;

use crate::common::{self, Fixture, scalar};

/// pgmux with its socket in a fresh directory; the directory lives as long as the returned guard.
async fn start(extra: &str) -> (Fixture, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a directory for the socket");
    let fx = common::start(&format!("unix_socket_dir = {:?}\n{extra}", dir.path().display().to_string())).await;
    (fx, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_of_the_socket_directory_share_the_pool() {
    let (fx, dir) = start("").await;
    let proxy = fx.proxy.as_ref().expect("running");
    let path = proxy.unix_socket.clone().expect("a Unix socket");
    assert_eq!(path, dir.path().join(format!(".s.PGSQL.{}", proxy.addr.port())));
    let oracle = common::direct(&fx.pg).await;
    let mut clients = Vec::new();
    for _ in 0..6 {
        clients.push(
            common::connect_unix(dir.path(), proxy.addr.port(), APP_USER.user, Some(APP_USER.password))
                .await
                .expect("connect over the socket"),
        );
    }
    // Interleaved with a TCP client: one pool behind both listeners.
    let tcp = fx.client().await;
    for (i, c) in clients.iter().enumerate() {
        assert_eq!(scalar(c, &format!("select {i} + 1")).await, (i + 1).to_string());
        // The server sees pgmux's TCP connection, not the client's socket.
        assert_eq!(scalar(c, "select inet_client_addr()::text").await, "127.0.0.1/32");
    }
    assert_eq!(scalar(&tcp, "select 'tcp'").await, "tcp");
    assert!(common::pgmux_backends(&oracle).await <= 2, "pool_max = 2 holds for socket clients too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_finds_the_socket_with_dash_h_dir() {
    let (fx, dir) = start("").await;
    let port = fx.addr().port();
    let psql = pgmux_testkit::pg_bin_dir().expect("PostgreSQL binaries").join("psql");
    let out = tokio::task::spawn_blocking({
        let dir = dir.path().to_owned();
        move || {
            Command::new(psql)
                .args(["-X", "-At", "-w", "-h"])
                .arg(&dir)
                .args(["-p", &port.to_string(), "-U", APP_USER.user, "-d", DATABASE])
                .args(["-c", "select 'through ' || current_user"])
                .env("PGPASSWORD", APP_USER.password)
                .env_remove("PGSSLMODE")
                .output()
                .expect("run psql")
        }
    })
    .await
    .expect("psql task");
    assert!(out.status.success(), "psql failed: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("through {}", APP_USER.user));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_checks_passwords_as_tcp_does() {
    let (fx, dir) = start("").await;
    let wrong = Role { user: APP_USER.user, password: "not-the-password" };
    let err = common::connect_unix(dir.path(), fx.addr().port(), wrong.user, Some(wrong.password))
        .await
        .expect_err("a wrong password is refused");
    assert_eq!(common::code(&err), "28P01");
    let stranger = Role { user: "nobody", password: APP_USER.password };
    let err = common::connect_unix(dir.path(), fx.addr().port(), stranger.user, Some(stranger.password))
        .await
        .expect_err("an unknown user is refused");
    assert_eq!(common::code(&err), "28P01");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_clients_and_cancel_requests_over_the_socket() {
    let (fx, dir) = start("client_auth = \"trust\"").await;
    let nopw = Role { user: APP_USER.user, password: "" };
    let client = common::connect_unix(dir.path(), fx.addr().port(), nopw.user, Some(nopw.password))
        .await
        .expect("trust over the socket");
    let token = client.cancel_token();
    let sleeper = tokio::spawn(async move { client.simple_query("select pg_sleep(30)").await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The cancel request goes to the same socket, as libpq sends it.
    token.cancel_query(NoTls).await.expect("send the cancel request");
    let outcome = tokio::time::timeout(Duration::from_secs(5), sleeper).await.expect("cancelled in time");
    let err = outcome.expect("task").expect_err("the query was cancelled");
    assert_eq!(common::code(&err), "57014");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_file_goes_with_pgmux() {
    let (mut fx, _dir) = start("").await;
    let proxy = fx.proxy.take().expect("running");
    let path = proxy.unix_socket.clone().expect("a Unix socket");
    assert!(path.exists());
    proxy.shutdown().await;
    assert!(!path.exists(), "{} is left behind", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_directory_stops_start_up_with_the_path() {
    let pg = tokio::task::spawn_blocking(pgmux_testkit::PgServer::start).await.expect("start PostgreSQL");
    let config = common::config(&pg, "unix_socket_dir = \"/nonexistent/pgmux-dir\"");
    let err = pgmux_proxy::Listener::start(config).await.expect_err("no such directory");
    let text = err.to_string();
    assert!(text.contains("/nonexistent/pgmux-dir/.s.PGSQL."), "{text}");
}
