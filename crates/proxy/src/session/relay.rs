//! Moving messages between the client and its server: what to do with each message, found by its tag and at
//! most one small field, and the one poll that drives both sockets.

use std::ops::Range;
use std::task::{Context, Poll};

use bytes::Bytes;
use pgmux_pool::WaitError;
use pgmux_proto::backend::ErrorFields;
use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::sqlstate;
use pgmux_proto::{Step, backend};

use super::replay::{FirstReply, first_reply};
use super::{Closing, End, Session};
use crate::net::io::{MAX_QUEUED, ReadOutcome};
use crate::pools::{Resume, ServerGrant, ServerLease, ServerPool};
use crate::protocol::failure::ServerFailure;
use crate::protocol::params::ClientParams;
use crate::protocol::router::{Mode, ServerView, Verdict};
use crate::protocol::tracker::Route;
use crate::server::{SERVER_READ_CHUNK, ServerConn};

/// Something happened on a socket.
#[derive(Debug)]
pub(super) enum Event {
    /// Nothing happened on the sockets; look at the session's state again (shutdown began).
    Wake,
    Client(std::io::Result<ReadOutcome>),
    Server(std::io::Result<ReadOutcome>),
    ClientWriteFailed,
    ServerWriteFailed(std::io::Error),
    /// A timeout of the session's passed.
    Timeout(super::timers::Deadline),
    /// The client's message is too large for the memory left to clients' large messages.
    OutOfMemory,
    /// The line for a server connection handed something out (see the `line` module).
    Granted(Result<ServerGrant, WaitError>),
    /// The client cancelled its query while it waited in line.
    CancelledInLine,
}

/// What an event leaves the relay loop to do.
pub(super) enum Then {
    Nothing,
    /// The transaction is over: give the server back (which may first have to ask it something).
    Release,
}

/// A message that begins a unit and found no server connection free at once: it waits, out of the read
/// buffer, while the session links one.
pub(super) struct Waiting {
    pub(super) tag: u8,
    pub(super) msg: Bytes,
    pub(super) piece: Piece,
    /// A connection taken but not usable as it was: its parameters differ from the client's.
    pub(super) taken: Option<ServerLease>,
    /// Where a wait begun in the line goes on (see the `line` module).
    pub(super) resume: Option<Resume>,
}

/// How much of the message the router sees.
#[derive(Clone, Copy)]
pub(super) enum Piece {
    Whole,
    /// The first piece of a large Bind (its names), the rest streamed past.
    BindHead,
}

/// What the server's messages led to.
pub(super) enum ServerProgress {
    Continue,
    /// `ReadyForQuery('I')` with nothing outstanding: the server can go back.
    Release,
    /// The server ended the session or broke the protocol.
    Lost(ServerFailure),
    /// The server's first reply refused the transaction as read-only: run it elsewhere if it may be.
    ReadOnly,
}

impl Session {
    /// Flushes both write queues and reads from whichever side may be read; ready when anything happened.
    pub(super) fn poll_io(&mut self, cx: &mut Context<'_>) -> Poll<Event> {
        if let Poll::Ready(Err(_)) = self.client.out.poll_flush(&mut self.client.stream, cx) {
            return Poll::Ready(Event::ClientWriteFailed);
        }
        if let Some(linked) = self.server.as_mut() {
            let server = linked.conn();
            if let Poll::Ready(Err(e)) = server.io.out.poll_flush(&mut server.io.stream, cx) {
                return Poll::Ready(Event::ServerWriteFailed(e));
            }
            // Back-pressure: a client that does not read its results stops the server's output here.
            if self.client.out.len() < MAX_QUEUED
                && let Poll::Ready(r) = server.io.poll_read(cx, SERVER_READ_CHUNK)
            {
                return Poll::Ready(Event::Server(r));
            }
        }
        let server_backlog = self.server.as_mut().map_or(0, |l| l.conn().io.out.len());
        // While the router holds, or the client waits in line, what it sends waits unread in its buffer, up
        // to a bound (reading still notices a client that leaves).
        let held = self.router.holding() || self.in_line();
        if server_backlog < MAX_QUEUED && (!held || self.client.rbuf.len() < MAX_QUEUED) {
            // Past the usual buffer, only a message that must be read whole is arriving: its bytes are lent.
            if self.client.rbuf.len() >= MAX_QUEUED && !self.lend_message_memory() {
                return Poll::Ready(Event::OutOfMemory);
            }
            if let Poll::Ready(r) = self.client.poll_read_armed(cx) {
                return Poll::Ready(Event::Client(r));
            }
        }
        Poll::Pending
    }

