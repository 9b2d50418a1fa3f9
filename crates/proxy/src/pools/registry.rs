//! The registry of pools, and what they share. A session asks the registry for the pool of its route
//! ([`Pools::get`], by the [`PoolId`] it was given at login); what is global — the configuration in force,
//! what pgmux knows about itself, the database's budget and the last sizing reading, the ids of server
//! connections, shutdown — lives once, in [`Globals`], beside the pools rather than inside each. The default
//! pool (`database_url`'s) is always there; the pools of named databases are made at their first login.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use arc_swap::Guard;
use parking_lot::Mutex;
use pgmux_pool::{ActiveCap, SharedLimit};
use tokio_util::task::TaskTracker;

use super::limit::BudgetClock;
use super::readers::{self, ReaderSet};
pub(crate) use super::routing::PoolKey;
use super::routing::{self, RoutePlan, Routed};
use super::sizing::{SizingError, SizingView};
use super::{ServerPool, budget};
use crate::config::auth_file::UserBook;
use crate::config::credentials::{Credentials, InstanceEndpoints};
use crate::config::{Config, LiveConfig};
use crate::net::tls::ServerTls;
use crate::observe::{Observer, PoolGauges, unix_now};
use crate::runtime::stop::Stop;

/// What every pool shares.
#[derive(Debug)]
pub(crate) struct Globals {
    /// The configuration in force; a reload swaps it for all pools at once.
    pub(crate) config: LiveConfig,
    pub(crate) observer: Arc<Observer>,
    /// When the database's budget was last read (sizing), and a way to ask for a fresh reading.
    pub(crate) budget: BudgetClock,
    /// The last sizing reading (or why there was none).
    sizing: Mutex<SizingView>,
    /// The next server connection's id, unique across pools.
    pub(crate) next_id: AtomicU64,
    /// What the pools of named databases hold together: sizing's plan, or pool_max (`None` while only the
    /// default pool exists, whose own limit is the plan).
    pub(crate) budget_limit: Option<Arc<SharedLimit>>,
    /// `max_active_servers`: server connections in use at once, every pool together (see `checkout`).
    pub(crate) active: Arc<ActiveCap>,
    /// Sessions are woken through it when a node is declared dead, to give up its connections.
    pub(crate) stop: Stop,
    /// Background work (closing retired connections) that shutdown waits for.
    pub(crate) tasks: TaskTracker,
    /// When pgmux last ran again after its process was stopped (a frozen Lambda environment): see
    /// [`Globals::idle_for`].
    thawed: Mutex<Option<Instant>>,
    /// Nodes a pool declared dead that the other pools have not heard of yet (see [`Globals::declared_dead`]).
    dead_news: Mutex<Vec<std::net::SocketAddr>>,
    /// Rung when `dead_news` has something.
    dead_rung: tokio::sync::Notify,
}

impl Globals {
    /// pgmux's process ran again after being stopped for `stopped` (the maintenance timer was that late).
    pub(crate) fn thawed(&self, stopped: Duration) {
        *self.thawed.lock() = Some(Instant::now());
        tracing::info!(stopped = ?stopped, "pgmux ran again after its process was stopped (a frozen Lambda \
            environment?): idle server connections count their idle time from now");
    }

    /// A pool declared `node` dead: every other pool is to hear of it (one verdict per server node), so that
    /// a reader instance's pool takes its node out of the rotation whichever pool's probe found it silent.
    pub(crate) fn declared_dead(&self, node: std::net::SocketAddr) {
        self.dead_news.lock().push(node);
        self.dead_rung.notify_one();
    }

    /// The nodes declared dead since the last call, waiting until there is one.
    pub(crate) async fn dead_news(&self) -> Vec<std::net::SocketAddr> {
        loop {
            let news = std::mem::take(&mut *self.dead_news.lock());
            if !news.is_empty() {
                return news;
            }
            self.dead_rung.notified().await;
        }
    }

