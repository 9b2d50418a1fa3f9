//! The console's lists of connections, one row per socket: SHOW CLIENTS and SERVERS with PgBouncer's 21
//! columns; SOCKETS and ACTIVE_SOCKETS with those and PgBouncer's seven buffer positions, which pgmux does
//! not show (NULL); FDS, PgBouncer's sockets to hand to a new process in an online restart, which pgmux
//! never hands over (no rows).
//!
//! ACTIVE_SOCKETS is PgBouncer's list of sockets with bytes in its buffers. pgmux moves bytes on as they
//! come and keeps no count the console could read, so it lists the sockets a transaction is using now:
//! clients holding or waiting for a server connection, server connections lent, and the console session
//! that asks (it is running a command).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use pgmux_metrics::ClientState;

use super::census::{self, Census};
use super::columns;
use super::table::{Cell, ResultSet, TableError, timestamp};
use super::{Console, DATABASE};
use crate::observe::{ClientEntry, ServerEntry};
use crate::pools::PoolId;

type Built = Result<ResultSet, TableError>;

/// Which list of connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum List {
    Clients,
    Servers,
    Sockets,
    ActiveSockets,
}

impl List {
    /// SOCKETS and ACTIVE_SOCKETS: PgBouncer's buffer columns, and its list names as states.
    fn low_level(self) -> bool {
        matches!(self, List::Sockets | List::ActiveSockets)
    }
}

/// The rows of one list: clients first, then server connections, as PgBouncer lists a pool.
pub(super) fn list(console: &Console, which: List) -> Built {
    let low_level = which.low_level();
    let mut set = ResultSet::new(if low_level { columns::SOCKETS } else { columns::CONNECTIONS });
    let push = |set: &mut ResultSet, mut row: Vec<Cell<'static>>| {
        if low_level {
            // recv_pos, pkt_pos, pkt_remain, send_pos, send_remain, pkt_avail, send_avail.
            row.extend(std::iter::repeat_n(Cell::Null, 7));
        }
        set.push(row)
    };
    let obs = console.shared.observer();
    let census = census::take(console);
    let clients = obs.clients.all();
    if which != List::Servers {
        let now = obs.micros_now();
        let listen = console.shared.config().listen;
        for c in &clients {
            let busy = c.state() != ClientState::Idle || c.id == console.seen.id;
            if which == List::ActiveSockets && !busy {
                continue;
            }
            push(&mut set, client_row(console, &census, c, now, listen, client_state(c, low_level)))?;
        }
    }
    if which != List::Clients {
        let held = holders(&clients);
        let pools = &console.shared.pools;
        for s in obs.servers.all() {
            let client = held.get(&s.id).copied();
            if which == List::ActiveSockets && client.is_none() {
                continue;
            }
            let state = match (client.is_some(), low_level) {
                (true, false) => "active",
                (false, false) => "idle",
                (true, true) => "sv_active",
                (false, true) => "sv_idle",
            };
            let stale = s.id < pools.get(PoolId::from_index(s.pool)).stale_below();
            push(&mut set, server_row(census.labels(s.pool), &s, client, stale, state))?;
        }
    }
    Ok(set)
}

/// SHOW FDS: PgBouncer's columns, no rows. pgmux has no online restart, so no socket is ever handed over,
/// and it shows no cancel key or password.
pub(super) fn fds() -> Built {
    Ok(ResultSet::new(columns::FDS))
}

/// As PgBouncer 1.25 shows them: `idle` between transactions, `active` in one, `waiting` while it waits for
/// a server connection. SOCKETS says which of its lists the client is on: `cl_active`, `cl_waiting`.
fn client_state(c: &ClientEntry, low_level: bool) -> &'static str {
    match (c.state(), low_level) {
        (ClientState::Waiting, false) => "waiting",
        (ClientState::Active, false) => "active",
        (ClientState::Idle, false) => "idle",
        (ClientState::Waiting, true) => "cl_waiting",
        (ClientState::Active | ClientState::Idle, true) => "cl_active",
    }
}

fn client_row(
    console: &Console,
    census: &Census,
    c: &ClientEntry,
    now_us: u64,
    listen: SocketAddr,
    state: &'static str,
) -> Vec<Cell<'static>> {
    let obs = console.shared.observer();
    let waited = c.wait_since_us().map_or(0, |since| now_us.saturating_sub(since));
    let (user, database) = match (c.user(), c.console) {
        (Some(u), true) => (u.to_owned(), DATABASE.to_owned()),
        // A client of a database with a forced user: the user it logged in as, as PgBouncer shows it.
        (Some(u), false) => (u.to_owned(), census.labels(c.pool()).0.to_owned()),
        (None, _) => {
            let (database, user) = census.labels(c.pool());
            (user.to_owned(), database.to_owned())
        }
    };
    let request = if c.request_us() > 0 { obs.unix_at(c.request_us()) } else { c.connected_unix() };
    let server = c.server();
    vec![
        "C".into(),
        user.into(),
        database.into(),
        "none".into(),
        state.into(),
        c.peer.addr().into(),
        c.peer.port().into(),
        listen.ip().to_string().into(),
        listen.port().into(),
        timestamp(c.connected_unix()).into(),
        timestamp(request).into(),
        (waited / 1_000_000).into(),
        (waited % 1_000_000).into(),
        0i64.into(),
        format!("c{:x}", c.id).into(),
        (server > 0).then(|| format!("s{server:x}")).into(),
        0i64.into(),
        "".into(),
        c.application_name.as_deref().unwrap_or_default().to_owned().into(),
        // Statements belong to pgmux's registry, not to one client (SHOW PREPARED lists them).
        0i64.into(),
        c.id.into(),
    ]
}

/// Which client holds each server connection.
fn holders(clients: &[Arc<ClientEntry>]) -> HashMap<u64, u64> {
    clients.iter().filter(|c| c.server() > 0).map(|c| (c.server(), c.id)).collect()
}

fn server_row(
    (database, user): (&str, &str),
    s: &ServerEntry,
    client: Option<u64>,
    close_needed: bool,
    state: &'static str,
) -> Vec<Cell<'static>> {
    vec![
        "S".into(),
        user.to_owned().into(),
        database.to_owned().into(),
        "none".into(),
        state.into(),
        s.addr.ip().to_string().into(),
        s.addr.port().into(),
        s.local.map(|l| l.ip().to_string()).into(),
        s.local.map(|l| l.port()).into(),
        timestamp(s.connected_unix).into(),
        timestamp(s.connected_unix).into(),
        0i64.into(),
        0i64.into(),
        i64::from(close_needed).into(),
        format!("s{:x}", s.id).into(),
        client.map(|c| format!("c{c:x}")).into(),
        s.pid.into(),
        if s.tls { "TLS" } else { "" }.into(),
        "".into(),
        s.statements.prepared.load(Ordering::Relaxed).into(),
        s.id.into(),
    ]
}
