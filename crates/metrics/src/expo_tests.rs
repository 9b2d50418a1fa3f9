//! Golden text for both dialects, escaping, and content negotiation.

use super::*;

crate::label_enum! {
    enum Why: "reason" {
        Idle => "idle_timeout",
        Broken => "broken",
    }
}

const OPENED: Desc = Desc::new("pgmux_server_connections_opened", "Server connections opened.", Unit::None);
const CLOSED: Desc = Desc::new("pgmux_server_connections_closed", "Server connections closed, by reason.", Unit::None);
const SENT: Desc = Desc::new("pgmux_client_sent_bytes", "Bytes sent to clients.", Unit::Bytes);
const CLIENTS: Desc = Desc::new("pgmux_clients", "Client connections \\ \"now\"\nby state.", Unit::None);
const WAIT: Desc = Desc::new("pgmux_server_wait_seconds", "Time waited for a server connection.", Unit::Seconds);

fn render(format: Format) -> String {
    let mut e = Encoder::new(format).with_created(1_700_000_000.5);
    e.counter(&OPENED, 3);
    e.counter_family(&CLOSED, &[(Why::Idle, 2), (Why::Broken, 0)]);
    e.counter(&SENT, 1024);
    e.gauge_samples(&CLIENTS, &[(&[("state", "a\"b\\c\nd")], -1)]);
    e.histogram(&WAIT, &HistogramSnapshot::from_values([5, 20, 1_500_000]));
    e.finish()
}

/// Every line of `text` that is not a bucket line with zero cumulative change (to keep goldens short).
fn without_buckets(text: &str) -> String {
    /// A histogram bucket's series: its name ends in `_bucket`, its labels follow (the brace written as an
    /// escape, so that tools counting braces in the source are not misled).
    const BUCKET: &str = "_bucket\u{7b}";
    text.lines().filter(|l| !l.contains(BUCKET)).map(|l| format!("{l}\n")).collect()
}

