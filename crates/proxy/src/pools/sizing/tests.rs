//! The control loop against a scripted gauge under paused time: when it reads, what it does with a reading
//! or a failure, what it tells the fleet, and that it waits for the gate.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio_util::task::TaskTracker;

use super::*;
use crate::config::credentials::StaticCredentials;
use crate::config::{Config, SslMode};
use crate::net::tls::ServerTls;
use crate::pools::Pools;

/// Hands out scripted readings (or failures) and records what each call published.
#[derive(Clone, Default)]
struct Script {
    readings: Arc<Mutex<VecDeque<Result<Reading, SizingError>>>>,
    calls: Arc<Mutex<Vec<(Instant, Member)>>>,
    closed: Arc<Mutex<bool>>,
}

impl Script {
    fn push(&self, reading: Result<Reading, SizingError>) {
        self.readings.lock().unwrap().push_back(reading);
    }

    fn calls(&self) -> Vec<(Instant, Member)> {
        self.calls.lock().unwrap().clone()
    }
}

impl Gauge for Script {
    fn read<'a>(&'a mut self, _: &'a ServerPool, me: &'a Member) -> BoxFuture<'a, Result<Reading, SizingError>> {
        self.calls.lock().unwrap().push((Instant::now(), me.clone()));
        let next = self.readings.lock().unwrap().pop_front();
        Box::pin(async move { next.unwrap_or(Err(SizingError::NoRow)) })
    }

    fn close(&mut self) -> BoxFuture<'_, ()> {
        *self.closed.lock().unwrap() = true;
        Box::pin(async {})
    }
}

/// A reading of a server with `max_connections`, 3 reserved, `others` connections of other roles, and
/// this instance's control connection.
fn reading(max_connections: usize, others: usize) -> Reading {
    Reading {
        max_connections,
        superuser_reserved: 3,
        reserved: 0,
        rds_reserved: 0,
        sees_all: true,
        in_use: others + 1,
        others: Vec::new(),
    }
}

fn pool(extra: &str) -> Arc<ServerPool> {
    let text = format!("database_url = \"postgres://app@db.invalid/app\"\nclient_auth = \"trust\"\n{extra}");
    let config = Config::from_toml_str(&text).expect("test configuration");
    let credentials = Arc::new(StaticCredentials::from_config(&config));
    let tls = ServerTls::new(SslMode::Disable, Vec::new()).unwrap();
    let pools = Pools::new(Arc::new(config), credentials, tls, TaskTracker::new(), crate::runtime::stop::Stop::new());
    Arc::clone(pools.first())
}

fn start(pool: &Arc<ServerPool>, script: &Script, gate: Option<oneshot::Receiver<()>>) -> Stop {
    let stop = Stop::new();
    tokio::spawn(run_with(Arc::clone(pool), stop.clone(), gate, script.clone()));
    stop
}

#[tokio::test(start_paused = true)]
async fn a_reading_sets_the_limit_and_the_next_one_comes_after_the_interval() {
    let pool = pool("pool_sizing_interval = \"10s\"");
    assert_eq!(pool.limit(), crate::pools::budget::PROVISIONAL_LIMIT, "before any reading");
    let script = Script::default();
    // 100 slots, 3 reserved: 97 usable, 87 in the budget, less 10 others and our control connection.
    script.push(Ok(reading(100, 10)));
    script.push(Ok(reading(100, 10)));
    script.push(Ok(reading(100, 40)));
    let stop = start(&pool, &script, None);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(pool.limit(), 87 - 10 - 1);
    // The limit changed, so the fleet is told a second later (the second reading publishes it).
    tokio::time::sleep(Duration::from_millis(1400)).await;
    assert_eq!(script.calls().len(), 2);
    assert_eq!(script.calls()[1].1.limit, 76, "the new limit in the tag");
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(script.calls().len(), 2, "no third reading before pool_sizing_interval");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(script.calls().len(), 3);
    assert_eq!(pool.limit(), 87 - 40 - 1, "others took more: the limit follows");
    stop.begin_graceful();
}

