//! Client connections per database and per user: the counts SHOW DATABASES and SHOW USERS report, and the
//! caps on them (PgBouncer's `max_db_client_connections` and `max_user_client_connections`).
//!
//! A client is counted once it has logged in — under the database it named and the user it logged in as,
//! console sessions under `pgbouncer` — for as long as its [`Hold`] lives. Counting happens at login and
//! exit only, never per message. A name gets its counter the first time a client logs in with it and keeps
//! it: only names that passed authentication get one, so the table grows with the users and databases that
//! exist, not with what clients send.

use foldhash::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::sqlstate;

use crate::config::Config;
use crate::config::auth_file::UserBook;
use crate::config::user_timeouts::{SharedTimeouts, UserTimeouts};

/// Counters by name.
#[derive(Debug, Default)]
struct Table(Mutex<HashMap<Box<str>, Arc<AtomicUsize>>>);

impl Table {
    fn counter(&self, name: &str) -> Arc<AtomicUsize> {
        let mut table = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(counter) = table.get(name) {
            return Arc::clone(counter);
        }
        let counter = Arc::new(AtomicUsize::new(0));
        table.insert(name.into(), Arc::clone(&counter));
        counter
    }

    fn count(&self, name: &str) -> usize {
        let table = self.0.lock().unwrap_or_else(|e| e.into_inner());
        table.get(name).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Every name with a client now.
    fn nonzero(&self) -> Vec<(String, usize)> {
        let table = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let counts = table.iter().map(|(name, c)| (name.to_string(), c.load(Ordering::Relaxed)));
        counts.filter(|(_, n)| *n > 0).collect()
    }
}

/// The two counters one client counts in: its database's and its user's; and its user's own timeouts, which
/// its session reads through the pointer it holds anyway.
#[derive(Debug)]
struct Pair {
    database: Arc<AtomicUsize>,
    user: Arc<AtomicUsize>,
    timeouts: SharedTimeouts,
}

/// One database's pairs, by user.
type ByUser = HashMap<Box<str>, Arc<Pair>>;

/// Client connections by database and by user.
#[derive(Debug, Default)]
pub(crate) struct ClientCounts {
    databases: Table,
    users: Table,
    /// Each (database, user) pair's counters, so that a client holds one pointer (every idle client pays
    /// for each byte of its session): by database, then by user, so that a login looks its pair up by the
    /// names it has, without building a key.
    pairs: Mutex<HashMap<Box<str>, ByUser>>,
}

/// The caps in force for one login; 0 is no cap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Caps {
    pub(crate) database: usize,
    pub(crate) user: usize,
}

impl Caps {
    /// The caps for a client of `database` (a route's own, else the `*` route's, else the global setting)
    /// logged in as `user` (its `[[users]]` entry's, else the global setting).
    pub(crate) fn of(config: &Config, book: &UserBook, database: &str, user: &str) -> Caps {
        let route = config.databases.iter().find(|s| s.name == database);
        let route = route.or_else(|| config.databases.iter().find(|s| s.name == "*"));
        let own = book.get(user).and_then(|k| k.spec.as_ref()).and_then(|s| s.max_user_client_connections);
        Caps {
            database: route.and_then(|r| r.max_db_client_connections).unwrap_or(config.max_db_client_connections),
            user: own.unwrap_or(config.max_user_client_connections),
        }
    }

    /// The caps for an admin console session as `user`: the global database cap, the user's own.
    pub(crate) fn of_console(config: &Config, book: &UserBook, user: &str) -> Caps {
        let own = book.get(user).and_then(|k| k.spec.as_ref()).and_then(|s| s.max_user_client_connections);
        Caps { database: config.max_db_client_connections, user: own.unwrap_or(config.max_user_client_connections) }
    }
}

/// One client, counted under its database and its user while this lives.
#[derive(Debug)]
pub(crate) struct Hold(Arc<Pair>);

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.database.fetch_sub(1, Ordering::Relaxed);
        self.0.user.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Hold {
    /// Its user's own timeouts, as last put in force (at a login of this database and user, or a reload).
    #[inline]
    pub(crate) fn timeouts(&self) -> &SharedTimeouts {
        &self.0.timeouts
    }
}

/// A user's own timeouts in `book` (its `[[users]]` entry's), none if it has no entry.
pub(crate) fn own_timeouts(book: &UserBook, user: &str) -> UserTimeouts {
    book.get(user).and_then(|k| k.spec.as_ref()).map(|s| s.timeouts).unwrap_or_default()
}

impl ClientCounts {
    /// Counts a client of `database` logged in as `user`, unless that takes either count over its cap
    /// (the database's checked first, as PgBouncer does): then 53300 naming the setting, and nothing counted.
    /// `exempt` clients (the console's admins) are counted but never refused.
    pub(crate) fn enter(&self, database: &str, user: &str, caps: Caps, exempt: bool) -> Result<Hold, ErrorMessage> {
        let hold = Hold(self.pair(database, user));
        let in_database = hold.0.database.fetch_add(1, Ordering::Relaxed) + 1;
        let as_user = hold.0.user.fetch_add(1, Ordering::Relaxed) + 1;
        if exempt {
            return Ok(hold);
        }
        let too_many = |message: String| ErrorMessage::fatal(sqlstate::TOO_MANY_CONNECTIONS, message);
        if caps.database > 0 && in_database > caps.database {
            return Err(too_many(format!(
                "sorry, too many clients already for database \"{database}\" (max_db_client_connections = {})",
                caps.database
            ))
            .with_hint("wait for a client of this database to disconnect, or raise max_db_client_connections"));
        }
        if caps.user > 0 && as_user > caps.user {
            return Err(too_many(format!(
                "sorry, too many clients already for user \"{user}\" (max_user_client_connections = {})",
                caps.user
            ))
            .with_hint("wait for a client of this user to disconnect, or raise max_user_client_connections"));
        }
        Ok(hold)
    }

