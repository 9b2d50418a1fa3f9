//! The reader: the syntax line by line, PgBouncer's own test.ini, defaults and units, includes, and errors
//! that name the file and the line.

use std::time::Duration;

use super::syntax::{Line, lex};
use super::*;
use crate::config::{ClientAuth, PoolMode};

/// PgBouncer 1.25.2's test.ini (ISC; the fixture's header says where it came from).
const TEST_INI: &str = include_str!("pgbouncer-test.ini");
/// The fixture's first line of its own (after the copied header).
const HEADER_LINES: usize = 20;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn parse(text: &str) -> Result<IniConfig, ConfigError> {
    from_text(Profile::Sidecar, Path::new("pgbouncer.ini"), text, std::iter::empty())
}

fn parse_env(text: &str, vars: &[(&str, &str)]) -> Result<IniConfig, ConfigError> {
    from_text(Profile::Sidecar, Path::new("pgbouncer.ini"), text, env(vars))
}

/// The ini error inside `e`.
fn ini(e: ConfigError) -> IniError {
    match e {
        ConfigError::Ini(e) => *e,
        other => panic!("expected an ini error, got {other:?}"),
    }
}

fn settings_of(c: &IniConfig) -> Vec<&str> {
    c.unsupported.iter().map(|u| u.setting.as_str()).collect()
}

const ONE_DB: &str = "[databases]\napp = host=db.example dbname=app\n";

#[test]
fn lines_read_as_pgbouncer_reads_them() {
    assert_eq!(lex("   "), Ok(Line::Blank));
    assert_eq!(lex("; a comment = not a setting"), Ok(Line::Blank));
    assert_eq!(lex("  # another"), Ok(Line::Blank));
    assert_eq!(lex("[ databases ]"), Ok(Line::Section("databases")));
    assert_eq!(lex("%include /etc/pgbouncer/more.ini "), Ok(Line::Include("/etc/pgbouncer/more.ini")));
    // A ; later in the line is part of the value: connection strings hold them.
    assert_eq!(
        lex("p8 = dbname=p0 connect_query='set a=1; set b=2' ; not a comment"),
        Ok(Line::Pair("p8".into(), "dbname=p0 connect_query='set a=1; set b=2' ; not a comment"))
    );
    assert_eq!(lex("p0a= port=6666"), Ok(Line::Pair("p0a".into(), "port=6666")));
    assert_eq!(lex("* = host=foo"), Ok(Line::Pair("*".into(), "host=foo")));
    assert_eq!(lex("pidfile = "), Ok(Line::Pair("pidfile".into(), "")));
    assert_eq!(lex("\"my \"\"odd\"\" db\" = dbname=x"), Ok(Line::Pair("my \"odd\" db".into(), "dbname=x")));
    assert_eq!(lex("[databases"), Err(IniErrorKind::Syntax("a section header must end with ]")));
    assert_eq!(lex("%include"), Err(IniErrorKind::Syntax("%include needs a file name")));
    assert_eq!(lex("listen_port 6432"), Err(IniErrorKind::Syntax("expected key = value")));
    assert_eq!(lex("\"open = x"), Err(IniErrorKind::Syntax("a quoted name is not closed")));
    assert!(matches!(lex("my db = x"), Err(IniErrorKind::Syntax(_))));
    assert!(matches!(lex("= x"), Err(IniErrorKind::Syntax(_))));
}

