//! The console's commands that act: PAUSE, RESUME, RECONNECT, WAIT_CLOSE, RELOAD, KILL_CLIENT, SHUTDOWN
//! and SET; and SHOW SIZING, which reads the sizing loop's last look at the database.

use std::time::Duration;

use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::sqlstate;

use super::columns;
use super::command::{Command, ShutdownMode};
use super::table::{Cell, ResultSet, TableError, timestamp};
use super::{Console, Reply, settings};
use crate::ops::reload::{self, ReloadError};
use crate::runtime::stop::Level;

/// How often PAUSE and WAIT_CLOSE look whether they are done.
const POLL: Duration = Duration::from_millis(20);

/// Runs a command other than SHOW.
pub(super) async fn run(console: &Console, command: &Command) -> Result<Reply, ErrorMessage> {
    match command {
        Command::Pause(db) => pause(console, db.as_deref()).await,
        Command::Resume(db) => {
            check_database(console, db.as_deref())?;
            let pools = console.shared.pools.all();
            if !pools.iter().any(|pool| pool.status().paused) {
                return Err(ErrorMessage::error(sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE, "pgmux is not paused"));
            }
            pools.iter().for_each(|pool| pool.resume());
            tracing::info!("RESUME: lending server connections again");
            Ok(Reply::Done)
        }
        Command::Reconnect(db) => {
            check_database(console, db.as_deref())?;
            console.shared.pools.all().iter().for_each(|pool| pool.reconnect());
            tracing::info!("RECONNECT: every server connection is replaced as it comes back");
            Ok(Reply::Done)
        }
        Command::WaitClose(db) => {
            check_database(console, db.as_deref())?;
            until(console, || console.shared.pools.all().iter().all(|pool| pool.stale_open() == 0)).await?;
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
        Command::KillClient(id) => kill(console, *id),
        Command::Shutdown(mode) => shutdown(console, *mode),
        Command::Set { key, value } => set(console, key, value),
        Command::Show(_) | Command::SetIgnored(_) | Command::Empty => Ok(Reply::Done),
    }
}

/// A database argument must name the database pgmux serves.
fn check_database(console: &Console, db: Option<&str>) -> Result<(), ErrorMessage> {
    match db {
        None => Ok(()),
        Some(db) if db == console.served.dbname => Ok(()),
        Some(db) => Err(ErrorMessage::error(sqlstate::INVALID_CATALOG_NAME, format!("no such database: {db}"))
            .with_hint(format!("this pgmux serves database \"{}\"", console.served.dbname))),
    }
}

/// Waits until `done` says yes, or pgmux stops.
async fn until(console: &Console, done: impl Fn() -> bool) -> Result<(), ErrorMessage> {
    while !done() {
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = console.stop.reached(Level::Hard) => return Err(super::shutting_down()),
        }
    }
    Ok(())
}

/// Holds new transactions and returns once no server connection is lent.
async fn pause(console: &Console, db: Option<&str>) -> Result<Reply, ErrorMessage> {
    check_database(console, db)?;
    let pools = console.shared.pools.all();
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

fn shutdown(console: &Console, mode: ShutdownMode) -> Result<Reply, ErrorMessage> {
    match mode {
        ShutdownMode::WaitForClients => Err(ErrorMessage::error(
            sqlstate::FEATURE_NOT_SUPPORTED,
            "SHUTDOWN WAIT_FOR_CLIENTS is not supported by pgmux",
        )
        .with_hint("SHUTDOWN WAIT_FOR_SERVERS lets running transactions finish (within shutdown_timeout), then stops")),
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
    let (key, value) = settings::set_target(key, value)
        .map_err(|why| ErrorMessage::error(sqlstate::CANT_CHANGE_RUNTIME_PARAM, why.to_string()))?;
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
