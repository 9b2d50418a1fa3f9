//! What all sessions share: the configuration, the server pool, the parameter catalog, cancel keys, and the
//! lending rules (a connection is checked before it is lent and retired when it is too old).

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
use crate::statements::Registry;
use crate::tls::ServerTls;

/// Why a client could not get a server connection.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckoutError {
    #[error("no server connection became free within query_wait_timeout ({}s)", .0.as_secs_f32())]
    Timeout(Duration),
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("cannot get database credentials: {0}")]
    Credentials(#[from] CredentialsError),
    #[error("pgmux is shutting down")]
    Closed,
}

impl CheckoutError {
    /// The error a client sees.
    pub(crate) fn to_client(&self, pool_max: usize) -> ErrorMessage {
        match self {
            CheckoutError::Timeout(_) => ErrorMessage::error(
                sqlstate::TOO_MANY_CONNECTIONS,
                format!("{self}: all {pool_max} server connections stayed busy"),
            )
            .with_hint("raise pool_max or query_wait_timeout, or shorten transactions"),
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
    next_server_id: AtomicU64,
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
        let pool = Pool::new(PoolConfig { max_size: config.pool_max, grow_after: Duration::ZERO });
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
            next_server_id: AtomicU64::new(1),
            tasks,
        }
    }

    /// A server connection for one client: idle and checked, or newly opened; waits in line up to
    /// `query_wait_timeout`.
    pub(crate) async fn checkout(&self) -> Result<Lease<Box<ServerConn>>, CheckoutError> {
        let mut deadline = None;
        loop {
            // Most checkouts find an idle connection: no timer, no queue.
            let grant = match self.pool.try_acquire() {
                Err(_closed) => return Err(CheckoutError::Closed),
                Ok(Some(grant)) => grant,
                Ok(None) => {
                    let wait = self.config.query_wait_timeout;
                    let until = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + wait);
                    match tokio::time::timeout_at(until, self.pool.acquire()).await {
                        Err(_) => return Err(CheckoutError::Timeout(wait)),
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
                Grant::Open(slot) => {
                    let conn = self.open().await?;
                    let id = conn.id;
                    tracing::debug!(server_id = id, addr = %conn.addr, "opened server connection");
                    if !self.catalog.has_defaults() {
                        self.catalog.set_defaults(Defaults::from_reported(&conn.params.reported));
                    }
                    return Ok(slot.fill(Box::new(conn)));
                }
            }
        }
    }

    /// Opens and logs in a new server connection. A login refused for its password is tried once more
    /// after the credentials are refreshed: a rotated secret then takes effect without an error.
    async fn open(&self) -> Result<ServerConn, CheckoutError> {
        let id = self.next_server_id.fetch_add(1, Ordering::Relaxed);
        let timeout = self.config.server_connect_timeout;
        let max = self.config.max_prepared_statements;
        let login = self.credentials.login().await?;
        match ServerConn::connect(&login, &self.server_tls, id, timeout, max).await {
            Err(e) if e.is_auth_failure() && self.credentials.refresh().await? => {
                tracing::info!(error = %e, "login refused; retrying with refreshed credentials");
                let login = self.credentials.login().await?;
                Ok(ServerConn::connect(&login, &self.server_tls, id, timeout, max).await?)
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
        let lifetime = self.config.server_lifetime;
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
        let lifetime = self.config.server_lifetime;
        let expired = self.pool.evict_idle(|m| {
            (!idle.is_zero() && m.idle_since.elapsed() >= idle)
                || (!lifetime.is_zero() && m.created.elapsed() >= lifetime)
        });
        for conn in expired {
            tracing::debug!(server_id = conn.id, "closing idle server connection");
            self.retire(conn);
        }
    }
}
