//! Lending: a client asks for a server connection and gets an idle one that passed its checks, or a new
//! one, or waits in line up to `query_wait_timeout`. A failed open is not the client's error while there is
//! hope: the database refusing a new connection (53300) lowers the limit and the client waits for one of the
//! open connections; a database that is away (restarting, failing over, unreachable, in the wrong role) makes
//! it wait and try again, every 50 ms at first and then every 250 ms, re-resolving the host name each time,
//! until query_wait_timeout. An error that needs a fix (a missing database) reaches the client at once when
//! no connection is open; a password the server refused reaches it, and every client waiting in line, at
//! once (see the `refusal` module).

use std::future::Future;
use std::time::Duration;

use pgmux_metrics::ServerCloseReason;
use pgmux_pool::{ActivePermit, Grant, Joined, Ticket, WaitError};
use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::sqlstate;
use tokio::time::Instant;

use super::{ServerLease, ServerPool};
use crate::config::credentials::CredentialsError;
use crate::observe::clock;
use crate::protocol::failure::ServerError;
use crate::server::{ConnectError, ServerConn};

/// Why a client could not get a server connection.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckoutError {
    #[error("no server connection became free within query_wait_timeout ({}s)", .waited.as_secs_f32())]
    Timeout {
        waited: Duration,
        /// The pool limit at the time.
        limit: usize,
        /// The database's last refusal of a new connection, if that is why.
        refused: Option<Box<ServerError>>,
    },
    #[error(
        "no server connection became free within query_wait_timeout ({}s): max_active_servers ({limit}) were in use",
        .waited.as_secs_f32()
    )]
    ActiveCap {
        waited: Duration,
        /// `max_active_servers` at the time.
        limit: usize,
    },
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("cannot get database credentials: {0}")]
    Credentials(#[from] CredentialsError),
    /// The server refused the pool's login (its own error: it names the user, never a password).
    #[error("the database refused the pool's login: {0}")]
    LoginRefused(std::sync::Arc<ServerError>),
    #[error("pgmux is shutting down")]
    Closed,
    /// The reader instance waited for left the rotation ([`ServerPool::leave_rotation`]): the transaction,
    /// which has not begun, picks again. A client sees it only if nothing else is left to pick.
    #[error("the reader instance it waited for left the rotation")]
    LeftRotation,
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
            CheckoutError::ActiveCap { .. } => ErrorMessage::error(sqlstate::TOO_MANY_CONNECTIONS, self.to_string())
                .with_hint("the database is kept from overload: raise query_wait_timeout or max_active_servers, or shorten transactions"),
            CheckoutError::Connect(_) | CheckoutError::Credentials(_) | CheckoutError::LeftRotation => {
                ErrorMessage::error(sqlstate::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION, self.to_string())
            }
            CheckoutError::Closed => ErrorMessage::fatal(sqlstate::ADMIN_SHUTDOWN, self.to_string()),
            // 08001 as for any server login that failed: the client's own password was right, and the fix is
            // pgmux's. The session closes after it, as PgBouncer closes its clients.
            CheckoutError::LoginRefused(_) => {
                ErrorMessage::fatal(sqlstate::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION, self.to_string()).with_hint(
                    "the server no longer takes the password pgmux has for this pool's user: put it right (auth_file, \
                     [[users]], the database's password) and RELOAD",
                )
            }
        }
    }
}

/// A server connection or the right to open one, handed out by the pool.
pub(crate) type ServerGrant = Grant<Box<ServerConn>>;

/// A client's place in the line for a server connection (see [`ServerPool::join_line`]).
pub(crate) type ServerTicket = Ticket<Box<ServerConn>>;

