//! When may a server connection leave its client? [`TxTracker`] answers from the messages alone.
//!
//! A server connection may go back to the pool only when the server has said `ReadyForQuery('I')` *and*
//! the client has nothing in flight: every Sync, Query and FunctionCall it sent has been answered, and it
//! has not started another extended-protocol unit (Parse, Bind, Describe, Execute, Close, Flush) that has no
//! Sync yet. That one rule covers pipelines, Flush-based prepares, portals read in pieces and COPY, because
//! each of them keeps either a reply or an open unit outstanding.
//!
//! One wrinkle: a server in COPY FROM STDIN ignores Sync and Flush until CopyDone or CopyFail. Drivers send
//! Bind, Execute, Sync for a COPY before they know it is one, so when CopyInResponse arrives for an
//! extended-protocol unit, the Syncs sent so far will never be answered: the unit stays open until the
//! Sync that follows the client's CopyDone.

use pgmux_proto::TxStatus;

/// The server sent a `ReadyForQuery` nobody asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("server sent ReadyForQuery with no request outstanding")]
pub struct UnexpectedReady;

/// Transaction and request tracking for one client's link to one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxTracker {
    /// `ReadyForQuery` replies the server still owes.
    pending: u32,
    /// The client sent extended-protocol messages after its last Sync.
    open_unit: bool,
    /// Status from the last `ReadyForQuery`.
    status: TxStatus,
    /// The server is in COPY FROM STDIN and waits for the client's data.
    copy_in: bool,
    /// Which owed replies answer a simple Query or FunctionCall (bit set) rather than a Sync, oldest first
    /// in the lowest bit; replies beyond the 64th count as Syncs.
    simple: u64,
}

impl Default for TxTracker {
    fn default() -> Self {
        TxTracker { pending: 0, open_unit: false, status: TxStatus::Idle, copy_in: false, simple: 0 }
    }
}

impl TxTracker {
    /// Notes a message the client sent on to the server.
    pub fn client_message(&mut self, tag: u8) {
        match tag {
            // Each of these is answered by exactly one ReadyForQuery.
            b'Q' | b'F' => {
                if self.pending < 64 {
                    self.simple |= 1 << self.pending;
                }
                self.pending += 1;
                self.open_unit = false;
            }
            // A server in COPY FROM STDIN ignores Sync and Flush.
            b'S' | b'H' if self.copy_in => {}
            b'S' => {
                self.pending += 1;
                self.open_unit = false;
            }
            b'P' | b'B' | b'D' | b'E' | b'C' | b'H' => self.open_unit = true,
            // CopyDone / CopyFail end the client's part of a COPY that a Query or Execute started.
            b'c' | b'f' => self.copy_in = false,
            _ => {}
        }
    }

    /// Notes a server message other than `ReadyForQuery` that changes what the server waits for.
    pub fn server_message(&mut self, tag: u8) {
        match tag {
            b'G' => {
                self.copy_in = true;
                // Every earlier unit has been answered, so the oldest owed reply belongs to the COPY. If that
                // is a Sync unit, the Syncs sent so far land in copy mode and are ignored.
                if self.pending > 0 && self.simple & 1 == 0 {
                    self.pending = 0;
                    self.simple = 0;
                    self.open_unit = true;
                }
            }
            b'E' => self.copy_in = false,
            _ => {}
        }
    }

    /// Notes a `ReadyForQuery` from the server.
    pub fn server_ready(&mut self, status: TxStatus) -> Result<(), UnexpectedReady> {
        self.pending = self.pending.checked_sub(1).ok_or(UnexpectedReady)?;
        self.simple >>= 1;
        self.status = status;
        self.copy_in = false;
        Ok(())
    }

    /// True when the server connection can be given back: idle, nothing owed, no unit open.
    pub fn may_release(&self) -> bool {
        self.pending == 0 && !self.open_unit && self.status == TxStatus::Idle
    }

    /// Replies still owed by the server.
    pub fn pending(&self) -> u32 {
        self.pending
    }

    /// Whether the client has an extended-protocol unit without a Sync yet.
    pub fn unit_open(&self) -> bool {
        self.open_unit
    }

    /// The status of the last `ReadyForQuery`.
    pub fn status(&self) -> TxStatus {
        self.status
    }

