//! Reader routes: one route's instances, each with a pool of its own, and which one a transaction goes to.
//!
//! A route with `readers` (say `app_ro` beside `app`) sends each transaction to the healthy reader with the
//! fewest connections in use, ties broken at random — never by DNS, which lands a whole pool on one replica.
//! The readers are a list of hosts, or (`readers = "aurora"`) whatever the cluster's topology lists: each
//! poll reads `aurora_replica_status()` ([`topology`]); an instance that appears gets a pool
//! and joins the rotation at once if its own poll is good, one that disappears or becomes the writer leaves
//! it and its pool drains (idle connections close, lent ones finish their transaction and close).
//! Every `topology_interval` a connection of pgmux's own to each instance asks whether it is in recovery and,
//! where `aurora_replica_status()` exists (Aurora, and the test harness's stand-in), how far behind it is. A
//! reader that fails to answer, is no longer in recovery (promoted), or lags more than `max_replica_lag` takes
//! no new transactions from the next poll on; one that was taken out comes back after two good polls in a
//! row, so that a lag hovering at the limit does not flap. A reader that hangs under a transaction is taken
//! out sooner, when the pool's probe declares its node dead (`ServerPool::distrust`). With no healthy reader, `reader_fallback` says
//! where a transaction goes: the writer, a reader anyway (waiting as for any connection), or
//! nowhere (08006 at once), counted in `pgmux_reader_fallbacks_total`. Like sizing's control connection,
//! the polls stop while nothing of the route (a reader, or the writer's pool that fallbacks use) has held a
//! connection for `server_idle_timeout`, so that the cluster may sleep. pgmux never reads a statement to
//! route it: a write on a reader gets the server's own 25006, and the connection stays usable.

mod topology;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};

use arc_swap::ArcSwap;
use pgmux_metrics::ReaderFallbackOutcome;
use tokio::time::Instant;

use super::{PoolId, Pools, ServerPool};
use crate::config::ReaderFallback;
use crate::runtime::stop::Level;
use crate::server::ServerConn;
pub(crate) use topology::Discovery;

/// How the topology connection names itself.
pub(super) const TOPOLOGY_NAME: &str = "pgmux-topology";

/// Good polls in a row that bring a reader taken out back into the rotation.
const POLLS_TO_RETURN: u8 = 2;

/// Whether the instance is a reader, and whether this server has Aurora's topology function.
const ROLE_SQL: &str = "SELECT pg_catalog.pg_is_in_recovery(), \
    pg_catalog.to_regprocedure('pg_catalog.aurora_replica_status()') IS NOT NULL;";

/// Aurora's lag for the instance the query runs on (its own row).
const LAG_SQL: &str = "SELECT replica_lag_in_msec FROM pg_catalog.aurora_replica_status() \
    WHERE server_id = pg_catalog.aurora_db_instance_identifier();";

/// A reader route's instances and its writer.
#[derive(Debug)]
pub(crate) struct ReaderSet {
    /// The route, for logs and errors.
    pub(crate) route: String,
    /// The route's own pool: its `host` and `port`, the writer.
    pub(crate) writer: PoolId,
    /// The instances now: fixed for a list of hosts, replaced as the topology changes for `aurora`.
    members: ArcSwap<Vec<Arc<Member>>>,
    pub(crate) fallback: ReaderFallback,
    /// Spreads ties, with a random draw.
    turn: AtomicUsize,
    /// How instances are found, for `readers = "aurora"`.
    pub(super) discovery: Option<Discovery>,
}

/// One reader instance.
#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) id: PoolId,
    /// `host:port`, or the `server_id` of a discovered instance.
    pub(crate) name: String,
    healthy: AtomicBool,
    /// Good polls in a row since it was taken out.
    good: AtomicU8,
    /// Its last lag reading, in milliseconds (0 where the server does not say).
    pub(crate) lag_ms: AtomicU64,
    /// Transactions sent to it (the metric per reader).
    pub(crate) chosen: AtomicU64,
}

impl Member {
    pub(crate) fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// A member not trusted before its first good poll.
    pub(super) fn new(id: PoolId, name: String) -> Member {
        Member {
            id,
            name,
            healthy: AtomicBool::new(false),
            good: AtomicU8::new(POLLS_TO_RETURN - 1),
            lag_ms: AtomicU64::new(0),
            chosen: AtomicU64::new(0),
        }
    }
}

/// Where a transaction of a reader route goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Choice {
    To(PoolId),
    /// No reader is healthy and `reader_fallback = error`.
    Nowhere,
}

