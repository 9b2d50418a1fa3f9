//! Every metric pgmux keeps, in one struct the pooler shares (`Arc<Metrics>`), with what each is called in
//! Prometheus and in CloudWatch. Counters live where the event happens and cost one relaxed atomic; the
//! readers (the admin console, `/metrics`, the EMF flush) take a [`Snapshot`] and format it.
//!
//! The same snapshot answers PgBouncer's `SHOW STATS_TOTALS` for the one database pgmux serves:
//! `xact_count` = `transactions`, `query_count` = `queries`, `bytes_received` / `bytes_sent` =
//! `client_received_bytes` / `client_sent_bytes`, `xact_time` / `query_time` / `wait_time` = the sums of
//! the `transaction_time` / `query_time` / `server_wait` histograms (µs), `server_assignment_count` = the
//! count of `server_wait`, `client_parse_count` = `statement_parses`.

use std::time::Duration;

use crate::expo::{Desc, Encoder, Format, Unit};
use crate::family::{CounterFamily, GaugeFamily, Label};
use crate::histogram::{Histogram, HistogramSnapshot};
use crate::scalar::{Counter, Gauge};
use crate::window::Window;

crate::label_enum! {
    /// How a client's login ended.
    pub enum LoginResult: "result" {
        Accepted => "accepted",
        /// Turned away before authentication: `max_client_conn`, unknown database, shutting down.
        Refused => "refused",
        AuthFailed => "auth_failed",
    }
}

crate::label_enum! {
    /// Why pgmux closed a server connection.
    pub enum ServerCloseReason: "reason" {
        IdleTimeout => "idle_timeout",
        Lifetime => "lifetime",
        /// The connection failed: a read or write error, an unexpected message, a failed liveness check.
        Broken => "broken",
        /// Resetting session state for the next client failed.
        ResetFailed => "reset_failed",
        /// Its pinned client left, taking state that cannot be reset.
        PinnedClientLeft => "pinned_client_left",
        /// `RECONNECT`, or a reload that changed how to log in.
        Reconnect => "reconnect",
        /// The pool limit went down below what was open.
        OverLimit => "over_limit",
        /// The node became read-only (a failover demoted it).
        ReadOnly => "read_only",
        Shutdown => "shutdown",
    }
}

crate::label_enum! {
    /// Session state that pins a client to its server connection.
    pub enum PinReason: "reason" {
        Listen => "listen",
        AdvisoryLock => "advisory_lock",
        TempObject => "temp_object",
        HoldCursor => "hold_cursor",
        SqlPrepare => "sql_prepare",
        Load => "load",
    }
}

crate::label_enum! {
    /// Why a client got SQLSTATE 53300.
    pub enum TooManyCause: "cause" {
        MaxClientConn => "max_client_conn",
        /// Past its database's `max_db_client_connections`.
        MaxDbClientConnections => "max_db_client_connections",
        /// Past its user's `max_user_client_connections`.
        MaxUserClientConnections => "max_user_client_connections",
        /// Waited past `query_wait_timeout` for a busy pool.
        QueryWaitTimeout => "query_wait_timeout",
        /// Waited past `query_wait_timeout` while the database refused new connections.
        DatabaseRefused => "database_refused",
        /// Waited past `query_wait_timeout` for a turn under `max_active_servers`.
        MaxActiveServers => "max_active_servers",
    }
}

crate::label_enum! {
    /// What a client connection is doing.
    pub enum ClientState: "state" {
        /// Linked to a server connection.
        Active => "active",
        /// Waiting for a server connection.
        Waiting => "waiting",
        /// Between transactions, holding nothing.
        Idle => "idle",
    }
}

crate::label_enum! {
    /// What a server connection is doing.
    pub enum ServerState: "state" {
        Active => "active",
        Idle => "idle",
        /// Connecting or logging in.
        Opening => "opening",
        /// pgmux's own, outside the pool: sizing's control connection, liveness probes.
        Control => "control",
    }
}

crate::label_enum! {
    /// How a reload (`SIGHUP`, `RELOAD`) ended.
    pub enum ReloadResult: "result" {
        Ok => "ok",
        /// The new configuration was invalid; the running one stays.
        Failed => "failed",
    }
}

