//! What the server owes, in order, and when a server connection may leave its client. [`TxTracker`] answers
//! from the messages alone.
//!
//! Every message that gets a reply puts an entry in a queue: the client's own (forwarded), pgmux's own
//! (an injected Parse whose ParseComplete the client must not see, or one sent to fail), or ones pgmux
//! answers itself (a Parse of a statement the server already has, a Close of a client's statement name),
//! whose answer goes out exactly when its turn comes. Server messages pop the entries they complete; an ErrorResponse in the
//! extended protocol also drops every entry up to the next Sync, as the server skips those messages.
//!
//! A server connection may go back to the pool only when the server has said `ReadyForQuery('I')`, nothing
//! is owed, and the client has not started another extended-protocol unit (Parse, Bind, Describe, Execute,
//! Close, Flush) without a Sync. That covers pipelines, Flush-based prepares, portals read in pieces and
//! COPY, because each of them keeps a reply owed or a unit open.
//!
//! One wrinkle: a server in COPY FROM STDIN ignores Sync and Flush until CopyDone or CopyFail. Drivers send
//! Bind, Execute, Sync for a COPY before they know it is one, so when CopyInResponse arrives for an
//! Execute, the Syncs sent after it will never be answered: the unit stays open until the Sync that follows
//! the client's CopyDone.

use std::collections::VecDeque;

use bytes::Bytes;
use pgmux_proto::TxStatus;

/// The kind of reply a message is owed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// ParseComplete.
    Parse,
    /// BindComplete.
    Bind,
    /// ParameterDescription, then RowDescription or NoData.
    DescribeStatement,
    /// RowDescription or NoData.
    DescribePortal,
    /// Rows, then CommandComplete, EmptyQueryResponse or PortalSuspended (or a COPY in between).
    Execute,
    /// CloseComplete.
    Close,
    /// ReadyForQuery.
    Sync,
    /// Anything, up to ReadyForQuery.
    Query,
    /// FunctionCallResponse, then ReadyForQuery.
    FunctionCall,
}

impl Reply {
    /// The reply a client message is owed, if any.
    pub fn for_client_message(tag: u8) -> Option<Reply> {
        Some(match tag {
            b'P' => Reply::Parse,
            b'B' => Reply::Bind,
            b'E' => Reply::Execute,
            b'C' => Reply::Close,
            b'S' => Reply::Sync,
            b'Q' => Reply::Query,
            b'F' => Reply::FunctionCall,
            _ => return None,
        })
    }

    /// Whether `tag` from the server is the last message of this reply.
    fn completed_by(self, tag: u8) -> bool {
        match self {
            Reply::Parse => tag == b'1',
            Reply::Bind => tag == b'2',
            Reply::DescribeStatement | Reply::DescribePortal => matches!(tag, b'T' | b'n'),
            Reply::Execute => matches!(tag, b'C' | b'I' | b's'),
            Reply::Close => tag == b'3',
            Reply::Sync | Reply::Query | Reply::FunctionCall => tag == b'Z',
        }
    }

    /// Answered by a ReadyForQuery.
    fn ends_unit(self) -> bool {
        matches!(self, Reply::Sync | Reply::Query | Reply::FunctionCall)
    }

    /// An ErrorResponse for it makes the server skip to the next Sync.
    fn extended(self) -> bool {
        !self.ends_unit()
    }
}

/// What becomes of a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    /// The client asked and sees it.
    Forward,
    /// pgmux asked (an injected Parse or Close); the client must not see it. Errors are still forwarded.
    Swallow,
    /// The server was never asked: pgmux answers with these bytes when the reply's turn comes.
    Answer(Bytes),
    /// pgmux asked for an error on purpose (so that the server fails the transaction and skips to the Sync, as
    /// it would have for a client message pgmux answered with an error itself): nothing reaches the client.
    Fail,
}

impl Fate {
    /// Whether pgmux sent the message on its own account (the client did not ask for its reply).
    fn pgmux_own(&self) -> bool {
        matches!(self, Fate::Swallow | Fate::Fail)
    }
}

/// What to do with one server message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Pass it to the client.
    Forward,
    /// Drop it.
    Swallow,
}

/// The server sent something no request explains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("server sent message {:?} with no request owed it", *.0 as char)]
pub struct Unexpected(pub u8);

#[derive(Debug)]
struct Owed<N> {
    reply: Reply,
    fate: Fate,
    /// What the owner must undo if the message fails or is skipped.
    note: Option<N>,
}

