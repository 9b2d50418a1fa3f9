//! A user's own timeouts (PgBouncer's per-user `query_timeout`, `idle_transaction_timeout`,
//! `client_idle_timeout` and `transaction_timeout`) overriding the global ones for that user alone, and
//! `transaction_timeout`: a transaction open too long, idle or running a query, ends with its client and is
//! rolled back on the server.

use std::time::Duration;

use pgmux_testkit::{APP_USER, MD5_USER, Role};
use tokio_postgres::Client;

use crate::common::{self, Fixture, code, message, scalar};

/// `pgmux_app` with short timeouts of its own, `pgmux_md5` with none: the global ones (long) apply to it.
const OWN_TIMEOUTS: &str = r#"
query_timeout = "1h"
idle_transaction_timeout = "1h"
client_idle_timeout = "1h"
transaction_timeout = "1h"
[[databases]]
name = "app"
dbname = "pgmux"
[[users]]
name = "pgmux_app"
password = "app-pw-1"
query_timeout = "1s"
idle_transaction_timeout = "1s"
client_idle_timeout = "1s"
[[users]]
name = "pgmux_md5"
password = "md5-pw-2"
"#;

/// `pgmux_app` with a transaction_timeout of its own, shorter than the global one.
const OWN_TRANSACTION_TIMEOUT: &str = r#"
transaction_timeout = "1h"
[[databases]]
name = "app"
dbname = "pgmux"
[[users]]
name = "pgmux_app"
password = "app-pw-1"
transaction_timeout = "2s"
[[users]]
name = "pgmux_md5"
password = "md5-pw-2"
"#;

async fn connect_as(fx: &Fixture, role: &Role) -> Client {
    common::connect(fx.addr(), role, |c| {
        c.dbname("app");
    })
    .await
    .expect("log in to app")
}

async fn create_tally(oracle: &Client) {
    oracle
        .batch_execute(
            "drop table if exists tally; create table tally (n int); \
             grant all on tally to pgmux_app, pgmux_md5",
        )
        .await
        .expect("create tally");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_s_own_timeouts_override_the_global_ones_for_that_user_only() {
    let fx = common::start(OWN_TIMEOUTS).await;
    let (own, other) = (connect_as(&fx, &APP_USER).await, connect_as(&fx, &MD5_USER).await);
    // query_timeout: the user's 1 s cancels its query; the other user's runs under the global hour.
    let err = own.simple_query("select pg_sleep(4)").await.expect_err("cancelled by the user's query_timeout");
    assert_eq!(code(&err), "57014", "{err}");
    assert!(message(&err).contains("query_timeout = 1s"), "{}", message(&err));
    assert_eq!(scalar(&other, "select 1 from pg_sleep(1.5)").await, "1", "the global query_timeout");
    // idle_transaction_timeout: the user's client is closed, the other user's transaction lives on.
    let own = connect_as(&fx, &APP_USER).await;
    own.batch_execute("begin; select 1").await.unwrap();
    other.batch_execute("begin; select 1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let err = own.simple_query("select 1").await.expect_err("closed by the user's idle_transaction_timeout");
    assert!(err.to_string().contains("idle_transaction_timeout") || own.is_closed(), "{err}");
    other.batch_execute("commit").await.expect("the other user's transaction is still open");
    // client_idle_timeout: the same between transactions.
    let own = connect_as(&fx, &APP_USER).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(own.simple_query("select 1").await.is_err(), "closed by the user's client_idle_timeout");
    assert_eq!(scalar(&other, "select 1").await, "1", "the other user's client is not closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_timeout_ends_a_transaction_open_too_long_and_rolls_it_back() {
    let fx = common::start("transaction_timeout = \"2s\"").await;
    let oracle = common::direct(&fx.pg).await;
    create_tally(&oracle).await;
    // Idle inside the transaction: each pause is shorter than the timeout, their sum is not.
    let c = fx.client().await;
    c.batch_execute("begin; insert into tally values (1)").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    c.batch_execute("insert into tally values (2)").await.expect("still inside transaction_timeout");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let err = c.simple_query("commit").await.expect_err("ended by transaction_timeout");
    assert!(err.to_string().contains("transaction timeout") || c.is_closed(), "{err}");
    assert_eq!(scalar(&oracle, "select count(*) from tally").await, "0", "rolled back");
    // Running a query: the query is cancelled on the server and the client closed.
    let c = fx.client().await;
    let err = c.simple_query("begin; select pg_sleep(30)").await.expect_err("ended by transaction_timeout");
    assert_eq!(code(&err), "25P04", "{err}");
    assert!(message(&err).contains("transaction_timeout = 2s"), "{}", message(&err));
    let sleeping =
        "select count(*) from pg_stat_activity where query like '%pg_sleep(30)%' and pid <> pg_backend_pid()";
    assert!(common::eventually(Duration::from_secs(10), || async { scalar(&oracle, sleeping).await == "0" }).await);
    // A transaction that ends in time leaves the next one a fresh count, and the client stays.
    let c = fx.client().await;
    for n in 0..3 {
        c.batch_execute(&format!("begin; insert into tally values ({n})")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(900)).await;
        c.batch_execute("commit").await.expect("each transaction is shorter than transaction_timeout");
    }
    assert_eq!(scalar(&oracle, "select count(*) from tally").await, "3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_s_own_transaction_timeout_overrides_the_global_one() {
    let fx = common::start(OWN_TRANSACTION_TIMEOUT).await;
    let (own, other) = (connect_as(&fx, &APP_USER).await, connect_as(&fx, &MD5_USER).await);
    own.batch_execute("begin").await.unwrap();
    other.batch_execute("begin").await.unwrap();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(900)).await;
        other.batch_execute("select 1").await.expect("the global transaction_timeout is an hour");
    }
    let err = own.simple_query("select 1").await.expect_err("ended by the user's transaction_timeout");
    assert!(err.to_string().contains("transaction timeout") || own.is_closed(), "{err}");
    other.batch_execute("commit").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_session_mode_each_transaction_counts_from_its_own_start() {
    let fx = common::start("pool_mode = \"session\"\ntransaction_timeout = \"2s\"").await;
    // The client keeps its server connection between transactions: the count starts again with each one.
    let c = fx.client().await;
    for _ in 0..3 {
        c.batch_execute("begin; select 1").await.unwrap();
        tokio::time::sleep(Duration::from_millis(900)).await;
        c.batch_execute("commit").await.expect("each transaction is shorter than transaction_timeout");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    c.batch_execute("begin").await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let err = c.simple_query("select 1").await.expect_err("ended by transaction_timeout");
    assert!(err.to_string().contains("transaction timeout") || c.is_closed(), "{err}");
}