    fn pair(&self, database: &str, user: &str) -> Arc<Pair> {
        let mut pairs = self.pairs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pair) = pairs.get(database).and_then(|users| users.get(user)) {
            return Arc::clone(pair);
        }
        let counters = (self.databases.counter(database), self.users.counter(user));
        let pair = Arc::new(Pair { database: counters.0, user: counters.1, timeouts: SharedTimeouts::default() });
        pairs.entry(database.into()).or_default().insert(user.into(), Arc::clone(&pair));
        pair
    }

    /// Puts each user's own timeouts in `book` in force for its clients (a reload).
    pub(crate) fn refresh_timeouts(&self, book: &UserBook) {
        let pairs = self.pairs.lock().unwrap_or_else(|e| e.into_inner());
        for (user, pair) in pairs.values().flat_map(|users| users.iter()) {
            pair.timeouts.store(&own_timeouts(book, user));
        }
    }

    /// Clients of `database` now.
    pub(crate) fn database(&self, database: &str) -> usize {
        self.databases.count(database)
    }

    /// Clients logged in as `user` now.
    #[cfg(test)]
    pub(crate) fn user(&self, user: &str) -> usize {
        self.users.count(user)
    }

    /// Every user with a client now, and how many.
    pub(crate) fn users(&self) -> Vec<(String, usize)> {
        self.users.nonzero()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_refuses_the_client_over_it_and_counts_nothing_for_it() {
        let counts = ClientCounts::default();
        let caps = Caps { database: 2, user: 0 };
        let first = counts.enter("app", "alice", caps, false).unwrap();
        let _second = counts.enter("app", "bob", caps, false).unwrap();
        let err = counts.enter("app", "carol", caps, false).unwrap_err();
        assert_eq!(err.code, sqlstate::TOO_MANY_CONNECTIONS);
        assert!(err.message.contains("max_db_client_connections = 2"), "{}", err.message);
        assert_eq!((counts.database("app"), counts.user("carol")), (2, 0), "the refused client is not counted");
        drop(first);
        assert_eq!((counts.database("app"), counts.user("alice")), (1, 0));
        let _third = counts.enter("app", "carol", caps, false).expect("room again once one left");
    }

    #[test]
    fn the_database_cap_is_named_before_the_user_cap_and_admins_are_never_refused() {
        let counts = ClientCounts::default();
        let caps = Caps { database: 1, user: 1 };
        let _held = counts.enter("pgbouncer", "ops", caps, false).unwrap();
        let err = counts.enter("pgbouncer", "ops", caps, false).unwrap_err();
        assert!(err.message.contains("max_db_client_connections"), "{}", err.message);
        let err = counts.enter("other", "ops", caps, false).unwrap_err();
        assert!(err.message.contains("max_user_client_connections"), "{}", err.message);
        let _admin = counts.enter("pgbouncer", "ops", caps, true).expect("exempt");
        assert_eq!(counts.user("ops"), 2);
        assert_eq!(counts.users(), vec![("ops".to_owned(), 2)]);
    }

    #[test]
    fn no_cap_is_zero() {
        let counts = ClientCounts::default();
        let holds: Vec<Hold> =
            (0..100).map(|_| counts.enter("app", "alice", Caps::default(), false).unwrap()).collect();
        assert_eq!(counts.database("app"), 100);
        drop(holds);
        assert_eq!(counts.database("app"), 0);
        assert!(counts.users().is_empty());
    }

    #[test]
    fn a_user_s_own_timeouts_reach_its_clients_at_login_and_again_on_reload() {
        use crate::config::user_timeouts::TimeoutKey;
        use std::time::Duration;
        let book = |timeout: &str| {
            let toml =
                format!("database_url = \"postgres://app:pw@db.example/app\"\n[[users]]\nname = \"alice\"\n{timeout}");
            UserBook::build(&Config::from_toml_str(&toml).unwrap(), Vec::new())
        };
        let global = Duration::from_secs(60);
        let counts = ClientCounts::default();
        let alice = counts.enter("app", "alice", Caps::default(), false).unwrap();
        let bob = counts.enter("app", "bob", Caps::default(), false).unwrap();
        let first = book("query_timeout = \"2s\"\n");
        for (hold, user) in [(&alice, "alice"), (&bob, "bob")] {
            hold.timeouts().store(&own_timeouts(&first, user));
        }
        assert_eq!(alice.timeouts().or(TimeoutKey::Query, global), Duration::from_secs(2));
        assert_eq!(bob.timeouts().or(TimeoutKey::Query, global), global, "bob has no entry");
        counts.refresh_timeouts(&book("query_timeout = \"5s\"\n"));
        assert_eq!(alice.timeouts().or(TimeoutKey::Query, global), Duration::from_secs(5), "a reload");
        counts.refresh_timeouts(&book(""));
        assert_eq!(alice.timeouts().or(TimeoutKey::Query, global), global, "a reload that removes it");
    }
}