#[test]
fn pgbouncers_own_test_ini_reads_with_its_routes_users_and_what_pgmux_lacks() {
    // The file asks for statement pooling, which pgmux refuses, at its line.
    let err = ini(parse(TEST_INI).expect_err("statement mode"));
    assert_eq!(err.line, Some(HEADER_LINES + 80));
    assert_eq!(err.key(), Some("pool_mode"));
    assert!(err.to_string().contains("multi-statement transactions"), "{err}");

    // With the environment choosing the pool mode, the rest of the file is read.
    let c = parse_env(TEST_INI, &[("PGMUX_POOL_MODE", "transaction")]).expect("test.ini reads");
    let cfg = &c.config;
    assert_eq!(cfg.listen, "127.0.0.1:6667".parse().unwrap());
    assert_eq!(cfg.unix_socket_dir.as_deref(), Some(Path::new("/tmp")));
    assert_eq!(cfg.client_auth, ClientAuth::Trust);
    assert_eq!(cfg.auth_file.as_deref(), Some(Path::new("userlist.txt")));
    assert_eq!(cfg.pool_mode, PoolMode::Transaction);
    assert_eq!((cfg.max_client_conn, cfg.default_pool_size), (10, Some(5)));
    assert_eq!((cfg.pool_max, cfg.max_connections_percent), (Some(10), 0), "the budget: max_client_conn");
    assert_eq!(cfg.server_check_delay, Duration::from_secs(10));
    assert_eq!(cfg.server_check_query, "", "not in test.ini: PgBouncer's default, an empty query");
    assert_eq!(
        (cfg.track_extra_parameters.as_str(), cfg.ignore_startup_parameters.as_str()),
        ("search_path, intervalstyle", "extra_float_digits")
    );
    assert_eq!((cfg.server_lifetime, cfg.server_idle_timeout), (Duration::from_secs(120), Duration::from_secs(60)));
    assert!(!cfg.tcp_keepalive);

    // Every [databases] entry, in order; the commented ones are not there.
    let names: Vec<&str> = cfg.databases.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names.len(), 45, "{names:?}");
    assert_eq!(&names[..4], ["p0", "p0a", "p0x", "p0y"]);
    assert!(!names.contains(&"p0z") && !names.contains(&"*"));
    let route = |name: &str| cfg.databases.iter().find(|r| r.name == name).expect(name);
    let p0 = route("p0");
    assert_eq!(
        (p0.host.as_deref(), p0.port, p0.dbname.as_deref(), p0.user.as_deref(), p0.pool_max),
        (Some("127.0.0.1"), Some(6666), Some("p0"), Some("bouncer"), Some(2))
    );
    assert_eq!(route("p3").pool_mode, Some(PoolMode::Session));
    assert_eq!((route("p9").server_lifetime, route("p0").server_lifetime), (Some(Duration::from_secs(2)), None));
    assert_eq!(route("p3x").pool_mode, Some(PoolMode::Transaction));
    assert_eq!(route("p8").connect_query.as_deref(), Some("set enable_seqscan=off; set enable_nestloop=off"));
    assert_eq!((route("p0").connect_query.as_deref(), cfg.connect_query.as_str()), (None, ""));
    assert_eq!((route("p0y").min_pool_size, route("p0y").max_db_connections), (Some(5), Some(2)));
    assert_eq!(route("p4").password.as_ref().map(|p| p.expose()), Some("foo"));
    assert_eq!(route("hostlist1").host.as_deref(), Some("127.0.0.1"), "a host list: the first host");
    assert_eq!(
        (route("conn_limit_db").max_db_client_connections, route("p0").max_db_client_connections),
        (Some(2), None)
    );
    let client_caps: Vec<(&str, Option<usize>)> =
        cfg.users.iter().map(|u| (u.name.as_str(), u.max_user_client_connections)).filter(|u| u.1.is_some()).collect();
    assert_eq!(client_caps, [("maxedout2", Some(2)), ("maxedout3", Some(2)), ("pswcheck_not_in_auth_file", Some(2))]);

    let users: Vec<(&str, Option<usize>, Option<usize>)> =
        cfg.users.iter().map(|u| (u.name.as_str(), u.pool_max, u.max_user_connections)).collect();
    assert_eq!(
        users,
        [
            ("maxedout", None, Some(3)),
            ("maxedout2", None, Some(2)),
            ("maxedout3", None, None),
            ("poolsize1", Some(1), None),
            ("respoolsize1", Some(1), None),
            ("pswcheck_not_in_auth_file", None, None),
        ]
    );

    // What pgmux does not have, in the file's order: entries first (their sections come first), then the
    // [pgbouncer] settings.
    let expected = [
        "database hostlist1: host",
        "database hostlist2: host",
        "database hostlist_good_first: load_balance_hosts",
        "database hostlist_good_first: host",
        "database hostlist_bad_first: load_balance_hosts",
        "database hostlist_bad_first: host",
        "database load_balance_hosts_update: load_balance_hosts",
        "database load_balance_hosts_update: host",
        "database varcache_change: client_encoding",
        "logfile",
        "pidfile",
        "tcp_defer_accept",
        "tcp_socket_buffer",
    ];
    assert_eq!(settings_of(&c), expected);
    let logfile = c.unsupported.iter().find(|u| u.setting == "logfile").unwrap();
    assert_eq!(logfile.at, Some(At { file: "pgbouncer.ini".into(), line: HEADER_LINES + 70 }));
    let warning = c.warning().expect("a warning");
    assert!(warning.starts_with("13 PgBouncer setting(s) pgmux does not have"), "{warning}");
    assert!(warning.contains("logfile (pgbouncer.ini:90)"), "{warning}");
    assert!(!warning.contains("foo") && !warning.contains("wrong"), "no value, no password: {warning}");
}

