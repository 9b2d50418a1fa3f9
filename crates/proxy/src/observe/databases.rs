//! PgBouncer's statistics per database: one set of counters per name clients connect to (the default
//! pool's under the empty name), and one for the admin console's own commands. A session holds its
//! database's counters from login on and adds to them once per transaction what it tallied in between
//! (plain additions in the session), so a query costs nothing more and a transaction a few relaxed adds.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::RwLock;

use super::{StatementTotals, Stats};

/// What a link counted that its transaction's end has not added yet: its server assignment (and the wait
/// for it), and its queries. Kept by the session in plain fields, with the link (an idle client has none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) assignments: u32,
    pub(crate) queries: u32,
    pub(crate) wait_us: u64,
    pub(crate) query_us: u64,
}

/// What a session adds besides its [`Tally`]: transactions ended (and their time), and the client's bytes
/// and Binds of named statements since it last added.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ended {
    pub(crate) xacts: u64,
    pub(crate) xact_us: u64,
    pub(crate) received: u64,
    pub(crate) sent: u64,
    pub(crate) binds: u64,
}

/// One database's counters since pgmux started.
#[derive(Debug, Default)]
pub(crate) struct DbCounters {
    assignments: AtomicU64,
    wait_us: AtomicU64,
    xacts: AtomicU64,
    xact_us: AtomicU64,
    queries: AtomicU64,
    query_us: AtomicU64,
    received: AtomicU64,
    sent: AtomicU64,
    binds: AtomicU64,
    logins: AtomicU64,
}

impl DbCounters {
    /// Adds a link's tally, and what ended with it (once per transaction: a few relaxed adds).
    #[inline]
    pub(crate) fn add(&self, t: &Tally, e: &Ended) {
        if t.assignments != 0 {
            self.assignments.fetch_add(u64::from(t.assignments), Relaxed);
            self.wait_us.fetch_add(t.wait_us, Relaxed);
        }
        if t.queries != 0 {
            self.queries.fetch_add(u64::from(t.queries), Relaxed);
            self.query_us.fetch_add(t.query_us, Relaxed);
        }
        self.xacts.fetch_add(e.xacts, Relaxed);
        self.xact_us.fetch_add(e.xact_us, Relaxed);
        self.received.fetch_add(e.received, Relaxed);
        self.sent.fetch_add(e.sent, Relaxed);
        if e.binds != 0 {
            self.binds.fetch_add(e.binds, Relaxed);
        }
    }

    /// A client logged in to this database.
    pub(crate) fn login(&self) {
        self.logins.fetch_add(1, Relaxed);
    }

    /// One admin console command: a transaction and a query of its own, as PgBouncer counts them.
    pub(crate) fn command(&self) {
        self.xacts.fetch_add(1, Relaxed);
        self.queries.fetch_add(1, Relaxed);
    }

    /// The totals, with the statement counts of the database's server connections.
    pub(crate) fn stats(&self, st: &StatementTotals) -> Stats {
        let l = |c: &AtomicU64| c.load(Relaxed);
        Stats {
            server_assignments: l(&self.assignments),
            xacts: l(&self.xacts),
            queries: l(&self.queries),
            received: l(&self.received),
            sent: l(&self.sent),
            xact_us: l(&self.xact_us),
            query_us: l(&self.query_us),
            wait_us: l(&self.wait_us),
            client_parses: st.client_parses,
            server_parses: st.parses,
            binds: l(&self.binds),
            logins: l(&self.logins),
        }
    }
}

/// Every database's counters, by the name clients give it (empty: the default pool).
#[derive(Debug, Default)]
pub(crate) struct DatabaseBook {
    by_name: RwLock<BTreeMap<Box<str>, Arc<DbCounters>>>,
    /// The admin console's commands.
    pub(crate) console: DbCounters,
}

impl DatabaseBook {
    /// The counters of database `name`, made on first use (at a login, never per transaction).
    pub(crate) fn counters(&self, name: &str) -> Arc<DbCounters> {
        if let Some(c) = self.by_name.read().get(name) {
            return Arc::clone(c);
        }
        Arc::clone(self.by_name.write().entry(name.into()).or_default())
    }

    /// Every database that has counters, by name.
    pub(crate) fn all(&self) -> Vec<(Box<str>, Arc<DbCounters>)> {
        self.by_name.read().iter().map(|(n, c)| (n.clone(), Arc::clone(c))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_land_in_their_own_database() {
        let book = DatabaseBook::default();
        let a = book.counters("a");
        let b = book.counters("b");
        a.add(&Tally { queries: 5, assignments: 1, ..Tally::default() }, &Ended { xacts: 2, ..Ended::default() });
        b.add(&Tally { queries: 1, ..Tally::default() }, &Ended { xacts: 1, ..Ended::default() });
        book.counters("a").add(&Tally { queries: 1, ..Tally::default() }, &Ended { xacts: 1, ..Ended::default() });
        book.console.command();
        let st = StatementTotals::default();
        let names: Vec<_> = book.all().into_iter().map(|(n, c)| (n, c.stats(&st))).collect();
        assert_eq!(names.len(), 2);
        assert_eq!((names[0].1.xacts, names[0].1.queries, names[0].1.server_assignments), (3, 6, 1));
        assert_eq!((names[1].1.xacts, names[1].1.queries), (1, 1));
        assert_eq!(book.console.stats(&st).queries, 1);
    }
}
