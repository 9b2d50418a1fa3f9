//! SHOW CONFIG's rows against PgBouncer 1.25's settings (names, units, order) and pgmux's keys: each
//! PgBouncer row reads a key that exists, says what PgBouncer's row would mean, and every pgmux key is
//! still there once.

use crate::config::{Config, KEYS};
use crate::ops::console::settings::{Derived, Unit};
use crate::ops::console::settings::{
    InForce, NotSettable, PGBOUNCER, Setting, Source, in_unit, millis, rows, seconds, set_target,
};

/// PgBouncer 1.25's `[pgbouncer]` settings, as its SHOW CONFIG lists them (`bouncer_params` in src/main.c).
const PGBOUNCER_1_25: &[&str] = &[
    "admin_users",
    "application_name_add_host",
    "auth_dbname",
    "auth_file",
    "auth_hba_file",
    "auth_ident_file",
    "auth_ldap_options",
    "auth_query",
    "auth_type",
    "auth_user",
    "autodb_idle_timeout",
    "cancel_wait_timeout",
    "client_idle_timeout",
    "client_login_timeout",
    "client_tls13_ciphers",
    "client_tls_ca_file",
    "client_tls_cert_file",
    "client_tls_ciphers",
    "client_tls_dheparams",
    "client_tls_ecdhcurve",
    "client_tls_key_file",
    "client_tls_protocols",
    "client_tls_sslmode",
    "conffile",
    "default_pool_size",
    "disable_pqexec",
    "dns_max_ttl",
    "dns_nxdomain_ttl",
    "dns_zone_check_period",
    "idle_transaction_timeout",
    "ignore_startup_parameters",
    "job_name",
    "listen_addr",
    "listen_backlog",
    "listen_port",
    "log_connections",
    "log_disconnections",
    "log_pooler_errors",
    "log_stats",
    "logfile",
    "max_client_conn",
    "max_db_client_connections",
    "max_db_connections",
    "max_packet_size",
    "max_prepared_statements",
    "max_user_client_connections",
    "max_user_connections",
    "min_pool_size",
    "peer_id",
    "pidfile",
    "pkt_buf",
    "pool_mode",
    "query_timeout",
    "query_wait_notify",
    "query_wait_timeout",
    "reserve_pool_size",
    "reserve_pool_timeout",
    "resolv_conf",
    "sbuf_loopcnt",
    "scram_iterations",
    "server_check_delay",
    "server_check_query",
    "server_connect_timeout",
    "server_fast_close",
    "server_idle_timeout",
    "server_lifetime",
    "server_login_retry",
    "server_reset_query",
    "server_reset_query_always",
    "server_round_robin",
    "server_tls13_ciphers",
    "server_tls_ca_file",
    "server_tls_cert_file",
    "server_tls_ciphers",
    "server_tls_key_file",
    "server_tls_protocols",
    "server_tls_sslmode",
    "so_reuseport",
    "stats_period",
    "stats_users",
    "suspend_timeout",
    "syslog",
    "syslog_facility",
    "syslog_ident",
    "tcp_defer_accept",
    "tcp_keepalive",
    "tcp_keepcnt",
    "tcp_keepidle",
    "tcp_keepintvl",
    "tcp_socket_buffer",
    "tcp_user_timeout",
    "track_extra_parameters",
    "transaction_timeout",
    "unix_socket_dir",
    "unix_socket_group",
    "unix_socket_mode",
    "user",
    "verbose",
];

const URL: &str = "postgres://app:secret@db.example.com:5432/appdb";

fn config(extra: &str) -> Config {
    Config::from_toml_str(&format!("database_url = {URL:?}\n{extra}")).unwrap()
}

fn shown(config: &Config) -> Vec<Setting> {
    rows(config, InForce { served_user: "app", pool_limit: 7 })
}

fn value<'a>(rows: &'a [Setting], key: &str) -> &'a Setting {
    rows.iter().find(|r| r.key == key).unwrap_or_else(|| panic!("no row {key}"))
}

#[test]
fn every_row_is_a_pgbouncer_setting_in_pgbouncer_s_order_reading_a_key_that_exists() {
    let names: Vec<&str> = PGBOUNCER.iter().map(|(n, _)| *n).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(names, sorted, "alphabetical and once each, as PgBouncer lists them");
    for (name, source) in PGBOUNCER {
        assert!(PGBOUNCER_1_25.contains(name), "{name} is not a PgBouncer 1.25 setting");
        if let Source::Key(key, _) = source {
            assert!(KEYS.iter().any(|k| k.name == *key), "{name} reads pgmux key {key}, which no longer exists");
        }
    }
}

#[test]
fn a_fixed_or_worked_out_row_gives_way_to_a_pgmux_key_of_its_name() {
    // pool_mode and max_user_connections are fixed today (pgmux pools transactions and has no per-user
    // limit); the day pgmux has a key of that name, the row must read it instead of claiming the old fact.
    for (name, source) in PGBOUNCER {
        let own_key = KEYS.iter().any(|k| k.name == *name);
        match source {
            // Rows worked out from the key of their name first.
            Source::Key(..) | Source::Derived(Derived::AdminUsers | Derived::DefaultPoolSize) => {}
            Source::Fixed(_) | Source::Derived(_) => {
                assert!(!own_key, "pgmux now has a key {name}: make its SHOW CONFIG row Source::Key({name:?}, ..)")
            }
        }
    }
}