/// The outstanding requests of one client's link to one server. `N` is a note the owner attaches to an
/// entry and gets back if that entry fails or is skipped (the proxy uses it to undo statement bookkeeping).
#[derive(Debug)]
pub struct TxTracker<N = ()> {
    owed: VecDeque<Owed<N>>,
    /// Entries answered by ReadyForQuery.
    syncs: u32,
    /// The client sent extended-protocol messages after its last Sync.
    open_unit: bool,
    /// Status from the last ReadyForQuery.
    status: TxStatus,
    /// The server is in COPY FROM STDIN and waits for the client's data.
    copy_in: bool,
    /// The last simple Query sent while earlier ones were all answered, and whether a transaction block was
    /// open then: whether it may commit is read from its text only if the server is lost before it is
    /// answered (see `Router::note_run`). Kept here, with the server connection, not with each client;
    /// boxed, once per connection and then reused (an empty message is none), because a connection's
    /// tracker is part of every future that opens or checks one out, whose size is copied.
    unread_query: Option<Box<(Bytes, bool)>>,
}

impl<N> Default for TxTracker<N> {
    fn default() -> Self {
        TxTracker {
            owed: VecDeque::new(),
            syncs: 0,
            open_unit: false,
            status: TxStatus::Idle,
            copy_in: false,
            unread_query: None,
        }
    }
}

impl<N> TxTracker<N> {
    /// Notes a client message forwarded to the server, whose reply the client sees.
    pub fn client_message(&mut self, tag: u8) {
        match tag {
            // A server in COPY FROM STDIN ignores Sync and Flush.
            b'S' | b'H' if self.copy_in => {}
            b'H' => self.open_unit = true,
            // CopyDone / CopyFail end the client's part of a COPY that a Query or Execute started.
            b'c' | b'f' => self.copy_in = false,
            b'D' => {}
            _ => {
                if let Some(reply) = Reply::for_client_message(tag) {
                    self.owe(reply, Fate::Forward, None);
                }
            }
        }
    }

    /// Notes a client Describe forwarded to the server: its reply depends on what it describes (`b'S'`, a
    /// statement, or `b'P'`, a portal, as the message says).
    pub fn client_describe(&mut self, kind: u8) {
        let reply = if kind == b'S' { Reply::DescribeStatement } else { Reply::DescribePortal };
        self.owe(reply, Fate::Forward, None);
    }

    /// Notes a reply owed with a given fate: pgmux's own messages, and client messages pgmux answers.
    pub fn owe(&mut self, reply: Reply, fate: Fate, note: Option<N>) {
        if reply.ends_unit() {
            self.syncs += 1;
            if !fate.pgmux_own() {
                self.open_unit = false;
            }
        } else if !fate.pgmux_own() {
            self.open_unit = true;
        }
        self.owed.push_back(Owed { reply, fate, note });
    }

    /// Emits the answers whose turn has come (those at the head of the queue), in order.
    pub fn take_answers(&mut self, mut emit: impl FnMut(Bytes)) {
        while let Some(Owed { fate: Fate::Answer(_), .. }) = self.owed.front() {
            if let Some(Owed { fate: Fate::Answer(bytes), reply, .. }) = self.owed.pop_front() {
                if reply.ends_unit() {
                    self.syncs -= 1;
                }
                emit(bytes);
            }
        }
    }

    /// True if an answer is due now.
    pub fn answer_due(&self) -> bool {
        matches!(self.owed.front(), Some(Owed { fate: Fate::Answer(_), .. }))
    }

    /// Routes one server message other than ReadyForQuery. Answers due before it must have been taken
    /// (see [`take_answers`](Self::take_answers)). Entries it fails or makes the server skip come back
    /// through `undone`.
    pub fn server_message(&mut self, tag: u8, mut undone: impl FnMut(N)) -> Result<Route, Unexpected> {
        debug_assert!(!self.answer_due(), "answers due must be taken before the next server message");
        // Asynchronous messages belong to no request.
        if matches!(tag, b'N' | b'A' | b'S') {
            return Ok(Route::Forward);
        }
        let head = self.owed.front().ok_or(Unexpected(tag))?;
        let route = match head.fate {
            Fate::Fail => Route::Swallow,
            Fate::Swallow if tag != b'E' => Route::Swallow,
            _ => Route::Forward,
        };
        match tag {
            b'E' => {
                self.copy_in = false;
                if head.reply.extended() {
                    self.skip_to_unit_end(&mut undone);
                }
            }
            b'G' => {
                self.copy_in = true;
                if head.reply == Reply::Execute {
                    // The Syncs sent after this Execute land in copy mode and are ignored.
                    let mut dropped = 0;
                    self.owed.retain(|o| {
                        let sync = o.reply == Reply::Sync;
                        dropped += u32::from(sync);
                        !sync
                    });
                    self.syncs -= dropped;
                    self.open_unit = true;
                }
            }
            tag if head.reply.completed_by(tag) && !head.reply.ends_unit() => {
                self.owed.pop_front();
            }
            // Another request's final message while this one is at the head: the streams are out of step.
            b'1' | b'2' | b'3' | b'T' | b'n' | b'C' | b'I' | b's' if head.reply.extended() => {
                return Err(Unexpected(tag));
            }
            _ => {}
        }
        Ok(route)
    }

