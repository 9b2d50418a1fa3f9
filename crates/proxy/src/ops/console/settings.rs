//! SHOW CONFIG as PgBouncer's tools read it: every PgBouncer setting pgmux has an equivalent for, under
//! PgBouncer's name and in PgBouncer's unit (times as bare seconds, `tcp_user_timeout` in milliseconds,
//! switches as `1` / `0`), then pgmux's own keys as pgmux writes them. A name both share is listed once, in
//! PgBouncer's form. A PgBouncer setting pgmux has nothing for is not listed: a row is a promise that the
//! value means there what it means in PgBouncer.
//!
//! [`PGBOUNCER`] says where each PgBouncer row comes from. Values are read from the configuration's own
//! text form ([`Config::entries`]: `30s`, `500ms`, `true`), so this file depends on nothing but the key
//! names, and a test holds that every name it reads still exists.

use crate::config::{Config, KEYS, RESTART_ONLY};

/// Where a PgBouncer setting comes from in pgmux.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Source {
    /// The pgmux key of that meaning (often of that name), in PgBouncer's unit.
    Key(&'static str, Unit),
    /// How pgmux always works; no key changes it.
    Fixed(&'static str),
    /// Worked out from pgmux's configuration and what is in force.
    Derived(Derived),
}

/// How a pgmux value is written in PgBouncer's unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Unit {
    /// The same text (numbers, names, paths, lists).
    Same,
    /// A duration, as PgBouncer's bare seconds (`30`, `0.005`).
    Seconds,
    /// A duration, as PgBouncer's bare milliseconds.
    Millis,
    /// A switch, as PgBouncer's `1` / `0`.
    Flag,
}

/// The PgBouncer settings that are worked out rather than read from one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Derived {
    /// `listen`'s address.
    ListenAddr,
    /// `listen`'s port.
    ListenPort,
    /// `admin_users`, or the user pgmux logs in as when it is empty: the users in force.
    AdminUsers,
    /// `default_pool_size` (named databases' pools), else `pool_max`, else the limit in force.
    DefaultPoolSize,
    /// `tls_mode` while clients are offered TLS (a certificate, a mode other than disable), `disable` otherwise.
    ClientTlsSslmode,
    /// The TLS mode to the database in force: `sslmode`, else `database_url`'s, else the profile's.
    ServerTlsSslmode,
    /// PgBouncer's log verbosity as a count, from `log_level`: `debug` is 1, `trace` 2, anything else 0.
    Verbose,
}

