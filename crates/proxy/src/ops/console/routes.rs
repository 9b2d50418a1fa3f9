//! SHOW POOLS, DATABASES and USERS: one row per pool, per database clients may name and per user pgmux
//! knows, each followed (where PgBouncer has one) by the console's own `pgbouncer` row. With only
//! `database_url` that is one pool, one database and one user, exactly as before routes existed.
//!
//! The rows are built from plain figures ([`DatabaseFigures`], [`UserFigures`], the [`Census`]) by
//! functions that touch no pool, so that the tests can state them; [`databases`] and [`users`] gather
//! the figures from the configuration, the users pgmux knows and the census.

use std::collections::BTreeMap;

use super::census::{self, Census};
use super::columns;
use super::table::{Cell, ResultSet, TableError};
use super::{Console, DATABASE};
use crate::client::caps::Caps;
use crate::config::{Config, PoolMode};
use crate::pools::routing::{self, Routed};

type Built = Result<ResultSet, TableError>;

/// SHOW POOLS: the census's listed pools, then the console's.
pub(super) fn pool_rows(census: &Census) -> Built {
    let mut set = ResultSet::new(columns::POOLS);
    for p in census.listed() {
        set.push([
            p.database.as_str().into(),
            p.user.as_str().into(),
            p.cl_active.into(),
            p.cl_waiting.into(),
            0i64.into(),
            0i64.into(),
            p.sv_active.into(),
            0i64.into(),
            0i64.into(),
            p.sv_idle.into(),
            0i64.into(),
            0i64.into(),
            p.sv_login.into(),
            (p.maxwait_us / 1_000_000).into(),
            (p.maxwait_us % 1_000_000).into(),
            p.mode.to_string().into(),
            Cell::Null,
        ])?;
    }
    let mut row: Vec<Cell<'_>> = vec![DATABASE.into(), DATABASE.into(), census.consoles.into()];
    row.extend((0..12).map(|_| Cell::Int(0)));
    row.extend(["statement".into(), Cell::Null]);
    set.push(row)?;
    Ok(set)
}

pub(super) fn pools(console: &Console) -> Built {
    pool_rows(&census::take(console))
}

/// One row of SHOW DATABASES.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct DatabaseFigures {
    pub(super) name: String,
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) dbname: String,
    /// The user every client of it logs in to the server as, if it forces one.
    pub(super) force_user: Option<String>,
    pub(super) pool_size: usize,
    pub(super) min_pool_size: usize,
    pub(super) reserve_pool_size: usize,
    pub(super) mode: PoolMode,
    /// Its own limit over all its pools (0: none of its own).
    pub(super) max_connections: usize,
    pub(super) current_connections: usize,
    /// Its cap on clients (max_db_client_connections in force; 0: none).
    pub(super) max_client_connections: usize,
    pub(super) current_client_connections: usize,
    pub(super) paused: bool,
    /// DISABLEd: new clients refused.
    pub(super) disabled: bool,
}

/// SHOW DATABASES' rows for `dbs`, then the console's (`consoles`: its sessions now).
pub(super) fn database_rows(config: &Config, dbs: &[DatabaseFigures], consoles: usize) -> Built {
    let mut set = ResultSet::new(columns::DATABASES);
    for d in dbs {
        set.push([
            d.name.as_str().into(),
            d.host.as_str().into(),
            d.port.into(),
            d.dbname.as_str().into(),
            d.force_user.as_deref().into(),
            d.pool_size.into(),
            d.min_pool_size.into(),
            d.reserve_pool_size.into(),
            config.server_lifetime.as_secs().into(),
            d.mode.to_string().into(),
            Cell::Null,
            d.max_connections.into(),
            d.current_connections.into(),
            d.max_client_connections.into(),
            d.current_client_connections.into(),
            i64::from(d.paused).into(),
            i64::from(d.disabled).into(),
        ])?;
    }
    set.push([
        DATABASE.into(),
        Cell::Null,
        config.listen.port().into(),
        DATABASE.into(),
        DATABASE.into(),
        2i64.into(),
        0i64.into(),
        0i64.into(),
        0i64.into(),
        "statement".into(),
        Cell::Null,
        0i64.into(),
        0i64.into(),
        config.max_db_client_connections.into(),
        consoles.into(),
        0i64.into(),
        0i64.into(),
    ])?;
    Ok(set)
}

/// Whether the configuration names a default database (`database_url`, or a secret that holds one).
fn has_default(config: &Config) -> bool {
    !config.database_url.login.host.is_empty() || !config.secret_arn.is_empty()
}