crate::label_enum! {
    /// Where a reader route's transaction went when no reader was in the rotation (`reader_fallback`).
    pub enum ReaderFallbackOutcome: "outcome" {
        /// To the writer.
        Writer => "writer",
        /// To a reader anyway, to wait for it.
        Wait => "wait",
        /// Nowhere: refused with 08006.
        Error => "error",
    }
}

crate::label_enum! {
    /// The latencies pgmux measures.
    pub enum Latency: "latency" {
        /// From a transaction's first message until a server connection is linked.
        ServerWait => "server_wait",
        /// From a server connection's link to its release.
        Transaction => "transaction",
        /// A query's time on a server connection: from its first message (or, if it waited for a
        /// server connection, from the link) to its `ReadyForQuery`.
        Query => "query",
        /// Opening a server connection: TCP, TLS and login.
        ServerConnect => "server_connect",
    }
}

/// pgmux's metrics. Share one per process; every field is safe to record into from any thread.
#[derive(Debug)]
pub struct Metrics {
    pub client_logins: CounterFamily<LoginResult>,
    pub transactions: Counter,
    pub queries: Counter,
    pub client_received_bytes: Counter,
    pub client_sent_bytes: Counter,
    pub server_opened: Counter,
    pub server_connect_failures: Counter,
    pub server_closed: CounterFamily<ServerCloseReason>,
    pub pins: CounterFamily<PinReason>,
    /// Cancel requests received from clients.
    pub cancels: Counter,
    pub too_many: CounterFamily<TooManyCause>,
    /// Parse messages from clients.
    pub statement_parses: Counter,
    /// Client Parses answered from the statement cache (no Parse sent to the server).
    pub statement_cache_hits: Counter,
    /// Statements closed on a server to keep within `max_prepared_statements`.
    pub statement_evictions: Counter,
    pub reloads: CounterFamily<ReloadResult>,
    /// Reader-route transactions that found no reader in the rotation, by where they went.
    pub reader_fallbacks: CounterFamily<ReaderFallbackOutcome>,
    pub clients: GaugeFamily<ClientState>,
    pub servers: GaugeFamily<ServerState>,
    pub pinned_clients: Gauge,
    pub pool_limit: Gauge,
    pub pool_budget: Gauge,
    pub active_limit: Gauge,
    pub active_waiting: Gauge,
    pub fleet_instances: Gauge,
    pub server_wait: Histogram,
    pub transaction_time: Histogram,
    pub query_time: Histogram,
    pub server_connect_time: Histogram,
    /// The last minute of each histogram, in [`Latency::ALL`] order.
    windows: [Window; 4],
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics {
            client_logins: CounterFamily::new(),
            transactions: Counter::new(),
            queries: Counter::new(),
            client_received_bytes: Counter::new(),
            client_sent_bytes: Counter::new(),
            server_opened: Counter::new(),
            server_connect_failures: Counter::new(),
            server_closed: CounterFamily::new(),
            pins: CounterFamily::new(),
            cancels: Counter::new(),
            too_many: CounterFamily::new(),
            statement_parses: Counter::new(),
            statement_cache_hits: Counter::new(),
            statement_evictions: Counter::new(),
            reloads: CounterFamily::new(),
            reader_fallbacks: CounterFamily::new(),
            clients: GaugeFamily::new(),
            servers: GaugeFamily::new(),
            pinned_clients: Gauge::new(),
            pool_limit: Gauge::new(),
            pool_budget: Gauge::new(),
            active_limit: Gauge::new(),
            active_waiting: Gauge::new(),
            fleet_instances: Gauge::new(),
            server_wait: Histogram::new(),
            transaction_time: Histogram::new(),
            query_time: Histogram::new(),
            server_connect_time: Histogram::new(),
            windows: [Window::last_minute(), Window::last_minute(), Window::last_minute(), Window::last_minute()],
        }
    }

    pub fn histogram(&self, latency: Latency) -> &Histogram {
        match latency {
            Latency::ServerWait => &self.server_wait,
            Latency::Transaction => &self.transaction_time,
            Latency::Query => &self.query_time,
            Latency::ServerConnect => &self.server_connect_time,
        }
    }

    /// Lets the last-minute windows remember the histograms' counts; call every few seconds (a timer in the
    /// sidecar, each invocation in Lambda). `now` is the time since any fixed origin, the same every call.
    pub fn tick(&self, now: Duration) {
        for latency in Latency::ALL {
            self.windows[*latency as usize].tick(now, &self.histogram(*latency).snapshot());
        }
    }

    /// Percentiles of every latency over the last minute and since start, for `SHOW LATENCY`.
    pub fn latency_report(&self, now: Duration) -> Vec<LatencyRow> {
        let mut rows = Vec::with_capacity(2 * Latency::ALL.len());
        for latency in Latency::ALL {
            let total = self.histogram(*latency).snapshot();
            let last = self.windows[*latency as usize].view(now, &total);
            rows.push(LatencyRow::new(*latency, "last_minute", last.covers, &last.snapshot));
            rows.push(LatencyRow::new(*latency, "since_start", now, &total));
        }
        rows
    }

    /// Every value now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            client_logins: self.client_logins.values(),
            transactions: self.transactions.get(),
            queries: self.queries.get(),
            client_received_bytes: self.client_received_bytes.get(),
            client_sent_bytes: self.client_sent_bytes.get(),
            server_opened: self.server_opened.get(),
            server_connect_failures: self.server_connect_failures.get(),
            server_closed: self.server_closed.values(),
            pins: self.pins.values(),
            cancels: self.cancels.get(),
            too_many: self.too_many.values(),
            statement_parses: self.statement_parses.get(),
            statement_cache_hits: self.statement_cache_hits.get(),
            statement_evictions: self.statement_evictions.get(),
            reloads: self.reloads.values(),
            reader_fallbacks: self.reader_fallbacks.values(),
            clients: self.clients.values(),
            servers: self.servers.values(),
            pinned_clients: self.pinned_clients.get(),
            pool_limit: self.pool_limit.get(),
            pool_budget: self.pool_budget.get(),
            active_limit: self.active_limit.get(),
            active_waiting: self.active_waiting.get(),
            fleet_instances: self.fleet_instances.get(),
            server_wait: self.server_wait.snapshot(),
            transaction_time: self.transaction_time.snapshot(),
            query_time: self.query_time.snapshot(),
            server_connect_time: self.server_connect_time.snapshot(),
        }
    }
}