    /// Covers the client's read buffer and one more read with memory lent from `max_client_buffers`.
    #[cold]
    fn lend_message_memory(&mut self) -> bool {
        let limit = self.shared.config().max_client_buffers;
        let wanted = self.client.rbuf.len() + crate::net::io::READ_SCRATCH;
        self.reservation.cover(&self.shared.message_memory, wanted, limit)
    }

    /// Gives the lent memory back once the large message has moved on: out of the read buffer, and out of
    /// the server's write queue too (where it still takes memory until written).
    pub(super) fn give_back_message_memory(&mut self) {
        let server_backlog = self.server.as_mut().map_or(0, |l| l.conn().io.out.len());
        if self.client.rbuf.len() < MAX_QUEUED && server_backlog < MAX_QUEUED {
            self.reservation.release();
        }
    }

    /// Acts on one socket event; what it leaves to do is the caller's, which may wait.
    pub(super) fn handle(&mut self, event: Event) -> Result<Then, End> {
        match event {
            Event::Client(Ok(ReadOutcome::Data)) => {
                self.meter.client_data();
                // The client spoke: an idle timeout starts again (a running query's does not).
                if let Some(idle) = self.deadline().filter(|(kind, _)| *kind != super::timers::Deadline::Query) {
                    self.timer.restart(Some(idle));
                }
                Ok(Then::Nothing)
            }
            Event::Wake => self.woken().map(|()| Then::Nothing),
            Event::OutOfMemory => Err(End::closed(
                ErrorMessage::fatal(
                    sqlstate::OUT_OF_MEMORY,
                    format!(
                        "pgmux has no memory left for this client's message of over {} bytes: other clients' \
                         large messages hold max_client_buffers ({} bytes)",
                        self.client.rbuf.len(),
                        self.shared.config().max_client_buffers
                    ),
                )
                .with_hint("send smaller messages (COPY, batches), or raise max_client_buffers"),
            )),
            Event::Timeout(kind) => self.timed_out(kind).map(|()| Then::Nothing),
            Event::Granted(granted) => self.leave_line(Some(granted)).map(|()| Then::Nothing),
            Event::CancelledInLine => self.leave_line(None).map(|()| Then::Nothing),
            Event::Client(Ok(ReadOutcome::Eof)) | Event::Client(Err(_)) | Event::ClientWriteFailed => {
                Err(End::ClientGone)
            }
            Event::Server(Ok(ReadOutcome::Data)) => loop {
                match self.relay_server() {
                    ServerProgress::Continue => return Ok(Then::Nothing),
                    ServerProgress::Release => return Ok(Then::Release),
                    ServerProgress::Lost(failure) => return self.server_lost(failure).map(|()| Then::Nothing),
                    // Replayed (nothing left to relay), or not (relay the refusal as it is).
                    ServerProgress::ReadOnly => self.refused_read_only()?,
                }
                if self.server.is_none() {
                    return Ok(Then::Nothing);
                }
            },
            Event::Server(Ok(ReadOutcome::Eof)) => self.server_lost(ServerFailure::Closed).map(|()| Then::Nothing),
            Event::Server(Err(e)) | Event::ServerWriteFailed(e) => {
                self.server_lost(ServerFailure::Io(e)).map(|()| Then::Nothing)
            }
        }
    }

    /// Woken without socket events: shutdown began, the node of the linked server was declared dead, or
    /// RECONNECT marked the linked server connection (see `ServerPool::reconnect`).
    fn woken(&mut self) -> Result<(), End> {
        let Some(linked) = self.server.as_mut() else { return Ok(()) };
        let pool = self.shared.pools.get(self.pool);
        if pool.is_dead(linked.conn()) {
            return self.server_lost(ServerFailure::Timeout(self.shared.config().server_probe_timeout));
        }
        if self.closing == Closing::No && pool.is_stale(linked.conn()) && self.shared.config().server_fast_close {
            self.closing = Closing::ServerChanged;
        }
        Ok(())
    }

