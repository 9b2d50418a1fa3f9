//! Route and user entries: parsing, keys pgmux lacks, bad values.

use super::*;

#[test]
fn connection_strings_read_as_pgbouncer_writes_them() {
    let e = Entry::parse_connstr("p1", "host=127.0.0.1 port=6666 dbname=p1 user=bouncer pool_size=2").unwrap();
    assert_eq!(e.pairs.len(), 5);
    let (r, unsupported) = route_from(&e).unwrap();
    assert_eq!(
        (r.host.as_deref(), r.port, r.dbname.as_deref(), r.user.as_deref(), r.pool_max),
        (Some("127.0.0.1"), Some(6666), Some("p1"), Some("bouncer"), Some(2))
    );
    assert!(unsupported.is_empty());
    let quoted = Entry::parse_connstr("q", "password='it\\'s a secret' dbname = q").unwrap();
    assert_eq!(quoted.pairs, vec![("password".into(), "it's a secret".into()), ("dbname".into(), "q".into())]);
    assert!(Entry::parse_connstr("bad", "host").is_err());
    assert!(Entry::parse_connstr("bad", "password='open").is_err());
}

#[test]
fn keys_pgmux_lacks_are_returned_and_unknown_ones_refused() {
    let e = Entry::parse_connstr("p", "dbname=p reserve_pool_size=3 load_balance_hosts=disable").unwrap();
    let (route, unsupported) = route_from(&e).unwrap();
    assert_eq!((route.reserve_pool_size, unsupported), (Some(3), vec!["load_balance_hosts".to_owned()]));
    let e = Entry::parse_connstr("p", "dbname=p colour=blue").unwrap();
    let err = route_from(&e).unwrap_err();
    assert_eq!((err.kind, err.key.as_deref()), (EntryErrorKind::UnknownKey, Some("colour")));
    assert_eq!(err.to_string(), "database p: unknown key \"colour\"");
    let e = Entry::parse_connstr("u", "pool_mode=statement").unwrap();
    let err = user_from(&e).unwrap_err();
    assert_eq!(err.kind, EntryErrorKind::Invalid);
    assert!(err.to_string().contains("statement is not supported"), "{err}");
}

#[test]
fn a_database_s_connect_query_is_read_whole_from_a_quoted_value() {
    let e = Entry::parse_connstr("p8", "dbname=p0 connect_query='set enable_seqscan=off; set enable_nestloop=off'")
        .unwrap();
    let (route, unsupported) = route_from(&e).unwrap();
    assert_eq!(route.connect_query.as_deref(), Some("set enable_seqscan=off; set enable_nestloop=off"));
    assert!(unsupported.is_empty(), "{unsupported:?}");
    // In the environment, the `;` inside the quotes does not end the entry.
    let list = Entry::parse_list("PGMUX_DATABASES", "a = dbname=a connect_query='set x.y=1; set x.z=2'; b = dbname=b")
        .unwrap();
    let routes: Vec<RouteSpec> = list.iter().map(|e| route_from(e).unwrap().0).collect();
    assert_eq!(
        (routes[0].connect_query.as_deref(), routes[1].connect_query.as_deref()),
        (Some("set x.y=1; set x.z=2"), None)
    );
    let (empty, _) = route_from(&Entry::parse_connstr("c", "connect_query=''").unwrap()).unwrap();
    assert_eq!(empty.connect_query, None, "empty: the global one");
}

#[test]
fn environment_lists_split_on_semicolons_and_lines_outside_quotes() {
    let list = Entry::parse_list(
        "PGMUX_DATABASES",
        "app = host=db dbname=app user=app_rw password='a;b'\nreport=dbname=app pool_mode=session; ",
    )
    .unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].pairs[3], ("password".into(), "a;b".into()));
    let (report, _) = route_from(&list[1]).unwrap();
    assert_eq!(report.pool_mode, Some(PoolMode::Session));
    assert!(Entry::parse_list("PGMUX_DATABASES", "no equals sign").is_err());
}

#[test]
fn a_secret_or_iam_chooses_how_the_server_login_is_made() {
    let e = Entry::parse_connstr("r", "secret_arn=arn:aws:secretsmanager:eu-west-1:1:secret:r").unwrap();
    assert_eq!(route_from(&e).unwrap().0.auth, Some(ServerAuth::Secret));
    let e = Entry::parse_connstr("u", "iam=true pool_size=2 max_user_connections=5").unwrap();
    let (u, _) = user_from(&e).unwrap();
    assert_eq!((u.auth, u.pool_max, u.max_user_connections), (Some(ServerAuth::Iam), Some(2), Some(5)));
}

#[test]
fn a_bad_value_says_what_is_wrong_in_a_type() {
    let mut route = RouteSpec::default();
    assert_eq!(
        route.apply("port", "x"),
        Err(KeyError::Invalid(ValueError::NotANumber { key: "port".into(), got: "x".into() }))
    );
    assert!(matches!(route.apply("pool_mode", "statement"), Err(KeyError::Invalid(ValueError::NotSupported(_)))));
    let Err(KeyError::Invalid(ValueError::Unknown(unknown))) = route.apply("auth", "magic") else {
        panic!("an unknown auth")
    };
    assert_eq!(unknown.setting, "auth");
    assert_eq!(unknown.to_string(), "unknown auth \"magic\": expected password, iam, secret or passthrough");
    assert_eq!(
        UserSpec::default().apply("iam", "maybe"),
        Err(KeyError::Invalid(ValueError::Expected { expected: "true or false", got: "maybe".into() }))
    );
}

#[test]
fn a_user_s_own_timeouts_are_read_from_the_environment_and_toml_and_query_wait_timeout_is_not() {
    use crate::config::user_timeouts::TimeoutKey;
    use std::time::Duration;
    let users = users_from_env("app = query_timeout=2 transaction_timeout=500ms client_idle_timeout=0").unwrap();
    let own = users[0].timeouts;
    assert_eq!(own.get(TimeoutKey::Query), Some(Duration::from_secs(2)));
    assert_eq!(own.get(TimeoutKey::Transaction), Some(Duration::from_millis(500)));
    assert_eq!(own.get(TimeoutKey::ClientIdle), Some(Duration::ZERO), "0: off for this user");
    assert_eq!(own.get(TimeoutKey::IdleTransaction), None, "not set: the global one");
    let toml: toml::Value = toml::from_str("[[users]]\nname = \"app\"\nidle_transaction_timeout = \"3s\"\n").unwrap();
    let users = users_from_toml(&toml["users"]).unwrap();
    assert_eq!(users[0].timeouts.get(TimeoutKey::IdleTransaction), Some(Duration::from_secs(3)));
    let err = users_from_env("app = query_timeout=soon").unwrap_err();
    assert_eq!((err.kind, err.key.as_deref()), (EntryErrorKind::Invalid, Some("query_timeout")));
    let err = users_from_env("app = query_wait_timeout=5").unwrap_err();
    assert_eq!((err.kind, err.key.as_deref()), (EntryErrorKind::UnknownKey, Some("query_wait_timeout")));
}
