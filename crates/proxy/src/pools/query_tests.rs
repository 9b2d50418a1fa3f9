//! The statements a pool runs on its server connections for the operator: `connect_query` once on each new
//! connection, `server_check_query` on an idle one before it is lent again. Against the fake server.

use std::sync::Arc;

use tokio_util::task::TaskTracker;

use super::*;
use crate::config::SslMode;
use crate::config::credentials::StaticCredentials;
use crate::pools::Pools;
use crate::testing::{FakeServer, Reply};

fn pool_for(config: Config) -> Arc<ServerPool> {
    let credentials = Arc::new(StaticCredentials::from_config(&config));
    let tls = ServerTls::new(SslMode::Disable, Vec::new()).expect("plaintext needs no CA");
    let pools = Pools::new(Arc::new(config), credentials, tls, TaskTracker::new(), crate::runtime::stop::Stop::new());
    Arc::clone(pools.first())
}

/// Answers pgmux's read-back of the session's settings after connect_query as PostgreSQL 15 would: the
/// values pgmux shields and the role, then the settings whose source is the session.
fn answer_read_back(fake: &FakeServer) {
    fake.on("current_setting('role')", Reply::Rows(vec![vec!["0", "0", "\"$user\", public", "none"]]));
    fake.on("source = 'session'", Reply::Rows(vec![vec!["enable_seqscan", "off", "on"]]));
}

const FIXED: &str = "max_connections_percent = 0\npool_grow_after = \"0s\"\npool_max = 2";
const CONNECT: &str = "connect_query = \"SET enable_seqscan = off; SET enable_nestloop = off\"";

#[tokio::test]
async fn connect_query_runs_once_on_each_new_connection_before_it_is_lent() {
    let fake = FakeServer::start().await;
    let pool = pool_for(fake.config(&format!("{FIXED}\n{CONNECT}")));
    answer_read_back(&fake);
    let first = pool.checkout().await.expect("a connection");
    assert_eq!(fake.ran("enable_seqscan"), [1], "run on the new connection before the client got it");
    let second = pool.checkout().await.expect("a second connection");
    assert_eq!(fake.ran("enable_seqscan"), [1, 2]);
    drop((first, second));
    drop(pool.checkout().await.expect("an idle one again"));
    assert_eq!(fake.ran("enable_seqscan"), [1, 2], "not again on a connection lent before");
    assert_eq!(fake.sql()[0].1, "SET enable_seqscan = off; SET enable_nestloop = off", "as written, in one Query");
}

#[tokio::test]
async fn a_failing_connect_query_closes_the_connection_and_the_client_waits_for_the_next() {
    let fake = FakeServer::start().await;
    let pool = pool_for(fake.config(&format!("{FIXED}\n{CONNECT}\nquery_wait_timeout = \"10s\"")));
    fake.on_once("enable_seqscan", Reply::Error("42704"));
    answer_read_back(&fake);
    let lease = pool.checkout().await.expect("the client waited, and got the second connection");
    assert_eq!(fake.ran("enable_seqscan"), [1, 2], "the failed one was not lent; pgmux opened another");
    fake.until("the failed connection closed", |f| f.open() == 1).await;
    assert_eq!(fake.accepted(), 2);
    drop(lease);

    // One that always fails: the client is not answered at once, but at query_wait_timeout, with why.
    let fake = FakeServer::start().await;
    let pool = pool_for(fake.config(&format!("{FIXED}\n{CONNECT}\nquery_wait_timeout = \"1s\"")));
    fake.on("enable_seqscan", Reply::Error("42704"));
    answer_read_back(&fake);
    let err = pool.checkout().await.expect_err("no connection passes its connect_query");
    assert!(fake.ran("enable_seqscan").len() >= 2, "tried again while the client waited: {:?}", fake.sql());
    assert!(err.to_string().contains("connect_query failed"), "{err}");
    fake.until("every failed connection closed", |f| f.open() == 0).await;
}

#[tokio::test]
async fn without_connect_query_a_new_connection_runs_nothing_before_it_is_lent() {
    let fake = FakeServer::start().await;
    let pool = pool_for(fake.config(FIXED));
    drop(pool.checkout().await.expect("a connection"));
    assert_eq!((fake.accepted(), fake.sql()), (1, vec![]));
}

const CHECK_NOW: &str = "server_check_delay = \"0s\"";

#[tokio::test]
async fn an_idle_connection_is_checked_with_an_empty_query_by_default() {
    let fake = FakeServer::start().await;
    let pool = pool_for(fake.config(&format!("{FIXED}\n{CHECK_NOW}")));
    drop(pool.checkout().await.expect("a connection"));
    drop(pool.checkout().await.expect("the idle one, checked"));
    // PgBouncer's default check: a Query with no statement in it (the server logs `statement: `), no Sync.
    assert_eq!(fake.log(), [(1, "Q ".to_owned())]);
    assert_eq!(fake.accepted(), 1);
}

#[tokio::test]
async fn server_check_query_is_what_the_check_runs_and_a_failing_one_retires_the_connection() {
    let fake = FakeServer::start().await;
    let pool = pool_for(fake.config(&format!("{FIXED}\n{CHECK_NOW}\nserver_check_query = \"SELECT 2\"")));
    drop(pool.checkout().await.expect("a connection"));
    drop(pool.checkout().await.expect("the idle one, checked"));
    assert_eq!((fake.ran("SELECT 2"), fake.accepted()), (vec![1], 1), "checked with it, and lent again");
    // The check fails: that connection is closed, and the client gets a new one.
    fake.on_once("SELECT 2", Reply::Error("XX000"));
    drop(pool.checkout().await.expect("a new connection in place of the failed one"));
    assert_eq!((fake.ran("SELECT 2"), fake.accepted()), (vec![1, 1], 2));
    fake.until("the failed connection closed", |f| f.open() == 1).await;
    // Within server_check_delay nothing is sent at all.
    let fake = FakeServer::start().await;
    let pool = pool_for(fake.config(&format!("{FIXED}\nserver_check_query = \"SELECT 2\"")));
    drop(pool.checkout().await.expect("a connection"));
    drop(pool.checkout().await.expect("the idle one, unchecked"));
    assert_eq!(fake.log(), []);
}