    /// Handles every whole message the client has sent: forwards, rewrites, drops or answers each. Returns
    /// early with the message that begins a unit when no server connection was free at once: the caller
    /// links one ([`link_waiting`](Self::link_waiting)) and calls this again for the rest.
    ///
    /// Not async, so that the relay loop's future (most of an idle client's memory) does not carry the
    /// space of everything that runs between two waits.
    pub(super) fn relay_client(&mut self) -> Result<Option<Waiting>, End> {
        // Bytes at the front of the read buffer already judged "forward as they are", not yet moved.
        let mut run = 0;
        // While the router waits for the server (a check), the client's next messages stay unread.
        while !self.router.holding() {
            let step = self.client.framer.step(&self.client.rbuf[run..]);
            let (tag, len) = match step {
                Err(e) => {
                    self.forward_client(run);
                    return Err(End::Protocol(e));
                }
                Ok(Step::NeedMore { .. }) => break,
                Ok(Step::Stream { tag: b'B', take, start: true }) => {
                    // A large Bind: routed by its first piece (its names), the rest passed on as it comes.
                    self.replay.close();
                    self.forward_client(run);
                    run = 0;
                    let head = self.client.rbuf.split_to(take).freeze();
                    if let Some(waiting) = self.dispatch(b'B', head, Piece::BindHead)? {
                        return Ok(Some(waiting));
                    }
                    continue;
                }
                Ok(Step::Stream { take, .. }) => {
                    // CopyData, or the rest of a large Bind; without a server, or while the router skips (a
                    // COPY that failed, a Bind it refused), it goes nowhere. Neither is run again elsewhere.
                    self.replay.close();
                    if self.server.is_some() && self.router.mode() == Mode::Normal {
                        run += take;
                    } else {
                        self.forward_client(run);
                        run = 0;
                        let _ = self.client.rbuf.split_to(take);
                    }
                    continue;
                }
                Ok(Step::Message { tag, len }) => (tag, len),
            };
            // The common case: a linked server and a message forwarded as it is (Execute, Sync, CopyData…).
            if self.router.passes(tag)
                && let Some(linked) = self.server.as_mut()
            {
                linked.conn().tracker.client_message(tag);
                run += len;
                continue;
            }
            self.forward_client(run);
            run = 0;
            let msg = self.client.rbuf.split_to(len).freeze();
            if let Some(waiting) = self.dispatch(tag, msg, Piece::Whole)? {
                return Ok(Some(waiting));
            }
        }
        self.forward_client(run);
        if let Some(linked) = self.server.as_mut() {
            let out = &mut self.client.out;
            linked.conn().tracker.take_answers(|b| out.push(b));
        }
        Ok(None)
    }

    /// Moves `n` judged bytes to the server's write queue.
    fn forward_client(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let chunk = self.client.rbuf.split_to(n).freeze();
        self.replay.record(&chunk);
        match self.server.as_mut() {
            Some(linked) => linked.conn().io.out.push(chunk),
            None => unreachable!("client bytes are judged forward only while a server is linked"),
        }
    }

    /// One message, taken out of the read buffer, that needs more than forwarding: routed on the linked
    /// server, answered or dropped without one, or handed back to wait for a server.
    fn dispatch(&mut self, tag: u8, msg: Bytes, piece: Piece) -> Result<Option<Waiting>, End> {
        if tag == b'X' {
            // With a server linked, `finish` cleans it up.
            return Err(End::ClientGone);
        }
        if self.server.is_none() {
            match self.router.unlinked(tag, &msg) {
                Verdict::Drop => return Ok(None),
                Verdict::Answer(reply) => {
                    self.client.out.push(reply);
                    return Ok(None);
                }
                Verdict::NeedServer => {
                    if self.reader_route && !self.choose_reader() {
                        let err = super::link::no_reader(self.shared.pools.get(self.route).readers());
                        if let Verdict::Answer(reply) = self.router.answer_unit(tag, err.to_bytes()) {
                            self.client.out.push(reply);
                        }
                        return Ok(None);
                    }
                    if let Err(taken) = self.link_at_once() {
                        return Ok(Some(Waiting { tag, msg, piece, taken, resume: None }));
                    }
                }
            }
        }
        self.route_linked(tag, msg, piece);
        Ok(None)
    }

    /// Links a server for the message that waited for one, then routes it there (or answers it with the
    /// reason there is none).
    pub(super) async fn link_waiting(&mut self, waiting: Waiting) -> Result<(), End> {
        let Waiting { tag, msg, piece, taken, resume } = waiting;
        if let Some(Verdict::Answer(reply)) = self.link(tag, taken, resume).await? {
            self.client.out.push(reply);
            return Ok(());
        }
        self.route_linked(tag, msg, piece);
        Ok(())
    }

    /// A message of a unit on the linked server (none: a unit that got no server, nothing to do).
    pub(super) fn route_linked(&mut self, tag: u8, msg: Bytes, piece: Piece) {
        let Some(linked) = self.server.as_mut() else { return };
        let server = linked.conn();
        let mut view =
            ServerView { tracker: &mut server.tracker, statements: &mut server.statements, out: &mut server.io.out };
        match piece {
            Piece::Whole => {
                self.replay.record(&msg);
                self.router.linked(tag, msg, &mut view, &self.shared.statements);
            }
            Piece::BindHead => {
                // The rest streams past: it cannot be kept to run again elsewhere.
                self.replay.close();
                self.router.linked_bind_head(msg, &mut view, &self.shared.statements);
            }
        }
    }

