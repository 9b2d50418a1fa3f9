//! The configuration in force, replaceable while pgmux runs (`SIGHUP`, `RELOAD`, `SET`).
//!
//! Sessions read settings on the data path (`server_check_delay` on every checkout, `server_lifetime` on
//! every release), so a read must cost no lock and no reference count: [`arc_swap`] gives a load that is
//! a few atomic operations on a thread-local slot and a guard that keeps the configuration it read alive,
//! while a reload swaps the pointer. Readers see the old or the new configuration whole, never a mix.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::{ArcSwap, Guard};

use super::Config;

/// The configuration in force.
#[derive(Debug)]
pub struct LiveConfig {
    config: ArcSwap<Config>,
    /// Whether any of the per-session timeouts is set, globally or by a user's entry: every session asks
    /// after each wake-up, and with all off (the default) a relaxed load answers instead of a guarded one.
    session_timers: AtomicBool,
}

fn any_session_timer(config: &Config) -> bool {
    !(config.query_timeout.is_zero()
        && config.idle_transaction_timeout.is_zero()
        && config.client_idle_timeout.is_zero()
        && config.transaction_timeout.is_zero()
        && !config.users.iter().any(|u| u.timeouts.any()))
}

impl LiveConfig {
    pub fn new(config: Arc<Config>) -> Self {
        let session_timers = AtomicBool::new(any_session_timer(&config));
        LiveConfig { config: ArcSwap::new(config), session_timers }
    }

    /// Whether `query_timeout`, `idle_transaction_timeout`, `client_idle_timeout` or `transaction_timeout` is
    /// set, globally or for a user.
    #[inline]
    pub fn session_timers(&self) -> bool {
        self.session_timers.load(Ordering::Relaxed)
    }

    /// The configuration now. Hold the guard briefly (a statement, a function): it keeps this version alive.
    #[inline]
    pub fn load(&self) -> Guard<Arc<Config>> {
        self.config.load()
    }

    /// The configuration now, as an `Arc` to keep.
    pub fn full(&self) -> Arc<Config> {
        self.config.load_full()
    }

    /// Puts `config` in force; returns the one it replaces.
    pub fn replace(&self, config: Arc<Config>) -> Arc<Config> {
        // Set before the swap, cleared after: a session that sees the new timeouts also sees the flag.
        let timers = any_session_timer(&config);
        if timers {
            self.session_timers.store(true, Ordering::Relaxed);
        }
        let old = self.config.swap(config);
        if !timers {
            self.session_timers.store(false, Ordering::Relaxed);
        }
        old
    }
}
