//! Sizing the pool from the database: how many server connections pgmux may hold right now.
//!
//! A control connection (one more server connection, logged in like the others) reads `max_connections`,
//! the reserved slots and `pg_stat_activity` at start-up, every `pool_sizing_interval` and after every
//! reconnect. The database is the only coordination point between pgmux instances: each one names its
//! control connection `pgmux <id> open=<n> limit=<n> cap=<n|->`, so every instance sees the others, what
//! they hold and what they may hold, in the same view that shows everyone else's connections.
//!
//! From one reading ([`plan`]): `usable = max_connections − reserved`, `budget = usable ×
//! max_connections_percent / 100`; everything that is not a pgmux connection counts against it first, then
//! the instances split the rest equally (an instance capped below its share by `pool_max` leaves the
//! difference to the others), each keeping one connection for control. An instance never goes below one
//! pool connection: when the budget is gone, the database's own refusals take over (below).
//!
//! Back-pressure: a server that refuses a new connection with SQLSTATE 53300 (too many clients, slots
//! reserved) makes pgmux lower its limit to what it holds; the waiting client keeps waiting, and the limit
//! is probed upward again, one connection per second without a refusal, up to the planned limit.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::server::{ConnectError, ServerConn};
use crate::shared::Shared;
use crate::stop::{Level, Stop};

/// The limit when sizing is off and `pool_max` is unset.
pub const FALLBACK_POOL_MAX: usize = 20;

/// The limit until the first reading, when sizing is on: enough to serve, small enough to be safe.
const PROVISIONAL_LIMIT: usize = 2;

/// How often a lowered ceiling is raised by one while no refusal comes.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// How long the limit may stay stale in the fleet's view after this instance's pool changes size.
const PUBLISH_DEBOUNCE: Duration = Duration::from_secs(1);

/// The prefix of a control connection's `application_name`.
const TAG_PREFIX: &str = "pgmux ";

/// The query a refresh runs, after setting the tag: settings, privilege, and the backends that count.
/// `backend_type` is NULL in rows the reader may not see in full; those still have a `usesysid` when they
/// are client backends.
const READ_SQL: &str = "SELECT current_setting('max_connections'), \
    current_setting('superuser_reserved_connections'), \
    coalesce(nullif(current_setting('reserved_connections', true), ''), '0'), \
    coalesce(nullif(current_setting('rds.rds_superuser_reserved_connections', true), ''), '0'), \
    pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'), \
    (SELECT count(*) FROM pg_stat_activity \
       WHERE backend_type = 'client backend' OR (backend_type IS NULL AND usesysid IS NOT NULL)), \
    (SELECT string_agg(application_name, '|') FROM pg_stat_activity \
       WHERE application_name LIKE 'pgmux %' AND pid <> pg_backend_pid())";

/// Another pgmux instance, as its control connection's tag shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its instance id.
    pub id: String,
    /// Pool connections it holds.
    pub open: usize,
    /// Its current limit.
    pub limit: usize,
    /// Its `pool_max`, if set.
    pub cap: Option<usize>,
}

impl Member {
    /// Reads a tag; `None` if it is not one.
    pub fn parse(tag: &str) -> Option<Member> {
        let mut words = tag.strip_prefix(TAG_PREFIX)?.split_ascii_whitespace();
        let id = words.next()?.to_owned();
        let (mut open, mut limit, mut cap) = (None, None, None);
        for word in words {
            match word.split_once('=')? {
                ("open", v) => open = v.parse().ok(),
                ("limit", v) => limit = v.parse().ok(),
                ("cap", "-") => cap = Some(None),
                ("cap", v) => cap = Some(Some(v.parse().ok()?)),
                _ => {}
            }
        }
        Some(Member { id, open: open?, limit: limit?, cap: cap? })
    }

    /// The tag for `application_name`.
    pub fn tag(&self) -> String {
        let cap = self.cap.map_or_else(|| "-".to_owned(), |c| c.to_string());
        format!("{TAG_PREFIX}{} open={} limit={} cap={cap}", self.id, self.open, self.limit)
    }
}

/// What one reading of the database says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading {
    /// `max_connections`.
    pub max_connections: usize,
    /// `superuser_reserved_connections`.
    pub superuser_reserved: usize,
    /// `reserved_connections` (PostgreSQL 16 and later; 0 before).
    pub reserved: usize,
    /// `rds.rds_superuser_reserved_connections` (RDS and Aurora; 0 elsewhere).
    pub rds_reserved: usize,
    /// Whether the control connection's role may see every backend (`pg_read_all_stats`).
    pub sees_all: bool,
    /// Client backends on the server, every database and role, this control connection included.
    pub in_use: usize,
    /// The other pgmux instances.
    pub others: Vec<Member>,
}

