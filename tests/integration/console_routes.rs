//! The admin console with two routes: a row per pool, per database and per user, and connections listed
//! under the route and server user of their pool; no password anywhere in what it shows. With only
//! `database_url`, the one pool's row as before routes.

use std::collections::BTreeSet;

use pgmux_testkit::{APP_USER, MD5_USER};
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::common::{self, Fixture, scalar};

/// `app` logs in as the client, in transaction mode; `reports` always as the md5 user, in session mode.
const ROUTES: &str = r#"
[[databases]]
name = "app"
dbname = "pgmux"
[[databases]]
name = "reports"
dbname = "pgmux"
user = "pgmux_md5"
password = "md5-pw-2"
pool_mode = "session"
max_db_connections = 3
[[users]]
name = "pgmux_app"
password = "app-pw-1"
[[users]]
name = "pgmux_md5"
password = "md5-pw-2"
pool_size = 2
"#;

async fn connect_to(fx: &Fixture, database: &str) -> Client {
    common::connect(fx.addr(), &APP_USER, |c| {
        c.dbname(database);
    })
    .await
    .unwrap_or_else(|e| panic!("pgmux_app into {database}: {e}"))
}

/// One SHOW's rows, each as (column, value) pairs in column order; NULL as `NULL`.
async fn show(console: &Client, what: &str) -> Vec<Vec<(String, String)>> {
    let messages = console.simple_query(&format!("SHOW {what}")).await.unwrap_or_else(|e| panic!("SHOW {what}: {e}"));
    messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(
                row.columns()
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (c.name().to_owned(), row.get(i).unwrap_or("NULL").to_owned()))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

/// The columns `names` of every row.
fn pick(rows: &[Vec<(String, String)>], names: &[&str]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|row| {
            names
                .iter()
                .map(|n| row.iter().find(|(c, _)| c == n).unwrap_or_else(|| panic!("no column {n}")).1.clone())
                .collect()
        })
        .collect()
}

