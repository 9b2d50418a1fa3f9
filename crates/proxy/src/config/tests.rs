//! Configuration parsing: file, environment overlay, defaults and the errors a user sees.

use super::*;

const URL: &str = "postgres://app:s3cret@db.example:5433/orders";

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn defaults_fill_everything_but_the_url() {
    let cfg = Config::from_toml_str(&format!("database_url = {URL:?}")).unwrap();
    assert_eq!(cfg.listen, "127.0.0.1:6432".parse().unwrap());
    assert_eq!(cfg.pool_max, None);
    assert_eq!(cfg.client_auth, ClientAuth::ScramSha256);
    assert_eq!(cfg.query_wait_timeout, Duration::from_secs(30));
    assert_eq!(cfg.database_url.login.host, "db.example");
    assert_eq!(cfg.database_url.login.port, 5433);
    assert_eq!(cfg.database_url.login.dbname, "orders");
    assert_eq!(cfg.database_url.login.password.as_ref().map(Secret::expose), Some("s3cret"));
}

#[test]
fn environment_overrides_the_file() {
    let file = format!("database_url = {URL:?}\npool_max = 4\nquery_wait_timeout = \"2s\"");
    let cfg = Config::from_parts(
        Profile::Sidecar,
        &file,
        env(&[("PGMUX_POOL_MAX", "7"), ("PGMUX_CLIENT_AUTH", "md5"), ("PGMUX_LISTEN", "0.0.0.0:7000")]),
    )
    .unwrap();
    assert_eq!(cfg.pool_max, Some(7));
    assert_eq!(cfg.client_auth, ClientAuth::Md5);
    assert_eq!(cfg.listen.port(), 7000);
    assert_eq!(cfg.query_wait_timeout, Duration::from_secs(2));
}

#[test]
fn a_bad_value_names_its_key_and_source() {
    let err =
        Config::from_parts(Profile::Sidecar, &format!("database_url = {URL:?}"), env(&[("PGMUX_POOL_MAX", "lots")]))
            .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid value for pool_max (environment variable PGMUX_POOL_MAX): expected a whole number, got \"lots\""
    );
    assert_eq!(
        err,
        ConfigError::Invalid {
            key: "pool_max".into(),
            origin: Source::Env("PGMUX_POOL_MAX".into()),
            reason: Reason::Value(ValueError::Expected { expected: "a whole number", got: "lots".into() }),
        }
    );
    assert_eq!(err.key(), Some("pool_max"));
    let err = Config::from_toml_str(&format!("database_url = {URL:?}\nquery_wait_timeout = \"soon\"")).unwrap_err();
    assert!(err.to_string().starts_with("invalid value for query_wait_timeout (config file)"), "{err}");
    let err = Config::from_toml_str(&format!("database_url = {URL:?}\npool_max = 0")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid value for pool_max (config file): must be at least 1 (leave it unset to size from the database)"
    );
    assert!(matches!(err, ConfigError::Invalid { origin: Source::File, reason: Reason::Rule(_), .. }), "{err:?}");
    // pool_max counts the control connection too, so sizing from the database needs two.
    let err = Config::from_toml_str(&format!("database_url = {URL:?}\npool_max = 1")).unwrap_err();
    assert!(err.to_string().contains("control connection") && err.to_string().contains("max_connections_percent = 0"));
    Config::from_toml_str(&format!("database_url = {URL:?}\npool_max = 1\nmax_connections_percent = 0")).unwrap();
    let err = Config::from_toml_str(&format!("database_url = {URL:?}\npool_max = 3\nmin_pool_size = 3")).unwrap_err();
    assert!(err.to_string().starts_with("invalid value for min_pool_size"), "{err}");
}

#[test]
fn unknown_keys_and_missing_url_are_errors() {
    let err = Config::from_toml_str(&format!("database_url = {URL:?}\npool_size = 3")).unwrap_err();
    assert_eq!(err, ConfigError::UnknownKey("pool_size".into()));
    let err = Config::from_toml_str("").unwrap_err();
    assert_eq!(err.to_string(), "database_url is required: set it in the config file or with PGMUX_DATABASE_URL");
    assert!(matches!(Config::from_toml_str("pool_max = ["), Err(ConfigError::Toml(_))));
}

