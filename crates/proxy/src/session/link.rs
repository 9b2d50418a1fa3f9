//! Lending a server connection to a client and taking it back: linking (with the client's parameters
//! applied), releasing it between transactions, losing it, and cleaning up after a client that left. Why a
//! client keeps its connection from one transaction to the next is in `pin`.

use std::io;
use std::task::Poll;
use std::time::Duration;

use pgmux_metrics::ServerCloseReason;
use pgmux_proto::encode::{ErrorMessage, Severity};
use pgmux_proto::sqlstate;

use super::pin::{Keep, pin_lost};
use super::replay::{FirstReply, first_error, first_reply};
use super::{End, Linked, Session, goodbye, shutting_down};
use crate::client::cancel::{self, ServerKey};
use crate::net::io::{MAX_QUEUED, ReadOutcome};
use crate::observe::{Ended, Tally};
use crate::pools::{CheckoutError, Resume, ServerLease};
use crate::protocol::failure::ServerFailure;
use crate::protocol::params;
use crate::protocol::router::Verdict;
use crate::runtime::stop::Level;
use crate::server::guard::Blame;

/// How long a transaction waits for one reader under `reader_fallback = wait` before it picks again.
const READER_WAIT_ROUND: Duration = Duration::from_secs(1);

/// Longest pgmux spends bringing an abandoned server connection back to idle before it closes it instead.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

impl Session {
    /// Links at once, with no await, when an idle connection is ready and already has the client's
    /// parameters: the common case, spared the slow path's future (boxed, a malloc and a free per
    /// transaction). `Err` hands [`link`](Self::link) what it took, if anything.
    pub(super) fn link_at_once(&mut self) -> Result<(), Option<ServerLease>> {
        let Some(lease) = self.shared.pools.get(self.pool).try_checkout() else { return Err(None) };
        if !lease.params.in_sync(&self.params) {
            return Err(Some(lease));
        }
        self.meter.got_server();
        self.linked(lease);
        Ok(())
    }

    /// Gets a server connection for the unit that `tag` begins, starting with `taken` if
    /// [`link_at_once`](Self::link_at_once) took one. `Ok(None)`: linked. `Ok(Some(verdict))`: no server
    /// (the verdict answers the unit with the error). `Err`: the session is over.
    pub(super) async fn link(
        &mut self,
        tag: u8,
        mut taken: Option<ServerLease>,
        mut resume: Option<Resume>,
    ) -> Result<Option<Verdict>, End> {
        // A wait begun in the line keeps its deadline, whatever happens next.
        let deadline = resume.as_ref().map(|r| r.deadline);
        // A connection that fails while pgmux applies the client's parameters has seen nothing of the
        // transaction: another one is taken, a few times, before the client hears of it.
        let mut attempts = 0;
        let lease = loop {
            let lent = match taken.take() {
                Some(lease) => {
                    self.meter.got_server();
                    Ok(lease)
                }
                None => {
                    let resume =
                        resume.take().or(deadline.map(|deadline| Resume { grant: None, deadline, patient: false }));
                    self.lend(resume).await?
                }
            };
            let lease = match lent {
                Ok(lease) => lease,
                Err(err) => return Ok(Some(self.router.answer_unit(tag, err.to_bytes()))),
            };
            match self.sync_params(lease).await {
                Ok(lease) => break lease,
                Err(Some(refused)) => return Ok(Some(self.router.answer_unit(tag, refused.to_bytes()))),
                Err(None) if attempts < 2 => attempts += 1,
                Err(None) => {
                    let err = ErrorMessage::error(
                        sqlstate::CONNECTION_FAILURE,
                        "server connections kept failing, or kept being cancelled, while pgmux applied the \
                         session's parameters",
                    )
                    .with_hint("nothing of this statement ran; run it again");
                    return Ok(Some(self.router.answer_unit(tag, err.to_bytes())));
                }
            }
        };
        self.linked(lease);
        Ok(None)
    }

    pub(super) fn linked(&mut self, lease: ServerLease) {
        self.cancel.link(ServerKey { addr: lease.addr, pid: lease.key.0, secret: lease.key.1 });
        tracing::trace!(server_id = lease.id, "linked");
        let tally = self.meter.linked(lease.id);
        self.server = Some(Box::new(Linked::new(lease, tally)));
        self.replay.open(self.client.out.queued_total());
    }

