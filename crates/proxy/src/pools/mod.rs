//! The pools and how big they may be: [`ServerPool`] lends server connections, [`budget`] works out from a
//! reading of the database how many this pgmux may hold, and [`sizing`] keeps reading and hands the plan to
//! the pool.
//!
//! [`ServerPool`] opens and logs in server connections (with fresh credentials each time), lends idle ones
//! after checking they are fit ([`checkout`](ServerPool::checkout)), closes those that are too old, idle too
//! long or over the limit, keeps `min_pool_size` warm, and opens the control connection that sizing reads the
//! database through. It is the one owner of the limit: the sizing loop proposes a plan, a refusal from the
//! database lowers a ceiling below it, and the pool enforces whichever is lower.
//!
//! The bookkeeping (who is idle, who waits, how many are open) is `pgmux_pool`'s, which knows nothing of
//! PostgreSQL; this module adds what does.

pub(crate) mod auth_query;
pub mod budget;
mod checkout;
mod limit;
mod nodes;
mod open;
mod probe;
pub(crate) mod readers;
mod refusal;
mod registry;
pub(crate) mod routing;
pub(crate) mod sizing;

use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::Guard;
use parking_lot::RwLock;
use pgmux_metrics::ServerCloseReason;
use pgmux_pool::{Lease, Pool, PoolConfig, Status};

pub(crate) use checkout::{CheckoutError, Fitness, Resume, ServerGrant, ServerTicket};
use limit::Limit;
pub(crate) use nodes::Distrust;
use nodes::Nodes;
pub(crate) use probe::Answer;
pub(crate) use registry::{Globals, PoolId, PoolKey, PoolSetup, Pools};

use crate::config::credentials::Credentials;
use crate::config::{Config, PoolMode, TargetSessionAttrs};
use crate::net::tls::ServerTls;
use crate::observe::{DbCounters, ServerEntry, unix_now};
use crate::protocol::params::Defaults;
use crate::server::{ConnectError, ConnectOptions, ServerConn, SocketOptions};

/// A server connection lent to a client. Boxed, so that a lease held inline by a session stays small.
pub(crate) type ServerLease = Lease<Box<ServerConn>>;

/// The server connections of one pool (one per route and server user), and how they are lent. What every
/// pool shares (the configuration in force, the observer, the budget) is in [`Globals`], beside the pools.
#[derive(Debug)]
pub(crate) struct ServerPool {
    globals: Arc<Globals>,
    pool: Pool<Box<ServerConn>>,
    limit: Limit,
    /// Where logins come from and how TLS is done; a reload may replace both (new connections use them).
    credentials: RwLock<Arc<dyn Credentials>>,
    tls: RwLock<ServerTls>,
    /// Connections with an id below this are replaced as they come back (`RECONNECT`, a reload that
    /// changed how to log in).
    reconnect_below: AtomicU64,
    /// The server's own parameter values, as the newest connection reported them at login.
    defaults: RwLock<Arc<Defaults>>,
    /// How long the last new connection took to open and log in, in microseconds: lazy growth waits at
    /// least that long (see [`grow_after`]).
    login_micros: AtomicU64,
    /// Nodes seen in the wrong role or not answering.
    nodes: Nodes,
    /// What the liveness probe keeps between rounds.
    probes: probe::Probes,
    /// Seeds the per-connection lifetime jitter.
    jitter: std::collections::hash_map::RandomState,
    /// How long its clients keep a server connection.
    mode: PoolMode,
    /// A named database's reserve, from its plan (the default pool reads reserve_pool_size at each resize).
    reserve: std::sync::atomic::AtomicUsize,
    /// A named database's own `server_lifetime` (unset: the global one, read at each open).
    server_lifetime: Option<Duration>,
    /// A named database's own `connect_query` (unset: the global one, read at each open).
    connect_query: Option<String>,
    /// Its own cap, for the pool of a named database (the default pool's limit is sizing's plan).
    cap: Option<usize>,
    /// Connections kept warm, if its database or user says (else min_pool_size).
    min_pool_size: Option<usize>,
    /// Which nodes it may use, if not target_session_attrs: a reader route's instance pools want standbys.
    target: Option<TargetSessionAttrs>,
    /// A reader route's instances, on the route's own (writer's) pool: set once, read without a lock.
    readers: std::sync::OnceLock<Arc<readers::ReaderSet>>,
    /// A reader instance's pool that a client could not reach: out of the rotation until its next good poll.
    unreachable: std::sync::atomic::AtomicBool,
    /// Rung when a reader instance leaves the rotation: its connections being opened for clients are given
    /// up, so that those clients go elsewhere (see [`leave_rotation`](Self::leave_rotation)).
    left_rotation: tokio::sync::Notify,
    /// Its place in the registry, which its server connections' console entries carry.
    id: PoolId,
    /// Its name: the route and server user (empty for the default pool), for the console's rows.
    key: registry::PoolKey,
    /// The server's last refusal of its login, which answers for a moment without another login.
    refusal: refusal::LoginRefusal,
    /// SHOW STATS' counters of the database clients name to reach it (shared with a reload's new pool).
    stats: std::sync::OnceLock<Arc<DbCounters>>,
}

