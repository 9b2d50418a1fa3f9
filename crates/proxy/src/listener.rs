//! The listener: the socket clients connect to, and the life of the whole pooler around it. It accepts
//! clients, keeps the pool tidy, and shuts down in order (stop accepting, let transactions finish until the
//! deadline, then say goodbye to every server).

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

use crate::client::auth::Authenticator;
use crate::client::shared::Shared;
use crate::client::unix_socket::{self, UnixSocket};
use crate::config::Config;
use crate::config::auth_file::{AuthFileError, UserBook};
use crate::config::credentials::{ServerAccess, StaticCredentials};
use crate::config::source::ConfigSource;
use crate::net::io::Stream;
use crate::net::tls::{self, TlsSetupError};
use crate::observe::Peer;
use crate::ops::metrics_http;
use crate::ops::reload::ReloadError;
use crate::pools::budget::Report;
use crate::pools::sizing;
use crate::pools::{Pools, ServerPool, routing};
use crate::runtime::stop::{Level, Stop};
use crate::session;

/// A pooler bound to its listen address, not yet accepting.
#[derive(Debug)]
pub struct Listener {
    shared: Arc<Shared>,
    socket: TcpListener,
    /// `unix_socket_dir`'s socket, if set.
    unix: Option<UnixSocket>,
    stop: Stop,
    /// No database I/O of pgmux's own (sizing, warm connections) until this fires.
    gate: Option<oneshot::Receiver<()>>,
}

/// The pooler could not start.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// The Unix-domain socket could not be bound.
    #[error("cannot listen on the Unix socket {path}: {source}")]
    BindUnix {
        /// The socket file's path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// TLS could not be set up.
    #[error("invalid TLS setting {0}")]
    Tls(#[from] TlsSetupError),
    /// The auth file cannot be read or is not a userlist.
    #[error(transparent)]
    AuthFile(#[from] AuthFileError),
    /// Sizing from the database needs a user to read it, and the configuration names none.
    #[error(
        "max_connections_percent sizes the pools from the database, which needs a user to read it: set \
         database_url, give a route its own user and password, or set pool_max and max_connections_percent = 0"
    )]
    NoControlUser,
    /// `pgmux check` could not read the database.
    #[error("{0}")]
    Check(String),
}

/// A pooler running in the background (tests and embedding).
#[derive(Debug)]
pub struct ListenerHandle {
    /// The address clients connect to.
    pub addr: SocketAddr,
    /// The Unix-domain socket clients may connect to instead, if `unix_socket_dir` is set.
    pub unix_socket: Option<PathBuf>,
    stop: Stop,
    admin: Admin,
    done: JoinHandle<()>,
}

impl ListenerHandle {
    /// Begins a graceful shutdown and waits until the pooler has finished.
    pub async fn shutdown(self) {
        self.stop.begin_graceful();
        let _ = self.done.await;
    }

    /// The shutdown signal, to trigger or watch a shutdown.
    pub fn stop(&self) -> &Stop {
        &self.stop
    }

    /// Operations on the pooler while it runs: its metrics, its configuration.
    pub fn admin(&self) -> &Admin {
        &self.admin
    }
}

/// Operations on a running pooler for the binary: reload the configuration, read the metrics.
#[derive(Clone, Debug)]
pub struct Admin {
    shared: Arc<Shared>,
}

impl Admin {
    /// Re-reads the configuration from the source given to [`Listener::set_config_source`] and puts it in
    /// force (`SIGHUP`). `Ok` says what changed; `Err` why the running configuration stays.
    pub fn reload(&self) -> Result<String, ReloadError> {
        crate::ops::reload::reload(&self.shared).map(|outcome| outcome.to_string())
    }

    /// Every metric now.
    pub fn metrics(&self) -> pgmux_metrics::Snapshot {
        let obs = self.shared.observer();
        obs.tick();
        obs.snapshot(self.shared.pools.gauges())
    }

    /// Every metric now as `/metrics` serves it, per-reader families included.
    pub fn metrics_text(&self, format: pgmux_metrics::Format) -> String {
        crate::ops::metrics_http::metrics_text(&self.shared, format)
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        self.shared.pools.live_config().full()
    }

    /// Every pool pauses, as the console's PAUSE (PgBouncer's `SIGUSR1`): running transactions finish, new
    /// ones wait.
    pub fn pause(&self) {
        self.shared.pools.all().iter().for_each(|pool| pool.pause());
    }

