//! Moving messages between the client and its server: what to do with each message, found by its tag and at
//! most one small field, and the one poll that drives both sockets.

use std::task::{Context, Poll};

use bytes::Bytes;

use pgmux_proto::backend::{self, ErrorFields};

use crate::tracker::Route;
use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::{Step, TxStatus, sqlstate};

use super::{End, Session, ready_for_query};
use crate::io::{MAX_QUEUED, ReadOutcome};
use crate::server::{SERVER_READ_CHUNK, ServerError, ServerFailure};

/// Something happened on a socket.
#[derive(Debug)]
pub(super) enum Event {
    /// Nothing happened on the sockets; look at the session's state again (shutdown began).
    Wake,
    Client(std::io::Result<ReadOutcome>),
    Server(std::io::Result<ReadOutcome>),
    ClientWriteFailed,
    ServerWriteFailed(std::io::Error),
}

/// What to do with a message that begins a unit while no server is linked.
pub(super) enum Verdict {
    Drop,
    /// Drop it and answer it with these bytes.
    Answer(Bytes),
    /// Get a server and go on.
    NeedServer,
}

/// What the server's messages led to.
pub(super) enum ServerProgress {
    Continue,
    /// `ReadyForQuery('I')` with nothing outstanding: the server can go back.
    Release,
    /// The server ended the session or broke the protocol.
    Lost(ServerFailure),
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
        if server_backlog < MAX_QUEUED
            && let Poll::Ready(r) = self.client.poll_read_compact(cx)
        {
            return Poll::Ready(Event::Client(r));
        }
        Poll::Pending
    }

    /// Acts on one socket event.
    pub(super) async fn handle(&mut self, event: Event) -> Result<(), End> {
        match event {
            Event::Wake | Event::Client(Ok(ReadOutcome::Data)) => Ok(()),
            Event::Client(Ok(ReadOutcome::Eof)) | Event::Client(Err(_)) | Event::ClientWriteFailed => {
                Err(End::ClientGone)
            }
            Event::Server(Ok(ReadOutcome::Data)) => match self.relay_server() {
                ServerProgress::Continue => Ok(()),
                ServerProgress::Release => {
                    self.release().await;
                    Ok(())
                }
                ServerProgress::Lost(failure) => self.server_lost(failure),
            },
            Event::Server(Ok(ReadOutcome::Eof)) => self.server_lost(ServerFailure::Closed),
            Event::Server(Err(e)) | Event::ServerWriteFailed(e) => self.server_lost(ServerFailure::Io(e)),
        }
    }

    /// Handles every whole message the client has sent: forwards, rewrites, drops or answers each, linking
    /// a server when a unit begins.
    pub(super) async fn relay_client(&mut self) -> Result<(), End> {
        // Bytes at the front of the read buffer already judged "forward as they are", not yet moved.
        let mut run = 0;
        loop {
            let step = self.client.framer.step(&self.client.rbuf[run..]);
            let (tag, len) = match step {
                Err(e) => {
                    self.forward_client(run);
                    return Err(End::Protocol(e));
                }
                Ok(Step::NeedMore { .. }) => break,
                Ok(Step::Stream { take, .. }) => {
                    // Only CopyData streams; without a server (a COPY that failed) it goes nowhere.
                    if self.server.is_some() && !self.skip_until_sync && !self.discard_until_sync {
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
            if !self.skip_until_sync
                && !self.discard_until_sync
                && !self.inspects(tag)
                && let Some(linked) = self.server.as_mut()
            {
                linked.conn().tracker.client_message(tag);
                run += len;
                continue;
            }
            self.forward_client(run);
            run = 0;
            let msg = self.client.rbuf.split_to(len).freeze();
            self.dispatch(tag, msg).await?;
        }
        self.forward_client(run);
        if let Some(linked) = self.server.as_mut() {
            let out = &mut self.client.out;
            linked.conn().tracker.take_answers(|b| out.push(b));
        }
        Ok(())
    }

    /// Moves `n` judged bytes to the server's write queue.
    fn forward_client(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        match self.server.as_mut() {
            Some(linked) => self.client.forward(n, &mut linked.conn().io.out),
            None => unreachable!("client bytes are judged forward only while a server is linked"),
        }
    }

    /// Messages pgmux looks inside (statement names, SQL) rather than passing on unread.
    fn inspects(&self, tag: u8) -> bool {
        match tag {
            b'Q' | b'D' | b'X' => true,
            b'P' | b'B' | b'C' => self.tracking(),
            _ => false,
        }
    }

    /// One message, taken out of the read buffer, that needs more than forwarding.
    async fn dispatch(&mut self, tag: u8, msg: Bytes) -> Result<(), End> {
        if tag == b'X' {
            // With a server linked, `finish` cleans it up.
            return Err(End::ClientGone);
        }
        if self.skip_until_sync {
            if tag == b'S' {
                self.skip_until_sync = false;
                self.client.out.push(ready_for_query(TxStatus::Idle));
            }
            return Ok(());
        }
        if self.discard_until_sync {
            if tag != b'S' {
                return Ok(());
            }
            self.discard_until_sync = false;
        }
        if self.server.is_none() {
            match self.unlinked(tag, &msg) {
                Verdict::Drop => return Ok(()),
                Verdict::Answer(reply) => {
                    self.client.out.push(reply);
                    return Ok(());
                }
                Verdict::NeedServer => {
                    // Boxed: linking is a large future, and an idle session should not carry its space.
                    if let Some(Verdict::Answer(reply)) = Box::pin(self.link(tag)).await? {
                        self.client.out.push(reply);
                        return Ok(());
                    }
                }
            }
        }
        self.route_linked(tag, msg);
        Ok(())
    }

    /// A message that begins a unit while no server is linked: answered here when it needs no server.
    fn unlinked(&mut self, tag: u8, msg: &[u8]) -> Verdict {
        if self.lost_transaction && !matches!(tag, b'd' | b'c' | b'f') {
            self.lost_transaction = false;
            let err = ErrorMessage::error(
                sqlstate::CONNECTION_FAILURE,
                "the server connection was lost while this client was in a transaction; \
                 the transaction was rolled back",
            )
            .to_bytes();
            return self.answer_unit(tag, err);
        }
        match tag {
            // COPY messages after a COPY that already failed: PostgreSQL ignores them too.
            b'd' | b'c' | b'f' => Verdict::Drop,
            // A Sync with nothing before it, a Flush with nothing to flush: no server needed.
            b'S' => Verdict::Answer(ready_for_query(TxStatus::Idle)),
            b'H' => Verdict::Drop,
            _ => self.answer_without_server(tag, msg).unwrap_or(Verdict::NeedServer),
        }
    }

    /// Answers the unit that `tag` begins with `error`: a Query, FunctionCall or Sync gets its
    /// ReadyForQuery at once; an extended-protocol unit gets it at its Sync.
    pub(super) fn answer_unit(&mut self, tag: u8, error: Bytes) -> Verdict {
        match tag {
            b'Q' | b'F' | b'S' => {
                let mut reply = bytes::BytesMut::from(&error[..]);
                reply.extend_from_slice(&ready_for_query(TxStatus::Idle));
                Verdict::Answer(reply.freeze())
            }
            _ => {
                self.skip_until_sync = true;
                Verdict::Answer(error)
            }
        }
    }

    /// Handles every whole message (and streamed piece) the server has sent: forwards or swallows each as
    /// the tracker says, puts pgmux's own answers in their places, and notes what changes session state.
    pub(super) fn relay_server(&mut self) -> ServerProgress {
        let Some(linked) = self.server.as_mut() else {
            return ServerProgress::Continue;
        };
        let server = linked.conn();
        let out = &mut self.client.out;
        let mut notes = Vec::new();
        let mut stale_plan = false;
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
            let routed = match tag {
                b'Z' => match backend::ready_for_query(body) {
                    Ok(status) => server.tracker.server_ready(status, |n| notes.push(n)).map_err(ServerFailure::from),
                    Err(e) => Err(e.into()),
                },
                b'E' => match ErrorFields::parse(body) {
                    Ok(f) if f.is_fatal() => Err(ServerFailure::Fatal(Box::new(ServerError::from_fields(&f)))),
                    Ok(f) => {
                        stale_plan |= f.code == sqlstate::FEATURE_NOT_SUPPORTED
                            && f.message.contains("cached plan must not change result type");
                        server.tracker.server_message(tag, |n| notes.push(n)).map_err(ServerFailure::from)
                    }
                    Err(e) => Err(e.into()),
                },
                b'S' => {
                    if let Ok((name, value)) = backend::parameter_status(body) {
                        server.params.report(name, value);
                        self.params.report(name, value);
                    }
                    Ok(Route::Forward)
                }
                b'C' => {
                    if let Ok(command) = backend::command_tag(body) {
                        self.state.command_completed(command, &mut server.statements);
                    }
                    server.tracker.server_message(tag, |n| notes.push(n)).map_err(ServerFailure::from)
                }
                _ => server.tracker.server_message(tag, |n| notes.push(n)).map_err(ServerFailure::from),
            };
            match routed {
                Err(reason) => break ServerProgress::Lost(reason),
                Ok(Route::Forward) => run += len,
                Ok(Route::Swallow) => {
                    server.io.forward(run, out);
                    run = 0;
                    let _ = server.io.rbuf.split_to(len);
                }
            }
            if tag == b'Z' && server.tracker.may_release() {
                break ServerProgress::Release;
            }
        };
        server.io.forward(run, out);
        if !matches!(progress, ServerProgress::Lost(_)) {
            server.tracker.take_answers(|b| out.push(b));
        }
        self.undo_all(notes, stale_plan);
        progress
    }
}
