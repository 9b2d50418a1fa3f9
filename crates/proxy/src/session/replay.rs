//! Running a transaction again on another server connection, when it provably never ran on the first: no
//! byte of it reached the server (the connection failed on the first write); the server's very first
//! reply refused it as read-only (25006, or `cannot set transaction read-write mode during recovery`: both
//! raised before execution); or the server's very first reply ended the session from outside (57P01
//! `pg_terminate_backend` or a shutdown, 57P02, 57P05 `idle_session_timeout`) and its close was a reset,
//! which a server's exit sends only with bytes of the client's unread (an idle session ended as the
//! transaction came: PostgreSQL reads none of it once its interrupt is taken), or which its kernel sends
//! after the end of file when the transaction came after the server had closed (pgmux then finds the
//! reset left on its socket: `Stream::reset_after_close`; over loopback it is there at once, across a
//! network a round trip later, and until then the close reads as a plain one). In every case nothing has
//! been sent to the client yet. Anything else is ambiguous and gets an error instead (see
//! `Router::server_lost`): a FATAL with a plain close may come from a transaction the server read and
//! began. One corner is left in the third case: a transaction that reached the server in two writes, ended
//! while its very first statement ran (nothing answered yet, the second write unread). Its work was rolled
//! back with the session, so running it again loses and doubles nothing of the database's, but an effect
//! outside any transaction (a sequence's `nextval`, a call to another system) would happen twice.
//!
//! From the moment a transaction links a server until its first reply, the session keeps the client's
//! messages (cheap clones of the bytes it forwarded). To replay, it undoes the router's bookkeeping for the
//! lost link, puts the messages back at the front of the client's read buffer and lets the relay loop take
//! them again: they link a new server (waiting, while the database is away, as any transaction would) and
//! are routed for that server.

use bytes::{Bytes, BytesMut};
use pgmux_proto::backend::ErrorFields;
use pgmux_proto::sqlstate;

use super::{End, Linked, Session};
use crate::pools::Distrust;
use crate::protocol::failure::ServerError;

/// Most bytes kept for a replay: a transaction whose first messages are larger is not replayed.
const MAX_KEPT: usize = 1 << 20;

/// How often one transaction may be replayed before its client gets the error.
const MAX_REPLAYS: u8 = 3;

/// The current transaction's client messages, while it may still be replayed.
#[derive(Debug, Default)]
pub(super) struct Replay {
    /// Kept while a replay is possible.
    open: bool,
    /// Replays of this transaction so far.
    replays: u8,
    /// What had been queued for the client when the link was made: anything more means the client has
    /// been told something, and the transaction can no longer be run again unseen.
    client_mark: u64,
    /// The messages, boxed: an idle client keeps none, and should not carry their space.
    kept: Option<Box<Kept>>,
}

/// The messages kept for a replay.
#[derive(Debug)]
struct Kept {
    /// The common case, one chunk, without a second allocation.
    first: Bytes,
    rest: Vec<Bytes>,
    bytes: usize,
}

impl Replay {
    /// A transaction linked a server: keep its messages from now on.
    pub(super) fn open(&mut self, client_mark: u64) {
        self.close();
        self.open = true;
        self.client_mark = client_mark;
    }

    /// Keeps a copy of bytes forwarded to the server (a reference, not a copy of the bytes).
    pub(super) fn record(&mut self, bytes: &Bytes) {
        if !self.open {
            return;
        }
        let total = self.kept.as_ref().map_or(0, |k| k.bytes) + bytes.len();
        if total > MAX_KEPT {
            return self.close();
        }
        match &mut self.kept {
            None => self.kept = Some(Box::new(Kept { first: bytes.clone(), rest: Vec::new(), bytes: total })),
            Some(kept) => {
                kept.bytes = total;
                kept.rest.push(bytes.clone());
            }
        }
    }

    /// The transaction can no longer be replayed (the server answered, the client was told something, a
    /// COPY streamed): let go of the bytes.
    pub(super) fn close(&mut self) {
        self.open = false;
        self.kept = None;
    }

    /// The transaction ended: the next one starts with a clean count.
    pub(super) fn finish(&mut self) {
        self.close();
        self.replays = 0;
    }

    pub(super) fn is_open(&self) -> bool {
        self.open
    }