impl Reading {
    /// Every reserved slot: superuser, `reserved_connections`, RDS's.
    pub fn reserved_total(&self) -> usize {
        self.superuser_reserved + self.reserved + self.rds_reserved
    }

    fn from_row(row: &[Option<String>]) -> Result<Reading, String> {
        let number = |i: usize, what: &str| -> Result<usize, String> {
            let text = row.get(i).and_then(|v| v.as_deref()).ok_or_else(|| format!("no value for {what}"))?;
            text.trim().parse().map_err(|_| format!("{what} is {text:?}, not a number"))
        };
        let others = row.get(6).and_then(|v| v.as_deref()).unwrap_or_default();
        Ok(Reading {
            max_connections: number(0, "max_connections")?,
            superuser_reserved: number(1, "superuser_reserved_connections")?,
            reserved: number(2, "reserved_connections")?,
            rds_reserved: number(3, "rds.rds_superuser_reserved_connections")?,
            sees_all: row.get(4).and_then(|v| v.as_deref()) == Some("t"),
            in_use: number(5, "the count of client backends")?,
            others: others.split('|').filter_map(Member::parse).collect(),
        })
    }
}

/// What pgmux makes of a reading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// `max_connections` minus the reserved slots.
    pub usable: usize,
    /// `max_connections_percent` of `usable`: what the fleet may hold, with everyone else's connections.
    pub budget: usize,
    /// Client backends that belong to no pgmux of the fleet.
    pub outsiders: usize,
    /// pgmux instances, this one included.
    pub members: usize,
    /// This instance's equal share of the pool connections left (before `pool_max`).
    pub share: usize,
    /// The limit this instance takes: the share, capped by `pool_max`, at least 1.
    pub limit: usize,
}

/// Works out this instance's limit from a reading, given what it holds (`own_open` pool connections plus
/// its control connection) and its `pool_max`.
pub fn plan(r: &Reading, own_open: usize, percent: usize, cap: Option<usize>) -> Plan {
    let usable = r.max_connections.saturating_sub(r.reserved_total());
    let budget = usable * percent / 100;
    let fleet_held: usize = r.others.iter().map(|m| m.open + 1).sum::<usize>() + own_open + 1;
    let outsiders = r.in_use.saturating_sub(fleet_held);
    let members = r.others.len() + 1;
    // Pool connections the fleet may hold: the budget less everyone else's, less a control connection each.
    let mut left = budget.saturating_sub(outsiders).saturating_sub(members);
    // Equal shares; whoever is capped below the share takes only its cap, the rest split what remains.
    let mut caps: Vec<Option<usize>> = r.others.iter().map(|m| m.cap).chain([cap]).collect();
    caps.sort_by_key(|c| c.unwrap_or(usize::MAX));
    let mut uncapped = caps.len();
    for c in &caps {
        match c {
            Some(c) if *c < left / uncapped => {
                left -= c;
                uncapped -= 1;
            }
            _ => break,
        }
    }
    let share = left / uncapped.max(1);
    let limit = cap.map_or(share, |c| share.min(c)).max(1);
    Plan { usable, budget, outsiders, members, share, limit }
}

/// The current limit and what it comes from; shared with the sessions, which report refusals.
#[derive(Debug)]
pub(crate) struct Limits {
    inner: Mutex<LimitState>,
}

#[derive(Debug)]
struct LimitState {
    /// From the last reading (or the configuration).
    planned: usize,
    /// Lowered after a refusal, raised by probing; `None` when there is none.
    ceiling: Option<usize>,
    /// When the ceiling last moved.
    moved: Instant,
}

