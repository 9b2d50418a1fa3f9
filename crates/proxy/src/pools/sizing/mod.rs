//! Sizing the pool from the database, over time: the control loop that reads the database's connection
//! budget at start-up, every `pool_sizing_interval` and soon after this instance's pool changes size, turns
//! each reading into a plan ([`crate::pools::budget`]) and hands it to the [`ServerPool`], which enforces it. The
//! same loop raises a ceiling that a refusal set (the pool's probe) and keeps `min_pool_size` warm.
//!
//! Readings come through a [`Gauge`]: in production the control connection, one more server connection
//! that names itself with this instance's tag so that the fleet sees it; in tests a script.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::config::credentials::BoxFuture;
use crate::pools::budget::{Member, Plan, Reading, Report, RowError, plan};
use crate::pools::{Answer, CheckoutError, ServerPool};
use crate::protocol::failure::ServerFailure;
use crate::runtime::stop::{Level, Stop};
use crate::server::ServerConn;

/// How long the limit may stay stale in the fleet's view after this instance's pool changes size.
const PUBLISH_DEBOUNCE: Duration = Duration::from_secs(1);

/// How often the control connection is probed while clients hold server connections.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// How often the loop looks at the pool.
const TICK: Duration = Duration::from_millis(250);

/// The query a refresh runs, after setting the tag: settings, privilege, and the backends that count.
/// `backend_type` is NULL in rows the reader may not see in full; those still have a `usesysid` when they
/// are client backends.
const READ_SQL: &str = "SELECT pg_catalog.current_setting('max_connections'), \
    pg_catalog.current_setting('superuser_reserved_connections'), \
    coalesce(nullif(pg_catalog.current_setting('reserved_connections', true), ''), '0'), \
    coalesce(nullif(pg_catalog.current_setting('rds.rds_superuser_reserved_connections', true), ''), '0'), \
    pg_catalog.pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'), \
    (SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity \
       WHERE backend_type = 'client backend' OR (backend_type IS NULL AND usesysid IS NOT NULL)), \
    (SELECT pg_catalog.string_agg(application_name, '|') FROM pg_catalog.pg_stat_activity \
       WHERE application_name LIKE 'pgmux %' AND pid <> pg_catalog.pg_backend_pid());";

/// The last sizing reading, for `SHOW SIZING` and the budget gauges.
#[derive(Clone, Debug, Default)]
pub(crate) struct SizingView {
    pub(crate) reading: Option<Reading>,
    pub(crate) plan: Option<Plan>,
    /// Unix seconds of the last successful reading.
    pub(crate) read_unix: Option<u64>,
    /// Why the last reading failed, if it did.
    pub(crate) error: Option<String>,
}

/// Why a reading could not be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SizingError {
    #[error("cannot connect to the database: {0}")]
    Connect(#[from] CheckoutError),
    #[error("cannot read the connection settings and pg_stat_activity: {0}")]
    Read(#[from] ServerFailure),
    #[error("the sizing query returned no row")]
    NoRow,
    #[error("the sizing query returned {0}")]
    BadRow(#[from] RowError),
}

/// A source of readings of the database.
pub(crate) trait Gauge: Send {
    /// Reads the database as instance `me`, whose tag the fleet sees from now on.
    fn read<'a>(&'a mut self, pool: &'a ServerPool, me: &'a Member) -> BoxFuture<'a, Result<Reading, SizingError>>;

    /// Lets go of what it holds, at shutdown.
    fn close(&mut self) -> BoxFuture<'_, ()>;

    /// Checks that the node still answers, while clients hold server connections (see
    /// `ServerPool::probe_liveness`); a gauge without a connection of its own does nothing.
    fn probe<'a>(&'a mut self, _pool: &'a ServerPool) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// Readings through the control connection, opened when first needed and again after a failure.
#[derive(Debug, Default)]
pub(crate) struct ControlConnection {
    conn: Option<Box<ServerConn>>,
}

impl ControlConnection {
    async fn read_as(&mut self, pool: &ServerPool, tag: &str) -> Result<Reading, SizingError> {
        let conn = match &mut self.conn {
            Some(conn) => conn,
            // Named at login: until its first query, an unnamed control connection would look like a pool
            // connection to another instance counting the fleet.
            None => {
                let conn = self.conn.insert(Box::new(pool.open_control(tag).await?));
                pool.control_on(Some(conn.addr));
                conn
            }
        };
        // While clients hold connections the pool's probe leaves this node to the control connection, so a
        // reading is held to the probe's timeout and its silence counts as the probe's would.
        let config = pool.config();
        let probing = pool.status().lent() && !config.server_probe_timeout.is_zero();
        let timeout = match probing {
            true => config.server_probe_timeout.min(config.server_connect_timeout),
            false => config.server_connect_timeout,
        };
        // Shielded from settings the role or the database may carry (a statement_timeout, a search_path).
        let sql = format!("SET application_name = '{tag}'; {READ_SQL}");
        let asked = Instant::now();
        match conn.run_guarded(&sql, timeout).await {
            Ok(rows) => Ok(Reading::from_row(rows.first().ok_or(SizingError::NoRow)?)?),
            Err(e) => {
                if probing && matches!(e, ServerFailure::Timeout(_)) {
                    pool.silent(conn.addr, asked, "the control connection's reading timed out");
                }
                self.lost(pool);
                Err(e.into())
            }
        }
    }

    /// The control connection failed: it is dropped, and the pool's probe asks its node again.
    fn lost(&mut self, pool: &ServerPool) {
        self.conn = None;
        pool.control_on(None);
    }
}

impl Gauge for ControlConnection {
    fn read<'a>(&'a mut self, pool: &'a ServerPool, me: &'a Member) -> BoxFuture<'a, Result<Reading, SizingError>> {
        Box::pin(async move { self.read_as(pool, &me.tag()).await })
    }

    fn close(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(conn) = self.conn.take() {
                conn.terminate().await;
            }
        })
    }

    fn probe<'a>(&'a mut self, pool: &'a ServerPool) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let timeout = pool.config().server_probe_timeout;
            let Some(conn) = self.conn.as_mut().filter(|_| !timeout.is_zero()) else { return };
            let asked = Instant::now();
            let node = conn.addr;
            match pool.ask_node(conn, timeout).await {
                Answer::Answered => {}
                Answer::Failed => self.lost(pool),
                answer => {
                    pool.heard(node, asked, &answer);
                    self.lost(pool);
                }
            }
        })
    }
}

