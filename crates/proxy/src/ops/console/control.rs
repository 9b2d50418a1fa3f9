//! The console's commands that act: PAUSE, RESUME, RECONNECT, WAIT_CLOSE, RELOAD, KILL, KILL_CLIENT,
//! DISABLE, ENABLE, SHUTDOWN and SET; and SHOW SIZING, which reads the sizing loop's last look at the database. PAUSE,
//! RESUME, RECONNECT, WAIT_CLOSE and KILL act on every pool, or with a database on that route's pools alone.

use std::sync::Arc;
use std::time::Duration;

use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::sqlstate;

use super::columns;
use super::command::{Command, ShutdownMode};
use super::table::{Cell, ResultSet, TableError, timestamp};
use super::{Console, Reply, settings};
use crate::ops::reload::{self, ReloadError};
use crate::pools::ServerPool;
use crate::runtime::stop::Level;

/// How often PAUSE and WAIT_CLOSE look whether they are done.
const POLL: Duration = Duration::from_millis(20);

/// Runs a command other than SHOW.
pub(super) async fn run(console: &Console, command: &Command) -> Result<Reply, ErrorMessage> {
    match command {
        Command::Pause(db) => pause(console, db.as_deref()).await,
        Command::Resume(db) => {
            if console.stop.level() >= Level::Closed {
                return Err(ErrorMessage::error(sqlstate::PROTOCOL_VIOLATION, "pooler is shutting down")
                    .with_hint("a shutdown cannot be taken back; paused pools stay paused until pgmux stops"));
            }
            let pools = chosen(console, db.as_deref())?;
            if !pools.iter().any(|pool| pool.status().paused) {
                return Err(ErrorMessage::error(sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE, "pgmux is not paused"));
            }
            pools.iter().for_each(|pool| pool.resume());
            tracing::info!("RESUME: lending server connections again");
            Ok(Reply::Done)
        }
        Command::Reconnect(db) => {
            chosen(console, db.as_deref())?.iter().for_each(|pool| pool.reconnect());
            tracing::info!("RECONNECT: every server connection is replaced as it comes back");
            Ok(Reply::Done)
        }
        Command::WaitClose(db) => {
            let pools = chosen(console, db.as_deref())?;
            until(console, || pools.iter().all(|pool| pool.stale_open() == 0)).await?;
            Ok(Reply::Done)
        }
        Command::Reload => match reload::reload(&console.shared) {
            Ok(_) => Ok(Reply::Done),
            // PgBouncer's words first ("RELOAD failed, see logs for additional details"), which scripts and its
            // test suite match; then the reason, also in the log.
            Err(why) => Err(ErrorMessage::error(
                sqlstate::CONFIG_FILE_ERROR,
                format!("RELOAD failed, see logs for additional details: {why}"),
            )
            .with_hint("the running configuration stays in force; fix the file and RELOAD again")),
        },
        Command::Kill(db) => kill_database(console, db.as_deref()).await,
        Command::KillClient(id) => kill(console, *id),
        Command::Disable(db) => {
            chosen(console, Some(db))?;
            console.shared.disabled.disable(db);
            tracing::info!(database = %db, "DISABLE: new clients of this database are refused until ENABLE");
            Ok(Reply::Done)
        }
        Command::Enable(db) => {
            chosen(console, Some(db))?;
            if console.shared.disabled.enable(db) {
                tracing::info!(database = %db, "ENABLE: new clients of this database are let in again");
            }
            Ok(Reply::Done)
        }
        Command::Shutdown(mode) => shutdown(console, *mode),
        Command::Set { key, value } => set(console, key, value),
        Command::Show(_) | Command::SetIgnored(_) | Command::Empty => Ok(Reply::Done),
    }
}

/// The pools a command's database argument names: every pool without one; with one, that route's pools
/// (none yet, for a route no client has used), or the default pool by `database_url`'s database name.
fn chosen(console: &Console, db: Option<&str>) -> Result<Vec<Arc<ServerPool>>, ErrorMessage> {
    let all = console.shared.pools.all();
    let Some(db) = db else { return Ok(all) };
    let config = console.shared.config();
    let served = console.served.dbname.as_str();
    let default_named = config.databases.is_empty() || !config.database_url.login.host.is_empty();
    let routes: Vec<&str> = config.databases.iter().map(|r| r.name.as_str()).filter(|n| *n != "*").collect();
    let name_of = |pool: &ServerPool| {
        let key = pool.key();
        if key.database.is_empty() { served.to_owned() } else { key.database.clone() }
    };
    let mine: Vec<Arc<ServerPool>> = all.into_iter().filter(|pool| name_of(pool) == db).collect();
    if !mine.is_empty() || routes.contains(&db) || (default_named && db == served) {
        return Ok(mine);
    }
    let hint = if routes.is_empty() {
        format!("this pgmux serves database \"{served}\"")
    } else {
        let names: Vec<String> =
            default_named.then_some(served).into_iter().chain(routes).map(|n| format!("\"{n}\"")).collect();
        format!("this pgmux serves the databases {}", names.join(", "))
    };
    Err(ErrorMessage::error(sqlstate::INVALID_CATALOG_NAME, format!("no such database: {db}")).with_hint(hint))
}

/// Waits until `done` says yes, or pgmux stops.
async fn until(console: &Console, done: impl Fn() -> bool) -> Result<(), ErrorMessage> {
    while !done() {
        tokio::select! {
            _ = pgmux_timer::sleep(POLL) => {}
            _ = console.stop.reached(Level::Hard) => return Err(super::shutting_down()),
        }
    }
    Ok(())
}

