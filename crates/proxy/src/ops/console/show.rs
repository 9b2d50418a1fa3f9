//! The console's SHOW commands: PgBouncer's, with its column names, order and units, filled from what
//! pgmux knows (a row per pool, database and user in [`routes`], plus the console's own), and pgmux's own
//! (SIZING, PINS, PREPARED, LATENCY). PgBouncer's lists pgmux has nothing for (DNS_HOSTS, DNS_ZONES, PEERS,
//! PEER_POOLS) answer with PgBouncer's columns and no rows, never an error a script would stop at.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::BytesMut;
use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::sqlstate;

use super::columns::{self, LISTS_ROWS};
use super::command::Show;
use super::sockets::{self, List};
use super::table::{self, Cell, ResultSet, timestamp};
use super::{Console, DATABASE, Reply, census, routes, settings};
use crate::observe::{ClientEntry, ServerEntry, Stats};

/// Answers a SHOW.
pub(super) async fn run(console: &Console, show: Show) -> Result<Reply, ErrorMessage> {
    let set = match show {
        Show::Help => {
            let mut out = BytesMut::new();
            table::encode_help(&mut out);
            return Ok(Reply::Raw(out));
        }
        Show::Setting(s) => return Ok(Reply::Rows(table::setting(s))),
        Show::Version => one_row(columns::VERSION, vec![format!("pgmux {}", env!("CARGO_PKG_VERSION")).into()]),
        Show::Pools => routes::pools(console),
        Show::Stats => stats(console, Which::Both),
        Show::StatsTotals => stats(console, Which::Totals),
        Show::StatsAverages => stats(console, Which::Averages),
        Show::Totals => totals(console),
        Show::Clients => sockets::list(console, List::Clients),
        Show::Servers => sockets::list(console, List::Servers),
        Show::Sockets => sockets::list(console, List::Sockets),
        Show::ActiveSockets => sockets::list(console, List::ActiveSockets),
        Show::Fds => sockets::fds(),
        Show::Mem => mem(console),
        // pgmux caches no DNS answer (every new server connection resolves the host again) and has no
        // peers: PgBouncer's columns, no rows.
        Show::DnsHosts => Ok(ResultSet::new(columns::DNS_HOSTS)),
        Show::DnsZones => Ok(ResultSet::new(columns::DNS_ZONES)),
        Show::Peers => Ok(ResultSet::new(columns::PEERS)),
        Show::PeerPools => Ok(ResultSet::new(columns::PEER_POOLS)),
        Show::Databases => routes::databases(console),
        Show::Config => config(console),
        Show::Lists => lists(console),
        Show::Users => routes::users(console),
        Show::State => state(console),
        Show::Sizing => super::control::sizing(console),
        Show::Pins => pins(console),
        Show::Prepared => prepared(console),
        Show::Latency => latency(console),
    };
    set.map(Reply::Rows).map_err(|e| ErrorMessage::error(sqlstate::INTERNAL_ERROR, format!("SHOW {show:?}: {e}")))
}

type Built = Result<ResultSet, table::TableError>;

fn one_row(columns: &[table::ColumnDef], row: Vec<Cell<'_>>) -> Built {
    let mut set = ResultSet::new(columns);
    set.push(row)?;
    Ok(set)
}

/// What the console needs of the pooler's state, read once per command.
pub(super) struct View {
    pub(super) status: pgmux_pool::Status,
    pub(super) clients: Vec<Arc<ClientEntry>>,
}