/// One row of `SHOW LATENCY`: a latency over a window, in microseconds (`None` when nothing was seen).
#[derive(Clone, Debug, PartialEq)]
pub struct LatencyRow {
    pub latency: Latency,
    /// `last_minute` or `since_start`.
    pub window: &'static str,
    /// How long the window covers.
    pub covers: Duration,
    pub count: u64,
    pub mean_us: Option<f64>,
    pub p50_us: Option<f64>,
    pub p90_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub p999_us: Option<f64>,
}

impl LatencyRow {
    fn new(latency: Latency, window: &'static str, covers: Duration, snap: &HistogramSnapshot) -> LatencyRow {
        LatencyRow {
            latency,
            window,
            covers,
            count: snap.count(),
            mean_us: snap.mean_us(),
            p50_us: snap.quantile(0.5),
            p90_us: snap.quantile(0.9),
            p99_us: snap.quantile(0.99),
            p999_us: snap.quantile(0.999),
        }
    }
}

/// The values of [`Metrics`] at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub client_logins: Vec<(LoginResult, u64)>,
    pub transactions: u64,
    pub queries: u64,
    pub client_received_bytes: u64,
    pub client_sent_bytes: u64,
    pub server_opened: u64,
    pub server_connect_failures: u64,
    pub server_closed: Vec<(ServerCloseReason, u64)>,
    pub pins: Vec<(PinReason, u64)>,
    pub cancels: u64,
    pub too_many: Vec<(TooManyCause, u64)>,
    pub statement_parses: u64,
    pub statement_cache_hits: u64,
    pub statement_evictions: u64,
    pub reloads: Vec<(ReloadResult, u64)>,
    pub reader_fallbacks: Vec<(ReaderFallbackOutcome, u64)>,
    pub clients: Vec<(ClientState, i64)>,
    pub servers: Vec<(ServerState, i64)>,
    pub pinned_clients: i64,
    pub pool_limit: i64,
    pub pool_budget: i64,
    /// `max_active_servers` in force (0: no cap).
    pub active_limit: i64,
    /// Clients waiting for their turn under `max_active_servers`.
    pub active_waiting: i64,
    pub fleet_instances: i64,
    pub server_wait: HistogramSnapshot,
    pub transaction_time: HistogramSnapshot,
    pub query_time: HistogramSnapshot,
    pub server_connect_time: HistogramSnapshot,
}

