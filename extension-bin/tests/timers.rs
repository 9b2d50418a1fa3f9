//! The binary's relay runs without tokio's time driver, its timers on a thread of their own (pgmux-timer):
//! a query_timeout, a timer made on a relay thread as the query starts, still fires and cancels the query,
//! with one worker (a current-thread runtime) and with two (each worker marked as it starts).
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::net::{Ipv4Addr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pgmux_testkit::{APP_USER, PgServer, free_port};
use tokio_postgres::NoTls;

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
        assert!(Instant::now() < deadline, "pgmux did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

async fn a_query_timeout_fires(pg: &PgServer, workers: usize) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = dir.path().join("pgmux.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\ndatabase_url = \"{}\"\nclient_auth = \"trust\"\npool_max = 2\n\
             max_connections_percent = 0\nworkers = {workers}\nquery_timeout = \"1s\"\n",
            pg.url(&APP_USER)
        ),
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pgmux"));
    for (k, _) in std::env::vars() {
        if k.starts_with("PGMUX_") {
            cmd.env_remove(k);
        }
    }
    cmd.arg("--config").arg(&config).stderr(Stdio::null());
    let _pgmux = Running(cmd.spawn().unwrap());
    wait_for_port(port);

    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1").port(port).user(APP_USER.user).dbname("pgmux");
    let (client, conn) = cfg.connect(NoTls).await.unwrap();
    tokio::spawn(conn);
    let started = Instant::now();
    let err = client.simple_query("select pg_sleep(30)").await.expect_err("cancelled by query_timeout");
    let db = err.as_db_error().unwrap_or_else(|| panic!("workers = {workers}: not a server error: {err}"));
    assert_eq!(db.code().code(), "57014", "workers = {workers}: {db}");
    assert!(db.message().contains("query_timeout"), "workers = {workers}: {db}");
    assert!(started.elapsed() < Duration::from_secs(20), "workers = {workers}: the timer fired late");
    // The client goes on, on another server connection.
    let rows = client.simple_query("select 1").await.unwrap();
    assert!(!rows.is_empty(), "workers = {workers}");
}

#[tokio::test]
async fn a_timer_made_on_a_relay_thread_fires_with_one_worker_and_with_two() {
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    a_query_timeout_fires(&pg, 1).await;
    a_query_timeout_fires(&pg, 2).await;
}