    /// Handles every whole message (and streamed piece) the server has sent: forwards or swallows each as
    /// the tracker says, puts pgmux's own answers in their places, and notes what changes session state.
    pub(super) fn relay_server(&mut self) -> ServerProgress {
        let Some(linked) = self.server.as_mut() else {
            return ServerProgress::Continue;
        };
        let (server, tally) = linked.conn_and_tally();
        if self.replay.is_open() {
            // The transaction's first reply: a refusal as read-only means it never ran; anything else closes
            // the chance to run it again.
            // A client whose own sessions are read-only gets its 25006 like any error: it says nothing of
            // the node. Nor does it when any node will do (a standby answers writes so).
            // A session ended before any answer waits for the socket's end, which says whether the server
            // read the transaction at all (see `Session::server_lost`).
            match first_reply(&server.io.rbuf) {
                None | Some(FirstReply::Ended) => return ServerProgress::Continue,
                Some(FirstReply::ReadOnly)
                    if !self.params.read_only() && self.shared.pools.get(self.pool).wants_writer() =>
                {
                    return ServerProgress::ReadOnly;
                }
                Some(_) => self.replay.close(),
            }
        }
        let (out, client_stream) = (&mut self.client.out, &self.client.stream);
        let registry = &self.shared.statements;
        let mut run = 0;
        let progress = loop {
            let (tag, len) = match server.io.framer.step(&server.io.rbuf[run..]) {
                Err(e) => break ServerProgress::Lost(e.into()),
                Ok(Step::NeedMore { .. }) => break ServerProgress::Continue,
                Ok(Step::Stream { take, .. }) => {
                    run += take;
                    continue;
                }
                Ok(Step::Message { tag, len }) => (tag, len),
            };
            if server.tracker.answer_due() {
                server.io.forward(run, out);
                run = 0;
                server.tracker.take_answers(|b| out.push(b));
            }
            let body = &server.io.rbuf[run + 5..run + len];
            let routed = if tag == b'S' {
                parameter_status(server, run + 5..run + len, &mut self.params, self.shared.pools.get(self.pool));
                Ok(Route::Forward)
            } else {
                if tag == b'E' && !server.role_unconfirmed && refuses_writes(body) {
                    // A write refused inside a transaction: the client's own read-only transaction, or a node
                    // that stopped taking writes (one that does not report its role: before PostgreSQL 14).
                    server.role_unconfirmed = true;
                }
                let (tracker, statements, out) = (&mut server.tracker, &mut server.statements, &mut server.io.out);
                self.router.server_message(tag, body, &mut ServerView { tracker, statements, out }, registry)
            };
            match routed {
                Err(failure) => break ServerProgress::Lost(failure),
                Ok(Route::Forward) => run += len,
                Ok(Route::Swallow) => {
                    server.io.forward(run, out);
                    run = 0;
                    let _ = server.io.rbuf.split_to(len);
                }
            }
            if tag == b'Z' {
                self.meter.ready_for_query(!server.tracker.nothing_owed(), tally);
                if server.tracker.may_release() {
                    break ServerProgress::Release;
                }
            }
        };
        server.io.forward_through(run, out, client_stream);
        if !matches!(progress, ServerProgress::Lost(_)) {
            server.tracker.take_answers(|b| out.push(b));
        }
        progress
    }
}

/// A ParameterStatus from the server, its body at `body` in the read buffer: both sides' parameters learn
/// the value, and a report that may say the node changed role is acted on (the caller forwards it).
fn parameter_status(server: &mut ServerConn, body: Range<usize>, client: &mut ClientParams, pool: &ServerPool) {
    let Ok((name, value)) = backend::parameter_status(&server.io.rbuf[body]) else { return };
    server.params.report(name, value);
    client.report(name, value);
    match name {
        // A demotion: no session can set this, so it is the node's role.
        "in_hot_standby" if value == "on" => {
            server.role = server.reported_role().or(server.role);
            pool.role_seen(server);
        }
        // A promotion, the client's own SET, or a reload that turned the node read-only: the server is
        // asked which when the transaction ends.
        "in_hot_standby" | "default_transaction_read_only" => server.role_unconfirmed = true,
        _ => {}
    }
}

/// Whether an ErrorResponse's body refuses a write as read-only (25006).
fn refuses_writes(body: &[u8]) -> bool {
    ErrorFields::parse(body).is_ok_and(|f| f.code == pgmux_proto::sqlstate::READ_ONLY_SQL_TRANSACTION)
}
