//! pgmux-metrics' text against the real readers: `promtool check metrics` (Debian's prometheus 2.42) must
//! print nothing, and prometheus-client (PyPI) must read both formats back to the values recorded. The
//! `/metrics` endpoint of a running pgmux gets the same checks under load once it is wired (ignored until
//! then).

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use pgmux_metrics::{
    ClientState, Desc, Encoder, Format, Label, Latency, LoginResult, Metrics, PROMETHEUS_BOUNDS_US, PinReason,
    ReaderFallbackOutcome, ReaderSample, ReloadResult, ServerCloseReason, ServerState, Snapshot, TooManyCause, Unit,
    encode_all, encode_readers,
};
use pgmux_observability_tests::pgmux::Pgmux;
use pgmux_observability_tests::tools::tools;
use pgmux_observability_tests::{http, python, series, workload};
use pgmux_testkit::{APP_USER, DATABASE, PgServer};
use serde_json::Value;

/// A label value with everything that needs escaping, to see it come back whole.
const HOSTILE: &str = "q\"uote \\back\\slash\nnew line é ☃";
const ESCAPES: Desc =
    Desc::new("pgmux_escape_check", "A gauge whose label needs \"escaping\" \\ and\na newline.", Unit::None);
const CREATED: f64 = 1_700_000_000.25;

/// Every metric with a value of its own, every histogram over a wide range (zero, tiny, huge, past the
/// last bucket).
fn populated() -> Metrics {
    let m = Metrics::new();
    for (i, r) in LoginResult::ALL.iter().enumerate() {
        m.client_logins.add(*r, 7 + i as u64);
    }
    m.transactions.add(60);
    m.queries.add(90);
    m.client_received_bytes.add(12_345);
    m.client_sent_bytes.add(678_901);
    m.server_opened.add(3);
    m.server_connect_failures.add(1);
    ServerCloseReason::ALL.iter().enumerate().for_each(|(i, r)| m.server_closed.add(*r, i as u64));
    PinReason::ALL.iter().enumerate().for_each(|(i, r)| m.pins.add(*r, 2 * i as u64));
    m.cancels.add(4);
    TooManyCause::ALL.iter().enumerate().for_each(|(i, c)| m.too_many.add(*c, 10 + i as u64));
    m.statement_parses.add(11);
    m.statement_cache_hits.add(9);
    m.statement_evictions.add(1);
    m.reloads.add(ReloadResult::Ok, 2);
    m.reloads.add(ReloadResult::Failed, 1);
    ReaderFallbackOutcome::ALL.iter().enumerate().for_each(|(i, o)| m.reader_fallbacks.add(*o, 5 + i as u64));
    m.clients.set(ClientState::Active, 3);
    m.clients.set(ClientState::Waiting, 1);
    m.clients.set(ClientState::Idle, 5);
    m.servers.set(ServerState::Active, 2);
    m.servers.set(ServerState::Idle, -1); // a gauge may dip below zero for a moment; it must still parse
    m.pinned_clients.set(1);
    m.pool_limit.set(20);
    m.pool_budget.set(80);
    m.fleet_instances.set(3);
    m.active_limit.set(8);
    m.active_waiting.set(2);
    for (n, latency) in Latency::ALL.iter().enumerate() {
        let h = m.histogram(*latency);
        for v in [0, 3, 15, 16, 17, 250, 999, 4_096, 1_000_000, 70_000_000, u64::MAX / 4] {
            h.record(v + n as u64);
        }
    }
    m
}

/// Two reader instances of a reader route, as `/metrics` writes them beside the catalogue.
fn readers() -> Vec<ReaderSample> {
    let sample = |instance: &str, transactions, in_rotation, lag_seconds| ReaderSample {
        database: "app_ro".into(),
        instance: instance.into(),
        transactions,
        in_rotation,
        lag_seconds,
    };
    vec![sample("reader-1", 41, true, 0.02), sample("10.0.0.7:5432", 0, false, 5.5)]
}

