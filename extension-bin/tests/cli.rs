//! The `pgmux` binary as users run it: its help, its configuration errors, and its shutdown on SIGTERM.

#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use pgmux_testkit::{APP_USER, PgServer, free_port};
use tokio_postgres::NoTls;

fn pgmux() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pgmux"));
    // Only what a test sets: no PGMUX_* leaking in from the environment running the tests.
    for (k, _) in std::env::vars() {
        if k.starts_with("PGMUX_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

#[test]
fn help_lists_every_setting_and_its_environment_variable() {
    let out = pgmux().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for key in ["listen", "database_url", "pool_max", "client_auth", "query_wait_timeout", "shutdown_timeout"] {
        assert!(help.contains(key), "--help does not mention {key}");
        assert!(help.contains(&format!("PGMUX_{}", key.to_uppercase())), "--help does not mention its env var");
    }
    // Only database_url is required (and not even that with a secret); optional keys say they are unset.
    let line = |key: &str| help.lines().find(|l| l.trim_start().starts_with(key)).unwrap_or_default().to_owned();
    assert!(line("database_url").contains("(required unless secret_arn)"), "{}", line("database_url"));
    for key in ["secret_arn", "sslmode", "pool_max", "tls_cert", "client_password"] {
        assert!(line(key).contains("(unset)") && !line(key).contains("required"), "{}", line(key));
    }
}

#[test]
fn a_bad_value_stops_startup_naming_the_key() {
    let out = pgmux()
        .env("PGMUX_DATABASE_URL", "postgres://u:p@127.0.0.1:1/db")
        .env("PGMUX_POOL_MAX", "many")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pool_max") && err.contains("PGMUX_POOL_MAX") && err.contains("many"), "{err}");

    let out = pgmux().output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("database_url is required"));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pgmux.toml");
    std::fs::write(&file, "database_url = \"postgres://u:p@h/db\"\nquery_wait_timeout = \"forever\"\n").unwrap();
    let out = pgmux().arg("--config").arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("query_wait_timeout (config file)"), "{err}");
}

#[test]
fn print_config_hides_the_password() {
    let out = pgmux()
        .args(["--print-config"])
        .env("PGMUX_DATABASE_URL", "postgres://app:hunter2@db.internal:5432/app")
        .env("PGMUX_CLIENT_AUTH", "md5")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("client_auth = md5") && text.contains("app:***@db.internal"), "{text}");
    assert!(!text.contains("hunter2"));
}

/// A running pgmux child; killed if the test fails.
struct Running {
    child: Child,
    port: u16,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(pg: &PgServer, shutdown_timeout: &str) -> Running {
    let port = free_port();
    let child = pgmux()
        .env("PGMUX_LISTEN", format!("127.0.0.1:{port}"))
        .env("PGMUX_DATABASE_URL", pg.url(&APP_USER))
        // Two pool connections and the control connection, which pool_max counts too.
        .env("PGMUX_POOL_MAX", "3")
        .env("PGMUX_CLIENT_AUTH", "scram-sha-256")
        .env("PGMUX_SHUTDOWN_TIMEOUT", shutdown_timeout)
        .env("PGMUX_LOG_LEVEL", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "pgmux did not start listening");
        std::thread::sleep(Duration::from_millis(20));
    }
    Running { child, port }
}

fn sigterm(child: &Child) {
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success(), "kill -TERM failed");
}

fn wait_exit(child: &mut Child, within: Duration) -> ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "pgmux did not exit within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn client(port: u16) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1").port(port).user(APP_USER.user).password(APP_USER.password).dbname("pgmux");
    let (client, conn) = cfg.connect(NoTls).await?;
    tokio::spawn(conn);
    Ok(client)
}

async fn pgmux_backends(pg: &PgServer) -> i64 {
    pg.psql("select count(*) from pg_stat_activity where usename = 'pgmux_app' and backend_type = 'client backend'")
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_open_transactions_finish_then_exits_zero_leaving_no_backends() {
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    pg.psql("create table t (v int); grant all on t to pgmux_app");
    let mut running = start(&pg, "10s");
    let in_tx = client(running.port).await.unwrap();
    let idle = client(running.port).await.unwrap();
    in_tx.batch_execute("begin; insert into t values (1)").await.unwrap();
    idle.simple_query("select 1").await.unwrap();

    sigterm(&running.child);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // New clients are turned away; the idle client has been told and closed.
    assert!(client(running.port).await.is_err(), "pgmux still accepts clients after SIGTERM");
    assert!(idle.simple_query("select 1").await.is_err());
    // The open transaction finishes normally.
    in_tx.batch_execute("insert into t values (2); commit").await.unwrap();

    let status = wait_exit(&mut running.child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));
    assert_eq!(pg.psql("select count(*) from t"), "2");
    assert_eq!(pgmux_backends(&pg).await, 0, "server connections left open");
    let mut log = String::new();
    running.child.stderr.take().unwrap().read_to_string(&mut log).unwrap();
    assert!(log.contains("SIGTERM received") && log.contains("pgmux stopped"), "{log}");
    assert!(!log.contains(APP_USER.password), "the log shows the password");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_timeout_bounds_the_wait_for_a_transaction_that_never_ends() {
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    let mut running = start(&pg, "500ms");
    let stuck = client(running.port).await.unwrap();
    stuck.batch_execute("begin").await.unwrap();
    let started = Instant::now();
    sigterm(&running.child);
    let status = wait_exit(&mut running.child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert!(stuck.simple_query("select 1").await.is_err());
    let gone = {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let n = pgmux_backends(&pg).await;
            if n == 0 || Instant::now() > deadline {
                break n;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert_eq!(gone, 0, "the abandoned transaction's backend is still there");
}