    /// Every pool resumes, as the console's RESUME (PgBouncer's `SIGUSR2`); false, with nothing done, once
    /// pgmux is shutting down.
    pub fn resume(&self) -> bool {
        if self.shared.pools.globals().stop.level() >= Level::Closed {
            return false;
        }
        self.shared.pools.all().iter().for_each(|pool| pool.resume());
        true
    }
}

impl Listener {
    /// Operations on this pooler while it runs.
    pub fn admin(&self) -> Admin {
        Admin { shared: Arc::clone(&self.shared) }
    }

    /// Where `SIGHUP` and the console's `RELOAD` read the configuration from. Without one, a reload fails
    /// and says so.
    pub fn set_config_source(&self, source: Arc<dyn ConfigSource>) {
        let _ = self.shared.source.set(source);
    }

    /// Binds the listen address. No database I/O happens until the first client needs it.
    pub async fn bind(config: Config) -> Result<Listener, SetupError> {
        Self::bind_with(config, ServerAccess::default()).await
    }

    /// Like [`bind`](Self::bind), with credentials and CAs from the binary.
    pub async fn bind_with(config: Config, access: ServerAccess) -> Result<Listener, SetupError> {
        let stop = Stop::new();
        let (shared, listen) = Self::prepare(config, access, &stop)?;
        let socket = TcpListener::bind(listen).await.map_err(|source| SetupError::Bind { addr: listen, source })?;
        let unix = match &shared.config().unix_socket_dir {
            Some(dir) => {
                // Named after the port actually bound, which differs from listen's when that is 0.
                let port = socket.local_addr().map_err(|source| SetupError::Bind { addr: listen, source })?.port();
                let bound = UnixSocket::bind(dir, port)
                    .map_err(|source| SetupError::BindUnix { path: unix_socket::socket_path(dir, port), source })?;
                Some(bound)
            }
            None => None,
        };
        Ok(Listener { shared, socket, unix, stop, gate: None })
    }

    /// Everything but the listener.
    fn prepare(config: Config, access: ServerAccess, stop: &Stop) -> Result<(Arc<Shared>, SocketAddr), SetupError> {
        let (server_tls, client_tls) = tls::from_config(&config, access.extra_root_certs)?;
        let book = UserBook::load(&config)?;
        let credentials = match access.credentials {
            Some(credentials) => credentials,
            None => Arc::new(StaticCredentials::new(
                routing::sizing_login(&config, &book).map_err(|_| SetupError::NoControlUser)?,
            )),
        };
        let auth = Authenticator::new(&config, book, access.pool_credentials);
        let listen = config.listen;
        let config = Arc::new(config);
        let tasks = TaskTracker::new();
        let mut pools = Pools::new(config, credentials, server_tls, tasks.clone(), stop.clone());
        pools.locate_instances_with(access.instance_endpoints);
        let shared = Arc::new(Shared::new(pools, tasks, client_tls, auth));
        Ok((shared, listen))
    }

    /// `pgmux check`: connects as the configuration says, reads what sizing reads, and works out the
    /// limit this instance would take. Listens on nothing.
    pub async fn check(config: Config, access: ServerAccess) -> Result<Report, SetupError> {
        let (shared, _) = Self::prepare(config, access, &Stop::new())?;
        sizing::check(shared.pools.first()).await.map_err(|e| SetupError::Check(e.to_string()))
    }

    /// Holds back pgmux's own database I/O (the control connection, `min_pool_size`) until `gate` fires or
    /// is dropped; clients are served meanwhile. The Lambda extension fires it once it has called
    /// `event/next`.
    pub fn hold_database_until(&mut self, gate: oneshot::Receiver<()>) {
        self.gate = Some(gate);
    }

    /// Where clients connect.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// The Unix-domain socket's path, if `unix_socket_dir` is set.
    pub fn unix_socket_path(&self) -> Option<&Path> {
        self.unix.as_ref().map(UnixSocket::path)
    }

    /// The signal that stops this pooler: `begin_graceful` shuts it down.
    pub fn stop(&self) -> Stop {
        self.stop.clone()
    }

    /// Binds and runs in a background task.
    pub async fn start(config: Config) -> Result<ListenerHandle, SetupError> {
        Self::start_with(config, ServerAccess::default()).await
    }

    /// Like [`start`](Self::start), with credentials and CAs from the binary.
    pub async fn start_with(config: Config, access: ServerAccess) -> Result<ListenerHandle, SetupError> {
        let proxy = Listener::bind_with(config, access).await?;
        let addr =
            proxy.local_addr().map_err(|source| SetupError::Bind { addr: proxy.shared.config().listen, source })?;
        let stop = proxy.stop();
        let unix_socket = proxy.unix_socket_path().map(Path::to_owned);
        let admin = proxy.admin();
        let done = tokio::spawn(proxy.run());
        Ok(ListenerHandle { addr, unix_socket, stop, admin, done })
    }