    /// Whether the server waits for COPY data from the client.
    pub fn copy_in(&self) -> bool {
        self.copy_in
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TxStatus::*;

    fn feed(t: &mut TxTracker, client: &[u8]) {
        for &tag in client {
            t.client_message(tag);
        }
    }

    #[test]
    fn a_simple_query_outside_a_transaction_releases_at_its_reply() {
        let mut t = TxTracker::default();
        feed(&mut t, b"Q");
        assert!(!t.may_release());
        t.server_ready(Idle).unwrap();
        assert!(t.may_release());
    }

    #[test]
    fn a_transaction_keeps_the_link_until_idle() {
        let mut t = TxTracker::default();
        feed(&mut t, b"Q");
        t.server_ready(InTransaction).unwrap();
        assert!(!t.may_release(), "BEGIN leaves the server in a transaction");
        feed(&mut t, b"Q");
        t.server_ready(Failed).unwrap();
        assert!(!t.may_release(), "an error inside the transaction keeps it");
        feed(&mut t, b"Q");
        t.server_ready(Idle).unwrap();
        assert!(t.may_release(), "ROLLBACK ends it");
    }

    #[test]
    fn pipelined_syncs_keep_the_link_until_the_last_reply() {
        let mut t = TxTracker::default();
        feed(&mut t, b"PBES");
        feed(&mut t, b"BES");
        feed(&mut t, b"BES");
        assert_eq!(t.pending(), 3);
        t.server_ready(Idle).unwrap();
        t.server_ready(Idle).unwrap();
        assert!(!t.may_release());
        t.server_ready(Idle).unwrap();
        assert!(t.may_release());
    }

    #[test]
    fn a_flush_based_prepare_keeps_the_link_until_its_sync() {
        // asyncpg / postgres.js: Parse, Describe, Flush ... then Bind, Execute, Sync.
        let mut t = TxTracker::default();
        feed(&mut t, b"PDH");
        assert!(!t.may_release());
        feed(&mut t, b"BES");
        assert!(!t.may_release());
        t.server_ready(Idle).unwrap();
        assert!(t.may_release());
    }

    #[test]
    fn messages_sent_after_the_last_sync_keep_the_link_when_its_reply_arrives() {
        let mut t = TxTracker::default();
        feed(&mut t, b"PBES");
        feed(&mut t, b"PB");
        t.server_ready(Idle).unwrap();
        assert!(!t.may_release(), "the second unit has no Sync yet");
        feed(&mut t, b"ES");
        t.server_ready(Idle).unwrap();
        assert!(t.may_release());
    }

    #[test]
    fn portal_streaming_keeps_the_link() {
        // pg-cursor: Bind a named portal, Execute(100) + Flush, repeatedly, Sync only at the end.
        let mut t = TxTracker::default();
        feed(&mut t, b"PBDEH");
        feed(&mut t, b"EH");
        feed(&mut t, b"EH");
        assert!(!t.may_release());
        feed(&mut t, b"CS");
        t.server_ready(Idle).unwrap();
        assert!(t.may_release());
    }

    #[test]
    fn copy_in_keeps_the_link_until_its_reply() {
        let mut t = TxTracker::default();
        feed(&mut t, b"Q");
        t.server_message(b'G');
        assert!(t.copy_in());
        feed(&mut t, b"ddd");
        assert!(t.copy_in());
        feed(&mut t, b"c");
        assert!(!t.copy_in(), "CopyDone ends the client's part");
        assert_eq!(t.pending(), 1);
        t.server_ready(Idle).unwrap();
        assert!(t.may_release());
    }

    #[test]
    fn extended_copy_in_ignores_the_syncs_sent_before_copy_mode() {
        // tokio-postgres / libpq: Bind, Execute, Sync; CopyInResponse; data, CopyDone, Sync; one reply.
        let mut t = TxTracker::default();
        feed(&mut t, b"BES");
        t.server_message(b'2');
        t.server_message(b'G');
        assert_eq!(t.pending(), 0);
        assert!(!t.may_release());
        feed(&mut t, b"dd");
        feed(&mut t, b"S");
        assert_eq!(t.pending(), 0, "a Sync in copy mode is ignored");
        feed(&mut t, b"cS");
        t.server_message(b'C');
        t.server_ready(Idle).unwrap();
        assert!(t.may_release());
    }

    #[test]
    fn extended_copy_in_that_fails_is_answered_at_the_next_sync() {
        let mut t = TxTracker::default();
        feed(&mut t, b"BES");
        t.server_message(b'G');
        feed(&mut t, b"d");
        t.server_message(b'E');
        feed(&mut t, b"cS");
        t.server_ready(Idle).unwrap();
        assert!(t.may_release());
    }

    #[test]
    fn simple_copy_in_keeps_its_query_reply() {
        let mut t = TxTracker::default();
        feed(&mut t, b"Q");
        t.server_message(b'G');
        assert_eq!(t.pending(), 1);
        feed(&mut t, b"ddc");
        t.server_ready(Idle).unwrap();
        assert!(t.may_release());
    }

    #[test]
    fn copy_after_earlier_pipelined_units() {
        // Two queries answered, then the COPY's unit.
        let mut t = TxTracker::default();
        feed(&mut t, b"Q");
        feed(&mut t, b"BES");
        feed(&mut t, b"BES");
        t.server_ready(Idle).unwrap();
        t.server_ready(Idle).unwrap();
        t.server_message(b'G');
        assert_eq!(t.pending(), 0);
        feed(&mut t, b"cS");
        t.server_ready(Idle).unwrap();
        assert!(t.may_release());
    }

    #[test]
    fn function_call_is_answered_by_ready_for_query() {
        let mut t = TxTracker::default();
        feed(&mut t, b"F");
        assert!(!t.may_release());
        t.server_ready(Idle).unwrap();
        assert!(t.may_release());
    }

    #[test]
    fn an_unsolicited_ready_is_an_error() {
        let mut t = TxTracker::default();
        assert_eq!(t.server_ready(Idle), Err(UnexpectedReady));
    }
}