    /// Takes the note out of the entry at the head if `tag` completes it: a Describe's note says what to learn
    /// from its reply. Call before [`server_message`](Self::server_message) routes `tag`; the entry completes
    /// with it, so nothing of it can be undone any more.
    pub fn take_completed_note(&mut self, tag: u8) -> Option<N> {
        let head = self.owed.front_mut()?;
        if head.reply.completed_by(tag) && !head.reply.ends_unit() { head.note.take() } else { None }
    }

    /// Drops the entries before the next one a ReadyForQuery answers, handing back their notes: after an
    /// error the server skips them, and at a ReadyForQuery they were skipped.
    fn skip_to_unit_end(&mut self, undone: &mut impl FnMut(N)) {
        while self.owed.front().is_some_and(|o| !o.reply.ends_unit()) {
            if let Some(Owed { note: Some(note), .. }) = self.owed.pop_front() {
                undone(note);
            }
        }
    }

    /// Notes a ReadyForQuery; routes it like [`server_message`](Self::server_message).
    pub fn server_ready(&mut self, status: TxStatus, mut undone: impl FnMut(N)) -> Result<Route, Unexpected> {
        // Entries still owed before the unit's end were skipped by the server (after an error in a simple
        // Query or FunctionCall nothing is skipped; their entries end at ReadyForQuery themselves).
        self.skip_to_unit_end(&mut undone);
        let head = self.owed.pop_front().ok_or(Unexpected(b'Z'))?;
        self.syncs -= 1;
        self.status = status;
        self.copy_in = false;
        Ok(if head.fate == Fate::Swallow { Route::Swallow } else { Route::Forward })
    }

    /// True when the server connection can be given back: idle, nothing owed, no unit open.
    pub fn may_release(&self) -> bool {
        self.owed.is_empty() && !self.open_unit && self.status == TxStatus::Idle
    }

    /// ReadyForQuery replies the server still owes.
    pub fn pending(&self) -> u32 {
        self.syncs
    }

    /// Whether nothing at all is owed.
    pub fn nothing_owed(&self) -> bool {
        self.owed.is_empty()
    }

    /// Whether the client has an extended-protocol unit without a Sync yet.
    pub fn unit_open(&self) -> bool {
        self.open_unit
    }

    /// The status of the last ReadyForQuery.
    pub fn status(&self) -> TxStatus {
        self.status
    }

    /// Whether the server waits for COPY data from the client.
    pub fn copy_in(&self) -> bool {
        self.copy_in
    }

    /// Forgets everything owed (the connection is gone), returning the notes to undo.
    /// Keeps `query` (a whole Query message, sent in a transaction block or not) to be read only if needed;
    /// returns the one kept before it, which the caller reads now.
    pub fn keep_unread_query(&mut self, query: Bytes, in_transaction: bool) -> Option<(Bytes, bool)> {
        match &mut self.unread_query {
            Some(slot) => Some(std::mem::replace(&mut **slot, (query, in_transaction))).filter(|(q, _)| !q.is_empty()),
            None => {
                self.unread_query = Some(Box::new((query, in_transaction)));
                None
            }
        }
    }

    /// The kept Query, if any, now to be read.
    pub fn take_unread_query(&mut self) -> Option<(Bytes, bool)> {
        let slot = self.unread_query.as_mut()?;
        Some(std::mem::take(&mut **slot)).filter(|(q, _)| !q.is_empty())
    }

    pub fn abandon(&mut self) -> Vec<N> {
        let notes = self.owed.drain(..).filter_map(|o| o.note).collect();
        self.syncs = 0;
        notes
    }
}

#[cfg(test)]
mod tests;