#[test]
fn password_auth_needs_a_password_to_check_against() {
    let err = Config::from_toml_str("database_url = \"postgres://app@localhost/db\"").unwrap_err();
    assert!(err.to_string().contains("client_auth"), "{err}");
    let cfg = Config::from_toml_str("database_url = \"postgres://app@localhost/db\"\nclient_auth = \"trust\"").unwrap();
    assert_eq!(cfg.database_url.login.password, None);
}

#[test]
fn durations_accept_units_and_bare_seconds() {
    for (text, ms) in [("500ms", 500), ("5s", 5000), ("2m", 120_000), ("1h", 3_600_000), ("7", 7000), ("0", 0)] {
        let cfg = Config::from_toml_str(&format!("database_url = {URL:?}\nserver_idle_timeout = {text:?}")).unwrap();
        assert_eq!(cfg.server_idle_timeout, Duration::from_millis(ms), "{text}");
    }
    let cfg = Config::from_toml_str(&format!("database_url = {URL:?}\nserver_lifetime = 90")).unwrap();
    assert_eq!(cfg.server_lifetime, Duration::from_secs(90), "TOML integers are seconds");
    for bad in ["5 parsecs", "-1s", "ms", "1.5s"] {
        assert!(Config::from_toml_str(&format!("database_url = {URL:?}\nserver_lifetime = {bad:?}")).is_err());
    }
}

#[test]
fn urls_parse_like_libpq() {
    let u = DatabaseUrl::parse("postgresql://us%40er:p%3Aw@[::1]/my%20db?sslmode=disable").unwrap();
    assert_eq!((u.login.user.as_str(), u.login.password.as_ref().map(Secret::expose)), ("us@er", Some("p:w")));
    assert_eq!((u.login.host.as_str(), u.login.port, u.login.dbname.as_str()), ("::1", 5432, "my db"));
    assert_eq!(u.sslmode, Some(SslMode::Disable));
    assert_eq!(u.login.address(), "[::1]:5432");
    let u = DatabaseUrl::parse("postgres://bob@localhost").unwrap();
    assert_eq!(u.login.dbname, "bob", "the database defaults to the user name");
    for bad in ["mysql://a@b", "postgres://localhost/db", "postgres://a@:1/db", "postgres://a@h:port/db"] {
        assert!(DatabaseUrl::parse(bad).is_err(), "{bad}");
    }
    let u = DatabaseUrl::parse("postgres://a:pw@h/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem").unwrap();
    assert_eq!(u.sslmode, Some(SslMode::VerifyFull));
    assert_eq!(u.sslrootcert.as_deref(), Some(std::path::Path::new("/etc/ca.pem")));
    let err = DatabaseUrl::parse("postgres://a:pw@h/db?sslmode=maybe").unwrap_err();
    assert!(
        matches!(&err, UrlError::SslMode(UnknownName { setting: "sslmode", got, .. }) if got == "maybe"),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("unknown sslmode \"maybe\": expected disable"), "{err}");
    assert_eq!(DatabaseUrl::parse("postgres://a@h:port/db"), Err(UrlError::BadPort("port".into())));
}

