//! Reader routes on the Aurora stand-in (a writer and two streaming readers whose `aurora_replica_status()`
//! the test controls): reads spread over the readers by connections in use, a lagging reader out and back,
//! every reader down with each fallback, and a write refused by the server itself; and a route whose readers
//! come from the topology (`readers = "aurora"`): found, joining, removed and promoted.

use std::collections::HashMap;
use std::time::Duration;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use pgmux_metrics::{Format, ReaderFallbackOutcome as Outcome, value_of};
use pgmux_proxy::config::credentials::{InstanceEndpoints, ServerAccess};
use pgmux_proxy::{Config, Listener, ListenerHandle};
use pgmux_testkit::APP_USER;
use pgmux_testkit::aurora::{AuroraStandIn, CLUSTER_DOMAIN};
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::common::{self, code, scalar};

pub(crate) async fn cluster(readers: usize) -> AuroraStandIn {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("PGMUX_TEST_LOG").unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
    tokio::task::spawn_blocking(move || AuroraStandIn::start(readers)).await.expect("start the stand-in")
}

/// pgmux with `app` on the writer and `app_ro` over the readers, polled every 100 ms.
pub(crate) async fn pgmux(cluster: &AuroraStandIn, fallback: &str) -> ListenerHandle {
    pgmux_with(cluster, fallback, "").await
}

pub(crate) async fn pgmux_with(cluster: &AuroraStandIn, fallback: &str, extra: &str) -> ListenerHandle {
    let readers: Vec<String> = cluster.readers().iter().map(|r| cluster.endpoint(r).to_string()).collect();
    let text = config_text(cluster, fallback, &format!("readers = \"{}\"", readers.join(",")), extra);
    Listener::start(Config::from_toml_str(&text).expect("valid")).await.expect("start pgmux")
}

/// `app` on the writer and `app_ro` with `readers` (a line of its entry), polled every 100 ms; the client
/// user is an admin too (the console's SHOW POOLS).
pub(crate) fn config_text(cluster: &AuroraStandIn, fallback: &str, readers: &str, extra: &str) -> String {
    let writer = cluster.endpoint(cluster.writer());
    format!(
        "listen = \"127.0.0.1:0\"\nclient_auth = \"trust\"\nmax_connections_percent = 0\npool_max = 12\n\
         topology_interval = \"100ms\"\nmax_replica_lag = \"1s\"\nreader_fallback = \"{fallback}\"\n\
         admin_users = \"{user}\"\n{extra}\n\
         [[databases]]\nname = \"app\"\nhost = \"127.0.0.1\"\nport = {wport}\ndbname = \"pgmux\"\n\
         [[databases]]\nname = \"app_ro\"\nhost = \"127.0.0.1\"\nport = {wport}\ndbname = \"pgmux\"\n{readers}\n\
         [[users]]\nname = \"{user}\"\npassword = \"{password}\"\n",
        wport = writer.port(),
        user = APP_USER.user,
        password = APP_USER.password,
    )
}

pub(crate) async fn connect(handle: &ListenerHandle, database: &'static str) -> Client {
    common::connect(handle.addr, &APP_USER, |c| {
        c.dbname(database);
    })
    .await
    .expect("connect")
}

/// The port of the server a read ran on, and whether it was a reader.
pub(crate) async fn where_read(c: &Client) -> (u16, bool) {
    try_where_read(c).await.expect("read")
}