#[tokio::test(start_paused = true)]
async fn a_failed_reading_keeps_the_limit_and_retries_back_off() {
    let pool = pool("pool_sizing_interval = \"10s\"");
    let script = Script::default();
    script.push(Ok(reading(100, 10)));
    let stop = start(&pool, &script, None);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let planned = pool.limit();
    // The script has run out: every later reading fails, the first of them when the new limit is published.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(pool.limit(), planned, "a failure keeps the limit in force");
    let times: Vec<Instant> = script.calls().into_iter().map(|(t, _)| t).collect();
    let gaps: Vec<u64> = times.windows(2).map(|w| (w[1] - w[0]).as_millis() as u64).collect();
    // Retries start at half a second and double (rounded up to the loop's 250 ms tick); a changed pool
    // does not make them come sooner.
    assert!(gaps.len() >= 4, "{gaps:?}");
    assert!((1_000..=1_250).contains(&gaps[0]), "{gaps:?}");
    assert!((500..=750).contains(&gaps[1]), "{gaps:?}");
    for pair in gaps[1..].windows(2) {
        assert!(pair[1] >= 2 * pair[0] - 250, "retries must back off: {gaps:?}");
    }
    stop.begin_graceful();
}

/// A pool about to grow asks for a fresh reading first (`checkout::room_to_grow`); when the attempt fails (the
/// control connection lost in a failover), it goes on at once with the limit it has, not after its whole wait.
#[tokio::test(start_paused = true)]
async fn a_pool_waiting_to_grow_goes_on_as_soon_as_the_reading_fails() {
    let pool = pool("pool_sizing_interval = \"10s\"");
    let script = Script::default();
    script.push(Ok(reading(100, 10)));
    let stop = start(&pool, &script, None);
    // Past the first reading and the failed republish; the next retry is not due yet.
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    let calls = script.calls().len();
    let asked = Instant::now();
    let fresh = pool.globals().budget.refresh_if_older(Duration::ZERO, Duration::from_secs(1)).await;
    assert!(!fresh, "the reading failed");
    assert_eq!(script.calls().len(), calls + 1, "the wish made sizing read at once");
    assert!(asked.elapsed() < Duration::from_millis(100), "waited {:?} for a reading that had failed", asked.elapsed());
    stop.begin_graceful();
}

#[tokio::test(start_paused = true)]
async fn the_tag_says_what_this_instance_holds_and_may_hold_and_pool_max_counts_the_control_connection() {
    let pool = pool("pool_max = 5");
    let script = Script::default();
    script.push(Ok(reading(100, 10)));
    let stop = start(&pool, &script, None);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (_, me) = script.calls()[0].clone();
    assert_eq!((me.open, me.limit, me.cap), (0, 2, Some(4)), "provisional limit, pool cap 5 - 1");
    assert_eq!(pool.limit(), 4, "a share of 76, capped at pool_max less the control connection");
    stop.begin_graceful();
}

#[tokio::test(start_paused = true)]
async fn nothing_is_read_before_the_gate_opens_and_the_gauge_is_closed_at_shutdown() {
    let pool = pool("");
    let script = Script::default();
    script.push(Ok(reading(100, 10)));
    let (open, gate) = oneshot::channel();
    let stop = start(&pool, &script, Some(gate));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(script.calls().is_empty(), "read before the gate opened");
    open.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(script.calls().len(), 1);
    stop.begin_graceful();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(*script.closed.lock().unwrap(), "the control connection is closed at shutdown");
}

#[tokio::test(start_paused = true)]
async fn with_sizing_off_there_is_no_reading_and_the_limit_is_pool_max() {
    let pool = pool("max_connections_percent = 0\npool_max = 7");
    let script = Script::default();
    let stop = start(&pool, &script, None);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(script.calls().is_empty());
    assert_eq!(pool.limit(), 7);
    stop.begin_graceful();
}