/// The registry's text: the catalogue, the per-reader families, and a gauge with a label that needs escaping.
fn render(snap: &Snapshot, format: Format) -> String {
    let mut e = Encoder::new(format).with_created(CREATED);
    encode_all(&mut e, snap);
    encode_readers(&mut e, &readers());
    e.gauge_samples(&ESCAPES, &[(&[("value", HOSTILE)], 42)]);
    e.finish()
}

type Key = (String, BTreeMap<String, String>);

fn key(name: &str, labels: &[(&str, &str)]) -> Key {
    (name.to_owned(), labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect())
}

/// What the text must hold, worked out from the snapshot and the names issue 12 fixes, not from the
/// encoder.
fn expected(s: &Snapshot) -> BTreeMap<Key, f64> {
    fn put(want: &mut BTreeMap<Key, f64>, name: &str, labels: &[(&str, &str)], v: f64) {
        want.insert(key(name, labels), v);
    }
    fn family<L: Label>(want: &mut BTreeMap<Key, f64>, name: &str, values: impl Iterator<Item = (L, f64)>) {
        for (l, v) in values {
            put(want, name, &[(L::NAME, l.as_str())], v);
        }
    }
    let mut want = BTreeMap::new();
    put(&mut want, "pgmux_build_info", &[("version", env!("CARGO_PKG_VERSION"))], 1.0);
    put(&mut want, "pgmux_escape_check", &[("value", HOSTILE)], 42.0);
    for (name, v) in [
        ("pgmux_transactions_total", s.transactions),
        ("pgmux_queries_total", s.queries),
        ("pgmux_client_received_bytes_total", s.client_received_bytes),
        ("pgmux_client_sent_bytes_total", s.client_sent_bytes),
        ("pgmux_server_connections_opened_total", s.server_opened),
        ("pgmux_server_connect_failures_total", s.server_connect_failures),
        ("pgmux_cancel_requests_total", s.cancels),
        ("pgmux_statement_parses_total", s.statement_parses),
        ("pgmux_statement_cache_hits_total", s.statement_cache_hits),
        ("pgmux_statement_evictions_total", s.statement_evictions),
    ] {
        put(&mut want, name, &[], v as f64);
    }
    for (name, v) in [
        ("pgmux_pinned_clients", s.pinned_clients),
        ("pgmux_pool_limit", s.pool_limit),
        ("pgmux_pool_budget", s.pool_budget),
        ("pgmux_fleet_instances", s.fleet_instances),
        ("pgmux_active_servers_limit", s.active_limit),
        ("pgmux_active_servers_waiting_clients", s.active_waiting),
    ] {
        put(&mut want, name, &[], v as f64);
    }
    family(&mut want, "pgmux_client_logins_total", s.client_logins.iter().map(|v| (v.0, v.1 as f64)));
    family(&mut want, "pgmux_server_connections_closed_total", s.server_closed.iter().map(|v| (v.0, v.1 as f64)));
    family(&mut want, "pgmux_pins_total", s.pins.iter().map(|v| (v.0, v.1 as f64)));
    family(&mut want, "pgmux_too_many_connections_errors_total", s.too_many.iter().map(|v| (v.0, v.1 as f64)));
    family(&mut want, "pgmux_reloads_total", s.reloads.iter().map(|v| (v.0, v.1 as f64)));
    family(&mut want, "pgmux_reader_fallbacks_total", s.reader_fallbacks.iter().map(|v| (v.0, v.1 as f64)));
    for r in readers() {
        let labels = [("database", r.database.as_str()), ("instance", r.instance.as_str())];
        put(&mut want, "pgmux_reader_transactions_total", &labels, r.transactions as f64);
        put(&mut want, "pgmux_reader_in_rotation", &labels, f64::from(u8::from(r.in_rotation)));
        put(&mut want, "pgmux_reader_lag_seconds", &labels, r.lag_seconds);
    }
    family(&mut want, "pgmux_clients", s.clients.iter().map(|v| (v.0, v.1 as f64)));
    family(&mut want, "pgmux_server_connections", s.servers.iter().map(|v| (v.0, v.1 as f64)));
    for (name, h) in [
        ("pgmux_server_wait_seconds", &s.server_wait),
        ("pgmux_transaction_duration_seconds", &s.transaction_time),
        ("pgmux_query_duration_seconds", &s.query_time),
        ("pgmux_server_connect_duration_seconds", &s.server_connect_time),
    ] {
        let bucket = format!("{name}_bucket");
        for b in PROMETHEUS_BOUNDS_US {
            put(&mut want, &bucket, &[("le", &format!("{}", b as f64 / 1e6))], h.count_below(b) as f64);
        }
        put(&mut want, &bucket, &[("le", "+Inf")], h.count() as f64);
        put(&mut want, &format!("{name}_sum"), &[], h.sum_us() as f64 / 1e6);
        put(&mut want, &format!("{name}_count"), &[], h.count() as f64);
    }
    want
}

