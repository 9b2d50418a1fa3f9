//! The workload of the AWS Lambda Managed Instances field report, reusable by the demo and the benchmark
//! driver: many concurrent "invocations", each of which connects, runs `select now()`, thinks, runs
//! `select now()` again and disconnects, in a loop, while a sampler counts the server's backends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{MissedTickBehavior, sleep, sleep_until, timeout};
use tokio_postgres::{Client, Config, NoTls, SimpleQueryMessage};

use crate::endpoint::{Endpoint, describe};

use crate::stats::Latency;

/// How many distinct error messages a report keeps.
const ERROR_SAMPLES: usize = 5;
/// How long a client waits for its connection to close after it is done with it.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// What to run. `clients` tasks each loop over invocations until `duration` has passed since the start (an
/// invocation under way then finishes, so a run lasts up to `duration + think` and a bit).
#[derive(Clone, Debug)]
pub struct Workload {
    /// Concurrent invocations (64 for Node.js on one vCPU of Lambda Managed Instances).
    pub clients: usize,
    /// How long to keep starting invocations.
    pub duration: Duration,
    /// The sleep between the two queries of an invocation; also the least time a failed invocation takes,
    /// so that errors cannot turn the loop into a reconnect storm.
    pub think: Duration,
    /// Where the clients connect (a pooler or PostgreSQL) and how they log in.
    pub client: Endpoint,
    /// Counts the server's backends during the run; without one the report has no server peak.
    pub monitor: Option<ServerMonitor>,
    /// Progress lines on stderr; `None` for silence.
    pub progress: Option<Progress>,
}

/// A direct connection to PostgreSQL that polls `pg_stat_activity`.
#[derive(Clone, Debug)]
pub struct ServerMonitor {
    /// Connection to PostgreSQL itself (not through the pooler), as a role that sees every backend.
    pub config: Config,
    /// Count client backends of this role (the one the pooler or the clients log in as).
    pub usename: String,
    /// Poll period (100 ms in the demo).
    pub interval: Duration,
}

/// Progress lines: `[label] 10.0s invocations 128 errors 0 open 64 server 20` every `interval`.
#[derive(Clone, Debug)]
pub struct Progress {
    pub label: String,
    pub interval: Duration,
}

/// The figures of one run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkloadReport {
    /// Invocations started (each one also finished, successfully or not).
    pub invocations: u64,
    /// Invocations that failed (at connect, a query, or the close).
    pub errors: u64,
    /// The first few distinct error messages, each with how many times it occurred.
    pub error_samples: Vec<ErrorSample>,
    /// Most client connections open at once (counted from ready to closed).
    pub peak_client_connections: usize,
    /// Most client backends of the monitored role at once, as sampled; `None` without a monitor.
    pub peak_server_connections: Option<u64>,
    /// Time from starting to connect until the connection is ready for queries.
    pub connect: Latency,
    /// Round-trip time of each `select now()`.
    pub query: Latency,
    pub elapsed_secs: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ErrorSample {
    pub message: String,
    pub count: u64,
}

impl Workload {
    /// Run the workload. Fails only if the monitor cannot connect (the run could not be measured); errors of
    /// the invocations themselves are counted in the report.
    pub async fn run(&self) -> Result<WorkloadReport, tokio_postgres::Error> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let counters = Arc::new(Counters::default());
        let sampler = match &self.monitor {
            Some(monitor) => Some(start_sampler(monitor, Arc::clone(&counters), stop_rx.clone()).await?),
            None => None,
        };
        let started = Instant::now();
        let deadline = tokio::time::Instant::from_std(started + self.duration);
        let mut clients = JoinSet::new();
        for _ in 0..self.clients {
            let client = ClientLoop {
                config: self.client.clone(),
                think: self.think,
                deadline,
                counters: Arc::clone(&counters),
            };
            clients.spawn(client.run());
        }
        let progress = self
            .progress
            .clone()
            .map(|p| tokio::spawn(report_progress(p, started, Arc::clone(&counters), stop_rx.clone())));