/// Where a checkout that began in the line goes on: with what the line handed out, if anything (a
/// connection that needs a round trip before it is lent, or the right to open one), until the client's
/// deadline.
#[derive(Debug)]
pub(crate) struct Resume {
    pub(crate) grant: Option<Box<ServerGrant>>,
    pub(crate) deadline: Instant,
    /// A reader instance's pool waits for a connection it cannot open as any pool does, up to the
    /// deadline, instead of failing at once so that the session picks another reader: `reader_fallback =
    /// wait` with no reader left to pick.
    pub(crate) patient: bool,
}

/// Whether an idle connection may be lent.
pub(crate) enum Fitness {
    Fit,
    Unfit,
    NeedsRoundTrip,
}

/// Pauses between attempts that failed: 50 ms, then twice the last, at most `server_login_retry` (250 ms by
/// default: no lock-out, the next attempt after an outage ends comes within a quarter of a second), and never
/// less than 50 ms.
#[derive(Debug, Default)]
pub(super) struct Backoff(Option<Duration>);

impl Backoff {
    const FIRST: Duration = Duration::from_millis(50);

    /// The next pause, at most `most` (`server_login_retry`).
    pub(super) fn next(&mut self, most: Duration) -> Duration {
        let most = most.max(Self::FIRST);
        *self.0.insert(self.0.map_or(Self::FIRST, |p| (p * 2).min(most)))
    }
}

/// One client's wait for a server connection: its deadline, and what went wrong on the way.
#[derive(Debug)]
struct Wait {
    timeout: Duration,
    /// Set when the client first has to wait: the fast path reads no clock.
    deadline: Option<Instant>,
    /// The database's last refusal of a new connection (53300).
    refused: Option<Box<ServerError>>,
    /// The last open that failed for another reason, while other connections were open.
    failed_open: Option<ConnectError>,
    backoff: Backoff,
    /// What the line handed out before the wait went on here (boxed: it rarely does).
    first: Option<Box<ServerGrant>>,
    /// See [`Resume::patient`].
    patient: bool,
}

impl Wait {
    fn new(timeout: Duration) -> Self {
        Wait {
            timeout,
            deadline: None,
            refused: None,
            failed_open: None,
            backoff: Backoff::default(),
            first: None,
            patient: false,
        }
    }

    fn deadline(&mut self) -> Instant {
        *self.deadline.get_or_insert_with(|| Instant::now() + self.timeout)
    }

    /// Why the wait ended without a connection.
    fn give_up(&mut self, limit: usize) -> CheckoutError {
        match self.failed_open.take() {
            Some(e) => e.into(),
            None => CheckoutError::Timeout { waited: self.timeout, limit, refused: self.refused.take() },
        }
    }
}

impl ServerPool {
    /// Logs a connection opened from the reserve (above the pool's limit), in PgBouncer's words, which
    /// scripts and its test suite look for. Not async: nothing of it stays in the checkout's future.
    fn note_reserve(&self) {
        let status = self.pool.status();
        if status.size > status.max_size {
            tracing::info!(size = status.size, limit = status.max_size, database = %self.key().database,
                "taking connection from reserve_pool");
        }
    }

