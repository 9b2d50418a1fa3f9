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

/// The real binary as a Lambda extension on Managed Instances (lambda-simulator stands in for Lambda):
/// a workload, a timed flush (`metrics_interval = 1s`), then SHUTDOWN and the last flush. Every line on
/// stdout is an EMF document valid against the specification and shaped like aws-embedded-metrics'
/// documents for the same metrics; the counters summed over every flush equal the workload (nothing lost
/// at SHUTDOWN, nothing counted twice).
#[test]
fn the_binary_in_lambda_prints_emf_lines_that_add_up_to_the_workload() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    use lambda_simulator::{ShutdownReason, Simulator};
    use pgmux_observability_tests::{pgmux, workload};
    use pgmux_testkit::{APP_USER, DATABASE, PgServer, free_port};

    tools();
    let pg = PgServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let sim = rt
        .block_on(Simulator::builder().function_name(FUNCTION).shutdown_timeout(Duration::from_secs(2)).build())
        .expect("the Lambda stand-in");
    let port = free_port();
    let mut cmd = Command::new(pgmux::binary());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("PGMUX_") || k.starts_with("AWS_")) {
        cmd.env_remove(k);
    }
    cmd.env("AWS_LAMBDA_RUNTIME_API", format!("127.0.0.1:{}", sim.addr().port()))
        .env("AWS_LAMBDA_INITIALIZATION_TYPE", "lambda-managed-instances")
        .env("AWS_LAMBDA_FUNCTION_NAME", FUNCTION)
        .env("PGMUX_DATABASE_URL", pg.url(&APP_USER))
        .env("PGMUX_LISTEN", format!("127.0.0.1:{port}"))
        .env("PGMUX_SSLMODE", "disable")
        .env("PGMUX_POOL_MAX", "3")
        .env("PGMUX_METRICS_INTERVAL", "1s")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    pgmux_testkit::die_with_parent(&mut cmd);
    let mut child = cmd.spawn().expect("start pgmux");
    rt.block_on(sim.wait_for(|| async { sim.extension_count().await == 1 }, Duration::from_secs(10)))
        .expect("pgmux registered");
    // Lambda trusts loopback clients: no password.
    let sent = workload::run(port, APP_USER.user, None, DATABASE);
    std::thread::sleep(Duration::from_millis(2500));
    // What the database sees of pgmux when SHUTDOWN comes: the pool's idle connections and the control
    // connection.
    let held: f64 = pg
        .psql("select count(*) from pg_stat_activity where usename = 'pgmux_app' and backend_type = 'client backend'")
        .trim()
        .parse()
        .expect("a count");
    rt.block_on(sim.graceful_shutdown(ShutdownReason::Spindown));
    let status = child.wait().expect("pgmux exits");
    let (mut stdout, mut stderr) = (String::new(), String::new());
    child.stdout.take().expect("stdout").read_to_string(&mut stdout).expect("read stdout");
    child.stderr.take().expect("stderr").read_to_string(&mut stderr).expect("read stderr");
    assert_eq!(status.code(), Some(0), "{stderr}");

    let lines: Vec<String> = stdout.lines().map(str::to_owned).collect();
    let docs: Vec<Value> = lines.iter().map(|l| serde_json::from_str(l).expect("each stdout line is JSON")).collect();
    // Flushes, told apart by their timestamps: at least one timed, and the last at SHUTDOWN.
    let mut flushes: Vec<u64> = docs.iter().map(|d| d["_aws"]["Timestamp"].as_u64().expect("Timestamp")).collect();
    flushes.dedup();
    assert!(flushes.len() >= 2, "a timed flush and the SHUTDOWN flush: {flushes:?}");
    let sum = |name: &str| -> f64 { docs.iter().filter_map(|d| d[name].as_f64()).sum() };
    assert_eq!(sum("QueryRequests"), sent.queries as f64, "queries over every flush");
    assert_eq!(sum("Transactions"), sent.transactions as f64, "transactions over every flush");
    assert_eq!(sum("ClientConnectionsSetupSucceeded"), sent.clients as f64);
    let borrow_latencies: usize =
        docs.iter().filter_map(|d| d["DatabaseConnectionsBorrowLatency"].as_array()).map(Vec::len).sum();
    assert_eq!(borrow_latencies, sent.transactions as usize, "one borrow latency per transaction");
    // The SHUTDOWN flush reports the connections as they were before the drain closed them, and every one
    // of them, the control connection included.
    let last = *flushes.last().expect("a flush");
    let at_shutdown = docs
        .iter()
        .filter(|d| d["_aws"]["Timestamp"].as_u64() == Some(last))
        .find_map(|d| d["DatabaseConnections"].as_f64())
        .expect("DatabaseConnections in the last flush");
    assert!(held >= 2.0, "the pool's connections and the control connection: {held}");
    assert_eq!(at_shutdown, held, "DatabaseConnections at SHUTDOWN against pg_stat_activity");

    // Each flush against the schema and aws-embedded-metrics, with the metrics read back from its lines.
    for ts in flushes {
        let (flush_lines, flush): (Vec<&String>, Vec<&Value>) =
            lines.iter().zip(&docs).filter(|(_, d)| d["_aws"]["Timestamp"].as_u64() == Some(ts)).unzip();
        let mut metrics: Vec<(String, String, Vec<f64>)> = Vec::new();
        for d in &flush {
            for def in d["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().expect("Metrics") {
                let name = def["Name"].as_str().expect("Name").to_owned();
                let unit = def["Unit"].as_str().unwrap_or("None").to_owned();
                let values: Vec<f64> = match &d[&name] {
                    Value::Array(a) => a.iter().filter_map(Value::as_f64).collect(),
                    v => v.as_f64().into_iter().collect(),
                };
                match metrics.iter_mut().find(|m| m.0 == name) {
                    Some(m) => m.2.extend(values),
                    None => metrics.push((name, unit, values)),
                }
            }
        }
        let metrics: Vec<Value> = metrics.iter().map(|(n, u, v)| json!({"name": n, "unit": u, "values": v})).collect();
        let request = json!({
            "lines": flush_lines,
            "namespace": NAMESPACE,
            "dimensions": {"FunctionName": FUNCTION},
            "timestamp_ms": ts,
            "metrics": metrics,
        });
        let out = python::run("emf_check.py", &[&schema()], &request.to_string());
        assert!(out.contains("pgmux_documents"), "{out}");
    }
}
