//! pgmux's metrics as CloudWatch sees them: RDS Proxy's metric names and units where RDS Proxy has the
//! same measure (so dashboards and alarms carry over), pgmux's own names otherwise. Gauges are sent as
//! they are now; counters as what happened since the previous flush; latencies as arrays of values, so
//! that CloudWatch computes true percentiles (it cannot from an average).
//!
//! Latency arrays come from histogram buckets: every value when there were few, else `max_values` values at
//! evenly spaced ranks (see [`HistogramSnapshot::representative_values`]). Their percentiles are those of
//! the real latencies within the histogram's 12.5 % bound (and 1/max_values of rank); their SampleCount
//! and Sum are of the values sent, so the counts come from the counter metrics (`QueryRequests`, ...).

use crate::catalog::{ClientState, LoginResult, ServerState, Snapshot, value_of};
use crate::emf::{EmfError, EmfMetric, EmfTarget, EmfUnit, EmfValue, emf_lines};
use crate::histogram::HistogramSnapshot;

/// Latency values sent per metric per flush unless told otherwise: enough for p99.9 to mean something.
pub const DEFAULT_MAX_LATENCY_VALUES: usize = 1_000;

/// The EMF metrics of one flush: `now` against `previous`, the snapshot of the last flush (a default
/// snapshot for the first).
pub fn cloudwatch_metrics(now: &Snapshot, previous: &Snapshot, max_latency_values: usize) -> Vec<EmfMetric> {
    let mut metrics = gauges(now);
    metrics.extend(counters(now, previous));
    let latency = |name, now: &HistogramSnapshot, before: &HistogramSnapshot| {
        let values = now.delta(before).representative_values(max_latency_values);
        EmfMetric {
            name,
            unit: EmfUnit::Microseconds,
            value: EmfValue::Values(values.iter().map(|v| v.round()).collect()),
        }
    };
    let (c, b) = (now, previous);
    metrics.extend([
        latency("DatabaseConnectionsBorrowLatency", &c.server_wait, &b.server_wait),
        latency("QueryDatabaseResponseLatency", &c.query_time, &b.query_time),
        latency("TransactionLatency", &c.transaction_time, &b.transaction_time),
        latency("DatabaseConnectionSetupLatency", &c.server_connect_time, &b.server_connect_time),
    ]);
    metrics
}

/// The gauges, as they are in `c`.
fn gauges(c: &Snapshot) -> Vec<EmfMetric> {
    let gauge = |name, v: i64| EmfMetric { name, unit: EmfUnit::Count, value: EmfValue::Single(v as f64) };
    let servers = |state| value_of(&c.servers, state);
    vec![
        gauge("ClientConnections", c.clients.iter().map(|(_, v)| *v).sum()),
        gauge("ClientConnectionsWaiting", value_of(&c.clients, ClientState::Waiting)),
        // Every connection pgmux holds, as RDS Proxy counts its own and as max_connections sees them: the
        // pool's (opening ones too) and pgmux's own (control connection, probes).
        gauge(
            "DatabaseConnections",
            servers(ServerState::Active)
                + servers(ServerState::Idle)
                + servers(ServerState::Opening)
                + servers(ServerState::Control),
        ),
        gauge("DatabaseConnectionsCurrentlyBorrowed", servers(ServerState::Active)),
        gauge("DatabaseConnectionsCurrentlySessionPinned", c.pinned_clients),
        gauge("MaxDatabaseConnectionsAllowed", c.pool_limit),
        gauge("DatabaseConnectionsBudget", c.pool_budget),
        gauge("FleetInstances", c.fleet_instances),
        gauge("MaxActiveDatabaseConnections", c.active_limit),
        gauge("ClientConnectionsWaitingForActiveLimit", c.active_waiting),
    ]
}

