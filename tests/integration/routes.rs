//! Many databases and users behind one pgmux: routes by the name a client gives, pools keyed by route and
//! server user, each user's own password (plaintext, md5 hash, SCRAM verifier), PostgreSQL's error codes for
//! an unknown database, an unknown user and a wrong password without a server connection, one budget that
//! an idle pool gives way to, and session mode.

use std::time::Duration;

use pgmux_testkit::{APP_USER, MD5_USER, Role, SUPERUSER};
use tokio_postgres::Client;

use crate::common::{self, Fixture, code, scalar};

/// Two routes to the test database: `app` logs in as the client, `reports` always as the md5 user.
pub(crate) const ROUTES: &str = r#"
[[databases]]
name = "app"
dbname = "pgmux"
[[databases]]
name = "reports"
dbname = "pgmux"
user = "pgmux_md5"
password = "md5-pw-2"
[[users]]
name = "pgmux_app"
password = "app-pw-1"
[[users]]
name = "pgmux_md5"
password = "md5-pw-2"
"#;

async fn connect_to(fx: &Fixture, role: &Role, database: &str) -> Result<Client, tokio_postgres::Error> {
    common::connect(fx.addr(), role, |c| {
        c.dbname(database);
    })
    .await
}

/// Server connections of every user, as the server sees them (pgmux's liveness probes aside).
async fn backends(oracle: &Client) -> i64 {
    let row = oracle
        .query_one(
            "select count(*) from pg_stat_activity where backend_type = 'client backend' \
             and usename in ('pgmux_app', 'pgmux_md5') and application_name is distinct from 'pgmux-probe'",
            &[],
        )
        .await
        .expect("count backends");
    row.get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_route_logs_in_as_its_user_and_each_user_with_its_own_password() {
    let fx = common::start(&format!("pool_max = 4\n{ROUTES}")).await;
    let app = connect_to(&fx, &APP_USER, "app").await.expect("pgmux_app into app");
    assert_eq!(scalar(&app, "select current_user").await, "pgmux_app");
    let reports = connect_to(&fx, &APP_USER, "reports").await.expect("pgmux_app into reports");
    assert_eq!(scalar(&reports, "select current_user").await, "pgmux_md5", "reports forces its user");
    // The md5 user logs in with its own password, and into `app` as itself.
    let md5 = connect_to(&fx, &MD5_USER, "app").await.expect("pgmux_md5 into app");
    assert_eq!(scalar(&md5, "select current_user").await, "pgmux_md5");
    // Neither user gets in with the other's password.
    let swapped = Role { user: MD5_USER.user, password: APP_USER.password };
    let err = connect_to(&fx, &swapped, "app").await.expect_err("the other user's password");
    assert_eq!(code(&err), "28P01");
    // Three pools: (app, pgmux_app), (reports, pgmux_md5), (app, pgmux_md5).
    let oracle = common::direct(&fx.pg).await;
    let by_user: Vec<(String, i64)> = oracle
        .query(
            "select usename::text, count(*) from pg_stat_activity where backend_type = 'client backend' \
             and usename in ('pgmux_app', 'pgmux_md5') and application_name is distinct from 'pgmux-probe' \
             group by 1 order by 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(by_user, [("pgmux_app".to_owned(), 1), ("pgmux_md5".to_owned(), 2)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_database_user_or_password_gets_postgresql_codes_and_no_server_connection() {
    let fx = common::start(&format!("pool_max = 4\n{ROUTES}")).await;
    let oracle = common::direct(&fx.pg).await;
    let err = connect_to(&fx, &APP_USER, "nope").await.expect_err("no such route");
    assert_eq!(code(&err), "3D000");
    let db = err.as_db_error().expect("a database error");
    assert_eq!(db.message(), "no such database: nope");
    assert_eq!(db.hint(), Some("this pgmux serves the databases \"app\" and \"reports\""));
    let stranger = Role { user: "nobody_here", password: "whatever" };
    let err = connect_to(&fx, &stranger, "app").await.expect_err("an unknown user");
    assert_eq!(code(&err), "28P01", "as PostgreSQL does, an unknown user fails like a wrong password");
    let wrong = Role { user: APP_USER.user, password: "not-it" };
    let err = connect_to(&fx, &wrong, "reports").await.expect_err("a wrong password");
    assert_eq!(code(&err), "28P01");
    assert_eq!(backends(&oracle).await, 0, "no refused login opened a server connection");

    // Under trust there is no exchange to hide behind: an unknown user is told so (28000).
    let fx = common::start(&format!("pool_max = 4\nclient_auth = \"trust\"\n{ROUTES}")).await;
    let err = connect_to(&fx, &stranger, "app").await.expect_err("an unknown user under trust");
    assert_eq!(code(&err), "28000");
    assert!(common::message(&err).contains("\"trust\" authentication failed"), "{}", common::message(&err));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_from_an_auth_file_log_in_with_md5_hashes_and_scram_verifiers() {
    // Start once to read the verifier PostgreSQL stores for pgmux_app.
    let fx = common::start("").await;
    let oracle = common::direct(&fx.pg).await;
    let verifier: String = oracle
        .query_one("select rolpassword from pg_authid where rolname = $1", &[&APP_USER.user])
        .await
        .unwrap()
        .get(0);
    assert!(verifier.starts_with("SCRAM-SHA-256$"), "the template stores SCRAM: {verifier}");
    let md5_hash = pgmux_proto::auth::md5::stored_hash(MD5_USER.user, MD5_USER.password);
    let dir = tempfile::tempdir().unwrap();
    let userlist = dir.path().join("userlist.txt");
    std::fs::write(&userlist, format!("\"pgmux_app\" \"{verifier}\"\n\"pgmux_md5\" \"{md5_hash}\"\n")).unwrap();
    drop((oracle, fx));

    // pgmux_app is checked against its verifier; its server login goes as pgmux_md5, with the md5 hash.
    let extra = format!(
        "pool_max = 4\nauth_file = {:?}\n[[databases]]\nname = \"app\"\ndbname = \"pgmux\"\nuser = \"pgmux_md5\"\n",
        userlist.display().to_string()
    );
    for auth in ["scram-sha-256", "md5"] {
        let fx = common::start(&format!("client_auth = \"{auth}\"\n{extra}")).await;
        let c = connect_to(&fx, &APP_USER, "app").await.unwrap_or_else(|e| panic!("{auth}: {e}"));
        assert_eq!(scalar(&c, "select current_user").await, "pgmux_md5");
        // A password kept as an md5 hash answers md5 only, as in PostgreSQL.
        match connect_to(&fx, &MD5_USER, "app").await {
            Ok(md5) if auth == "md5" => assert_eq!(scalar(&md5, "select 1").await, "1"),
            Err(e) if auth != "md5" => assert_eq!(code(&e), "28P01"),
            other => panic!("{auth}, md5 user: {:?}", other.map(|_| "logged in")),
        }
        let wrong = Role { user: APP_USER.user, password: MD5_USER.password };
        assert_eq!(code(&connect_to(&fx, &wrong, "app").await.expect_err("wrong")), "28P01", "{auth}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_budget_for_all_pools_an_idle_pool_gives_way_and_a_busy_one_does_not() {
    let fx = common::start(&format!("pool_max = 2\nquery_wait_timeout = \"2s\"\n{ROUTES}")).await;
    let oracle = common::direct(&fx.pg).await;
    // A client of `reports` logs in (its pool's first login opens a connection, idle after).
    let reports = connect_to(&fx, &APP_USER, "reports").await.unwrap();
    // Two clients of `app` in transactions: the whole budget, one connection of it taken from `reports`'s
    // idle pool.
    let mut a = connect_to(&fx, &APP_USER, "app").await.unwrap();
    let mut b = connect_to(&fx, &APP_USER, "app").await.unwrap();
    let ta = a.transaction().await.unwrap();
    let tb = b.transaction().await.unwrap();
    ta.simple_query("select 1").await.unwrap();
    tb.simple_query("select 1").await.unwrap();
    assert_eq!(backends(&oracle).await, 2);
    // Now `reports` waits: no connection in use is ever taken from another pool.
    let err = reports.simple_query("select 1").await.expect_err("the budget is spent and in use");
    assert_eq!(code(&err), "53300", "{}", common::message(&err));
    assert!(common::message(&err).contains("all 2 server connections stayed busy"), "{}", common::message(&err));
    // Once they are idle, one gives way to the other pool.
    ta.commit().await.unwrap();
    tb.commit().await.unwrap();
    assert_eq!(scalar(&reports, "select current_user").await, "pgmux_md5");
    assert!(common::eventually(Duration::from_secs(5), || async { backends(&oracle).await <= 2 }).await);
    let users: Vec<String> = oracle
        .query(
            "select usename::text from pg_stat_activity where backend_type = 'client backend' \
             and usename in ('pgmux_app', 'pgmux_md5') and application_name is distinct from 'pgmux-probe' order by 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(users, ["pgmux_app", "pgmux_md5"], "one of app's idle connections was closed for reports");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_database_and_per_user_caps_hold_across_pools() {
    // Both users' pools of `app` share max_db_connections = 1.
    let fx =
        common::start(&format!("pool_max = 4\nmax_db_connections = 1\nquery_wait_timeout = \"1s\"\n{ROUTES}")).await;
    let md5 = connect_to(&fx, &MD5_USER, "app").await.unwrap();
    let mut a = connect_to(&fx, &APP_USER, "app").await.unwrap();
    let ta = a.transaction().await.unwrap();
    ta.simple_query("select 1").await.unwrap();
    assert_eq!(code(&md5.simple_query("select 1").await.expect_err("app's one connection is in use")), "53300");
    ta.commit().await.unwrap();
    assert_eq!(scalar(&md5, "select current_user").await, "pgmux_md5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_mode_keeps_a_server_per_client_and_lends_it_again_after() {
    let fx = common::start(&format!("pool_max = 4\npool_mode = \"session\"\n{ROUTES}")).await;
    let a = connect_to(&fx, &APP_USER, "app").await.unwrap();
    let b = connect_to(&fx, &APP_USER, "app").await.unwrap();
    let (mut pids, mut b_pids) = (std::collections::HashSet::new(), std::collections::HashSet::new());
    for _ in 0..5 {
        pids.insert(scalar(&a, "select pg_backend_pid()").await);
        b_pids.insert(scalar(&b, "select pg_backend_pid()").await);
    }
    assert_eq!((pids.len(), b_pids.len()), (1, 1), "a session-mode client keeps one server connection");
    assert!(pids.is_disjoint(&b_pids), "and it is its own");
    // Session state that would pin in transaction mode is simply the session's.
    a.batch_execute("create temp table mine (x int); insert into mine values (1)").await.unwrap();
    assert_eq!(scalar(&a, "select count(*) from mine").await, "1");
    drop(a);
    // Its connection goes back once it leaves, or closes: here it held a temporary table, so it closes, and
    // the next client never sees the last one's table.
    let c = connect_to(&fx, &APP_USER, "app").await.unwrap();
    let err = c.simple_query("select count(*) from mine").await.expect_err("no temporary table of another");
    assert_eq!(code(&err), "42P01");
    // b held nothing of its own: its connection goes back to the pool, open, for the next client.
    let oracle = common::direct(&fx.pg).await;
    let b_pid: i32 = b_pids.into_iter().next().unwrap().parse().unwrap();
    drop((b, c));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let open = oracle.query("select 1 from pg_stat_activity where pid = $1", &[&b_pid]).await.unwrap();
    assert_eq!(open.len(), 1, "b's server connection stays open in the pool");
    let next = connect_to(&fx, &APP_USER, "app").await.unwrap();
    assert_eq!(scalar(&next, "select 1").await, "1");
    // A user this pgmux does not know gets in nowhere, session mode or not.
    let su = common::connect(fx.addr(), &SUPERUSER, |c| {
        c.dbname("app");
    })
    .await;
    assert!(su.is_err(), "postgres is not a user this pgmux knows");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_change_live_and_a_removed_route_drains() {
    let mut fx = common::start("").await;
    let source = std::sync::Arc::new(common::NextConfig::default());
    let listener =
        pgmux_proxy::Listener::bind(common::config(&fx.pg, &format!("pool_max = 4\n{ROUTES}"))).await.unwrap();
    listener.set_config_source(source.clone());
    let admin = listener.admin();
    let addr = listener.local_addr().unwrap();
    let running = tokio::spawn(listener.run());
    let connect = |database: &'static str| {
        common::connect(addr, &APP_USER, move |c| {
            c.dbname(database);
        })
    };
    let reports = connect("reports").await.unwrap();
    let app = connect("app").await.unwrap();
    assert_eq!(scalar(&reports, "select current_user").await, "pgmux_md5");

    // `reports` goes, `archive` comes; `app` stays as it was.
    let without_reports = ROUTES.replace("name = \"reports\"", "name = \"archive\"");
    let mut next = common::config(&fx.pg, &format!("pool_max = 4\n{without_reports}"));
    next.listen = addr;
    source.set(next);
    admin.reload().expect("the new routes load");

    let err = connect("reports").await.expect_err("reports is gone");
    assert_eq!(code(&err), "3D000");
    assert!(err.as_db_error().unwrap().hint().unwrap().contains("\"archive\""));
    let archive = connect("archive").await.expect("the new route");
    assert_eq!(scalar(&archive, "select current_user").await, "pgmux_md5");
    // The clients already there go on: a removed route drains rather than cutting them off.
    for _ in 0..3 {
        assert_eq!(scalar(&reports, "select current_user").await, "pgmux_md5");
        assert_eq!(scalar(&app, "select current_user").await, "pgmux_app");
    }
    running.abort();
    fx.proxy.take();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_database_url_sizing_reads_the_database_as_a_route_s_own_user_or_says_what_is_missing() {
    let fx = common::start("").await;
    let port = fx.pg.port();
    let routes = format!(
        "listen = \"127.0.0.1:0\"\nmax_connections_percent = 50\n[[databases]]\nname = \"app\"\nhost = \"127.0.0.1\"\n\
         port = {port}\ndbname = \"pgmux\"\n"
    );
    let users = "[[users]]\nname = \"pgmux_app\"\npassword = \"app-pw-1\"\n";
    // No route logs in as a user of its own: nobody to read max_connections as.
    let config = pgmux_proxy::Config::from_toml_str(&format!("{routes}{users}")).unwrap();
    let err = pgmux_proxy::Listener::start(config).await.expect_err("sizing has no user");
    assert!(matches!(err, pgmux_proxy::SetupError::NoControlUser), "{err}");
    assert!(err.to_string().contains("max_connections_percent = 0"), "{err}");
    // A route with its own user and password carries sizing's control connection.
    let config =
        pgmux_proxy::Config::from_toml_str(&format!("{routes}user = \"pgmux_app\"\npassword = \"app-pw-1\"\n{users}"))
            .unwrap();
    let handle = pgmux_proxy::Listener::start(config).await.expect("starts");
    let c = common::connect(handle.addr, &APP_USER, |c| {
        c.dbname("app");
    })
    .await
    .unwrap();
    assert_eq!(scalar(&c, "select current_user").await, "pgmux_app");
    let sized =
        common::eventually(Duration::from_secs(10), || async { handle.admin().metrics().pool_budget > 0 }).await;
    assert!(sized, "sizing read the database's budget");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_user_logs_in_with_its_own_password() {
    let fx = common::start(&format!("pool_max = 4\nadmin_users = \"pgmux_md5\"\n{ROUTES}")).await;
    let console = connect_to(&fx, &MD5_USER, "pgbouncer").await.expect("the admin with its own password");
    assert!(!console.simple_query("SHOW POOLS").await.unwrap().is_empty());
    let wrong = Role { user: MD5_USER.user, password: APP_USER.password };
    assert_eq!(code(&connect_to(&fx, &wrong, "pgbouncer").await.expect_err("another's password")), "28P01");
    // A user pgmux knows but who is no admin fails as an unknown one does.
    assert_eq!(code(&connect_to(&fx, &APP_USER, "pgbouncer").await.expect_err("not an admin")), "28P01");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_user_database_keeps_min_pool_size_open_before_any_client() {
    // PgBouncer's test_min_pool_size: a database with a forced user and min_pool_size has its connections
    // before a client comes; one without a forced user (a pool per client user) has none until then.
    let routes =
        ROUTES.replace("password = \"md5-pw-2\"\n[[users]]", "password = \"md5-pw-2\"\nmin_pool_size = 2\n[[users]]");
    let fx = common::start(&format!("pool_max = 4\nserver_idle_timeout = \"0\"\n{routes}")).await;
    let oracle = common::direct(&fx.pg).await;
    let opened = common::eventually(Duration::from_secs(5), || async {
        let row = oracle
            .query_one(
                "select count(*) from pg_stat_activity where backend_type = 'client backend' \
                 and usename = 'pgmux_md5' and application_name is distinct from 'pgmux-probe'",
                &[],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0) == 2
    })
    .await;
    assert!(opened, "reports' two connections open with no client");
    assert_eq!(backends(&oracle).await, 2, "and none for app, whose pools are per client user");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_waited_reserve_pool_timeout_gets_a_reserve_connection() {
    // PgBouncer's reserve pool: `app` may hold one connection, and one more for a client that waited 200 ms.
    let config = format!(
        "pool_max = 4\ndefault_pool_size = 1\nreserve_pool_size = 1\nreserve_pool_timeout = \"200ms\"\n\
         query_wait_timeout = \"3s\"\n{ROUTES}"
    );
    let fx = common::start(&config).await;
    let mut holder = connect_to(&fx, &APP_USER, "app").await.unwrap();
    let held = holder.transaction().await.unwrap();
    held.simple_query("select 1").await.unwrap();
    let mut second = connect_to(&fx, &APP_USER, "app").await.unwrap();
    let reserve = second.transaction().await.unwrap();
    reserve.simple_query("select 1").await.expect("served from the reserve while the one is held");
    let oracle = common::direct(&fx.pg).await;
    assert_eq!(backends(&oracle).await, 2, "the pool's one and the reserve's one");
    reserve.commit().await.unwrap();
    // Back with nobody waiting: the reserve's connection closes, the pool is at its size again.
    let shrunk = common::eventually(Duration::from_secs(5), || async { backends(&oracle).await == 1 }).await;
    assert!(shrunk, "the reserve connection closed when it came back");
    held.commit().await.unwrap();
}