impl ServerPool {
    pub(crate) fn new(globals: Arc<Globals>, credentials: Arc<dyn Credentials>, tls: ServerTls) -> Self {
        let config = globals.config.full();
        let limit = budget::initial_limit(config.max_connections_percent, pool_cap(&config));
        let pool_config = PoolConfig { steady_after: STEADY_LINE, ..PoolConfig::new(limit, config.pool_grow_after) };
        // A connection that comes back while the pool is over a lowered limit is closed, not kept.
        let closer_tasks = globals.tasks.clone();
        let pool = Pool::with_closer(pool_config, move |conn: Box<ServerConn>| {
            tracing::debug!(server_id = conn.id, "closing a server connection above the pool limit");
            conn.closing(ServerCloseReason::OverLimit);
            closer_tasks.spawn(conn.terminate());
        });
        pool.set_reserve(config.reserve_pool_size, config.reserve_pool_timeout);
        ServerPool {
            globals,
            pool,
            limit: Limit::new(limit),
            credentials: RwLock::new(credentials),
            tls: RwLock::new(tls),
            reconnect_below: AtomicU64::new(0),
            defaults: RwLock::default(),
            login_micros: AtomicU64::new(0),
            nodes: Nodes::default(),
            probes: probe::Probes::default(),
            jitter: Default::default(),
            mode: config.pool_mode,
            server_lifetime: None,
            connect_query: None,
            reserve: Default::default(),
            cap: None,
            min_pool_size: None,
            target: None,
            readers: std::sync::OnceLock::new(),
            unreachable: std::sync::atomic::AtomicBool::new(false),
            left_rotation: tokio::sync::Notify::new(),
            id: PoolId::default(),
            key: registry::PoolKey::default(),
            refusal: Default::default(),
            stats: std::sync::OnceLock::new(),
        }
    }

    /// The counters of SHOW STATS' row for the database clients reach this pool by.
    #[inline]
    pub(crate) fn stats(&self) -> &DbCounters {
        self.stats.get_or_init(|| self.globals.observer.databases.counters(&self.key.database))
    }