#[test]
fn what_the_file_does_not_set_has_pgbouncers_default() {
    let c = parse(ONE_DB).unwrap();
    let cfg = &c.config;
    assert_eq!(cfg.listen, "127.0.0.1:6432".parse().unwrap());
    assert_eq!(cfg.pool_mode, PoolMode::Session);
    assert_eq!(cfg.default_pool_size, Some(20));
    assert_eq!(cfg.client_auth, ClientAuth::Md5);
    assert_eq!(cfg.max_client_conn, 100);
    // No sizing from the server (no login for its control connection); the budget is max_client_conn.
    assert_eq!((cfg.max_connections_percent, cfg.pool_max), (0, Some(100)));
    assert_eq!(cfg.query_wait_timeout, Duration::from_secs(120));
    assert_eq!(cfg.client_login_timeout, Duration::from_secs(60));
    assert_eq!(cfg.server_connect_timeout, Duration::from_secs(15));
    assert_eq!(cfg.server_idle_timeout, Duration::from_secs(600));
    assert_eq!(cfg.unix_socket_dir.as_deref(), Some(Path::new("/tmp")));
    // PgBouncer without listen_addr listens on its Unix socket only; pgmux says it listens on loopback.
    assert_eq!(settings_of(&c), ["listen_addr"]);
    assert_eq!(c.unsupported[0].at, None);
    // And the route: its server database as given, its host as written.
    assert_eq!(cfg.databases[0].host.as_deref(), Some("db.example"));
}

#[test]
fn the_fallback_entry_and_quoted_names_are_routes_like_any_other() {
    let c = parse(
        "[databases]\n\"my db\" = host=db1 dbname=app\n* = host=db2 port=5433\nlocal =\n\
         [users]\n\"o\"\"brien\" = pool_size=2\n",
    )
    .unwrap();
    let routes: Vec<(&str, Option<&str>, Option<u16>)> =
        c.config.databases.iter().map(|r| (r.name.as_str(), r.host.as_deref(), r.port)).collect();
    // An entry without a host reaches 127.0.0.1 over TCP, and the warning says so.
    assert_eq!(
        routes,
        [("my db", Some("db1"), None), ("*", Some("db2"), Some(5433)), ("local", Some("127.0.0.1"), None)]
    );
    assert_eq!(c.config.users[0].name, "o\"brien");
    assert_eq!(settings_of(&c), ["database local: host", "listen_addr"]);
}

