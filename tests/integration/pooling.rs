//! Transaction pooling: many clients share few server connections, a transaction keeps its server from
//! first message to `ReadyForQuery('I')`, idle clients hold nothing, and waiting is bounded.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use crate::common::{self, scalar};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_clients_two_hundred_transactions_over_two_server_connections() {
    let fx = common::start("pool_max = 2").await;
    let setup = fx.client().await;
    setup.batch_execute("create table audit (client int, pid int)").await.unwrap();

    // The oracle samples pg_stat_activity directly while the load runs.
    let oracle = common::direct(&fx.pg).await;
    let peak = Arc::new(AtomicI64::new(0));
    let running = Arc::new(AtomicBool::new(true));
    let sampler = tokio::spawn({
        let (peak, running) = (Arc::clone(&peak), Arc::clone(&running));
        async move {
            while running.load(Ordering::Relaxed) {
                let n = common::pgmux_backends(&oracle).await;
                peak.fetch_max(n, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });

    let mut tasks = Vec::new();
    for client_no in 0..50i32 {
        let addr = fx.addr();
        tasks.push(tokio::spawn(async move {
            let mut c = common::connect(addr, &pgmux_testkit::APP_USER, |_| {}).await.unwrap();
            for _ in 0..200 {
                let tx = c.transaction().await.unwrap();
                let first: i32 = tx.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
                tx.execute("insert into audit values ($1, pg_backend_pid())", &[&client_no]).await.unwrap();
                let last: i32 = tx.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
                assert_eq!(first, last, "a transaction moved between server connections");
                tx.commit().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    running.store(false, Ordering::Relaxed);
    sampler.await.unwrap();

    assert_eq!(scalar(&setup, "select count(*) from audit").await, "10000");
    let pids: i64 = scalar(&setup, "select count(distinct pid) from audit").await.parse().unwrap();
    assert!((1..=2).contains(&pids), "{pids} server connections used");
    let peak = peak.load(Ordering::Relaxed);
    assert!((1..=2).contains(&peak), "peak of {peak} pgmux server connections, pool_max is 2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_clients_hold_no_server_connection() {
    let fx = common::start("pool_max = 1").await;
    let mut idle = Vec::new();
    for _ in 0..10 {
        let c = fx.client().await;
        assert_eq!(scalar(&c, "select 1").await, "1");
        idle.push(c);
    }
    // Ten logged-in, idle clients; one server connection; another client still gets it at once.
    let c = fx.client().await;
    assert_eq!(scalar(&c, "select 'free'").await, "free");
    let oracle = common::direct(&fx.pg).await;
    assert_eq!(common::pgmux_backends(&oracle).await, 1);
    for c in &idle {
        assert_eq!(scalar(c, "select 2").await, "2");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_waits_too_long_gets_53300_and_can_retry() {
    let fx = common::start("pool_max = 1\nquery_wait_timeout = \"300ms\"").await;
    let holder = fx.client().await;
    holder.batch_execute("begin").await.unwrap();
    let waiter = fx.client().await;
    let started = std::time::Instant::now();
    let err = waiter.simple_query("select 1").await.unwrap_err();
    assert_eq!(common::code(&err), "53300");
    assert!(common::message(&err).contains("query_wait_timeout"), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    holder.batch_execute("commit").await.unwrap();
    assert_eq!(scalar(&waiter, "select 'retried'").await, "retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_wait_in_line_for_a_busy_pool() {
    let fx = common::start("pool_max = 1").await;
    let holder = fx.client().await;
    holder.batch_execute("begin").await.unwrap();
    let waiter = fx.client().await;
    let q = tokio::spawn(async move { scalar(&waiter, "select 'after'").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!q.is_finished(), "the waiter must wait for the transaction to end");
    holder.batch_execute("commit").await.unwrap();
    assert_eq!(q.await.unwrap(), "after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_client_conn_refuses_with_53300() {
    let fx = common::start("max_client_conn = 2").await;
    let _a = fx.client().await;
    let _b = fx.client().await;
    let err = common::connect(fx.addr(), &pgmux_testkit::APP_USER, |_| {}).await.unwrap_err();
    assert_eq!(common::code(&err), "53300");
    assert!(common::message(&err).contains("max_client_conn"), "{err}");
    drop(_a);
    // The slot frees when a client leaves.
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            common::connect(fx.addr(), &pgmux_testkit::APP_USER, |_| {}).await.is_ok()
        })
        .await
    );
}
