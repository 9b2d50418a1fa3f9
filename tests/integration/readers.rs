//! Reader routes on the Aurora stand-in (a writer and two streaming readers whose `aurora_replica_status()`
//! the test controls): reads spread over the readers by connections in use, a lagging reader out and back,
//! every reader down with each fallback, and a write refused by the server itself.

use std::collections::HashMap;
use std::time::Duration;

use pgmux_proxy::{Config, Listener, ListenerHandle};
use pgmux_testkit::APP_USER;
use pgmux_testkit::aurora::AuroraStandIn;
use tokio_postgres::Client;

use crate::common::{self, code, scalar};

async fn cluster(readers: usize) -> AuroraStandIn {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("PGMUX_TEST_LOG").unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
    tokio::task::spawn_blocking(move || AuroraStandIn::start(readers)).await.expect("start the stand-in")
}

/// pgmux with `app` on the writer and `app_ro` over the readers, polled every 100 ms.
async fn pgmux(cluster: &AuroraStandIn, fallback: &str) -> ListenerHandle {
    let writer = cluster.endpoint(cluster.writer());
    let readers: Vec<String> = cluster.readers().iter().map(|r| cluster.endpoint(r).to_string()).collect();
    let text = format!(
        "listen = \"127.0.0.1:0\"\nclient_auth = \"trust\"\nmax_connections_percent = 0\npool_max = 12\n\
         topology_interval = \"100ms\"\nmax_replica_lag = \"1s\"\nreader_fallback = \"{fallback}\"\n\
         [[databases]]\nname = \"app\"\nhost = \"127.0.0.1\"\nport = {wport}\ndbname = \"pgmux\"\n\
         [[databases]]\nname = \"app_ro\"\nhost = \"127.0.0.1\"\nport = {wport}\ndbname = \"pgmux\"\nreaders = \"{}\"\n\
         [[users]]\nname = \"{user}\"\npassword = \"{password}\"\n",
        readers.join(","),
        wport = writer.port(),
        user = APP_USER.user,
        password = APP_USER.password,
    );
    Listener::start(Config::from_toml_str(&text).expect("valid")).await.expect("start pgmux")
}

async fn connect(handle: &ListenerHandle, database: &'static str) -> Client {
    common::connect(handle.addr, &APP_USER, |c| {
        c.dbname(database);
    })
    .await
    .expect("connect")
}

/// The port of the server a read ran on, and whether it was a reader.
async fn where_read(c: &Client) -> (u16, bool) {
    try_where_read(c).await.expect("read")
}

async fn try_where_read(c: &Client) -> Result<(u16, bool), tokio_postgres::Error> {
    // One transaction per read (the simple protocol): a prepared read is two, prepare and execute, and each
    // may go to another reader.
    let rows = c.simple_query("select inet_server_port(), pg_is_in_recovery()").await?;
    let row = rows
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .expect("a row");
    Ok((row.get(0).unwrap().parse().unwrap(), row.get(1) == Some("t")))
}

/// Reads `n` times, counting by port; panics on a read on a non-reader unless `writer_ok`.
async fn spread(c: &Client, n: usize) -> HashMap<u16, usize> {
    let mut by_port = HashMap::new();
    for _ in 0..n {
        let (port, _) = where_read(c).await;
        *by_port.entry(port).or_default() += 1;
    }
    by_port
}

