//! The clients a fault meets: idle clients (connected before it, each writing once at an offset after it),
//! busy clients (short write transactions and autocommit inserts in a loop), in-flight clients (a long write
//! transaction running at the fault, then their next one), and, for one scenario, a client killed while it
//! holds a row lock. Every operation is recorded with its times relative to the fault, its outcome, whether
//! the client connection closed, and the node that served it; every acknowledged write is a ledger entry
//! (client, seq) checked afterwards on the final writer.
//!
//! Clients are spread over the plan's routes (database names the pooler serves, each its own pool on the
//! same primary) in turn, so that every route has idle, busy and in-flight clients; each operation says
//! which route it went through, and the report judges every route on its own.
//!
//! For the reader scenario, reader clients read in a loop through [`READER_ROUTE`], a reader route whose reader
//! is the standby, each read recording the node that served it: how fast reads leave a reader that goes
//! silent, and how soon they come back to it.
//!
//! Everything is bounded: each operation by a timeout, each loop by the run's end and a count. All SQL goes
//! over the simple query protocol, which every pooler in transaction mode passes through unchanged.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout};
use tokio_postgres::{Client, Config, NoTls, SimpleQueryMessage};

use crate::clock::Clock;

mod record;
pub use record::{Disconnect, LockWatch, Op, OpKind, Outcome, Record, Role};

/// How many clients of each kind, and the run's times (milliseconds, relative to the fault at 0).
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub idle: u32,
    pub busy: u32,
    pub in_flight: u32,
    /// Idle client `i` writes once at `idle_offsets_ms[i % len]` after the fault.
    pub idle_offsets_ms: Vec<u64>,
    /// The fault comes this long after every client has connected and written once (busy clients start
    /// 1 s before the fault, in-flight ones 300 ms before).
    pub lead_ms: u64,
    /// Busy clients stop, and observers stop sampling, this long after the fault.
    pub run_ms: u64,
    /// The in-flight clients' `pg_sleep`, started 300 ms before the fault.
    pub long_query_ms: u64,
    /// Longest any one operation may take before it is abandoned and counted as a timeout.
    pub op_timeout_ms: u64,
    /// Add a client that holds a row lock and is killed at the fault (the client-kill scenario).
    pub lock_holder: bool,
    /// Reader clients, reading in a loop through [`READER_ROUTE`] from 1 s before the fault to the run's end
    /// (the reader scenario; 0 otherwise).
    pub readers: u32,
    /// The database names clients connect to, in turn (client `i` uses `routes[(i - 1) % len]`); the
    /// lock holder uses the first.
    pub routes: Vec<String>,
}

impl Plan {
    /// The route of client `id` (ids start at 1).
    pub fn route_of(&self, id: u32) -> &str {
        let n = self.routes.len().max(1);
        self.routes.get((id.saturating_sub(1) as usize) % n).map_or(FIRST_ROUTE, String::as_str)
    }
}

/// The database name clients use when a plan names no route.
pub const FIRST_ROUTE: &str = "pgmux";

/// The reader route's database name: the server's `pgmux` database, read on the standby (see `target`).
pub const READER_ROUTE: &str = "pgmux_ro";