    /// The pool of a named database (see [`Pools::pool_for`]): its own cap, mode and warm connections,
    /// under `limits` it shares with other pools (the budget, its database's, its user's).
    pub(crate) fn for_route(
        globals: Arc<Globals>,
        id: PoolId,
        setup: &registry::PoolSetup,
        tls: ServerTls,
        limits: Vec<Arc<pgmux_pool::SharedLimit>>,
    ) -> Self {
        let plan = &setup.plan;
        let mut pool = ServerPool::new(globals, Arc::clone(&setup.credentials), tls);
        let own = plan.cap.unwrap_or(NO_CAP);
        pool.limit = Limit::new(own);
        pool.pool.set_max_size(own);
        pool.pool.share(limits);
        pool.mode = plan.mode;
        pool.server_lifetime = plan.server_lifetime;
        pool.connect_query = plan.connect_query.clone();
        pool.reserve = plan.reserve.into();
        pool.pool.set_reserve(plan.reserve, pool.config().reserve_pool_timeout);
        pool.cap = plan.cap;
        pool.min_pool_size = Some(plan.min_pool_size);
        pool.id = id;
        pool.key = plan.key.clone();
        pool.target = plan.target;
        pool
    }

    /// Its place in the registry.
    #[inline]
    pub(crate) fn id(&self) -> PoolId {
        self.id
    }

    /// Its route and server user; empty names for the default pool.
    pub(crate) fn key(&self) -> &registry::PoolKey {
        &self.key
    }

    /// A reader route's instances, if this is such a route's pool.
    #[inline]
    pub(crate) fn readers(&self) -> Option<&Arc<readers::ReaderSet>> {
        self.readers.get()
    }

    /// Whether this is one reader instance's pool (of a reader route).
    pub(crate) fn is_reader_instance(&self) -> bool {
        self.target == Some(TargetSessionAttrs::Standby)
    }

    /// A reader instance's pool is (or is no longer) known to be unreachable: the first time, it leaves the
    /// rotation.
    pub(crate) fn set_unreachable(&self, unreachable: bool) {
        if self.unreachable.swap(unreachable, Ordering::Relaxed) != unreachable && unreachable {
            self.leave_rotation("unreachable");
        }
    }

    /// A reader instance left the rotation (it is unreachable, declared dead, lagging, or gone from the
    /// topology; already out of what [`ReaderSet::pick`](readers::ReaderSet::pick) sees): the clients whose
    /// transactions wait for one of its connections, in line or while one is opened for them, are sent
    /// away at once to pick again, instead of waiting out `query_wait_timeout` or `server_connect_timeout`
    /// on an instance no new transaction would pick. Transactions in flight there are not touched.
    pub(crate) fn leave_rotation(&self, why: &str) {
        self.left_rotation.notify_waiters();
        let sent = self.pool.dismiss_waiters();
        if sent > 0 {
            tracing::info!(database = %self.key.database, waiting = sent, why,
                "reader out of the rotation: the transactions waiting for it go elsewhere");
        }
    }

    pub(crate) fn is_unreachable(&self) -> bool {
        self.unreachable.load(Ordering::Relaxed)
    }

    /// Which nodes it may lend: its own target (a reader's), else target_session_attrs.
    pub(crate) fn target(&self) -> TargetSessionAttrs {
        self.target.unwrap_or_else(|| self.globals.config.target_session_attrs())
    }

    /// Keeps `n` connections warm rather than min_pool_size.
    pub(crate) fn keep_warm(&mut self, n: usize) {
        self.min_pool_size = Some(n);
    }

    /// How long its clients keep a server connection.
    #[inline]
    pub(crate) fn mode(&self) -> PoolMode {
        self.mode
    }

    /// The configuration in force. A guard: hold it briefly.
    #[inline]
    pub(crate) fn config(&self) -> Guard<Arc<Config>> {
        self.globals.config.load()
    }

    /// What every pool shares.
    pub(crate) fn globals(&self) -> &Arc<Globals> {
        &self.globals
    }

    /// Counters at this moment.
    pub(crate) fn status(&self) -> Status {
        self.pool.status()
    }

    /// The limit in force.
    pub(crate) fn limit(&self) -> usize {
        self.limit.current()
    }

    /// The most connections it can hold now: its own limit, or a smaller one it shares with other pools.
    pub(crate) fn reach(&self) -> usize {
        let own = self.limit.current();
        self.pool.shared_limit().map_or(own, |shared| shared.min(own))
    }

