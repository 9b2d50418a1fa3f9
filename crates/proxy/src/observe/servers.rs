//! Every open pool connection as the admin console sees it: where it goes, its backend PID, when it was
//! opened, its prepared statements, and, once it closes, why. A connection carries a [`ServerTicket`];
//! dropping the connection drops the ticket, which removes the entry and counts the close under the reason
//! set last (a connection that just goes away counts as `broken`).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};

use parking_lot::{Mutex, MutexGuard};
use pgmux_metrics::{CounterFamily, Label, ServerCloseReason};

use crate::protocol::statements::StatementStats;

/// One open pool connection.
#[derive(Debug)]
pub(crate) struct ServerEntry {
    pub(crate) id: u64,
    pub(crate) addr: SocketAddr,
    /// The local end of its socket, when the system said (written once, when the connection opened).
    pub(crate) local: Option<SocketAddr>,
    pub(crate) pid: i32,
    pub(crate) connected_unix: u64,
    pub(crate) tls: bool,
    pub(crate) statements: Arc<StatementStats>,
    /// The index of its pool in the registry (0: the default pool), for the console's per-pool rows.
    pub(crate) pool: u16,
    /// The database its pool serves, as clients name it (empty: the default pool), for SHOW STATS.
    pub(crate) database: Box<str>,
}

/// Statement counts summed over connections, for the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StatementTotals {
    pub(crate) client_parses: u64,
    pub(crate) cache_hits: u64,
    pub(crate) parses: u64,
    pub(crate) evictions: u64,
    pub(crate) hits: u64,
    /// Binds of clients' named statements (SHOW STATS' bind_count).
    pub(crate) binds: u64,
}

impl StatementTotals {
    fn add(&mut self, s: &StatementStats) {
        self.client_parses += s.client_parses.load(Relaxed);
        self.cache_hits += s.cache_hits.load(Relaxed);
        self.parses += s.parses.load(Relaxed);
        self.evictions += s.evictions.load(Relaxed);
        self.hits += s.hits.load(Relaxed);
    }
}

#[derive(Debug, Default)]
struct Book {
    open: BTreeMap<u64, Arc<ServerEntry>>,
    /// What closed connections counted, so that totals never go down.
    closed: StatementTotals,
    /// The same, per database.
    closed_by_db: HashMap<Box<str>, StatementTotals>,
}

/// Every open pool connection, and the closes by reason.
#[derive(Debug)]
pub(crate) struct ServerBook {
    book: Mutex<Book>,
    pub(crate) closed: CounterFamily<ServerCloseReason>,
    /// Binds of clients' named statements, added by each session once per transaction (not per Bind).
    binds: AtomicU64,
}

impl Default for ServerBook {
    fn default() -> Self {
        ServerBook { book: Mutex::default(), closed: CounterFamily::new(), binds: AtomicU64::new(0) }
    }
}

impl ServerBook {
    fn lock(&self) -> MutexGuard<'_, Book> {
        self.book.lock()
    }

    /// Enters a newly opened pool connection; the ticket goes into the connection.
    pub(crate) fn add(self: &Arc<Self>, entry: ServerEntry) -> ServerTicket {
        let id = entry.id;
        self.lock().open.insert(id, Arc::new(entry));
        ServerTicket { id, book: Arc::clone(self), reason: AtomicU8::new(ServerCloseReason::Broken as u8) }
    }

    /// Every open connection, in id order.
    pub(crate) fn all(&self) -> Vec<Arc<ServerEntry>> {
        self.lock().open.values().cloned().collect()
    }

    /// Open connections with an id below `id` (those a RECONNECT marked).
    pub(crate) fn open_below(&self, id: u64) -> usize {
        self.lock().open.range(..id).count()
    }

    /// Statement counts of every connection ever opened.
    pub(crate) fn statement_totals(&self) -> StatementTotals {
        let book = self.lock();
        let mut totals = book.closed;
        book.open.values().for_each(|e| totals.add(&e.statements));
        totals.binds = self.binds.load(Relaxed);
        totals
    }

    /// Statement counts of every connection ever opened, per database (binds are counted per database by
    /// the sessions).
    pub(crate) fn statement_totals_by_db(&self) -> HashMap<Box<str>, StatementTotals> {
        let book = self.lock();
        let mut totals = book.closed_by_db.clone();
        book.open.values().for_each(|e| totals.entry(e.database.clone()).or_default().add(&e.statements));
        totals
    }

    /// Adds a session's Binds of named statements since it last added them.
    pub(crate) fn add_binds(&self, n: u64) {
        self.binds.fetch_add(n, Relaxed);
    }
}

/// A pool connection's place in the [`ServerBook`].
#[derive(Debug)]
pub(crate) struct ServerTicket {
    id: u64,
    book: Arc<ServerBook>,
    reason: AtomicU8,
}

impl Drop for ServerTicket {
    fn drop(&mut self) {
        let reason = ServerCloseReason::ALL
            .get(self.reason.load(Relaxed) as usize)
            .copied()
            .unwrap_or(ServerCloseReason::Broken);
        self.book.closed.inc(reason);
        let mut book = self.book.lock();
        if let Some(entry) = book.open.remove(&self.id) {
            book.closed.add(&entry.statements);
            book.closed_by_db.entry(entry.database.clone()).or_default().add(&entry.statements);
        }
    }
}

impl ServerTicket {
    /// Says why its connection is about to close, for `pgmux_server_connections_closed_total`.
    pub(crate) fn closing(&self, reason: ServerCloseReason) {
        self.reason.store(reason as u8, Relaxed);
    }
}