impl Snapshot {
    /// This snapshot's counters and histograms with the gauges (connections, pins, limit, budget, fleet)
    /// of `at`: the last flush before an exit reports what was open before the drain closed it all.
    pub fn with_gauges_of(mut self, at: &Snapshot) -> Snapshot {
        self.clients = at.clients.clone();
        self.servers = at.servers.clone();
        self.pinned_clients = at.pinned_clients;
        self.pool_limit = at.pool_limit;
        self.pool_budget = at.pool_budget;
        self.active_limit = at.active_limit;
        self.active_waiting = at.active_waiting;
        self.fleet_instances = at.fleet_instances;
        self
    }
}

/// The value of label `l` in a family's values (0 when absent).
pub fn value_of<L: PartialEq + Copy, V: Copy + Default>(values: &[(L, V)], l: L) -> V {
    values.iter().find(|(k, _)| *k == l).map_or_else(V::default, |(_, v)| *v)
}

macro_rules! descs {
    ($($id:ident = $name:literal, $unit:ident, $help:literal;)+) => {
        $(const $id: Desc = Desc::new($name, $help, Unit::$unit);)+
        /// Every metric's description, in exposition order.
        pub const DESCS: &[Desc] = &[$($id),+];
    };
}

descs! {
    BUILD_INFO = "pgmux_build_info", None, "Always 1; the label says which pgmux version runs.";
    CLIENT_LOGINS = "pgmux_client_logins", None, "Client logins, by result: accepted, refused before authentication, failed authentication.";
    TRANSACTIONS = "pgmux_transactions", None, "Transactions run through pgmux (a statement outside a transaction block counts as one).";
    QUERIES = "pgmux_queries", None, "Queries run through pgmux: simple Query messages and extended-protocol Executes.";
    RECEIVED = "pgmux_client_received_bytes", Bytes, "Bytes received from clients.";
    SENT = "pgmux_client_sent_bytes", Bytes, "Bytes sent to clients.";
    OPENED = "pgmux_server_connections_opened", None, "Server connections opened and logged in.";
    CONNECT_FAILURES = "pgmux_server_connect_failures", None, "Server connections that could not be opened or logged in.";
    CLOSED = "pgmux_server_connections_closed", None, "Server connections closed by pgmux, by reason.";
    PINS = "pgmux_pins", None, "Clients pinned to their server connection, by the session state that pinned them.";
    CANCELS = "pgmux_cancel_requests", None, "Cancel requests received from clients.";
    TOO_MANY = "pgmux_too_many_connections_errors", None, "SQLSTATE 53300 errors sent to clients, by cause.";
    PARSES = "pgmux_statement_parses", None, "Parse messages received from clients.";
    CACHE_HITS = "pgmux_statement_cache_hits", None, "Client Parses that needed no Parse on the server.";
    EVICTIONS = "pgmux_statement_evictions", None, "Prepared statements closed on a server to stay within max_prepared_statements.";
    RELOADS = "pgmux_reloads", None, "Configuration reloads (SIGHUP, RELOAD), by result.";
    READER_FALLBACKS = "pgmux_reader_fallbacks", None, "Reader-route transactions that found no reader in the rotation, by where reader_fallback sent them: the writer, a reader to wait for, or an error (08006).";
    CLIENTS = "pgmux_clients", None, "Client connections now, by state: active (linked), waiting for a server connection, idle.";
    SERVERS = "pgmux_server_connections", None, "Server connections now, by state: active (lent), idle, opening, control (pgmux's own: the control connection and probes).";
    PINNED = "pgmux_pinned_clients", None, "Clients pinned to a server connection now.";
    LIMIT = "pgmux_pool_limit", None, "Server connections pgmux may hold now (the limit in force).";
    BUDGET = "pgmux_pool_budget", None, "Server connections the fleet of pgmux instances may hold, from max_connections.";
    FLEET = "pgmux_fleet_instances", None, "pgmux instances seen sharing the database, this one included.";
    ACTIVE_LIMIT = "pgmux_active_servers_limit", None, "max_active_servers in force: server connections in use at once, all pools together, compared with pgmux_server_connections{state=\"active\"} (0: no cap).";
    ACTIVE_WAITING = "pgmux_active_servers_waiting_clients", None, "Clients waiting for their turn under max_active_servers.";
    SERVER_WAIT = "pgmux_server_wait_seconds", Seconds, "Time a transaction waited for a server connection.";
    XACT_TIME = "pgmux_transaction_duration_seconds", Seconds, "Time a server connection was linked to one transaction.";
    QUERY_TIME = "pgmux_query_duration_seconds", Seconds, "Time a query spent on a server connection, up to its ReadyForQuery (the wait for a connection is pgmux_server_wait_seconds).";
    CONNECT_TIME = "pgmux_server_connect_duration_seconds", Seconds, "Time to open a server connection: TCP, TLS and login.";
}

