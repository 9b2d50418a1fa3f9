//! Every setting of PgBouncer's `[pgbouncer]` section and what pgmux makes of it: a pgmux key (and how the
//! value is turned from PgBouncer's unit into pgmux's), a rule the reader applies itself, or nothing (the
//! setting is listed in the start-up warning). One table, so that a setting cannot be read in one place and
//! forgotten in another; docs/migrating-from-pgbouncer.md says the same in words, and a test holds that it
//! names every setting here.
//!
//! The names are PgBouncer 1.25's, with the few that later PgBouncer documentation adds, so that a newer
//! file is not refused for a setting pgmux would ignore anyway.

use std::time::Duration;

/// What pgmux does with one `[pgbouncer]` setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Meaning {
    /// The pgmux key of that meaning, the value turned from PgBouncer's unit.
    Key(&'static str, Unit),
    /// Read by the reader itself: combined with another setting, or refused for some values
    /// (`listen_addr`, `auth_type`, `client_tls_*`, `verbose`, ...).
    Rule,
    /// pgmux has nothing for it: listed in the start-up warning, never fatal.
    Unsupported,
}

/// How a PgBouncer value is written for pgmux.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// The same text (numbers, paths, lists of users).
    Same,
    /// A name PgBouncer matches without regard to case (`Session`, `VERIFY-FULL`).
    Name,
    /// PgBouncer's seconds, a decimal number (`30`, `0.5`).
    Seconds,
    /// Seconds, where PgBouncer's 0 means no limit and pgmux needs one: 0 becomes [`NO_LIMIT`].
    SecondsNoLimit,
    /// Seconds, where PgBouncer's 0 means a server connection is used once: pgmux closes it when it is
    /// next idle (a lifetime of 1 ms).
    LifetimeSeconds,
    /// Whole seconds, where PgBouncer's 0 leaves the socket option to the operating system: 0 keeps
    /// pgmux's own value.
    SecondsOrKeep,
    /// A count where 0 leaves the socket option to the operating system: 0 keeps pgmux's own value.
    CountOrKeep,
    /// PgBouncer's milliseconds, a whole number.
    Millis,
    /// PgBouncer's switch, an integer (0 off, anything else on).
    Flag,
}

/// What "no limit" becomes for a wait pgmux must bound: a year.
pub const NO_LIMIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// What a value means for pgmux, once turned from PgBouncer's unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Converted {
    /// Set the key to this text (pgmux's form).
    Set(String),
    /// Leave pgmux's value (PgBouncer's "let the operating system decide").
    Keep,
}

/// Why a value is not of its unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadUnit {
    /// What the unit takes, as a user would read it.
    pub expected: &'static str,
}

impl Unit {
    /// `value` in pgmux's form.
    pub fn convert(self, value: &str) -> Result<Converted, BadUnit> {
        let value = value.trim();
        let set = |s: String| Ok(Converted::Set(s));
        match self {
            Unit::Same => set(value.to_owned()),
            Unit::Name => set(value.to_ascii_lowercase()),
            Unit::Seconds => set(format!("{}ms", seconds_as_millis(value)?)),
            Unit::SecondsNoLimit => match seconds_as_millis(value)? {
                0 => set(format!("{}ms", NO_LIMIT.as_millis())),
                ms => set(format!("{ms}ms")),
            },
            Unit::LifetimeSeconds => set(format!("{}ms", seconds_as_millis(value)?.max(1))),
            Unit::SecondsOrKeep => match whole(value)? {
                0 => Ok(Converted::Keep),
                n => set(format!("{n}s")),
            },
            Unit::CountOrKeep => match whole(value)? {
                0 => Ok(Converted::Keep),
                n => set(n.to_string()),
            },
            Unit::Millis => set(format!("{}ms", whole(value)?)),
            Unit::Flag => set((whole(value)? != 0).to_string()),
        }
    }
}

/// PgBouncer's seconds (`30`, `2.5`, `0.005`) in whole milliseconds.
fn seconds_as_millis(value: &str) -> Result<u64, BadUnit> {
    let bad = BadUnit { expected: "a number of seconds, like 30 or 0.5" };
    let n: f64 = value.parse().map_err(|_| bad.clone())?;
    if !n.is_finite() || !(0.0..=1e12).contains(&n) {
        return Err(bad);
    }
    Ok((n * 1000.0).round() as u64)
}

