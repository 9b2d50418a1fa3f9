//! Running a transaction again on another server connection, when it provably never ran on the first: no
//! byte of it reached the server (the connection failed on the first write), or the server's very first
//! reply refused it as read-only (25006, or `cannot set transaction read-write mode during recovery`: both
//! raised before execution) — and in either case nothing has been sent to the client yet. Anything else is
//! ambiguous and gets an error instead (see `Router::server_lost`).
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

/// Whether a server's first reply says it refused the transaction as read-only before running anything.
pub(super) fn refused_as_read_only(error: &ErrorFields<'_>) -> bool {
    error.code == sqlstate::READ_ONLY_SQL_TRANSACTION
        || (error.code == sqlstate::FEATURE_NOT_SUPPORTED && error.message.contains("read-write mode during recovery"))
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