    /// How long a connection idle since `since` has been idle while pgmux ran. Classic Lambda freezes the
    /// extension between invocations, for minutes or hours; time frozen says nothing of demand, and the
    /// invocation that thaws the environment wants the connections the last one used. Counted from the
    /// freeze's end, they are still there for it, not closed under it for a login to replace.
    pub(crate) fn idle_for(&self, since: Instant) -> Duration {
        let from = match *self.thawed.lock() {
            Some(thawed) => since.max(thawed),
            None => since,
        };
        from.elapsed()
    }

    /// Records a sizing reading (or why there was none).
    pub(crate) fn sizing_read(&self, outcome: Result<(&budget::Reading, &budget::Plan), &SizingError>) {
        let mut view = self.sizing.lock();
        match outcome {
            Ok((reading, plan)) => {
                view.reading = Some(reading.clone());
                view.plan = Some(plan.clone());
                view.read_unix = Some(unix_now());
                view.error = None;
            }
            Err(why) => view.error = Some(why.to_string()),
        }
    }

    /// The last sizing reading.
    pub(crate) fn sizing(&self) -> SizingView {
        self.sizing.lock().clone()
    }
}

/// A pool's place in the registry: what a session keeps of its route (two bytes, in what would be padding).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct PoolId(u16);

impl PoolId {
    /// Its number, as a console entry keeps it in an atomic.
    #[inline]
    pub(crate) fn index(self) -> u16 {
        self.0
    }

    /// The id numbered `index` (what [`index`](Self::index) gave).
    #[inline]
    pub(crate) fn from_index(index: u16) -> PoolId {
        PoolId(index)
    }
}

/// Most pools one pgmux holds: routes times the users who log in there. A login that would make one more
/// is refused (53300), so that logins cannot grow the registry without bound.
pub(crate) const MAX_POOLS: usize = 4096;

/// What a new pool is made of: its route's plan, and where its logins come from.
#[derive(Debug)]
pub(crate) struct PoolSetup {
    pub(crate) plan: RoutePlan,
    pub(crate) credentials: Arc<dyn Credentials>,
}

/// Why no pool could be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PoolsError {
    #[error("pgmux holds {MAX_POOLS} pools already (databases times users), and makes no more")]
    Full,
}

/// The `application_name` of the one-off logins that prove a passthrough password.
const PASSWORD_CHECK_NAME: &str = "pgmux-password-check";

/// Every pool of one pgmux, and what they share. A clone is another handle on the same registry (a reader
/// route's topology watch makes the pools of the instances it discovers).
#[derive(Clone, Debug)]
pub(crate) struct Pools {
    globals: Arc<Globals>,
    /// Pools by id, each filled once: a session's lookup takes no lock.
    slots: Arc<[OnceLock<Arc<ServerPool>>]>,
    /// Pools by name, and the limits routes and users share: only logins that need a new pool lock it.
    made: Arc<Mutex<Made>>,
    tls: ServerTls,
    /// Where discovered reader instances are reached, if not by their endpoints' names.
    instance_endpoints: Option<Arc<dyn InstanceEndpoints>>,
}

#[derive(Debug, Default)]
struct Made {
    by_key: HashMap<PoolKey, PoolId>,
    /// The plan each named pool was made from, to tell on a reload whether its route changed.
    plans: HashMap<PoolKey, RoutePlan>,
    routes: HashMap<String, Arc<SharedLimit>>,
    users: HashMap<String, Arc<SharedLimit>>,
}