    /// A server connection for one client: idle and checked, or newly opened; waits in line up to
    /// `query_wait_timeout`.
    pub(crate) fn checkout(&self) -> impl Future<Output = Result<ServerLease, CheckoutError>> + '_ {
        self.checkout_resumed(None)
    }

    /// [`checkout`](Self::checkout), going on from where a wait in the line left off.
    pub(crate) fn checkout_resumed(
        &self,
        resume: Option<Resume>,
    ) -> impl Future<Output = Result<ServerLease, CheckoutError>> + '_ {
        let (first, deadline, patient) = resume.map_or((None, None, false), |r| (r.grant, Some(r.deadline), r.patient));
        self.checkout_with(first, deadline, patient)
    }

    // The wait is made inside: an async fn keeps its arguments for as long as it runs, besides its locals.
    async fn checkout_with(
        &self,
        first: Option<Box<ServerGrant>>,
        deadline: Option<Instant>,
        patient: bool,
    ) -> Result<ServerLease, CheckoutError> {
        let mut wait = Wait::new(self.config().query_wait_timeout);
        (wait.first, wait.deadline, wait.patient) = (first, deadline, patient);
        // Under max_active_servers the client's turn comes first, in the one line of every pool, and only
        // then a connection of its pool: a client that waits for its turn holds nothing.
        let permit = if self.globals.active.is_on() { Some(self.active_turn(&mut wait).await?) } else { None };
        loop {
            match self.grant(&mut wait).await? {
                Grant::Idle(mut lease) => {
                    if self.fit_to_lend(&mut lease).await {
                        lease.hold(permit);
                        return Ok(lease);
                    }
                    tracing::debug!(server_id = lease.id, "idle server connection failed its check; closing it");
                    self.retire(lease.discard());
                }
                // Opening is rare and its futures are large (a login, TLS): boxed, so that the future of
                // every checkout that waits, moved into the session's box, stays small.
                Grant::Open(slot) => {
                    if let Some(refused) = self.refused_lately() {
                        return Err(refused);
                    }
                    if !Box::pin(self.room_to_grow()).await {
                        continue;
                    }
                    self.note_reserve();
                    // A reader instance's open is given up if the instance leaves the rotation meanwhile: the
                    // client goes elsewhere rather than wait out server_connect_timeout on a silent host.
                    let opened = if self.is_reader_instance() && !wait.patient {
                        Box::pin(self.open_in_rotation()).await
                    } else {
                        Box::pin(self.open()).await
                    };
                    match opened {
                        Ok(conn) => {
                            let mut lease = slot.fill(Box::new(conn));
                            lease.hold(permit);
                            return Ok(lease);
                        }
                        Err(CheckoutError::Connect(e)) => {
                            drop(slot);
                            if let Some(refused) = self.on_refused_login(&e) {
                                return Err(refused);
                            }
                            Box::pin(self.after_failed_open(e, &mut wait)).await?;
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }

    /// The client's turn under `max_active_servers`: at once if one is free and nobody waits, else in the
    /// one line of every pool until the client's deadline.
    fn active_turn(&self, wait: &mut Wait) -> impl Future<Output = Result<ActivePermit, CheckoutError>> + use<> {
        let cap = std::sync::Arc::clone(&self.globals.active);
        let now = cap.try_take();
        let (deadline, waited) = (wait.deadline(), wait.timeout);
        async move {
            if let Some(permit) = now {
                return Ok(permit);
            }
            // Boxed, as a login is: the wait's timer would grow every checkout's future.
            match Box::pin(cap.take_until(deadline)).await {
                Some(permit) => Ok(permit),
                None => Err(CheckoutError::ActiveCap { waited, limit: cap.limit() }),
            }
        }
    }

    /// An idle connection or the right to open one: at once if there is one (no clock read, no queue), else
    /// in line until the client's deadline (kept by the pool's one timer, not one of the client's own).
    async fn grant(&self, wait: &mut Wait) -> Result<Grant<Box<ServerConn>>, CheckoutError> {
        if let Some(grant) = wait.first.take() {
            return Ok(*grant);
        }
        match self.pool.try_acquire() {
            Err(_closed) => return Err(CheckoutError::Closed),
            Ok(Some(grant)) => return Ok(grant),
            Ok(None) => {}
        }
        match self.pool.acquire_until(wait.deadline()).await {
            Ok(grant) => Ok(grant),
            Err(WaitError::Closed) => Err(CheckoutError::Closed),
            Err(WaitError::TimedOut) => Err(wait.give_up(self.reach())),
            Err(WaitError::Refused) => Err(self.refused_in_line()),
            Err(WaitError::Dismissed) => Err(CheckoutError::LeftRotation),
        }
    }

    /// [`open`](Self::open) for a reader instance's pool, given up (the half-open connection closed) if
    /// the instance leaves the rotation before it is done.
    async fn open_in_rotation(&self) -> Result<ServerConn, CheckoutError> {
        // Made before the open begins: a leave from then on wakes it, polled or not.
        let left = self.left_rotation.notified();
        // Declared dead before that (the right to open came with a slot its dead node's session gave up):
        // nothing to wait for.
        if self.is_unreachable() {
            return Err(CheckoutError::LeftRotation);
        }
        tokio::select! {
            biased;
            opened = self.open() => opened,
            () = left => {
                tracing::info!(database = %self.key().database,
                    "a connection being opened to a reader that left the rotation is given up; its client goes elsewhere");
                Err(CheckoutError::LeftRotation)
            }
        }
    }

    /// Decides, after an open failed, whether the client waits (and how long before the next try) or gets
    /// the error now.
    async fn after_failed_open(&self, e: ConnectError, wait: &mut Wait) -> Result<(), CheckoutError> {
        let until = wait.deadline();
        let pause = wait.backoff.next(self.config().server_login_retry);
        if e.is_refusal() {
            // The database has no slot left: back-pressure, not an error. Hold fewer connections, wait (longer
            // each time) and try again until query_wait_timeout.
            let status = self.pool.status();
            let limit = self.limit.refused(status.size - status.opening);
            self.enforce(limit);
            tracing::warn!(error = %e, limit, retry_in = ?pause,
                "the database refused a new connection; lowering the pool limit");
            if let ConnectError::Rejected { error, .. } = e {
                wait.refused = Some(error);
            }
            if Instant::now() + pause >= until {
                pgmux_timer::sleep_until(until).await;
                return Err(wait.give_up(self.reach()));
            }
            pgmux_timer::sleep(pause).await;
            return Ok(());
        }
        // The database is away for now (a restart, a failover, a lost SYN), or busy connections will come
        // back: the client waits, as long as query_wait_timeout allows, instead of failing its query. An
        // error that needs a fix goes to the client at once when no connection is open to wait for.
        let now = Instant::now();
        // A reader instance's pool does not wait (its session picks another choice at once) unless told to.
        let elsewhere = self.is_reader_instance() && !wait.patient;
        if (!e.is_transient() && self.pool.status().size == 0) || now >= until || elsewhere {
            return Err(e.into());
        }
        tracing::warn!(error = %e, fault = ?e.fault(), retry_in = ?pause,
            "server connect failed: could not open a server connection; the client waits and pgmux tries again");
        wait.failed_open = Some(e);
        pgmux_timer::sleep(pause.min(until - now)).await;
        Ok(())
    }

    /// Before the pool grows past its first connection, has sizing read the database again, so that
    /// connections others opened since the last reading are not squeezed out: another application's, and
    /// those of pgmux instances that started at the same moment and have not yet published what they hold
    /// (a fleet started together would otherwise each take the whole budget, and reach the database's own
    /// limit). A reading is one round trip on the control connection; opening a connection is several, so
    /// growth slows little. False if the fresh limit leaves no room for the connection about to open (its
    /// slot is then given back).
    async fn room_to_grow(&self) -> bool {
        if self.config().max_connections_percent == 0 || self.pool.status().size <= 1 {
            return true;
        }
        if !self.globals.budget.refresh_if_older(Duration::ZERO, Duration::from_secs(1)).await {
            return true;
        }
        self.pool.status().size <= self.limit.current()
    }

    /// The common case of [`checkout`](Self::checkout), without waiting: an idle connection that passes
    /// the checks that need no round trip. `None` means "take the slow path".
    pub(crate) fn try_checkout(&self) -> Option<ServerLease> {
        // Under max_active_servers, a turn free now and nobody waiting for one (else the slow path queues).
        let permit = if self.globals.active.is_on() { Some(self.globals.active.try_take()?) } else { None };
        loop {
            let Ok(Some(Grant::Idle(mut lease))) = self.pool.try_acquire() else {
                // Nothing idle (a slot, if granted, is dropped and taken again by the slow path; the turn is
                // given back with it).
                return None;
            };
            match self.quick_check(&mut lease) {
                Fitness::Fit => {
                    lease.hold(permit);
                    return Some(lease);
                }
                Fitness::Unfit => self.retire(lease.discard()),
                // Back to the pool; the slow path takes it again and checks it properly.
                Fitness::NeedsRoundTrip => return None,
            }
        }
    }

    /// A place in the line for a client that found nothing idle at once ([`try_checkout`](Self::try_checkout))
    /// and began to wait at `since` (a moment ago), and its deadline, `query_wait_timeout` from then: the
    /// client's relay loop polls the ticket among its sockets, with no future of its own. `None` if the slow
    /// path must run instead: something came free meanwhile (given back at once, for the slow path to take
    /// again), or the pool is closed.
    pub(crate) fn join_line(&self, since: Instant) -> Option<(ServerTicket, Instant)> {
        // Under max_active_servers the wait is for a turn first, in the slow path: the pool's line would
        // hand out a connection without one.
        if self.globals.active.is_on() {
            return None;
        }
        let deadline = since + self.config().query_wait_timeout;
        match self.pool.join_line_since(since, Some(deadline)) {
            Ok(Joined::Line(ticket)) => Some((ticket, deadline)),
            Ok(Joined::Now(_)) | Err(_) => None,
        }
    }

    /// Why a client's wait in the line ended at its deadline without a connection.
    pub(crate) fn waited_too_long(&self) -> CheckoutError {
        Wait::new(self.config().query_wait_timeout).give_up(self.reach())
    }

    /// What can be known about an idle connection without talking to the server.
    pub(crate) fn quick_check(&self, lease: &mut ServerLease) -> Fitness {
        let now = clock::now_ns();
        if now >= lease.retire_at_ns {
            lease.closing(ServerCloseReason::Lifetime);
            return Fitness::Unfit;
        }
        if self.is_stale(lease) {
            lease.closing(ServerCloseReason::Reconnect);
            return Fitness::Unfit;
        }
        if !lease.looks_alive() || !self.keeps(lease) {
            return Fitness::Unfit;
        }
        if now.saturating_sub(lease.idle_since_ns) < self.globals.config.check_delay_ns() {
            return Fitness::Fit;
        }
        Fitness::NeedsRoundTrip
    }

    /// An idle connection may be lent if it is young enough, nothing arrived on it while it sat idle, and,
    /// after a long idle spell (or a Lambda freeze), it answers a round trip.
    async fn fit_to_lend(&self, lease: &mut ServerLease) -> bool {
        match self.quick_check(lease) {
            Fitness::Fit => true,
            Fitness::Unfit => false,
            Fitness::NeedsRoundTrip => {
                // server_check_query as written; empty is an empty query (PgBouncer's default).
                let config = self.globals.config.full();
                Box::pin(lease.run_plain(&config.server_check_query, config.server_connect_timeout)).await.is_ok()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_between_failed_opens_double_up_to_server_login_retry() {
        let quarter = Duration::from_millis(250);
        let mut backoff = Backoff::default();
        let pauses: Vec<u128> = (0..5).map(|_| backoff.next(quarter).as_millis()).collect();
        assert_eq!(pauses, [50, 100, 200, 250, 250], "the default");
        let mut backoff = Backoff::default();
        let pauses: Vec<u128> = (0..8).map(|_| backoff.next(Duration::from_secs(3)).as_millis()).collect();
        assert_eq!(pauses, [50, 100, 200, 400, 800, 1600, 3000, 3000], "PgBouncer's server_login_retry = 3");
        let mut backoff = Backoff::default();
        let pauses: Vec<u128> = (0..3).map(|_| backoff.next(Duration::ZERO).as_millis()).collect();
        assert_eq!(pauses, [50, 50, 50], "0 does not make pgmux retry in a busy loop");
    }
}