impl ReaderSet {
    /// The set for `route`: its writer's pool and one pool per reader, none trusted before its first poll;
    /// with `discovery`, no member until the topology lists some.
    pub(crate) fn new(
        route: String,
        writer: PoolId,
        members: Vec<(PoolId, String)>,
        fallback: ReaderFallback,
        discovery: Option<Discovery>,
    ) -> Self {
        let members = members.into_iter().map(|(id, name)| Arc::new(Member::new(id, name))).collect();
        ReaderSet {
            route,
            writer,
            members: ArcSwap::from_pointee(members),
            fallback,
            turn: AtomicUsize::new(0),
            discovery,
        }
    }

    /// The instances now.
    pub(crate) fn members(&self) -> Arc<Vec<Arc<Member>>> {
        self.members.load_full()
    }

    /// Puts a new list of instances in force (discovery).
    pub(super) fn set_members(&self, members: Vec<Arc<Member>>) {
        self.members.store(Arc::new(members));
    }

    /// The pool of the next transaction: the healthy reader with the fewest connections in use (ties in
    /// turn), else what `reader_fallback` says.
    pub(crate) fn pick(&self, pools: &Pools) -> Choice {
        let members = self.members.load();
        let n = members.len();
        // Ties are broken at random, not in turn: a client whose transactions come in pairs (a prepare, then
        // its execution) would otherwise send every second one to the same reader.
        let start = self.turn.fetch_add(1, Ordering::Relaxed) ^ rand::random::<u16>() as usize;
        let mut best: Option<(usize, &Member)> = None;
        for i in 0..n {
            let member = &members[(start + i) % n];
            let pool = pools.get(member.id);
            if !member.healthy() || pool.is_unreachable() {
                continue;
            }
            let status = pool.status();
            let in_use = status.size - status.idle - status.opening;
            if best.is_none_or(|(fewest, _)| in_use < fewest) {
                best = Some((in_use, member));
            }
        }
        if let Some((_, member)) = best {
            member.chosen.fetch_add(1, Ordering::Relaxed);
            return Choice::To(member.id);
        }
        let (choice, outcome) = match self.fallback {
            ReaderFallback::Writer => (Choice::To(self.writer), ReaderFallbackOutcome::Writer),
            ReaderFallback::Wait if n > 0 => (Choice::To(members[start % n].id), ReaderFallbackOutcome::Wait),
            _ => (Choice::Nowhere, ReaderFallbackOutcome::Error),
        };
        pools.observer().metrics.reader_fallbacks.inc(outcome);
        choice
    }

    /// Whether a transaction of this route waits for a reader: `reader_fallback = wait`, and no reader is
    /// healthy and reachable (each transaction then takes one anyway, and waits for it).
    pub(crate) fn waits_for_a_reader(&self, pools: &Pools) -> bool {
        self.fallback == ReaderFallback::Wait
            && !self.members.load().iter().any(|m| m.healthy() && !pools.get(m.id).is_unreachable())
    }

    /// What one poll found of `member`: `Some(lag_ms)` for a reader that answered, `None` otherwise.
    fn polled(&self, member: &Member, pool: &ServerPool, reading: Option<u64>, max_lag_ms: u64) {
        let good = reading.is_some_and(|lag| lag <= max_lag_ms);
        tracing::trace!(route = %self.route, reader = %member.name, lag_ms = ?reading, good, "topology poll");
        if let Some(lag) = reading {
            member.lag_ms.store(lag, Ordering::Relaxed);
        }
        if !good {
            member.good.store(0, Ordering::Relaxed);
            if member.healthy.swap(false, Ordering::Relaxed) {
                tracing::warn!(route = %self.route, reader = %member.name, lag_ms = ?reading,
                    "reader taken out of the rotation (not answering, not a reader, or lagging)");
                pool.leave_rotation("its poll");
            }
            return;
        }
        let streak = member.good.load(Ordering::Relaxed).saturating_add(1);
        member.good.store(streak, Ordering::Relaxed);
        if streak >= POLLS_TO_RETURN && !member.healthy.swap(true, Ordering::Relaxed) {
            tracing::info!(route = %self.route, reader = %member.name, "reader in the rotation");
        }
    }
}

/// The connection of a set's polls to the writer, for the topology. The one to each instance is kept in
/// the instance's pool (see [`ServerPool::take_poll_conn`]), where the liveness probe may ask it too.
#[derive(Default)]
pub(super) struct PollConns {
    pub(super) writer: Option<Box<ServerConn>>,
}

impl PollConns {
    /// Closes them all, the instances' too (the route is idle, so that the cluster may sleep).
    fn close(&mut self, pools: &Pools, set: &ReaderSet) {
        if let Some(c) = self.writer.take() {
            pools.get(set.writer).retire(c);
        }
        for member in set.members().iter() {
            let pool = pools.get(member.id);
            if let Some(c) = pool.take_poll_conn() {
                pool.retire(c);
            }
        }
    }
}

