//! What pgmux knows about itself, for the admin console, `/metrics` and the CloudWatch lines: the counters
//! and histograms of `pgmux_metrics`, every client ([`clients`]) and pool connection ([`servers`]).
//! Recording happens where the event happens, with relaxed atomics and no lock; the
//! gauges (clients by state, servers by state, pins, limit, budget) are not kept at all but counted from
//! the books and what the pools say ([`PoolGauges`]) when a reader asks, so they cost the data path nothing.

mod clients;
pub mod clock;
mod databases;
mod servers;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use pgmux_metrics::{ClientState, Label, LoginResult, Metrics, ServerState, Snapshot, TooManyCause};
use pgmux_pool::Status;
use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::sqlstate;

use clock::Anchor;

pub(crate) use clients::{ClientBook, ClientEntry, ClientTicket, NewClient, Peer};
pub(crate) use databases::{DatabaseBook, DbCounters, Ended, Tally};
pub(crate) use servers::{ServerBook, ServerEntry, ServerTicket, StatementTotals};

/// The gauges the pools report, read when a snapshot is taken.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolGauges {
    /// The pool's counters now.
    pub(crate) status: Status,
    /// The limit in force.
    pub(crate) limit: usize,
    /// Server connections pgmux holds for itself (control, probes).
    pub(crate) own: usize,
    /// What the fleet may hold, from the last sizing reading, if there was one.
    pub(crate) budget: Option<usize>,
    /// pgmux instances the last reading saw, this one included.
    pub(crate) members: Option<usize>,
    /// `max_active_servers` in force (0: no cap), and the clients waiting for a turn under it.
    pub(crate) active: (usize, usize),
}

/// The admin console's database, whose row counts the console's own commands.
pub(crate) const CONSOLE_DATABASE: &str = "pgbouncer";

/// How often PgBouncer-style averages are refreshed (PgBouncer's default `stats_period`).
pub(crate) const STATS_PERIOD: Duration = Duration::from_secs(60);

/// PgBouncer's statistics for one database: totals since start, or averages over a stats period (counts
/// and bytes per second, times per event in µs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    pub(crate) server_assignments: u64,
    pub(crate) xacts: u64,
    pub(crate) queries: u64,
    pub(crate) received: u64,
    pub(crate) sent: u64,
    pub(crate) xact_us: u64,
    pub(crate) query_us: u64,
    pub(crate) wait_us: u64,
    pub(crate) client_parses: u64,
    pub(crate) server_parses: u64,
    pub(crate) binds: u64,
    pub(crate) logins: u64,
}

impl Stats {
    /// Both sets of figures added up, field by field.
    fn plus(&self, o: &Stats) -> Stats {
        Stats {
            server_assignments: self.server_assignments + o.server_assignments,
            xacts: self.xacts + o.xacts,
            queries: self.queries + o.queries,
            received: self.received + o.received,
            sent: self.sent + o.sent,
            xact_us: self.xact_us + o.xact_us,
            query_us: self.query_us + o.query_us,
            wait_us: self.wait_us + o.wait_us,
            client_parses: self.client_parses + o.client_parses,
            server_parses: self.server_parses + o.server_parses,
            binds: self.binds + o.binds,
            logins: self.logins + o.logins,
        }
    }

    /// The sum of `all`.
    pub(crate) fn sum<'a>(all: impl IntoIterator<Item = &'a Stats>) -> Stats {
        all.into_iter().fold(Stats::default(), |a, s| a.plus(s))
    }

    /// The averages between `older` and `self` (totals `secs` apart).
    fn averages_since(&self, older: &Stats, secs: f64) -> Stats {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        let rate = |a: u64, b: u64| (d(a, b) as f64 / secs.max(1.0)).round() as u64;
        let per = |t: (u64, u64), n: (u64, u64)| d(t.0, t.1).checked_div(d(n.0, n.1)).unwrap_or(0);
        Stats {
            server_assignments: rate(self.server_assignments, older.server_assignments),
            xacts: rate(self.xacts, older.xacts),
            queries: rate(self.queries, older.queries),
            received: rate(self.received, older.received),
            sent: rate(self.sent, older.sent),
            xact_us: per((self.xact_us, older.xact_us), (self.xacts, older.xacts)),
            query_us: per((self.query_us, older.query_us), (self.queries, older.queries)),
            wait_us: per((self.wait_us, older.wait_us), (self.server_assignments, older.server_assignments)),
            client_parses: rate(self.client_parses, older.client_parses),
            server_parses: rate(self.server_parses, older.server_parses),
            binds: rate(self.binds, older.binds),
            logins: rate(self.logins, older.logins),
        }
    }

    /// The figures in STATS_AVERAGES' column order.
    pub(crate) fn averages(&self) -> [u64; 12] {
        [
            self.server_assignments,
            self.xacts,
            self.queries,
            self.received,
            self.sent,
            self.xact_us,
            self.query_us,
            self.wait_us,
            self.client_parses,
            self.server_parses,
            self.binds,
            self.logins,
        ]
    }
}