        let (mut connect, mut query) = (Vec::new(), Vec::new());
        while let Some(done) = clients.join_next().await {
            // A client task only ends by returning its samples; a panic in one is a bug worth seeing.
            let samples = done.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
            connect.extend(samples.connect);
            query.extend(samples.query);
        }
        let elapsed = started.elapsed();
        let _ = stop_tx.send(true);
        let peak_server = match sampler {
            Some(handle) => handle.await.ok(),
            None => None,
        };
        if let Some(progress) = progress {
            let _ = progress.await;
        }
        Ok(WorkloadReport {
            invocations: counters.invocations.load(Ordering::Relaxed),
            errors: counters.errors.load(Ordering::Relaxed),
            error_samples: counters.error_samples(),
            peak_client_connections: counters.peak_open.load(Ordering::Relaxed),
            peak_server_connections: peak_server,
            connect: Latency::from_samples(connect),
            query: Latency::from_samples(query),
            elapsed_secs: elapsed.as_secs_f64(),
        })
    }
}

#[derive(Debug, Default)]
struct Counters {
    invocations: AtomicU64,
    errors: AtomicU64,
    open: AtomicUsize,
    peak_open: AtomicUsize,
    server_now: AtomicU64,
    server_peak: AtomicU64,
    /// message → (order of first sight, count), for at most ERROR_SAMPLES messages.
    error_kinds: Mutex<HashMap<String, (usize, u64)>>,
}

impl Counters {
    fn record_error(&self, message: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut kinds = self.error_kinds.lock().unwrap_or_else(PoisonError::into_inner);
        let seen = kinds.len();
        if let Some((_, count)) = kinds.get_mut(&message) {
            *count += 1;
        } else if seen < ERROR_SAMPLES {
            kinds.insert(message, (seen, 1));
        }
    }

    fn error_samples(&self) -> Vec<ErrorSample> {
        let kinds = self.error_kinds.lock().unwrap_or_else(PoisonError::into_inner);
        let mut samples: Vec<_> = kinds.iter().map(|(m, &(order, count))| (order, m.clone(), count)).collect();
        samples.sort_unstable();
        samples.into_iter().map(|(_, message, count)| ErrorSample { message, count }).collect()
    }
}

/// Counts one open client connection for as long as it lives.
struct OpenConnection<'a>(&'a Counters);

impl<'a> OpenConnection<'a> {
    fn new(counters: &'a Counters) -> Self {
        let now = counters.open.fetch_add(1, Ordering::Relaxed) + 1;
        counters.peak_open.fetch_max(now, Ordering::Relaxed);
        OpenConnection(counters)
    }
}

impl Drop for OpenConnection<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Default)]
struct Samples {
    connect: Vec<Duration>,
    query: Vec<Duration>,
}

/// One simulated concurrent invocation slot.
struct ClientLoop {
    config: Endpoint,
    think: Duration,
    deadline: tokio::time::Instant,
    counters: Arc<Counters>,
}

impl ClientLoop {
    async fn run(self) -> Samples {
        let mut samples = Samples::default();
        while tokio::time::Instant::now() < self.deadline {
            let started = tokio::time::Instant::now();
            self.counters.invocations.fetch_add(1, Ordering::Relaxed);
            if let Err(message) = self.invoke(&mut samples).await {
                self.counters.record_error(message);
                sleep_until(started + self.think).await;
            }
        }
        samples
    }

    /// connect, `select now()`, think, `select now()`, disconnect.
    async fn invoke(&self, samples: &mut Samples) -> Result<(), String> {
        let started = Instant::now();
        let (client, driver) = self.config.connect().await.map_err(|e| format!("connect: {e}"))?;
        samples.connect.push(started.elapsed());
        let open = OpenConnection::new(&self.counters);

        let queries = async {
            select_now(&client, samples).await?;
            sleep(self.think).await;
            select_now(&client, samples).await
        };
        let result = queries.await;
        // Dropping the last client makes the connection send Terminate and finish.
        drop(client);
        let closed = match timeout(CLOSE_TIMEOUT, driver).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(format!("connection: {}", describe(&e))),
            Ok(Err(e)) => Err(format!("connection task: {e}")),
            Err(_) => Err(format!("connection did not close within {CLOSE_TIMEOUT:?}")),
        };
        drop(open);
        result.and(closed)
    }
}

/// The simple query protocol, as node-postgres uses for a query without parameters: no named statements.
async fn select_now(client: &Client, samples: &mut Samples) -> Result<(), String> {
    let started = Instant::now();
    let messages = client.simple_query("select now()").await.map_err(|e| format!("select now(): {}", describe(&e)))?;
    samples.query.push(started.elapsed());
    let rows = messages.iter().filter(|m| matches!(m, SimpleQueryMessage::Row(_))).count();
    if rows == 1 { Ok(()) } else { Err(format!("select now(): {rows} rows instead of 1")) }
}