/// Holds new transactions and returns once no server connection is lent.
async fn pause(console: &Console, db: Option<&str>) -> Result<Reply, ErrorMessage> {
    let pools = chosen(console, db)?;
    if pools.iter().any(|pool| pool.status().paused) {
        return Err(ErrorMessage::error(sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE, "pgmux is already paused"));
    }
    pools.iter().for_each(|pool| pool.pause());
    tracing::info!("PAUSE: holding new transactions; waiting for running ones to finish");
    until(console, || {
        pools.iter().all(|pool| {
            let s = pool.status();
            s.size == s.idle
        })
    })
    .await?;
    tracing::info!("PAUSE: no server connection in use");
    Ok(Reply::Done)
}

fn kill(console: &Console, id: u64) -> Result<Reply, ErrorMessage> {
    let Some(client) = console.shared.observer().clients.get(id) else {
        return Err(ErrorMessage::error(sqlstate::UNDEFINED_OBJECT, format!("no client with id {id}"))
            .with_hint("SHOW CLIENTS lists the ids"));
    };
    tracing::info!(client_id = id, "KILL_CLIENT");
    console.stop.kill(&client.kill);
    Ok(Reply::Done)
}

/// Longest KILL waits for the sessions it ended to be gone (each ends at its next wake-up, at once unless
/// its task is starved).
const KILL_WAIT: Duration = Duration::from_secs(5);

/// KILL [db], as PgBouncer: the database's pools are paused (new clients wait until RESUME), every client
/// of them is ended (57P01, as KILL_CLIENT ends one) and every server connection of them closed: idle ones
/// now, lent ones as their clients end. Returns once the clients are gone from SHOW CLIENTS.
async fn kill_database(console: &Console, db: Option<&str>) -> Result<Reply, ErrorMessage> {
    let pools = chosen(console, db)?;
    let ids: Vec<u16> = pools.iter().map(|pool| pool.id().index()).collect();
    for pool in &pools {
        pool.pause();
        pool.reconnect();
    }
    let clients = console.shared.observer().clients.all();
    let doomed: Vec<u64> = clients.iter().filter(|c| !c.console && ids.contains(&c.pool())).map(|c| c.id).collect();
    for client in clients.iter().filter(|c| doomed.contains(&c.id)) {
        console.stop.kill(&client.kill);
    }
    tracing::info!(
        database = db.unwrap_or("(all)"),
        clients = doomed.len(),
        "KILL: clients ended, pool paused until RESUME"
    );
    let book = &console.shared.observer().clients;
    let gone = pgmux_timer::timeout(KILL_WAIT, until(console, || doomed.iter().all(|id| book.get(*id).is_none())));
    gone.await.map_err(|_| {
        ErrorMessage::error(sqlstate::QUERY_CANCELED, "KILL: some clients had not ended within 5 s")
            .with_hint("they end at their next wake-up; SHOW CLIENTS lists them until then")
    })??;
    Ok(Reply::Done)
}

fn shutdown(console: &Console, mode: ShutdownMode) -> Result<Reply, ErrorMessage> {
    match mode {
        ShutdownMode::WaitForClients => {
            tracing::info!("SHUTDOWN WAIT_FOR_CLIENTS from the admin console");
            console.stop.close_doors();
            Ok(Reply::Done)
        }
        ShutdownMode::WaitForServers => {
            tracing::info!("SHUTDOWN WAIT_FOR_SERVERS from the admin console");
            console.stop.begin_graceful();
            Ok(Reply::Done)
        }
        ShutdownMode::Immediate => {
            tracing::info!("SHUTDOWN from the admin console");
            console.stop.begin_graceful();
            console.stop.force();
            Ok(Reply::Done)
        }
    }
}

fn set(console: &Console, key: &str, value: &str) -> Result<Reply, ErrorMessage> {
    let (key, value) =
        settings::set_target(key, value).map_err(|why| ErrorMessage::error(why.sqlstate(), why.to_string()))?;
    match reload::set(&console.shared, &key, &value) {
        Ok(_) => Ok(Reply::Done),
        Err(e @ (ReloadError::NeedsRestart { .. } | ReloadError::ChangesLogin { .. })) => {
            Err(ErrorMessage::error(sqlstate::CANT_CHANGE_RUNTIME_PARAM, e.to_string()))
        }
        Err(e) => Err(ErrorMessage::error(sqlstate::INVALID_PARAMETER_VALUE, e.to_string())),
    }
}

/// `SHOW SIZING`.
pub(super) fn sizing(console: &Console) -> Result<ResultSet, TableError> {
    let pool = console.shared.pools.first();
    let config = console.shared.config();
    let view = console.shared.pools.sizing();
    let on = config.max_connections_percent > 0;
    let reading = view.reading.as_ref();
    let plan = view.plan.as_ref();
    let mut set = ResultSet::new(columns::SIZING);
    let opt = |v: Option<usize>| -> Cell<'static> { v.into() };
    set.push([
        if on { "database" } else { "off" }.into(),
        opt(reading.map(|r| r.max_connections)),
        opt(reading.map(|r| r.reserved_total())),
        opt(plan.map(|p| p.usable)),
        config.max_connections_percent.into(),
        opt(plan.map(|p| p.budget)),
        opt(reading.map(|r| r.in_use)),
        opt(plan.map(|p| p.outsiders)),
        opt(plan.map(|p| p.members)),
        opt(plan.map(|p| p.share)),
        opt(config.pool_max),
        opt(plan.map(|p| p.limit).or((!on).then(|| pool.cap().unwrap_or(crate::pools::budget::FALLBACK_POOL_MAX)))),
        pool.limit().into(),
        pool.status().size.into(),
        reading.map(|r| r.sees_all).into(),
        view.read_unix.map(timestamp).into(),
        view.error.into(),
    ])?;
    Ok(set)
}