/// The averages of the last full stats period per database (and of their sum), and the totals it started
/// from.
#[derive(Debug)]
struct Period {
    began: Instant,
    totals: HashMap<Box<str>, Stats>,
    averages: HashMap<Box<str>, Stats>,
    all: Stats,
}

/// pgmux's view of itself. One per pooler, shared by the pool, the sessions and the readers.
#[derive(Debug)]
pub(crate) struct Observer {
    pub(crate) metrics: Metrics,
    pub(crate) clients: Arc<ClientBook>,
    pub(crate) servers: Arc<ServerBook>,
    /// PgBouncer's statistics per database.
    pub(crate) databases: DatabaseBook,
    period: Mutex<Period>,
    /// The pooler's start, on both clocks (see the `clock` module).
    started: Anchor,
    started_unix: f64,
}

impl Default for Observer {
    fn default() -> Self {
        Observer {
            metrics: Metrics::new(),
            clients: Arc::default(),
            servers: Arc::default(),
            databases: DatabaseBook::default(),
            period: Mutex::new(Period {
                began: Instant::now(),
                totals: HashMap::new(),
                averages: HashMap::new(),
                all: Stats::default(),
            }),
            started: Anchor::now(),
            started_unix: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()),
        }
    }
}

/// Unix seconds now.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Microseconds from `earlier` to `later` (zero if `later` is not later). Seconds and the microseconds
/// past them rather than `Duration::as_micros`, whose 128-bit division costs more than the rest of the
/// recording. (The sessions' meters, which record several times per transaction, keep integer moments
/// instead: see the `clock` module.)
#[inline]
pub(crate) fn micros_between(earlier: Instant, later: Instant) -> u64 {
    let d = later.saturating_duration_since(earlier);
    d.as_secs().saturating_mul(1_000_000).saturating_add(u64::from(d.subsec_micros()))
}

impl Observer {
    /// Time since the pooler started.
    pub(crate) fn uptime(&self) -> Duration {
        Duration::from_micros(self.micros_now())
    }

    /// Microseconds from the pooler's start to now.
    pub(crate) fn micros_now(&self) -> u64 {
        self.micros_at(clock::now_ns())
    }

    /// Microseconds from the pooler's start to moment `ns` (a [`clock::now_ns`] reading).
    #[inline]
    pub(crate) fn micros_at(&self, ns: u64) -> u64 {
        clock::micros(self.started.ns(), ns)
    }

    /// The `Instant` of moment `ns` (a [`clock::now_ns`] reading), for the pool.
    #[inline]
    pub(crate) fn instant_at(&self, ns: u64) -> Instant {
        self.started.instant_at(ns)
    }

    /// Unix seconds of the moment `micros_at` returned `us` for.
    pub(crate) fn unix_at(&self, us: u64) -> u64 {
        (self.started_unix + us as f64 / 1e6) as u64
    }

    /// When the pooler started, Unix seconds (OpenMetrics' `_created`).
    pub(crate) fn started_unix(&self) -> f64 {
        self.started_unix
    }

    /// The totals PgBouncer's SHOW STATS reports now, per database by the name clients give it (empty:
    /// the default pool), then the admin console's under [`CONSOLE_DATABASE`].
    pub(crate) fn database_totals(&self) -> Vec<(Box<str>, Stats)> {
        let statements = self.servers.statement_totals_by_db();
        let none = StatementTotals::default();
        let mut out: Vec<(Box<str>, Stats)> = self
            .databases
            .all()
            .into_iter()
            .map(|(name, c)| {
                let stats = c.stats(statements.get(&name).unwrap_or(&none));
                (name, stats)
            })
            .collect();
        out.push((CONSOLE_DATABASE.into(), self.databases.console.stats(&none)));
        out
    }