#[test]
fn times_are_pgbouncers_seconds_and_milliseconds() {
    let c = parse(&format!(
        "{ONE_DB}[pgbouncer]\nlisten_addr = *\nlisten_port = 7000\nquery_wait_timeout = 0.5\n\
         server_lifetime = 0\nclient_login_timeout = 0\ntcp_user_timeout = 2500\ntcp_keepidle = 0\n\
         tcp_keepintvl = 7\ntcp_keepalive = 0\nserver_idle_timeout = 0\nstats_period = 60\n"
    ))
    .unwrap();
    let cfg = &c.config;
    assert_eq!(cfg.listen, "0.0.0.0:7000".parse().unwrap());
    assert_eq!(cfg.query_wait_timeout, Duration::from_millis(500));
    // PgBouncer's 0: a connection used once; no limit on a login.
    assert_eq!(cfg.server_lifetime, Duration::from_millis(1));
    assert_eq!(cfg.client_login_timeout, NO_LIMIT);
    assert_eq!(cfg.tcp_user_timeout, Duration::from_millis(2500));
    // 0 leaves a keepalive to the operating system in PgBouncer; pgmux keeps its own.
    assert_eq!(cfg.tcp_keepidle, Duration::from_secs(1));
    assert_eq!(cfg.tcp_keepintvl, Duration::from_secs(7));
    assert!(!cfg.tcp_keepalive);
    assert_eq!(cfg.server_idle_timeout, Duration::ZERO);
    assert!(c.unsupported.is_empty(), "{:?}", c.unsupported);

    let c = parse(&format!("{ONE_DB}[pgbouncer]\nlisten_addr = localhost\nverbose = 2\nstats_period = 15\n")).unwrap();
    assert_eq!(c.config.listen, "127.0.0.1:6432".parse().unwrap());
    assert_eq!(c.config.log_level, "trace");
    assert_eq!(c.unsupported[0].note.as_deref(), Some("pgmux's averages always cover 60 seconds"));
}

#[test]
fn pool_modes_names_and_client_tls_are_pgbouncers() {
    let c = parse(
        "[databases]\nmig = host=db dbname=app pool_mode=session\n[users]\nreporter = pool_mode=session pool_size=3\n\
         [pgbouncer]\npool_mode = Transaction\nauth_type = SCRAM-SHA-256\nserver_tls_sslmode = VERIFY-FULL\n\
         client_tls_sslmode = prefer\nclient_tls_cert_file = /etc/pgmux/cert.pem\nclient_tls_key_file = /etc/pgmux/key.pem\n",
    )
    .unwrap();
    let cfg = &c.config;
    assert_eq!(cfg.pool_mode, PoolMode::Transaction);
    assert_eq!(cfg.databases[0].pool_mode, Some(PoolMode::Session));
    assert_eq!((cfg.users[0].pool_mode, cfg.users[0].pool_max), (Some(PoolMode::Session), Some(3)));
    assert_eq!(cfg.client_auth, ClientAuth::ScramSha256);
    assert_eq!(cfg.effective_sslmode().to_string(), "verify-full");
    assert_eq!(cfg.tls_cert.as_deref(), Some(Path::new("/etc/pgmux/cert.pem")));
    assert!(cfg.offers_client_tls() && !cfg.requires_client_tls());
    // client_tls_sslmode = disable (PgBouncer's default): the certificate is not offered.
    let c =
        parse(&format!("{ONE_DB}[pgbouncer]\nclient_tls_cert_file = /c.pem\nclient_tls_key_file = /k.pem\n")).unwrap();
    assert!(!c.config.offers_client_tls());
    // require, with the CA that verify-full checks client certificates against.
    let c = parse(&format!(
        "{ONE_DB}[pgbouncer]\nclient_tls_cert_file = /c.pem\nclient_tls_key_file = /k.pem\n\
         client_tls_ca_file = /ca.pem\nclient_tls_sslmode = verify-full\n"
    ))
    .unwrap();
    assert!(c.config.requires_client_tls() && c.config.tls_mode.verifies_certificate());
    assert_eq!(c.config.tls_client_ca.as_deref(), Some(Path::new("/ca.pem")));
}

#[test]
fn a_setting_given_twice_takes_the_last_value_and_so_does_an_entry() {
    let c = parse(
        "[databases]\napp = host=a dbname=x reserve_pool_size=1\napp = host=b dbname=y\n[pgbouncer]\n\
         logfile = a.log\nmax_client_conn = 5\nlisten_addr = 127.0.0.1\nlogfile =\nmax_client_conn = 7\n",
    )
    .unwrap();
    assert_eq!(c.config.databases.len(), 1);
    assert_eq!(c.config.databases[0].host.as_deref(), Some("b"));
    assert_eq!(c.config.max_client_conn, 7);
    // Both left-out settings were replaced by values pgmux has nothing to leave out of.
    assert!(c.unsupported.is_empty(), "{:?}", c.unsupported);
}

