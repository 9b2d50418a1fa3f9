//! The linked server as the router sees it: what it owes, what it has prepared, and its write queue. Every
//! method queues a message and its tracker entry together, so the two cannot drift apart.

use bytes::{Bytes, BytesMut};
use pgmux_proto::encode;

use crate::net::io::WriteQueue;
use crate::protocol::statements::{ServerStatements, Undo};
use crate::protocol::tracker::{Fate, Reply, TxTracker};

/// The linked server, as the router sees it: what it owes, what it has prepared, and its write queue.
#[derive(Debug)]
pub(crate) struct ServerView<'a> {
    pub(crate) tracker: &'a mut TxTracker<Undo>,
    pub(crate) statements: &'a mut ServerStatements,
    pub(crate) out: &'a mut WriteQueue,
}

impl ServerView<'_> {
    /// Queues a client message as it is; the server owes it the usual reply.
    pub(crate) fn forward(&mut self, tag: u8, msg: Bytes) {
        self.tracker.client_message(tag);
        self.out.push(msg);
    }

    /// Queues a client Describe as it is (its reply depends on what it describes).
    pub(super) fn forward_describe(&mut self, kind: u8, msg: Bytes) {
        self.tracker.client_describe(kind);
        self.out.push(msg);
    }

    /// Queues a message (the client's, rewritten, or pgmux's own) with the reply the server owes for it.
    pub(super) fn send(&mut self, msg: Bytes, reply: Reply, fate: Fate, note: Option<Undo>) {
        self.tracker.owe(reply, fate, note);
        self.out.push(msg);
    }

    /// Answers a client message in the server's stead, in its turn: nothing goes to the server.
    pub(super) fn answer(&mut self, reply: Reply, bytes: Bytes, note: Option<Undo>) {
        self.tracker.owe(reply, Fate::Answer(bytes), note);
    }

    /// Queues a Flush, so that the server sends what it owes without waiting for a Sync. pgmux flushes only
    /// inside a client's unit, which the tracker notes as open.
    pub(super) fn flush(&mut self) {
        self.tracker.client_message(b'H');
        self.out.push(Bytes::from_static(b"H\0\0\0\x04"));
    }

    /// Queues a Parse that cannot succeed and whose error the client never sees: the server then fails the
    /// transaction and skips to the Sync, as it would have for the client message pgmux refused itself. Its
    /// text is what the server's log shows after the syntax error.
    pub(super) fn fail(&mut self) {
        const QUERY: &[u8] = b"pgmux: cached plan must not change result type\0\0\0";
        let mut parse = BytesMut::with_capacity(QUERY.len() + 20);
        encode::parse_with_name(&mut parse, "pgmux_failed", QUERY);
        self.tracker.owe(Reply::Parse, Fate::Fail, None);
        self.out.push(parse.freeze());
    }
}