    /// Serves clients until a graceful shutdown begins, then shuts down.
    pub async fn run(self) {
        let Listener { shared, socket, unix, stop, gate } = self;
        let config = shared.config();
        tracing::info!(listen = %socket.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            unix_socket = ?unix.as_ref().map(UnixSocket::path),
            database = %config.database_url, pool_max = ?config.pool_max,
            max_connections_percent = config.max_connections_percent, "pgmux is ready");
        drop(config);
        // Unix clients are shown with the port their socket file is named after, as PgBouncer does.
        let unix_peer = Peer::Unix { port: socket.local_addr().map(|a| a.port()).unwrap_or_default() };
        let maintenance = tokio::spawn(maintain(Arc::clone(&shared), stop.clone()));
        let liveness = tokio::spawn(watch_liveness(Arc::clone(&shared), stop.clone()));
        session::prewarm(&shared);
        let sizing = tokio::spawn(sizing::run(Arc::clone(shared.pools.first()), stop.clone(), gate));
        let metrics = tokio::spawn(metrics_http::serve(Arc::clone(&shared), stop.clone()));
        let next_id = Arc::new(AtomicU64::new(1));
        // One wait for the doors to close, kept across the loop: made anew for each connection, it joined and
        // left the stop's list of waiters every time.
        let closed = stop.reached(Level::Closed);
        tokio::pin!(closed);
        loop {
            tokio::select! {
                () = &mut closed => break,
                accepted = socket.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let id = next_id.fetch_add(1, Ordering::Relaxed);
                        let _ = stream.set_nodelay(true);
                        let serve = session::serve(Arc::clone(&shared), Stream::Tcp(stream), Peer::Tcp(peer), id, stop.clone());
                        shared.tasks.spawn(serve);
                    }
                    Err(e) => accept_failed(e).await,
                },
                accepted = accept_unix(unix.as_ref()) => match accepted {
                    Ok(stream) => {
                        let id = next_id.fetch_add(1, Ordering::Relaxed);
                        let serve = session::serve(Arc::clone(&shared), Stream::Unix(stream), unix_peer, id, stop.clone());
                        shared.tasks.spawn(serve);
                    }
                    Err(e) => accept_failed(e).await,
                },
            }
        }
        // The sockets stay open for the admin console until pgmux exits; other clients are turned away.
        let door = tokio::spawn(console_door(socket, unix, unix_peer, Arc::clone(&shared), stop.clone(), next_id));
        if stop.level() < Level::Graceful {
            tracing::info!(
                clients = shared.clients.load(Ordering::Relaxed),
                "SHUTDOWN WAIT_FOR_CLIENTS: no new clients; stopping once the last has left"
            );
            tokio::select! {
                () = last_client_left(&shared) => {}
                _ = stop.reached(Level::Graceful) => {}
            }
            stop.begin_graceful();
        }
        tracing::info!(clients = shared.clients.load(Ordering::Relaxed), "shutting down: no new clients");
        shared.pools.all().iter().for_each(|pool| pool.close());
        shared.tasks.close();
        let deadline = shared.config().shutdown_timeout;
        if pgmux_timer::timeout(deadline, shared.tasks.wait()).await.is_err() {
            tracing::warn!(?deadline, "shutdown_timeout reached; closing the remaining sessions");
            stop.force();
            shared.tasks.wait().await;
        }
        stop.force();
        let _ = maintenance.await;
        let _ = liveness.await;
        let _ = sizing.await;
        let _ = door.await;
        let _ = metrics.await;
        let servers: Vec<_> = shared.pools.all().iter().flat_map(|pool| pool.drain_idle()).collect();
        let count = servers.len();
        futures_join_all(servers.into_iter().map(|s| s.terminate())).await;
        tracing::info!(servers = count, "pgmux stopped");
    }
}

/// Returns once no client but the admin console's is connected (looked at every [`LAST_CLIENT_POLL`]):
/// `Shared::clients` counts a console session only while it logs in.
async fn last_client_left(shared: &Shared) {
    while shared.clients.load(Ordering::Relaxed) > 0 {
        pgmux_timer::sleep(LAST_CLIENT_POLL).await;
    }
}

/// How often `SHUTDOWN WAIT_FOR_CLIENTS` looks whether the last client has left.
const LAST_CLIENT_POLL: Duration = Duration::from_millis(100);