impl Limits {
    pub(crate) fn new(planned: usize) -> Limits {
        Limits { inner: Mutex::new(LimitState { planned, ceiling: None, moved: Instant::now() }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LimitState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The limit in force.
    pub(crate) fn current(&self) -> usize {
        self.lock().in_force()
    }

    /// Sets the planned limit; returns the limit in force.
    pub(crate) fn plan(&self, planned: usize) -> usize {
        let mut st = self.lock();
        st.planned = planned;
        if st.ceiling.is_some_and(|c| c >= planned) {
            st.ceiling = None;
        }
        st.in_force()
    }

    /// The server refused a connection while pgmux held `held`: no more than that for now (at least 1).
    pub(crate) fn refused(&self, held: usize) -> usize {
        let mut st = self.lock();
        st.ceiling = Some(held.max(1).min(st.ceiling.unwrap_or(usize::MAX)));
        st.moved = Instant::now();
        st.in_force()
    }

    /// Raises a ceiling that has held for [`PROBE_EVERY`] by one; `Some(limit)` if the limit changed.
    pub(crate) fn probe(&self) -> Option<usize> {
        let mut st = self.lock();
        let ceiling = st.ceiling?;
        if st.moved.elapsed() < PROBE_EVERY {
            return None;
        }
        st.moved = Instant::now();
        if ceiling + 1 >= st.planned {
            st.ceiling = None;
            return Some(st.planned);
        }
        st.ceiling = Some(ceiling + 1);
        Some(ceiling + 1)
    }
}

impl LimitState {
    fn in_force(&self) -> usize {
        self.ceiling.map_or(self.planned, |c| c.min(self.planned))
    }
}

/// The limit before any reading: `pool_max`, else the fallback (sizing off) or the provisional one.
pub(crate) fn initial_limit(percent: usize, cap: Option<usize>) -> usize {
    match (percent, cap) {
        (0, cap) => cap.unwrap_or(FALLBACK_POOL_MAX),
        (_, cap) => cap.map_or(PROVISIONAL_LIMIT, |c| c.min(PROVISIONAL_LIMIT)),
    }
}

/// Whether a failed connect was the server saying it has no slot left (SQLSTATE 53300).
pub(crate) fn is_refusal(e: &ConnectError) -> bool {
    matches!(e, ConnectError::Rejected { code, .. } if code == pgmux_proto::sqlstate::TOO_MANY_CONNECTIONS)
}

/// A fresh instance id: 8 hex digits, random per process.
fn instance_id() -> String {
    format!("{:08x}", rand::random::<u32>())
}

/// Keeps the pool's limit in step with the database until shutdown, and `min_pool_size` connections warm.
/// Does no database I/O before `gate` fires (in Lambda: once the extension has called `event/next`).
pub(crate) async fn run(shared: Arc<Shared>, stop: Stop, gate: Option<oneshot::Receiver<()>>) {
    if let Some(gate) = gate {
        tokio::select! {
            _ = stop.reached(Level::Graceful) => return,
            _ = gate => {}
        }
    }
    let percent = shared.config.max_connections_percent;
    let mut control = (percent > 0).then(|| Control::new(&shared));
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.reached(Level::Graceful) => break,
            _ = tick.tick() => {}
        }
        if let Some(control) = &mut control {
            control.step(&shared).await;
        }
        if let Some(limit) = shared.limits.probe() {
            tracing::info!(limit, "no refusal for a while: raising the pool limit");
            shared.apply_limit(limit);
        }
        shared.warm();
    }
    if let Some(Control { conn: Some(conn), .. }) = control {
        conn.terminate().await;
    }
}

/// The control connection and when to use it next.
struct Control {
    id: String,
    conn: Option<Box<ServerConn>>,
    /// When the next reading is due.
    due: Instant,
    /// Pool size and limit last published in the tag.
    published: (usize, usize),
    /// When the tag was last published.
    published_at: Instant,
    /// Wait before the next connect attempt after a failure.
    retry: Duration,
    /// The last reading's plan, to log changes only.
    last: Option<Plan>,
}

impl Control {
    fn new(shared: &Shared) -> Control {
        let id = instance_id();
        tracing::info!(instance = %id, percent = shared.config.max_connections_percent,
            cap = ?shared.config.pool_max, "sizing the pool from the database");
        let now = Instant::now();
        Control { id, conn: None, due: now, published: (0, 0), published_at: now, retry: Duration::ZERO, last: None }
    }

    /// Reads again if due, or if the pool changed size since the fleet last saw it.
    async fn step(&mut self, shared: &Shared) {
        let now = Instant::now();
        let status = shared.pool.status();
        let changed = (status.size, shared.limits.current()) != self.published;
        if now < self.due && !(changed && now.duration_since(self.published_at) >= PUBLISH_DEBOUNCE) {
            return;
        }
        match self.refresh(shared).await {
            Ok(()) => {
                self.retry = Duration::ZERO;
                self.due = Instant::now() + shared.config.pool_sizing_interval;
            }
            Err(e) => {
                self.conn = None;
                self.retry = (self.retry * 2).clamp(Duration::from_millis(500), Duration::from_secs(30));
                self.due = Instant::now() + self.retry;
                tracing::warn!(error = %e, retry_in = ?self.retry, limit = shared.limits.current(),
                    "cannot read the database's connection budget; keeping the current pool limit");
            }
        }
    }