    /// A server connection from the pool, or the error the client is told instead.
    async fn lend(&mut self, mut resume: Option<Resume>) -> Result<Result<ServerLease, ErrorMessage>, End> {
        // A reader route's transaction whose reader could not be reached: the other choices it tried, and
        // until when it waits for a reader (`reader_fallback = wait` with none left).
        let (mut tries, mut until) = (0u8, None);
        loop {
            let ready = if resume.is_none() { self.shared.pools.get(self.pool).try_checkout() } else { None };
            let checkout = match ready {
                Some(lease) => Ok(lease),
                None => match self.wait_for_server(resume.take()).await? {
                    Some(checkout) => checkout,
                    None => return Ok(Err(self.cancelled_while_waiting())),
                },
            };
            match checkout {
                Ok(lease) => {
                    self.meter.got_server();
                    return Ok(Ok(lease));
                }
                // A reader that cannot be reached is out until its next good poll; the transaction, which
                // has not begun, goes to another choice.
                Err(CheckoutError::Connect(e)) if self.reader_route => {
                    tracing::warn!(error = %e, "a reader could not be reached; trying another choice");
                    self.shared.pools.get(self.pool).set_unreachable(true);
                    match self.another_reader(&mut tries, &mut until) {
                        Some(Ok(next)) => resume = next,
                        Some(Err(none)) => return Ok(Err(none)),
                        None => return self.no_server(CheckoutError::Connect(e)).map(Err),
                    }
                }
                // The reader it waited for left the rotation (already out of the pick): another choice.
                Err(CheckoutError::LeftRotation) if self.reader_route => {
                    match self.another_reader(&mut tries, &mut until) {
                        Some(Ok(next)) => resume = next,
                        Some(Err(none)) => return Ok(Err(none)),
                        None => return self.no_server(CheckoutError::LeftRotation).map(Err),
                    }
                }
                Err(e) => return self.no_server(e).map(Err),
            }
        }
    }

    /// The next choice of a transaction whose reader could not be reached: another reader, a few times at
    /// most. Under `reader_fallback = wait` with no reader left, the one picked is waited for as for any
    /// connection, a second at a time (then the next pick: whichever comes back first is found), until
    /// `query_wait_timeout`. `None`: give up with the last error; `Some(Err)`: no reader at all.
    pub(super) fn another_reader(
        &mut self,
        tries: &mut u8,
        until: &mut Option<tokio::time::Instant>,
    ) -> Option<Result<Option<Resume>, ErrorMessage>> {
        if until.is_none() && *tries >= 3 {
            return None;
        }
        *tries = tries.saturating_add(1);
        if !self.choose_reader() {
            return Some(Err(no_reader(self.shared.pools.get(self.route).readers())));
        }
        let readers = self.shared.pools.get(self.route).readers();
        if !readers.is_some_and(|r| r.waits_for_a_reader(&self.shared.pools)) {
            return Some(Ok(None));
        }
        let now = tokio::time::Instant::now();
        let until = *until.get_or_insert_with(|| now + self.shared.config().query_wait_timeout);
        if now >= until {
            return None;
        }
        let deadline = until.min(now + READER_WAIT_ROUND);
        Some(Ok(Some(Resume { grant: None, deadline, patient: true })))
    }

    /// The client cancelled its query while it waited for a server connection: what it is told.
    pub(super) fn cancelled_while_waiting(&mut self) -> ErrorMessage {
        tracing::debug!("query cancelled while waiting for a server connection");
        self.meter.unlinked();
        ErrorMessage::error(sqlstate::QUERY_CANCELED, "canceling statement due to user request")
            .with_detail("The query was still waiting for a server connection in pgmux; it never ran.")
    }