    /// The most pool connections the configuration allows, if it caps them (see [`pool_cap`]).
    pub(crate) fn cap(&self) -> Option<usize> {
        pool_cap(&self.config())
    }

    /// Takes a new planned limit (from a reading of the database) and puts the result into force. The
    /// pools of named databases share it as their budget.
    pub(crate) fn plan(&self, planned: usize) -> usize {
        if let Some(budget) = &self.globals.budget_limit {
            budget.set_limit(planned);
        }
        let limit = self.limit.plan(planned);
        self.enforce(limit);
        limit
    }

    /// A named database's pool takes a new size of its own (unset: only the limits it shares bound it) and a
    /// new reserve.
    pub(crate) fn set_sizes(&self, cap: Option<usize>, reserve: usize) {
        let limit = self.limit.plan(cap.unwrap_or(NO_CAP));
        self.enforce(limit);
        self.reserve.store(reserve, Ordering::Relaxed);
        self.pool.set_reserve(reserve, self.config().reserve_pool_timeout);
    }

    /// Raises a ceiling set by a refusal, one step at a time; `Some(limit)` when the limit changed.
    pub(crate) fn probe(&self) -> Option<usize> {
        let limit = self.limit.probe()?;
        self.enforce(limit);
        Some(limit)
    }

    /// Puts a limit into force: waiters may open up to it, idle connections above it are closed, and busy
    /// ones are closed when they come back.
    fn enforce(&self, limit: usize) {
        if self.pool.status().max_size == limit {
            return;
        }
        self.pool.set_max_size(limit);
        for conn in self.pool.evict_idle(|_, _| false) {
            tracing::debug!(server_id = conn.id, limit, "closing an idle server connection above the pool limit");
            conn.closing(ServerCloseReason::OverLimit);
            self.retire(conn);
        }
    }

    /// Where server logins come from (the user and database clients are served as).
    pub(crate) fn credentials(&self) -> Arc<dyn Credentials> {
        Arc::clone(&self.credentials.read())
    }

    fn server_tls(&self) -> ServerTls {
        self.tls.read().clone()
    }

    /// New server connections log in with `credentials` and `tls` from now on.
    pub(crate) fn replace_access(&self, credentials: Arc<dyn Credentials>, tls: ServerTls) {
        *self.credentials.write() = credentials;
        *self.tls.write() = tls;
        self.refusal.forget();
    }

    /// New server connections use this TLS.
    pub(crate) fn replace_tls(&self, tls: ServerTls) {
        *self.tls.write() = tls;
    }

    /// Marks every connection open now to be replaced as it comes back; idle ones are closed at once.
    pub(crate) fn reconnect(&self) {
        self.reconnect_below.store(self.globals.next_id.load(Ordering::Relaxed), Ordering::Relaxed);
        self.refusal.forget();
        self.evict_idle();
        if self.config().server_fast_close {
            // Sessions that keep a marked connection (session mode, pins) close once between transactions.
            self.globals.stop.poke();
        }
    }

    /// Whether a connection was marked by [`reconnect`](Self::reconnect).
    #[inline]
    pub(crate) fn is_stale(&self, conn: &ServerConn) -> bool {
        conn.id < self.reconnect_below.load(Ordering::Relaxed)
    }

    /// Connections with an id below this are marked by [`reconnect`](Self::reconnect).
    pub(crate) fn stale_below(&self) -> u64 {
        self.reconnect_below.load(Ordering::Relaxed)
    }

    /// Connections marked by [`reconnect`](Self::reconnect) that are still open.
    pub(crate) fn stale_open(&self) -> usize {
        self.globals.observer.servers.open_below(self.reconnect_below.load(Ordering::Relaxed))
    }

    /// Holds new transactions: nothing is lent until [`resume`](Self::resume).
    pub(crate) fn pause(&self) {
        self.pool.pause();
    }

    pub(crate) fn resume(&self) {
        self.pool.resume();
    }

