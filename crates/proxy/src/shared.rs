//! What all sessions share: the configuration, the server pool, the parameter catalog, cancel keys, and the
//! lending rules (a connection is checked before it is lent and retired when it is too old).

use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use pgmux_pool::{Grant, Lease, Pool, PoolConfig};
use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::{TxStatus, sqlstate};
use tokio_util::task::TaskTracker;

use crate::cancel::CancelRegistry;
use crate::client_auth::Authenticator;
use crate::config::Config;
use crate::credentials::{Credentials, CredentialsError};
use crate::params::{Catalog, Defaults};
use crate::server::{ConnectError, ServerConn};
use crate::sizing::{self, Limits};
use crate::statements::Registry;
use crate::tls::ServerTls;

/// Why a client could not get a server connection.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckoutError {
    #[error("no server connection became free within query_wait_timeout ({}s)", .waited.as_secs_f32())]
    Timeout {
        waited: Duration,
        /// The pool limit at the time.
        limit: usize,
        /// The database's last refusal of a new connection, if that is why.
        refused: Option<String>,
    },
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("cannot get database credentials: {0}")]
    Credentials(#[from] CredentialsError),
    #[error("pgmux is shutting down")]
    Closed,
}

impl CheckoutError {
    /// The error a client sees.
    pub(crate) fn to_client(&self) -> ErrorMessage {
        match self {
            CheckoutError::Timeout { refused: Some(refusal), .. } => ErrorMessage::error(
                sqlstate::TOO_MANY_CONNECTIONS,
                format!("{self}: the database refused new connections ({refusal})"),
            )
            .with_hint("the database is at max_connections: lower other clients' connections, or raise it"),
            CheckoutError::Timeout { limit, .. } => ErrorMessage::error(
                sqlstate::TOO_MANY_CONNECTIONS,
                format!("{self}: all {limit} server connections stayed busy"),
            )
            .with_hint("raise query_wait_timeout or the pool limit (pool_max, max_connections_percent), or shorten transactions"),
            CheckoutError::Connect(_) | CheckoutError::Credentials(_) => {
                ErrorMessage::error(sqlstate::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION, self.to_string())
            }
            CheckoutError::Closed => ErrorMessage::fatal(sqlstate::ADMIN_SHUTDOWN, self.to_string()),
        }
    }
}

/// The TLS acceptor for clients (a wrapper, for `Debug`).
#[derive(Clone)]
pub(crate) struct ClientTls(pub(crate) tokio_rustls::TlsAcceptor);

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientTls")
    }
}

/// Whether an idle connection may be lent.
enum Fitness {
    Fit,
    Unfit,
    NeedsRoundTrip,
}

/// State shared by every session of one pgmux.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: Arc<Config>,
    /// Server connections are boxed so that a lease, which a linked session holds inline, stays small.
    pub(crate) pool: Pool<Box<ServerConn>>,
    pub(crate) catalog: Catalog,
    /// Prepared statements of every client, by content.
    pub(crate) statements: Registry,
    /// Clients pinned to their server connection, by reason (in `PinReason::ALL` order).
    pub(crate) pins: [AtomicU64; 6],
    pub(crate) cancels: Arc<CancelRegistry>,
    pub(crate) auth: Authenticator,
    pub(crate) credentials: Arc<dyn Credentials>,
    pub(crate) server_tls: ServerTls,
    /// TLS offered to clients, when a certificate is configured.
    pub(crate) client_tls: Option<ClientTls>,
    /// Logged-in and logging-in client sessions.
    pub(crate) clients: AtomicUsize,
    /// The pool's limit and where it comes from (the database, refusals, pool_max).
    pub(crate) limits: Limits,
    next_server_id: AtomicU64,
    /// Seeds the per-connection lifetime jitter.
    jitter: std::collections::hash_map::RandomState,
    /// Background work (closing retired connections) that shutdown waits for.
    pub(crate) tasks: TaskTracker,
}