#[test]
fn the_settings_the_issue_names_are_there() {
    let rows = shown(&config(""));
    for key in ["pool_mode", "default_pool_size", "listen_port", "listen_addr", "auth_type", "stats_period"] {
        value(&rows, key);
    }
}

#[test]
fn defaults_in_pgbouncer_s_units() {
    let rows = shown(&config(""));
    let want = [
        ("admin_users", "app", ""),
        ("auth_type", "scram-sha-256", "scram-sha-256"),
        ("client_idle_timeout", "0", "0"),
        ("client_login_timeout", "15", "15"),
        ("client_tls_sslmode", "disable", "disable"),
        ("default_pool_size", "7", ""),
        ("listen_addr", "127.0.0.1", "127.0.0.1"),
        ("listen_port", "6432", "6432"),
        ("max_client_conn", "5000", "5000"),
        ("max_user_connections", "0", "0"),
        ("pool_mode", "transaction", "transaction"),
        ("query_wait_timeout", "30", "30"),
        ("server_check_delay", "30", "30"),
        ("server_connect_timeout", "5", "5"),
        ("server_idle_timeout", "60", "60"),
        ("server_lifetime", "3600", "3600"),
        ("server_tls_sslmode", "prefer", "prefer"),
        ("stats_period", "60", "60"),
        ("tcp_keepalive", "1", "1"),
        ("tcp_keepidle", "1", "1"),
        ("tcp_user_timeout", "5000", "5000"),
        ("unix_socket_dir", "", ""),
    ];
    for (key, v, default) in want {
        let row = value(&rows, key);
        assert_eq!((row.value.as_str(), row.default.as_str()), (v, default), "{key}");
    }
}

#[test]
fn set_values_show_in_pgbouncer_s_units() {
    let c = config(
        "listen = \"0.0.0.0:7000\"\npool_max = 12\nadmin_users = \"ops, dba\"\nquery_wait_timeout = \"2m\"\n\
         server_check_delay = \"2500ms\"\ntcp_user_timeout = \"1s\"\ntcp_keepalive = false\nclient_auth = \"md5\"\n\
         pool_grow_after = \"5ms\"\nsslmode = \"require\"",
    );
    let rows = shown(&c);
    for (key, want) in [
        ("listen_addr", "0.0.0.0"),
        ("listen_port", "7000"),
        ("default_pool_size", "12"),
        ("admin_users", "ops,dba"),
        ("query_wait_timeout", "120"),
        ("server_check_delay", "2.5"),
        ("tcp_user_timeout", "1000"),
        ("tcp_keepalive", "0"),
        ("auth_type", "md5"),
        ("server_tls_sslmode", "require"),
        // pgmux's own keys keep pgmux's form.
        ("pool_grow_after", "5ms"),
        ("listen", "0.0.0.0:7000"),
        ("pool_max", "12"),
    ] {
        assert_eq!(value(&rows, key).value, want, "{key}");
    }
}

#[test]
fn each_key_once_pgbouncer_s_first_then_every_pgmux_key() {
    let rows = shown(&config(""));
    let mut keys: Vec<&str> = rows.iter().map(|r| r.key).collect();
    assert_eq!(&keys[..PGBOUNCER.len()], PGBOUNCER.iter().map(|(n, _)| *n).collect::<Vec<_>>());
    for k in KEYS {
        assert!(keys.contains(&k.name), "pgmux key {} is missing", k.name);
    }
    keys.sort_unstable();
    let before = keys.len();
    keys.dedup();
    assert_eq!(keys.len(), before, "a name shared by PgBouncer and pgmux is listed once");
}

#[test]
fn changeable_says_whether_set_or_reload_changes_it() {
    let rows = shown(&config(""));
    for (key, want) in [
        ("listen_addr", false),
        ("listen_port", false),
        ("pool_mode", true),
        ("stats_period", false),
        ("unix_socket_dir", false),
        ("listen", false),
        ("default_pool_size", true),
        ("query_wait_timeout", true),
        ("admin_users", true),
        ("pool_max", true),
    ] {
        assert_eq!(value(&rows, key).changeable, want, "{key}");
    }
}

#[test]
fn secrets_stay_hidden_and_the_exporter_s_rows_are_numbers() {
    let rows = shown(&config("client_password = \"hunter2\""));
    assert!(rows.iter().all(|r| !r.value.contains("secret") && !r.value.contains("hunter2")), "{rows:?}");
    for key in ["max_client_conn", "max_user_connections"] {
        value(&rows, key).value.parse::<f64>().unwrap_or_else(|_| panic!("{key} must parse as a number"));
    }
}

#[test]
fn admin_users_is_who_may_administer_now() {
    assert_eq!(value(&shown(&config("")), "admin_users").value, "app", "empty: the user pgmux logs in as");
    assert_eq!(value(&shown(&config("admin_users = \"ops\"")), "admin_users").value, "ops");
}