impl Pools {
    /// The registry for `config`: the default pool (`database_url`'s, logging in with `credentials`), and the
    /// pools of named databases as clients first need them.
    pub(crate) fn new(
        config: Arc<Config>,
        credentials: Arc<dyn Credentials>,
        tls: ServerTls,
        tasks: TaskTracker,
        stop: Stop,
    ) -> Pools {
        // Routes share one budget (sizing's plan, or pool_max); the default pool alone needs none.
        let budget_limit = (!config.databases.is_empty())
            .then(|| SharedLimit::new(budget::initial_limit(config.max_connections_percent, super::pool_cap(&config))));
        let active = ActiveCap::new(config.max_active_servers);
        let globals = Arc::new(Globals {
            active,
            config: LiveConfig::new(config),
            observer: Arc::default(),
            budget: BudgetClock::default(),
            budget_limit,
            sizing: Mutex::default(),
            next_id: AtomicU64::new(1),
            stop,
            tasks,
            thawed: Mutex::default(),
            dead_news: Mutex::default(),
            dead_rung: tokio::sync::Notify::new(),
        });
        let mut first = ServerPool::new(Arc::clone(&globals), credentials, tls.clone());
        if !globals.config.full().databases.is_empty() {
            // With named databases no client uses the default pool: it only carries sizing's identity.
            first.keep_warm(0);
        }
        let first = Arc::new(first);
        let slots: Arc<[OnceLock<Arc<ServerPool>>]> = (0..MAX_POOLS).map(|_| OnceLock::new()).collect();
        let _ = slots[0].set(first);
        let mut made = Made::default();
        made.by_key.insert(PoolKey::default(), PoolId(0));
        Pools { globals, slots, made: Arc::new(Mutex::new(made)), tls, instance_endpoints: None }
    }

    /// Discovered reader instances are reached where `endpoints` says (the test harness's stand-in).
    pub(crate) fn locate_instances_with(&mut self, endpoints: Option<Arc<dyn InstanceEndpoints>>) {
        self.instance_endpoints = endpoints;
    }

    /// Where the instance endpoint `host` is reached: where the embedder says (`None` while it does not
    /// know), else `host` itself at `port`.
    pub(crate) fn locate(&self, host: &str, port: u16) -> Option<(String, u16)> {
        match &self.instance_endpoints {
            Some(endpoints) => endpoints.locate(host),
            None => Some((host.to_owned(), port)),
        }
    }

    /// The pool a session of this route uses.
    #[inline]
    pub(crate) fn get(&self, id: PoolId) -> &Arc<ServerPool> {
        match self.slots.get(usize::from(id.0)).and_then(OnceLock::get) {
            Some(pool) => pool,
            None => unreachable!("a pool id comes from the registry, which never forgets a pool"),
        }
    }

    /// The default pool: `database_url`'s (or the secret's), the one sizing's control connection uses.
    pub(crate) fn first(&self) -> &Arc<ServerPool> {
        self.get(PoolId(0))
    }

    /// The reader set of the route whose writer pool is `writer`, if it is a reader route.
    pub(crate) fn readers_of(&self, writer: PoolId) -> Option<Arc<ReaderSet>> {
        self.get(writer).readers().cloned()
    }

    /// Registers a reader route's set on its writer's pool (once: a set already there wins) and starts
    /// polling its instances.
    pub(crate) fn add_readers(&self, set: ReaderSet) -> Arc<ReaderSet> {
        let writer = self.get(set.writer);
        let set = Arc::new(set);
        if writer.readers.set(Arc::clone(&set)).is_err() {
            return Arc::clone(writer.readers().unwrap_or(&set));
        }
        self.globals.tasks.spawn(readers::watch(Arc::clone(&set), self.clone()));
        set
    }

    /// The pool named `key`, if it has been made.
    pub(crate) fn find(&self, key: &PoolKey) -> Option<PoolId> {
        self.made.lock().by_key.get(key).copied()
    }

