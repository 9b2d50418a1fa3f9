//! Start-up parameters follow the client from server to server, are applied only where they differ, never
//! leak to other clients, and the client sees the real server's ParameterStatus.

use pgmux_testkit::{APP_USER, PgOptions};
use tokio_postgres::NoTls;

use crate::common::{self, scalar};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_sees_the_real_server_version_and_parameters() {
    let fx = common::start("").await;
    let direct_version = fx.pg.psql("show server_version");
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1").port(fx.addr().port()).user(APP_USER.user).password(APP_USER.password);
    cfg.dbname("pgmux");
    let (_client, conn) = cfg.connect(NoTls).await.unwrap();
    assert_eq!(conn.parameter("server_version"), Some(direct_version.as_str()));
    assert_eq!(conn.parameter("client_encoding"), Some("UTF8"));
    assert_eq!(conn.parameter("integer_datetimes"), Some("on"));
    assert_eq!(conn.parameter("DateStyle"), Some("ISO, MDY"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_parameters_follow_each_client_and_never_leak() {
    // One server connection: every client lands on the same one, in turn.
    let fx = common::start("pool_max = 1").await;
    let direct = common::direct(&fx.pg).await;
    direct
        .batch_execute("create schema alpha; create schema beta; grant all on schema alpha, beta to public")
        .await
        .unwrap();
    let a = common::connect(fx.addr(), &APP_USER, |c| {
        c.application_name("client-a").options("-c search_path=alpha -c statement_timeout=1234");
    })
    .await
    .unwrap();
    let b = common::connect(fx.addr(), &APP_USER, |c| {
        c.application_name("client-b").options("-c search_path=beta");
    })
    .await
    .unwrap();
    let plain = common::connect(fx.addr(), &APP_USER, |_| {}).await.unwrap();
    for _ in 0..20 {
        assert_eq!(scalar(&a, "show application_name").await, "client-a");
        assert_eq!(scalar(&a, "show search_path").await, "alpha");
        assert_eq!(scalar(&a, "show statement_timeout").await, "1234ms");
        assert_eq!(scalar(&b, "show application_name").await, "client-b");
        assert_eq!(scalar(&b, "show search_path").await, "beta");
        assert_eq!(scalar(&b, "show statement_timeout").await, "0", "a's setting leaked to b");
        assert_eq!(scalar(&plain, "show application_name").await, "");
        assert_eq!(scalar(&plain, "show search_path").await, "\"$user\", public");
    }
    // The server itself shows the client's application_name while it is linked.
    let seen = scalar(&a, "select application_name from pg_stat_activity where pid = pg_backend_pid()").await;
    assert_eq!(seen, "client-a");
}

/// A client that waited in line gets the connection another client just gave back, with that client's
/// settings: its own are applied before its query runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_waited_in_line_runs_with_its_own_parameters() {
    let fx = common::start("pool_max = 1").await;
    let a = common::connect(fx.addr(), &APP_USER, |c| {
        c.application_name("holder");
    })
    .await
    .unwrap();
    let b = std::sync::Arc::new(
        common::connect(fx.addr(), &APP_USER, |c| {
            c.application_name("waiter");
        })
        .await
        .unwrap(),
    );
    for round in 0..3 {
        a.batch_execute("begin; select 1").await.unwrap();
        let waiting = {
            let b = std::sync::Arc::clone(&b);
            tokio::spawn(async move { scalar(&b, "show application_name").await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(!waiting.is_finished(), "round {round}: the waiter should wait for the one server connection");
        a.batch_execute("commit").await.unwrap();
        assert_eq!(waiting.await.unwrap(), "waiter", "round {round}: the holder's setting reached the waiter");
        assert_eq!(scalar(&a, "show application_name").await, "holder");
    }
}

/// Parameter syncs in a server log with `log_statement = all`: pgmux's own statements that set or reset a
/// parameter (each one Query: a guarded transaction).
fn syncs(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("statement: BEGIN") && (l.contains("pg_catalog.set_config(") || l.contains("RESET ")))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parameters_are_set_only_when_they_differ() {
    let opts = PgOptions { extra_conf: vec![("log_statement".into(), "all".into())], ..PgOptions::default() };
    let fx = common::start_with(opts, "pool_max = 1").await;
    let same = |name: &'static str| {
        let addr = fx.addr();
        async move {
            common::connect(addr, &APP_USER, |c| {
                c.application_name(name);
            })
            .await
            .unwrap()
        }
    };
    let a1 = same("same-app").await;
    let a2 = same("same-app").await;
    for _ in 0..10 {
        scalar(&a1, "select 'a1 marker'").await;
        scalar(&a2, "select 'a2 marker'").await;
    }
    let log = fx.pg.log_tail(2000);
    let sets = syncs(&log);
    assert!(sets <= 1, "clients with equal parameters caused {sets} SETs:\n{log}");

    let b = same("other-app").await;
    for _ in 0..5 {
        scalar(&a1, "select 'a1 again'").await;
        scalar(&b, "select 'b marker'").await;
    }
    let log = fx.pg.log_tail(4000);
    let sets_after = syncs(&log);
    assert!(sets_after >= sets + 9, "alternating clients with different names need SETs:\n{log}");
}

/// Connections opened for `min_pool_size` (before any client) must teach pgmux the server's own values just
/// as connections opened for a client do; without them every link reset every reported parameter, one
/// extra round trip per transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_connections_need_no_parameter_round_trips() {
    let opts = PgOptions { extra_conf: vec![("log_statement".into(), "all".into())], ..PgOptions::default() };
    let fx = common::start_with(opts, "pool_max = 1\nmin_pool_size = 1").await;
    let oracle = common::direct(&fx.pg).await;
    let warm =
        common::eventually(std::time::Duration::from_secs(5), || async { common::pgmux_backends(&oracle).await == 1 })
            .await;
    assert!(warm, "min_pool_size did not open its connection");
    let a = common::connect(fx.addr(), &APP_USER, |_| {}).await.unwrap();
    let b = common::connect(fx.addr(), &APP_USER, |_| {}).await.unwrap();
    for _ in 0..10 {
        scalar(&a, "select 'a marker'").await;
        scalar(&b, "select 'b marker'").await;
    }
    let log = fx.pg.log_tail(2000);
    let syncs = syncs(&log);
    assert!(
        syncs <= 1,
        "20 transactions of two clients with equal parameters on a warm connection cost {syncs} syncs:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parameter_the_server_rejects_fails_the_login_with_the_servers_error() {
    let fx = common::start("").await;
    let err = common::connect(fx.addr(), &APP_USER, |c| {
        c.options("-c DateStyle=nonsense");
    })
    .await
    .unwrap_err();
    assert_eq!(common::code(&err), "22023");
    let msg = common::message(&err);
    assert!(msg.contains("DateStyle"), "{msg}");
    let err = common::connect(fx.addr(), &APP_USER, |c| {
        c.options("-c no_such_parameter=1");
    })
    .await
    .unwrap_err();
    assert_eq!(common::code(&err), "42704");
    assert!(common::message(&err).contains("no_such_parameter"), "{err}");
    // A good client right after is fine.
    let ok = fx.client().await;
    assert_eq!(scalar(&ok, "select 1").await, "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_own_set_of_a_reported_parameter_follows_it_and_does_not_leak() {
    let fx = common::start("pool_max = 1").await;
    let a = fx.client().await;
    let b = fx.client().await;
    a.batch_execute("set application_name = 'renamed'").await.unwrap();
    assert_eq!(scalar(&b, "show application_name").await, "");
    assert_eq!(scalar(&a, "show application_name").await, "renamed");
}