    async fn refresh(&mut self, shared: &Shared) -> Result<(), String> {
        let held = shared.pool.status().size;
        let me =
            Member { id: self.id.clone(), open: held, limit: shared.limits.current(), cap: shared.config.pool_max };
        if self.conn.is_none() {
            // Named at login: until its first query, an unnamed control connection would look like a pool
            // connection (or an outsider) to anyone counting backends.
            let conn = shared.open_control(&me.tag()).await.map_err(|e| e.to_string())?;
            self.conn = Some(Box::new(conn));
        }
        let Some(conn) = self.conn.as_mut() else { unreachable!("connected above") };
        let sql = format!("SET application_name = '{}'; {READ_SQL}", me.tag());
        let rows = conn.query_rows(&sql, shared.config.server_connect_timeout).await.map_err(|e| e.to_string())?;
        let row = rows.first().ok_or("the sizing query returned no row")?;
        let reading = Reading::from_row(row)?;
        let config = &shared.config;
        let plan = plan(&reading, held, config.max_connections_percent, config.pool_max);
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
        let limit = shared.limits.plan(plan.limit);
        shared.apply_limit(limit);
        self.published = (held, me.limit);
        self.published_at = Instant::now();
        self.last = Some(plan);
        Ok(())
    }
}

/// Reads the database once as a new instance would, on a connection named `pgmux-check` (which counts as
/// that instance's control connection).
pub(crate) async fn check(shared: &Shared) -> Result<Report, String> {
    let conn = shared.open_control("pgmux-check").await.map_err(|e| format!("cannot connect to the database: {e}"))?;
    let mut conn = Box::new(conn);
    let sql = format!("SET application_name = 'pgmux-check'; {READ_SQL}");
    let result = conn.query_rows(&sql, shared.config.server_connect_timeout).await;
    conn.terminate().await;
    let rows = result.map_err(|e| format!("cannot read the connection settings and pg_stat_activity: {e}"))?;
    let reading = Reading::from_row(rows.first().ok_or("the sizing query returned no row")?)?;
    let (percent, cap) = (shared.config.max_connections_percent, shared.config.pool_max);
    let plan = plan(&reading, 0, percent, cap);
    Ok(Report { reading, plan, percent, cap })
}

/// What `pgmux check` found.
#[derive(Clone, Debug)]
pub struct Report {
    /// The reading.
    pub reading: Reading,
    /// The plan for a new instance with this configuration.
    pub plan: Plan,
    /// `max_connections_percent`.
    pub percent: usize,
    /// `pool_max`.
    pub cap: Option<usize>,
}

impl Report {
    /// Problems that make the configuration unusable, as messages a person can act on.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.reading.sees_all {
            out.push(
                "the database role cannot read every row of pg_stat_activity, so pgmux cannot see the other \
                 pgmux instances: GRANT pg_read_all_stats (or pg_monitor) TO the role"
                    .to_owned(),
            );
        }
        if self.percent > 0 && self.plan.budget == 0 {
            out.push(format!(
                "the budget is zero: max_connections {} minus {} reserved leaves {} usable, and {} % of that is \
                 nothing; raise max_connections_percent or max_connections",
                self.reading.max_connections,
                self.reading.reserved_total(),
                self.plan.usable,
                self.percent
            ));
        } else if self.percent > 0 && self.plan.budget <= self.plan.outsiders + self.plan.members {
            out.push(format!(
                "the budget of {} is used up: {} connections belong to others and {} pgmux instances need a \
                 control connection each; pgmux would run with 1 pool connection",
                self.plan.budget, self.plan.outsiders, self.plan.members
            ));
        }
        out
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (r, p) = (&self.reading, &self.plan);
        writeln!(f, "max_connections                          {}", r.max_connections)?;
        writeln!(f, "superuser_reserved_connections           {}", r.superuser_reserved)?;
        writeln!(f, "reserved_connections                     {}", r.reserved)?;
        writeln!(f, "rds.rds_superuser_reserved_connections   {}", r.rds_reserved)?;
        writeln!(f, "usable                                   {}", p.usable)?;
        writeln!(f, "max_connections_percent                  {}", self.percent)?;
        writeln!(f, "budget                                   {}", p.budget)?;
        writeln!(f, "client backends now                      {}", r.in_use)?;
        writeln!(f, "of which belong to no pgmux              {}", p.outsiders)?;
        writeln!(f, "sees every backend (pg_read_all_stats)   {}", if r.sees_all { "yes" } else { "no" })?;
        writeln!(f, "pgmux instances (with this one)          {}", p.members)?;
        for m in &r.others {
            writeln!(f, "  {}", m.tag())?;
        }
        writeln!(f, "share                                    {}", p.share)?;
        writeln!(f, "pool_max                                 {}", self.cap.map_or("-".to_owned(), |c| c.to_string()))?;
        if self.percent == 0 {
            write!(f, "pool limit                               {} (sizing off)", initial_limit(0, self.cap))
        } else {
            write!(f, "pool limit                               {}", p.limit)
        }
    }
}

#[cfg(test)]
mod tests;
