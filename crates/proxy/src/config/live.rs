//! The configuration in force, replaceable while pgmux runs (`SIGHUP`, `RELOAD`, `SET`).
//!
//! Sessions read settings on the data path (`server_check_delay` on every checkout, `server_lifetime` on
//! every release), so a read must cost no lock and no reference count: [`arc_swap`] gives a load that is
//! a few atomic operations on a thread-local slot and a guard that keeps the configuration it read alive,
//! while a reload swaps the pointer. Readers see the old or the new configuration whole, never a mix.

use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};

use super::Config;

/// The configuration in force.
#[derive(Debug)]
pub struct LiveConfig(ArcSwap<Config>);

impl LiveConfig {
    pub fn new(config: Arc<Config>) -> Self {
        LiveConfig(ArcSwap::new(config))
    }

    /// The configuration now. Hold the guard briefly (a statement, a function): it keeps this version alive.
    #[inline]
    pub fn load(&self) -> Guard<Arc<Config>> {
        self.0.load()
    }

    /// The configuration now, as an `Arc` to keep.
    pub fn full(&self) -> Arc<Config> {
        self.0.load_full()
    }

    /// Puts `config` in force; returns the one it replaces.
    pub fn replace(&self, config: Arc<Config>) -> Arc<Config> {
        self.0.swap(config)
    }
}
