//! Finding a server that takes packets but answers nothing: a stopped process, or a black hole that keeps
//! TCP up. Keepalive cannot see either, and a client waiting on one would wait for as long as it lasts.
//!
//! While clients hold server connections, the pool asks each node they are on for a round trip, in rounds
//! an eighth of `server_probe_timeout` apart (between 100 ms and a second; see
//! [`ServerPool::probe_period`]), each pool's rounds on their own:
//!
//! - on an idle connection to that node, taken out of turn, when there is one (a moment's work): once a
//!   second per node while connections still come back, and every round once none came back since the
//!   previous round (a node gone silent is then asked within a round or two of its last sign of life);
//! - with none idle, on a reader instance's topology poll connection, between its polls, as on an idle one
//!   (the route's watch keeps it open while the route is used; see `readers.rs`);
//! - otherwise only when the pool is *quiet*: connections were lent, and none came back, through the rounds
//!   of at least half of `server_probe_timeout` (a second at most). That is what a hang looks like (and a
//!   pool busy with long queries, too). The round trip then goes over a probe connection opened to that
//!   node's address, kept while the quiet lasts, closed after; unless sizing's control connection is on that
//!   node, which asks it every second itself. `pool_max` counts the control connection, so in the default
//!   setting the probe opens nothing beyond the cap.
//! - A probe connection of its own takes only room the pool has: it is opened while the pool is below its
//!   limits (its own, the reserve, `max_db_connections`, `max_user_connections`) with no client waiting,
//!   and closed at the first round that finds the pool at them. A pool whose every connection is lent at its
//!   limit is not asked: keepalive watches its connections (a black hole
//!   closes each once `tcp_user_timeout` passes without an answer to keepalive, about 5 s by default), and
//!   a stopped server process is left to `query_timeout`, as behind PgBouncer.
//!
//! The answer is awaited until `server_probe_timeout` after the node's last sign of life (a connection
//! coming back, or its answer to the previous probe), never less than three quarters of it (see
//! [`ServerPool::allowance`]): a node that goes silent is declared dead about `server_probe_timeout` after
//! it stopped answering, not a quiet round and a full timeout later.
//!
//! A node that does not answer in time, or does not finish a login in time, is declared dead, in every pool
//! (one verdict per server node: whichever pool's probe finds it silent, a reader instance's pool takes it
//! out of the rotation): its sessions give up their connections (their clients get one error), and new
//! connections go wherever the host name points now. A node that answers a login again is trusted again.
//!
//! A failover can say so sooner than the timeout. When only a writer will do (`target_session_attrs =
//! read-write`) and a node has not answered for a quarter of `server_probe_timeout`, the probe logs in
//! wherever the host name points now. If that is another address and a writer, the cluster has moved on
//! (Aurora flips its writer name to the new writer, and one name has one writer): the silent node is declared
//! dead at once rather than when its timeout runs out. Neither sign alone would do: a loaded node answers
//! late, and a name may list two writers for a moment.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::{Distrust, ServerPool, connect_options};
use crate::protocol::failure::ServerFailure;
use crate::server::{ConnectError, ConnectOptions, ServerConn};

/// How the probe connection names itself: not a pool connection, not a fleet member's control connection.
const PROBE_NAME: &str = "pgmux-probe";

/// The shortest time between two rounds of the probe, whatever `server_probe_timeout`.
const MIN_PERIOD: Duration = Duration::from_millis(100);

/// How often a pool that is not quiet asks a node on an idle connection.
const IDLE_ASK_EVERY: Duration = Duration::from_secs(1);

/// How soon the look-out for a writer elsewhere tries again while a node's answer is late.
const LOOK_AGAIN: Duration = Duration::from_millis(100);

/// The longest one look-out login may take. While the name still points at the silent node, a login hangs
/// for all of it; a login to a live writer nearby takes a few tens of milliseconds. A look-out that starts
/// before the name moves (a round after the last sign of life, with idle connections) so tries again within
/// 0.4 s of the move; a login slower than this (a far or lossy link) leaves the verdict to the timeout.
const LOOK_OUT_LOGIN: Duration = Duration::from_millis(300);