/// PgBouncer's settings with an equivalent in pgmux, in PgBouncer's order (alphabetical, as its SHOW CONFIG).
pub(super) const PGBOUNCER: &[(&str, Source)] = &[
    ("admin_users", Source::Derived(Derived::AdminUsers)),
    ("auth_dbname", Source::Key("auth_dbname", Unit::Same)),
    ("auth_file", Source::Key("auth_file", Unit::Same)),
    ("auth_query", Source::Key("auth_query", Unit::Same)),
    ("auth_type", Source::Key("client_auth", Unit::Same)),
    ("auth_user", Source::Key("auth_user", Unit::Same)),
    ("cancel_wait_timeout", Source::Key("cancel_wait_timeout", Unit::Seconds)),
    ("client_idle_timeout", Source::Key("client_idle_timeout", Unit::Seconds)),
    ("client_login_timeout", Source::Key("client_login_timeout", Unit::Seconds)),
    ("client_tls_ca_file", Source::Key("tls_client_ca", Unit::Same)),
    ("client_tls_cert_file", Source::Key("tls_cert", Unit::Same)),
    ("client_tls_key_file", Source::Key("tls_key", Unit::Same)),
    ("client_tls_sslmode", Source::Derived(Derived::ClientTlsSslmode)),
    ("default_pool_size", Source::Derived(Derived::DefaultPoolSize)),
    ("idle_transaction_timeout", Source::Key("idle_transaction_timeout", Unit::Seconds)),
    ("ignore_startup_parameters", Source::Key("ignore_startup_parameters", Unit::Same)),
    ("listen_addr", Source::Derived(Derived::ListenAddr)),
    ("listen_port", Source::Derived(Derived::ListenPort)),
    ("max_client_conn", Source::Key("max_client_conn", Unit::Same)),
    // 0 is PgBouncer's "unlimited", as pgmux's; pgbouncer_exporter reads these rows as numbers.
    ("max_db_client_connections", Source::Key("max_db_client_connections", Unit::Same)),
    ("max_db_connections", Source::Key("max_db_connections", Unit::Same)),
    ("max_prepared_statements", Source::Key("max_prepared_statements", Unit::Same)),
    ("max_user_client_connections", Source::Key("max_user_client_connections", Unit::Same)),
    ("max_user_connections", Source::Key("max_user_connections", Unit::Same)),
    ("min_pool_size", Source::Key("min_pool_size", Unit::Same)),
    ("pool_mode", Source::Key("pool_mode", Unit::Same)),
    ("query_timeout", Source::Key("query_timeout", Unit::Seconds)),
    ("query_wait_timeout", Source::Key("query_wait_timeout", Unit::Seconds)),
    ("reserve_pool_size", Source::Key("reserve_pool_size", Unit::Same)),
    ("reserve_pool_timeout", Source::Key("reserve_pool_timeout", Unit::Seconds)),
    ("server_check_delay", Source::Key("server_check_delay", Unit::Seconds)),
    ("server_check_query", Source::Key("server_check_query", Unit::Same)),
    ("server_connect_timeout", Source::Key("server_connect_timeout", Unit::Seconds)),
    ("server_fast_close", Source::Key("server_fast_close", Unit::Flag)),
    ("server_idle_timeout", Source::Key("server_idle_timeout", Unit::Seconds)),
    ("server_lifetime", Source::Key("server_lifetime", Unit::Seconds)),
    ("server_login_retry", Source::Key("server_login_retry", Unit::Seconds)),
    ("server_tls_ca_file", Source::Key("ssl_root_cert", Unit::Same)),
    ("server_tls_sslmode", Source::Derived(Derived::ServerTlsSslmode)),
    // SHOW STATS_AVERAGES and SHOW STATS' avg_ columns cover a fixed period of 60 s.
    ("stats_period", Source::Fixed("60")),
    ("stats_users", Source::Key("stats_users", Unit::Same)),
    ("tcp_keepalive", Source::Key("tcp_keepalive", Unit::Flag)),
    ("tcp_keepcnt", Source::Key("tcp_keepcnt", Unit::Same)),
    ("tcp_keepidle", Source::Key("tcp_keepidle", Unit::Seconds)),
    ("tcp_keepintvl", Source::Key("tcp_keepintvl", Unit::Seconds)),
    ("tcp_user_timeout", Source::Key("tcp_user_timeout", Unit::Millis)),
    ("track_extra_parameters", Source::Key("track_extra_parameters", Unit::Same)),
    ("transaction_timeout", Source::Key("transaction_timeout", Unit::Seconds)),
    ("unix_socket_dir", Source::Key("unix_socket_dir", Unit::Same)),
    ("verbose", Source::Derived(Derived::Verbose)),
];

/// What a SHOW CONFIG row needs beyond the configuration.
#[derive(Clone, Copy, Debug)]
pub(super) struct InForce<'a> {
    /// The user pgmux logs in as (the admin when `admin_users` is empty).
    pub(super) served_user: &'a str,
    /// The pool limit in force.
    pub(super) pool_limit: usize,
}

/// One SHOW CONFIG row: key, value, default, changeable (live, by SET or RELOAD).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Setting {
    pub(super) key: &'static str,
    pub(super) value: String,
    pub(super) default: String,
    pub(super) changeable: bool,
}