#[test]
fn the_password_never_shows() {
    let cfg = Config::from_toml_str(&format!("database_url = {URL:?}")).unwrap();
    let shown = format!("{cfg} {cfg:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(shown.contains("database_url = postgres://app:***@db.example:5433/orders"), "{shown}");
}

#[test]
fn every_key_has_help_and_an_env_var() {
    assert!(KEYS.len() >= 10);
    for k in KEYS {
        assert!(!k.help.is_empty(), "{} has no help", k.name);
        assert_eq!(k.env_var(), format!("PGMUX_{}", k.name.to_uppercase()));
    }
    let names: Vec<_> = KEYS.iter().map(|k| k.name).collect();
    for required in [
        "listen",
        "database_url",
        "pool_max",
        "client_auth",
        "max_client_conn",
        "query_wait_timeout",
        "server_idle_timeout",
        "server_lifetime",
        "shutdown_timeout",
    ] {
        assert!(names.contains(&required), "{required} missing");
    }
}

#[test]
fn lambda_mode_defaults_and_their_overrides() {
    let lambda = |file: &str, vars: &[(&str, &str)]| Config::from_parts(Profile::Lambda, file, env(vars));
    let cfg = lambda("", &[("PGMUX_DATABASE_URL", "postgres://app@db.example/app")]).unwrap();
    assert_eq!(cfg.listen, "127.0.0.1:5432".parse().unwrap());
    assert_eq!(cfg.client_auth, ClientAuth::Trust);
    assert_eq!(cfg.effective_sslmode(), SslMode::VerifyFull);
    assert_eq!(cfg.log_format, LogFormat::Json);
    // The URL's own sslmode beats the profile's default; the key beats both.
    let cfg = lambda("", &[("PGMUX_DATABASE_URL", "postgres://app@db/app?sslmode=require")]).unwrap();
    assert_eq!(cfg.effective_sslmode(), SslMode::Require);
    let cfg =
        lambda("sslmode = \"disable\"", &[("PGMUX_DATABASE_URL", "postgres://app@db/app?sslmode=require")]).unwrap();
    assert_eq!(cfg.effective_sslmode(), SslMode::Disable);
    // Trusting clients on a non-loopback address is refused.
    let err =
        lambda("", &[("PGMUX_DATABASE_URL", "postgres://app@db/app"), ("PGMUX_LISTEN", "0.0.0.0:5432")]).unwrap_err();
    assert!(err.to_string().contains("loopback"), "{err}");
    // A Unix socket is local: trusted clients may use it beside loopback TCP; unset, there is none.
    assert_eq!(cfg.unix_socket_dir, None);
    let cfg =
        lambda("", &[("PGMUX_DATABASE_URL", "postgres://app@db/app"), ("PGMUX_UNIX_SOCKET_DIR", "/tmp")]).unwrap();
    assert_eq!(cfg.unix_socket_dir.as_deref(), Some(std::path::Path::new("/tmp")));
    assert_eq!(cfg.client_auth, ClientAuth::Trust);
}

#[test]
fn a_secret_can_stand_in_for_the_url() {
    let cfg = Config::from_parts(
        Profile::Sidecar,
        "client_auth = \"trust\"",
        env(&[("PGMUX_SECRET_ARN", "arn:aws:secretsmanager:eu-west-1:123:secret:db"), ("PGMUX_IAM_AUTH", "yes")]),
    )
    .unwrap();
    assert!(cfg.iam_auth);
    assert_eq!(cfg.secret_arn, "arn:aws:secretsmanager:eu-west-1:123:secret:db");
    let err = Config::from_parts(
        Profile::Sidecar,
        "",
        env(&[("PGMUX_SECRET_ARN", "arn:aws:secretsmanager:eu-west-1:123:secret:db")]),
    )
    .unwrap_err();
    assert!(err.to_string().contains("client_password"), "{err}");
    let cfg =
        Config::from_parts(Profile::Sidecar, "client_password = \"s3cret\"", env(&[("PGMUX_SECRET_ARN", "arn:x")]))
            .unwrap();
    assert_eq!(cfg.client_password().map(Secret::expose), Some("s3cret"));
    assert!(!cfg.to_string().contains("s3cret"), "the client password never shows");
    let err = Config::from_toml_str(&format!("database_url = {URL:?}\ntls_cert = \"/c.pem\"")).unwrap_err();
    assert!(err.to_string().contains("tls_key"), "{err}");
    let err = Config::from_toml_str(&format!("database_url = {URL:?}\niam_auth = \"perhaps\"")).unwrap_err();
    assert!(err.to_string().contains("true or false"), "{err}");
}

#[test]
fn console_users_are_lists_and_the_namespace_is_checked() {
    let cfg = Config::from_toml_str(&format!(
        "database_url = {URL:?}\nadmin_users = [\"ops\", \"app\"]\nstats_users = \"grafana, datadog\""
    ))
    .unwrap();
    assert!(cfg.admin_users.contains("ops") && cfg.admin_users.contains("app"));
    assert_eq!(cfg.stats_users.0, vec!["grafana", "datadog"]);
    assert!(Config::from_toml_str(&format!("database_url = {URL:?}")).unwrap().admin_users.is_empty());
    let err = Config::from_toml_str(&format!("database_url = {URL:?}\nadmin_users = [1]")).unwrap_err();
    assert!(err.to_string().contains("admin_users"), "{err}");
    for bad in ["AWS/RDS", "", "has space"] {
        let err = Config::from_toml_str(&format!("database_url = {URL:?}\nmetrics_namespace = {bad:?}")).unwrap_err();
        assert!(err.to_string().contains("metrics_namespace"), "{bad:?}: {err}");
    }
}

#[test]
fn one_value_can_change_and_is_checked_like_the_file() {
    let cfg = Config::from_toml_str(&format!("database_url = {URL:?}\npool_max = 4")).unwrap();
    let changed = cfg.with_value("pool_max", "9").unwrap();
    assert_eq!(changed.pool_max, Some(9));
    assert!(!cfg.login_differs(&changed));
    assert!(cfg.with_value("pool_max", "0").unwrap_err().to_string().contains("pool_max"));
    assert!(matches!(cfg.with_value("nonsense", "1"), Err(ConfigError::UnknownKey(_))));
    let moved = cfg.with_value("database_host", "db2.example.com").unwrap();
    assert!(cfg.login_differs(&moved), "a new host is a new login");
}

#[test]
fn databases_and_users_come_from_the_environment_as_lambda_passes_them() {
    let cfg = Config::from_parts(
        Profile::Sidecar,
        "",
        env(&[
            ("PGMUX_DATABASES", "app = host=db.example dbname=app pool_size=5; reports = host=ro.example dbname=app user=rep password='p w'"),
            ("PGMUX_USERS", "app_rw = password=s3cret max_user_connections=7"),
        ]),
    )
    .unwrap();
    let names: Vec<&str> = cfg.databases.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["app", "reports"]);
    assert_eq!(cfg.databases[0].pool_max, Some(5));
    assert_eq!(cfg.databases[1].user.as_deref(), Some("rep"));
    assert_eq!(cfg.databases[1].password.as_ref().map(Secret::expose), Some("p w"));
    assert_eq!(cfg.users[0].max_user_connections, Some(7));
    // Nothing of a password reaches the printed configuration.
    assert!(!cfg.to_string().contains("s3cret") && !cfg.to_string().contains("p w"), "{cfg}");
    // A key no route has is refused, naming the variable, the entry and the key.
    let err =
        Config::from_parts(Profile::Sidecar, "", env(&[("PGMUX_DATABASES", "app = hots=db.example")])).unwrap_err();
    assert!(err.to_string().contains("hots"), "{err}");
}