/// Ceiling on a busy client's loop, besides the run's end.
const MAX_BUSY_OPS: u32 = 1_000_000;
/// Busy clients start this long before the fault.
const BUSY_LEAD: Duration = Duration::from_millis(1000);
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The clients of `plan`, connected to `target` and warmed up (one write each), before the fault's time is
/// set: warm-ups are slow with SCRAM on a busy machine, and a client still connecting at the fault is not idle.
pub async fn prepare(plan: &Plan, target: Config) -> Vec<Session> {
    let mut targets: Vec<Arc<Config>> = Vec::new();
    for route in plan.routes.iter().map(String::as_str).chain((plan.routes.is_empty()).then_some(FIRST_ROUTE)) {
        let mut config = target.clone();
        config.dbname(route);
        targets.push(Arc::new(config));
    }
    let provisional = Clock::fault_in(Duration::ZERO);
    let roles = [(Role::Idle, plan.idle), (Role::Busy, plan.busy), (Role::InFlight, plan.in_flight)];
    let mut tasks = Vec::new();
    let mut id = 0u32;
    for (role, count) in roles {
        for _ in 0..count {
            id += 1;
            let target = &targets[(id as usize - 1) % targets.len()];
            let mut session = Session::new(id, role, target, provisional, plan);
            tasks.push(tokio::spawn(async move {
                session.write(OpKind::Warmup, 0).await;
                session
            }));
        }
    }
    let mut reading = target.clone();
    reading.dbname(READER_ROUTE);
    let reading = Arc::new(reading);
    for _ in 0..plan.readers {
        id += 1;
        let mut session = Session::new(id, Role::Reader, &reading, provisional, plan);
        session.route = READER_ROUTE.to_owned();
        tasks.push(tokio::spawn(async move {
            session.read().await;
            session
        }));
    }
    let mut sessions = Vec::new();
    for task in tasks {
        if let Ok(session) = task.await {
            sessions.push(session);
        }
    }
    sessions
}

/// Run the prepared clients around the fault at `clock`'s time 0; returns when all are done.
pub async fn run(sessions: Vec<Session>, plan: &Plan, clock: Clock) -> Record {
    let mut tasks: Vec<JoinHandle<Record>> = Vec::new();
    let mut idle = 0usize;
    for mut session in sessions {
        session.rebase(clock);
        let task = match session.role {
            Role::Idle => {
                let offsets = &plan.idle_offsets_ms;
                let offset = offsets.get(idle % offsets.len().max(1)).copied().unwrap_or(0);
                idle += 1;
                tokio::spawn(session.idle(offset))
            }
            Role::Busy => tokio::spawn(session.busy(plan.run_ms)),
            Role::Reader => tokio::spawn(session.reads(plan.run_ms)),
            Role::InFlight | Role::Holder => tokio::spawn(session.in_flight(plan.long_query_ms)),
        };
        tasks.push(task);
    }
    let mut record = Record::default();
    for task in tasks {
        if let Ok(part) = task.await {
            record.merge(part);
        }
    }
    record
}

/// One client connection to the pooler, with its task and whether it ended on its own.
struct Conn {
    client: Client,
    task: JoinHandle<()>,
    ended_at: Arc<Mutex<Option<Instant>>>,
    ended: Arc<AtomicBool>,
}

impl Conn {
    async fn open(target: &Config) -> Result<Conn, tokio_postgres::Error> {
        let (client, connection) = target.connect(NoTls).await?;
        let ended = Arc::new(AtomicBool::new(false));
        let ended_at = Arc::new(Mutex::new(None));
        let (flag, at) = (Arc::clone(&ended), Arc::clone(&ended_at));
        let task = tokio::spawn(async move {
            let _ = connection.await;
            *at.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
            flag.store(true, Ordering::Release);
        });
        Ok(Conn { client, task, ended_at, ended })
    }

    fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }
}

/// One client: its connection (reopened when the other side closed it) and what it recorded.
#[derive(Debug)]
pub struct Session {
    id: u32,
    role: Role,
    /// The database name it connects to.
    route: String,
    target: Arc<Config>,
    clock: Clock,
    conn: Option<Conn>,
    seq: u32,
    op_timeout: Duration,
    record: Record,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("ended", &self.ended()).finish_non_exhaustive()
    }
}

impl Session {
    fn new(id: u32, role: Role, target: &Arc<Config>, clock: Clock, plan: &Plan) -> Session {
        Session {
            id,
            role,
            route: plan.route_of(id).to_owned(),
            target: Arc::clone(target),
            clock,
            conn: None,
            seq: 0,
            op_timeout: Duration::from_millis(plan.op_timeout_ms),
            record: Record::default(),
        }
    }