/// Every SHOW CONFIG row: PgBouncer's settings, then pgmux's keys whose name PgBouncer does not use.
pub(super) fn rows(config: &Config, in_force: InForce<'_>) -> Vec<Setting> {
    let entries = config.entries();
    let value_of = |key: &str| entries.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str()).unwrap_or_default();
    let mut rows: Vec<Setting> = PGBOUNCER
        .iter()
        .map(|&(key, source)| {
            let (value, default) = match source {
                Source::Key(pgmux, unit) => (in_unit(value_of(pgmux), unit), in_unit(default_of(pgmux), unit)),
                Source::Fixed(v) => (v.to_owned(), v.to_owned()),
                Source::Derived(d) => (derived(d, config, in_force, value_of), derived_default(d)),
            };
            Setting { key, value, default, changeable: changeable(source) }
        })
        .collect();
    for (key, value) in &entries {
        if PGBOUNCER.iter().all(|(name, _)| name != key) {
            let changeable = !RESTART_ONLY.contains(key);
            rows.push(Setting { key, value: value.clone(), default: default_of(key).to_owned(), changeable });
        }
    }
    rows
}

/// A key's default as the key table writes it.
fn default_of(key: &str) -> &'static str {
    KEYS.iter().find(|k| k.name == key).map_or("", |k| k.default)
}

fn changeable(source: Source) -> bool {
    match source {
        Source::Key(key, _) => !RESTART_ONLY.contains(&key),
        Source::Fixed(_) => false,
        Source::Derived(Derived::ListenAddr | Derived::ListenPort) => !RESTART_ONLY.contains(&"listen"),
        Source::Derived(_) => true,
    }
}

fn derived<'a>(d: Derived, config: &Config, in_force: InForce<'_>, value_of: impl Fn(&str) -> &'a str) -> String {
    match d {
        Derived::ListenAddr => config.listen.ip().to_string(),
        Derived::ListenPort => config.listen.port().to_string(),
        Derived::AdminUsers if config.admin_users.is_empty() => in_force.served_user.to_owned(),
        Derived::AdminUsers => value_of("admin_users").to_owned(),
        Derived::DefaultPoolSize => {
            config.default_pool_size.or(config.pool_max).unwrap_or(in_force.pool_limit).to_string()
        }
        Derived::ClientTlsSslmode => {
            if config.offers_client_tls() {
                config.tls_mode.to_string()
            } else {
                "disable".to_owned()
            }
        }
        Derived::ServerTlsSslmode => config.effective_sslmode().to_string(),
        Derived::Verbose => match value_of("log_level") {
            "debug" => "1",
            "trace" => "2",
            _ => "0",
        }
        .to_owned(),
    }
}

/// What a derived setting is when nothing is set (on a sidecar, as the key table's defaults are).
fn derived_default(d: Derived) -> String {
    let listen = default_of("listen");
    let (addr, port) = listen.rsplit_once(':').unwrap_or((listen, ""));
    match d {
        Derived::ListenAddr => addr.to_owned(),
        Derived::ListenPort => port.to_owned(),
        // Empty: the user pgmux logs in as; unset: the database decides. As the keys say.
        Derived::AdminUsers => default_of("admin_users").to_owned(),
        Derived::DefaultPoolSize => default_of("pool_max").to_owned(),
        Derived::ClientTlsSslmode => "disable".to_owned(),
        Derived::ServerTlsSslmode => "prefer".to_owned(),
        Derived::Verbose => "0".to_owned(),
    }
}