/// Keeps the pool's limit in step with the database until shutdown, and `min_pool_size` connections warm.
/// Does no database I/O before `gate` fires (in Lambda: once the extension has called `event/next`).
pub(crate) async fn run(pool: Arc<ServerPool>, stop: Stop, gate: Option<oneshot::Receiver<()>>) {
    run_with(pool, stop, gate, ControlConnection::default()).await;
}

async fn run_with(pool: Arc<ServerPool>, stop: Stop, gate: Option<oneshot::Receiver<()>>, gauge: impl Gauge) {
    if let Some(gate) = gate {
        tokio::select! {
            _ = stop.reached(Level::Graceful) => return,
            _ = gate => {}
        }
    }
    let mut control = (pool.config().max_connections_percent > 0).then(|| Control::new(&pool, gauge));
    let mut quiet = Quiet::default();
    // On the process's beat: the liveness rounds and maintenance wake with it.
    let mut tick = pgmux_timer::beat(TICK);
    loop {
        let wanted = tokio::select! {
            _ = stop.reached(Level::Graceful) => break,
            _ = tick.tick() => false,
            // The pool is about to grow on an old reading: read now.
            _ = pool.budget_wanted() => true,
        };
        if let Some(control) = &mut control {
            if wanted {
                control.due = Instant::now();
            }
            match quiet.asleep(&pool, wanted || control.last.is_none()) {
                Sleep::Awake => control.step(&pool).await,
                Sleep::FallingAsleep => control.sleep(&pool).await,
                Sleep::Asleep => {}
            }
        }
        if let Some(limit) = pool.probe() {
            tracing::info!(limit, "no refusal for a while: raising the pool limit");
        }
        pool.warm();
    }
    if let Some(mut control) = control {
        control.gauge.close().await;
    }
}

/// Whether pgmux lets the database sleep: with no server connection in any pool for `server_idle_timeout`,
/// the control connection closes too, so that nothing of pgmux's keeps an Aurora Serverless v2 cluster from
/// pausing (it pauses when no user connection is open for its timeout). Sizing resumes with the next demand
/// (a pool about to grow, or a connection open again); meanwhile the last reading's plan stays in force.
#[derive(Debug, Default)]
struct Quiet {
    /// Since when no pool has held a server connection.
    since: Option<Instant>,
    asleep: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum Sleep {
    Awake,
    /// Quiet long enough just now: close what is open.
    FallingAsleep,
    Asleep,
}

impl Quiet {
    /// Where sizing stands now; `demand`: a reading is wanted whatever the quiet (a pool about to grow, or
    /// no reading yet).
    fn asleep(&mut self, pool: &ServerPool, demand: bool) -> Sleep {
        let after = pool.config().server_idle_timeout;
        let held = pool.status().size + pool.globals().budget_limit.as_ref().map_or(0, |budget| budget.held());
        if demand || held > 0 || after.is_zero() {
            self.since = None;
            if std::mem::take(&mut self.asleep) {
                tracing::info!("demand is back: sizing reads the database again");
            }
            return Sleep::Awake;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        match (self.asleep, since.elapsed() >= after) {
            (true, _) => Sleep::Asleep,
            (false, true) => {
                self.asleep = true;
                Sleep::FallingAsleep
            }
            (false, false) => Sleep::Awake,
        }
    }
}

/// The gauge and when to use it next.
struct Control<G> {
    id: String,
    gauge: G,
    /// When the next reading is due.
    due: Instant,
    /// Pool size and limit last published in the tag.
    published: (usize, usize),
    /// When the tag was last published.
    published_at: Instant,
    /// Wait before the next attempt after a failure.
    retry: Duration,
    /// The last reading's plan, to log changes only.
    last: Option<Plan>,
    /// When the node was last probed for an answer.
    probed_at: Instant,
}

impl<G: Gauge> Control<G> {
    fn new(pool: &ServerPool, gauge: G) -> Self {
        let id = format!("{:08x}", rand::random::<u32>());
        tracing::info!(instance = %id, percent = pool.config().max_connections_percent,
            cap = ?pool.config().pool_max, "sizing the pool from the database");
        let now = Instant::now();
        Control {
            id,
            gauge,
            due: now,
            published: (0, 0),
            published_at: now,
            retry: Duration::ZERO,
            last: None,
            probed_at: now,
        }
    }