    /// No server connection came: the error the client is told, or the end of the session if pgmux is
    /// shutting down.
    pub(super) fn no_server(&mut self, e: CheckoutError) -> Result<ErrorMessage, End> {
        if let CheckoutError::Closed = e {
            self.client.out.push(shutting_down().to_bytes());
            return Err(End::Shutdown);
        }
        self.meter.no_server(&e);
        if let CheckoutError::LoginRefused(refused) = &e {
            // PgBouncer's words (scripts and its test suite count them); the server's message names no secret.
            tracing::info!(code = %refused.code, "server login refused, client closing because: {}", refused.message);
            return Err(End::closed(e.to_client()));
        }
        tracing::warn!(error = %e, "no server connection for client");
        Ok(e.to_client())
    }

    /// Waits in line for a server connection while watching the client: `None` if the client cancelled
    /// its query meanwhile (a connection that came at the same moment goes back to the pool unused).
    async fn wait_for_server(
        &mut self,
        resume: Option<Resume>,
    ) -> Result<Option<Result<ServerLease, CheckoutError>>, End> {
        let _ = self.meter.waiting();
        let Session { shared, client, watch, cancel, meter, pool, .. } = self;
        let kill = &meter.seen.kill;
        // While waiting in line, keep reading the client so that a client that leaves is noticed.
        let client_left = async {
            loop {
                match client.read_compact().await {
                    Ok(ReadOutcome::Data) if client.rbuf.len() < MAX_QUEUED => {}
                    Ok(ReadOutcome::Data) => std::future::pending::<()>().await,
                    Ok(ReadOutcome::Eof) | Err(_) => return,
                }
            }
        };
        cancel.wait_begin();
        // The cancel and the stop wake this task directly (no queue to join and leave per wait), and the
        // checkout is polled first: once it is ready, nothing else is looked at.
        let cancelled = std::future::poll_fn(|cx| cancel.poll_cancelled(cx));
        let stopped = std::future::poll_fn(|cx| match watch.poll(cx, kill) {
            Level::Hard => Poll::Ready(()),
            _ => Poll::Pending,
        });
        let waited = tokio::select! {
            biased;
            r = shared.pools.get(*pool).checkout_resumed(resume) => Some(r),
            () = cancelled => None,
            _ = client_left => return Err(End::ClientGone),
            () = stopped => {
                client.out.push(goodbye(kill).to_bytes());
                return Err(End::Shutdown);
            }
        };
        // A cancel that came while the query waited answers it in pgmux: it never reaches a server.
        Ok(if cancel.wait_end() { None } else { waited })
    }

    /// Applies the client's parameters to a server whose settings differ. `Err(Some(error))`: the server
    /// refused a value, the client's own error (the connection goes back to the pool); `Err(None)`: try
    /// another connection (this one failed and is closed, or kept being cancelled and goes back unchanged).
    async fn sync_params(&self, mut lease: ServerLease) -> Result<ServerLease, Option<ErrorMessage>> {
        if lease.params.in_sync(&self.params) {
            return Ok(lease);
        }
        let defaults = self.shared.pools.get(self.pool).defaults();
        let Some(sql) = params::sync_statement(&self.params, &lease.params, &defaults) else {
            lease.params.mark_in_sync(&self.params);
            return Ok(lease);
        };
        // Boxed: a round trip's future is large, and most links never need one.
        let Err(failure) = Box::pin(lease.run_guarded(&sql, self.shared.config().server_connect_timeout)).await else {
            params::synced(&self.params, &mut lease.params);
            return Ok(lease);
        };
        tracing::warn!(error = %failure, fault = ?failure.fault(), "could not apply the client's parameters");
        match failure.reply() {
            // The server refused one of the client's values: the client's own error.
            Some(refused) if failure.reusable() && Blame::of(&refused.code) == Blame::Refused => {
                Err(Some(refused.to_client(Severity::Error)))
            }
            // Cancelled each time (a timeout of the session the connection carries fired before pgmux's
            // guard took hold): nothing changed there, and the connection goes back as it was.
            _ if failure.reusable() => Err(None),
            _ => {
                self.shared.pools.get(self.pool).retire(lease.discard());
                Err(None)
            }
        }
    }