#[test]
fn the_environment_overrides_the_file() {
    let c = parse_env(
        &format!("{ONE_DB}[pgbouncer]\nmax_client_conn = 7\npool_mode = statement\nlisten_port = 1\n"),
        &[("PGMUX_MAX_CLIENT_CONN", "9"), ("PGMUX_POOL_MODE", "session"), ("PGMUX_LISTEN", "127.0.0.1:7777")],
    )
    .unwrap();
    assert_eq!((c.config.max_client_conn, c.config.pool_max), (9, Some(9)));
    assert_eq!(c.config.pool_mode, PoolMode::Session);
    assert_eq!(c.config.listen, "127.0.0.1:7777".parse().unwrap());
    // PGMUX_DATABASE_HOST names the server for entries without a host.
    let c = parse_env("[databases]\napp = dbname=app\n", &[("PGMUX_DATABASE_HOST", "db.internal")]).unwrap();
    assert_eq!(c.config.databases[0].host, None);
    assert!(c.unsupported.iter().all(|u| u.setting != "database app: host"));
}

/// `(line, key, message)` of the error `text` gives.
fn error_of(text: &str) -> (Option<usize>, Option<String>, String) {
    let e = ini(parse(text).expect_err(text));
    (e.line, e.key().map(str::to_owned), e.to_string())
}

#[test]
fn errors_name_the_file_the_line_and_the_setting() {
    let (line, key, msg) = error_of(&format!("{ONE_DB}[pgbouncer]\n\nlisten_prot = 6432\n"));
    assert_eq!((line, key.as_deref()), (Some(5), Some("listen_prot")));
    assert_eq!(
        msg,
        "pgbouncer.ini:5: unknown setting \"listen_prot\": not a PgBouncer setting \
         (docs/migrating-from-pgbouncer.md lists them)"
    );
    let (line, _, msg) = error_of("[database]\n");
    assert_eq!((line, msg.contains("unknown section [database]")), (Some(1), true));
    let (line, key, _) = error_of("listen_port = 1\n");
    assert_eq!((line, key.as_deref()), (Some(1), Some("listen_port")));
    let (line, key, msg) = error_of(&format!("{ONE_DB}[pgbouncer]\nauth_type = ldap\n"));
    assert_eq!((line, key.as_deref()), (Some(4), Some("auth_type")));
    assert!(msg.contains(
        "auth_type = ldap is not supported: pgmux checks clients with trust, md5, scram-sha-256, plain, hba"
    ));
    let (line, _, msg) = error_of(&format!("{ONE_DB}[pgbouncer]\nlisten_addr = 127.0.0.1, 10.0.0.1\n"));
    assert_eq!(line, Some(4));
    assert!(msg.contains("pgmux listens on one address"), "{msg}");
    let (line, _, msg) = error_of(&format!("{ONE_DB}[pgbouncer]\nquery_wait_timeout = 2m\n"));
    assert_eq!(line, Some(4));
    assert!(msg.ends_with("query_wait_timeout: expected a number of seconds, like 30 or 0.5, got \"2m\""), "{msg}");
    let (line, key, _) = error_of(&format!("{ONE_DB}[pgbouncer]\nclient_tls_sslmode = require\n"));
    assert_eq!((line, key.as_deref()), (Some(4), Some("client_tls_sslmode")));
    let (line, _, msg) = error_of("[databases]\nlocal = host=/var/run/postgresql dbname=app\n");
    assert_eq!(line, Some(2));
    assert!(msg.contains("pgmux reaches servers over TCP"), "{msg}");
    let (line, _, msg) = error_of("[databases]\npgbouncer = host=db\n");
    assert_eq!((line, msg.contains("admin console")), (Some(2), true));
    let (line, key, _) = error_of("[databases]\napp = host=db pool_mode=statement\n");
    assert_eq!((line, key.as_deref()), (Some(2), Some("pool_mode")));
    let (line, key, msg) = error_of("[databases]\napp = host=db colour=blue\n");
    assert_eq!((line, key.as_deref()), (Some(2), Some("colour")));
    assert_eq!(msg, "pgbouncer.ini:2: database app: unknown key \"colour\"");
    let (line, _, msg) = error_of("[databases]\napp = host=db password='open\n");
    assert_eq!(line, Some(2));
    assert!(!msg.contains("open"), "a broken password is not shown: {msg}");
    // A rule across settings points at the line that set the value it names, under PgBouncer's name.
    let (line, key, msg) = error_of(&format!("{ONE_DB}[pgbouncer]\nmax_client_conn = 0\n"));
    assert_eq!((line, key.as_deref()), (Some(4), Some("max_client_conn")));
    assert!(msg.contains("must be at least 1"), "{msg}");
    let (line, _, msg) = error_of("[pgbouncer]\nlisten_port = 6432\n");
    assert_eq!(line, None);
    assert!(msg.contains("no [databases] entry"), "{msg}");
}