    /// Whether the warm-up write (a reader's first read) was acknowledged.
    pub fn warmed_up(&self) -> bool {
        self.record.ops.iter().any(|op| matches!(op.kind, OpKind::Warmup | OpKind::Read) && op.outcome == Outcome::Ok)
    }

    /// Move to `clock`: what was recorded so far is shifted to be relative to its fault time.
    fn rebase(&mut self, clock: Clock) {
        let shift = self.clock.ms_of(clock.instant_at(0.0));
        for op in &mut self.record.ops {
            op.start_ms -= shift;
            op.end_ms -= shift;
        }
        self.clock = clock;
    }

    async fn idle(mut self, offset_ms: u64) -> Record {
        sleep_until(self.clock.instant_at(offset_ms as f64)).await;
        self.write(OpKind::Write, 0).await;
        self.finish()
    }

    async fn busy(mut self, run_ms: u64) -> Record {
        sleep_until(self.clock.instant_at(-(BUSY_LEAD.as_millis() as f64))).await;
        let end = self.clock.instant_at(run_ms as f64);
        for n in 0..MAX_BUSY_OPS {
            if Instant::now() >= end || crate::isolate::stop_requested() {
                break;
            }
            let kind = if n % 2 == 0 { OpKind::Txn } else { OpKind::Write };
            if !self.write(kind, 20).await {
                sleep(RETRY_PAUSE).await;
            }
        }
        self.finish()
    }

    /// Reads in a loop from 1 s before the fault to `run_ms` after it, as fast as they are answered.
    async fn reads(mut self, run_ms: u64) -> Record {
        sleep_until(self.clock.instant_at(-(BUSY_LEAD.as_millis() as f64))).await;
        let end = self.clock.instant_at(run_ms as f64);
        for _ in 0..MAX_BUSY_OPS {
            if Instant::now() >= end || crate::isolate::stop_requested() {
                break;
            }
            if !self.read().await {
                sleep(RETRY_PAUSE).await;
            }
        }
        self.finish()
    }

    /// One read, recording the node that served it; true if it was answered.
    async fn read(&mut self) -> bool {
        if !self.connected().await {
            return false;
        }
        self.seq += 1;
        let steps = ["SELECT inet_server_addr()::text, pg_is_in_recovery()".to_owned()];
        let start = self.clock.now_ms();
        let Some(conn) = self.conn.as_ref() else {
            return false;
        };
        let (outcome, served) = match timeout(self.op_timeout, run_steps(&conn.client, &steps)).await {
            Ok(Ok(served)) => (Outcome::Ok, served),
            Ok(Err(e)) => (classify(&e), None),
            Err(_) => (Outcome::Timeout, None),
        };
        let end = self.clock.now_ms();
        let ok = outcome == Outcome::Ok;
        let closed = if ok { false } else { self.settle_after_error(&outcome).await };
        self.push_ended(OpKind::Read, (start, end), outcome, closed, served);
        ok
    }

    async fn in_flight(mut self, long_ms: u64) -> Record {
        sleep_until(self.clock.instant_at(-300.0)).await;
        self.write(OpKind::LongTxn, long_ms).await;
        // The client's next transaction, right after: it should work.
        self.write(OpKind::Write, 0).await;
        self.finish()
    }

    /// Make sure a live connection is open, recording a disconnect for one the other side closed and a
    /// Connect operation for a new one. False when connecting failed.
    async fn connected(&mut self) -> bool {
        if self.conn.as_ref().is_some_and(Conn::ended) {
            self.drop_conn();
        }
        if self.conn.is_some() {
            return true;
        }
        let start = self.clock.now_ms();
        let opened = timeout(self.op_timeout, Conn::open(&self.target)).await;
        let (outcome, conn) = match opened {
            Ok(Ok(conn)) => (Outcome::Ok, Some(conn)),
            Ok(Err(e)) => (classify(&e), None),
            Err(_) => (Outcome::Timeout, None),
        };
        let ok = conn.is_some();
        if !ok {
            self.push(OpKind::Connect, start, outcome, false, None);
        }
        self.conn = conn;
        ok
    }