/// What the probe keeps from one round to the next.
#[derive(Debug, Default)]
pub(super) struct Probes {
    state: Mutex<State>,
    /// A round is under way (see [`ServerPool::liveness_round`]).
    running: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    /// Open probe connections, one per node at most (boxed: closing one takes the box).
    #[allow(clippy::vec_box, reason = "retiring a connection takes its box")]
    conns: Vec<Box<ServerConn>>,
    /// When each node last answered this pool's probe.
    answered: Vec<(SocketAddr, Instant)>,
    /// At the previous round: whether connections were lent, and when one last came back.
    previous: Option<(bool, Option<Instant>)>,
    /// The round that first saw `previous` as it is: how long the pool has looked the way it looks.
    same_since: Option<Instant>,
    /// The node sizing's control connection is on, while it is open: it probes that node itself.
    control: Option<SocketAddr>,
    /// A reader instance's topology poll connection (to the instance), between polls: the probe asks it
    /// too, rather than open a connection of its own.
    poll_conn: Option<Box<ServerConn>>,
}

impl Probes {
    /// Whether the pool was quiet since the previous round (see the module's comment), given what it says
    /// now.
    fn quiet(&self, lent: bool, last_returned: Option<Instant>, least: Duration) -> Quiet {
        let state = self.state.lock();
        if !lent || state.previous != Some((true, last_returned)) {
            return Quiet::No;
        }
        if state.same_since.is_some_and(|t| t.elapsed() >= least) { Quiet::Long } else { Quiet::OneRound }
    }

    /// What the pool says at the end of a round, for the next one to compare with: after the round's own
    /// probes, whose connections coming back are no sign of life from the clients' servers.
    fn remember(&self, lent: bool, last_returned: Option<Instant>) {
        let mut state = self.state.lock();
        let now = Some((lent, last_returned));
        if state.previous != now {
            state.previous = now;
            state.same_since = Some(Instant::now());
        }
    }

    /// The probe connection to `node`, if one is kept.
    fn take(&self, node: SocketAddr) -> Option<Box<ServerConn>> {
        let mut state = self.state.lock();
        let at = state.conns.iter().position(|c| c.addr == node)?;
        Some(state.conns.swap_remove(at))
    }

    /// `node` answered a probe now.
    fn answered(&self, node: SocketAddr) {
        let mut state = self.state.lock();
        let now = Instant::now();
        match state.answered.iter_mut().find(|(addr, _)| *addr == node) {
            Some((_, at)) => *at = now,
            None => state.answered.push((node, now)),
        }
    }

    /// Whether `node` is due an ask on an idle connection while the pool is not quiet: it has not answered
    /// this pool's probe for `every`.
    fn due(&self, node: SocketAddr, every: Duration) -> bool {
        self.last_answer(node).is_none_or(|at| at.elapsed() >= every)
    }

    /// When `node` last answered this pool's probe, if it did.
    fn last_answer(&self, node: SocketAddr) -> Option<Instant> {
        self.state.lock().answered.iter().find(|(addr, _)| *addr == node).map(|(_, at)| *at)
    }

    fn control(&self) -> Option<SocketAddr> {
        self.state.lock().control
    }

    fn keep(&self, conn: Box<ServerConn>) {
        self.state.lock().conns.push(conn);
    }

    /// Every kept probe connection, for closing: the quiet is over.
    #[allow(clippy::vec_box, reason = "retiring a connection takes its box")]
    fn take_all(&self) -> Vec<Box<ServerConn>> {
        std::mem::take(&mut self.state.lock().conns)
    }

    /// Probe connections open now.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.state.lock().conns.len()
    }

    /// Connections pgmux holds for itself now: kept probe connections, and sizing's control connection.
    fn own(&self) -> usize {
        let state = self.state.lock();
        state.conns.len() + usize::from(state.control.is_some())
    }
}

/// How long a pool with connections lent has had none back, as the rounds see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quiet {
    /// One came back since the previous round (or none is lent).
    No,
    /// None since the previous round: a node may have gone silent a moment ago. Asked on a connection already
    /// open, if one is idle, which costs a round trip and no connection.
    OneRound,
    /// None for at least half of `server_probe_timeout` (a second at most): asked on a probe connection
    /// of its own if no connection is idle.
    Long,
}

/// What one round trip to a node showed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    Answered,
    /// Nothing within `server_probe_timeout`.
    Silent,
    /// Nothing yet, and the host name now points at a writer elsewhere: the cluster failed over.
    Moved,
    /// It failed otherwise (refused, reset, an error): not a hang; the sessions on it see it themselves.
    Failed,
}

impl ServerPool {
    /// How often the probe's rounds come: an eighth of `server_probe_timeout`, between [`MIN_PERIOD`] and a
    /// second. A node gone silent under a pool with an idle connection to it is asked on that connection a
    /// round or two after its last sign of life, and declared dead `server_probe_timeout` after that sign.
    /// Without one, a hang shows as a quiet that lasts half the timeout, a second at most (so that
    /// connections all out for a moment open no probe connection), seen within a round of its start; the
    /// probe then sent has at least three quarters of the timeout to answer: about 1.4 timeouts from the
    /// node's silence to its verdict.
    pub(crate) fn probe_period(timeout: Duration) -> Duration {
        if timeout.is_zero() {
            return Duration::from_secs(1);
        }
        (timeout / 8).clamp(MIN_PERIOD, Duration::from_secs(1))
    }