fn whole(value: &str) -> Result<u64, BadUnit> {
    value.parse().map_err(|_| BadUnit { expected: "a whole number" })
}

use Meaning::{Key, Rule, Unsupported};

/// PgBouncer's `[pgbouncer]` settings, alphabetical as PgBouncer lists them.
pub const SETTINGS: &[(&str, Meaning)] = &[
    ("admin_users", Key("admin_users", Unit::Same)),
    ("application_name_add_host", Unsupported),
    ("auth_dbname", Key("auth_dbname", Unit::Same)),
    ("auth_file", Key("auth_file", Unit::Same)),
    ("auth_hba_file", Key("auth_hba_file", Unit::Same)),
    ("auth_ident_file", Key("auth_ident_file", Unit::Same)),
    ("auth_ldap_options", Unsupported),
    ("auth_query", Key("auth_query", Unit::Same)),
    ("auth_type", Rule),
    ("auth_user", Key("auth_user", Unit::Same)),
    ("autodb_idle_timeout", Unsupported),
    ("cancel_wait_timeout", Key("cancel_wait_timeout", Unit::Seconds)),
    ("client_idle_timeout", Key("client_idle_timeout", Unit::Seconds)),
    ("client_login_timeout", Key("client_login_timeout", Unit::SecondsNoLimit)),
    ("client_tls13_ciphers", Unsupported),
    ("client_tls_ca_file", Key("tls_client_ca", Unit::Same)),
    ("client_tls_cert_file", Key("tls_cert", Unit::Same)),
    ("client_tls_ciphers", Unsupported),
    ("client_tls_dheparams", Unsupported),
    ("client_tls_ecdhcurve", Unsupported),
    ("client_tls_key_file", Key("tls_key", Unit::Same)),
    ("client_tls_protocols", Unsupported),
    ("client_tls_sslmode", Rule),
    ("conffile", Unsupported),
    ("default_pool_size", Key("default_pool_size", Unit::Same)),
    ("disable_pqexec", Unsupported),
    ("dns_max_ttl", Unsupported),
    ("dns_nxdomain_ttl", Unsupported),
    ("dns_zone_check_period", Unsupported),
    ("idle_transaction_timeout", Key("idle_transaction_timeout", Unit::Seconds)),
    ("ignore_startup_parameters", Key("ignore_startup_parameters", Unit::Same)),
    ("job_name", Unsupported),
    ("listen_addr", Rule),
    ("listen_backlog", Unsupported),
    ("listen_port", Rule),
    ("log_connections", Unsupported),
    ("log_disconnections", Unsupported),
    ("log_pooler_errors", Unsupported),
    ("log_stats", Unsupported),
    ("logfile", Unsupported),
    ("login_notify_message", Unsupported),
    ("max_client_conn", Key("max_client_conn", Unit::Same)),
    ("max_db_client_connections", Key("max_db_client_connections", Unit::Same)),
    ("max_db_connections", Key("max_db_connections", Unit::Same)),
    ("max_packet_size", Unsupported),
    ("max_prepared_statements", Key("max_prepared_statements", Unit::Same)),
    ("max_user_client_connections", Key("max_user_client_connections", Unit::Same)),
    ("max_user_connections", Key("max_user_connections", Unit::Same)),
    ("min_pool_size", Key("min_pool_size", Unit::Same)),
    ("peer_id", Unsupported),
    ("pidfile", Unsupported),
    ("pkt_buf", Unsupported),
    ("pool_idle_timeout", Unsupported),
    ("pool_mode", Rule),
    ("query_timeout", Key("query_timeout", Unit::Seconds)),
    ("query_wait_notify", Unsupported),
    ("query_wait_timeout", Key("query_wait_timeout", Unit::SecondsNoLimit)),
    ("reserve_pool_size", Key("reserve_pool_size", Unit::Same)),
    ("reserve_pool_timeout", Key("reserve_pool_timeout", Unit::Seconds)),
    ("resolv_conf", Unsupported),
    ("sbuf_loopcnt", Unsupported),
    ("scram_iterations", Unsupported),
    ("server_check_delay", Key("server_check_delay", Unit::Seconds)),
    ("server_check_query", Key("server_check_query", Unit::Same)),
    ("server_connect_timeout", Key("server_connect_timeout", Unit::SecondsNoLimit)),
    ("server_fast_close", Key("server_fast_close", Unit::Flag)),
    ("server_idle_timeout", Key("server_idle_timeout", Unit::Seconds)),
    ("server_lifetime", Key("server_lifetime", Unit::LifetimeSeconds)),
    ("server_login_retry", Key("server_login_retry", Unit::Seconds)),
    ("server_reset_query", Unsupported),
    ("server_reset_query_always", Unsupported),
    ("server_round_robin", Unsupported),
    ("server_tls13_ciphers", Unsupported),
    ("server_tls_ca_file", Key("ssl_root_cert", Unit::Same)),
    ("server_tls_cert_file", Unsupported),
    ("server_tls_ciphers", Unsupported),
    ("server_tls_key_file", Unsupported),
    ("server_tls_protocols", Unsupported),
    ("server_tls_sslmode", Key("sslmode", Unit::Name)),
    ("service_name", Unsupported),
    ("so_reuseport", Unsupported),
    ("stats_period", Rule),
    ("stats_users", Key("stats_users", Unit::Same)),
    ("suspend_timeout", Unsupported),
    ("syslog", Unsupported),
    ("syslog_facility", Unsupported),
    ("syslog_ident", Unsupported),
    ("tcp_defer_accept", Unsupported),
    ("tcp_keepalive", Key("tcp_keepalive", Unit::Flag)),
    ("tcp_keepcnt", Key("tcp_keepcnt", Unit::CountOrKeep)),
    ("tcp_keepidle", Key("tcp_keepidle", Unit::SecondsOrKeep)),
    ("tcp_keepintvl", Key("tcp_keepintvl", Unit::SecondsOrKeep)),
    ("tcp_socket_buffer", Unsupported),
    ("tcp_user_timeout", Key("tcp_user_timeout", Unit::Millis)),
    ("track_extra_parameters", Key("track_extra_parameters", Unit::Same)),
    ("transaction_timeout", Key("transaction_timeout", Unit::Seconds)),
    ("unix_socket_dir", Rule),
    ("unix_socket_group", Unsupported),
    ("unix_socket_mode", Unsupported),
    ("user", Unsupported),
    ("verbose", Rule),
];