/// Out of file descriptors and the like: back off instead of spinning.
async fn accept_failed(e: io::Error) {
    tracing::warn!(error = %e, "accept failed");
    pgmux_timer::sleep(Duration::from_millis(50)).await;
}

/// The next client of the Unix socket; never, without one.
async fn accept_unix(unix: Option<&UnixSocket>) -> io::Result<tokio::net::UnixStream> {
    match unix {
        Some(socket) => socket.accept().await,
        None => std::future::pending().await,
    }
}

/// Runs futures to completion concurrently.
async fn futures_join_all<F: std::future::Future<Output = ()> + Send + 'static>(futures: impl Iterator<Item = F>) {
    let mut set = tokio::task::JoinSet::new();
    for f in futures {
        set.spawn(f);
    }
    while set.join_next().await.is_some() {}
}

/// How late the maintenance tick must be for pgmux to take it that its process was stopped.
const THAW_LATENESS: Duration = Duration::from_secs(2);

/// Closes idle and old server connections on a timer until shutdown; keeps
/// the metrics' time windows going.
async fn maintain(shared: Arc<Shared>, stop: Stop) {
    let mut tick = pgmux_timer::beat(Duration::from_secs(1));
    loop {
        let due = tokio::select! {
            _ = stop.reached(Level::Hard) => return,
            due = tick.tick() => due,
        };
        // A tick this late means the process did not run: Lambda froze it between invocations (or a
        // SIGSTOP). A loaded machine delays a tick by milliseconds, not seconds.
        let late = due.elapsed();
        if late >= THAW_LATENESS {
            shared.pools.globals().thawed(late);
        }
        shared.pools.all().iter().for_each(|pool| pool.evict_idle());
        // A lowered budget takes back idle connections from whichever pools hold them; the pools of named
        // databases keep their min_pool_size warm (sizing's loop warms the default pool).
        shared.pools.keep_to_budget();
        // A forced-user database with min_pool_size has its pool before any client (one a reload added,
        // from the next tick).
        session::prewarm(&shared);
        shared.pools.all().iter().skip(1).for_each(ServerPool::warm);
        shared.observer().tick();
    }
}

/// Probes for a hung server (see `pools/probe.rs`) every [`probe_period`](ServerPool::probe_period): each
/// pool's round on its own, so that a round waiting out a silent node holds up no other pool's. A node one
/// pool declares dead is declared dead in every pool.
async fn watch_liveness(shared: Arc<Shared>, stop: Stop) {
    let mut rounds = tokio::task::JoinSet::new();
    let spread = spread_verdicts(&shared);
    tokio::pin!(spread);
    // On the process's beat (the sizing tick and maintenance wake with it); a new period from a reload
    // starts a new one, whose first tick (at once) is a round like any other.
    let mut period = ServerPool::probe_period(shared.config().server_probe_timeout);
    let mut tick = pgmux_timer::beat(period);
    loop {
        let wanted = ServerPool::probe_period(shared.config().server_probe_timeout);
        if wanted != period {
            period = wanted;
            tick = pgmux_timer::beat(period);
        }
        tokio::select! {
            _ = stop.reached(Level::Hard) => return,
            () = &mut spread => {}
            _ = tick.tick() => {}
        }
        while rounds.try_join_next().is_some() {}
        for pool in shared.pools.all() {
            if let Some(round) = ServerPool::liveness_round(&pool) {
                rounds.spawn(round);
            }
        }
    }
}

/// Tells every pool of each node another declared dead, as soon as it is declared.
async fn spread_verdicts(shared: &Shared) {
    loop {
        for node in shared.pools.globals().dead_news().await {
            shared.pools.all().iter().for_each(|pool| pool.heard_dead(node));
        }
    }
}

/// Accepts during a graceful shutdown: the admin console is served (untracked, so shutdown does not wait
/// for it), anyone else is told pgmux is shutting down. Ends when pgmux stops.
async fn console_door(
    socket: TcpListener,
    unix: Option<UnixSocket>,
    unix_peer: Peer,
    shared: Arc<Shared>,
    stop: Stop,
    next_id: Arc<AtomicU64>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            _ = stop.reached(Level::Hard) => return,
            accepted = socket.accept() => match accepted {
                Ok((stream, peer)) => (Stream::Tcp(stream), Peer::Tcp(peer)),
                Err(_) => {
                    pgmux_timer::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            accepted = accept_unix(unix.as_ref()) => match accepted {
                Ok(stream) => (Stream::Unix(stream), unix_peer),
                Err(_) => {
                    pgmux_timer::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(session::serve(Arc::clone(&shared), stream, peer, id, stop.clone()));
    }
}