    /// The pool's next liveness round, unless one is still running (waiting out a silent node). A round
    /// with nothing to ask (no connection lent) is done here and now: only a round that asks a node runs
    /// in a task of its own, boxed (its future, with the logins it may make, is kilobytes that tokio would
    /// copy at the spawn and again at the end, four times a second while pgmux is idle).
    pub(crate) fn liveness_round(pool: &Arc<ServerPool>) -> Option<Pin<Box<dyn Future<Output = ()> + Send>>> {
        if pool.probes.running.swap(true, Ordering::AcqRel) {
            return None;
        }
        let Some(quiet) = pool.round_begins() else {
            pool.probes.running.store(false, Ordering::Release);
            return None;
        };
        let pool = Arc::clone(pool);
        Some(Box::pin(async move {
            /// Ends the round even if it is dropped midway (shutdown aborts it).
            struct Done<'a>(&'a AtomicBool);
            impl Drop for Done<'_> {
                fn drop(&mut self) {
                    self.0.store(false, Ordering::Release);
                }
            }
            let _done = Done(&pool.probes.running);
            pool.round_asks(quiet).await;
        }))
    }

    /// One round of the liveness probe (see the module's comment), as
    /// [`liveness_round`](Self::liveness_round) runs one every [`probe_period`](Self::probe_period).
    #[cfg(test)]
    pub(crate) async fn probe_liveness(&self) {
        if let Some(quiet) = self.round_begins() {
            self.round_asks(quiet).await;
        }
    }

    /// A round's start: how quiet the pool is, its probe connections closed unless it is quiet long. `None`
    /// when there is nothing to ask (nothing lent, or no probe): the round ends there.
    fn round_begins(&self) -> Option<Quiet> {
        let lent = self.pool.status().lent();
        // Quiet for half of server_probe_timeout (at most a second) at least, as seen by the rounds: a pool
        // whose connections are all out for a moment (every client in a short pg_sleep) opens no probe
        // connection beside them.
        let least = (self.config().server_probe_timeout / 2).min(Duration::from_secs(1));
        let quiet = self.probes.quiet(lent, self.pool.last_returned(), least);
        if quiet != Quiet::Long {
            for conn in self.probes.take_all() {
                self.retire(conn);
            }
        }
        if lent && !self.config().server_probe_timeout.is_zero() {
            return Some(quiet);
        }
        self.probes.remember(lent, self.pool.last_returned());
        None
    }

    /// The rest of a round that found connections lent: the nodes asked, then what the pool says noted.
    async fn round_asks(&self, quiet: Quiet) {
        self.ask_nodes(quiet).await;
        self.probes.remember(true, self.pool.last_returned());
    }

    /// Asks every node that connections are lent to for a round trip (see the module's comment).
    async fn ask_nodes(&self, quiet: Quiet) {
        let timeout = self.config().server_probe_timeout;
        if timeout.is_zero() {
            return;
        }
        let mut nodes: Vec<SocketAddr> = self.globals.observer.servers.all().iter().map(|e| e.addr).collect();
        nodes.sort_unstable();
        nodes.dedup();
        for node in nodes {
            if self.nodes.verdict(node) == Some(Distrust::Dead) {
                continue;
            }
            let asked = Instant::now();
            let allowance = self.allowance(node, timeout);
            // A pool still getting connections back has its idle ones asked once a second; one that got
            // none back since the previous round, every round (so that a node gone silent a moment ago is
            // asked within a round or two of its last sign of life, and its verdict comes within
            // `server_probe_timeout` of it: see `allowance`).
            let every = if quiet == Quiet::No { IDLE_ASK_EVERY } else { Self::probe_period(timeout) / 2 };
            let idle = if quiet == Quiet::Long || self.probes.due(node, every) {
                self.pool.take_idle(|conn| conn.addr == node)
            } else {
                None
            };
            // None idle: a reader instance's topology poll connection, between its polls, is asked as an
            // idle one would be (the route's watch opened it, and keeps it while the route is used).
            let polls = if idle.is_none() && quiet != Quiet::No { self.take_poll_conn_to(node) } else { None };
            let answer = match (idle, polls) {
                (Some(mut lease), _) => match self.ask_node(&mut lease, allowance).await {
                    Answer::Answered => Answer::Answered,
                    failed => {
                        self.retire(lease.discard());
                        failed
                    }
                },
                (None, Some(mut conn)) => {
                    let answer = self.ask_node(&mut conn, allowance).await;
                    match answer {
                        Answer::Answered => self.put_poll_conn(conn),
                        _ => self.retire(conn),
                    }
                    answer
                }
                // The control connection's own probe asks that node (sizing's loop, every second).
                (None, None) if quiet == Quiet::Long && self.probes.control() == Some(node) => {
                    if let Some(conn) = self.probes.take(node) {
                        self.retire(conn);
                    }
                    continue;
                }
                // A probe connection takes room the pool has: none while the pool is at its limits, or a
                // client waits (PgBouncer's pool_size, reserve and max_*_connections hold exactly).
                (None, None) if quiet == Quiet::Long && !self.pool.has_room() => {
                    if let Some(conn) = self.probes.take(node) {
                        tracing::debug!(%node, "the pool is at its limit: closing the probe connection");
                        self.retire(conn);
                    }
                    continue;
                }
                (None, None) if quiet == Quiet::Long => self.ask_apart(node, timeout, allowance).await,
                (None, None) => continue,
            };
            if answer == Answer::Answered {
                self.probes.answered(node);
            }
            self.heard(node, asked, &answer);
        }
    }

    /// How long a probe of `node` sent now waits for its answer: until `timeout` after the node's last sign
    /// of life (a connection of this pool coming back, or its answer to this pool's last probe), so that a
    /// node that goes silent is declared dead within `timeout` of its last answer, not a round and a timeout
    /// later; but never less than three quarters of `timeout`, so that a node answering slowly (a slow or
    /// lossy link, a loaded server) is not declared dead for a probe sent long after its last sign of life.
    fn allowance(&self, node: SocketAddr, timeout: Duration) -> Duration {
        let life = self.pool.last_returned().max(self.probes.last_answer(node));
        let left = life.map_or(timeout, |at| (at + timeout).saturating_duration_since(Instant::now()));
        left.clamp(timeout * 3 / 4, timeout)
    }

    /// A round trip to `node` on a probe connection of its own, opened (by address) if none is kept: the
    /// login, and then the round trip, each given `allowance` (see [`allowance`](Self::allowance)).
    async fn ask_apart(&self, node: SocketAddr, timeout: Duration, allowance: Duration) -> Answer {
        tracing::debug!(%node, "no connection came back for a round: asking the node on a probe connection");
        let round_trip = async {
            let mut conn = match self.probes.take(node) {
                Some(conn) => conn,
                None => match self.open_probe(node, allowance).await {
                    Ok(conn) => conn,
                    Err(answer) => return answer,
                },
            };
            let answer = ask(&mut conn, allowance).await;
            match answer {
                Answer::Answered => self.probes.keep(conn),
                _ => self.retire(conn),
            }
            answer
        };
        // A login that hangs is watched as a round trip that hangs is.
        self.watched(node, timeout, round_trip).await
    }

    /// Opens a probe connection to `node` itself (not wherever the host name points now), within `timeout`;
    /// a login that does not finish in time is the node's silence.
    async fn open_probe(&self, node: SocketAddr, timeout: Duration) -> Result<Box<ServerConn>, Answer> {
        // A login refused a moment ago would be refused again (and a refusal is an answer: the node is up).
        if self.refused_lately().is_some() {
            return Err(Answer::Failed);
        }
        let login = self.credentials().login().await.map_err(|e| {
            tracing::debug!(error = %e, "no credentials for the liveness probe");
            Answer::Failed
        })?;
        let config = self.globals.config.full();
        let options = ConnectOptions {
            timeout,
            need_role: false,
            to: Some(node),
            ..connect_options(&config, 0, Some(PROBE_NAME))
        };
        match ServerConn::connect(&login, &self.server_tls(), options).await {
            Ok(conn) => Ok(Box::new(conn)),
            Err(ConnectError::Timeout { .. }) => Err(Answer::Silent),
            Err(e) => {
                // Not inside the macro: its fields are not evaluated when debug is off.
                let refused = self.probe_refused(&e);
                tracing::debug!(%node, error = %e, refused, "the liveness probe could not log in");
                Err(Answer::Failed)
            }
        }
    }

    /// What a probe's answer (asked at `asked`) says of `node`: a silent or moved node is declared dead.
    pub(crate) fn heard(&self, node: SocketAddr, asked: Instant, answer: &Answer) {
        match answer {
            Answer::Silent => self.silent(node, asked, "it did not answer within server_probe_timeout"),
            Answer::Moved => self.silent(
                node,
                asked,
                "it did not answer, and the host name now points at a writer elsewhere (a failover)",
            ),
            Answer::Answered | Answer::Failed => {}
        }
    }

    /// A round trip on `conn` within `timeout`; past a quarter of it, when only a writer will do, the probe
    /// also looks for a writer where the host name points now (see the module's comment).
    pub(crate) async fn ask_node(&self, conn: &mut ServerConn, timeout: Duration) -> Answer {
        let node = conn.addr;
        self.watched(node, timeout, ask(conn, timeout)).await
    }

    /// `answer` from `node`, or [`Answer::Moved`] if, once it is a quarter of `timeout` late, the host name
    /// turns out to point at a writer elsewhere. The look-out is repeated while the answer is late (a new
    /// writer takes a moment to be promoted and named), each login given a quarter of `timeout` and [`LOOK_OUT_LOGIN`] at most:
    /// while the name still points at the silent node, a login there hangs too.
    async fn watched(&self, node: SocketAddr, timeout: Duration, answer: impl Future<Output = Answer>) -> Answer {
        tokio::pin!(answer);
        if !self.wants_writer() {
            return answer.await;
        }
        let quarter = timeout / 4;
        let until = Instant::now() + timeout;
        tokio::select! {
            answer = &mut answer => return answer,
            () = pgmux_timer::sleep(quarter) => {}
        }
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return answer.await;
            }
            let scout = self.writer_elsewhere(node, left.min(quarter).min(LOOK_OUT_LOGIN));
            tokio::select! {
                answer = &mut answer => return answer,
                moved = scout => if moved { return Answer::Moved },
            }
            tokio::select! {
                answer = &mut answer => return answer,
                () = pgmux_timer::sleep(LOOK_AGAIN.min(left)) => {}
            }
        }
    }

    /// Whether a login where the host name points now lands on another address, and a writer.
    async fn writer_elsewhere(&self, node: SocketAddr, timeout: Duration) -> bool {
        let Ok(login) = self.credentials().login().await else { return false };
        let config = self.globals.config.full();
        let options = ConnectOptions { timeout, need_role: true, ..connect_options(&config, 0, Some(PROBE_NAME)) };
        match ServerConn::connect(&login, &self.server_tls(), options).await {
            Ok(conn) => {
                let moved = conn.addr != node && conn.role == Some(crate::config::NodeRole::ReadWrite);
                if moved {
                    tracing::warn!(%node, new = %conn.addr, "the host name now points at a writer elsewhere");
                }
                self.retire(Box::new(conn));
                moved
            }
            Err(e) => {
                tracing::debug!(%node, error = %e, "looking for a writer elsewhere: no login");
                false
            }
        }
    }

    /// A reader instance's topology poll connection, taken for a poll (or to be closed); `None` if none is
    /// open or the probe has it.
    pub(crate) fn take_poll_conn(&self) -> Option<Box<ServerConn>> {
        self.probes.state.lock().poll_conn.take()
    }

    /// The topology poll connection back, after a poll or a probe that it answered.
    pub(crate) fn put_poll_conn(&self, conn: Box<ServerConn>) {
        let old = self.probes.state.lock().poll_conn.replace(conn);
        if let Some(old) = old {
            self.retire(old);
        }
    }

    /// The topology poll connection, if it is open to `node` and not in a poll now.
    fn take_poll_conn_to(&self, node: SocketAddr) -> Option<Box<ServerConn>> {
        let mut state = self.probes.state.lock();
        if state.poll_conn.as_ref().is_some_and(|c| c.addr == node) { state.poll_conn.take() } else { None }
    }

    /// Sizing's control connection is open on `node` (it probes that node itself), or closed (`None`).
    pub(crate) fn control_on(&self, node: Option<SocketAddr>) {
        self.probes.state.lock().control = node;
    }

    /// Server connections pgmux holds for itself, outside the pool: sizing's control connection and the
    /// probe's own. They count in `pg_stat_activity`, and in `DatabaseConnections`.
    pub(crate) fn own_connections(&self) -> usize {
        self.probes.own()
    }

    /// Probe connections open now (they count in `pg_stat_activity`, not in the pool).
    #[cfg(test)]
    pub(crate) fn probes_open(&self) -> usize {
        self.probes.open()
    }
}

/// A Sync within `timeout` (see `ServerConn::ping`).
async fn ask(conn: &mut ServerConn, timeout: Duration) -> Answer {
    match conn.ping(timeout).await {
        Ok(()) => Answer::Answered,
        Err(ServerFailure::Timeout(_)) => Answer::Silent,
        Err(_) => Answer::Failed,
    }
}