#[test]
fn includes_read_in_place_from_the_current_directory_and_stop_at_a_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let write = |name: &str, text: &str| std::fs::write(path(name), text).unwrap();
    // The section goes on into the included file and out of it again.
    write("dbs.ini", "reports = host=db dbname=app\n[pgbouncer]\nmax_client_conn = 11\n");
    write(
        "main.ini",
        &format!("[databases]\napp = host=db dbname=app\n%include {}\nlisten_port = 7001\n", path("dbs.ini").display()),
    );
    let c = read(Profile::Sidecar, &path("main.ini"), std::iter::empty()).unwrap();
    let names: Vec<&str> = c.config.databases.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["app", "reports"]);
    assert_eq!((c.config.max_client_conn, c.config.listen.port()), (11, 7001));
    assert_eq!(c.files, [path("main.ini"), path("dbs.ini")]);

    // A relative name is taken from the current directory (the crate's, under cargo test), not the file's.
    write("rel.ini", "[databases]\n%include dbs.ini\n");
    let e = ini(read(Profile::Sidecar, &path("rel.ini"), std::iter::empty()).unwrap_err());
    assert_eq!(e.line, Some(2));
    assert!(matches!(&e.kind, IniErrorKind::Read { path, .. } if path == Path::new("dbs.ini")), "{e}");

    write("a.ini", &format!("[databases]\n%include {}\n", path("b.ini").display()));
    write("b.ini", &format!("x = host=db\n%include {}\n", path("a.ini").display()));
    let e = ini(read(Profile::Sidecar, &path("a.ini"), std::iter::empty()).unwrap_err());
    assert_eq!((e.file.clone(), e.line), (path("b.ini"), Some(2)));
    assert!(matches!(e.kind, IniErrorKind::IncludeCycle(_)), "{e}");

    // A chain deeper than the limit stops, even without a cycle.
    for n in 0..=MAX_INCLUDE_DEPTH + 1 {
        write(&format!("d{n}.ini"), &format!("%include {}\n", path(&format!("d{}.ini", n + 1)).display()));
    }
    write(&format!("d{}.ini", MAX_INCLUDE_DEPTH + 2), "[databases]\n");
    let e = ini(read(Profile::Sidecar, &path("d0.ini"), std::iter::empty()).unwrap_err());
    assert_eq!(e.kind, IniErrorKind::IncludeTooDeep);
}

#[test]
fn an_ini_is_told_from_toml_by_its_name_or_its_first_section() {
    let p = Path::new;
    assert!(looks_like_ini(p("/etc/pgbouncer/pgbouncer.ini"), ""));
    assert!(looks_like_ini(p("pgbouncer.INI"), ""));
    assert!(!looks_like_ini(p("pgmux.toml"), "[databases]\n"));
    assert!(looks_like_ini(p("pgbouncer.conf"), "; comment\n\n[databases]\napp = host=db\n"));
    assert!(looks_like_ini(p("pgbouncer.conf"), "%include common.ini\n"));
    assert!(!looks_like_ini(p("pgmux.conf"), "# comment\nlisten = \"127.0.0.1:6432\"\n[[databases]]\n"));
    assert!(!looks_like_ini(p("pgmux.conf"), "[[databases]]\nname = \"app\"\n"));
    assert!(!looks_like_ini(p("empty"), ""));
}

