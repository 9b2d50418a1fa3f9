//! Putting a new configuration in force while pgmux runs (`SIGHUP`, `RELOAD`, `SET`).
//!
//! Everything is checked before anything changes: a configuration that does not load, or whose TLS files do
//! not read, leaves the running one in place and the error says why. Then, in one step each: the
//! configuration swaps (pool sizes, timeouts, admin users, metrics settings take effect at once), new logins
//! use the new client authentication and TLS, and new server connections the new credentials and TLS. If
//! how pgmux logs in to the database changed, every open server connection is replaced as it comes back
//! (the RECONNECT rule), so no client sees an error. The listen address, the Unix socket's directory, the
//! worker threads and the log format need a restart: a reload keeps them and says so.

use std::sync::Arc;

use pgmux_metrics::ReloadResult;

use crate::client::auth::Authenticator;
use crate::client::shared::Shared;
use crate::config::auth_file::{AuthFileError, UserBook};
use crate::config::credentials::{Credentials, PoolCredentials, ServerAccess, StaticCredentials};
use crate::config::source::SourceError;
use crate::config::{Config, ConfigError, KEYS, RESTART_ONLY};
use crate::net::tls::{self, TlsSetupError};

/// Why a new configuration was not put in force; the running one stays.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// pgmux was started without a source to re-read (tests, embedding).
    #[error("this pgmux was started without a configuration source to re-read")]
    NoSource,
    /// The source could not produce a configuration: the file cannot be read or is not TOML, a key is
    /// unknown, missing or wrong (named, with where its value came from), or logins could not be built.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// `SET`'s value is wrong, or makes the configuration unusable with the other keys.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    /// `SET` of a key that only a restart changes (the listener, the runtime, the log format).
    #[error("{key} cannot change while pgmux runs; change it in the configuration and restart")]
    NeedsRestart {
        /// The key.
        key: &'static str,
    },
    /// `SET` of a key that changes how pgmux logs in: only a full reload rebuilds credentials and TLS.
    #[error("{key} changes how pgmux logs in; change it in the configuration and RELOAD")]
    ChangesLogin {
        /// The key.
        key: &'static str,
    },
    /// A TLS file named by the new configuration cannot be read or used.
    #[error("invalid TLS setting {0}")]
    Tls(#[from] TlsSetupError),
    /// Sizing would have no user to read the database as.
    #[error("{0}")]
    Control(String),
    /// The auth file named by the new configuration cannot be read or is not a userlist.
    #[error(transparent)]
    AuthFile(#[from] AuthFileError),
}

impl ReloadError {
    /// The key at fault, if one is.
    pub fn key(&self) -> Option<&str> {
        match self {
            ReloadError::NoSource => None,
            ReloadError::Source(e) => e.key(),
            ReloadError::Invalid(e) => e.key(),
            ReloadError::NeedsRestart { key } | ReloadError::ChangesLogin { key } => Some(key),
            ReloadError::Tls(TlsSetupError::File { key, .. } | TlsSetupError::Rustls { key, .. }) => Some(key),
            ReloadError::AuthFile(e) => Some(e.key()),
            ReloadError::Control(_) => Some("max_connections_percent"),
        }
    }
}

/// What a reload did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Keys whose value changed and is in force.
    pub(crate) changed: Vec<&'static str>,
    /// Keys that changed in the file but need a restart; the running value stays.
    pub(crate) kept: Vec<&'static str>,
    /// Server connections are being replaced (how pgmux logs in changed).
    pub(crate) reconnect: bool,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.changed.is_empty() {
            f.write_str("nothing changed")?;
        } else {
            write!(f, "changed: {}", self.changed.join(", "))?;
        }
        if self.reconnect {
            f.write_str("; server connections are replaced as they come back")?;
        }
        if !self.kept.is_empty() {
            write!(f, "; needs a restart, kept as it was: {}", self.kept.join(", "))?;
        }
        Ok(())
    }
}