    /// No server connection has been open for server_idle_timeout: lets go of the control connection (the
    /// fleet stops counting this instance until it reads again) and keeps the last plan.
    async fn sleep(&mut self, pool: &ServerPool) {
        tracing::info!(after = ?pool.config().server_idle_timeout,
            "no server connection in use: closing the control connection so that the database may sleep");
        self.gauge.close().await;
        pool.control_on(None);
        // The next reading is at the next demand, not on the clock.
        self.due = Instant::now();
        self.published = (0, 0);
    }

    /// Reads again if due, or if the pool changed size since the fleet last saw it (but never sooner than a
    /// failed attempt's back-off allows).
    async fn step(&mut self, pool: &ServerPool) {
        let now = Instant::now();
        let changed = (pool.status().size, pool.limit()) != self.published;
        let republish = changed && self.retry.is_zero() && now.duration_since(self.published_at) >= PUBLISH_DEBOUNCE;
        if now < self.due && !republish {
            if now.duration_since(self.probed_at) >= PROBE_EVERY && pool.status().lent() {
                self.probed_at = now;
                self.gauge.probe(pool).await;
            }
            return;
        }
        match self.refresh(pool).await {
            Ok(()) => {
                self.retry = Duration::ZERO;
                self.due = Instant::now() + pool.config().pool_sizing_interval;
            }
            Err(e) => {
                // A pool waiting for this reading before it grows goes on with the limit it has.
                pool.budget_read_failed();
                self.retry = (self.retry * 2).clamp(Duration::from_millis(500), Duration::from_secs(30));
                self.due = Instant::now() + self.retry;
                tracing::warn!(error = %e, retry_in = ?self.retry, limit = pool.limit(),
                    "cannot read the database's connection budget; keeping the current pool limit");
            }
        }
    }

    async fn refresh(&mut self, pool: &ServerPool) -> Result<(), SizingError> {
        // Connections open, not places reserved for ones being opened: the reading counts only what exists.
        let status = pool.status();
        let held = status.size - status.opening;
        let me = Member { id: self.id.clone(), open: held, limit: pool.limit(), cap: pool.cap() };
        let reading = self.gauge.read(pool, &me).await.inspect_err(|e| pool.globals().sizing_read(Err(e)))?;
        let plan = plan(&reading, &me, pool.config().max_connections_percent);
        pool.globals().sizing_read(Ok((&reading, &plan)));
        if !reading.sees_all && self.last.is_none() {
            tracing::warn!(
                "the database role lacks pg_read_all_stats: connections of other roles are counted, \
                but pgmux cannot tell which are other pgmux instances; GRANT pg_read_all_stats (or pg_monitor)"
            );
        }
        if self.last.as_ref() != Some(&plan) {
            tracing::info!(
                max_connections = reading.max_connections,
                usable = plan.usable,
                budget = plan.budget,
                outsiders = plan.outsiders,
                instances = plan.members,
                limit = plan.limit,
                "pool sizing"
            );
        }
        pool.plan(plan.limit);
        pool.budget_read();
        self.published = (held, me.limit);
        self.published_at = Instant::now();
        self.last = Some(plan);
        Ok(())
    }
}

/// `pgmux check`: reads the database once as a new instance would, on a connection named `pgmux-check`
/// (which counts as that instance's control connection).
pub(crate) async fn check(pool: &ServerPool) -> Result<Report, SizingError> {
    let mut gauge = ControlConnection::default();
    let reading = gauge.read_as(pool, "pgmux-check").await;
    gauge.close().await;
    let reading = reading?;
    let (percent, cap) = (pool.config().max_connections_percent, pool.cap());
    // A new instance, with an id that sorts after every other: it is told its equal share.
    let me = Member { id: "~".to_owned(), open: 0, limit: 0, cap };
    let plan = plan(&reading, &me, percent);
    Ok(Report { reading, plan, percent, cap })
}

#[cfg(test)]
mod tests;