impl Shared {
    pub(crate) fn new(
        config: Arc<Config>,
        tasks: TaskTracker,
        credentials: Arc<dyn Credentials>,
        server_tls: ServerTls,
        client_tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Self {
        let client_tls = client_tls.map(ClientTls);
        let limit = sizing::initial_limit(config.max_connections_percent, config.pool_max);
        let pool_config = PoolConfig { max_size: limit, grow_after: config.pool_grow_after };
        // A connection that comes back while the pool is over a lowered limit is closed, not kept.
        let closer_tasks = tasks.clone();
        let pool = Pool::with_closer(pool_config, move |conn: Box<ServerConn>| {
            tracing::debug!(server_id = conn.id, "closing a server connection above the pool limit");
            closer_tasks.spawn(conn.terminate());
        });
        let auth = Authenticator::new(&config);
        Shared {
            config,
            pool,
            catalog: Catalog::default(),
            statements: Registry::default(),
            pins: Default::default(),
            cancels: Arc::new(CancelRegistry::default()),
            auth,
            credentials,
            server_tls,
            client_tls,
            clients: AtomicUsize::new(0),
            limits: Limits::new(limit),
            next_server_id: AtomicU64::new(1),
            jitter: Default::default(),
            tasks,
        }
    }

    /// A server connection for one client: idle and checked, or newly opened; waits in line up to
    /// `query_wait_timeout`.
    pub(crate) async fn checkout(&self) -> Result<Lease<Box<ServerConn>>, CheckoutError> {
        let wait = self.config.query_wait_timeout;
        let mut deadline = None;
        // Why the last open failed: the database refused it (53300), or it failed while others were open.
        let mut refused: Option<String> = None;
        let mut failed_open: Option<ConnectError> = None;
        // The pause after the last failed open; each failure doubles it.
        let mut pause: Option<Duration> = None;
        loop {
            // Most checkouts find an idle connection: no timer, no queue.
            let grant = match self.pool.try_acquire() {
                Err(_closed) => return Err(CheckoutError::Closed),
                Ok(Some(grant)) => grant,
                Ok(None) => {
                    let until = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + wait);
                    match tokio::time::timeout_at(until, self.pool.acquire()).await {
                        Err(_) => match failed_open {
                            Some(e) => return Err(e.into()),
                            None => return Err(self.timeout(wait, refused)),
                        },
                        Ok(Err(_closed)) => return Err(CheckoutError::Closed),
                        Ok(Ok(grant)) => grant,
                    }
                }
            };
            match grant {
                Grant::Idle(mut lease) => {
                    if self.fit_to_lend(&mut lease).await {
                        return Ok(lease);
                    }
                    tracing::debug!(server_id = lease.id, "idle server connection failed its check; closing it");
                    self.retire(lease.discard());
                }
                Grant::Open(slot) => match self.open().await {
                    Ok(conn) => {
                        tracing::debug!(server_id = conn.id, addr = %conn.addr, "opened server connection");
                        return Ok(slot.fill(Box::new(conn)));
                    }
                    // The database has no slot left: back-pressure, not an error. Hold fewer connections,
                    // wait (longer each time) and try again until query_wait_timeout.
                    Err(CheckoutError::Connect(e)) if sizing::is_refusal(&e) => {
                        drop(slot);
                        let status = self.pool.status();
                        let limit = self.limits.refused(status.size - status.opening);
                        self.apply_limit(limit);
                        let until = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + wait);
                        let pause = *pause.insert(next_pause(pause));
                        tracing::warn!(error = %e, limit, retry_in = ?pause,
                            "the database refused a new connection; lowering the pool limit");
                        refused = Some(e.to_string());
                        if tokio::time::Instant::now() + pause >= until {
                            tokio::time::sleep_until(until).await;
                            return Err(self.timeout(wait, refused));
                        }
                        tokio::time::sleep(pause).await;
                    }
                    // The database is up and busy connections will come back: a failed open (a lost SYN, a
                    // slow start under load, a login refused to new sessions only) makes this client wait
                    // for one of them, as long as query_wait_timeout allows, instead of failing its query.
                    // With no connection open at all, the error goes to the client at once.
                    Err(CheckoutError::Connect(e)) => {
                        drop(slot);
                        if self.pool.status().size == 0 {
                            return Err(e.into());
                        }
                        let until = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + wait);
                        let pause = *pause.insert(next_pause(pause));
                        tracing::warn!(error = %e, retry_in = ?pause,
                            "could not open a server connection; the client waits for one of the open ones");
                        let now = tokio::time::Instant::now();
                        if now >= until {
                            return Err(e.into());
                        }
                        failed_open = Some(e);
                        tokio::time::sleep(pause.min(until - now)).await;
                    }
                    Err(e) => return Err(e),
                },
            }
        }
    }

    fn timeout(&self, waited: Duration, refused: Option<String>) -> CheckoutError {
        CheckoutError::Timeout { waited, limit: self.limits.current(), refused }
    }

    /// Puts a new limit into force: waiters may open up to it, idle connections above it are closed, and
    /// busy ones are closed when they come back.
    pub(crate) fn apply_limit(&self, limit: usize) {
        if self.pool.status().max_size == limit {
            return;
        }
        self.pool.set_max_size(limit);
        for conn in self.pool.evict_idle(|_, _| false) {
            tracing::debug!(server_id = conn.id, limit, "closing an idle server connection above the pool limit");
            self.retire(conn);
        }
    }

    /// Opens connections in the background up to `min_pool_size` (within the limit).
    pub(crate) fn warm(self: &Arc<Self>) {
        let want = self.config.min_pool_size.min(self.limits.current());
        while self.pool.status().size < want {
            let Some(slot) = self.pool.try_grow() else { return };
            let shared = Arc::clone(self);
            self.tasks.spawn(async move {
                match shared.open().await {
                    Ok(conn) => drop(slot.fill(Box::new(conn))),
                    Err(e) => tracing::debug!(error = %e, "could not open a connection for min_pool_size"),
                }
            });
        }
    }

    /// Opens the control connection (sizing): logged in like a pool connection, never lent.
    pub(crate) async fn open_control(&self, application_name: &str) -> Result<ServerConn, CheckoutError> {
        self.connect(0, 0, Some(application_name)).await
    }

    /// Opens a pool connection, with its own jittered `server_lifetime`.
    async fn open(&self) -> Result<ServerConn, CheckoutError> {
        let id = self.next_server_id.fetch_add(1, Ordering::Relaxed);
        let mut conn = self.connect(id, self.config.max_prepared_statements, None).await?;
        conn.lifetime = jittered(self.config.server_lifetime, self.jitter.hash_one(id));
        // Whichever path opened it (a checkout, min_pool_size), the first connection tells what the server's
        // own values are. Without them every link would reset every reported parameter, a round trip each.
        if !self.catalog.has_defaults() {
            self.catalog.set_defaults(Defaults::from_reported(&conn.params.reported));
        }
        Ok(conn)
    }

    /// Opens and logs in a new server connection. A login refused for its password is tried once more
    /// after the credentials are refreshed: a rotated secret then takes effect without an error.
    async fn connect(
        &self,
        id: u64,
        max_statements: usize,
        application_name: Option<&str>,
    ) -> Result<ServerConn, CheckoutError> {
        let timeout = self.config.server_connect_timeout;
        let login = self.credentials.login().await?;
        match ServerConn::connect(&login, &self.server_tls, id, timeout, max_statements, application_name).await {
            Err(e) if e.is_auth_failure() && self.credentials.refresh().await? => {
                tracing::info!(error = %e, "login refused; retrying with refreshed credentials");
                let login = self.credentials.login().await?;
                Ok(ServerConn::connect(&login, &self.server_tls, id, timeout, max_statements, application_name).await?)
            }
            other => Ok(other?),
        }
    }

    /// The common case of [`checkout`](Self::checkout), without waiting: an idle connection that passes
    /// the checks that need no round trip. `None` means "take the slow path".
    pub(crate) fn try_checkout(&self) -> Option<Lease<Box<ServerConn>>> {
        loop {
            let Ok(Some(Grant::Idle(mut lease))) = self.pool.try_acquire() else {
                // Nothing idle (a slot, if granted, is dropped and taken again by the slow path).
                return None;
            };
            match self.quick_check(&mut lease) {
                Fitness::Fit => return Some(lease),
                Fitness::Unfit => self.retire(lease.discard()),
                // Back to the pool; the slow path takes it again and checks it properly.
                Fitness::NeedsRoundTrip => return None,
            }
        }
    }

    /// What can be known about an idle connection without talking to the server.
    fn quick_check(&self, lease: &mut Lease<Box<ServerConn>>) -> Fitness {
        let meta = *lease.meta();
        let now = tokio::time::Instant::now();
        let lifetime = lease.lifetime;
        if !lifetime.is_zero() && now.saturating_duration_since(meta.created) >= lifetime {
            return Fitness::Unfit;
        }
        if !lease.looks_alive() {
            return Fitness::Unfit;
        }
        if now.saturating_duration_since(meta.idle_since) < self.config.server_check_delay {
            return Fitness::Fit;
        }
        Fitness::NeedsRoundTrip
    }

    /// An idle connection may be lent if it is young enough, nothing arrived on it while it sat idle, and,
    /// after a long idle spell (or a Lambda freeze), it answers a round trip.
    async fn fit_to_lend(&self, lease: &mut Lease<Box<ServerConn>>) -> bool {
        match self.quick_check(lease) {
            Fitness::Fit => true,
            Fitness::Unfit => false,
            Fitness::NeedsRoundTrip => {
                matches!(lease.simple_query("", self.config.server_connect_timeout).await, Ok((None, TxStatus::Idle)))
            }
        }
    }

    /// Closes a connection that leaves the pool, politely and in the background.
    pub(crate) fn retire(&self, conn: Box<ServerConn>) {
        self.tasks.spawn(conn.terminate());
    }

    /// Closes idle connections past `server_idle_timeout` or `server_lifetime`.
    pub(crate) fn evict_idle(&self) {
        let idle = self.config.server_idle_timeout;
        let keep = self.config.min_pool_size;
        let mut size = self.pool.status().size;
        let expired = self.pool.evict_idle(|conn, m| {
            let old = !conn.lifetime.is_zero() && m.created.elapsed() >= conn.lifetime;
            // Idle ones are closed down to min_pool_size; old ones are closed anyway (and replaced warm).
            let stale = !idle.is_zero() && m.idle_since.elapsed() >= idle && size > keep;
            if old || stale {
                size -= 1;
            }
            old || stale
        });
        for conn in expired {
            tracing::debug!(server_id = conn.id, "closing idle server connection");
            self.retire(conn);
        }
    }
}

