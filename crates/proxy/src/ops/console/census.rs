//! What the console counts per pool, read once per command: each pool's labels (the route and server user
//! it serves, or `database_url`'s database and user for the default pool), its clients by state, its
//! server connections, and the oldest wait. SHOW POOLS, DATABASES, USERS, CLIENTS, SERVERS, PINS and LISTS
//! all read the same [`Census`], so a connection is never counted under one pool in one list and under
//! another in the next.
//!
//! Labels are unique among the pools SHOW POOLS lists: pgbouncer_exporter drops a whole scrape that has two
//! rows with the same (database, user). The default pool is listed when it is the only way in (no
//! `[[databases]]`) or when it holds something, and never under a label a route's pool already has.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use pgmux_metrics::ClientState;

use super::Console;
use crate::config::{LoginInfo, PoolMode};
use crate::observe::ClientEntry;
use crate::pools::{PoolKey, ServerPool};

/// One pool as the console shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct PoolFigures {
    /// Its index in the registry (what client and server entries carry).
    pub(super) index: u16,
    /// The route clients name (`database_url`'s database for the default pool).
    pub(super) database: String,
    /// The user pgmux logs in to the server as.
    pub(super) user: String,
    /// Its registry name: empty for the default pool.
    pub(super) key: PoolKey,
    pub(super) mode: PoolMode,
    pub(super) cl_active: usize,
    pub(super) cl_waiting: usize,
    pub(super) sv_active: usize,
    pub(super) sv_idle: usize,
    pub(super) sv_login: usize,
    /// Server connections open (active, idle and logging in).
    pub(super) open: usize,
    /// Age of its oldest waiting client, µs.
    pub(super) maxwait_us: u64,
    pub(super) paused: bool,
}

impl PoolFigures {
    /// Clients of this pool, whatever their state.
    pub(super) fn clients(&self) -> usize {
        self.cl_active + self.cl_waiting
    }
}

/// Every pool, as one command sees them.
#[derive(Debug, Default)]
pub(super) struct Census {
    /// Every pool in the registry, retired ones included, by index.
    pub(super) every: Vec<PoolFigures>,
    /// Indexes into `every` of the pools SHOW POOLS lists, in its order (default first, then by name).
    pub(super) listed: Vec<usize>,
    /// Console sessions.
    pub(super) consoles: usize,
}

impl Census {
    /// The pool at registry index `index`, if there is one.
    pub(super) fn pool(&self, index: u16) -> Option<&PoolFigures> {
        self.every.iter().find(|p| p.index == index)
    }

    /// The (database, user) a client or server connection of pool `index` is shown under.
    pub(super) fn labels(&self, index: u16) -> (&str, &str) {
        self.pool(index).or_else(|| self.pool(0)).map_or(("", ""), |p| (p.database.as_str(), p.user.as_str()))
    }

    /// The pools SHOW POOLS lists.
    pub(super) fn listed(&self) -> impl Iterator<Item = &PoolFigures> {
        self.listed.iter().filter_map(|i| self.every.get(*i))
    }
}

/// What a census is made of, apart from the clients: each pool with its counters.
pub(super) struct PoolState {
    pub(super) index: u16,
    pub(super) key: PoolKey,
    pub(super) mode: PoolMode,
    pub(super) status: pgmux_pool::Status,
    /// Still reachable by name (a reload retires pools whose route changed).
    pub(super) current: bool,
}

impl PoolState {
    fn of(pool: &ServerPool, current: &HashSet<u16>) -> PoolState {
        let index = pool.id().index();
        PoolState {
            index,
            key: pool.key().clone(),
            mode: pool.mode(),
            status: pool.status(),
            current: current.contains(&index),
        }
    }
}

/// One client as a census counts it.
#[derive(Clone, Copy, Debug)]
pub(super) struct CountedClient {
    pub(super) pool: u16,
    pub(super) waiting: bool,
    /// When it began to wait, µs on the observer's clock.
    pub(super) wait_since_us: Option<u64>,
}

impl CountedClient {
    fn of(c: &ClientEntry) -> CountedClient {
        CountedClient { pool: c.pool(), waiting: c.state() == ClientState::Waiting, wait_since_us: c.wait_since_us() }
    }
}

/// Counts `pools` and `clients` (pooled clients only) at `now_us`. The default pool takes the labels of
/// `served`; `routes_configured` says whether clients can reach it at all.
pub(super) fn count(
    pools: &[PoolState],
    clients: &[CountedClient],
    consoles: usize,
    now_us: u64,
    served: &LoginInfo,
    routes_configured: bool,
) -> Census {
    let mut every: Vec<PoolFigures> = pools
        .iter()
        .map(|p| {
            let (database, user) = if p.key.database.is_empty() {
                (served.dbname.clone(), served.user.clone())
            } else {
                (p.key.database.clone(), p.key.user.clone())
            };
            let s = p.status;
            PoolFigures {
                index: p.index,
                database,
                user,
                key: p.key.clone(),
                mode: p.mode,
                sv_active: s.size.saturating_sub(s.idle + s.opening),
                sv_idle: s.idle,
                sv_login: s.opening,
                open: s.size,
                paused: s.paused,
                ..PoolFigures::default()
            }
        })
        .collect();
    let at: HashMap<u16, usize> = every.iter().enumerate().map(|(i, p)| (p.index, i)).collect();
    for c in clients {
        // A client whose pool is not known yet is the default pool's, as login starts it.
        let Some(p) = at.get(&c.pool).or_else(|| at.get(&0)).and_then(|i| every.get_mut(*i)) else { continue };
        if c.waiting {
            p.cl_waiting += 1;
        } else {
            p.cl_active += 1;
        }
        if let Some(since) = c.wait_since_us {
            p.maxwait_us = p.maxwait_us.max(now_us.saturating_sub(since));
        }
    }
    // Route pools first take their labels; the default pool only where nothing else uses them.
    let mut order: Vec<usize> = (0..every.len()).filter(|i| pools[*i].current).collect();
    order.sort_by(|a, b| every[*a].key.cmp(&every[*b].key));
    let mut taken: HashSet<(String, String)> = HashSet::new();
    for i in order.iter().filter(|i| !every[**i].key.database.is_empty()) {
        taken.insert((every[*i].database.clone(), every[*i].user.clone()));
    }
    let listed = order
        .into_iter()
        .filter(|i| {
            let p = &every[*i];
            if !p.key.database.is_empty() {
                return true;
            }
            let used = !routes_configured || p.open > 0 || p.clients() > 0;
            used && !taken.contains(&(p.database.clone(), p.user.clone()))
        })
        .collect();
    Census { every, listed, consoles }
}

/// The census for one console command.
pub(super) fn take(console: &Console) -> Census {
    let pools = &console.shared.pools;
    let current: HashSet<u16> = pools.named().iter().map(|(_, pool)| pool.id().index()).collect();
    let states: Vec<PoolState> = pools.all().iter().map(|p| PoolState::of(p, &current)).collect();
    let obs = console.shared.observer();
    let entries: Vec<Arc<ClientEntry>> = obs.clients.all();
    let consoles = entries.iter().filter(|c| c.console).count();
    let clients: Vec<CountedClient> = entries.iter().filter(|c| !c.console).map(|c| CountedClient::of(c)).collect();
    let now_us = obs.micros_now();
    let routes_configured = !console.shared.config().databases.is_empty();
    count(&states, &clients, consoles, now_us, &console.served, routes_configured)
}