pub(super) fn view(console: &Console) -> View {
    let gauges = console.shared.pools.gauges();
    let obs = console.shared.observer();
    View { status: gauges.status, clients: obs.clients.all() }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Which {
    Totals,
    Averages,
    Both,
}

/// The twelve figures of STATS_TOTALS after the database, in column order.
fn totals_row(s: &Stats) -> [u64; 12] {
    [
        s.server_assignments,
        s.xacts,
        s.queries,
        s.received,
        s.sent,
        s.xact_us,
        s.query_us,
        s.wait_us,
        s.client_parses,
        s.server_parses,
        s.binds,
        s.logins,
    ]
}

/// STATS_AVERAGES' figures: counts and bytes per second, times per event (µs).
fn averages_row(a: &Stats) -> [u64; 12] {
    a.averages()
}

fn stats(console: &Console, which: Which) -> Built {
    let mut set = ResultSet::new(match which {
        Which::Totals => columns::STATS_TOTALS,
        Which::Averages => columns::STATS_AVERAGES,
        Which::Both => columns::STATS,
    });
    for (name, totals, averages) in stats_rows(console) {
        let figures: Vec<u64> = match which {
            Which::Totals => totals_row(&totals).to_vec(),
            Which::Averages => averages_row(&averages).to_vec(),
            Which::Both => totals_row(&totals).iter().chain(&averages_row(&averages)).copied().collect(),
        };
        let mut row: Vec<Cell<'_>> = vec![name.into()];
        row.extend(figures.iter().map(|v| Cell::from(*v)));
        set.push(row)?;
    }
    Ok(set)
}

/// SHOW STATS' rows (name, totals, averages): every database clients may name (SHOW DATABASES' list)
/// and any other that counted traffic (a route a reload removed), by name and each once, then the
/// console's own.
fn stats_rows(console: &Console) -> Vec<(String, Stats, Stats)> {
    let obs = console.shared.observer();
    let census = census::take(console);
    let default = stats_database(console);
    let mut rows: BTreeMap<String, (Stats, Stats)> = BTreeMap::new();
    let mut console_row = (Stats::default(), Stats::default());
    for (key, totals) in obs.database_totals() {
        let averages = obs.averages(&key);
        if &*key == DATABASE {
            console_row = (totals, averages);
            continue;
        }
        // The default pool's counters go under its database's name (`*` with routes alone); a route of
        // the same name shares the row.
        let name = if key.is_empty() { default.clone() } else { key.into() };
        let row = rows.entry(name).or_default();
        *row = (Stats::sum([&row.0, &totals]), Stats::sum([&row.1, &averages]));
    }
    for db in routes::database_figures(console, &census) {
        rows.entry(db.name).or_default();
    }
    let mut out: Vec<(String, Stats, Stats)> = rows.into_iter().map(|(n, (t, a))| (n, t, a)).collect();
    out.push((DATABASE.to_owned(), console_row.0, console_row.1));
    out
}

/// The name STATS' row of the default pool goes under: the default database's name, or `*` (every
/// database) when routes alone are configured.
fn stats_database(console: &Console) -> String {
    let config = console.shared.config();
    if config.databases.is_empty() || !console.served.dbname.is_empty() {
        console.served.dbname.clone()
    } else {
        "*".to_owned()
    }
}

/// SHOW TOTALS: the figures of every database added up, the console's commands included.
fn totals(console: &Console) -> Built {
    let obs = console.shared.observer();
    let totals = Stats::sum(obs.database_totals().iter().map(|(_, s)| s));
    let averages = obs.averages_of_all();
    let mut set = ResultSet::new(columns::TOTALS);
    let names = columns::STATS.iter().skip(1).map(|c| c.name);
    for (name, value) in names.zip(totals_row(&totals).into_iter().chain(averages_row(&averages))) {
        set.push([name.into(), value.into()])?;
    }
    Ok(set)
}

fn config(console: &Console) -> Built {
    let config = console.shared.config();
    let in_force =
        settings::InForce { served_user: &console.served.user, pool_limit: console.shared.pools.gauges().limit };
    let mut set = ResultSet::new(columns::CONFIG);
    for row in settings::rows(&config, in_force) {
        set.push([row.key.into(), row.value.into(), row.default.into(), row.changeable.into()])?;
    }
    Ok(set)
}

/// SHOW MEM: what pgmux keeps per connection, and the memory lent to clients' large messages.
fn mem(console: &Console) -> Built {
    let obs = console.shared.observer();
    let lent = console.shared.message_memory.lent();
    let mut set = ResultSet::new(columns::MEM);
    for (name, size, used) in [
        ("client_entry", size_of::<ClientEntry>(), obs.clients.all().len()),
        ("server_entry", size_of::<ServerEntry>(), obs.servers.all().len()),
        ("message_buffers", 1, lent),
    ] {
        set.push([name.into(), int4(size), int4(used), 0i64.into(), int4(size.saturating_mul(used))])?;
    }
    Ok(set)
}

/// A count for an `int4` column, at most what one holds.
fn int4(v: usize) -> Cell<'static> {
    Cell::Int(i32::try_from(v).unwrap_or(i32::MAX).into())
}