/// `lifetime` less a random 0-10 % (`random` picks how much), so that connections opened together retire
/// apart.
fn jittered(lifetime: Duration, random: u64) -> Duration {
    let tenth_ms = (lifetime.as_millis() / 10) as u64;
    lifetime.saturating_sub(Duration::from_millis(random % (tenth_ms + 1)))
}

/// The pause before opening again after a failed open: 50 ms, then twice the last, at most a second.
fn next_pause(last: Option<Duration>) -> Duration {
    last.map_or(Duration::from_millis(50), |p| (p * 2).min(Duration::from_secs(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_between_failed_opens_double_up_to_a_second() {
        let mut pauses = Vec::new();
        let mut last = None;
        for _ in 0..7 {
            last = Some(next_pause(last));
            pauses.push(last.unwrap().as_millis());
        }
        assert_eq!(pauses, [50, 100, 200, 400, 800, 1000, 1000]);
    }

    #[test]
    fn lifetimes_are_shortened_by_up_to_a_tenth() {
        let hour = Duration::from_secs(3600);
        assert_eq!(jittered(hour, 0), hour);
        assert_eq!(jittered(hour, 360_000), hour - Duration::from_secs(360));
        assert_eq!(jittered(hour, 360_001), hour, "wraps within the tenth");
        let seen: Vec<Duration> = (0..1000u64).map(|i| jittered(hour, i.wrapping_mul(0x9E37_79B9_7F4A_7C15))).collect();
        assert!(seen.iter().all(|d| *d <= hour && *d >= hour - Duration::from_secs(360)));
        assert!(seen.iter().any(|d| *d < hour - Duration::from_secs(300)), "spread over the whole tenth");
        assert_eq!(jittered(Duration::ZERO, 12345), Duration::ZERO, "0 stays 'never'");
        assert_eq!(jittered(Duration::from_millis(5), 7), Duration::from_millis(5), "too short to jitter");
    }
}