/// prometheus-client's reading of `text`: every sample with its value, and each family's (type, unit).
fn parse_with_prometheus_client(format: &str, text: &str) -> (BTreeMap<Key, f64>, BTreeMap<String, (String, String)>) {
    let out: Value =
        serde_json::from_str(&python::run("prom_parse.py", &[format], text)).expect("JSON from prom_parse.py");
    let (mut samples, mut families) = (BTreeMap::new(), BTreeMap::new());
    for f in out["families"].as_array().expect("families") {
        let name = f["name"].as_str().unwrap_or_default().to_owned();
        families.insert(
            name,
            (f["type"].as_str().unwrap_or_default().into(), f["unit"].as_str().unwrap_or_default().into()),
        );
        for s in f["samples"].as_array().expect("samples") {
            let labels = s["labels"].as_object().expect("labels");
            let labels: BTreeMap<String, String> =
                labels.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect();
            let value = s["value"].as_f64().unwrap_or(f64::NAN);
            let previous = samples.insert((s["name"].as_str().unwrap_or_default().to_owned(), labels), value);
            assert!(previous.is_none(), "{format}: a sample appears twice: {s}");
        }
    }
    (samples, families)
}

/// Runs `promtool check metrics` on `text`: (exit status, everything it printed).
fn promtool(text: &str) -> (bool, String) {
    let mut child = Command::new(&tools().promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write to promtool");
    let out = child.wait_with_output().expect("wait for promtool");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn promtool_finds_nothing_to_say_and_catches_a_bad_metric() {
    tools();
    let text = render(&populated().snapshot(), Format::Prometheus);
    let (ok, said) = promtool(&text);
    assert!(ok && said.is_empty(), "promtool check metrics: ok={ok}\n{said}");
    // Negative control: the same check on a counter without _total and without help must complain.
    let (ok, said) = promtool("# TYPE pgmux_things counter\npgmux_things 1\n");
    assert!(!ok && said.contains("_total"), "promtool accepted a bad counter: {said}");
}

#[test]
fn prometheus_client_reads_back_every_value_in_both_formats() {
    tools();
    let snap = populated().snapshot();
    let want = expected(&snap);
    for (format, arg) in [(Format::Prometheus, "prometheus"), (Format::OpenMetrics, "openmetrics")] {
        let text = render(&snap, format);
        let (mut got, families) = parse_with_prometheus_client(arg, &text);
        if format == Format::OpenMetrics {
            let created: Vec<Key> = got.keys().filter(|(n, _)| n.ends_with("_created")).cloned().collect();
            assert!(!created.is_empty(), "OpenMetrics has _created samples");
            for k in created {
                assert_eq!(got.remove(&k), Some(CREATED), "{k:?}");
            }
            assert_eq!(families["pgmux_server_wait_seconds"], ("histogram".to_owned(), "seconds".to_owned()));
            assert_eq!(families["pgmux_client_sent_bytes"], ("counter".to_owned(), "bytes".to_owned()));
        }
        assert_eq!(families["pgmux_transactions"].0, "counter", "{arg}");
        assert_eq!(families["pgmux_clients"].0, "gauge", "{arg}");
        let missing: Vec<&Key> = want.keys().filter(|k| !got.contains_key(*k)).collect();
        let extra: Vec<&Key> = got.keys().filter(|k| !want.contains_key(*k)).collect();
        assert!(missing.is_empty() && extra.is_empty(), "{arg}: missing {missing:?}\nextra {extra:?}");
        for (k, v) in &want {
            assert_eq!(got[k], *v, "{arg}: {k:?}");
        }
        // Our own reader agrees with prometheus-client on the 0.0.4 text (it reads the pgmux tests' scrapes).
        if format == Format::Prometheus {
            let ours = series::samples(&text).expect("our reader");
            assert_eq!(ours.len(), want.len());
        }
    }
}

#[test]
fn prometheus_client_refuses_what_the_strict_format_forbids() {
    tools();
    // Negative control for the OpenMetrics check: no # EOF.
    let text = render(&populated().snapshot(), Format::OpenMetrics);
    let (ok, _, err) = python::output("prom_parse.py", &["openmetrics"], text.trim_end_matches("# EOF\n"));
    assert!(!ok && err.contains("EOF"), "{err}");
}

/// What Prometheus 2.x sends: OpenMetrics preferred.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;\
                                 q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// pgmux with `metrics_listen`: `/metrics` scraped in both formats while a workload runs, each scrape
/// through promtool (nothing to say) and prometheus-client; afterwards the counters equal the workload,
/// `/healthz` answers 200 and other paths 404.
#[test]
fn metrics_endpoint_under_load_passes_promtool_and_prometheus_client() {
    tools();
    let pg = PgServer::start();
    let pgmux = Pgmux::start(&pg, true, "");
    let metrics = pgmux.metrics.expect("metrics_listen was set");
    let port = pgmux.addr.port();
    let load = std::thread::spawn(move || workload::run(port, APP_USER.user, Some(APP_USER.password), DATABASE));
    let mut scrapes = 0;
    while scrapes < 2 || (!load.is_finished() && scrapes < 40) {
        for (accept, format, arg) in
            [(None, Format::Prometheus, "prometheus"), (Some(PROMETHEUS_ACCEPT), Format::OpenMetrics, "openmetrics")]
        {
            let resp = http::get(metrics, "/metrics", accept).expect("GET /metrics");
            assert_eq!(resp.status, 200, "{}", resp.body);
            let content_type = resp.header("content-type").unwrap_or_default();
            assert_eq!(content_type, format.content_type(), "Accept: {accept:?}");
            if format == Format::Prometheus {
                let (ok, said) = promtool(&resp.body);
                assert!(ok && said.is_empty(), "promtool check metrics on /metrics: {said}");
            }
            parse_with_prometheus_client(arg, &resp.body);
        }
        scrapes += 1;
    }
    let sent = load.join().expect("the workload");
    let body = http::get(metrics, "/metrics", None).expect("GET /metrics").body;
    let samples = series::samples(&body).expect("readable /metrics");
    let value = |name: &str, labels: &[(&str, &str)]| series::value(&samples, name, labels);
    assert_eq!(value("pgmux_transactions_total", &[]), Some(sent.transactions as f64), "{body}");
    assert_eq!(value("pgmux_queries_total", &[]), Some(sent.queries as f64));
    assert_eq!(value("pgmux_client_logins_total", &[("result", "accepted")]), Some(sent.clients as f64));
    assert_eq!(value("pgmux_transaction_duration_seconds_count", &[]), Some(sent.transactions as f64));
    assert_eq!(value("pgmux_query_duration_seconds_count", &[]), Some(sent.queries as f64));
    assert!(value("pgmux_client_received_bytes_total", &[]).is_some_and(|b| b > 0.0));
    assert_eq!(http::get(metrics, "/healthz", None).expect("GET /healthz").status, 200);
    assert_eq!(http::get(metrics, "/nothing-here", None).expect("GET /nothing-here").status, 404);
}
