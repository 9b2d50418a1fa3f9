//! Sizing the pool from the database: the budget left by other clients, back-pressure when the database is
//! full, two instances sharing one budget, and a new `max_connections` picked up.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use pgmux_proxy::pools::budget::Member;
use pgmux_proxy::{Config, Listener, ListenerHandle};
use pgmux_testkit::{APP_USER, PgOptions, PgServer};
use tokio_postgres::Client;

use crate::common;

/// pgmux with sizing on (the defaults but a quick refresh) and `extra` settings. Clients are trusted: a
/// hundred SCRAM logins in a debug build would keep the test's runtime busy for seconds.
fn sizing_config(pg: &PgServer, extra: &str) -> Config {
    let interval = if extra.contains("pool_sizing_interval") { "" } else { "pool_sizing_interval = \"200ms\"\n" };
    let text = format!(
        "listen = \"127.0.0.1:0\"\ndatabase_url = {:?}\nclient_auth = \"trust\"\n{interval}{extra}\n",
        pg.url(&APP_USER)
    );
    Config::from_toml_str(&text).expect("test config is valid")
}

async fn start_pg(max_connections: u32) -> PgServer {
    let opts = PgOptions { max_connections, ..Default::default() };
    tokio::task::spawn_blocking(move || PgServer::start_with(&opts)).await.expect("start PostgreSQL")
}

/// `n` connections straight to PostgreSQL as the superuser, held by "another client".
async fn hold(pg: &PgServer, n: usize) -> Vec<Client> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        held.push(common::direct(pg).await);
    }
    held
}

/// The pgmux instances visible in `pg_stat_activity`.
async fn fleet(oracle: &Client) -> Vec<Member> {
    let rows = oracle
        .query("select application_name from pg_stat_activity where application_name like 'pgmux %'", &[])
        .await
        .expect("read the tags");
    rows.iter().filter_map(|r| Member::parse(r.get(0))).collect()
}