/// Polls `set`'s readers every `topology_interval` until shutdown (see the module's comment).
pub(crate) async fn watch(set: Arc<ReaderSet>, pools: Pools) {
    let stop = pools.get(set.writer).globals().stop.clone();
    let mut conns = PollConns::default();
    let mut quiet_since: Option<Instant> = None;
    loop {
        let started = Instant::now();
        let (interval, max_lag, timeout, idle) = {
            let config = pools.config();
            (
                config.topology_interval,
                config.max_replica_lag,
                config.server_connect_timeout,
                config.server_idle_timeout,
            )
        };
        // Nothing of the route (its readers, or its writer for fallbacks) has held a connection for
        // server_idle_timeout: the polls stop and their connections close, so that the cluster may sleep;
        // the last verdicts stand until the route is used again.
        let in_use = |id: PoolId| pools.get(id).status().size > 0;
        let busy = in_use(set.writer) || set.members().iter().any(|m| in_use(m.id));
        let since = if busy { None } else { Some(*quiet_since.get_or_insert(started)) };
        quiet_since = since;
        if since.is_some_and(|since| !idle.is_zero() && since.elapsed() >= idle) {
            conns.close(&pools, &set);
            tokio::select! {
                () = pgmux_timer::sleep_until(started + interval) => continue,
                _ = stop.reached(Level::Graceful) => return,
            }
        }
        // A poll may take a topology interval, and never less than a second (a login on a loaded host takes a
        // good part of that): a busy reader is not a dead one. server_connect_timeout bounds it.
        let timeout = timeout.min(interval.max(std::time::Duration::from_secs(1)));
        if let Some(discovery) = &set.discovery {
            tokio::select! {
                () = discovery.refresh(&set, &pools, &mut conns, timeout) => {}
                _ = stop.reached(Level::Graceful) => return,
            }
        }
        let max_lag_ms = u64::try_from(max_lag.as_millis()).unwrap_or(u64::MAX);
        for member in set.members().iter() {
            let pool = pools.get(member.id);
            let mut conn = pool.take_poll_conn();
            let reading = tokio::select! {
                r = read(pool, &mut conn, timeout) => r,
                _ = stop.reached(Level::Graceful) => return,
            };
            if let Some(conn) = conn {
                pool.put_poll_conn(conn);
            }
            if reading.is_some() {
                pool.set_unreachable(false);
            }
            set.polled(member, pool, reading, max_lag_ms);
        }
        tokio::select! {
            () = pgmux_timer::sleep_until(started + interval) => {}
            _ = stop.reached(Level::Graceful) => return,
        }
    }
}

/// One reading of an instance over the topology connection (opened if needed): its lag in milliseconds if
/// it is a reader, `None` if it is not, or does not answer within `timeout`.
async fn read(pool: &ServerPool, conn: &mut Option<Box<ServerConn>>, timeout: std::time::Duration) -> Option<u64> {
    let result = pgmux_timer::timeout(timeout, async {
        if conn.is_none() {
            let opened = pool.open_control(TOPOLOGY_NAME).await;
            let opened = opened.inspect_err(|e| tracing::debug!(error = %e, "topology: cannot connect")).ok()?;
            *conn = Some(Box::new(opened));
        }
        let c = conn.as_mut()?;
        let rows = c.run_guarded(ROLE_SQL, timeout).await;
        let rows = rows.inspect_err(|e| tracing::debug!(error = %e, "topology: cannot read the role")).ok()?;
        let row = rows.first()?;
        let in_recovery = row.first()?.as_deref() == Some("t");
        let aurora = row.get(1)?.as_deref() == Some("t");
        if !in_recovery {
            return Some(None);
        }
        if !aurora {
            return Some(Some(0));
        }
        let rows = c.run_guarded(LAG_SQL, timeout).await.ok()?;
        let lag = rows.first().and_then(|r| r.first()).and_then(|v| v.as_deref()).and_then(|v| v.parse::<f64>().ok());
        Some(Some(lag.map_or(0, |l| l.max(0.0) as u64)))
    })
    .await;
    match result {
        Ok(Some(reading)) => reading,
        // No answer, or the connection failed: a new one next time.
        _ => {
            if let Some(c) = conn.take() {
                pool.retire(c);
            }
            None
        }
    }
}

/// Every reader instance's figures now, for the metrics: the members of every reader route.
pub(crate) fn samples(pools: &Pools) -> Vec<pgmux_metrics::ReaderSample> {
    let mut out = Vec::new();
    for pool in pools.all() {
        let Some(set) = pool.readers() else { continue };
        for member in set.members().iter() {
            out.push(pgmux_metrics::ReaderSample {
                database: set.route.clone(),
                instance: member.name.clone(),
                transactions: member.chosen.load(Ordering::Relaxed),
                in_rotation: member.healthy() && !pools.get(member.id).is_unreachable(),
                lag_seconds: member.lag_ms.load(Ordering::Relaxed) as f64 / 1000.0,
            });
        }
    }
    out
}