/// What `SET key = value` changes when `key` is a PgBouncer name: pgmux's key, and the value in pgmux's
/// form (a bare number of a time in PgBouncer's unit: `SET tcp_user_timeout = 5000` is 5000 ms, as SHOW
/// CONFIG shows it, not pgmux's bare seconds). Any other key is returned as it is. `Err` says why a
/// PgBouncer setting cannot be SET in pgmux.
pub(super) fn set_target(key: &str, value: &str) -> Result<(String, String), NotSettable> {
    let Some(&(key, source)) = PGBOUNCER.iter().find(|(name, _)| *name == key) else {
        return Ok((key.to_owned(), value.to_owned()));
    };
    let to = |pgmux: &str, value: String| Ok((pgmux.to_owned(), value));
    match source {
        Source::Key(pgmux, Unit::Seconds) => to(pgmux, bare(value, 1000.0).unwrap_or_else(|| value.to_owned())),
        Source::Key(pgmux, Unit::Millis) => to(pgmux, bare(value, 1.0).unwrap_or_else(|| value.to_owned())),
        Source::Key(pgmux, Unit::Same | Unit::Flag) => to(pgmux, value.to_owned()),
        Source::Derived(Derived::AdminUsers) => to("admin_users", value.to_owned()),
        Source::Derived(Derived::DefaultPoolSize) => to("default_pool_size", value.to_owned()),
        Source::Derived(Derived::ServerTlsSslmode) => to("sslmode", value.to_owned()),
        // PgBouncer's 0 is its normal logging: pgmux's info.
        Source::Derived(Derived::Verbose) => match value.trim().parse::<u32>() {
            Ok(0) => to("log_level", "info".to_owned()),
            Ok(1) => to("log_level", "debug".to_owned()),
            Ok(_) => to("log_level", "trace".to_owned()),
            Err(_) => Err(NotSettable::NotACount { key }),
        },
        Source::Derived(Derived::ClientTlsSslmode) => to("tls_mode", value.to_ascii_lowercase()),
        Source::Derived(Derived::ListenAddr | Derived::ListenPort) => Err(NotSettable::PartOfListen { key }),
        Source::Fixed(value) => Err(NotSettable::Fixed { key, value }),
    }
}

/// Why `SET` of a PgBouncer setting changes nothing in pgmux.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum NotSettable {
    /// Part of `listen`, which only a restart changes.
    #[error("{key} is part of listen, which cannot change while pgmux runs; change it and restart")]
    PartOfListen { key: &'static str },
    /// How pgmux always works.
    #[error("{key} is always {value} in pgmux; no setting changes it")]
    Fixed { key: &'static str, value: &'static str },
    /// `verbose` takes a count.
    #[error("{key} is a count: 0 (pgmux's log_level info), 1 (debug) or 2 and more (trace)")]
    NotACount { key: &'static str },
}

impl NotSettable {
    /// The SQLSTATE `SET` answers with: a value that cannot be, or a setting that cannot change.
    pub(super) fn sqlstate(&self) -> &'static str {
        match self {
            NotSettable::NotACount { .. } => pgmux_proto::sqlstate::INVALID_PARAMETER_VALUE,
            _ => pgmux_proto::sqlstate::CANT_CHANGE_RUNTIME_PARAM,
        }
    }
}

/// A bare number (`30`, `2.5`) times `to_ms`, as pgmux's milliseconds (`30000ms`); `None` for anything else.
fn bare(value: &str, to_ms: f64) -> Option<String> {
    let n: f64 = value.trim().parse().ok().filter(|n: &f64| n.is_finite() && *n >= 0.0)?;
    Some(format!("{}ms", (n * to_ms).round() as u64))
}

/// `text` (pgmux's form) in PgBouncer's unit; the text as it is if it is not of the form the unit expects.
pub(super) fn in_unit(text: &str, unit: Unit) -> String {
    let converted = match unit {
        Unit::Same => None,
        Unit::Seconds => millis(text).map(seconds),
        Unit::Millis => millis(text).map(|ms| ms.to_string()),
        Unit::Flag => match text {
            "true" => Some("1".to_owned()),
            "false" => Some("0".to_owned()),
            _ => None,
        },
    };
    converted.unwrap_or_else(|| text.to_owned())
}

/// A duration written as pgmux reads one (`500ms`, `5s`, `2m`, `1h`, bare seconds), in milliseconds.
pub(super) fn millis(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(match unit.trim() {
        "ms" => 1,
        "" | "s" => 1000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        _ => return None,
    })
}

/// Milliseconds as PgBouncer writes seconds: `30`, `2.5`, `0.005`.
pub(super) fn seconds(ms: u64) -> String {
    match ms % 1000 {
        0 => (ms / 1000).to_string(),
        frac => format!("{}.{}", ms / 1000, format!("{frac:03}").trim_end_matches('0')),
    }
}