    /// The kept messages, in order, for the client's read buffer; counts a replay. `None` if the
    /// transaction may not be replayed again.
    fn take(&mut self, client_queued: u64) -> Option<BytesMut> {
        if !self.open || client_queued != self.client_mark || self.replays >= MAX_REPLAYS {
            return None;
        }
        let kept = self.kept.take();
        let mut bytes = BytesMut::with_capacity(kept.as_ref().map_or(0, |k| k.bytes));
        if let Some(kept) = kept {
            bytes.extend_from_slice(&kept.first);
            for chunk in &kept.rest {
                bytes.extend_from_slice(chunk);
            }
        }
        self.replays += 1;
        self.close();
        Some(bytes)
    }
}

/// Whether a FATAL is one a server sends to a session it ends from outside, whatever the session was doing:
/// `pg_terminate_backend` or a shutdown (57P01), another process's crash (57P02), `idle_session_timeout`
/// (57P05). Arriving before any answer, with the transaction's bytes left unread (the server's close is then
/// a reset), it says the transaction never ran there.
pub(super) fn ended_unasked(error: &ErrorFields<'_>) -> bool {
    matches!(error.code, sqlstate::ADMIN_SHUTDOWN | sqlstate::CRASH_SHUTDOWN | sqlstate::IDLE_SESSION_TIMEOUT)
}

/// Whether a server's first reply says it refused the transaction as read-only before running anything.
pub(super) fn refused_as_read_only(error: &ErrorFields<'_>) -> bool {
    error.code == sqlstate::READ_ONLY_SQL_TRANSACTION
        || (error.code == sqlstate::FEATURE_NOT_SUPPORTED && error.message.contains("read-write mode during recovery"))
}

/// What a transaction's first reply says of it, for a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FirstReply {
    /// An answer: the transaction ran, or may have.
    Other,
    /// A refusal as read-only, raised before anything ran.
    ReadOnly,
    /// The server ended the session (see [`ended_unasked`]) and sent nothing after: whether it
    /// read the transaction first, the socket's end says.
    Ended,
}

/// What the first message in `rbuf` says (see [`FirstReply`]); `None` until it is there whole.
pub(super) fn first_reply(rbuf: &[u8]) -> Option<FirstReply> {
    let header = rbuf.get(..5)?;
    if header[0] != b'E' {
        return Some(FirstReply::Other);
    }
    let raw = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if raw < 4 {
        return Some(FirstReply::Other);
    }
    let body = rbuf.get(5..raw + 1)?;
    let Ok(fields) = ErrorFields::parse(body) else { return Some(FirstReply::Other) };
    Some(if fields.is_fatal() {
        if rbuf.len() == raw + 1 && ended_unasked(&fields) { FirstReply::Ended } else { FirstReply::Other }
    } else if refused_as_read_only(&fields) {
        FirstReply::ReadOnly
    } else {
        FirstReply::Other
    })
}

/// The error at the front of `rbuf`, when [`first_reply`] found it whole.
pub(super) fn first_error(rbuf: &[u8]) -> Option<ServerError> {
    let raw = u32::from_be_bytes(rbuf.get(1..5)?.try_into().ok()?) as usize;
    ErrorFields::parse(rbuf.get(5..raw + 1)?).ok().map(|f| ServerError::from_fields(&f))
}

impl Session {
    /// Runs the transaction again on another server connection if it never ran on `linked` (the caller
    /// knows why). Returns the link back when it may not be replayed.
    pub(super) fn try_replay(&mut self, linked: Box<Linked>, why: &str) -> Result<(), Box<Linked>> {
        let queued = self.client.out.queued_total();
        let Some(messages) = self.replay.take(queued) else { return Err(linked) };
        let mut lease = linked.take();
        let tracker = std::mem::take(&mut lease.tracker);
        self.router.rewind(tracker, &self.shared.statements);
        self.cancel.clear();
        tracing::info!(server_id = lease.id, node = %lease.addr, why, "transaction runs again on another server connection");
        self.shared.pools.get(self.pool).retire(lease.discard());
        let mut rbuf = messages;
        rbuf.extend_from_slice(&self.client.rbuf);
        self.client.rbuf = rbuf;
        Ok(())
    }

    /// The server's first reply to this transaction refused it as read-only: the node is demoted or being
    /// switched away from. It gets no more work, and the transaction runs again elsewhere.
    pub(super) fn refused_read_only(&mut self) -> Result<(), End> {
        let Some(linked) = self.server.take() else { return Ok(()) };
        let node = linked.addr();
        self.shared.pools.get(self.pool).distrust(
            node,
            Distrust::Stale,
            "a transaction was refused as read-only (25006)",
        );
        match self.try_replay(linked, "the server refused it as read-only") {
            Ok(()) => Ok(()),
            Err(linked) => {
                // Replayed too often: the client gets the server's own answer.
                self.server = Some(linked);
                self.replay.close();
                Ok(())
            }
        }
    }
}