pub(crate) async fn try_where_read(c: &Client) -> Result<(u16, bool), tokio_postgres::Error> {
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
pub(crate) async fn spread(c: &Client, n: usize) -> HashMap<u16, usize> {
    let mut by_port = HashMap::new();
    for _ in 0..n {
        let (port, _) = where_read(c).await;
        *by_port.entry(port).or_default() += 1;
    }
    by_port
}

/// Waits until every read of a few lands where `want` says (a read that fails meanwhile does not count);
/// returns how long it took.
pub(crate) async fn settles(c: &Client, what: &str, want: impl Fn(u16, bool) -> bool) -> Duration {
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

    // On a loaded host a poll may miss its deadline and take a reader out for a few polls, which skews one
    // round of reads; a pick that favours one reader skews every round. So: up to three rounds.
    let mut rounds = Vec::new();
    let even = loop {
        let seen = spread(&ro, 1000).await;
        let on = |port| seen.get(&port).copied().unwrap_or(0);
        assert_eq!(on(r1) + on(r2), 1000, "every read on a reader: {seen:?}");
        let even = (400..=600).contains(&on(r1));
        rounds.push(seen);
        if even || rounds.len() == 3 {
            break even;
        }
    };
    assert!(even, "split 50 ± 10 % in one of three rounds: {rounds:?}");

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
    // Before the first polls every read fell back (to the writer, or refused): counted from here on.
    let fallbacks = |h: &ListenerHandle, outcome| value_of(&h.admin().metrics().reader_fallbacks, outcome);
    let (to_writer_before, refused_before) =
        (fallbacks(&to_writer, Outcome::Writer), fallbacks(&refusing, Outcome::Error));
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
    let counted = fallbacks(&to_writer, Outcome::Writer) - to_writer_before;
    assert!(counted >= 20, "each read on the writer is a fallback counted: {counted}");
    assert_eq!(fallbacks(&to_writer, Outcome::Error), 0, "reader_fallback = writer refuses nothing");
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
    let refused = fallbacks(&refusing, Outcome::Error) - refused_before;
    assert!(refused >= 2, "each refusal is a fallback counted: {refused}");
    assert_eq!(fallbacks(&refusing, Outcome::Writer), 0, "reader_fallback = error sends nothing to the writer");
    to_writer.shutdown().await;
    refusing.shutdown().await;
}

/// `reader_fallback = wait`: with every reader down, a read waits for a reader as for any connection (up to
/// `query_wait_timeout`) and runs on whichever comes back first: no error, nothing on the writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_reader_down_reader_fallback_wait_holds_a_read_until_a_reader_is_back() {
    let mut cluster = cluster(2).await;
    let r2 = cluster.endpoint("reader-2").port();
    let handle = pgmux_with(&cluster, "wait", "query_wait_timeout = \"60s\"").await;
    let ro = connect(&handle, "app_ro").await;
    settles(&ro, "on readers", |_, reader| reader).await;
    tokio::task::block_in_place(|| {
        cluster.stop("reader-1");
        cluster.stop("reader-2");
    });
    let out = common::eventually(Duration::from_secs(10), || async {
        let readers = readers_in_metrics(&handle);
        readers.len() == 2 && readers.iter().all(|(_, up)| !up)
    });
    assert!(out.await, "both readers out of the rotation");
    let failed_connects = || handle.admin().metrics().server_connect_failures;
    let before = failed_connects();
    let reading = tokio::spawn(async move { (try_where_read(&ro).await, ro) });
    // Three seconds: three rounds of a second on one reader, then the other.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!reading.is_finished(), "the read waits for a reader, it does not fail or go to the writer");
    // Paced as any wait for a connection is (50 ms doubling to 250 ms between tries), never a spin; the
    // topology polls add a few.
    let tries = failed_connects() - before;
    assert!(tries < 60, "{tries} connection attempts in three seconds of waiting");
    tokio::task::block_in_place(|| cluster.restart("reader-2"));
    let (read, _ro) = tokio::time::timeout(Duration::from_secs(60), reading).await.expect("bounded").expect("join");
    let (port, reader) = read.expect("the read waited and ran");
    assert!(reader && port == r2, "it ran on the reader that came back: {port}");
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_topology_polls_stop_while_no_reader_is_used_so_the_cluster_may_sleep() {
    let cluster = cluster(1).await;
    let handle = pgmux_with(&cluster, "writer", "server_idle_timeout = \"1s\"").await;
    let ro = connect(&handle, "app_ro").await;
    settles(&ro, "on the reader", |_, reader| reader).await;
    let oracle = common::direct(cluster.server("reader-1")).await;
    let polls = || async {
        let row = oracle
            .query_one("select count(*) from pg_stat_activity where application_name = 'pgmux-topology'", &[])
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    assert_eq!(polls().await, 1, "the reader is polled while it is used");
    // Idle: the pool's connection closes after 1 s, the poll's a second later.
    let stopped = common::eventually(Duration::from_secs(10), || async { polls().await == 0 }).await;
    assert!(stopped, "the topology connection closed once the route was idle");
    // The next read is served, and the polls resume.
    assert!(where_read(&ro).await.1);
    assert!(common::eventually(Duration::from_secs(5), || async { polls().await == 1 }).await, "polls resumed");
    handle.shutdown().await;
}

/// Where the stand-in's instances are: each on 127.0.0.1 with a port of its own, which no topology says
/// (Aurora's instances share the cluster's port). pgmux finds the instances and names their endpoints
/// itself; this only tells it the port of a name, as the test learns them.
#[derive(Debug, Default)]
struct StandInEndpoints(Mutex<HashMap<String, SocketAddr>>);

impl InstanceEndpoints for StandInEndpoints {
    fn locate(&self, host: &str) -> Option<(String, u16)> {
        self.0.lock().unwrap().get(host).map(|a| (a.ip().to_string(), a.port()))
    }
}

impl StandInEndpoints {
    fn learn(&self, cluster: &AuroraStandIn) {
        let mut known = self.0.lock().unwrap();
        for id in cluster.readers().into_iter().chain([cluster.writer()]) {
            let host = AuroraStandIn::instance_host(id);
            known.insert(host.clone(), cluster.endpoint_of(&host).expect("an instance of the cluster"));
        }
    }
}

/// pgmux with `app_ro` discovering its readers in the stand-in's topology.
async fn discovering(cluster: &AuroraStandIn, endpoints: &Arc<StandInEndpoints>) -> ListenerHandle {
    endpoints.learn(cluster);
    let readers = format!("readers = \"aurora\"\ninstance_domain = \"{CLUSTER_DOMAIN}\"");
    let text = config_text(cluster, "writer", &readers, "");
    let access = ServerAccess { instance_endpoints: Some(Arc::clone(endpoints) as _), ..Default::default() };
    Listener::start_with(Config::from_toml_str(&text).expect("valid"), access).await.expect("start pgmux")
}

/// The reader instances the metrics name for `app_ro`, with whether each is in the rotation.
pub(crate) fn readers_in_metrics(handle: &ListenerHandle) -> Vec<(String, bool)> {
    let text = handle.admin().metrics_text(Format::Prometheus);
    let prefix = "pgmux_reader_in_rotation{database=\"app_ro\",instance=\"";
    let mut out: Vec<(String, bool)> = text
        .lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .filter_map(|rest| rest.split_once("\"} ").map(|(id, v)| (id.to_owned(), v == "1")))
        .collect();
    out.sort();
    out
}

/// The `database` column of SHOW POOLS.
async fn pool_rows(handle: &ListenerHandle) -> Vec<String> {
    let console = connect(handle, "pgbouncer").await;
    let rows = console.simple_query("SHOW POOLS").await.expect("SHOW POOLS");
    rows.iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovered_readers_split_the_reads_a_joining_one_takes_its_share_and_a_promoted_one_leaves() {
    let mut cluster = cluster(2).await;
    let endpoints = Arc::new(StandInEndpoints::default());
    let handle = discovering(&cluster, &endpoints).await;
    let (r1, r2) = (cluster.endpoint("reader-1").port(), cluster.endpoint("reader-2").port());
    let ro = connect(&handle, "app_ro").await;
    settles(&ro, "on readers", |_, reader| reader).await;

    // Both readers found; the writer is not one of them.
    let seen = spread(&ro, 1000).await;
    let on = |seen: &HashMap<u16, usize>, port| seen.get(&port).copied().unwrap_or(0);
    assert_eq!(on(&seen, r1) + on(&seen, r2), 1000, "every read on a discovered reader: {seen:?}");
    assert!((400..=600).contains(&on(&seen, r1)), "split 50 ± 10 %: {seen:?}");
    let both = vec![("reader-1".to_owned(), true), ("reader-2".to_owned(), true)];
    assert_eq!(readers_in_metrics(&handle), both, "each reader named in the metrics, the writer not");
    let pools = pool_rows(&handle).await;
    for id in ["app_ro@reader-1", "app_ro@reader-2"] {
        assert!(pools.iter().any(|p| p == id), "SHOW POOLS has a row {id}: {pools:?}");
    }

    // A third reader joins the cluster: it takes reads, with no client reconnecting.
    let joined = tokio::task::block_in_place(|| {
        let name = cluster.add_reader();
        cluster.wait_replayed();
        name
    });
    let r3 = cluster.endpoint(&joined).port();
    endpoints.learn(&cluster);
    let started = std::time::Instant::now();
    let wanted = (joined.clone(), true);
    let joins = common::eventually(Duration::from_secs(10), || async { readers_in_metrics(&handle).contains(&wanted) });
    assert!(joins.await, "{joined} never joined the rotation");
    // A figure, not a verdict (the machine is shared): the issue asks for two polls at most.
    eprintln!("{joined} in the rotation {:?} after its endpoint was known (polls every 100 ms)", started.elapsed());
    let seen = spread(&ro, 300).await;
    assert!(on(&seen, r3) >= 50, "{joined} takes its share: {seen:?}");

    // reader-1 is promoted (the old writer leaves the cluster): it is the writer now, not a reader.
    tokio::task::block_in_place(|| cluster.promote("reader-1"));
    settles(&ro, "on the readers left", |port, reader| reader && port != r1).await;
    let seen = spread(&ro, 200).await;
    assert_eq!(on(&seen, r2) + on(&seen, r3), 200, "nothing on the promoted reader: {seen:?}");
    let left: Vec<String> = readers_in_metrics(&handle).into_iter().map(|(id, _)| id).collect();
    assert_eq!(left, vec!["reader-2".to_owned(), joined], "reader-1 left the route");
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_the_topology_drops_or_stops_updating_takes_no_new_transaction_and_drains() {
    let cluster = cluster(2).await;
    let endpoints = Arc::new(StandInEndpoints::default());
    let handle = discovering(&cluster, &endpoints).await;
    let (ro, held) = (connect(&handle, "app_ro").await, connect(&handle, "app_ro").await);
    settles(&ro, "on readers", |_, reader| reader).await;
    settles(&held, "on readers", |_, reader| reader).await;

    // A transaction in flight on one reader when the topology stops listing it.
    held.simple_query("begin").await.expect("begin");
    let (port, _) = where_read(&held).await;
    let leaving = if port == cluster.endpoint("reader-1").port() { "reader-1" } else { "reader-2" };
    cluster.remove_row(leaving);
    tokio::task::block_in_place(|| cluster.wait_replayed());
    let dropped = common::eventually(Duration::from_secs(10), || async {
        readers_in_metrics(&handle).iter().all(|(id, _)| id != leaving)
    });
    assert!(dropped.await, "{leaving} left the route");
    // The transaction finishes where it began.
    assert_eq!(where_read(&held).await.0, port, "still on {leaving} inside its transaction");
    held.simple_query("commit").await.expect("the transaction in flight commits");
    // No new transaction goes there (with nothing in flight, half would if it were still a member).
    let seen = spread(&ro, 200).await;
    assert_eq!(seen.get(&port), None, "no new transaction on {leaving}: {seen:?}");
    assert_ne!(where_read(&held).await.0, port, "the next transaction of the client that was there goes elsewhere");
    // And the pool drains: no connection of pgmux's is left on the instance.
    let oracle = common::direct(cluster.server(leaving)).await;
    let sql = format!("select count(*) from pg_stat_activity where usename = '{}'", APP_USER.user);
    let drained = common::eventually(Duration::from_secs(10), || async {
        oracle.query_one(sql.as_str(), &[]).await.unwrap().get::<_, i64>(0) == 0
    })
    .await;
    assert!(drained, "pgmux's connections to {leaving} closed");

    // A row not updated for over 300 s counts as gone too (the AWS JDBC wrapper's filter): with the other
    // reader stale, the route has none, and reads fall back to the writer.
    let other = if leaving == "reader-1" { "reader-2" } else { "reader-1" };
    cluster.set_update_age(other, Some(Duration::from_secs(400)));
    tokio::task::block_in_place(|| cluster.wait_replayed());
    let stale = common::eventually(Duration::from_secs(10), || async { readers_in_metrics(&handle).is_empty() });
    assert!(stale.await, "{other}, stale, left the route");
    assert!(!where_read(&ro).await.1, "with no reader left, a read runs on the writer");
    handle.shutdown().await;
}

/// The server backends `n` reads on `c` ran on.
async fn backends(c: &Client, n: usize) -> std::collections::HashSet<String> {
    let mut seen = std::collections::HashSet::new();
    for _ in 0..n {
        seen.insert(scalar(c, "select pg_backend_pid()::text || '@' || inet_server_port()").await);
    }
    seen
}

/// A reload that leaves a reader route as it was keeps its readers' connections: before, every reload
/// took each reader instance's pool for a changed route, and its connections were replaced as they came back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_leaves_a_reader_route_as_it_was_keeps_its_readers_connections() {
    let cluster = cluster(2).await;
    let readers = format!("readers = \"{},{}\"", cluster.endpoint("reader-1"), cluster.endpoint("reader-2"));
    let text = config_text(&cluster, "writer", &readers, "");
    let listener = Listener::bind(Config::from_toml_str(&text).expect("valid")).await.expect("bind");
    let source = Arc::new(common::NextConfig::default());
    listener.set_config_source(source.clone());
    let (admin, addr) = (listener.admin(), listener.local_addr().expect("bound"));
    let running = tokio::spawn(listener.run());
    let ro = common::connect(addr, &APP_USER, |c| {
        c.dbname("app_ro");
    })
    .await
    .expect("connect");
    settles(&ro, "on readers", |_, reader| reader).await;
    // On a loaded host a poll may miss its deadline and take a reader out for a while (see above); one taken
    // out now and back after the reload would open its first connection then. So reads go on until both
    // readers have one (or 10 s).
    let mut before = backends(&ro, 40).await;
    let readers_seen = |seen: &std::collections::HashSet<String>| {
        let ports: std::collections::HashSet<&str> =
            seen.iter().filter_map(|b| b.split_once('@')).map(|p| p.1).collect();
        ports.len()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while readers_seen(&before) < 2 && std::time::Instant::now() < deadline {
        before.extend(backends(&ro, 10).await);
    }
    let both = readers_seen(&before) == 2;
    assert!(both, "reads reached both readers before the reload: {before:?}");

    // Something else changes; the reader route does not.
    let mut next = Config::from_toml_str(&config_text(&cluster, "writer", &readers, "query_wait_timeout = \"25s\""))
        .expect("valid");
    next.listen = addr;
    source.set(next);
    admin.reload().expect("the reload applies");
    let after = backends(&ro, 40).await;
    assert!(after.is_subset(&before), "new reader connections after the reload: {after:?}, before {before:?}");
    running.abort();
}

/// The most transactions at work at once on the readers while 12 clients of `app_ro` each run three 100 ms
/// transactions under `max_active_servers = cap`, and how many failed. Each transaction reads the clock on
/// its server at its start and its end (the readers share this machine's clock), and the most intervals
/// that overlap is counted: samples of two servers' pg_stat_activity, read one after the other, can count a
/// turn handed from one reader to the other twice.
async fn readers_at_work(cap: usize) -> (usize, usize) {
    let cluster = cluster(2).await;
    let readers = format!("readers = \"{},{}\"", cluster.endpoint("reader-1"), cluster.endpoint("reader-2"));
    let extra = format!("max_active_servers = {cap}\nquery_wait_timeout = \"30s\"");
    let text = config_text(&cluster, "writer", &readers, &extra);
    let handle = Listener::start(Config::from_toml_str(&text).expect("valid")).await.expect("start pgmux");
    settles(&connect(&handle, "app_ro").await, "on readers", |_, reader| reader).await;
    let now = "select extract(epoch from clock_timestamp())::text";
    let tx = format!("begin; {now}; select pg_sleep(0.1); {now}; commit");
    let mut clients = Vec::new();
    for _ in 0..12 {
        let (c, tx) = (connect(&handle, "app_ro").await, tx.clone());
        clients.push(tokio::spawn(async move {
            let (mut spans, mut failed) = (Vec::new(), 0);
            for _ in 0..3 {
                let Ok(messages) = c.simple_query(&tx).await else {
                    failed += 1;
                    continue;
                };
                let times: Vec<f64> = messages
                    .iter()
                    .filter_map(|m| match m {
                        SimpleQueryMessage::Row(r) => r.get(0).and_then(|t| t.parse().ok()),
                        _ => None,
                    })
                    .collect();
                spans.push((times[0], times[1]));
            }
            (spans, failed)
        }));
    }
    let (mut edges, mut failed) = (Vec::new(), 0);
    for c in clients {
        let (spans, f) = c.await.expect("client task");
        failed += f;
        // An end sorts before a start at the same instant: a turn handed over is not an overlap.
        edges.extend(spans.into_iter().flat_map(|(from, to)| [(from, 1i32), (to, -1)]));
    }
    handle.shutdown().await;
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut at_once, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        at_once += step;
        most = most.max(at_once);
    }
    (usize::try_from(most).unwrap_or(0), failed)
}

/// `max_active_servers` counts reader instances' connections with everyone else's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_active_servers_caps_the_readers_at_work_too() {
    let (capped, failed) = readers_at_work(2).await;
    assert_eq!(failed, 0, "the excess waits, it does not fail");
    assert!(capped <= 2, "{capped} reader transactions at work at once under a cap of 2");
    let (uncapped, _) = readers_at_work(0).await;
    assert!(
        uncapped > 2,
        "without the cap the crowd puts {uncapped} to work at once (the count can see a cap that does not hold)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_log_in_with_what_clients_prove_through_the_writers_pool_scram_key_or_own_password() {
    let cluster = cluster(2).await;
    let (r1, r2) = (cluster.endpoint("reader-1").port(), cluster.endpoint("reader-2").port());
    let oracle = common::direct(cluster.server(cluster.writer())).await;
    let verifier: String = oracle
        .query_one("select rolpassword from pg_authid where rolname = $1", &[&APP_USER.user])
        .await
        .unwrap()
        .get(0);
    // The book holds the user's SCRAM verifier only (SCRAM passthrough on `app_ro`); `pt_ro` takes the
    // client's own password. Neither route lets a read fall back to the writer: a reader that cannot log in
    // fails the read.
    let readers: Vec<String> = cluster.readers().iter().map(|r| cluster.endpoint(r).to_string()).collect();
    let readers = format!("readers = \"{}\"", readers.join(","));
    let writer = cluster.endpoint(cluster.writer());
    let text = format!(
        "listen = \"127.0.0.1:0\"\nclient_auth = \"scram-sha-256\"\nmax_connections_percent = 0\npool_max = 12\n\
         topology_interval = \"100ms\"\nreader_fallback = \"error\"\n\
         [[databases]]\nname = \"app_ro\"\nhost = \"127.0.0.1\"\nport = {wport}\ndbname = \"pgmux\"\n{readers}\n\
         [[databases]]\nname = \"pt_ro\"\nhost = \"127.0.0.1\"\nport = {wport}\ndbname = \"pgmux\"\n{readers}\n\
         auth = \"passthrough\"\n\
         [[users]]\nname = \"{user}\"\npassword = \"{verifier}\"\n",
        wport = writer.port(),
        user = APP_USER.user,
    );
    let handle = Listener::start(Config::from_toml_str(&text).expect("valid")).await.expect("start pgmux");
    for database in ["app_ro", "pt_ro"] {
        let ro = connect(&handle, database).await;
        settles(&ro, database, |_, reader| reader).await;
        let seen = spread(&ro, 100).await;
        let on = |port| seen.get(&port).copied().unwrap_or(0);
        assert_eq!(on(r1) + on(r2), 100, "{database}: every read on a reader: {seen:?}");
        assert!(on(r1) > 0 && on(r2) > 0, "{database}: both readers logged in: {seen:?}");
    }
    handle.shutdown().await;
}
