//! The client work of the network lab. It must run on the application host, where the database's name
//! resolves through that host's own hosts file, so the driver hands it as a [`Job`] (JSON) to
//! `pgmux-bench-client`, which `ip netns exec` starts there, and reads back a [`JobReport`]. The driver
//! meanwhile watches PostgreSQL from the database host.
//!
//! - [`Job::Probe`]: the topology check before anything is measured: TLS on a direct connection, what is
//!   refused, and the round trip.
//! - [`Job::Burst`]: W5's Lambda burst ([`crate::Workload`]).
//! - [`Job::Connects`]: W8, sequential connect, `select 1`, disconnect.
//! - [`Job::Fleet`]: W9's clients, `clients_each` per endpoint.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::endpoint::{Connected, Endpoint, error_class};
use crate::stats::Latency;
use crate::workload::{Workload, WorkloadReport};

/// How long a W9 client waits after a failure before it tries again.
const RETRY_AFTER: Duration = Duration::from_millis(100);

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Job {
    /// Connect directly, check TLS, time `pings` round trips; try two connections that must be refused:
    /// one without TLS, one by `address` (which is not the certificate's name).
    Probe {
        direct: Endpoint,
        address: String,
        pings: usize,
    },
    Burst {
        endpoint: Endpoint,
        clients: usize,
        duration_secs: f64,
        think_secs: f64,
    },
    Connects {
        endpoint: Endpoint,
        count: usize,
    },
    Fleet {
        endpoints: Vec<Endpoint>,
        clients_each: usize,
        duration_secs: f64,
        think_secs: f64,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobReport {
    Probe(ProbeReport),
    Burst(WorkloadReport),
    Connects(ConnectsReport),
    Fleet(FleetReport),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProbeReport {
    /// `SHOW ssl` on the direct connection.
    pub ssl: String,
    /// `pg_stat_ssl`'s version and cipher for that connection.
    pub tls: String,
    /// Round trips of `select 1` on it.
    pub round_trip: Latency,
    /// What the server said to a connection without TLS (`Ok` would be a hole in the lab).
    pub without_tls: Result<(), String>,
    /// What TLS said to a connection by address rather than by name.
    pub by_address: Result<(), String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ConnectsReport {
    /// From starting to connect until the connection is closed, `select 1` included.
    pub total: Latency,
    /// Until the connection is ready for its query.
    pub connect: Latency,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FleetReport {
    pub transactions: u64,
    /// Failed connects and transactions by SQLSTATE (or `closed`, `no SQLSTATE`).
    pub errors: BTreeMap<String, u64>,
    /// The first message of each class.
    pub examples: BTreeMap<String, String>,
    pub elapsed_secs: f64,
}

impl FleetReport {
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// `53300 ×12 (sorry, too many clients already), closed ×1 (…)`, or `none`.
    pub fn error_summary(&self) -> String {
        if self.errors.is_empty() {
            return "none".to_owned();
        }
        let parts: Vec<String> = self
            .errors
            .iter()
            .map(|(class, n)| {
                let example = self.examples.get(class).map_or(String::new(), |m| format!(" ({m})"));
                format!("{class} ×{n}{example}")
            })
            .collect();
        parts.join("; ")
    }
}

/// Run `job` here (on the application host).
pub async fn run(job: Job) -> Result<JobReport, String> {
    match job {
        Job::Probe { direct, address, pings } => probe(&direct, &address, pings).await.map(JobReport::Probe),
        Job::Burst { endpoint, clients, duration_secs, think_secs } => {
            let workload = Workload {
                clients,
                duration: Duration::from_secs_f64(duration_secs),
                think: Duration::from_secs_f64(think_secs),
                client: endpoint,
                monitor: None,
                progress: None,
            };
            workload.run().await.map(JobReport::Burst).map_err(|e| e.to_string())
        }
        Job::Connects { endpoint, count } => connects(&endpoint, count).await.map(JobReport::Connects),
        Job::Fleet { endpoints, clients_each, duration_secs, think_secs } => {
            let fleet = Fleet { clients_each, duration: Duration::from_secs_f64(duration_secs), think: think_secs };
            Ok(JobReport::Fleet(fleet.run(endpoints).await))
        }
    }
}

async fn probe(direct: &Endpoint, address: &str, pings: usize) -> Result<ProbeReport, String> {
    let (client, task) = direct.connect().await.map_err(|e| format!("a direct connection failed: {e}"))?;
    let ssl = first_value(&client, "SHOW ssl").await?;
    let tls =
        first_value(&client, "SELECT version || ' ' || cipher FROM pg_stat_ssl WHERE pid = pg_backend_pid()").await?;
    let mut samples = Vec::with_capacity(pings);
    for _ in 0..pings {
        let started = Instant::now();
        client.simple_query("select 1").await.map_err(|e| e.to_string())?;
        samples.push(started.elapsed());
    }
    close((client, task)).await;
    let mut plain = direct.config();
    plain.ssl_mode(SslMode::Disable);
    let without_tls = direct.connect_with(&plain).await.map(close_now);
    let by_address = Endpoint { host: address.to_owned(), ..direct.clone() }.connect().await.map(close_now);
    Ok(ProbeReport { ssl, tls, round_trip: Latency::from_samples(samples), without_tls, by_address })
}

fn close_now(connected: Connected) {
    drop(connected.0);
}

async fn first_value(client: &Client, sql: &str) -> Result<String, String> {
    let messages = client.simple_query(sql).await.map_err(|e| format!("{sql}: {e}"))?;
    messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .ok_or_else(|| format!("{sql}: no row"))
}

/// Drop the client (tokio-postgres then sends Terminate) and wait for the connection to finish.
async fn close((client, task): Connected) {
    drop(client);
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
}

/// W8: `count` times in a row, connect, `select 1`, close.
async fn connects(endpoint: &Endpoint, count: usize) -> Result<ConnectsReport, String> {
    let (mut total, mut connect) = (Vec::with_capacity(count), Vec::with_capacity(count));
    for i in 0..count {
        let started = Instant::now();
        let connected = endpoint.connect().await.map_err(|e| format!("connect {}: {e}", i + 1))?;
        connect.push(started.elapsed());
        connected.0.simple_query("select 1").await.map_err(|e| format!("select 1 after connect {}: {e}", i + 1))?;
        close(connected).await;
        total.push(started.elapsed());
    }
    Ok(ConnectsReport { total: Latency::from_samples(total), connect: Latency::from_samples(connect) })
}

/// W9's clients.
struct Fleet {
    clients_each: usize,
    duration: Duration,
    think: f64,
}

#[derive(Default)]
struct Tally {
    transactions: AtomicU64,
    errors: std::sync::Mutex<FleetReport>,
}

impl Tally {
    fn failed(&self, class: String, message: String) {
        let mut report = self.errors.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *report.errors.entry(class.clone()).or_default() += 1;
        report.examples.entry(class).or_insert(message);
    }
}

impl Fleet {
    async fn run(&self, endpoints: Vec<Endpoint>) -> FleetReport {
        let tally = Arc::new(Tally::default());
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.duration;
        let think = Duration::from_secs_f64(self.think);
        let mut clients = JoinSet::new();
        for endpoint in &endpoints {
            for _ in 0..self.clients_each {
                clients.spawn(fleet_client(endpoint.clone(), deadline, think, Arc::clone(&tally)));
            }
        }
        while clients.join_next().await.is_some() {}
        let mut report = std::mem::take(&mut *tally.errors.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        report.transactions = tally.transactions.load(Ordering::Relaxed);
        report.elapsed_secs = started.elapsed().as_secs_f64();
        report
    }
}

/// One client: a connection kept across transactions, as a Lambda function keeps its own; after a failure
/// it waits, then connects again.
async fn fleet_client(endpoint: Endpoint, deadline: tokio::time::Instant, think: Duration, tally: Arc<Tally>) {
    let mut connection: Option<Connected> = None;
    while tokio::time::Instant::now() < deadline {
        let client = match &connection {
            Some((client, _)) => client,
            None => match endpoint.connect().await {
                Ok(connected) => &connection.insert(connected).0,
                Err(message) => {
                    tally.failed(class_of(&message), message);
                    tokio::time::sleep(RETRY_AFTER).await;
                    continue;
                }
            },
        };
        match transaction(client).await {
            Ok(()) => {
                tally.transactions.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(think).await;
            }
            Err(e) => {
                tally.failed(error_class(&e), crate::endpoint::describe(&e));
                if let Some(connected) = connection.take() {
                    close(connected).await;
                }
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }
    }
    if let Some(connected) = connection {
        close(connected).await;
    }
}

async fn transaction(client: &Client) -> Result<(), tokio_postgres::Error> {
    client.simple_query("BEGIN").await?;
    client.simple_query("SELECT 1").await?;
    client.simple_query("COMMIT").await?;
    Ok(())
}

/// The SQLSTATE at the start of a described connect error (`FATAL 53300: …`), else `connect`.
fn class_of(message: &str) -> String {
    let mut words = message.split_whitespace();
    match (words.next(), words.next()) {
        (Some("FATAL" | "ERROR"), Some(code)) if code.len() == 6 && code.ends_with(':') => code[..5].to_owned(),
        _ => "connect".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_and_reports_survive_json() {
        let job = Job::Connects { endpoint: Endpoint::tcp("10.0.0.6", 20001), count: 200 };
        let text = serde_json::to_string(&job).unwrap();
        assert!(matches!(serde_json::from_str(&text).unwrap(), Job::Connects { count: 200, .. }));
        let mut fleet = FleetReport { transactions: 10, ..FleetReport::default() };
        fleet.errors.insert("53300".into(), 12);
        fleet.examples.insert("53300".into(), "FATAL 53300: sorry, too many clients already".into());
        let back: JobReport = serde_json::from_str(&serde_json::to_string(&JobReport::Fleet(fleet)).unwrap()).unwrap();
        let JobReport::Fleet(fleet) = back else { panic!("not a fleet report") };
        assert_eq!(fleet.error_count(), 12);
        assert_eq!(fleet.error_summary(), "53300 ×12 (FATAL 53300: sorry, too many clients already)");
        assert_eq!(FleetReport::default().error_summary(), "none");
    }

    #[test]
    fn connect_errors_are_classed_by_sqlstate() {
        assert_eq!(class_of("FATAL 53300: sorry, too many clients already"), "53300");
        assert_eq!(class_of("FATAL 28P01: password authentication failed"), "28P01");
        assert_eq!(class_of("error connecting to server: Connection refused"), "connect");
    }
}