    /// The averages of the last full stats period (zero until one has passed) of database `name`.
    pub(crate) fn averages(&self, name: &str) -> Stats {
        self.period.lock().averages.get(name).copied().unwrap_or_default()
    }

    /// The averages of the last full stats period over all databases.
    pub(crate) fn averages_of_all(&self) -> Stats {
        self.period.lock().all
    }

    /// Keeps the time windows going: the histograms' last minute, and the stats period. Call every second or
    /// so (and before a read in Lambda).
    pub(crate) fn tick(&self) {
        self.metrics.tick(self.uptime());
        let mut period = self.period.lock();
        let elapsed = period.began.elapsed();
        if elapsed >= STATS_PERIOD {
            let secs = elapsed.as_secs_f64();
            let now = self.database_totals();
            let then = Stats::sum(period.totals.values());
            period.all = Stats::sum(now.iter().map(|(_, s)| s)).averages_since(&then, secs);
            let averages = now
                .iter()
                .map(|(name, s)| {
                    (name.clone(), s.averages_since(period.totals.get(name).unwrap_or(&Stats::default()), secs))
                })
                .collect();
            period.averages = averages;
            period.totals = now.into_iter().collect();
            period.began = Instant::now();
        }
    }

    /// Counts a login that did not become a session, by what the client was told.
    pub(crate) fn login_denied(&self, error: &ErrorMessage) {
        let result = match &*error.code {
            sqlstate::INVALID_PASSWORD | sqlstate::INVALID_AUTHORIZATION_SPECIFICATION => LoginResult::AuthFailed,
            sqlstate::TOO_MANY_CONNECTIONS => {
                // The caps' messages name their setting (client/caps.rs); every other login 53300 is pgmux's
                // own limit on clients.
                let cause = if error.message.contains("(max_db_client_connections") {
                    TooManyCause::MaxDbClientConnections
                } else if error.message.contains("(max_user_client_connections") {
                    TooManyCause::MaxUserClientConnections
                } else {
                    TooManyCause::MaxClientConn
                };
                self.metrics.too_many.inc(cause);
                LoginResult::Refused
            }
            _ => LoginResult::Refused,
        };
        self.metrics.client_logins.inc(result);
    }

    /// Counts the outcome of opening a server connection that began at `started`, and hands it on.
    pub(crate) fn opened<T, E>(&self, outcome: Result<T, E>, started: Instant) -> Result<T, E> {
        match &outcome {
            Ok(_) => {
                self.metrics.server_opened.inc();
                self.metrics.server_connect_time.record(micros_between(started, Instant::now()));
            }
            Err(_) => self.metrics.server_connect_failures.inc(),
        }
        outcome
    }

    /// Every metric now, gauges counted from the books and from what the pools say now.
    pub(crate) fn snapshot(&self, pools: PoolGauges) -> Snapshot {
        let PoolGauges { status, limit, own, budget, members, active: cap } = pools;
        let mut snap = self.metrics.snapshot();
        let mut clients = [0i64; 3];
        let mut pinned = 0;
        for c in self.clients.all().iter().filter(|c| !c.console) {
            clients[c.state() as usize] += 1;
            pinned += i64::from(c.pin().is_some());
        }
        snap.clients = ClientState::ALL.iter().map(|s| (*s, clients[*s as usize])).collect();
        let opening = status.opening as i64;
        let idle = status.idle as i64;
        let active = (status.size as i64 - idle - opening).max(0);
        snap.servers = ServerState::ALL
            .iter()
            .map(|s| {
                let v = match s {
                    ServerState::Active => active,
                    ServerState::Idle => idle,
                    ServerState::Opening => opening,
                    ServerState::Control => own as i64,
                };
                (*s, v)
            })
            .collect();
        snap.pinned_clients = pinned;
        snap.pool_limit = limit as i64;
        snap.pool_budget = budget.map_or(0, |b| b as i64);
        snap.fleet_instances = members.map_or(1, |m| m as i64);
        (snap.active_limit, snap.active_waiting) = (cap.0 as i64, cap.1 as i64);
        snap.server_closed = self.servers.closed.values();
        let st = self.servers.statement_totals();
        snap.statement_parses = st.client_parses;
        snap.statement_cache_hits = st.cache_hits;
        snap.statement_evictions = st.evictions;
        snap
    }
}