    /// The pool named `setup.key`, made from `setup` the first time it is asked for.
    pub(crate) fn pool_for(&self, setup: PoolSetup) -> Result<PoolId, PoolsError> {
        let mut made = self.made.lock();
        let plan = &setup.plan;
        if let Some(id) = made.by_key.get(&plan.key) {
            return Ok(*id);
        }
        // Slots are filled in order and never emptied (a session holds its pool's id without a lock).
        let index = self.slots.iter().position(|slot| slot.get().is_none()).ok_or(PoolsError::Full)?;
        let id = PoolId(u16::try_from(index).map_err(|_| PoolsError::Full)?);
        let mut limits: Vec<Arc<SharedLimit>> = self.globals.budget_limit.iter().cloned().collect();
        let mut shared_limit = |by: &mut HashMap<String, Arc<SharedLimit>>, name: &str, max: usize| {
            let limit = by.entry(name.to_owned()).or_insert_with(|| SharedLimit::new(max));
            if limit.limit() != max {
                limit.set_limit(max);
            }
            limits.push(Arc::clone(limit));
        };
        if let Some(max) = plan.route_limit {
            shared_limit(&mut made.routes, &plan.key.database, max);
        }
        if let Some(max) = plan.user_limit {
            shared_limit(&mut made.users, &plan.key.user, max);
        }
        let pool = ServerPool::for_route(Arc::clone(&self.globals), id, &setup, self.tls.clone(), limits);
        if plan.auto_database && !made.by_key.keys().any(|k| k.database == plan.key.database) {
            // PgBouncer's line for a database the `*` entry serves, which its users' scripts look for.
            tracing::info!(database = %plan.key.database, "registered new auto-database: db={}", plan.key.database);
        }
        tracing::info!(database = %plan.key.database, user = %plan.key.user, mode = %plan.mode, "new pool");
        let _ = self.slots[index].set(Arc::new(pool));
        made.by_key.insert(plan.key.clone(), id);
        made.plans.insert(plan.key.clone(), setup.plan);
        Ok(id)
    }

    /// Logs in once with `login` and closes the connection again: proves a client's own password
    /// (passthrough) before a pool is made for it, or before a pool learns a changed one. Outside every
    /// pool's budget: it is one login, gone at once.
    pub(crate) async fn try_login(&self, login: &crate::config::LoginInfo) -> Result<(), crate::server::ConnectError> {
        let conn = self.connect_once(login, PASSWORD_CHECK_NAME).await?;
        self.close_once(conn);
        Ok(())
    }

    /// A server connection outside every pool, for one errand of pgmux's own (a password check, an
    /// `auth_query`); hand it to [`close_once`](Self::close_once) when done.
    pub(crate) async fn connect_once(
        &self,
        login: &crate::config::LoginInfo,
        application_name: &'static str,
    ) -> Result<crate::server::ServerConn, crate::server::ConnectError> {
        let options = {
            let config = self.globals.config.full();
            crate::server::ConnectOptions {
                need_role: false,
                ..super::connect_options(&config, 0, Some(application_name))
            }
        };
        crate::server::ServerConn::connect(login, &self.tls, options).await
    }

    /// Closes a connection of [`connect_once`](Self::connect_once) politely, in the background.
    pub(crate) fn close_once(&self, conn: crate::server::ServerConn) {
        self.globals.tasks.spawn(Box::new(conn).terminate());
    }

    /// After a reload or a SET: a named database's pool whose plan changed in its sizes alone (`pool_size`,
    /// `default_pool_size`, `reserve_pool_size`) takes the new sizes at once and keeps its connections, as PgBouncer applies a new
    /// size live; any other change is [`retire_changed`](Self::retire_changed)'s.
    pub(crate) fn resize_routes(&self, config: &Config, book: &UserBook) {
        let mut made = self.made.lock();
        let made = &mut *made;
        for (key, plan) in &mut made.plans {
            let Ok(Routed::Route(now)) = routing::route(config, book, &key.database, &key.user) else { continue };
            let sizes_only = RoutePlan { cap: plan.cap, reserve: plan.reserve, ..(*now).clone() } == *plan;
            if !sizes_only || (now.cap, now.reserve) == (plan.cap, plan.reserve) {
                continue;
            }
            (plan.cap, plan.reserve) = (now.cap, now.reserve);
            if let Some(id) = made.by_key.get(key) {
                tracing::info!(database = %key.database, user = %key.user, pool_size = ?now.cap,
                    reserve_pool_size = now.reserve, "pool resized");
                self.get(*id).set_sizes(now.cap, now.reserve);
            }
        }
    }