/// pgmux's own settings that an ini's `[pgbouncer]` section may carry too, though PgBouncer has nothing
/// like them (such a file no longer runs under PgBouncer): the ones an operator moving over is most likely
/// to want in the file rather than in the environment.
pub const PGMUX_ONLY: &[(&str, Meaning)] = &[
    ("max_active_servers", Key("max_active_servers", Unit::Same)),
    // PgBouncer has connect_query per database only; pgmux also has one for all databases.
    ("connect_query", Key("connect_query", Unit::Same)),
];

/// What pgmux does with the setting `name`; `None` if neither PgBouncer nor [`PGMUX_ONLY`] has it.
pub fn meaning(name: &str) -> Option<Meaning> {
    SETTINGS.iter().chain(PGMUX_ONLY).find(|(n, _)| *n == name).map(|&(_, m)| m)
}

/// PgBouncer's defaults where they differ from pgmux's, as (pgmux key, value): applied before the file, so
/// that what an ini does not set behaves as it did under PgBouncer.
pub const PGBOUNCER_DEFAULTS: &[(&str, &str)] = &[
    ("listen", "127.0.0.1:6432"),
    ("pool_mode", "session"),
    ("default_pool_size", "20"),
    ("client_auth", "md5"),
    ("max_client_conn", "100"),
    ("query_wait_timeout", "120s"),
    ("client_login_timeout", "60s"),
    ("server_connect_timeout", "15s"),
    ("server_idle_timeout", "600s"),
    ("server_lifetime", "3600s"),
    ("server_check_delay", "30s"),
    ("max_prepared_statements", "200"),
    ("unix_socket_dir", "/tmp"),
    // PgBouncer does not size its pools from the server's max_connections, and an ini names no login for
    // the control connection that would read it (PGMUX_DATABASE_URL and PGMUX_MAX_CONNECTIONS_PERCENT turn
    // it on). The budget of all pools is then pool_max: see `Builder::budget`.
    ("max_connections_percent", "0"),
];
