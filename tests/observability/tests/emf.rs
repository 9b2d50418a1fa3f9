//! pgmux-metrics' CloudWatch EMF lines against the specification (a JSON schema written from it, plus the
//! rules a schema cannot state) and against what AWS's own producer library, aws-embedded-metrics (PyPI),
//! writes for the same metrics.

use std::time::{SystemTime, UNIX_EPOCH};

use pgmux_metrics::{
    ClientState, EmfMetric, EmfValue, Latency, LoginResult, Metrics, PinReason, ServerState, Snapshot,
    cloudwatch_lines, cloudwatch_metrics,
};
use pgmux_observability_tests::tools::tools;
use pgmux_observability_tests::{crate_dir, python};
use serde_json::{Value, json};

const NAMESPACE: &str = "pgmux";
const FUNCTION: &str = "orders-api";
const MAX_LATENCY_VALUES: usize = 1_000;

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A minute of a busy pooler: enough latencies that the flush needs several documents.
fn busy_minute() -> (Snapshot, Snapshot) {
    let m = Metrics::new();
    let before = m.snapshot();
    m.client_logins.add(LoginResult::Accepted, 120);
    m.client_logins.add(LoginResult::AuthFailed, 2);
    m.queries.add(3_000);
    m.transactions.add(2_500);
    m.client_received_bytes.add(1 << 20);
    m.pins.inc(PinReason::Listen);
    m.clients.set(ClientState::Active, 4);
    m.clients.set(ClientState::Idle, 60);
    m.servers.set(ServerState::Active, 3);
    m.servers.set(ServerState::Idle, 2);
    m.pool_limit.set(20);
    for i in 0..3_000u64 {
        m.query_time.record(200 + (i * 7919) % 5_000);
        m.server_wait.record((i * 31) % 400);
    }
    for i in 0..2_500u64 {
        m.transaction_time.record(400 + (i * 104_729) % 20_000);
    }
    for i in 0..5u64 {
        m.histogram(Latency::ServerConnect).record(3_000 + i * 500);
    }
    (m.snapshot(), before)
}

/// The request emf_check.py reads: our lines and the metrics they came from.
fn request(lines: &[String], metrics: &[EmfMetric], timestamp_ms: u64) -> String {
    let metrics: Vec<Value> = metrics
        .iter()
        .map(|m| {
            let values = match &m.value {
                EmfValue::Single(v) => vec![*v],
                EmfValue::Values(v) => v.clone(),
            };
            json!({"name": m.name, "unit": m.unit.as_str(), "values": values})
        })
        .collect();
    json!({
        "lines": lines,
        "namespace": NAMESPACE,
        "dimensions": {"FunctionName": FUNCTION},
        "timestamp_ms": timestamp_ms,
        "metrics": metrics,
    })
    .to_string()
}

fn schema() -> String {
    crate_dir().join("emf.schema.json").display().to_string()
}

#[test]
fn emf_lines_follow_the_specification_and_match_aws_embedded_metrics() {
    tools();
    let (now, before) = busy_minute();
    let ts = now_ms();
    let metrics = cloudwatch_metrics(&now, &before, MAX_LATENCY_VALUES);
    let lines = cloudwatch_lines(&now, &before, NAMESPACE, FUNCTION, ts, MAX_LATENCY_VALUES).expect("EMF lines");
    assert!(lines.len() >= 10, "1000 values of a latency need 10 documents; got {}", lines.len());
    let out = python::run("emf_check.py", &[&schema()], &request(&lines, &metrics, ts));
    let summary: Value = serde_json::from_str(&out).expect("JSON summary");
    let sent: Vec<&EmfMetric> =
        metrics.iter().filter(|m| !matches!(&m.value, EmfValue::Values(v) if v.is_empty())).collect();
    assert_eq!(summary["metrics"], sent.len(), "{summary}");
    let values: usize = sent
        .iter()
        .map(|m| match &m.value {
            EmfValue::Single(_) => 1,
            EmfValue::Values(v) => v.len(),
        })
        .sum();
    assert_eq!(summary["values"], values, "{summary}");
    assert_eq!(summary["pgmux_documents"], lines.len());
}

/// Negative controls: documents the specification forbids must fail the check, each for its reason.
#[test]
fn the_check_refuses_what_the_specification_forbids() {
    tools();
    let (now, before) = busy_minute();
    let ts = now_ms();
    let good = cloudwatch_lines(&now, &before, NAMESPACE, FUNCTION, ts, 100).expect("EMF lines");
    let first: Value = serde_json::from_str(&good[0]).expect("a JSON document");
    let broken = |edit: &dyn Fn(&mut Value)| {
        let mut doc = first.clone();
        edit(&mut doc);
        doc.to_string()
    };
    let cases: Vec<(&str, String)> = vec![
        (
            "Namespace",
            broken(&|d| {
                d["_aws"]["CloudWatchMetrics"][0].as_object_mut().unwrap().remove("Namespace");
            }),
        ),
        ("AWS/", broken(&|d| d["_aws"]["CloudWatchMetrics"][0]["Namespace"] = json!("AWS/RDS"))),
        ("Timestamp", broken(&|d| d["_aws"]["Timestamp"] = json!("yesterday"))),
        ("outside", broken(&|d| d["_aws"]["Timestamp"] = json!(ts - 15 * 86_400_000))),
        ("values", broken(&|d| d["QueryRequests"] = json!((0..101).collect::<Vec<u32>>()))),
        ("finite number", broken(&|d| d["QueryRequests"] = json!("many"))),
        (
            "finite number",
            broken(&|d| {
                d.as_object_mut().unwrap().remove("QueryRequests");
            }),
        ),
        ("dimension", broken(&|d| d["FunctionName"] = json!(7))),
        ("Unit", broken(&|d| d["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"] = json!("Furlongs"))),
        (
            "Metrics",
            broken(&|d| {
                let defs: Vec<Value> = (0..101).map(|i| json!({"Name": format!("M{i}"), "Unit": "Count"})).collect();
                for i in 0..101 {
                    d[format!("M{i}")] = json!(1);
                }
                d["_aws"]["CloudWatchMetrics"][0]["Metrics"] = Value::Array(defs);
            }),
        ),
    ];
    // One Python process for every case: each gets its own verdict.
    let requests: Vec<Value> = cases
        .iter()
        .map(|(_, line)| serde_json::from_str(&request(std::slice::from_ref(line), &[], ts)).expect("a request"))
        .collect();
    let out = python::run("emf_check.py", &[&schema(), "--each"], &Value::Array(requests).to_string());
    let verdicts: Vec<Value> = serde_json::from_str(&out).expect("JSON verdicts");
    assert_eq!(verdicts.len(), cases.len());
    for ((reason, _), verdict) in cases.iter().zip(&verdicts) {
        assert_eq!(verdict["ok"], false, "accepted a document with a bad {reason}");
        let error = verdict["error"].as_str().unwrap_or_default();
        assert!(error.contains(reason), "refused for another reason than {reason:?}: {error}");
    }
    // And the untouched document passes in the same mode (the cases fail for their edit, not the setup).
    let metrics = cloudwatch_metrics(&now, &before, 100);
    let all: Value = serde_json::from_str(&request(&good, &metrics, ts)).expect("a request");
    let out = python::run("emf_check.py", &[&schema(), "--each"], &Value::Array(vec![all]).to_string());
    assert!(out.contains("\"ok\": true"), "{out}");
}