/// Re-reads the configuration from the binary's source and puts it in force.
pub(crate) fn reload(shared: &Shared) -> Result<Outcome, ReloadError> {
    let Some(source) = shared.source.get() else {
        return Err(failed(shared, ReloadError::NoSource));
    };
    let outcome = match source.load() {
        Ok((config, access)) => apply(shared, config, Some(access)),
        Err(e) => Err(e.into()),
    };
    match outcome {
        Ok(outcome) => {
            source.applied(&shared.config());
            Ok(outcome)
        }
        Err(e) => Err(failed(shared, e)),
    }
}

/// Counts and logs a failed reload; returns the reason.
fn failed(shared: &Shared, why: ReloadError) -> ReloadError {
    shared.observer().metrics.reloads.inc(ReloadResult::Failed);
    tracing::error!(error = %why, key = why.key(), "reload failed; the running configuration stays");
    why
}

/// `SET key = value` (the console): the configuration in force with `key` changed, checked again and put
/// in force. Keys that change how pgmux logs in rebuild the logins as `RELOAD` does (new server connections
/// from then on); restart-only keys need a restart.
pub(crate) fn set(shared: &Shared, key: &str, value: &str) -> Result<Outcome, ReloadError> {
    if let Some(refused) = not_settable(key, shared.source.get().is_some()) {
        return Err(refused);
    }
    let new = shared.pools.live_config().full().with_value(key, value)?;
    // A key that changes how pgmux logs in to the server (sslmode, ...) is put in force as RELOAD puts it,
    // with the access (credentials, certificates) the configuration's source gives; without a source, only
    // RELOAD may change it.
    let access = match shared.source.get() {
        Some(source) if LOGIN_KEYS.contains(&key) => Some(source.load().map_err(ReloadError::from)?.1),
        _ => None,
    };
    let outcome = apply(shared, new, access)?;
    if let Some(source) = shared.source.get() {
        source.applied(&shared.config());
    }
    Ok(outcome)
}

/// Puts `new` in force. With `access`, logins are rebuilt from it (a full reload); without, the keys that
/// change how pgmux logs in must not have changed (`SET`).
fn apply(shared: &Shared, mut new: Config, access: Option<ServerAccess>) -> Result<Outcome, ReloadError> {
    let old = shared.pools.live_config().full();
    let kept = keep_restart_only(&old, &mut new);
    let changed = changed_keys(&old, &new);
    let reconnect = old.login_differs(&new);
    let login_key = changed.iter().copied().find(|k| LOGIN_KEYS.contains(k));
    let full = access.is_some();
    // Who may log in, and with what: read on a full reload and when SET changes how clients log in.
    let book =
        if full || changed.iter().any(|k| CLIENT_AUTH_KEYS.contains(k)) { Some(UserBook::load(&new)?) } else { None };
    let (rebuilt, pool_credentials) = match (access, login_key) {
        (Some(access), _) => {
            let (rebuilt, pool_credentials) = rebuild(&new, book.as_ref().unwrap_or(&UserBook::default()), access)?;
            (Some(rebuilt), pool_credentials)
        }
        (None, Some(key)) => return Err(ReloadError::ChangesLogin { key }),
        (None, None) => (None, shared.auth().pool_credentials().cloned()),
    };
    let auth = book.map(|book| Authenticator::new(&new, book, pool_credentials));
    // The TLS offered to clients, when SET changed it (a full reload rebuilt it above).
    let client_tls = match rebuilt {
        None if changed.iter().any(|k| CLIENT_TLS_KEYS.contains(k)) => Some(tls::client_from_config(&new)?),
        _ => None,
    };
    shared.statements.set_capacity(new.max_prepared_statements);
    shared.pools.live_config().replace(Arc::new(new));
    if let Some(client_tls) = client_tls {
        shared.replace_client_tls(client_tls);
    }
    if let Some((credentials, server_tls, client_tls)) = rebuilt {
        // The default pool takes the new credentials; named databases' pools whose route changed drain.
        shared.pools.first().replace_access(credentials, server_tls.clone());
        for pool in shared.pools.all().iter().skip(1) {
            pool.replace_tls(server_tls.clone());
        }
        shared.replace_client_tls(client_tls);
    }
    let logins_changed = auth.is_some();
    if let Some(auth) = auth {
        shared.replace_auth(auth);
    }
    shared.pools.resize_routes(&shared.config(), shared.auth().book());
    shared.counts.refresh_timeouts(shared.auth().book());
    if logins_changed {
        shared.pools.retire_changed(&shared.config(), shared.auth().book());
    }
    for pool in shared.pools.all() {
        pool.resize();
        if reconnect {
            // "<database>: database configuration changed" is PgBouncer's line for this moment; operators'
            // scripts and PgBouncer's own test suite look for it.
            let key = pool.key();
            tracing::info!(user = %key.user, "{}: database configuration changed, its server connections are opened anew", key.database);
            pool.reconnect();
        }
    }
    shared.observer().metrics.reloads.inc(ReloadResult::Ok);
    let outcome = Outcome { changed, kept, reconnect };
    tracing::info!(%outcome, "configuration reloaded");
    Ok(outcome)
}

