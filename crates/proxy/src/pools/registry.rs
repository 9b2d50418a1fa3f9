//! The registry of pools, and what they share. A session asks the registry for the pool of its route
//! ([`Pools::get`], by the [`PoolId`] it was given at login); what is global — the configuration in force,
//! what pgmux knows about itself, the database's budget and the last sizing reading, the ids of server
//! connections, shutdown — lives once, in [`Globals`], beside the pools rather than inside each. Today the
//! registry holds one pool: the database and user of `database_url`.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use arc_swap::Guard;
use parking_lot::Mutex;
use tokio_util::task::TaskTracker;

use super::limit::BudgetClock;
use super::sizing::{SizingError, SizingView};
use super::{ServerPool, budget};
use crate::config::credentials::Credentials;
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
    /// Sessions are woken through it when a node is declared dead, to give up its connections.
    pub(crate) stop: Stop,
    /// Background work (closing retired connections) that shutdown waits for.
    pub(crate) tasks: TaskTracker,
}

impl Globals {
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PoolId(u16);

/// Every pool of one pgmux, and what they share.
#[derive(Debug)]
pub(crate) struct Pools {
    globals: Arc<Globals>,
    pools: Vec<Arc<ServerPool>>,
}

impl Pools {
    /// The registry for `config`: one pool, logging in with `credentials` and `tls`.
    pub(crate) fn new(
        config: Arc<Config>,
        credentials: Arc<dyn Credentials>,
        tls: ServerTls,
        tasks: TaskTracker,
        stop: Stop,
    ) -> Pools {
        let globals = Arc::new(Globals {
            config: LiveConfig::new(config),
            observer: Arc::default(),
            budget: BudgetClock::default(),
            sizing: Mutex::default(),
            next_id: AtomicU64::new(1),
            stop,
            tasks,
        });
        let pool = Arc::new(ServerPool::new(Arc::clone(&globals), credentials, tls));
        Pools { globals, pools: vec![pool] }
    }

    /// The pool a session of this route uses.
    #[inline]
    pub(crate) fn get(&self, id: PoolId) -> &Arc<ServerPool> {
        &self.pools[usize::from(id.0)]
    }

    /// The pool of the database clients name (there is one; the login has checked the name).
    pub(crate) fn route(&self, _database: &str) -> PoolId {
        PoolId(0)
    }

    /// The first pool: the one the control connection and the console's single-pool commands use.
    pub(crate) fn first(&self) -> &Arc<ServerPool> {
        self.get(PoolId(0))
    }

    /// Every pool.
    pub(crate) fn all(&self) -> &[Arc<ServerPool>] {
        &self.pools
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
        };
        for pool in &self.pools {
            let status = pool.status();
            gauges.status.size += status.size;
            gauges.status.idle += status.idle;
            gauges.status.opening += status.opening;
            gauges.status.waiting += status.waiting;
            gauges.status.max_size += status.max_size;
            gauges.status.paused |= status.paused;
            gauges.limit += pool.limit();
            gauges.own += pool.own_connections();
        }
        gauges
    }

    /// The last sizing reading, for `SHOW SIZING`.
    pub(crate) fn sizing(&self) -> SizingView {
        self.globals.sizing()
    }
}
