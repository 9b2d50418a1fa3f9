//! Book-keeping for the scenarios where many clients work at once (S4, the background load of S7 and S8,
//! S13, S14): per-client tallies merged into one, and the SQL texts of the S4 transaction.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::task::JoinSet;

use crate::report::Failure;

/// What one or more clients did.
#[derive(Debug, Default)]
pub struct Tally {
    pub ok: usize,
    pub errors: usize,
    pub first_error: Option<Failure>,
    /// SQLSTATEs seen, to tell whether a client that was not cancelled saw 57014.
    pub codes: Vec<String>,
}

impl Tally {
    pub fn record(&mut self, result: Result<(), Failure>) {
        match result {
            Ok(()) => self.ok += 1,
            Err(failure) => {
                self.errors += 1;
                if let Some(code) = &failure.code
                    && !self.codes.contains(code)
                {
                    self.codes.push(code.clone());
                }
                self.first_error.get_or_insert(failure);
            }
        }
    }

    pub fn merge(&mut self, other: Tally) {
        self.ok += other.ok;
        self.errors += other.errors;
        for code in other.codes {
            if !self.codes.contains(&code) {
                self.codes.push(code);
            }
        }
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    /// Ok when nothing failed; else the count and the first error.
    pub fn clean(&self, what: &str) -> Result<(), Failure> {
        match &self.first_error {
            None => Ok(()),
            Some(first) => Err(Failure {
                code: first.code.clone(),
                text: format!("{} of {} {what} failed; first: {first}", self.errors, self.errors + self.ok),
            }),
        }
    }
}

/// A flag the background clients of S7 and S8 watch.
#[derive(Debug, Clone, Default)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    pub fn raise(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn raised(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The S4 transaction's SQL: five texts shared by every client of a driver and one of the client's own.
#[derive(Debug, Clone)]
pub struct ChurnSql {
    pub select: String,
    pub update: String,
    pub insert: String,
    pub count: String,
    pub digest: String,
    pub own: String,
    /// `<driver>:<client>`, the audit row's `client`.
    pub audit_client: String,
}

impl ChurnSql {
    pub fn new(driver: &str, counter_table: &str, client: usize) -> ChurnSql {
        ChurnSql {
            select: "SELECT v FROM t WHERE id = $1".to_owned(),
            update: format!("UPDATE {counter_table} SET n = n + 1 WHERE id = $1"),
            insert: "INSERT INTO audit (client, pid, n) VALUES ($1, pg_backend_pid(), $2)".to_owned(),
            count: "SELECT count(*) FROM t WHERE id <= $1".to_owned(),
            digest: "SELECT md5($1::text)".to_owned(),
            own: format!("SELECT $1::int4 + {client}"),
            audit_client: format!("{driver}:{client}"),
        }
    }

    /// The row client `client` reads and updates in its transaction `n` (spread over the 1000 rows of `t`).
    pub fn row(client: usize, n: usize) -> i32 {
        i32::try_from((client * 7919 + n) % 1000 + 1).unwrap_or(1)
    }
}

/// The name of a table of the suite's own: `<driver>_<what>`, with the driver's dashes made underscores.
pub fn table(driver: &str, what: &str) -> String {
    format!("{}_{what}", driver.replace('-', "_"))
}

/// SQL that (re)creates the S4 counter table: 1000 rows with `n = 0`.
pub fn counter_table_sql(table: &str) -> String {
    format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int PRIMARY KEY, n int NOT NULL); \
         INSERT INTO {table} SELECT g, 0 FROM generate_series(1, 1000) g"
    )
}

/// What a background client is told: whether to go on, and where to count a finished transaction.
#[derive(Debug)]
pub struct Progress {
    stop: StopFlag,
    done: Arc<AtomicUsize>,
    /// Clients that have finished at least one transaction.
    ready: Arc<AtomicUsize>,
    /// Whether this client has.
    counted: bool,
}

impl Progress {
    pub fn running(&self) -> bool {
        !self.stop.raised()
    }

    pub fn tick(&mut self) {
        self.done.fetch_add(1, Ordering::Relaxed);
        if !self.counted {
            self.counted = true;
            self.ready.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Clients doing S4-style transactions in the background of S7 and S8 until told to stop.
#[derive(Debug)]
pub struct Background {
    stop: StopFlag,
    done: Arc<AtomicUsize>,
    ready: Arc<AtomicUsize>,
    tasks: JoinSet<Tally>,
    workers: usize,
}

impl Background {
    /// Starts `workers` clients; `worker(i, progress)` is client `i`'s whole life.
    pub fn start<F, Fut>(workers: usize, worker: F) -> Background
    where
        F: Fn(usize, Progress) -> Fut,
        Fut: Future<Output = Tally> + Send + 'static,
    {
        let (stop, done, ready) = (StopFlag::default(), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let mut tasks = JoinSet::new();
        for i in 0..workers {
            let progress =
                Progress { stop: stop.clone(), done: Arc::clone(&done), ready: Arc::clone(&ready), counted: false };
            tasks.spawn(worker(i, progress));
        }
        Background { stop, done, ready, tasks, workers }
    }

    /// Transactions finished so far, by all of them.
    pub fn done(&self) -> usize {
        self.done.load(Ordering::Relaxed)
    }

    /// Waits until each of them has finished a transaction (at most 10 s), so that the scenario's own work
    /// overlaps theirs.
    pub async fn warmed_up(&self) {
        for _ in 0..500 {
            if self.ready.load(Ordering::Relaxed) >= self.workers {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops them and returns what they did, with a failure for each one that never finished a transaction.
    pub async fn finish(mut self) -> Tally {
        self.stop.raise();
        let mut tally = Tally::default();
        while let Some(done) = self.tasks.join_next().await {
            match done {
                Ok(worker) if worker.ok == 0 && worker.errors == 0 => {
                    tally.record(Err(Failure::check("a background client finished no transaction")))
                }
                Ok(worker) => tally.merge(worker),
                Err(e) => tally.record(Err(Failure::check(format!("background client task: {e}")))),
            }
        }
        tally
    }
}

/// How many background clients S7 and S8 run: ten, or fewer if `MATRIX_CLIENTS` is smaller.
pub fn background_clients(clients: usize) -> usize {
    clients.clamp(1, 10)
}