/// Keys that change how clients log in (and nothing on the server side): `SET` may change them.
const CLIENT_AUTH_KEYS: &[&str] = &["client_auth", "client_password", "auth_file", "auth_hba_file", "auth_ident_file"];

/// Keys whose change needs new credentials or TLS: only a full reload rebuilds those.
const LOGIN_KEYS: &[&str] =
    &["database_url", "secret_arn", "database_host", "database_port", "iam_auth", "sslmode", "ssl_root_cert"];

/// Keys of the TLS offered to clients: `SET` rebuilds it (for new logins), no source needed.
const CLIENT_TLS_KEYS: &[&str] = &["tls_cert", "tls_key", "tls_mode", "tls_client_ca", "client_auth"];

/// Why `SET` may not change `key`, if it may not: it needs a RELOAD, or a restart.
fn not_settable(key: &str, has_source: bool) -> Option<ReloadError> {
    if let Some(key) = RESTART_ONLY.iter().find(|k| **k == key) {
        return Some(ReloadError::NeedsRestart { key });
    }
    let login = LOGIN_KEYS.iter().find(|k| **k == key).filter(|_| !has_source);
    login.map(|key| ReloadError::ChangesLogin { key })
}

/// Credentials and TLS for `config`; an error leaves everything as it was.
type Rebuilt = (Arc<dyn Credentials>, tls::ServerTls, Option<tokio_rustls::TlsAcceptor>);

fn rebuild(
    config: &Config,
    book: &UserBook,
    access: ServerAccess,
) -> Result<(Rebuilt, Option<Arc<dyn PoolCredentials>>), ReloadError> {
    let (server_tls, client_tls) = tls::from_config(config, access.extra_root_certs)?;
    let credentials = match access.credentials {
        Some(credentials) => credentials,
        None => Arc::new(StaticCredentials::new(
            crate::pools::routing::sizing_login(config, book).map_err(|e| ReloadError::Control(e.to_string()))?,
        )),
    };
    Ok(((credentials, server_tls, client_tls), access.pool_credentials))
}

/// Puts the running values of the restart-only keys back into `new`; returns those that differed.
fn keep_restart_only(old: &Config, new: &mut Config) -> Vec<&'static str> {
    let mut kept = Vec::new();
    if new.listen != old.listen {
        new.listen = old.listen;
        kept.push("listen");
    }
    if new.unix_socket_dir != old.unix_socket_dir {
        new.unix_socket_dir.clone_from(&old.unix_socket_dir);
        kept.push("unix_socket_dir");
    }
    if new.workers != old.workers {
        new.workers = old.workers;
        kept.push("workers");
    }
    if new.log_format != old.log_format {
        new.log_format = old.log_format;
        kept.push("log_format");
    }
    if !kept.is_empty() {
        tracing::warn!(keys = ?kept, "these settings need a restart; the running values stay");
    }
    kept
}