    /// One write of `kind` (`sleep_ms` inside the transaction for Txn and LongTxn); true if acknowledged.
    async fn write(&mut self, kind: OpKind, sleep_ms: u64) -> bool {
        if !self.connected().await {
            return false;
        }
        self.seq += 1;
        let seq = self.seq;
        let insert = format!(
            "INSERT INTO ledger (client, seq) VALUES ({}, {seq}) RETURNING inet_server_addr()::text, pg_is_in_recovery()",
            self.id
        );
        let steps: Vec<String> = match kind {
            OpKind::Txn | OpKind::LongTxn => {
                vec!["BEGIN".into(), insert, format!("SELECT pg_sleep({})", sleep_ms as f64 / 1000.0), "COMMIT".into()]
            }
            _ => vec![insert],
        };
        let start = self.clock.now_ms();
        let Some(conn) = self.conn.as_ref() else {
            return false;
        };
        let result = timeout(self.op_timeout, run_steps(&conn.client, &steps)).await;
        let (outcome, served) = match result {
            Ok(Ok(served)) => (Outcome::Ok, served),
            Ok(Err(e)) => (classify(&e), None),
            Err(_) => (Outcome::Timeout, None),
        };
        // The operation ends when its answer arrives, not after the client's own clean-up below (a ROLLBACK
        // that may wait up to 2 s for a server while the database is away).
        let end = self.clock.now_ms();
        let ok = outcome == Outcome::Ok;
        let closed = if ok { false } else { self.settle_after_error(&outcome).await };
        if ok {
            self.record.acked.push((self.id, seq));
        }
        self.push_ended(kind, (start, end), outcome, closed, served);
        ok
    }

    /// After a failed operation: whether the connection was closed; a live one inside a failed transaction
    /// gets a ROLLBACK, an abandoned one (timeout) is dropped.
    async fn settle_after_error(&mut self, outcome: &Outcome) -> bool {
        if *outcome == Outcome::Timeout {
            if let Some(conn) = self.conn.take() {
                conn.task.abort();
            }
            return false;
        }
        // Give the connection task a moment to see the EOF that follows a FATAL.
        sleep(Duration::from_millis(30)).await;
        let Some(conn) = self.conn.as_ref() else {
            return true;
        };
        if conn.ended() {
            return true;
        }
        let _ = timeout(Duration::from_secs(2), conn.client.simple_query("ROLLBACK")).await;
        conn.ended()
    }

    fn push(&mut self, kind: OpKind, start_ms: f64, outcome: Outcome, closed: bool, served: Option<Served>) {
        let end_ms = self.clock.now_ms();
        self.push_ended(kind, (start_ms, end_ms), outcome, closed, served);
    }

    fn push_ended(
        &mut self,
        kind: OpKind,
        (start_ms, end_ms): (f64, f64),
        outcome: Outcome,
        closed: bool,
        served: Option<Served>,
    ) {
        let (node, in_recovery) = served.map_or((None, None), |s| (Some(s.node), Some(s.in_recovery)));
        let (client, role, seq, route) = (self.id, self.role, self.seq, self.route.clone());
        let op = Op { client, route, role, seq, kind, start_ms, end_ms, outcome, closed, node, in_recovery };
        self.record.ops.push(op);
    }

    /// Drop the connection; if the other side had closed it, that is a disconnect.
    fn drop_conn(&mut self) {
        if let Some(conn) = self.conn.take() {
            let at = *conn.ended_at.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(at) = at {
                let at_ms = self.clock.ms_of(at);
                let (client, role, route) = (self.id, self.role, self.route.clone());
                self.record.disconnects.push(Disconnect { client, route, role, at_ms });
            }
            conn.task.abort();
        }
    }

    fn finish(mut self) -> Record {
        self.drop_conn();
        self.record
    }
}

/// The node that served a write, from its `RETURNING inet_server_addr(), pg_is_in_recovery()`.
struct Served {
    node: String,
    in_recovery: bool,
}

