//! What pgmux runs on server connections for the operator, against a real PostgreSQL: `connect_query` once
//! on each new connection (the global one, or a database's own), and what happens when it fails;
//! `server_check_query` on an idle connection before it is lent again.

use pgmux_testkit::{APP_USER, Role};
use tokio_postgres::Client;

use crate::common::{self, Fixture, code, message, scalar};

async fn connect_to(fx: &Fixture, role: &Role, database: &str) -> Result<Client, tokio_postgres::Error> {
    common::connect(fx.addr(), role, |c| {
        c.dbname(database);
    })
    .await
}

/// `app` runs the global connect_query, `nested` its own, `broken` one the server refuses.
const CONNECT_QUERIES: &str = r#"
pool_max = 4
query_wait_timeout = "1s"
connect_query = "SET enable_seqscan = off"
[[databases]]
name = "app"
dbname = "pgmux"
[[databases]]
name = "nested"
dbname = "pgmux"
connect_query = "SET enable_nestloop = off; SET enable_hashjoin = off"
[[databases]]
name = "broken"
dbname = "pgmux"
connect_query = "SET no_such_setting = 1"
[[users]]
name = "pgmux_app"
password = "app-pw-1"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_query_sets_up_each_new_server_connection_and_a_database_may_have_its_own() {
    let fx = common::start(CONNECT_QUERIES).await;
    let app = connect_to(&fx, &APP_USER, "app").await.expect("into app");
    let nested = connect_to(&fx, &APP_USER, "nested").await.expect("into nested");
    for _ in 0..3 {
        assert_eq!(scalar(&app, "show enable_seqscan").await, "off", "the global connect_query");
        assert_eq!(scalar(&app, "show enable_nestloop").await, "on");
        assert_eq!(scalar(&nested, "show enable_nestloop").await, "off", "the database's own");
        assert_eq!(scalar(&nested, "show enable_hashjoin").await, "off", "every statement of it");
        assert_eq!(scalar(&nested, "show enable_seqscan").await, "on", "in place of the global one");
    }
    // Two clients at once in `app`: the second server connection ran it too.
    app.batch_execute("begin").await.unwrap();
    let other = connect_to(&fx, &APP_USER, "app").await.expect("into app again");
    assert_eq!(scalar(&other, "show enable_seqscan").await, "off");
    let pids = (scalar(&app, "select pg_backend_pid()").await, scalar(&other, "select pg_backend_pid()").await);
    assert_ne!(pids.0, pids.1, "two server connections");
    app.batch_execute("commit").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_connect_query_lends_no_connection_and_the_client_is_told_why_after_waiting() {
    let fx = common::start(CONNECT_QUERIES).await;
    // The first client of a pool needs a server connection at login (to learn the server's parameters).
    let err = connect_to(&fx, &APP_USER, "broken").await.expect_err("no server connection passes its connect_query");
    assert_eq!(code(&err), "08001", "{err:?}");
    assert!(message(&err).contains("connect_query failed"), "{err:?}");
    assert!(!message(&err).contains("SET no_such_setting"), "the query itself is not repeated: {err:?}");
    // Nothing of the failure reached the other databases.
    let app = connect_to(&fx, &APP_USER, "app").await.expect("into app");
    assert_eq!(scalar(&app, "show enable_seqscan").await, "off");
}

/// A client's own SET of a setting connect_query made follows that client; the next client on the same
/// server connection gets connect_query's value back, not the server's default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_connect_query_set_is_restored_after_a_client_changed_it() {
    let fx_one = common::start(&CONNECT_QUERIES.replace("pool_max = 4", "pool_max = 1")).await;
    let a = connect_to(&fx_one, &APP_USER, "nested").await.expect("a into nested");
    let b = connect_to(&fx_one, &APP_USER, "nested").await.expect("b into nested");
    a.batch_execute("SET enable_nestloop = on; SET work_mem = '8MB'").await.unwrap();
    for _ in 0..3 {
        assert_eq!(scalar(&a, "show enable_nestloop").await, "on", "a's own SET");
        assert_eq!(scalar(&b, "show enable_nestloop").await, "off", "connect_query's, back for b");
        assert_eq!(scalar(&b, "show enable_hashjoin").await, "off");
        assert_eq!(scalar(&b, "show work_mem").await, "4MB", "what a set and connect_query did not: reset");
        assert_eq!(scalar(&a, "show work_mem").await, "8MB");
    }
    let pids = (scalar(&a, "select pg_backend_pid()").await, scalar(&b, "select pg_backend_pid()").await);
    assert_eq!(pids.0, pids.1, "one server connection, shared");
}

/// `server_check_query` is what an idle connection runs before it is lent again: here it draws from a
/// sequence, which counts the checks on the server itself. A check that fails retires the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_check_query_checks_an_idle_connection_and_a_failing_one_retires_it() {
    let check = "pool_max = 2\nserver_check_delay = \"0s\"\nserver_check_query = \"SELECT nextval('pgmux_checks')\"";
    let fx = common::start(check).await;
    let direct = common::direct(&fx.pg).await;
    direct.batch_execute("CREATE SEQUENCE pgmux_checks; GRANT USAGE ON SEQUENCE pgmux_checks TO PUBLIC").await.unwrap();
    let client = fx.client().await;
    let first = scalar(&client, "select pg_backend_pid()").await;
    for _ in 0..3 {
        assert_eq!(scalar(&client, "select pg_backend_pid()").await, first, "checked, and lent again");
    }
    let checks: i64 = direct.query_one("SELECT last_value FROM pgmux_checks", &[]).await.unwrap().get(0);
    assert!(checks >= 3, "a check before each transaction after the first, on the server: {checks}");

    // A check that fails: each transaction after the first gets a new server connection.
    direct.batch_execute("DROP SEQUENCE pgmux_checks").await.unwrap();
    let before = scalar(&client, "select pg_backend_pid()").await;
    let after = scalar(&client, "select pg_backend_pid()").await;
    assert_ne!(before, after, "the connection that failed its check was not lent");
    assert_ne!(before, first);
}
