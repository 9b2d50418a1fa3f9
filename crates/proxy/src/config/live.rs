//! The configuration in force, replaceable while pgmux runs (`SIGHUP`, `RELOAD`, `SET`).
//!
//! Sessions read settings on the data path (`server_check_delay` on every checkout, `server_lifetime` on
//! every release), so a read must cost no lock and no reference count: [`arc_swap`] gives a load that is
//! a few atomic operations on a thread-local slot and a guard that keeps the configuration it read alive,
//! while a reload swaps the pointer. Readers see the old or the new configuration whole, never a mix.
//! The two settings every transaction reads (`server_check_delay` at the checkout, `target_session_attrs`
//! at the release) are also kept as plain atomics beside it: a guarded load costs about 55 instructions,
//! a relaxed one a single move. Each is a setting on its own, so a reader that sees one version of it and
//! another of the rest loses nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use arc_swap::{ArcSwap, Guard};

use super::Config;
use super::role::TargetSessionAttrs;

/// The configuration in force.
#[derive(Debug)]
pub struct LiveConfig {
    config: ArcSwap<Config>,
    /// Whether any of the per-session timeouts is set, globally or by a user's entry: every session asks
    /// after each wake-up, and with all off (the default) a relaxed load answers instead of a guarded one.
    session_timers: AtomicBool,
    /// `server_check_delay` in nanoseconds.
    check_delay_ns: AtomicU64,
    /// `target_session_attrs` (see [`TARGETS`]).
    target: AtomicU8,
}

/// `target_session_attrs` by its number in [`LiveConfig`].
const TARGETS: [TargetSessionAttrs; 6] = [
    TargetSessionAttrs::Any,
    TargetSessionAttrs::ReadWrite,
    TargetSessionAttrs::ReadOnly,
    TargetSessionAttrs::Primary,
    TargetSessionAttrs::Standby,
    TargetSessionAttrs::PreferStandby,
];

/// `d` in nanoseconds (`observe::clock::nanos`, which this layer may not import).
fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn target_number(target: TargetSessionAttrs) -> u8 {
    TARGETS.iter().position(|t| *t == target).and_then(|i| u8::try_from(i).ok()).unwrap_or(0)
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
        let check_delay_ns = AtomicU64::new(nanos(config.server_check_delay));
        let target = AtomicU8::new(target_number(config.target_session_attrs));
        LiveConfig { config: ArcSwap::new(config), session_timers, check_delay_ns, target }
    }

    /// `server_check_delay` in nanoseconds, without a guarded load.
    #[inline]
    pub fn check_delay_ns(&self) -> u64 {
        self.check_delay_ns.load(Ordering::Relaxed)
    }

    /// `target_session_attrs`, without a guarded load.
    #[inline]
    pub fn target_session_attrs(&self) -> TargetSessionAttrs {
        TARGETS.get(usize::from(self.target.load(Ordering::Relaxed))).copied().unwrap_or(TargetSessionAttrs::Any)
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
        self.check_delay_ns.store(nanos(config.server_check_delay), Ordering::Relaxed);
        self.target.store(target_number(config.target_session_attrs), Ordering::Relaxed);
        let old = self.config.swap(config);
        if !timers {
            self.session_timers.store(false, Ordering::Relaxed);
        }
        old
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn config(extra: &str) -> Arc<Config> {
        let text = format!("database_url = \"postgres://app:pw@db.example:5432/app\"\n{extra}");
        Arc::new(Config::from_toml_str(&text).expect("a valid configuration"))
    }

    #[test]
    fn the_settings_kept_beside_the_configuration_follow_every_replacement() {
        let live = LiveConfig::new(config(""));
        assert_eq!(live.check_delay_ns(), nanos(live.load().server_check_delay));
        assert_eq!(live.target_session_attrs(), live.load().target_session_attrs);
        for target in TARGETS {
            let mut next = (*config("server_check_delay = \"2500ms\"")).clone();
            next.target_session_attrs = target;
            live.replace(Arc::new(next));
            assert_eq!(live.target_session_attrs(), target);
            assert_eq!(live.check_delay_ns(), nanos(Duration::from_millis(2500)));
        }
        live.replace(config("server_check_delay = \"0s\""));
        assert_eq!((live.check_delay_ns(), live.target_session_attrs()), (0, live.load().target_session_attrs));
    }
}