    /// Gives the server connection back after `ReadyForQuery('I')` with nothing outstanding, unless the
    /// client holds session state there (it is pinned), when no step of [`release`](Self::release) has to
    /// wait: the usual case, done without a future. `Ok(false)`: one has to (settings to read back, a role
    /// to confirm, a cancel on its way to the server), and nothing was done; the caller awaits `release`.
    pub(super) fn release_at_once(&mut self) -> Result<bool, End> {
        let (role_unconfirmed, ends_idle) = match self.server.as_mut() {
            Some(linked) => {
                let server = linked.conn();
                (server.role_unconfirmed, server.params.ends_idle())
            }
            None => (false, false),
        };
        let pinned = self.router.pin().is_some() | self.session_mode;
        // Unlinking the cancel key first is safe: when pgmux sends nothing more to the server, a cancel
        // could only reach the client's own finished transaction.
        if role_unconfirmed || (!pinned && (ends_idle || self.router.settings_dirty() || !self.cancel.try_unlink())) {
            return Ok(false);
        }
        if let Some(reason) = self.transaction_over() {
            return self.stay_pinned(reason).map(|()| true);
        }
        self.meter.unpinned();
        self.give_back();
        Ok(true)
    }

    /// [`release_at_once`](Self::release_at_once), with the steps that wait. Settings the client changed
    /// are read back first. `Err`: a pinned client's node is no longer trusted, and its session state
    /// cannot move.
    pub(super) async fn release(&mut self) -> Result<(), End> {
        if let Some(reason) = self.transaction_over() {
            let unconfirmed = self.server.as_mut().is_some_and(|linked| linked.conn().role_unconfirmed);
            if unconfirmed && !Box::pin(self.confirm_role()).await {
                return Ok(());
            }
            return self.stay_pinned(reason);
        }
        self.meter.unpinned();
        let (role_unconfirmed, ends_idle) = match self.server.as_mut() {
            Some(linked) => {
                let server = linked.conn();
                (server.role_unconfirmed, server.params.ends_idle())
            }
            None => (false, false),
        };
        let changed = self.router.take_settings_dirty();
        // A client's idle_session_timeout is read back and taken off too: left on the connection, it would
        // end it in the pool.
        if (changed || role_unconfirmed || ends_idle) && !Box::pin(self.read_back_settings(changed)).await {
            return Ok(());
        }
        if role_unconfirmed && !Box::pin(self.confirm_role()).await {
            return Ok(());
        }
        // A cancel on its way to this server must land before anyone else can use it.
        if !self.cancel.try_unlink() {
            Box::pin(self.cancel.unlink()).await;
        }
        self.give_back();
        Ok(())
    }

    /// Adds what a link tallied and no transaction's end added (a server lost, a session ended mid-way) to
    /// SHOW STATS' row of the client's database.
    pub(super) fn add_tally(&self, tally: &mut Tally, ended: &Ended) {
        self.shared.pools.get(self.route).stats().add(&std::mem::take(tally), ended);
    }

    /// Unlinks the server connection and returns it to the pool, or closes it if it is too old, on a node
    /// no longer wanted, or not clean.
    fn give_back(&mut self) {
        let Some(linked) = self.server.take() else { return };
        self.meter.unlinked();
        self.replay.finish();
        let mut lease = linked.take();
        // Its own jittered server_lifetime, as when it is lent (and no configuration read per release). Timed
        // at the last ReadyForQuery, which a release follows in the same turn of the loop (one clock reading
        // less); a connection released later than that is timed again when it is next lent.
        let last_ready = self.meter.last_ready_ns();
        let too_old = last_ready >= lease.retire_at_ns;
        let pool = self.shared.pools.get(self.pool);
        let unfit = !pool.keeps(&mut lease) || !pool.fits(lease.role);
        if too_old || unfit || !lease.io.rbuf.is_empty() || lease.io.framer.mid_message() {
            lease.closing(match (too_old, unfit) {
                (true, _) => ServerCloseReason::Lifetime,
                (_, true) => ServerCloseReason::ReadOnly,
                _ => ServerCloseReason::Broken,
            });
            pool.retire(lease.discard());
        } else {
            lease.io.shrink_if_idle(crate::server::SERVER_READ_CHUNK * 2, crate::server::SERVER_QUEUE_SLOTS);
            // Idle since that same ReadyForQuery.
            lease.idle_since_ns = last_ready;
            lease.give_back_at(self.meter.instant_at(last_ready));
        }
    }

