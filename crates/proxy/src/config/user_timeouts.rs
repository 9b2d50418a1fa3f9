//! A user's own timeouts: PgBouncer's per-user `query_timeout`, `idle_transaction_timeout`,
//! `client_idle_timeout` and `transaction_timeout` (its `[users]` keys; pgmux's `[[users]]` and
//! `PGMUX_USERS` take the same). Each one set overrides the global setting for clients logged in as that user;
//! 0 turns it off for them.
//!
//! The configuration holds them as [`UserTimeouts`]; a logged-in client reads them from [`SharedTimeouts`],
//! kept beside its user's client counter (which it already points to), written at login and on reload, so
//! that the relay loop never looks a user up by name.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::ValueError;

/// Which of the four.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutKey {
    Query,
    IdleTransaction,
    ClientIdle,
    Transaction,
}

impl TimeoutKey {
    /// Each with its name, in the order of [`UserTimeouts`]'s fields.
    pub const ALL: [(TimeoutKey, &'static str); 4] = [
        (TimeoutKey::Query, "query_timeout"),
        (TimeoutKey::IdleTransaction, "idle_transaction_timeout"),
        (TimeoutKey::ClientIdle, "client_idle_timeout"),
        (TimeoutKey::Transaction, "transaction_timeout"),
    ];

    fn named(key: &str) -> Option<TimeoutKey> {
        Self::ALL.iter().find(|(_, name)| *name == key).map(|(k, _)| *k)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A user's own timeouts; `None`: the global setting applies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserTimeouts([Option<Duration>; 4]);

impl UserTimeouts {
    /// The user's own value of `key`, if it set one.
    pub fn get(&self, key: TimeoutKey) -> Option<Duration> {
        self.0[key.index()]
    }

    /// Sets `key` (a [`TimeoutKey`] name) from a user entry's `value` (a bare number of seconds, PgBouncer's
    /// unit, or `500ms`, `5s`, `2m`, `1h`); `None` if `key` is not one of the four.
    pub(crate) fn apply(&mut self, key: &str, value: &str) -> Option<Result<(), ValueError>> {
        let which = TimeoutKey::named(key)?;
        let parsed = super::duration::parse_duration(value.trim()).ok_or_else(|| ValueError::Expected {
            expected: "a duration like 30s, 1h or a number of seconds",
            got: value.to_owned(),
        });
        Some(parsed.map(|d| self.0[which.index()] = Some(d)))
    }

    /// Whether it sets any of the four (to any value: a 0 that turns a global one off counts).
    pub fn any(&self) -> bool {
        self.0.iter().any(Option::is_some)
    }
}

/// Not set: the global setting applies.
const INHERIT: u32 = u32::MAX;

/// [`UserTimeouts`] as the sessions of one user read them: milliseconds in atomics (a relaxed load each),
/// replaced whole at login and on reload. A value too large for a `u32` of milliseconds (49 days) is kept as
/// the largest that fits.
#[derive(Debug)]
pub(crate) struct SharedTimeouts([AtomicU32; 4]);

impl Default for SharedTimeouts {
    fn default() -> Self {
        SharedTimeouts(std::array::from_fn(|_| AtomicU32::new(INHERIT)))
    }
}

impl SharedTimeouts {
    /// Puts `own` in force.
    pub(crate) fn store(&self, own: &UserTimeouts) {
        for (cell, value) in self.0.iter().zip(own.0) {
            let ms = value.map_or(INHERIT, |d| u32::try_from(d.as_millis()).unwrap_or(INHERIT - 1));
            cell.store(ms, Ordering::Relaxed);
        }
    }

    /// The user's own `key`, else `global`.
    #[inline]
    pub(crate) fn or(&self, key: TimeoutKey, global: Duration) -> Duration {
        match self.0[key.index()].load(Ordering::Relaxed) {
            INHERIT => global,
            ms => Duration::from_millis(u64::from(ms)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_s_own_value_overrides_the_global_one_and_0_turns_it_off() {
        let mut own = UserTimeouts::default();
        assert_eq!(own.apply("query_timeout", "2"), Some(Ok(())));
        assert_eq!(own.apply("client_idle_timeout", "0"), Some(Ok(())));
        assert_eq!(own.apply("transaction_timeout", "1500ms"), Some(Ok(())));
        assert_eq!(own.apply("pool_mode", "session"), None, "not one of the four");
        assert!(matches!(own.apply("idle_transaction_timeout", "soon"), Some(Err(_))));
        let shared = SharedTimeouts::default();
        let global = Duration::from_secs(100);
        assert_eq!(shared.or(TimeoutKey::Query, global), global, "nothing stored: the global one");
        shared.store(&own);
        assert_eq!(shared.or(TimeoutKey::Query, global), Duration::from_secs(2));
        assert_eq!(shared.or(TimeoutKey::ClientIdle, global), Duration::ZERO);
        assert_eq!(shared.or(TimeoutKey::Transaction, global), Duration::from_millis(1500));
        assert_eq!(shared.or(TimeoutKey::IdleTransaction, global), global);
        shared.store(&UserTimeouts::default());
        assert_eq!(shared.or(TimeoutKey::Query, global), global, "a reload that drops the user's own");
    }
}
