//! `max_active_servers`, the overload guard: however many clients run long transactions on however many
//! routes, the database never sees more pgmux backends at work than the cap, and every client still gets
//! its answer (the excess waits its turn). A pinned client holds its turn between transactions; a client
//! whose turn does not come within query_wait_timeout gets 53300 naming the cap; the cap changes live.

use std::time::Duration;

use pgmux_testkit::{APP_USER, MD5_USER, Role};
use tokio::time::Instant;
use tokio_postgres::Client;

use crate::common::{self, Fixture, code, message};
// Two routes to the test database, each its own pool (and its own server user).
use crate::routes::ROUTES;

async fn connect_to(fx: &Fixture, role: &Role, database: &str) -> Client {
    common::connect(fx.addr(), role, |c| {
        c.dbname(database);
    })
    .await
    .unwrap_or_else(|e| panic!("connect to {database}: {e}"))
}

/// pgmux's server connections at work now (running a statement or inside a transaction), both routes'
/// users, as the server sees them.
async fn at_work(oracle: &Client) -> i64 {
    oracle
        .query_one(
            "select count(*) from pg_stat_activity where backend_type = 'client backend' \
             and usename in ('pgmux_app', 'pgmux_md5') and state <> 'idle' \
             and application_name is distinct from 'pgmux-probe'",
            &[],
        )
        .await
        .expect("count backends at work")
        .get(0)
}

/// What a crowd of clients saw.
struct Crowd {
    /// Most pgmux backends at work at once, sampled every 10 ms.
    most_at_work: i64,
    errors: usize,
}

/// 16 clients, half on each route, each running 3 transactions of two statements 100 ms apart, under
/// `max_active_servers = cap` (0: none) with pools of up to 20 connections.
async fn crowd(cap: usize) -> Crowd {
    let fx =
        common::start(&format!("pool_max = 40\ndefault_pool_size = 20\nmax_active_servers = {cap}\n{ROUTES}")).await;
    let oracle = common::direct(&fx.pg).await;
    let mut clients = Vec::new();
    for i in 0..16 {
        let (role, database) = if i % 2 == 0 { (&APP_USER, "app") } else { (&MD5_USER, "reports") };
        let client = connect_to(&fx, role, database).await;
        clients.push(tokio::spawn(async move {
            let mut errors = 0;
            for _ in 0..3 {
                let tx = "begin; select pg_sleep(0.1); select pg_sleep(0.1); commit";
                if let Err(e) = client.batch_execute(tx).await {
                    tracing::warn!(error = %e, "a client's transaction failed");
                    errors += 1;
                }
            }
            errors
        }));
    }
    let mut most_at_work = 0;
    // Bounded: the clients need about 2 s under a cap of 3 (48 transactions of 200 ms, 3 at a time).
    let until = Instant::now() + Duration::from_secs(60);
    while clients.iter().any(|c| !c.is_finished()) && Instant::now() < until {
        most_at_work = most_at_work.max(at_work(&oracle).await);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut errors = 0;
    for client in clients {
        errors += client.await.expect("client task");
    }
    Crowd { most_at_work, errors }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_on_two_routes_never_put_more_backends_to_work_than_the_cap() {
    let crowd = crowd(3).await;
    assert_eq!(crowd.errors, 0, "the clients over the cap waited, none failed");
    assert!(crowd.most_at_work <= 3, "{} pgmux backends at work under max_active_servers = 3", crowd.most_at_work);
    assert!(crowd.most_at_work >= 2, "the cap was reached ({} at most)", crowd.most_at_work);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_cap_the_same_clients_put_more_backends_to_work() {
    // The measure above sees an excess when there is one.
    let crowd = crowd(0).await;
    assert_eq!(crowd.errors, 0);
    assert!(crowd.most_at_work > 3, "only {} pgmux backends at work without a cap", crowd.most_at_work);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_client_holds_its_turn_the_next_waits_then_53300_and_a_raised_cap_lets_it_in() {
    let fx =
        common::start(&format!("pool_max = 4\nmax_active_servers = 1\nquery_wait_timeout = \"1s\"\n{ROUTES}")).await;
    let pinned = connect_to(&fx, &APP_USER, "app").await;
    // Logged in first: a login whose start-up values pgmux has not seen yet checks them on a server
    // connection, under the cap like any other use.
    let other = connect_to(&fx, &MD5_USER, "reports").await;
    // A session advisory lock pins the client to its server connection, busy or not.
    pinned.batch_execute("select pg_advisory_lock(31)").await.expect("lock");
    let err = other.batch_execute("select 1").await.expect_err("no turn within query_wait_timeout");
    assert_eq!(code(&err), "53300");
    assert!(message(&err).contains("max_active_servers (1)"), "{}", message(&err));
    let metrics = fx.proxy.as_ref().unwrap().admin().metrics();
    let cause = pgmux_metrics::TooManyCause::MaxActiveServers;
    assert_eq!(pgmux_metrics::value_of(&metrics.too_many, cause), 1);
    assert_eq!(metrics.active_limit, 1);
    // A client waits; the cap is raised from the console while it does; it gets its answer.
    let waiting = tokio::spawn(async move { other.batch_execute("select 1").await });
    let admin = fx.proxy.as_ref().unwrap().admin().clone();
    let seen_waiting = common::eventually(Duration::from_secs(5), || {
        let admin = admin.clone();
        async move { admin.metrics().active_waiting == 1 }
    })
    .await;
    assert!(seen_waiting, "the client waits for its turn");
    let console = connect_to(&fx, &APP_USER, "pgbouncer").await;
    console.simple_query("SET max_active_servers = 2").await.expect("SET max_active_servers");
    waiting.await.unwrap().expect("served once the cap rose");
    assert_eq!(admin.metrics().active_waiting, 0);
    let config = console.simple_query("SHOW CONFIG").await.expect("SHOW CONFIG");
    let row = config.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) if r.get(0) == Some("max_active_servers") => {
            Some((r.get(1).map(str::to_owned), r.get(3).map(str::to_owned)))
        }
        _ => None,
    });
    assert_eq!(row, Some((Some("2".to_owned()), Some("yes".to_owned()))), "in force, and changeable live");
}