    /// The linked server connection died or broke the protocol. The client learns it with SQLSTATE 08006
    /// in place of each reply it was owed, and its next transaction gets a new server connection.
    pub(super) fn server_lost(&mut self, failure: ServerFailure) -> Result<(), End> {
        let Some(mut linked) = self.server.take() else { return Ok(()) };
        // The server ended the session before any answer (its FATAL waits in the read buffer): a reset says
        // it left the transaction unread (a session ended while idle, as the transaction came), whether the
        // reset failed a read or came after the server's end of file (it had closed before the transaction
        // reached it); a plain close says nothing, and the client gets the FATAL's own words.
        let io = &linked.conn().io;
        let ended = self.replay.is_open() && first_reply(&io.rbuf) == Some(FirstReply::Ended);
        let unread = ended
            && match &failure {
                ServerFailure::Io(e) => e.kind() == io::ErrorKind::ConnectionReset,
                ServerFailure::Closed => io.stream.reset_after_close(),
                _ => false,
            };
        let rbuf = &io.rbuf;
        let failure = match first_error(rbuf) {
            Some(fatal) if ended && !unread => {
                self.replay.close();
                ServerFailure::Fatal(Box::new(fatal))
            }
            _ => failure,
        };
        self.add_tally(&mut linked.tally, &Ended::default());
        self.meter.unlinked();
        self.meter.unpinned();
        let reached_server = linked.reached_server() && !unread;
        let pin = self.held();
        // Nothing of the transaction reached the server (a stale connection that failed on the first write),
        // or the server never read it: it runs again on another connection, unseen. Not for a pinned client:
        // its session state is gone.
        let linked = if reached_server || pin.is_some() {
            linked
        } else {
            let why = if unread {
                format!("the server ended the session before reading it: {failure}")
            } else {
                failure.to_string()
            };
            match self.try_replay(linked, &why) {
                Ok(()) => return Ok(()),
                Err(linked) => linked,
            }
        };
        let mut lease = linked.take();
        let mid_message = lease.io.framer.mid_message();
        tracing::warn!(server_id = lease.id, error = %failure, fault = ?failure.fault(), reached_server,
            "server connection lost");
        let tracker = std::mem::take(&mut lease.tracker);
        drop(lease.discard());
        self.cancel.clear();
        if mid_message {
            return Err(End::Unrecoverable);
        }
        // What the client asked of the lost server is undone in pgmux's bookkeeping, and each unit it was
        // owed gets one error.
        let replies = self.router.server_lost(tracker, &failure.to_string(), &self.shared.statements);
        self.client.out.push(replies);
        match pin {
            Some(reason) => Err(pin_lost(reason)),
            None => Ok(()),
        }
    }

    /// The client left with a server linked. A running query is cancelled and its connection closed; a
    /// connection that only waits (idle in a transaction, an open unit, a COPY) is brought back to idle and
    /// returned, or closed if that cannot be done cleanly and quickly. Never lent dirty.
    pub(super) async fn abandon(&mut self, linked: Box<Linked>) {
        let mut lease = linked.take();
        let state = std::mem::take(&mut lease.tracker);
        self.cancel.clear();
        let broken = lease.io.framer.mid_message() || self.client.framer.mid_message();
        // A pinned client's session state (listeners, locks, temporary tables) must not reach another. A
        // session-mode client's connection goes back as a transaction-mode one does (settings read, or closed).
        let pinned = matches!(self.held(), Some(Keep::Pin(_)));
        if broken || pinned || self.watch.level() == Level::Hard {
            lease.closing(match (pinned, broken) {
                (true, _) => ServerCloseReason::PinnedClientLeft,
                (_, true) => ServerCloseReason::Broken,
                _ => ServerCloseReason::Shutdown,
            });
            drop(lease.discard());
            return;
        }
        if state.pending() > 0 && !state.copy_in() {
            // A query may still run. Cancel it, and do not reuse the connection: a cancel that lands late
            // would hit the next client's query.
            let key = ServerKey { addr: lease.addr, pid: lease.key.0, secret: lease.key.1 };
            self.shared.pools.get(self.pool).retire(lease.discard());
            if let Err(e) = pgmux_timer::timeout(DRAIN_TIMEOUT, cancel::forward(key)).await.unwrap_or(Ok(())) {
                tracing::debug!(error = %e, "could not cancel the abandoned query");
            }
            return;
        }
        let unread = self.router.settings_dirty() || lease.role_unconfirmed;
        if lease.drain(&state, DRAIN_TIMEOUT).await && !unread {
            tracing::debug!(server_id = lease.id, "abandoned server connection rolled back and returned");
        } else {
            tracing::info!(server_id = lease.id, "abandoned server connection could not be cleaned; closing it");
            lease.closing(ServerCloseReason::ResetFailed);
            self.shared.pools.get(self.pool).retire(lease.discard());
        }
    }
}