#[test]
fn prometheus_text_golden() {
    let text = render(Format::Prometheus);
    assert_eq!(
        without_buckets(&text),
        "\
# HELP pgmux_server_connections_opened_total Server connections opened.
# TYPE pgmux_server_connections_opened_total counter
pgmux_server_connections_opened_total 3
# HELP pgmux_server_connections_closed_total Server connections closed, by reason.
# TYPE pgmux_server_connections_closed_total counter
pgmux_server_connections_closed_total{reason=\"idle_timeout\"} 2
pgmux_server_connections_closed_total{reason=\"broken\"} 0
# HELP pgmux_client_sent_bytes_total Bytes sent to clients.
# TYPE pgmux_client_sent_bytes_total counter
pgmux_client_sent_bytes_total 1024
# HELP pgmux_clients Client connections \\\\ \"now\"\\nby state.
# TYPE pgmux_clients gauge
pgmux_clients{state=\"a\\\"b\\\\c\\nd\"} -1
# HELP pgmux_server_wait_seconds Time waited for a server connection.
# TYPE pgmux_server_wait_seconds histogram
pgmux_server_wait_seconds_sum 1.500025
pgmux_server_wait_seconds_count 3
"
    );
    assert!(!text.contains("# EOF") && !text.contains("_created") && !text.contains("# UNIT"));
}

#[test]
fn openmetrics_text_golden() {
    let text = render(Format::OpenMetrics);
    assert_eq!(
        without_buckets(&text),
        "\
# TYPE pgmux_server_connections_opened counter
# HELP pgmux_server_connections_opened Server connections opened.
pgmux_server_connections_opened_total 3
pgmux_server_connections_opened_created 1700000000.5
# TYPE pgmux_server_connections_closed counter
# HELP pgmux_server_connections_closed Server connections closed, by reason.
pgmux_server_connections_closed_total{reason=\"idle_timeout\"} 2
pgmux_server_connections_closed_created{reason=\"idle_timeout\"} 1700000000.5
pgmux_server_connections_closed_total{reason=\"broken\"} 0
pgmux_server_connections_closed_created{reason=\"broken\"} 1700000000.5
# TYPE pgmux_client_sent_bytes counter
# UNIT pgmux_client_sent_bytes bytes
# HELP pgmux_client_sent_bytes Bytes sent to clients.
pgmux_client_sent_bytes_total 1024
pgmux_client_sent_bytes_created 1700000000.5
# TYPE pgmux_clients gauge
# HELP pgmux_clients Client connections \\\\ \\\"now\\\"\\nby state.
pgmux_clients{state=\"a\\\"b\\\\c\\nd\"} -1
# TYPE pgmux_server_wait_seconds histogram
# UNIT pgmux_server_wait_seconds seconds
# HELP pgmux_server_wait_seconds Time waited for a server connection.
pgmux_server_wait_seconds_sum 1.500025
pgmux_server_wait_seconds_count 3
pgmux_server_wait_seconds_created 1700000000.5
# EOF
"
    );
}

#[test]
fn histogram_buckets_are_cumulative_in_seconds() {
    let text = render(Format::Prometheus);
    let buckets: Vec<&str> = text.lines().filter(|l| l.starts_with("pgmux_server_wait_seconds_bucket")).collect();
    assert_eq!(buckets.len(), PROMETHEUS_BOUNDS_US.len() + 1);
    assert_eq!(buckets[0], "pgmux_server_wait_seconds_bucket{le=\"0.000016\"} 1");
    assert_eq!(buckets[1], "pgmux_server_wait_seconds_bucket{le=\"0.000032\"} 2");
    assert!(buckets.contains(&"pgmux_server_wait_seconds_bucket{le=\"1.048576\"} 2"));
    assert!(buckets.contains(&"pgmux_server_wait_seconds_bucket{le=\"2.097152\"} 3"));
    assert_eq!(buckets[29], "pgmux_server_wait_seconds_bucket{le=\"+Inf\"} 3");
    assert_eq!(buckets[28], "pgmux_server_wait_seconds_bucket{le=\"4294.967296\"} 3");
}

#[test]
fn accept_header_chooses_the_format() {
    let prometheus_2 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,\
                        text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    assert_eq!(Format::from_accept(Some(prometheus_2)), Format::OpenMetrics);
    assert_eq!(Format::from_accept(Some("application/openmetrics-text; version=\"1.0.0\"")), Format::OpenMetrics);
    assert_eq!(Format::from_accept(Some("application/openmetrics-text")), Format::OpenMetrics);
    assert_eq!(Format::from_accept(Some("text/plain;version=0.0.4")), Format::Prometheus);
    assert_eq!(Format::from_accept(Some("*/*")), Format::Prometheus);
    assert_eq!(Format::from_accept(None), Format::Prometheus);
    assert_eq!(Format::from_accept(Some("")), Format::Prometheus);
    assert_eq!(Format::from_accept(Some("application/openmetrics-text;q=0")), Format::Prometheus);
    assert_eq!(Format::from_accept(Some("application/openmetrics-text;version=2.0.0")), Format::Prometheus);
    assert_eq!(
        Format::from_accept(Some("text/plain;q=0.9, application/openmetrics-text;q=0.5")),
        Format::Prometheus,
        "plain text preferred"
    );
    assert_eq!(Format::from_accept(Some(";;;,,q=,\u{0}\u{fffd}")), Format::Prometheus, "garbage is plain text");
    assert!(Format::OpenMetrics.content_type().starts_with("application/openmetrics-text; version=1.0.0"));
    assert!(Format::Prometheus.content_type().starts_with("text/plain; version=0.0.4"));
}

#[test]
fn names_are_checked() {
    for (bad, rule) in [
        (Desc::new("transactions", "x", Unit::None), NameRule::Prefix),
        (Desc::new("pgmux_Transactions", "x", Unit::None), NameRule::SnakeCase),
        (Desc::new("pgmux_transactions_total", "x", Unit::None), NameRule::ReservedSuffix),
        (Desc::new("pgmux_wait_ms", "x", Unit::Seconds), NameRule::Unit),
        (Desc::new("pgmux_x_gauge", "x", Unit::None), NameRule::NamesType),
        (Desc::new("pgmux_a:b", "x", Unit::None), NameRule::SnakeCase),
        (Desc::new("pgmux_x", "", Unit::None), NameRule::Help),
    ] {
        assert_eq!(bad.check(), Err(NameError { name: bad.name, rule }), "{bad:?}");
    }
    let err = Desc::new("pgmux_wait_ms", "x", Unit::Seconds).check().unwrap_err();
    assert_eq!(err.to_string(), "metric name \"pgmux_wait_ms\": must end in its unit");
    for good in [OPENED, CLOSED, SENT, CLIENTS, WAIT] {
        assert_eq!(good.check(), Ok(()));
    }
}

#[test]
fn floats_never_use_exponents() {
    assert_eq!(float(0.000016), "0.000016");
    assert_eq!(float(1e21), "1000000000000000000000");
    assert_eq!(float(f64::INFINITY), "+Inf");
    assert_eq!(float(f64::NEG_INFINITY), "-Inf");
    assert_eq!(float(f64::NAN), "NaN");
}