/// The counters, as what happened between `b` and `c`.
fn counters(c: &Snapshot, b: &Snapshot) -> Vec<EmfMetric> {
    let delta = |name, unit, now: u64, before: u64| EmfMetric {
        name,
        unit,
        value: EmfValue::Single(now.saturating_sub(before) as f64),
    };
    let logins = |s: &Snapshot, r| value_of(&s.client_logins, r);
    vec![
        delta("ClientConnectionsReceived", EmfUnit::Count, total(&c.client_logins), total(&b.client_logins)),
        delta(
            "ClientConnectionsSetupSucceeded",
            EmfUnit::Count,
            logins(c, LoginResult::Accepted),
            logins(b, LoginResult::Accepted),
        ),
        delta(
            "ClientConnectionsSetupFailedAuth",
            EmfUnit::Count,
            logins(c, LoginResult::AuthFailed),
            logins(b, LoginResult::AuthFailed),
        ),
        delta(
            "ClientConnectionsRefused",
            EmfUnit::Count,
            logins(c, LoginResult::Refused),
            logins(b, LoginResult::Refused),
        ),
        delta(
            "DatabaseConnectionRequests",
            EmfUnit::Count,
            c.server_opened + c.server_connect_failures,
            b.server_opened + b.server_connect_failures,
        ),
        delta("DatabaseConnectionsSetupSucceeded", EmfUnit::Count, c.server_opened, b.server_opened),
        delta("DatabaseConnectionsSetupFailed", EmfUnit::Count, c.server_connect_failures, b.server_connect_failures),
        delta("DatabaseConnectionsClosed", EmfUnit::Count, total(&c.server_closed), total(&b.server_closed)),
        delta("QueryRequests", EmfUnit::Count, c.queries, b.queries),
        delta("Transactions", EmfUnit::Count, c.transactions, b.transactions),
        delta("ClientBytesReceived", EmfUnit::Bytes, c.client_received_bytes, b.client_received_bytes),
        delta("ClientBytesSent", EmfUnit::Bytes, c.client_sent_bytes, b.client_sent_bytes),
        delta("SessionPins", EmfUnit::Count, total(&c.pins), total(&b.pins)),
        delta("CancelRequests", EmfUnit::Count, c.cancels, b.cancels),
        delta("TooManyConnectionsErrors", EmfUnit::Count, total(&c.too_many), total(&b.too_many)),
        delta("StatementParses", EmfUnit::Count, c.statement_parses, b.statement_parses),
        delta("StatementCacheHits", EmfUnit::Count, c.statement_cache_hits, b.statement_cache_hits),
        delta("StatementEvictions", EmfUnit::Count, c.statement_evictions, b.statement_evictions),
    ]
}

/// The sum over a family's label values.
fn total<L>(values: &[(L, u64)]) -> u64 {
    values.iter().map(|(_, v)| *v).sum()
}

/// The EMF lines of one flush for `namespace` with the dimension `FunctionName`.
pub fn cloudwatch_lines(
    now: &Snapshot,
    previous: &Snapshot,
    namespace: &str,
    function_name: &str,
    timestamp_ms: u64,
    max_latency_values: usize,
) -> Result<Vec<String>, EmfError> {
    let target = EmfTarget {
        namespace: namespace.to_owned(),
        dimensions: vec![("FunctionName".to_owned(), function_name.to_owned())],
        timestamp_ms,
    };
    emf_lines(&target, &cloudwatch_metrics(now, previous, max_latency_values))
}

/// The names [`cloudwatch_metrics`] uses that are RDS Proxy's own (observability.md §4.3).
pub const RDS_PROXY_NAMES: [&str; 14] = [
    "ClientConnections",
    "DatabaseConnections",
    "DatabaseConnectionsCurrentlyBorrowed",
    "DatabaseConnectionsCurrentlySessionPinned",
    "MaxDatabaseConnectionsAllowed",
    "ClientConnectionsReceived",
    "ClientConnectionsSetupSucceeded",
    "ClientConnectionsSetupFailedAuth",
    "DatabaseConnectionRequests",
    "DatabaseConnectionsSetupSucceeded",
    "DatabaseConnectionsSetupFailed",
    "QueryRequests",
    "DatabaseConnectionsBorrowLatency",
    "QueryDatabaseResponseLatency",
];

#[cfg(test)]
#[path = "cloudwatch_tests.rs"]
mod tests;
