//! What every integration test needs: a PostgreSQL, a pgmux in front of it, clients, and oracle queries
//! that look at the server directly. Behind the `fixture` feature (on by default), so that pgmux's own
//! crates can use the rest of the kit in their unit tests without depending on themselves.

use std::time::Duration;

use crate::{APP_USER, DATABASE, PgOptions, PgServer, Role};
use pgmux_proxy::{Config, Listener, ListenerHandle};
use tokio_postgres::{Client, NoTls};

/// A PostgreSQL and a pgmux in front of it. Dropping it stops both.
pub struct Fixture {
    pub pg: PgServer,
    pub proxy: Option<ListenerHandle>,
}

impl Fixture {
    /// The address clients connect to.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.proxy.as_ref().expect("proxy running").addr
    }

    /// Connects a client through pgmux as the application user.
    pub async fn client(&self) -> Client {
        connect(self.addr(), &APP_USER, |_| {}).await.expect("connect through pgmux")
    }
}

/// Settings for a test pgmux; `extra` is TOML appended to the defaults.
pub fn config(pg: &PgServer, extra: &str) -> Config {
    // Top-level keys first: `extra` may end in a table (`[[databases]]`) that would swallow them.
    let mut text = format!("listen = \"127.0.0.1:0\"\ndatabase_url = {:?}\n", pg.url(&APP_USER));
    // Test defaults, unless `extra` sets them: a fixed pool of two and no control connection (sizing.rs
    // tests sizing), so that the backends a test counts are the pool's.
    for (key, line) in [
        ("pool_max", "pool_max = 2"),
        ("client_auth", "client_auth = \"scram-sha-256\""),
        ("max_connections_percent", "max_connections_percent = 0"),
    ] {
        if !extra.lines().any(|l| l.trim_start().starts_with(key)) {
            text.push_str(line);
            text.push('\n');
        }
    }
    text.push_str(extra);
    text.push('\n');
    Config::from_toml_str(&text).expect("test config is valid")
}

/// Starts PostgreSQL and pgmux with `extra` settings.
pub async fn start(extra: &str) -> Fixture {
    start_with(PgOptions::default(), extra).await
}

/// Starts PostgreSQL with `opts` and pgmux with `extra` settings.
pub async fn start_with(opts: PgOptions, extra: &str) -> Fixture {
    init_tracing();
    let pg = tokio::task::spawn_blocking(move || PgServer::start_with(&opts)).await.expect("start PostgreSQL");
    let proxy = Listener::start(config(&pg, extra)).await.expect("start pgmux");
    Fixture { pg, proxy: Some(proxy) }
}

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("PGMUX_TEST_LOG").unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
}

/// Connects with tokio-postgres, letting `tweak` adjust the settings; the connection runs in a task.
pub async fn connect(
    addr: std::net::SocketAddr,
    role: &Role,
    tweak: impl FnOnce(&mut tokio_postgres::Config),
) -> Result<Client, tokio_postgres::Error> {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host(addr.ip().to_string())
        .port(addr.port())
        .user(role.user)
        .password(role.password)
        .dbname(DATABASE)
        .connect_timeout(Duration::from_secs(10));
    tweak(&mut cfg);
    let (client, conn) = cfg.connect(NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// Connects over the Unix socket in `dir` (a directory as the host, as libpq takes it) as `user`, with
/// `password` if the test's method wants one (peer and trust need none); the connection runs in a task.
pub async fn connect_unix(
    dir: &std::path::Path,
    port: u16,
    user: &str,
    password: Option<&str>,
) -> Result<Client, tokio_postgres::Error> {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host_path(dir).port(port).user(user).dbname(DATABASE).connect_timeout(Duration::from_secs(10));
    if let Some(password) = password {
        cfg.password(password);
    }
    let (client, conn) = cfg.connect(NoTls).await?;
    tokio::spawn(conn);
    Ok(client)
}

/// Connects straight to PostgreSQL as the superuser, for oracle queries.
pub async fn direct(pg: &PgServer) -> Client {
    let addr = format!("127.0.0.1:{}", pg.port()).parse().expect("address");
    connect(addr, &crate::SUPERUSER, |_| {}).await.expect("connect directly")
}

/// Server connections in pgmux's pool right now (its user's client backends), not counting the liveness
/// probe's own connection (`application_name` `pgmux-probe`), which a full pool opens beside it when no
/// connection came back for a second; a loaded machine can stall that long.
pub async fn pgmux_backends(oracle: &Client) -> i64 {
    count_backends(oracle, false).await.expect("count backends")
}

/// Every connection of pgmux's user right now, the probe's too: what a database's connection budget sees.
/// An error for callers that outlive the server.
pub async fn try_pgmux_connections(oracle: &Client) -> Result<i64, tokio_postgres::Error> {
    count_backends(oracle, true).await
}

async fn count_backends(oracle: &Client, with_probe: bool) -> Result<i64, tokio_postgres::Error> {
    let row = oracle
        .query_one(
            "select count(*) from pg_stat_activity where usename = $1 and backend_type = 'client backend' \
             and ($2 or application_name is distinct from 'pgmux-probe')",
            &[&APP_USER.user, &with_probe],
        )
        .await?;
    Ok(row.get(0))
}

/// The SQLSTATE of an error, or a panic that shows the error.
pub fn code(err: &tokio_postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => db.code().code().to_owned(),
        None => panic!("expected a database error, got: {err:?}"),
    }
}

/// The message of a database error.
pub fn message(err: &tokio_postgres::Error) -> String {
    err.as_db_error().map(|e| e.message().to_owned()).unwrap_or_else(|| err.to_string())
}

/// Polls `check` until it holds or `within` passes.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The first value of a simple query's first row.
pub async fn scalar(client: &Client, sql: &str) -> String {
    let rows = client.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    for m in rows {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            return r.get(0).unwrap_or_default().to_owned();
        }
    }
    panic!("{sql}: no rows")
}

/// A configuration source that hands a reload the configuration the test put in it last (see
/// `Listener::set_config_source`).
#[derive(Debug, Default)]
pub struct NextConfig(std::sync::Mutex<Option<Config>>);

impl NextConfig {
    /// The configuration the next reload loads.
    pub fn set(&self, config: Config) {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(config);
    }
}

impl pgmux_proxy::ConfigSource for NextConfig {
    fn load(&self) -> Result<(Config, pgmux_proxy::ServerAccess), pgmux_proxy::SourceError> {
        let config = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        Ok((config.expect("the test set a configuration before the reload"), pgmux_proxy::ServerAccess::default()))
    }
}

/// This machine's own address that is not loopback (how a client across a network reaches pgmux), if it has
/// one: a test of what pgmux refuses over a network skips without one, except in CI (`CI=true`), where
/// nothing may be skipped and a machine without one fails the test.
pub fn non_loopback_address() -> Option<std::net::IpAddr> {
    let found = (|| {
        let probe = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
        // A UDP "connect" sends nothing: it only picks the local address a route to that (TEST-NET) address uses.
        probe.connect("192.0.2.1:9").ok()?;
        Some(probe.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
    })();
    let in_ci = std::env::var("CI").is_ok_and(|v| v == "true");
    assert!(found.is_some() || !in_ci, "CI=true: this machine has no address but loopback, which the test needs");
    found
}