#[test]
fn a_reader_route_discovering_its_instances_must_know_where_they_are() {
    let route = |host: &str, extra: &str| {
        format!(
            "database_url = {URL:?}\n[[databases]]\nname = \"app_ro\"\nhost = \"{host}\"\nreaders = \"aurora\"\n{extra}"
        )
    };
    let cluster = "app.cluster-abc123.eu-west-1.rds.amazonaws.com";
    let cfg = Config::from_toml_str(&route(cluster, "")).unwrap();
    assert!(cfg.databases[0].discovers_readers());
    // An address names no domain: the route must say where instances are.
    let err = Config::from_toml_str(&route("10.0.0.5", "")).unwrap_err();
    assert_eq!(err.key(), Some("instance_domain"));
    assert!(err.to_string().contains("database app_ro"), "{err}");
    let cfg = Config::from_toml_str(&route("10.0.0.5", "instance_domain = \"db.internal\"")).unwrap();
    assert_eq!(cfg.databases[0].instance_domain.as_deref(), Some("db.internal"));
    // A host list stays a host list, even one naming a host called aurora with a port.
    let cfg = Config::from_toml_str(&format!(
        "database_url = {URL:?}\n[[databases]]\nname = \"r\"\nreaders = \"aurora:5432\""
    ))
    .unwrap();
    assert!(!cfg.databases[0].discovers_readers());
}

#[test]
fn connect_query_is_global_in_toml_and_the_environment_and_a_database_may_have_its_own() {
    let file = format!(
        "database_url = {URL:?}\nconnect_query = \"SET enable_seqscan = off\"\n\
         [[databases]]\nname = \"app\"\nconnect_query = \"SET work_mem = '64MB'; SET jit = off\""
    );
    let cfg = Config::from_toml_str(&file).unwrap();
    assert_eq!(cfg.connect_query, "SET enable_seqscan = off");
    assert_eq!(cfg.databases[0].connect_query.as_deref(), Some("SET work_mem = '64MB'; SET jit = off"));
    let cfg = Config::from_parts(
        Profile::Sidecar,
        &file,
        env(&[
            ("PGMUX_CONNECT_QUERY", "SET jit = off"),
            ("PGMUX_DATABASES", "app = dbname=app connect_query='SET a.b = 1'"),
        ]),
    )
    .unwrap();
    assert_eq!(
        (cfg.connect_query.as_str(), cfg.databases[0].connect_query.as_deref()),
        ("SET jit = off", Some("SET a.b = 1"))
    );
    assert_eq!(Config::from_toml_str(&format!("database_url = {URL:?}")).unwrap().connect_query, "", "none by default");
}