/// The rows of SHOW DATABASES: the default database when there is one, then every route of the
/// configuration (a `*` route through the names clients gave it), by name, each once.
pub(super) fn database_figures(console: &Console, census: &Census) -> Vec<DatabaseFigures> {
    let config = console.shared.config();
    let auth = console.shared.auth();
    let gauges = console.shared.pools.gauges();
    let counts = &console.shared.counts;
    let caps = |name: &str| Caps::of(&config, auth.book(), name, "").database;
    let mut out = Vec::new();
    let served = &console.served;
    if has_default(&config) || config.databases.is_empty() {
        let default = census.pool(0).cloned().unwrap_or_default();
        let limit = console.shared.pools.first().limit();
        out.push(DatabaseFigures {
            name: served.dbname.clone(),
            host: served.host.clone(),
            port: served.port,
            dbname: served.dbname.clone(),
            force_user: Some(served.user.clone()),
            pool_size: limit,
            min_pool_size: config.min_pool_size,
            reserve_pool_size: config.reserve_pool_size,
            mode: default.mode,
            max_connections: limit,
            current_connections: default.open,
            max_client_connections: caps(&served.dbname),
            current_client_connections: counts.database(&served.dbname),
            paused: default.paused,
            disabled: console.shared.disabled.is(&served.dbname),
        });
    }
    // Route name -> the server user its row is worked out for (a pool's, else the route's own or none).
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    for spec in config.databases.iter().filter(|s| s.name != "*") {
        names.insert(spec.name.clone(), spec.user.clone().unwrap_or_default());
    }
    for p in &census.every {
        if !p.key.database.is_empty() {
            names.entry(p.key.database.clone()).or_insert_with(|| p.key.user.clone());
        }
    }
    for (name, user) in names {
        if out.iter().any(|d| d.name == name) {
            continue;
        }
        let Ok(Routed::Route(plan)) = routing::route(&config, auth.book(), &name, &user) else { continue };
        let forced = config.databases.iter().find(|s| s.name == name).and_then(|s| s.user.clone());
        let pools = census.every.iter().filter(|p| p.key.database == name);
        let (open, paused) = pools.fold((0, false), |(o, z), p| (o + p.open, z || p.paused));
        let (max_client_connections, current_client_connections) = (caps(&name), counts.database(&name));
        let disabled = console.shared.disabled.is(&name);
        out.push(DatabaseFigures {
            name,
            host: plan.login.host,
            port: plan.login.port,
            dbname: plan.login.dbname,
            force_user: forced,
            pool_size: plan.cap.unwrap_or(gauges.limit),
            min_pool_size: plan.min_pool_size,
            reserve_pool_size: plan.reserve,
            mode: plan.mode,
            max_connections: plan.route_limit.unwrap_or(0),
            current_connections: open,
            max_client_connections,
            current_client_connections,
            paused,
            disabled,
        });
    }
    out
}

pub(super) fn databases(console: &Console) -> Built {
    let census = census::take(console);
    let figures = database_figures(console, &census);
    database_rows(&console.shared.config(), &figures, console.shared.counts.database(DATABASE))
}

/// One row of SHOW USERS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct UserFigures {
    pub(super) name: String,
    /// Its own `pool_size`, if it has one.
    pub(super) pool_size: Option<usize>,
    /// Its own `reserve_pool_size`, if it has one.
    pub(super) reserve_pool_size: Option<usize>,
    pub(super) mode: Option<PoolMode>,
    pub(super) max_user_connections: usize,
    /// Server connections logged in as it.
    pub(super) current_connections: usize,
    /// Its cap on clients (max_user_client_connections in force; 0: none).
    pub(super) max_user_client_connections: usize,
    /// Clients logged in as it (console sessions included).
    pub(super) current_client_connections: usize,
}

pub(super) fn user_rows(users: &[UserFigures]) -> Built {
    let mut set = ResultSet::new(columns::USERS);
    for u in users {
        set.push([
            u.name.as_str().into(),
            u.pool_size.map_or_else(String::new, |n| n.to_string()).into(),
            u.reserve_pool_size.map_or_else(String::new, |n| n.to_string()).into(),
            u.mode.map(|m| m.to_string()).into(),
            u.max_user_connections.into(),
            u.current_connections.into(),
            u.max_user_client_connections.into(),
            u.current_client_connections.into(),
        ])?;
    }
    Ok(set)
}

/// Every user pgmux knows (`[[users]]`, the auth file, `database_url`'s), every user a pool logs in as and
/// every user a client is logged in as, by name. Never a password: only names, sizes and counts.
pub(super) fn user_figures(console: &Console, census: &Census) -> Vec<UserFigures> {
    let config = console.shared.config();
    let auth = console.shared.auth();
    let book = auth.book();
    let mut names: BTreeMap<String, UserFigures> = BTreeMap::new();
    for name in book.names() {
        names.entry(name.to_owned()).or_default();
    }
    if has_default(&config) || config.databases.is_empty() {
        names.entry(console.served.user.clone()).or_default();
    }
    for p in &census.every {
        names.entry(p.user.clone()).or_default().current_connections += p.open;
    }
    for (name, clients) in console.shared.counts.users() {
        names.entry(name).or_default().current_client_connections = clients;
    }
    names
        .into_iter()
        .filter(|(name, _)| !name.is_empty())
        .map(|(name, counts)| {
            let spec = book.get(&name).and_then(|k| k.spec.as_ref());
            let own = spec.and_then(|s| s.max_user_connections);
            UserFigures {
                max_user_client_connections: Caps::of_console(&config, book, &name).user,
                pool_size: spec.and_then(|s| s.pool_max),
                reserve_pool_size: spec.and_then(|s| s.reserve_pool_size),
                mode: spec.and_then(|s| s.pool_mode),
                max_user_connections: own.unwrap_or(config.max_user_connections),
                name,
                ..counts
            }
        })
        .collect()
}

pub(super) fn users(console: &Console) -> Built {
    let census = census::take(console);
    user_rows(&user_figures(console, &census))
}