#[test]
fn client_tls_sslmode_is_tls_mode_while_tls_is_offered() {
    assert_eq!(value(&shown(&config("")), "client_tls_sslmode").value, "disable", "no certificate");
    let with_tls = config("tls_cert = \"/etc/pgmux/cert.pem\"\ntls_key = \"/etc/pgmux/key.pem\"");
    let rows = shown(&with_tls);
    assert_eq!(value(&rows, "client_tls_sslmode").value, "prefer", "TLS for the clients that ask");
    assert_eq!(value(&rows, "client_tls_cert_file").value, "/etc/pgmux/cert.pem");
    let required = config("tls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\ntls_mode = \"require\"");
    assert_eq!(value(&shown(&required), "client_tls_sslmode").value, "require");
    let off = config("tls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\ntls_mode = \"disable\"");
    assert_eq!(value(&shown(&off), "client_tls_sslmode").value, "disable");
}

#[test]
fn units() {
    assert_eq!(millis("500ms"), Some(500));
    assert_eq!(millis("5s"), Some(5000));
    assert_eq!(millis("2m"), Some(120_000));
    assert_eq!(millis("1h"), Some(3_600_000));
    assert_eq!(millis("15"), Some(15_000));
    assert_eq!(millis("soon"), None);
    assert_eq!(seconds(0), "0");
    assert_eq!(seconds(5), "0.005");
    assert_eq!(seconds(2500), "2.5");
    assert_eq!(seconds(120_000), "120");
    assert_eq!(in_unit("0s", Unit::Seconds), "0");
    assert_eq!(in_unit("250ms", Unit::Millis), "250");
    assert_eq!(in_unit("true", Unit::Flag), "1");
    assert_eq!(in_unit("odd", Unit::Seconds), "odd", "an unexpected form is shown as it is, never an error");
}

#[test]
fn set_by_pgbouncer_s_name_and_unit_changes_pgmux_s_key() {
    let target = set_target;
    let ok = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    // A bare time is in PgBouncer's unit, and comes back the same in SHOW CONFIG.
    assert_eq!(target("tcp_user_timeout", "2500"), Ok(ok("tcp_user_timeout", "2500ms")));
    assert_eq!(target("query_wait_timeout", "7"), Ok(ok("query_wait_timeout", "7000ms")));
    assert_eq!(target("server_check_delay", "2.5"), Ok(ok("server_check_delay", "2500ms")));
    assert_eq!(in_unit(&target("server_check_delay", "2.5").unwrap().1, Unit::Seconds), "2.5");
    // pgmux's own form still works under either name.
    assert_eq!(target("query_wait_timeout", "30s"), Ok(ok("query_wait_timeout", "30s")));
    assert_eq!(target("pool_grow_after", "5"), Ok(ok("pool_grow_after", "5")), "not a PgBouncer name: as it is");
    // PgBouncer's names for pgmux's keys.
    assert_eq!(target("default_pool_size", "12"), Ok(ok("default_pool_size", "12")));
    assert_eq!(target("pool_mode", "session"), Ok(ok("pool_mode", "session")));
    assert_eq!(target("auth_type", "md5"), Ok(ok("client_auth", "md5")));
    assert_eq!(target("server_tls_sslmode", "require"), Ok(ok("sslmode", "require")));
    assert_eq!(target("tcp_keepalive", "0"), Ok(ok("tcp_keepalive", "0")));
    assert_eq!(target("client_tls_sslmode", "REQUIRE"), Ok(ok("tls_mode", "require")));
    assert_eq!(target("client_tls_ca_file", "/ca.pem"), Ok(ok("tls_client_ca", "/ca.pem")));
    // What no setting changes says so.
    for key in ["stats_period", "listen_port"] {
        let why = target(key, "1").expect_err(key);
        assert!(why.to_string().contains(key), "{why}");
    }
    assert_eq!(target("listen_port", "1"), Err(NotSettable::PartOfListen { key: "listen_port" }));
    assert!(matches!(target("stats_period", "1"), Err(NotSettable::Fixed { key: "stats_period", .. })));
}

#[test]
fn verbose_is_pgbouncer_s_count_over_log_level() {
    let ok = |v: &str| Ok(("log_level".to_owned(), v.to_owned()));
    assert_eq!(set_target("verbose", "0"), ok("info"));
    assert_eq!(set_target("verbose", "1"), ok("debug"));
    assert_eq!(set_target("verbose", "3"), ok("trace"));
    let why = set_target("verbose", "loud").expect_err("not a count");
    assert_eq!((why.sqlstate(), why.to_string().contains("count")), ("22023", true), "{why}");
    for (level, count) in [("info", "0"), ("warn", "0"), ("debug", "1"), ("trace", "2")] {
        let rows = shown(&config(&format!("log_level = \"{level}\"")));
        assert_eq!(value(&rows, "verbose").value, count, "log_level {level}");
    }
    assert_eq!(value(&shown(&config("")), "verbose").default, "0");
}