    /// Puts a new configuration's pool settings into force: lazy growth and, when sizing is off, the limit.
    pub(crate) fn resize(&self) {
        let config = self.config();
        // A named database's pool (one with a min_pool_size of its own) keeps its plan's reserve.
        let named = self.min_pool_size.is_some();
        let reserve = if named { self.reserve.load(Ordering::Relaxed) } else { config.reserve_pool_size };
        self.pool.set_reserve(reserve, config.reserve_pool_timeout);
        // Once for all pools (a repeat of the same value does nothing).
        self.globals.active.set_limit(config.max_active_servers);
        self.pool
            .set_grow_after(grow_after(&config, self.login_micros.load(Ordering::Relaxed)), config.pool_grow_after);
        let limit = budget::initial_limit(config.max_connections_percent, pool_cap(&config));
        if self.min_pool_size.is_some() {
            // A named database's pool: its cap is its own, and the budget it shares follows sizing.
            if config.max_connections_percent == 0
                && let Some(budget) = &self.globals.budget_limit
            {
                budget.set_limit(limit);
            }
            return;
        }
        if config.max_connections_percent == 0 || limit < self.limit.current() {
            // Sizing on: a lower pool_max takes effect now; the next reading plans with it.
            self.plan(limit);
        }
    }

    /// Sizing took a reading of the database's budget.
    pub(crate) fn budget_read(&self) {
        self.globals.budget.read_now();
    }

    /// Sizing tried to read the database's budget and could not.
    pub(crate) fn budget_read_failed(&self) {
        self.globals.budget.read_failed();
    }

    /// Resolves when the pool, about to grow on an old reading, wants a fresh one.
    pub(crate) async fn budget_wanted(&self) {
        self.globals.budget.wanted().await;
    }

    /// The server's own parameter values (empty until the first connection reported them).
    pub(crate) fn defaults(&self) -> Arc<Defaults> {
        Arc::clone(&self.defaults.read())
    }

    /// Whether `role` fits `target_session_attrs` (an unknown role fits: the server did not say).
    pub(crate) fn fits(&self, role: Option<crate::config::NodeRole>) -> bool {
        let wanted = self.target();
        role.is_none_or(|role| !wanted.cares() || wanted.accepts(role))
    }

    /// Whether only a writer will do (`target_session_attrs = read-write`): a write refused as read-only
    /// then means the node is wrong, and the transaction may run again on another.
    pub(crate) fn wants_writer(&self) -> bool {
        self.target() == TargetSessionAttrs::ReadWrite
    }

    /// A connection showed its node's role anew (a promotion, a demotion): a node whose role no longer fits
    /// `target_session_attrs` gets no more work.
    pub(crate) fn role_seen(&self, conn: &ServerConn) {
        if !self.fits(conn.role) {
            self.distrust(conn.addr, Distrust::Stale, "its role changed and no longer fits target_session_attrs");
        }
    }

    /// Closes a connection that leaves the pool, politely and in the background.
    pub(crate) fn retire(&self, conn: Box<ServerConn>) {
        self.globals.tasks.spawn(conn.terminate());
    }

    /// Closes idle connections past `server_idle_timeout` or `server_lifetime`.
    pub(crate) fn evict_idle(&self) {
        let (idle, keep) = {
            let config = self.config();
            (config.server_idle_timeout, config.min_pool_size)
        };
        let mut size = self.pool.status().size;
        let now = crate::observe::clock::now_ns();
        let expired = self.pool.evict_idle(|conn, m| {
            let old = now >= conn.retire_at_ns;
            // Idle ones are closed down to min_pool_size (idle while pgmux ran: not across a freeze); old ones
            // are closed anyway (and replaced warm).
            let stale = !idle.is_zero() && size > keep && self.globals.idle_for(m.idle_since) >= idle;
            let marked = self.is_stale(conn);
            match (marked, old, stale) {
                (true, _, _) => conn.closing(ServerCloseReason::Reconnect),
                (_, true, _) => conn.closing(ServerCloseReason::Lifetime),
                (_, _, true) => conn.closing(ServerCloseReason::IdleTimeout),
                _ => return false,
            }
            size -= 1;
            true
        });
        for conn in expired {
            tracing::debug!(server_id = conn.id, "closing idle server connection");
            self.retire(conn);
        }
    }

