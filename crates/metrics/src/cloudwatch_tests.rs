//! The CloudWatch mapping: RDS Proxy's names and units, deltas between flushes, latency arrays.

use serde_json::Value;

use super::*;
use crate::catalog::{Metrics, PinReason};

fn find<'a>(metrics: &'a [EmfMetric], name: &str) -> &'a EmfMetric {
    metrics.iter().find(|m| m.name == name).unwrap_or_else(|| panic!("{name} missing"))
}

fn single(metrics: &[EmfMetric], name: &str) -> f64 {
    match find(metrics, name).value {
        EmfValue::Single(v) => v,
        ref other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn counters_are_deltas_and_gauges_are_current() {
    let m = Metrics::new();
    (0..10).for_each(|_| m.queries.inc());
    m.servers.set(ServerState::Active, 2);
    m.servers.set(ServerState::Idle, 3);
    m.servers.set(ServerState::Opening, 1);
    m.servers.set(ServerState::Control, 1);
    let first = m.snapshot();
    (0..4).for_each(|_| m.queries.inc());
    m.pins.inc(PinReason::AdvisoryLock);
    let metrics = cloudwatch_metrics(&m.snapshot(), &first, 100);
    assert_eq!(single(&metrics, "QueryRequests"), 4.0);
    assert_eq!(single(&metrics, "SessionPins"), 1.0);
    assert_eq!(
        single(&metrics, "DatabaseConnections"),
        7.0,
        "every connection the database sees: lent, idle, logging in, and pgmux's control connection"
    );
    assert_eq!(single(&metrics, "DatabaseConnectionsCurrentlyBorrowed"), 2.0);
    let all = cloudwatch_metrics(&m.snapshot(), &Default::default(), 100);
    assert_eq!(single(&all, "QueryRequests"), 14.0, "first flush: everything since start");
}

#[test]
fn rds_proxy_names_carry_rds_proxy_units() {
    let metrics = cloudwatch_metrics(&Metrics::new().snapshot(), &Default::default(), 100);
    for name in RDS_PROXY_NAMES {
        let want = if name.ends_with("Latency") { EmfUnit::Microseconds } else { EmfUnit::Count };
        assert_eq!(find(&metrics, name).unit, want, "{name}");
    }
    let mut names: Vec<&str> = metrics.iter().map(|m| m.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), metrics.len(), "no name twice");
}

#[test]
fn latencies_are_sent_as_whole_microsecond_values() {
    let m = Metrics::new();
    let before = m.snapshot();
    for us in 1..=5_000u64 {
        m.query_time.record(us);
    }
    let metrics = cloudwatch_metrics(&m.snapshot(), &before, 1_000);
    let EmfValue::Values(values) = &find(&metrics, "QueryDatabaseResponseLatency").value else { panic!() };
    assert_eq!(values.len(), 1_000);
    assert!(values.iter().all(|v| v.fract() == 0.0));
    let p50 = values[499];
    assert!((p50 - 2_500.0).abs() / 2_500.0 < 0.125, "{p50}");
    let EmfValue::Values(none) = &find(&metrics, "TransactionLatency").value else { panic!() };
    assert!(none.is_empty());
}

#[test]
fn a_flush_is_valid_emf_split_to_the_limits() {
    let m = Metrics::new();
    let before = m.snapshot();
    for us in 0..3_000u64 {
        m.server_wait.record(us);
        m.query_time.record(us * 3);
    }
    let lines = cloudwatch_lines(&m.snapshot(), &before, "pgmux", "orders", 1_700_000_000_000, 1_000).unwrap();
    // 1000 values of two latencies: 10 documents, the first also holding every single-valued metric.
    assert_eq!(lines.len(), 10);
    let mut sent = 0;
    for line in &lines {
        let doc: Value = serde_json::from_str(line).unwrap();
        assert_eq!(doc["FunctionName"], "orders");
        assert_eq!(doc["_aws"]["CloudWatchMetrics"][0]["Namespace"], "pgmux");
        assert_eq!(doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"], serde_json::json!([["FunctionName"]]));
        sent += doc.get("QueryDatabaseResponseLatency").map_or(0, |v| v.as_array().unwrap().len());
    }
    assert_eq!(sent, 1_000);
}