/// Waits until `want` holds for the fleet's tags; panics with what it saw after 15 s.
async fn await_fleet(oracle: &Client, what: &str, want: impl Fn(&[Member]) -> bool) -> Vec<Member> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let seen = fleet(oracle).await;
        if want(&seen) {
            return seen;
        }
        assert!(tokio::time::Instant::now() < deadline, "waited 15 s for {what}; the fleet shows {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Samples the backends of pgmux's role (pool, control and probe connections) every 10 ms until dropped.
struct Sampler {
    peak: Arc<AtomicI64>,
    running: Arc<AtomicBool>,
}

impl Sampler {
    fn start(oracle: Client) -> Sampler {
        let peak = Arc::new(AtomicI64::new(0));
        let running = Arc::new(AtomicBool::new(true));
        let (p, r) = (Arc::clone(&peak), Arc::clone(&running));
        tokio::spawn(async move {
            while r.load(Ordering::Relaxed) {
                let Ok(n) = common::try_pgmux_connections(&oracle).await else { return };
                p.fetch_max(n, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        Sampler { peak, running }
    }

    fn peak(&self) -> i64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.running.store(false, Ordering::Relaxed);
    }
}

/// `clients` clients, spread over `proxies`, each connecting and running `rounds` transactions of
/// `select pg_sleep(sleep)`; returns the errors, as text.
async fn load(proxies: &[&ListenerHandle], clients: usize, rounds: usize, sleep: f64) -> Vec<String> {
    let mut tasks = Vec::new();
    for i in 0..clients {
        let addr = proxies[i % proxies.len()].addr;
        tasks.push(tokio::spawn(async move {
            let client = match common::connect(addr, &APP_USER, |_| {}).await {
                Ok(c) => c,
                Err(e) => return Err(format!("connect: {}", common::message(&e))),
            };
            for _ in 0..rounds {
                if let Err(e) = client.simple_query(&format!("select pg_sleep({sleep})")).await {
                    return Err(format!(
                        "query: {} {}",
                        e.as_db_error().map_or("", |d| d.code().code()),
                        common::message(&e)
                    ));
                }
            }
            Ok(())
        }));
    }
    let mut errors = Vec::new();
    for t in tasks {
        if let Err(e) = t.await.expect("client task") {
            errors.push(e);
        }
    }
    errors
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgmux_stays_within_what_another_client_leaves() {
    // max_connections 40, 3 reserved: 37 usable; 90 % of it is a budget of 33.
    let pg = start_pg(40).await;
    let oracle = common::direct(&pg).await;
    let _other = hold(&pg, 30).await;
    let proxy = Listener::start(sizing_config(&pg, "")).await.expect("start pgmux");
    // Everyone else holds 31 (the other client's 30 and this test's oracle): 33 - 31 leaves 2, one of them
    // for pgmux's control connection.
    let seen = await_fleet(&oracle, "the control connection with limit 1", |f| f.len() == 1 && f[0].limit == 1).await;
    assert_eq!(seen[0].cap, None);

    let sampler = Sampler::start(common::direct(&pg).await);
    let errors = load(&[&proxy], 100, 1, 0.1).await;
    assert!(errors.is_empty(), "{} of 100 clients failed: {:?}", errors.len(), &errors[..errors.len().min(5)]);
    // The sampler's own connection is one more outsider; pgmux must still not exceed the budget's rest.
    let headroom = 40 - 3 - 30;
    let peak = sampler.peak();
    assert!(
        (1..=2).contains(&peak),
        "pgmux held {peak} connections at once; the budget left it 2 (headroom {headroom})"
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_right_after_another_client_took_most_slots_reads_the_database_again_before_growing() {
    // Budget 33. A slow refresh, so that the reading is stale when the burst comes, and growth at once (no
    // lazy growth), so that the burst would take every slot before the next tick of the sizing loop.
    let pg = start_pg(40).await;
    let oracle = common::direct(&pg).await;
    let config = sizing_config(&pg, "pool_sizing_interval = \"60s\"\npool_grow_after = \"0s\"");
    let proxy = Listener::start(config).await.expect("start pgmux");
    await_fleet(&oracle, "the first reading", |f| f.len() == 1 && f[0].limit > 20).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Another client takes 25 slots; then a burst through pgmux.
    let _other = hold(&pg, 25).await;
    let sampler = Sampler::start(common::direct(&pg).await);
    let errors = load(&[&proxy], 100, 2, 0.3).await;
    assert!(errors.is_empty(), "{} of 100 clients failed: {:?}", errors.len(), &errors[..errors.len().min(5)]);
    // Outsiders now: 25, the oracle and the sampler. 33 - 27 leaves 6, one for the control connection.
    let peak = sampler.peak();
    assert!(peak <= 6 + 1, "pgmux held {peak} connections on a reading from before the others came (want <= 6)");
    // Without reading again, the burst opens connections into the slots the others left until the database
    // refuses them (checked: this assertion fails with the re-read switched off).
    let log = pg.log_tail(2000);
    assert!(!log.contains("remaining connection slots are reserved"), "pgmux drove the database to refuse logins");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_database_makes_clients_wait_not_fail() {
    // Sizing off and pool_max 20, so pgmux asks for more than the database has left: the superuser's 31
    // connections leave pgmux's role 37 - 31 = 6, and the 7th login is refused with SQLSTATE 53300.
    let pg = start_pg(40).await;
    let _other = hold(&pg, 30).await;
    let sampler = Sampler::start(common::direct(&pg).await);
    // Growth at once, so that the load asks for more than 6 however slowly a busy machine runs its clients.
    let config = sizing_config(&pg, "max_connections_percent = 0\npool_max = 20\npool_grow_after = \"0s\"");
    let proxy = Listener::start(config).await.expect("start pgmux");
    let errors = load(&[&proxy], 60, 1, 0.1).await;
    assert!(errors.is_empty(), "{} of 60 clients failed: {:?}", errors.len(), &errors[..errors.len().min(5)]);
    assert!(sampler.peak() <= 6, "pgmux held {} connections", sampler.peak());
    let log = pg.log_tail(2000);
    assert!(
        log.contains("remaining connection slots are reserved"),
        "the database never refused pgmux, so back-pressure was not exercised:\n{}",
        pg.log_tail(20)
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_budget() {
    let pg = start_pg(40).await;
    let oracle = common::direct(&pg).await;
    let a = Listener::start(sizing_config(&pg, "")).await.expect("start pgmux a");
    let b = Listener::start(sizing_config(&pg, "")).await.expect("start pgmux b");
    // Budget 33; the oracle and the sampler are outsiders (2); two control connections: 29 left, 14 each
    // and one over, for the instance whose id sorts first.
    // The sampler connects first, so that no reading sees one outsider fewer than the load will.
    let sampler = Sampler::start(common::direct(&pg).await);
    let seen = await_fleet(&oracle, "two instances at 15 and 14", |f| {
        let mut limits: Vec<usize> = f.iter().map(|m| m.limit).collect();
        limits.sort_unstable();
        limits == [14, 15]
    })
    .await;
    let first = seen.iter().min_by(|a, b| a.id.cmp(&b.id)).expect("two instances");
    assert_eq!(first.limit, 15, "the spare connection goes to the first id: {seen:?}");
    assert_ne!(seen[0].id, seen[1].id);

    // 80 clients of 3 transactions of 0.2 s: far more than 33 connections could serve at once.
    let errors = load(&[&a, &b], 80, 3, 0.2).await;
    assert!(errors.is_empty(), "{} of 80 clients failed: {:?}", errors.len(), &errors[..errors.len().min(5)]);
    let peak = sampler.peak();
    // Each instance publishes what it holds up to a second late, so a reading can count one connection
    // fewer than there is and a share can run one over for a refresh; the 10 % of usable connections
    // outside the budget (37 - 33) is there for that. Beyond one, the split is wrong.
    assert!(peak <= 33 - 2 + 1, "the two instances held {peak} connections together; the budget left them 31");
    assert!(peak + 2 <= 37, "{peak} connections and 2 outsiders exceed the 37 usable");
    assert!(peak > 15 + 1, "peak {peak}: both instances should have grown past one instance's share");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_started_together_stays_within_its_budget_under_load() {
    // Budget 33 of 37 usable. Four instances start one after another, each taking its first reading before
    // the next exists: the first sees a fleet of one (a share of 30), the second of two, and so on, which
    // adds up to twice the budget. The load comes at once, before any periodic reading (every 60 s), with
    // trusted logins and growth at once, so that each instance could fill its first share in well under a
    // second. The sampler and the oracle are the outsiders (2): the fleet, control connections included,
    // may hold 31.
    let opts = PgOptions { max_connections: 40, trust_loopback: true, ..Default::default() };
    let pg = tokio::task::spawn_blocking(move || PgServer::start_with(&opts)).await.expect("start PostgreSQL");
    let oracle = common::direct(&pg).await;
    let sampler = Sampler::start(common::direct(&pg).await);
    let config = || sizing_config(&pg, "pool_sizing_interval = \"60s\"\npool_grow_after = \"0s\"");
    let mut fleet_of = Vec::new();
    for n in 1..=4 {
        fleet_of.push(Listener::start(config()).await.expect("start pgmux"));
        await_fleet(&oracle, "the new instance's first reading", |f| f.len() == n).await;
    }
    let proxies: Vec<&ListenerHandle> = fleet_of.iter().collect();
    let errors = load(&proxies, 80, 3, 0.2).await;
    assert!(errors.is_empty(), "{} of 80 clients failed: {:?}", errors.len(), &errors[..errors.len().min(5)]);
    // Without a reading before each new connection, the first instances grow on their first shares until
    // the database refuses logins (checked: both assertions fail with the re-read left to readings older
    // than a second). An instance reads, then opens, so the others' opens in between are unseen: up to one
    // each, which the 4 usable connections outside the budget absorb.
    let peak = sampler.peak();
    assert!(peak <= 31 + 3, "the fleet held {peak} connections at once; its budget left it 31");
    let log = pg.log_tail(4000);
    assert!(!log.contains("remaining connection slots are reserved"), "the fleet drove the database to refuse logins");
    for proxy in fleet_of {
        proxy.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_max_connections_is_picked_up() {
    let mut pg = start_pg(40).await;
    let oracle = common::direct(&pg).await;
    let proxy = Listener::start(sizing_config(&pg, "")).await.expect("start pgmux");
    // Budget 33, the oracle outside, the control connection: 31.
    await_fleet(&oracle, "limit 31", |f| f.len() == 1 && f[0].limit == 31).await;
    drop(oracle);

    let mut pg = tokio::task::spawn_blocking(move || {
        pg.restart_with(&PgOptions { max_connections: 60, ..Default::default() });
        pg
    })
    .await
    .expect("restart PostgreSQL");
    // 57 usable, budget 51, less the oracle and the control connection: 49.
    let oracle = common::direct(&pg).await;
    await_fleet(&oracle, "limit 49 after the restart", |f| f.len() == 1 && f[0].limit == 49).await;
    let client = common::connect(proxy.addr, &APP_USER, |_| {}).await.expect("connect through pgmux");
    assert_eq!(common::scalar(&client, "select 1").await, "1");
    drop(client);
    proxy.shutdown().await;
    pg.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_pool_size_connections_are_kept_warm() {
    let pg = start_pg(40).await;
    let oracle = common::direct(&pg).await;
    let config = sizing_config(
        &pg,
        "max_connections_percent = 0\npool_max = 4\nmin_pool_size = 2\nserver_idle_timeout = \"1s\"",
    );
    let proxy = Listener::start(config).await.expect("start pgmux");
    // Opened without any client asking.
    let warm =
        common::eventually(Duration::from_secs(5), || async { common::pgmux_backends(&oracle).await == 2 }).await;
    assert!(warm, "{} server connections, want the 2 of min_pool_size", common::pgmux_backends(&oracle).await);

    // Three transactions at once take a third connection; once idle past server_idle_timeout it closes, and
    // the two warm ones stay.
    let mut clients = Vec::new();
    for _ in 0..3 {
        let c = common::connect(proxy.addr, &APP_USER, |_| {}).await.expect("connect through pgmux");
        c.batch_execute("begin; select 1").await.expect("begin");
        clients.push(c);
    }
    assert_eq!(common::pgmux_backends(&oracle).await, 3);
    for c in &clients {
        c.batch_execute("commit").await.expect("commit");
    }
    let committed = common::scalar(&oracle, "select now()::text").await;
    let shrunk =
        common::eventually(Duration::from_secs(5), || async { common::pgmux_backends(&oracle).await == 2 }).await;
    assert!(shrunk, "{} server connections after the idle timeout, want 2", common::pgmux_backends(&oracle).await);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(common::pgmux_backends(&oracle).await, 2, "the warm connections were closed as idle");
    let reopened = common::scalar(
        &oracle,
        &format!(
            "select count(*) from pg_stat_activity where usename = '{}' and backend_start > '{committed}'",
            APP_USER.user
        ),
    )
    .await;
    assert_eq!(reopened, "0", "the warm connections were closed as idle and opened again");
    drop(clients);
    proxy.shutdown().await;
}

/// What the Lambda extension relies on during Init: pgmux's own database I/O (the control connection,
/// `min_pool_size`) waits for the gate, while clients would be served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_reaches_the_database_before_the_gate_opens() {
    let mut pg = start_pg(40).await;
    let oracle = common::direct(&pg).await;
    let config = sizing_config(&pg, "pool_max = 4\nmin_pool_size = 1");
    let mut proxy = Listener::bind(config).await.expect("bind pgmux");
    let (open, gate) = tokio::sync::oneshot::channel();
    proxy.hold_database_until(gate);
    let stop = proxy.stop();
    let running = tokio::spawn(proxy.run());
    // Unheld, the control connection and the warm one open at once (the refresh is every 200 ms).
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(common::pgmux_backends(&oracle).await, 0, "pgmux reached the database before the gate opened");
    open.send(()).expect("pgmux still holds the gate");
    let both =
        common::eventually(Duration::from_secs(5), || async { common::pgmux_backends(&oracle).await == 2 }).await;
    assert!(
        both,
        "{} server connections once the gate opened, want the control and the warm one",
        common::pgmux_backends(&oracle).await
    );
    stop.begin_graceful();
    running.await.expect("pgmux stopped");
    pg.stop();
}

/// Every connection of pgmux's user (control connection and probes included), as the database sees them.
async fn all_of_pgmux(oracle: &Client) -> i64 {
    common::try_pgmux_connections(oracle).await.expect("count pgmux's connections")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_pgmux_holds_nothing_so_the_database_may_sleep_and_a_client_waits_out_its_resumption() {
    let mut pg = start_pg(100).await;
    let handle = Listener::start(sizing_config(&pg, "server_idle_timeout = \"1s\"\nquery_wait_timeout = \"30s\""))
        .await
        .expect("start pgmux");
    let addr = handle.addr;
    let client = common::connect(addr, &APP_USER, |_| {}).await.unwrap();
    assert_eq!(common::scalar(&client, "select 1").await, "1");
    {
        let oracle = common::direct(&pg).await;
        assert!(all_of_pgmux(&oracle).await >= 2, "a pool connection and the control connection while busy");
        // Quiet for server_idle_timeout: the pool's connections close, then the control connection.
        let slept = common::eventually(Duration::from_secs(10), || async { all_of_pgmux(&oracle).await == 0 }).await;
        assert!(slept, "pgmux still holds {} connections", all_of_pgmux(&oracle).await);
    }
    // The database stops (an Aurora pause); a query arrives, and the database comes back 20 s later (Aurora
    // Serverless v2 resumes in 15–30 s).
    const RESUMES_AFTER: Duration = Duration::from_secs(20);
    let stop = std::time::Instant::now();
    tokio::task::block_in_place(|| pg.stop_fast());
    let asked = tokio::spawn(async move { client.simple_query("select 42").await.map(|_| ()) });
    tokio::time::sleep(RESUMES_AFTER).await;
    let opts = PgOptions::default();
    tokio::task::block_in_place(|| pg.restart_with(&opts));
    let answered = asked.await.unwrap();
    assert!(answered.is_ok(), "the query waited out the resumption: {answered:?}");
    assert!(stop.elapsed() >= RESUMES_AFTER);
    let oracle = common::direct(&pg).await;
    assert!(all_of_pgmux(&oracle).await >= 1, "sizing and the pool came back with the demand");
    handle.shutdown().await;
}