/// The keys whose shown value differs (passwords compare redacted, so a changed password alone shows as
/// the key whose login differs).
fn changed_keys(old: &Config, new: &Config) -> Vec<&'static str> {
    let (a, b) = (old.entries(), new.entries());
    let mut changed: Vec<&'static str> =
        a.iter().zip(&b).filter(|((_, x), (_, y))| x != y).map(|((k, _), _)| *k).collect();
    if old.login_differs(new) && !changed.iter().any(|k| LOGIN_KEYS.contains(k)) {
        changed.push("database_url");
    }
    if old.client_password() != new.client_password() && !changed.contains(&"client_password") {
        changed.push("client_password");
    }
    changed.sort_by_key(|k| KEYS.iter().position(|i| i.name == *k));
    // The lists of databases and users are no single key: named by their section.
    if old.databases != new.databases {
        changed.push("databases");
    }
    if old.users != new.users {
        changed.push("users");
    }
    changed
}

#[cfg(test)]
mod tests {
    use tokio_util::task::TaskTracker;

    use super::*;
    use crate::config::SslMode;
    use crate::config::source::ConfigSource;
    use crate::net::tls::ServerTls;
    use crate::pools::Pools;
    use crate::runtime::stop::Stop;

    fn config(extra: &str) -> Config {
        Config::from_toml_str(&format!("database_url = \"postgres://app:pw@db.example/app\"\n{extra}")).unwrap()
    }

    /// What a running pooler shares, with no server behind it (nothing here opens a connection).
    fn shared() -> Shared {
        let config = config("sslmode = \"disable\"\npool_max = 4");
        let credentials = Arc::new(StaticCredentials::from_config(&config));
        let tls = ServerTls::new(SslMode::Disable, Vec::new()).expect("plaintext needs no CA");
        let auth = Authenticator::from_config(&config);
        let pools = Pools::new(Arc::new(config), credentials, tls, TaskTracker::new(), Stop::new());
        Shared::new(pools, TaskTracker::new(), None, auth)
    }