impl Session {
    /// Reads the session's settings back from the linked server after the client changed some (`changed`:
    /// SET, RESET, set_config, DISCARD ALL), so that they follow the client to other servers and leave this
    /// one for the next client; and after the server reported a new `default_transaction_read_only`, which is
    /// the client's only if its session set it. False if the server stays with the client: the read was
    /// cancelled each time (the client's settings are still there, and so is the client, until a later
    /// release reads them), or the server failed (it is dropped, and the client's next statement is told
    /// that what it changed is gone).
    async fn read_back_settings(&mut self, changed: bool) -> bool {
        let timeout = self.shared.config().server_connect_timeout;
        let Some(linked) = self.server.as_mut() else { return true };
        let server = linked.conn();
        let end_idle_timeout = server.params.ends_idle();
        match server.session_settings(timeout, end_idle_timeout).await {
            Ok(settings) => {
                params::adopt_session(&mut self.params, &mut server.params, &settings, end_idle_timeout);
                self.timer.set_own_idle(self.params.idle_session_timeout());
                true
            }
            Err(failure) if failure.reusable() => {
                tracing::warn!(error = %failure, "could not read back the client's settings; it keeps its server \
                    connection until they can be read");
                if changed {
                    self.router.settings_unread();
                }
                linked.next_transaction();
                false
            }
            Err(failure) => {
                tracing::warn!(error = %failure, fault = ?failure.fault(), "the server failed while the client's \
                    settings were read back");
                let _ = self.server_lost(failure);
                if changed {
                    self.router.settings_lost();
                }
                false
            }
        }
    }

    /// Asks the linked server for its node's role after something hinted at a change (see
    /// `ServerConn::role_unconfirmed`); a role that no longer fits makes the node stale. False if the server
    /// failed (it is then dropped and the client told).
    async fn confirm_role(&mut self) -> bool {
        let timeout = self.shared.config().server_connect_timeout;
        let Some(linked) = self.server.as_mut() else { return true };
        let server = linked.conn();
        server.role_unconfirmed = false;
        match server.ask_role(timeout).await {
            Ok(role) => {
                server.role = Some(role);
                self.shared.pools.get(self.pool).role_seen(server);
                true
            }
            Err(e) => {
                tracing::debug!("the server failed while its role was asked");
                let _ = self.server_lost(e);
                false
            }
        }
    }
}

impl Session {
    /// A reader route's transaction picks its instance's pool; false if none will do (`reader_fallback =
    /// error` with no healthy reader).
    pub(super) fn choose_reader(&mut self) -> bool {
        let Some(readers) = self.shared.pools.get(self.route).readers() else { return true };
        match readers.pick(&self.shared.pools) {
            crate::pools::readers::Choice::To(id) => {
                self.pool = id;
                true
            }
            crate::pools::readers::Choice::Nowhere => false,
        }
    }
}

/// What a reader route's transaction is told when no reader is healthy and `reader_fallback = error`.
pub(super) fn no_reader(readers: Option<&std::sync::Arc<crate::pools::readers::ReaderSet>>) -> ErrorMessage {
    let route = readers.map_or("", |r| r.route.as_str());
    ErrorMessage::error(
        sqlstate::CONNECTION_FAILURE,
        format!("no reader of database \"{route}\" is available (reader_fallback = error)"),
    )
    .with_hint("try again, or set reader_fallback = writer to read from the writer meanwhile")
}
