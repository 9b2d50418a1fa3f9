//! What one session measures, called at a few named points of the relay loop with one line each: a client
//! read that starts a query, a ReadyForQuery, a link and a release. Per query it reads the clock twice and
//! adds to a counter and a histogram; per transaction the same again, plus two relaxed stores to the
//! client's entry in the admin console's list. No lock, no allocation. Bytes are counted by the sockets
//! and published once per transaction. Moments are integer nanoseconds (see `observe::clock`): a duration is
//! a subtraction and a division by a constant. What SHOW STATS lists per database is tallied in plain fields
//! of the link (a [`Tally`], which an idle client does not carry) and added to the database's counters once
//! per transaction, by the session.

use std::time::Instant;

use pgmux_metrics::{PinReason as MetricPin, TooManyCause};

use crate::observe::clock::{micros, now_ns};
use crate::observe::{ClientTicket, Ended, Observer, Tally, unix_now};
use crate::pools::CheckoutError;
use crate::protocol::sql::PinReason;

/// One session's clocks and what it has published.
#[derive(Debug)]
pub(super) struct Meter {
    /// Its entry in the console's list of clients, and the observer its counters go to.
    pub(super) seen: ClientTicket,
    /// When the query now running (or the next one the client sent) began: its first byte, or the link
    /// of a server connection if it had to wait for one. Moments here are `clock::now_ns` readings.
    query_start: Option<u64>,
    /// When the server was linked, or the pinned client's last transaction ended.
    xact_start: u64,
    /// The last ReadyForQuery: the end of a transaction released right after it (one clock read less).
    last_ready: u64,
    /// Bytes received from and sent to the client already added to the counters.
    published: (u64, u64),
}

impl Meter {
    pub(super) fn new(seen: ClientTicket) -> Meter {
        let now = now_ns();
        Meter { seen, query_start: None, xact_start: now, last_ready: now, published: (0, 0) }
    }

    fn obs(&self) -> &Observer {
        self.seen.observer()
    }

    /// The client sent bytes: if no query is running, one begins now.
    #[inline]
    pub(super) fn client_data(&mut self) {
        if self.query_start.is_none() {
            self.query_start = Some(now_ns());
        }
    }

    /// The server said ReadyForQuery: a query (a simple Query, or an extended-protocol unit up to its Sync)
    /// is done. With more owed (a pipeline), the next one is already running. The query goes in `tally`.
    #[inline]
    pub(super) fn ready_for_query(&mut self, more_owed: bool, tally: &mut Tally) {
        let now = now_ns();
        let m = &self.obs().metrics;
        m.queries.inc();
        let us = micros(self.query_start.unwrap_or(now), now);
        m.query_time.record(us);
        tally.queries += 1;
        tally.query_us += us;
        self.query_start = more_owed.then_some(now);
        self.last_ready = now;
    }

    /// When the server last said ReadyForQuery (or the session began), a `clock::now_ns` moment.
    #[inline]
    pub(super) fn last_ready_ns(&self) -> u64 {
        self.last_ready
    }

    /// Moment `ns` as the pool keeps its times.
    #[inline]
    pub(super) fn instant_at(&self, ns: u64) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.obs().instant_at(ns))
    }

    /// The client starts to wait in line for a server connection; returns when its query began (read in the
    /// same turn of the loop, so the clock is not read again).
    pub(super) fn waiting(&mut self) -> Instant {
        let began = *self.query_start.get_or_insert_with(now_ns);
        self.seen.waiting(self.obs().micros_at(began));
        self.obs().instant_at(began)
    }

    /// The wait in line is over (parameters may still be applied before the link).
    #[inline]
    pub(super) fn got_server(&mut self) {
        if self.seen.wait_since_us().is_some() {
            self.seen.unlinked();
        }
    }

    /// Server connection `server` is linked for a transaction. The wait for it ends, and the query's time
    /// on a server begins: query and transaction time are time on a server connection, as PgBouncer
    /// counts them, and the wait is a figure of its own. Returns the link's first tally: one server
    /// assignment, and its wait.
    #[inline]
    pub(super) fn linked(&mut self, server: u64) -> Tally {
        let now = now_ns();
        let began = self.query_start.unwrap_or(now);
        let wait = micros(began, now);
        self.obs().metrics.server_wait.record(wait);
        self.xact_start = now;
        self.query_start = Some(now);
        self.seen.linked(server, self.obs().micros_at(began));
        Tally { assignments: 1, queries: 0, wait_us: wait, query_us: 0 }
    }

    /// No server connection came; the client is told why.
    pub(super) fn no_server(&mut self, error: &CheckoutError) {
        self.seen.unlinked();
        self.query_start = None;
        let cause = match error {
            CheckoutError::Timeout { refused: Some(_), .. } => TooManyCause::DatabaseRefused,
            CheckoutError::Timeout { refused: None, .. } => TooManyCause::QueryWaitTimeout,
            CheckoutError::ActiveCap { .. } => TooManyCause::MaxActiveServers,
            _ => return,
        };
        self.obs().metrics.too_many.inc(cause);
    }

    /// A transaction ended (ReadyForQuery idle with nothing owed); `received` and `sent` are the client
    /// socket's byte counts over its life, `binds` the Binds of named statements the router counted in it.
    /// Returns what the caller adds to its database's counters with the link's tally.
    #[inline]
    pub(super) fn transaction_done(&mut self, received: u64, sent: u64, binds: u32) -> Ended {
        // Release follows the ReadyForQuery that allowed it, in the same turn of the loop.
        let now = self.last_ready;
        let m = &self.obs().metrics;
        m.transactions.inc();
        let us = micros(self.xact_start, now);
        m.transaction_time.record(us);
        self.xact_start = now;
        if binds != 0 {
            self.obs().servers.add_binds(u64::from(binds));
        }
        let (received, sent) = self.publish_bytes(received, sent);
        Ended { xacts: 1, xact_us: us, received, sent, binds: u64::from(binds) }
    }

    /// The server connection went back (or was lost).
    #[inline]
    pub(super) fn unlinked(&mut self) {
        self.seen.unlinked();
    }

    /// Adds the bytes not yet counted; returns them (received, sent).
    pub(super) fn publish_bytes(&mut self, received: u64, sent: u64) -> (u64, u64) {
        let m = &self.obs().metrics;
        let (received, sent) = (received.saturating_sub(self.published.0), sent.saturating_sub(self.published.1));
        m.client_received_bytes.add(received);
        m.client_sent_bytes.add(sent);
        self.published = (self.published.0 + received, self.published.1 + sent);
        (received, sent)
    }

    /// The client became pinned to its server connection.
    pub(super) fn pinned(&mut self, reason: PinReason) {
        self.obs().metrics.pins.inc(metric_pin(reason));
        self.seen.pinned(reason, unix_now());
    }

    /// The client's session state that pinned it is gone, or its server with it.
    pub(super) fn unpinned(&mut self) {
        self.seen.unpinned();
    }
}

fn metric_pin(reason: PinReason) -> MetricPin {
    match reason {
        PinReason::Listen => MetricPin::Listen,
        PinReason::AdvisoryLock => MetricPin::AdvisoryLock,
        PinReason::TempObject => MetricPin::TempObject,
        PinReason::HoldCursor => MetricPin::HoldCursor,
        PinReason::SqlPrepare => MetricPin::SqlPrepare,
        PinReason::Load => MetricPin::Load,
    }
}