fn strings(rows: &[&[&str]]) -> Vec<Vec<String>> {
    rows.iter().map(|r| r.iter().map(|s| (*s).to_owned()).collect()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_routes_have_their_own_pools_databases_users_and_connections() {
    let fx = common::start(&format!("pool_max = 4\n{ROUTES}")).await;
    // A transaction open on each route: one active server connection per pool.
    let app = connect_to(&fx, "app").await;
    app.batch_execute("begin; select 1").await.unwrap();
    let reports = connect_to(&fx, "reports").await;
    assert_eq!(scalar(&reports, "select current_user").await, "pgmux_md5");
    let console = connect_to(&fx, "pgbouncer").await;

    let pools = show(&console, "POOLS").await;
    assert_eq!(
        pick(&pools, &["database", "user", "cl_active", "cl_waiting", "sv_active", "pool_mode"]),
        strings(&[
            &["app", "pgmux_app", "1", "0", "1", "transaction"],
            &["reports", "pgmux_md5", "1", "0", "1", "session"],
            &["pgbouncer", "pgbouncer", "1", "0", "0", "statement"],
        ]),
        "one row per pool; the default pool, which no client can reach, has none"
    );

    let databases = show(&console, "DATABASES").await;
    assert_eq!(
        pick(&databases, &["name", "database", "force_user", "pool_mode", "max_connections", "current_connections"]),
        strings(&[
            &["pgmux", "pgmux", "pgmux_app", "transaction", "4", "0"],
            &["app", "pgmux", "NULL", "transaction", "0", "1"],
            &["reports", "pgmux", "pgmux_md5", "session", "3", "1"],
            &["pgbouncer", "pgbouncer", "pgbouncer", "statement", "0", "0"],
        ]),
        "database_url's database, then each route"
    );

    let users = show(&console, "USERS").await;
    assert_eq!(
        pick(&users, &["name", "pool_size", "current_connections", "current_client_connections"]),
        strings(&[&["pgmux_app", "", "1", "3"], &["pgmux_md5", "2", "1", "0"]]),
        "clients counted under the user they logged in as (the console session too), as PgBouncer counts them"
    );

    let servers = show(&console, "SERVERS").await;
    let by_pool: BTreeSet<Vec<String>> = pick(&servers, &["database", "user"]).into_iter().collect();
    assert_eq!(by_pool, strings(&[&["app", "pgmux_app"], &["reports", "pgmux_md5"]]).into_iter().collect());
    let clients = show(&console, "CLIENTS").await;
    let by_pool: BTreeSet<Vec<String>> = pick(&clients, &["database", "user"]).into_iter().collect();
    assert_eq!(
        by_pool,
        strings(&[&["app", "pgmux_app"], &["reports", "pgmux_app"], &["pgbouncer", "pgmux_app"]]).into_iter().collect(),
        "clients under their route and the user they logged in as (reports forces pgmux_md5 on the server)"
    );
    let lists = show(&console, "LISTS").await;
    let lists: Vec<Vec<String>> = pick(&lists, &["list", "items"]).into_iter().take(4).collect();
    assert_eq!(lists, strings(&[&["databases", "4"], &["users", "3"], &["peers", "0"], &["pools", "3"]]));

    // No password, of either user, in anything the console shows.
    for what in ["POOLS", "DATABASES", "USERS", "SERVERS", "CLIENTS", "CONFIG", "STATS", "LISTS"] {
        let text = format!("{:?}", show(&console, what).await);
        for secret in [APP_USER.password, MD5_USER.password] {
            assert!(!text.contains(secret), "SHOW {what} shows a password: {text}");
        }
    }
    app.batch_execute("commit").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_only_database_url_the_one_pool_is_shown_as_before() {
    let fx = common::start("").await;
    let client = fx.client().await;
    client.batch_execute("begin; select 1").await.unwrap();
    let console = connect_to(&fx, "pgbouncer").await;
    let pools = show(&console, "POOLS").await;
    assert_eq!(
        pick(&pools, &["database", "user", "cl_active", "sv_active", "pool_mode"]),
        strings(&[
            &["pgmux", "pgmux_app", "1", "1", "transaction"],
            &["pgbouncer", "pgbouncer", "1", "0", "statement"]
        ]),
        "the client under the pool, the console session under the console"
    );
    let databases = show(&console, "DATABASES").await;
    assert_eq!(
        pick(&databases, &["name", "force_user", "pool_size", "max_connections", "current_connections"]),
        strings(&[&["pgmux", "pgmux_app", "2", "2", "1"], &["pgbouncer", "pgbouncer", "2", "0", "0"]]),
    );
    let users = show(&console, "USERS").await;
    assert_eq!(pick(&users, &["name", "current_connections"]), strings(&[&["pgmux_app", "1"]]));
    let stats = show(&console, "STATS").await;
    assert_eq!(pick(&stats, &["database"]), strings(&[&["pgmux"], &["pgbouncer"]]));
    client.batch_execute("commit").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_reconnect_with_a_database_act_on_that_route_alone() {
    let fx = common::start(&format!("pool_max = 4\n{ROUTES}")).await;
    let app = connect_to(&fx, "app").await;
    assert_eq!(scalar(&app, "select current_user").await, "pgmux_app");
    // `reports` is in session mode: its client keeps its server connection (a PAUSE of it would wait for
    // the client to leave, as PgBouncer's does).
    let reports = connect_to(&fx, "reports").await;
    assert_eq!(scalar(&reports, "select current_user").await, "pgmux_md5");
    let console = connect_to(&fx, "pgbouncer").await;

    console.simple_query("PAUSE app").await.expect("PAUSE app");
    let paused = pick(&show(&console, "DATABASES").await, &["name", "paused"]);
    assert_eq!(
        paused,
        strings(&[&["pgmux", "0"], &["app", "1"], &["reports", "0"], &["pgbouncer", "0"]]),
        "only the route named is paused"
    );
    assert_eq!(scalar(&reports, "select current_user").await, "pgmux_md5", "the other route still serves");
    let err = console.simple_query("PAUSE app").await.expect_err("paused already");
    assert_eq!(err.code().map(|c| c.code()), Some("55000"), "{err}");
    console.simple_query("RESUME app").await.expect("RESUME app");
    assert!(pick(&show(&console, "DATABASES").await, &["paused"]).iter().all(|r| r[0] == "0"));
    assert_eq!(scalar(&app, "select current_user").await, "pgmux_app", "served again after RESUME");

    let err = console.simple_query("PAUSE nope").await.expect_err("no such route");
    assert_eq!(err.code().map(|c| c.code()), Some("3D000"), "{err}");
    let hint = err.as_db_error().and_then(|e| e.hint()).unwrap_or_default().to_owned();
    assert_eq!(hint, "this pgmux serves the databases \"pgmux\", \"app\", \"reports\"");

    // RECONNECT of one route marks its connections (the session client's, still lent), not the other's.
    console.simple_query("RECONNECT reports").await.expect("RECONNECT reports");
    let servers = pick(&show(&console, "SERVERS").await, &["database", "close_needed"]);
    let marked: Vec<&str> = servers.iter().filter(|r| r[1] == "1").map(|r| r[0].as_str()).collect();
    assert_eq!(marked, ["reports"], "{servers:?}");
}

/// The database's and the user's client count, as SHOW DATABASES and SHOW USERS give them.
async fn client_counts(console: &Client, database: &str, user: &str) -> (String, String) {
    let dbs = pick(&show(console, "DATABASES").await, &["name", "current_client_connections"]);
    let users = pick(&show(console, "USERS").await, &["name", "current_client_connections"]);
    let of = |rows: &[Vec<String>], name: &str| rows.iter().find(|r| r[0] == name).map(|r| r[1].clone());
    (of(&dbs, database).unwrap_or_default(), of(&users, user).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_caps_refuse_the_next_client_of_a_full_database_or_user_until_one_leaves() {
    let routes = ROUTES.replace("max_db_connections = 3", "max_db_connections = 3\nmax_db_client_connections = 1");
    let fx = common::start(&format!("pool_max = 4\nmax_user_client_connections = 3\n{routes}")).await;
    let first = connect_to(&fx, "reports").await;
    let refused = |database: &'static str| {
        let addr = fx.addr();
        async move {
            match common::connect(addr, &APP_USER, |c| {
                c.dbname(database);
            })
            .await
            {
                Ok(_) => panic!("a client over the cap got in to {database}"),
                Err(e) => e.as_db_error().map(|e| (e.code().code().to_owned(), e.message().to_owned())),
            }
        }
    };
    let (code, message) = refused("reports").await.expect("an error from pgmux");
    assert_eq!(code, "53300");
    assert!(message.contains("max_db_client_connections = 1"), "{message}");

    // pgmux_app: the `reports` client, an `app` client and the console session (an admin: counted, never
    // refused on the console) make three, the user's cap; the next client of any database is refused.
    let _app = connect_to(&fx, "app").await;
    let console = connect_to(&fx, "pgbouncer").await;
    let (code, message) = refused("app").await.expect("an error from pgmux");
    assert_eq!(code, "53300");
    assert!(message.contains("max_user_client_connections = 3"), "{message}");
    let dbs =
        pick(&show(&console, "DATABASES").await, &["name", "max_client_connections", "current_client_connections"]);
    assert!(dbs.contains(&strings(&[&["reports", "1", "1"]])[0]), "{dbs:?}");
    assert!(dbs.contains(&strings(&[&["app", "0", "1"]])[0]), "{dbs:?}");
    let users =
        pick(&show(&console, "USERS").await, &["name", "max_user_client_connections", "current_client_connections"]);
    assert!(users.contains(&strings(&[&["pgmux_app", "3", "3"]])[0]), "refused clients are not counted: {users:?}");

    // One leaves: counted no more, and its room is taken again.
    drop(first);
    for _ in 0..100 {
        if client_counts(&console, "reports", "pgmux_app").await == ("0".into(), "2".into()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(client_counts(&console, "reports", "pgmux_app").await, ("0".into(), "2".into()));
    let again = connect_to(&fx, "reports").await;
    assert_eq!(scalar(&again, "select current_user").await, "pgmux_md5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_default_pool_size_resizes_a_routes_pool_live() {
    // PgBouncer's test_pool_size ends so: SET default_pool_size, and the pool grows to it, no reconnect.
    let fx = common::start(&format!("pool_max = 8\ndefault_pool_size = 1\n{ROUTES}")).await;
    let first = connect_to(&fx, "app").await;
    first.batch_execute("begin; select 1").await.unwrap();
    let second = connect_to(&fx, "app").await;
    let console = connect_to(&fx, "pgbouncer").await;
    let waiting = tokio::spawn(async move { scalar(&second, "select 'served'").await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "a pool of one, in use: the second client waits");
    console.simple_query("SET default_pool_size = 2").await.expect("SET default_pool_size");
    let served = tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await;
    assert_eq!(served.expect("served once the pool may grow").unwrap(), "served");
    // The second client's connection goes back to the pool just after its answer is sent, so SHOW POOLS
    // may come before that on a loaded machine: asked again until it is back (or 5 s).
    let wanted = strings(&[&["app", "1", "1"]]).remove(0);
    let back = common::eventually(std::time::Duration::from_secs(5), || async {
        pick(&show(&console, "POOLS").await, &["database", "sv_active", "sv_idle"]).contains(&wanted)
    })
    .await;
    let pools = pick(&show(&console, "POOLS").await, &["database", "sv_active", "sv_idle"]);
    assert!(back, "the first connection kept, the second back: {pools:?}");
    first.batch_execute("commit").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_ends_a_routes_clients_and_holds_it_until_resume() {
    let fx = common::start(&format!("pool_max = 4\n{ROUTES}")).await;
    let app = connect_to(&fx, "app").await;
    assert_eq!(scalar(&app, "select 'before'").await, "before");
    let reports = connect_to(&fx, "reports").await;
    let console = connect_to(&fx, "pgbouncer").await;

    console.simple_query("KILL app").await.expect("KILL app");
    let clients = pick(&show(&console, "CLIENTS").await, &["database"]);
    assert!(!clients.iter().any(|r| r[0] == "app"), "the route's clients are gone when KILL returns: {clients:?}");
    let err = app.simple_query("select 1").await.expect_err("killed");
    assert!(err.is_closed() || err.code().is_some(), "{err}");
    assert_eq!(scalar(&reports, "select current_user").await, "pgmux_md5", "the other route still serves");
    let servers = pick(&show(&console, "SERVERS").await, &["database"]);
    assert!(!servers.iter().any(|r| r[0] == "app"), "its server connections closed: {servers:?}");

    // Held, as PgBouncer holds a killed database, until RESUME.
    let later = tokio::spawn({
        let addr = fx.addr();
        async move {
            let c = common::connect(addr, &APP_USER, |c| {
                c.dbname("app");
            })
            .await
            .expect("a new client logs in");
            scalar(&c, "select 'after'").await
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!later.is_finished(), "a new client of a killed database waits for RESUME");
    console.simple_query("RESUME app").await.expect("RESUME app");
    let answer = tokio::time::timeout(std::time::Duration::from_secs(5), later).await.expect("served after RESUME");
    assert_eq!(answer.unwrap(), "after");

    let err = console.simple_query("KILL nope").await.expect_err("no such database");
    assert_eq!(err.code().map(|c| c.code()), Some("3D000"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_refuses_a_routes_new_clients_until_enable_and_keeps_those_in() {
    let fx = common::start(&format!("pool_max = 4\n{ROUTES}")).await;
    let app = connect_to(&fx, "app").await;
    let console = connect_to(&fx, "pgbouncer").await;
    let disabled = |rows: Vec<Vec<(String, String)>>| pick(&rows, &["name", "disabled"]);

    console.simple_query("DISABLE app").await.expect("DISABLE app");
    let err = common::connect(fx.addr(), &APP_USER, |c| {
        c.dbname("app");
    })
    .await
    .expect_err("a new client of a disabled database");
    assert_eq!(common::code(&err), "55000", "{err}");
    assert!(common::message(&err).contains("database \"app\" is disabled"), "{err}");
    assert_eq!(scalar(&app, "select 'still in'").await, "still in", "a client already in keeps working");
    assert_eq!(scalar(&connect_to(&fx, "reports").await, "select 1").await, "1", "other routes let clients in");
    assert!(disabled(show(&console, "DATABASES").await).contains(&vec!["app".to_owned(), "1".to_owned()]));

    console.simple_query("ENABLE app").await.expect("ENABLE app");
    assert_eq!(scalar(&connect_to(&fx, "app").await, "select 'back'").await, "back");
    assert!(disabled(show(&console, "DATABASES").await).contains(&vec!["app".to_owned(), "0".to_owned()]));
    let err = console.simple_query("DISABLE nope").await.expect_err("no such database");
    assert_eq!(err.code().map(|c| c.code()), Some("3D000"), "{err}");
}

/// SHOW STATS' (database, assignments, transactions, queries) rows, and SHOW TOTALS' three same figures.
async fn stats_counts(console: &Client) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    let stats = show(console, "STATS").await;
    let stats = pick(&stats, &["database", "total_server_assignment_count", "total_xact_count", "total_query_count"]);
    let totals = show(console, "TOTALS").await;
    let totals = pick(&totals, &["name", "value"])
        .into_iter()
        .filter(|r| ["total_server_assignment_count", "total_xact_count", "total_query_count"].contains(&r[0].as_str()))
        .collect();
    (stats, totals)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_routes_traffic_is_counted_in_its_own_stats_row() {
    let fx = common::start(&format!("pool_max = 4\n{ROUTES}")).await;
    // app (transaction mode): three transactions, each a server assignment of its own.
    let app = connect_to(&fx, "app").await;
    for _ in 0..3 {
        app.batch_execute("select 1").await.unwrap();
    }
    // reports (session mode): two transactions on the one server connection it keeps.
    let reports = connect_to(&fx, "reports").await;
    reports.batch_execute("select 1").await.unwrap();
    reports.batch_execute("begin; select 1; select 2; commit").await.unwrap();
    let console = connect_to(&fx, "pgbouncer").await;
    // A session adds to its database's counters right after the ReadyForQuery it relays: give it a moment.
    let mut seen = stats_counts(&console).await;
    for _ in 0..20 {
        if seen.0.iter().any(|r| r[0] == "reports" && r[2] == "2")
            && seen.0.iter().any(|r| r[0] == "app" && r[2] == "3")
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        seen = stats_counts(&console).await;
    }
    let commands = seen.0.iter().find(|r| r[0] == "pgbouncer").map(|r| r[2].clone()).unwrap_or_default();
    let commands: u64 = commands.parse().unwrap_or(0);
    assert!(commands >= 1, "the console's own commands are counted under pgbouncer: {:?}", seen.0);
    assert_eq!(
        seen.0,
        strings(&[
            &["app", "3", "3", "3"],
            &["pgmux", "0", "0", "0"],
            &["reports", "1", "2", "2"],
            &["pgbouncer", "0", &commands.to_string(), &commands.to_string()],
        ]),
        "one row per database clients name, each with its own traffic only"
    );
    // SHOW TOTALS adds every row up, the console's commands (this SHOW TOTALS too) included.
    let all = (5 + commands + 1).to_string();
    assert_eq!(
        seen.1,
        strings(&[&["total_server_assignment_count", "4"], &["total_xact_count", &all], &["total_query_count", &all],])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_wait_for_clients_turns_new_clients_away_and_stops_once_the_last_has_left() {
    let fx = common::start(&format!("pool_max = 4\n{ROUTES}")).await;
    let stop = fx.proxy.as_ref().expect("running").stop().clone();
    let app = connect_to(&fx, "app").await;
    app.batch_execute("begin; select 1").await.unwrap();
    let console = connect_to(&fx, "pgbouncer").await;
    console.simple_query("SHUTDOWN WAIT_FOR_CLIENTS").await.expect("taken");

    let refused = common::connect(fx.addr(), &APP_USER, |c| {
        c.dbname("app");
    })
    .await
    .expect_err("no new clients");
    assert_eq!(common::code(&refused), "57P01", "{refused}");
    // The console still answers, and a shutdown cannot be taken back.
    assert!(!show(&console, "VERSION").await.is_empty());
    let resume = console.simple_query("RESUME").await.expect_err("shutting down");
    assert_eq!(common::code(&resume), "08P01", "{resume}");

    // The client in carries on: the transaction it had open, and new ones.
    app.batch_execute("select 2; commit").await.expect("its transaction goes on");
    assert_eq!(scalar(&app, "select 'still served'").await, "still served");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(stop.level(), pgmux_proxy::Level::Closed, "waiting for its last client");

    drop(app);
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(10), stop.reached(pgmux_proxy::Level::Hard));
    stopped.await.expect("stopped once the last client left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_fast_close_closes_a_client_that_keeps_a_connection_reconnect_marked() {
    let fx = common::start(&format!("pool_max = 4\n{ROUTES}")).await;
    let console = connect_to(&fx, "pgbouncer").await;
    // `reports` is in session mode: each client keeps its server connection.
    let (idle, busy) = (connect_to(&fx, "reports").await, connect_to(&fx, "reports").await);
    let app = connect_to(&fx, "app").await;
    assert_eq!(scalar(&idle, "select 'linked'").await, "linked");
    assert_eq!(scalar(&app, "select 'linked'").await, "linked");
    // Off (the default): RECONNECT leaves it its connection until it leaves.
    console.simple_query("RECONNECT").await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(scalar(&idle, "select 'kept'").await, "kept");

    console.simple_query("SET server_fast_close = 1").await.unwrap();
    busy.batch_execute("begin; select 1").await.unwrap();
    console.simple_query("RECONNECT").await.unwrap();
    let within = std::time::Duration::from_secs(5);
    assert!(common::eventually(within, || async { idle.is_closed() }).await, "closed between transactions");
    // A transaction under way finishes first; a transaction-mode client keeps no connection to close.
    busy.batch_execute("select 2; commit").await.expect("its transaction finishes");
    assert!(common::eventually(within, || async { busy.is_closed() }).await, "closed once it ended");
    assert_eq!(scalar(&app, "select 'still here'").await, "still here");
}