    /// Stops lending: waiters fail with [`CheckoutError::Closed`]; leased connections still come back.
    pub(crate) fn close(&self) {
        self.pool.close();
    }

    /// Takes every idle connection out, for shutdown to close.
    #[allow(clippy::vec_box, reason = "the pool holds them boxed, and closing one takes the box")]
    pub(crate) fn drain_idle(&self) -> Vec<Box<ServerConn>> {
        let conns = self.pool.drain_idle();
        conns.iter().for_each(|c| c.closing(ServerCloseReason::Shutdown));
        conns
    }
}

/// How a connection of this pool is opened: the configuration's timeout and socket options, by host name.
fn connect_options<'a>(config: &Config, id: u64, application_name: Option<&'a str>) -> ConnectOptions<'a> {
    let keepalive = config
        .tcp_keepalive
        .then(|| (config.tcp_keepidle, config.tcp_keepintvl, u32::try_from(config.tcp_keepcnt).unwrap_or(u32::MAX)));
    ConnectOptions {
        id,
        timeout: config.server_connect_timeout,
        application_name,
        socket: SocketOptions { keepalive, user_timeout: config.tcp_user_timeout },
        need_role: config.target_session_attrs.cares(),
        to: None,
    }
}

/// A pool of a named database with no cap of its own: the budget it shares bounds it.
const NO_CAP: usize = 1 << 20;

/// The longest lazy growth waits for a login's sake, whatever the login took.
const MAX_GROW_WAIT: Duration = Duration::from_millis(50);

/// A line of clients that has not emptied for this long, or has held somebody for three quarters of each
/// half of it, is steady load, not a burst: it will still be there when a new connection has logged in, so
/// the pool grows a connection every `pool_grow_after` while it lasts, however short each client's wait
/// (pgbench's 50 clients over a 1 ms link otherwise held the pool at six connections and half PgBouncer's
/// throughput; 20 clients, whose line empties every few milliseconds, at 11 connections and half again).
/// Longer than the bursts of many invocations at once, which drain in a few hundred milliseconds even on
/// few connections.
const STEADY_LINE: Duration = Duration::from_millis(500);

/// How long a client waits for a connection to come back before it may open one: `pool_grow_after`, or, if
/// longer, what the last new connection took to open and log in (up to [`MAX_GROW_WAIT`]). A client that
/// would get a returning connection sooner than a new one could log in is better off waiting, and the
/// database keeps fewer connections: across a network with TLS and SCRAM a login costs tens of
/// milliseconds, many transactions' worth. `pool_grow_after = 0` opens at once, as it says.
fn grow_after(config: &Config, login_micros: u64) -> Duration {
    if config.pool_grow_after.is_zero() {
        return Duration::ZERO;
    }
    config.pool_grow_after.max(Duration::from_micros(login_micros).min(MAX_GROW_WAIT))
}

/// The most pool connections the configuration allows: `pool_max` caps every connection pgmux opens, so
/// when sizing keeps a control connection open, that one counts too.
pub(crate) fn pool_cap(config: &Config) -> Option<usize> {
    let control = usize::from(config.max_connections_percent > 0);
    config.pool_max.map(|max| max.saturating_sub(control).max(1))
}

/// `lifetime` less a random 0-10 % (`random` picks how much), so that connections opened together retire
/// apart.
fn jittered(lifetime: Duration, random: u64) -> Duration {
    let tenth_ms = (lifetime.as_millis() / 10) as u64;
    lifetime.saturating_sub(Duration::from_millis(random % (tenth_ms + 1)))
}

#[cfg(test)]
mod query_tests;
#[cfg(test)]
mod tests;