/// The Prometheus or OpenMetrics text of a snapshot. `started_unix` (process start, Unix seconds) adds
/// `_created` samples in OpenMetrics.
pub fn render(snap: &Snapshot, format: Format, started_unix: Option<f64>) -> String {
    let mut e = Encoder::new(format);
    if let Some(t) = started_unix {
        e = e.with_created(t);
    }
    encode_all(&mut e, snap);
    e.finish()
}

/// Writes every metric of `snap` to `e`, for callers that add metrics of their own before
/// [`Encoder::finish`].
pub fn encode_all(e: &mut Encoder, snap: &Snapshot) {
    e.gauge_samples(&BUILD_INFO, &[(&[("version", env!("CARGO_PKG_VERSION"))], 1)]);
    e.counter_family(&CLIENT_LOGINS, &snap.client_logins);
    e.counter(&TRANSACTIONS, snap.transactions);
    e.counter(&QUERIES, snap.queries);
    e.counter(&RECEIVED, snap.client_received_bytes);
    e.counter(&SENT, snap.client_sent_bytes);
    e.counter(&OPENED, snap.server_opened);
    e.counter(&CONNECT_FAILURES, snap.server_connect_failures);
    e.counter_family(&CLOSED, &snap.server_closed);
    e.counter_family(&PINS, &snap.pins);
    e.counter(&CANCELS, snap.cancels);
    e.counter_family(&TOO_MANY, &snap.too_many);
    e.counter(&PARSES, snap.statement_parses);
    e.counter(&CACHE_HITS, snap.statement_cache_hits);
    e.counter(&EVICTIONS, snap.statement_evictions);
    e.counter_family(&RELOADS, &snap.reloads);
    e.counter_family(&READER_FALLBACKS, &snap.reader_fallbacks);
    e.gauge_family(&CLIENTS, &snap.clients);
    e.gauge_family(&SERVERS, &snap.servers);
    e.gauge(&PINNED, snap.pinned_clients);
    e.gauge(&LIMIT, snap.pool_limit);
    e.gauge(&BUDGET, snap.pool_budget);
    e.gauge(&FLEET, snap.fleet_instances);
    e.gauge(&ACTIVE_LIMIT, snap.active_limit);
    e.gauge(&ACTIVE_WAITING, snap.active_waiting);
    e.histogram(&SERVER_WAIT, &snap.server_wait);
    e.histogram(&XACT_TIME, &snap.transaction_time);
    e.histogram(&QUERY_TIME, &snap.query_time);
    e.histogram(&CONNECT_TIME, &snap.server_connect_time);
}

#[cfg(test)]
#[path = "catalog_tests.rs"]
mod tests;