    /// After a reload: the pools of named databases whose route or user changed (or went) take no new
    /// clients and drain: their idle connections close now, the rest as they come back. Their clients stay
    /// until they leave; new clients get a pool made from the new plan.
    pub(crate) fn retire_changed(&self, config: &Config, book: &UserBook) {
        let mut made = self.made.lock();
        let changed: Vec<PoolKey> = made
            .plans
            .iter()
            .filter(|(key, plan)| !still_planned(config, book, key, plan))
            .map(|(key, _)| key.clone())
            .collect();
        for key in changed {
            made.plans.remove(&key);
            if let Some(id) = made.by_key.remove(&key) {
                tracing::info!(database = %key.database, user = %key.user, "route changed: its pool drains");
                self.get(id).reconnect();
            }
        }
    }

    /// What every pool shares.
    pub(crate) fn globals(&self) -> &Globals {
        &self.globals
    }

    /// Every pool, the default one first.
    pub(crate) fn all(&self) -> Vec<Arc<ServerPool>> {
        self.slots.iter().map_while(OnceLock::get).cloned().collect()
    }

    /// Every pool with its name, the default one first.
    pub(crate) fn named(&self) -> Vec<(PoolKey, Arc<ServerPool>)> {
        let made = self.made.lock();
        let mut out: Vec<(PoolKey, Arc<ServerPool>)> =
            made.by_key.iter().map(|(key, id)| (key.clone(), Arc::clone(self.get(*id)))).collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The configuration in force. A guard: hold it briefly.
    #[inline]
    pub(crate) fn config(&self) -> Guard<Arc<Config>> {
        self.globals.config.load()
    }

    /// The replaceable configuration itself (reloads swap it).
    pub(crate) fn live_config(&self) -> &LiveConfig {
        &self.globals.config
    }

    /// What pgmux knows about itself: metrics, clients, servers.
    pub(crate) fn observer(&self) -> &Arc<Observer> {
        &self.globals.observer
    }

    /// What the pools say for a snapshot of the metrics, summed over them.
    pub(crate) fn gauges(&self) -> PoolGauges {
        let plan = self.globals.sizing.lock().plan.as_ref().map(|p| (p.budget, p.members));
        let mut gauges = PoolGauges {
            status: pgmux_pool::Status::default(),
            limit: 0,
            own: 0,
            budget: plan.map(|(budget, _)| budget),
            members: plan.map(|(_, members)| members),
            active: (self.globals.active.limit(), self.globals.active.waiting()),
        };
        for pool in self.all() {
            let status = pool.status();
            gauges.status.size += status.size;
            gauges.status.idle += status.idle;
            gauges.status.opening += status.opening;
            gauges.status.waiting += status.waiting;
            gauges.status.max_size += status.max_size;
            gauges.status.paused |= status.paused;
            gauges.own += pool.own_connections();
        }
        gauges.limit = match &self.globals.budget_limit {
            Some(budget) => budget.limit(),
            None => self.first().limit(),
        };
        gauges
    }

    /// The last sizing reading, for `SHOW SIZING`.
    pub(crate) fn sizing(&self) -> SizingView {
        self.globals.sizing()
    }

    /// While the pools together hold more than the budget now allows (it was lowered), closes idle
    /// connections, one at a time, from the pools that can spare one.
    pub(crate) fn keep_to_budget(&self) {
        let Some(budget) = &self.globals.budget_limit else { return };
        while budget.held() > budget.limit() && budget.close_one_idle() {}
    }
}

/// Whether a reload leaves the pool `key` as it was planned: its route (for a reader instance's pool, the
/// reader route, and the instance still in it) plans it the same way.
fn still_planned(config: &Config, book: &UserBook, key: &PoolKey, plan: &RoutePlan) -> bool {
    let instance = plan.target == Some(crate::config::TargetSessionAttrs::Standby);
    // An instance's pool is named `<route>@<instance>`; `<instance>` (host:port, a server_id) has no `@`.
    let route = match key.database.rsplit_once('@') {
        Some((route, _)) if instance => route,
        _ => key.database.as_str(),
    };
    match routing::route(config, book, route, &key.user) {
        Ok(Routed::Route(now)) if instance => now.instance_now(plan).is_some_and(|p| p == *plan),
        Ok(Routed::Route(now)) => *now == *plan,
        _ => false,
    }
}