fn lists(console: &Console) -> Built {
    let v = view(console);
    let census = census::take(console);
    let users = routes::user_figures(console, &census);
    let users = users.len() + usize::from(!users.iter().any(|u| u.name == DATABASE));
    // Each list of databases and pools has the console's own row too.
    let databases = routes::database_figures(console, &census).len() + 1;
    let pools = census.listed().count() + 1;
    let mut set = ResultSet::new(columns::LISTS);
    for name in LISTS_ROWS {
        let items: usize = match name {
            "databases" => databases,
            "pools" => pools,
            "users" => users,
            "used_clients" => v.clients.len(),
            "used_servers" => v.status.size - v.status.idle,
            "free_servers" => v.status.idle,
            _ => 0,
        };
        set.push([name.into(), items.into()])?;
    }
    Ok(set)
}

fn state(console: &Console) -> Built {
    let paused = console.shared.pools.all().iter().any(|pool| pool.status().paused);
    let mut set = ResultSet::new(columns::STATE);
    for (key, value) in [("active", !paused), ("paused", paused), ("suspended", false)] {
        set.push([key.into(), value.into()])?;
    }
    Ok(set)
}

fn pins(console: &Console) -> Built {
    let obs = console.shared.observer();
    let pids: HashMap<u64, i32> = obs.servers.all().iter().map(|s| (s.id, s.pid)).collect();
    let census = census::take(console);
    let mut set = ResultSet::new(columns::PINS);
    for c in obs.clients.all() {
        let Some((reason, since)) = c.pin() else { continue };
        let server = c.server();
        let (database, user) = census.labels(c.pool());
        set.push([
            c.id.into(),
            user.into(),
            database.into(),
            c.application_name.as_deref().unwrap_or_default().to_owned().into(),
            c.peer.addr().into(),
            c.peer.port().into(),
            metric_pin_name(reason).into(),
            reason.to_string().into(),
            timestamp(since).into(),
            (server > 0).then_some(server).into(),
            pids.get(&server).copied().into(),
        ])?;
    }
    Ok(set)
}

fn metric_pin_name(reason: crate::protocol::sql::PinReason) -> &'static str {
    use crate::protocol::sql::PinReason as P;
    match reason {
        P::Listen => "listen",
        P::AdvisoryLock => "advisory_lock",
        P::TempObject => "temp_object",
        P::HoldCursor => "hold_cursor",
        P::SqlPrepare => "sql_prepare",
        P::Load => "load",
    }
}

fn prepared(console: &Console) -> Built {
    let max = console.shared.config().max_prepared_statements;
    let mut set = ResultSet::new(columns::PREPARED);
    let read = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    for s in console.shared.observer().servers.all() {
        let st = &s.statements;
        let ServerEntry { id, pid, .. } = *s;
        set.push([
            id.into(),
            pid.into(),
            read(&st.prepared).into(),
            max.into(),
            read(&st.hits).into(),
            read(&st.parses).into(),
            read(&st.evictions).into(),
        ])?;
    }
    Ok(set)
}

fn latency(console: &Console) -> Built {
    let obs = console.shared.observer();
    let mut set = ResultSet::new(columns::LATENCY);
    let us = |v: Option<f64>| v.map(|x| x.round() as i64);
    for row in obs.metrics.latency_report(obs.uptime()) {
        set.push([
            pgmux_metrics::Label::as_str(row.latency).into(),
            row.window.into(),
            row.covers.as_secs().into(),
            row.count.into(),
            us(row.mean_us).into(),
            us(row.p50_us).into(),
            us(row.p90_us).into(),
            us(row.p99_us).into(),
            us(row.p999_us).into(),
        ])?;
    }
    Ok(set)
}