/// Run statements one round trip each; what the first row returned says about the serving node.
async fn run_steps(client: &Client, steps: &[String]) -> Result<Option<Served>, tokio_postgres::Error> {
    let mut served = None;
    for step in steps {
        for message in client.simple_query(step).await? {
            if let SimpleQueryMessage::Row(row) = message
                && served.is_none()
            {
                let node = row.get(0).unwrap_or("?").to_owned();
                served = Some(Served { node, in_recovery: row.get(1) == Some("t") });
            }
        }
    }
    Ok(served)
}

/// An error as an outcome: the server's SQLSTATE and severity, or what happened to the connection.
pub fn classify(e: &tokio_postgres::Error) -> Outcome {
    if let Some(db) = e.as_db_error() {
        let message: String = db.message().chars().take(160).collect();
        return Outcome::Sql { code: db.code().code().to_owned(), severity: db.severity().to_owned(), message };
    }
    if e.is_closed() {
        return Outcome::Transport { error: "closed".into() };
    }
    let text = format!("{e} {}", std::error::Error::source(e).map(|s| s.to_string()).unwrap_or_default());
    let kind = [
        ("refused", "refused"),
        ("reset", "reset"),
        ("timed out", "timed-out"),
        ("unexpected EOF", "closed"),
        ("closed", "closed"),
        ("broken pipe", "closed"),
    ]
    .iter()
    .find(|(needle, _)| text.to_lowercase().contains(needle))
    .map_or("other", |(_, kind)| kind);
    Outcome::Transport { error: kind.to_owned() }
}

/// The client-kill scenario: a client through the pooler locks a row and sleeps in its transaction; at the
/// fault its connection is dropped (as a killed process's would be). An observer on the node itself checks
/// that the row was locked just before, and measures when it can be locked again.
pub async fn lock_holder(target: Config, node: Config, clock: Clock, run_ms: u64) -> LockWatch {
    let mut watch = LockWatch::default();
    let Ok(holder) = Conn::open(&target).await else {
        return watch;
    };
    let locked = holder.client.simple_query("BEGIN").await.is_ok()
        && holder.client.simple_query("SELECT id FROM locks WHERE id = 1 FOR UPDATE").await.is_ok();
    if !locked {
        return watch;
    }
    let Ok((observer, connection)) = node.connect(NoTls).await else {
        return watch;
    };
    let observer_task = tokio::spawn(connection);
    // The sleep is sent when first polled and goes on in the connection task after the select moves on.
    let query = holder.client.simple_query("SELECT pg_sleep(60)");
    tokio::pin!(query);
    let check_before = async {
        sleep_until(clock.instant_at(-100.0)).await;
        try_lock(&observer).await == Some(false)
    };
    watch.held_before_kill = tokio::select! {
        _ = &mut query => false,
        held = check_before => held,
    };
    sleep_until(clock.instant_at(0.0)).await;
    let killed_at = clock.now_ms();
    // Aborting the connection task drops its socket: the pooler sees the client go, mid-query.
    holder.task.abort();
    let end = clock.instant_at(run_ms as f64);
    while Instant::now() < end {
        if try_lock(&observer).await == Some(true) {
            watch.released_after_ms = Some(clock.now_ms() - killed_at);
            break;
        }
        sleep(Duration::from_millis(20)).await;
    }
    observer_task.abort();
    watch
}

/// Whether the row could be locked right now (then released at once); None if the query failed otherwise.
async fn try_lock(observer: &Client) -> Option<bool> {
    let _ = observer.simple_query("BEGIN").await.ok()?;
    let result = observer.simple_query("SELECT id FROM locks WHERE id = 1 FOR UPDATE NOWAIT").await;
    let _ = observer.simple_query("ROLLBACK").await;
    match result {
        Ok(_) => Some(true),
        Err(e) if e.code().is_some_and(|c| c.code() == "55P03") => Some(false),
        Err(_) => None,
    }
}
