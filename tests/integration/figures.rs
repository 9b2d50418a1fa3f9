//! Every figure pgmux reports means what its name says: query and transaction time are time on a server
//! connection (the wait for one is a figure of its own), and the server connections it reports are every one
//! the database sees, its own control connection included.

use std::time::Duration;

use pgmux_metrics::{ServerState, value_of};
use pgmux_testkit::PgOptions;

use crate::common;

/// A client that waits 400 ms for the one server connection: the wait is counted as wait, not as query
/// time (which would then exceed transaction time, as PgBouncer never lets it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_time_is_time_on_a_server_and_the_wait_is_its_own_figure() {
    let fx = common::start("pool_max = 1").await;
    let holder = fx.client().await;
    let waiter = fx.client().await;
    let admin = fx.proxy.as_ref().expect("proxy running").admin().clone();
    let held = tokio::spawn(async move { holder.simple_query("select pg_sleep(0.4)").await.map(drop) });
    tokio::time::sleep(Duration::from_millis(50)).await;
    waiter.simple_query("select 1").await.expect("the waiter's query");
    held.await.expect("the holder's task").expect("the holder's query");
    let snap = admin.metrics();
    let (query, xact, wait) = (snap.query_time.sum_us(), snap.transaction_time.sum_us(), snap.server_wait.sum_us());
    assert!(wait >= 250_000, "the waiter waited about 350 ms: wait {wait} µs");
    assert!(query <= xact, "query time {query} µs is more than transaction time {xact} µs: the wait was counted");
    assert!(query >= 390_000, "the holder's 400 ms on the server: query {query} µs");
}

/// With sizing on, pgmux holds a control connection besides its pool: the gauges that say how many
/// connections it holds count it, as the database does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connections_pgmux_reports_are_every_one_the_database_sees() {
    let opts = PgOptions { trust_loopback: true, ..PgOptions::default() };
    let fx = common::start_with(
        opts,
        "pool_max = 4\nmax_connections_percent = 50\npool_sizing_interval = \"200ms\"\nclient_auth = \"trust\"",
    )
    .await;
    let oracle = common::direct(&fx.pg).await;
    let client = fx.client().await;
    client.simple_query("select 1").await.expect("a query");
    let admin = fx.proxy.as_ref().expect("proxy running").admin().clone();
    let control = common::eventually(Duration::from_secs(10), || {
        let admin = admin.clone();
        async move { value_of(&admin.metrics().servers, ServerState::Control) == 1 }
    })
    .await;
    assert!(control, "the control connection is counted");
    let servers = admin.metrics().servers;
    let reported: i64 = servers.iter().map(|(_, n)| n).sum();
    let seen = common::try_pgmux_connections(&oracle).await.expect("count");
    assert_eq!(reported, seen, "pgmux_server_connections over every state against pg_stat_activity: {servers:?}");
}
