//! The catalogue: names that pass the rules, every metric in the text, snapshots and latency rows.

use std::collections::HashSet;

use super::*;
use crate::Label;

fn busy() -> Metrics {
    let m = Metrics::new();
    m.client_logins.inc(LoginResult::Accepted);
    m.client_logins.inc(LoginResult::AuthFailed);
    (0..3).for_each(|_| m.transactions.inc());
    (0..5).for_each(|_| m.queries.inc());
    m.client_received_bytes.add(100);
    m.client_sent_bytes.add(2_000);
    m.server_opened.inc();
    m.server_closed.inc(ServerCloseReason::IdleTimeout);
    m.pins.inc(PinReason::Listen);
    m.too_many.inc(TooManyCause::QueryWaitTimeout);
    m.clients.inc(ClientState::Idle);
    m.servers.inc(ServerState::Idle);
    m.pool_limit.set(20);
    for us in [10, 200, 3_000] {
        m.server_wait.record(us);
        m.transaction_time.record(us * 10);
        m.query_time.record(us * 5);
    }
    m.server_connect_time.record(4_000);
    m
}

#[test]
fn every_name_follows_the_rules_and_is_unique() {
    let mut seen = HashSet::new();
    for d in DESCS {
        assert_eq!(d.check(), Ok(()));
        // OpenMetrics reserves the family name plus its type's suffixes: none may collide.
        for suffix in ["", "_total", "_created", "_bucket", "_sum", "_count"] {
            assert!(seen.insert(format!("{}{suffix}", d.name)), "{}{suffix} collides", d.name);
        }
    }
}

#[test]
fn the_text_has_every_metric_and_every_label_value() {
    let snap = busy().snapshot();
    for format in [Format::Prometheus, Format::OpenMetrics] {
        let text = render(&snap, format, Some(1_700_000_000.0));
        for d in DESCS {
            assert!(text.contains(&format!(" {}", d.name)), "{format:?}: {} missing", d.name);
        }
        for l in ServerCloseReason::ALL {
            assert!(text.contains(&format!("pgmux_server_connections_closed_total{{reason=\"{}\"}}", l.as_str())));
        }
        assert!(text.contains("pgmux_transactions_total 3\n"));
        assert!(text.contains("pgmux_client_logins_total{result=\"auth_failed\"} 1\n"));
        assert!(text.contains("pgmux_clients{state=\"idle\"} 1\n"));
        assert!(text.contains("pgmux_pool_limit 20\n"));
        assert!(text.contains("pgmux_server_wait_seconds_count 3\n"));
        assert!(text.contains("pgmux_server_wait_seconds_sum 0.00321\n"));
        assert!(text.contains(&format!("pgmux_build_info{{version=\"{}\"}} 1\n", env!("CARGO_PKG_VERSION"))));
    }
}

#[test]
fn snapshot_reads_every_field() {
    let s = busy().snapshot();
    assert_eq!((s.transactions, s.queries, s.client_received_bytes, s.client_sent_bytes), (3, 5, 100, 2_000));
    assert_eq!(value_of(&s.client_logins, LoginResult::Accepted), 1);
    assert_eq!(value_of(&s.too_many, TooManyCause::QueryWaitTimeout), 1);
    assert_eq!(s.query_time.count(), 3);
    assert_eq!(s.transaction_time.sum_us(), 32_100);
}

#[test]
fn latency_report_has_both_windows_of_every_latency() {
    let m = busy();
    m.tick(Duration::from_secs(0));
    // After the tick at 0 s, only these reach the last-minute window.
    m.query_time.record(70_000);
    let rows = m.latency_report(Duration::from_secs(30));
    assert_eq!(rows.len(), 8);
    let row = |l, w| rows.iter().find(|r| r.latency == l && r.window == w).unwrap();
    let last = row(Latency::Query, "last_minute");
    assert_eq!((last.count, last.covers), (1, Duration::from_secs(30)));
    let p50 = last.p50_us.unwrap();
    assert!((61_250.0..78_750.0).contains(&p50), "{p50}");
    let total = row(Latency::Query, "since_start");
    assert_eq!(total.count, 4);
    assert!(total.p999_us.unwrap() >= total.p50_us.unwrap());
    assert_eq!(row(Latency::ServerConnect, "last_minute").count, 0);
    assert_eq!(row(Latency::ServerConnect, "last_minute").p50_us, None);
}

#[test]
fn a_snapshot_takes_another_s_gauges_and_keeps_its_own_counters() {
    let before = busy().snapshot();
    let drained = {
        let m = busy();
        m.transactions.inc();
        m.servers.dec(ServerState::Idle);
        m.snapshot()
    };
    let last = drained.clone().with_gauges_of(&before);
    assert_eq!(last.transactions, 4, "counters as they ended");
    assert_eq!(value_of(&last.servers, ServerState::Idle), 1, "gauges as they were before the drain");
    assert_eq!(value_of(&drained.servers, ServerState::Idle), 0);
    assert_eq!((last.pool_limit, last.clients.clone()), (before.pool_limit, before.clients.clone()));
}