#[test]
fn every_setting_is_one_pgmux_has_and_the_migration_guide_covers_it() {
    let guide = include_str!("../../../../../docs/migrating-from-pgbouncer.md");
    for (name, meaning) in SETTINGS {
        assert!(guide.contains(&format!("`{name}`")), "docs/migrating-from-pgbouncer.md does not cover {name}");
        if let Meaning::Key(key, _) = meaning {
            assert!(crate::config::KEYS.iter().any(|k| k.name == *key), "{name} maps to {key}, not a pgmux key");
        }
    }
    for (name, meaning) in PGMUX_ONLY {
        assert!(guide.contains(&format!("`{name}`")), "docs/migrating-from-pgbouncer.md does not cover {name}");
        assert!(matches!(meaning, Meaning::Key(key, _) if crate::config::KEYS.iter().any(|k| k.name == *key)));
        assert!(SETTINGS.iter().all(|(n, _)| n != name), "{name} is PgBouncer's, not pgmux's own");
    }
    for (key, _) in PGBOUNCER_DEFAULTS {
        assert!(crate::config::KEYS.iter().any(|k| k.name == *key), "{key} is not a pgmux key");
    }
    let mut names: Vec<&str> = SETTINGS.iter().map(|(n, _)| *n).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), SETTINGS.len(), "a setting is listed twice");
}

#[test]
fn the_auth_files_users_are_the_users_pgmux_knows() {
    let dir = tempfile::tempdir().unwrap();
    let userlist = dir.path().join("userlist.txt");
    std::fs::write(&userlist, "\"marko\" \"kama\"\n;\"commented\" \"x\"\n\"pgbouncer\" \"fake\"\n").unwrap();
    let c = parse(&format!("{ONE_DB}[pgbouncer]\nauth_type = trust\nauth_file = {}\n", userlist.display())).unwrap();
    let book = crate::config::auth_file::UserBook::load(&c.config).expect("the auth file reads");
    assert!(book.get("pgbouncer").is_some() && book.get("marko").is_some());
    assert!(book.get("commented").is_none());
}

#[test]
fn every_setting_the_reader_rules_on_is_ruled_on() {
    // A setting marked Rule that the builder forgot would panic here rather than in a user's start-up.
    for (name, meaning) in SETTINGS {
        if *meaning == Meaning::Rule {
            // No host names for listen_addr: a test should not wait on DNS.
            let values: &[&str] =
                if *name == "listen_addr" { &["", "*", "127.0.0.1"] } else { &["", "1", "disable", "session"] };
            for value in values {
                let _ = parse(&format!("{ONE_DB}[pgbouncer]\n{name} = {value}\n"));
            }
        }
    }
}

#[test]
fn pgmux_s_own_overload_guard_reads_from_the_file_and_the_environment_wins() {
    let text = format!("{ONE_DB}[pgbouncer]\nmax_active_servers = 8\n");
    assert_eq!(parse(&text).unwrap().config.max_active_servers, 8);
    let c = parse_env(&text, &[("PGMUX_MAX_ACTIVE_SERVERS", "3")]).unwrap();
    assert_eq!(c.config.max_active_servers, 3);
    assert!(!settings_of(&c).contains(&"max_active_servers"), "not listed as left out");
    let err = parse(&format!("{ONE_DB}[pgbouncer]\nmax_active_servers = many\n")).unwrap_err();
    assert!(err.to_string().contains("max_active_servers"), "{err}");
}

#[test]
fn a_reader_route_is_written_in_an_entry_as_in_toml() {
    let c = parse("[databases]\napp_ro = host=app.cluster-abc.eu-west-1.rds.amazonaws.com dbname=app readers=aurora\n")
        .expect("a reader route in an ini");
    let route = &c.config.databases[0];
    assert!(route.discovers_readers());
    assert!(!c.unsupported.iter().any(|u| u.setting.contains("reader")), "{:?}", c.unsupported);
}

#[test]
fn server_check_query_is_read_as_written_and_empty_is_pgbouncer_s_default() {
    let c = parse(&format!("{ONE_DB}[pgbouncer]\nserver_check_query = select 1; -- keep\n")).unwrap();
    assert_eq!(c.config.server_check_query, "select 1; -- keep");
    assert!(!settings_of(&c).contains(&"server_check_query"), "not listed as left out");
    let c = parse(&format!("{ONE_DB}[pgbouncer]\nserver_check_query =\n")).unwrap();
    assert_eq!(c.config.server_check_query, "");
}