/// The task of a running sampler; it returns the peak.
pub type SamplerHandle = tokio::task::JoinHandle<u64>;

impl ServerMonitor {
    /// Count the monitored role's backends until `stop` turns true, without a workload (the network lab's
    /// clients run in a process of their own).
    pub async fn start(&self, stop: watch::Receiver<bool>) -> Result<SamplerHandle, tokio_postgres::Error> {
        start_sampler(self, Arc::new(Counters::default()), stop).await
    }
}

/// Poll the backend count until told to stop; the task returns the peak. A failed poll ends the sampling
/// (with the peak so far) rather than the run.
async fn start_sampler(
    monitor: &ServerMonitor,
    counters: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) -> Result<SamplerHandle, tokio_postgres::Error> {
    let (client, connection) = monitor.config.connect(NoTls).await?;
    tokio::spawn(connection);
    let statement = client
        .prepare(
            "select count(*) from pg_stat_activity \
             where usename = $1 and backend_type = 'client backend'",
        )
        .await?;
    let usename = monitor.usename.clone();
    let mut ticks = tokio::time::interval(monitor.interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    Ok(tokio::spawn(async move {
        ticks.tick().await; // the first tick is immediate
        loop {
            match client.query_one(&statement, &[&usename]).await {
                Ok(row) => {
                    let count = u64::try_from(row.get::<_, i64>(0)).unwrap_or(0);
                    counters.server_now.store(count, Ordering::Relaxed);
                    counters.server_peak.fetch_max(count, Ordering::Relaxed);
                }
                Err(e) => {
                    eprintln!("server connection sampler stopped: {}", describe(&e));
                    break;
                }
            }
            tokio::select! {
                _ = ticks.tick() => {}
                _ = stop.wait_for(|&stop| stop) => break,
            }
        }
        counters.server_peak.load(Ordering::Relaxed)
    }))
}

async fn report_progress(
    progress: Progress,
    started: Instant,
    counters: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(progress.interval);
    ticks.tick().await;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.wait_for(|&stop| stop) => return,
        }
        eprintln!(
            "[{}] {:5.1}s  invocations {}  errors {}  open clients {}  server connections {}",
            progress.label,
            started.elapsed().as_secs_f64(),
            counters.invocations.load(Ordering::Relaxed),
            counters.errors.load(Ordering::Relaxed),
            counters.open.load(Ordering::Relaxed),
            counters.server_now.load(Ordering::Relaxed),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgmux_testkit::{APP_USER, PgServer, SUPERUSER};

    fn workload(pg: &PgServer, password: &str) -> Workload {
        let mut client = Endpoint::tcp("127.0.0.1", pg.port());
        client.password = Some(password.to_owned());
        Workload {
            clients: 4,
            duration: Duration::from_millis(300),
            think: Duration::from_millis(100),
            client,
            monitor: Some(ServerMonitor {
                config: pg.url(&SUPERUSER).parse().unwrap(),
                usename: APP_USER.user.to_owned(),
                interval: Duration::from_millis(20),
            }),
            progress: None,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn counts_invocations_connections_and_latencies() {
        let pg = PgServer::start();
        let report = workload(&pg, APP_USER.password).run().await.unwrap();
        assert_eq!(report.errors, 0, "{:?}", report.error_samples);
        assert!(report.invocations >= 4, "{report:?}");
        assert_eq!(report.connect.count as u64, report.invocations);
        assert_eq!(report.query.count as u64, 2 * report.invocations);
        // All four overlap in a normal run, but on a loaded machine one may be between invocations when the
        // others are connected: at most the number of clients, never more.
        assert!((1..=4).contains(&report.peak_client_connections), "{report:?}");
        let peak_server = report.peak_server_connections.unwrap();
        assert!((1..=4).contains(&peak_server), "{report:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failed_invocations_are_counted_and_described() {
        let pg = PgServer::start();
        let report = workload(&pg, "wrong").run().await.unwrap();
        assert!(report.invocations >= 4);
        assert_eq!(report.errors, report.invocations);
        assert_eq!(report.peak_client_connections, 0);
        assert_eq!(report.error_samples.len(), 1, "{:?}", report.error_samples);
        let sample = &report.error_samples[0];
        assert_eq!(sample.count, report.errors);
        assert!(sample.message.contains("password authentication failed for user \"pgmux_app\""), "{}", sample.message);
    }
}
