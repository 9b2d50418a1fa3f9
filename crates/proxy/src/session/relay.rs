//! Moving messages between the client and its server: what to do with each message, found by its tag and at
//! most one small field, and the one poll that drives both sockets.

use std::task::{Context, Poll};

use pgmux_proto::backend::{self, ErrorFields};
use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::{Step, TxStatus, sqlstate};

use super::{End, Session, ready_for_query};
use crate::io::{MAX_QUEUED, ReadOutcome};
use crate::server::SERVER_READ_CHUNK;

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

/// What to do with one client message.
pub(super) enum Verdict {
    Forward,
    Drop,
    /// Drop it and answer it with these bytes.
    Answer(bytes::Bytes),
    /// It starts a unit and no server is linked: get one, then look again.
    NeedServer,
    /// Terminate: the session ends.
    Terminate,
}

/// What the server's messages led to.
pub(super) enum ServerProgress {
    Continue,
    /// `ReadyForQuery('I')` with nothing outstanding: the server can go back.
    Release,
    /// The server ended the session or broke the protocol.
    Lost(String),
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
                ServerProgress::Lost(reason) => self.server_lost(&reason),
            },
            Event::Server(Ok(ReadOutcome::Eof)) => self.server_lost("the server closed the connection"),
            Event::Server(Err(e)) | Event::ServerWriteFailed(e) => self.server_lost(&e.to_string()),
        }
    }

    /// Handles every whole message the client has sent: forwards, drops or answers each, linking a server
    /// when a unit begins.
    pub(super) async fn relay_client(&mut self) -> Result<(), End> {
        // Bytes at the front of the read buffer already judged "forward", not yet moved.
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
                    if self.server.is_some() && !self.skip_until_sync {
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
            let mut verdict = self.judge_client(tag);
            if let Verdict::NeedServer = verdict {
                debug_assert_eq!(run, 0, "nothing is forwarded without a server");
                // Boxed: linking is a large future, and an idle session should not carry its space.
                verdict = Box::pin(self.link(tag)).await?.unwrap_or(Verdict::Forward);
            }
            match verdict {
                Verdict::Forward => {
                    self.tracker.client_message(tag);
                    run += len;
                }
                Verdict::Drop => {
                    self.forward_client(run);
                    run = 0;
                    let _ = self.client.rbuf.split_to(len);
                }
                Verdict::Answer(reply) => {
                    self.forward_client(run);
                    run = 0;
                    let _ = self.client.rbuf.split_to(len);
                    self.client.out.push(reply);
                }
                Verdict::NeedServer => unreachable!("linking settles the verdict"),
                Verdict::Terminate => {
                    self.forward_client(run);
                    let _ = self.client.rbuf.split_to(len);
                    return Err(End::ClientGone);
                }
            }
        }
        self.forward_client(run);
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

    fn judge_client(&mut self, tag: u8) -> Verdict {
        if tag == b'X' {
            // With a server linked, `finish` cleans it up.
            return Verdict::Terminate;
        }
        if self.skip_until_sync {
            if tag == b'S' {
                self.skip_until_sync = false;
                return Verdict::Answer(ready_for_query(TxStatus::Idle));
            }
            return Verdict::Drop;
        }
        if self.server.is_some() {
            return Verdict::Forward;
        }
        match tag {
            // COPY messages after a COPY that already failed: PostgreSQL ignores them too.
            b'd' | b'c' | b'f' => Verdict::Drop,
            _ if self.lost_transaction => {
                self.lost_transaction = false;
                let err = ErrorMessage::error(
                    sqlstate::CONNECTION_FAILURE,
                    "the server connection was lost while this client was in a transaction; \
                     the transaction was rolled back",
                )
                .to_bytes();
                self.answer_unit(tag, err)
            }
            // A Sync with nothing before it needs no server.
            b'S' => Verdict::Answer(ready_for_query(TxStatus::Idle)),
            _ => Verdict::NeedServer,
        }
    }

    /// Answers the unit that `tag` begins with `error`: a Query, FunctionCall or Sync gets its
    /// ReadyForQuery at once; an extended-protocol unit gets it at its Sync.
    pub(super) fn answer_unit(&mut self, tag: u8, error: bytes::Bytes) -> Verdict {
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

    /// Handles every whole message (and streamed piece) the server has sent.
    pub(super) fn relay_server(&mut self) -> ServerProgress {
        let Some(linked) = self.server.as_mut() else {
            return ServerProgress::Continue;
        };
        let server = linked.conn();
        let mut run = 0;
        loop {
            let (tag, len) = match server.io.framer.step(&server.io.rbuf[run..]) {
                Err(e) => {
                    server.io.forward(run, &mut self.client.out);
                    return ServerProgress::Lost(e.to_string());
                }
                Ok(Step::NeedMore { .. }) => break,
                Ok(Step::Stream { take, .. }) => {
                    run += take;
                    continue;
                }
                Ok(Step::Message { tag, len }) => (tag, len),
            };
            let body = &server.io.rbuf[run + 5..run + len];
            match tag {
                b'Z' => {
                    let status = match backend::ready_for_query(body) {
                        Ok(s) => s,
                        Err(e) => return lost(server, run, &mut self.client.out, e.to_string()),
                    };
                    if let Err(e) = self.tracker.server_ready(status) {
                        return lost(server, run, &mut self.client.out, e.to_string());
                    }
                    run += len;
                    if self.tracker.may_release() {
                        server.io.forward(run, &mut self.client.out);
                        return ServerProgress::Release;
                    }
                }
                b'E' => {
                    let fields = match ErrorFields::parse(body) {
                        Ok(f) => f,
                        Err(e) => return lost(server, run, &mut self.client.out, e.to_string()),
                    };
                    if fields.is_fatal() {
                        let reason = format!("{} (SQLSTATE {})", fields.message, fields.code);
                        return lost(server, run, &mut self.client.out, reason);
                    }
                    self.tracker.server_message(tag);
                    run += len;
                }
                b'S' => {
                    if let Ok((name, value)) = backend::parameter_status(body) {
                        server.params.report(name, value);
                        self.params.report(name, value);
                    }
                    run += len;
                }
                _ => {
                    self.tracker.server_message(tag);
                    run += len;
                }
            }
        }
        server.io.forward(run, &mut self.client.out);
        ServerProgress::Continue
    }
}

/// Forwards what came before a fatal message, and reports the server as lost.
fn lost(
    server: &mut crate::server::ServerConn,
    run: usize,
    client_out: &mut crate::io::WriteQueue,
    reason: String,
) -> ServerProgress {
    server.io.forward(run, client_out);
    ServerProgress::Lost(reason)
}