/// Waits until every read of a few lands where `want` says (a read that fails meanwhile does not count);
/// returns how long it took.
async fn settles(c: &Client, what: &str, want: impl Fn(u16, bool) -> bool) -> Duration {
    let started = std::time::Instant::now();
    let ok = common::eventually(Duration::from_secs(10), || async {
        for _ in 0..10 {
            match try_where_read(c).await {
                Ok((port, reader)) if want(port, reader) => {}
                _ => return false,
            }
        }
        true
    })
    .await;
    assert!(ok, "reads never settled: {what}");
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_spread_over_the_readers_a_lagging_one_leaves_and_returns_and_writes_get_25006() {
    let cluster = cluster(2).await;
    let handle = pgmux(&cluster, "writer").await;
    let (r1, r2) = (cluster.endpoint("reader-1").port(), cluster.endpoint("reader-2").port());
    let ro = connect(&handle, "app_ro").await;
    // Until the first polls, no reader is trusted: reads go to the writer (the fallback). Then to readers.
    settles(&ro, "on readers", |_, reader| reader).await;

    let seen = spread(&ro, 1000).await;
    let on = |port| seen.get(&port).copied().unwrap_or(0);
    assert_eq!(on(r1) + on(r2), 1000, "every read on a reader: {seen:?}");
    assert!((400..=600).contains(&on(r1)), "split 50 ± 10 %: {seen:?}");

    // reader-1 falls 5 s behind: out within a poll or two; back two polls after its lag is.
    cluster.set_lag("reader-1", 5000.0);
    tokio::task::block_in_place(|| cluster.wait_replayed());
    settles(&ro, "all on reader-2 while reader-1 lags", |port, _| port == r2).await;
    let seen = spread(&ro, 200).await;
    assert_eq!(seen.get(&r2).copied(), Some(200), "nothing on the lagging reader: {seen:?}");
    cluster.set_lag("reader-1", 0.0);
    tokio::task::block_in_place(|| cluster.wait_replayed());
    let back = common::eventually(Duration::from_secs(10), || async { where_read(&ro).await.0 == r1 }).await;
    assert!(back, "reader-1 is back once its lag is");
    let seen = spread(&ro, 200).await;
    assert!(seen.get(&r1).copied().unwrap_or(0) > 40, "reader-1 takes its share again: {seen:?}");

    // A write on a reader is the server's to refuse, and the connection goes on.
    let err = ro.simple_query("create table nope (x int)").await.expect_err("read-only");
    assert_eq!(code(&err), "25006", "{}", common::message(&err));
    assert!(where_read(&ro).await.1, "the next transaction works, on a reader");
    // The writer route is untouched by all this.
    let rw = connect(&handle, "app").await;
    assert_eq!(scalar(&rw, "select pg_is_in_recovery()::text").await, "false");
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_reader_down_reads_go_to_the_writer_or_fail_at_once_as_reader_fallback_says() {
    let mut cluster = cluster(2).await;
    let writer_port = cluster.endpoint(cluster.writer()).port();
    let to_writer = pgmux(&cluster, "writer").await;
    let refusing = pgmux(&cluster, "error").await;
    let (a, b) = (connect(&to_writer, "app_ro").await, connect(&refusing, "app_ro").await);
    settles(&a, "on readers", |_, reader| reader).await;
    settles(&b, "on readers", |_, reader| reader).await;
    tokio::task::block_in_place(|| {
        cluster.stop("reader-1");
        cluster.stop("reader-2");
    });
    // The writer takes the reads: a read that picked a reader the poll had not yet seen go finds it
    // unreachable and goes elsewhere, unseen. No read fails.
    let started = std::time::Instant::now();
    let mut on_writer = 0;
    while on_writer < 20 {
        let (port, reader) = try_where_read(&a).await.expect("no read fails while the readers go");
        on_writer = if port == writer_port && !reader { on_writer + 1 } else { 0 };
        assert!(started.elapsed() < Duration::from_secs(5), "reads never settled on the writer");
    }
    assert!(started.elapsed() < Duration::from_secs(2), "reads on the writer after {:?}", started.elapsed());
    // ... or each read fails at once with 08006, never waiting out query_wait_timeout.
    let refused = common::eventually(Duration::from_secs(10), || async {
        let started = std::time::Instant::now();
        match b.simple_query("select 1").await {
            Err(e) => code(&e) == "08006" && started.elapsed() < Duration::from_secs(1),
            Ok(_) => false,
        }
    })
    .await;
    assert!(refused, "reader_fallback = error refuses at once");
    assert!(common::message(&b.simple_query("select 1").await.unwrap_err()).contains("no reader"));
    to_writer.shutdown().await;
    refusing.shutdown().await;
}