    /// A source whose file holds `text`.
    #[derive(Debug)]
    struct File(&'static str);

    impl ConfigSource for File {
        fn load(&self) -> Result<(Config, ServerAccess), SourceError> {
            let config =
                Config::from_toml_str(&format!("database_url = \"postgres://app:pw@db.example/app\"\n{}", self.0))?;
            Ok((config, ServerAccess::default()))
        }
    }

    #[tokio::test]
    async fn a_failed_reload_says_why_and_which_key_and_keeps_the_running_configuration() {
        let shared = shared();
        let err = reload(&shared).expect_err("no source");
        assert!(matches!(err, ReloadError::NoSource), "{err:?}");
        assert_eq!(err.to_string(), "this pgmux was started without a configuration source to re-read");

        let _ = shared.source.set(Arc::new(File("pool_max = \"lots\"")));
        let err = reload(&shared).expect_err("a bad pool_max");
        assert!(matches!(&err, ReloadError::Source(SourceError::Config(ConfigError::Invalid { .. }))), "{err:?}");
        assert_eq!(err.key(), Some("pool_max"));
        assert_eq!(err.to_string(), "invalid value for pool_max (config file): expected a whole number, got \"lots\"");
        assert_eq!(shared.config().pool_max, Some(4), "the running configuration stays");
        assert_eq!(shared.observer().metrics.reloads.get(ReloadResult::Failed), 2);
    }

    #[tokio::test]
    async fn set_refuses_what_it_may_not_change_and_says_which_key() {
        let shared = shared();
        let err = set(&shared, "listen", "127.0.0.1:1").expect_err("listen needs a restart");
        assert!(matches!(err, ReloadError::NeedsRestart { key: "listen" }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "listen cannot change while pgmux runs; change it in the configuration and restart"
        );
        let err = set(&shared, "database_url", "postgres://b@elsewhere/b").expect_err("a login key needs RELOAD");
        assert!(matches!(err, ReloadError::ChangesLogin { key: "database_url" }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "database_url changes how pgmux logs in; change it in the configuration and RELOAD"
        );
        let err = set(&shared, "pool_max", "lots").expect_err("not a number");
        assert!(matches!(&err, ReloadError::Invalid(ConfigError::Invalid { .. })), "{err:?}");
        assert_eq!(err.key(), Some("pool_max"));
        let outcome = set(&shared, "pool_max", "6").expect("a good value");
        assert_eq!(outcome.changed, ["pool_max"]);
        assert_eq!(shared.config().pool_max, Some(6));
        assert_eq!(shared.observer().metrics.reloads.get(ReloadResult::Failed), 0, "SET's refusals are not reloads");
    }

    #[test]
    fn a_reload_keeps_the_running_unix_socket_dir_and_says_so() {
        // The socket was bound at start: a new directory would show in SHOW CONFIG yet accept no one.
        let old = config("unix_socket_dir = \"/run/pgmux\"");
        let mut new = config("unix_socket_dir = \"/tmp\"\nquery_wait_timeout = \"5s\"");
        let kept = keep_restart_only(&old, &mut new);
        assert_eq!(kept, ["unix_socket_dir"]);
        assert_eq!(new.unix_socket_dir, old.unix_socket_dir);
        let outcome = Outcome { changed: changed_keys(&old, &new), kept, reconnect: false };
        assert_eq!(
            outcome.to_string(),
            "changed: query_wait_timeout; needs a restart, kept as it was: unix_socket_dir"
        );

        // Dropping the socket needs a restart too, and SET may not change it.
        let mut none = config("");
        assert_eq!(keep_restart_only(&old, &mut none), ["unix_socket_dir"]);
        assert_eq!(none.unix_socket_dir, old.unix_socket_dir);
        let restart = not_settable("unix_socket_dir", true);
        assert!(matches!(restart, Some(ReloadError::NeedsRestart { key: "unix_socket_dir" })));
        // A login key: SET rebuilds the logins where there is a source to read credentials from, else no.
        assert!(not_settable("sslmode", true).is_none());
        assert!(matches!(not_settable("sslmode", false), Some(ReloadError::ChangesLogin { key: "sslmode" })));
    }

    #[test]
    fn a_reload_that_changes_databases_or_users_says_so() {
        let old = config("[[databases]]\nname = \"app\"\n");
        let new = config("[[databases]]\nname = \"app\"\n[[databases]]\nname = \"*\"\n[[users]]\nname = \"bob\"\n");
        assert_eq!(changed_keys(&old, &new), ["databases", "users"]);
        assert!(changed_keys(&old, &old).is_empty());
    }

    #[test]
    fn every_restart_only_key_is_kept_by_a_reload() {
        // RESTART_ONLY (what SHOW CONFIG and SET go by) and keep_restart_only (what a reload does) must agree.
        let old = config("");
        let changes = [
            ("listen", "listen = \"127.0.0.1:7000\""),
            ("unix_socket_dir", "unix_socket_dir = \"/tmp\""),
            ("workers", "workers = 3"),
            ("log_format", "log_format = \"json\""),
        ];
        for (key, line) in changes {
            let mut new = config(line);
            assert_eq!(keep_restart_only(&old, &mut new), [key], "{line}");
            assert_eq!(new.entries(), old.entries(), "{key} is back to the running value");
        }
        assert_eq!(changes.map(|(key, _)| key), RESTART_ONLY);
    }
}
