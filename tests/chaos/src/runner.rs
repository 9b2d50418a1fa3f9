//! One scenario against one target, start to end: a fresh topology, the target started in front of it, the
//! workload and the observers on the driver's runtime while the fault is injected from a thread of its own,
//! then the ledger checked on the final writer and everything stopped.

use std::collections::{HashMap, HashSet};
use std::thread;
use std::time::{Duration, Instant};

use pgmux_testkit::APP_USER;
use pgmux_testkit::toxiproxy::ToxiClient;
use serde::Serialize;
use tokio::runtime::Runtime;
use tokio_postgres::{Config, NoTls, SimpleQueryMessage};

use crate::clock::Clock;
use crate::faults::{self, FaultEvents, FaultTiming, Scenario};
use crate::hosts::HostsFile;
use crate::target::{LISTEN, Target, TargetKind, TargetSettings};
use crate::topology::{NODE_A, Seed, Topology, admin_sql};
use crate::workload::{self, LockWatch, Plan, READER_ROUTE, Record};

/// Reader clients in the reader scenario.
const READERS: u32 = 4;

/// Everything a scenario run needs that does not change between runs.
#[derive(Debug)]
pub struct Bench<'a> {
    pub seed: &'a Seed,
    pub hosts: &'a HostsFile,
    pub toxi: ToxiClient,
    pub settings: &'a TargetSettings,
    pub plan: &'a Plan,
    pub timing: &'a FaultTiming,
    pub runtime: &'a Runtime,
}

/// What one run of one scenario against one target recorded.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioRun {
    pub scenario: Scenario,
    pub target: TargetKind,
    pub run: u32,
    pub events: FaultEvents,
    pub record: Record,
    pub lock: Option<LockWatch>,
    /// (ms, app connections on A) sampled every 100 ms after the fault, for scenarios that demote A.
    pub demoted_samples: Vec<(f64, Option<i64>)>,
    pub ledger: LedgerCheck,
    /// The same check for each route's clients alone, when there is more than one route.
    pub ledger_by_route: Vec<(String, LedgerCheck)>,
    /// Set when the target had exited by itself before we stopped it (a crash).
    pub target_exit: Option<String>,
    /// Set when the run could not be carried out (setup failed); nothing else is meaningful then.
    pub error: Option<String>,
}

/// Acknowledged writes against the ledger table on the final writer.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LedgerCheck {
    pub acked: u64,
    pub rows: u64,
    /// Acknowledged but not in the table.
    pub lost: u64,
    /// (client, seq) pairs present more than once: a write replayed after it had committed.
    pub duplicated: u64,
    /// In the table but never acknowledged (allowed only after an ambiguous failure).
    pub unacked_present: u64,
    pub error: Option<String>,
}

impl Bench<'_> {
    pub fn run(&self, scenario: Scenario, target: TargetKind, run: u32) -> ScenarioRun {
        let mut result = ScenarioRun {
            scenario,
            target,
            run,
            events: FaultEvents::default(),
            record: Record::default(),
            lock: None,
            demoted_samples: Vec::new(),
            ledger: LedgerCheck::default(),
            ledger_by_route: Vec::new(),
            target_exit: None,
            error: None,
        };
        if let Err(e) = self.run_into(&mut result) {
            result.error = Some(e);
        }
        result
    }

    fn run_into(&self, out: &mut ScenarioRun) -> Result<(), String> {
        let mut topo = Topology::build(self.seed, self.hosts, self.toxi)?;
        // The reader scenario's target also serves the reader route, on B.
        let reads = out.scenario.reads();
        let settings = TargetSettings { reader: reads, ..self.settings.clone() };
        let mut target = Target::start(out.target, &settings)?;
        for route in self.plan.routes.iter().map(String::as_str).chain(reads.then_some(READER_ROUTE)) {
            self.runtime.block_on(wait_serving(&target, route))?;
        }
        let plan = Plan {
            lock_holder: out.scenario == Scenario::ClientKill,
            readers: if reads { READERS } else { 0 },
            ..self.plan.clone()
        };
        let sessions = self.runtime.block_on(workload::prepare(&plan, client_config()));
        let cold = sessions.iter().filter(|s| !s.warmed_up()).count();
        if cold > 0 {
            return Err(format!("{cold} of {} clients could not connect and write before the fault", sessions.len()));
        }
        let clock = Clock::fault_in(Duration::from_millis(plan.lead_ms));
        let a_admin = topo.a.admin_conninfo();
        let demotes = out.scenario.demotes_a();
        let scenario = out.scenario;
        let (events, (record, lock, samples)) = thread::scope(|scope| {
            let injector = scope.spawn(|| faults::inject(scenario, &mut topo, self.timing, clock));
            let observed = self.runtime.block_on(async {
                let lock = async {
                    if plan.lock_holder {
                        Some(workload::lock_holder(client_config(), node_config(), clock, plan.run_ms).await)
                    } else {
                        None
                    }
                };
                let samples =
                    async { if demotes { watch_connections(&a_admin, clock, plan.run_ms).await } else { Vec::new() } };
                tokio::join!(workload::run(sessions, &plan, clock), lock, samples)
            });
            let events = injector.join().unwrap_or_else(|_| FaultEvents {
                error: Some("the fault injector panicked".into()),
                ..FaultEvents::default()
            });
            (events, observed)
        });
        out.events = events;
        out.record = record;
        out.lock = lock;
        out.demoted_samples = samples;
        // Heal whatever a failed injection left behind before reading the ledger.
        topo.a.signal_all(libc::SIGCONT);
        let _ = self.toxi.reset();
        let writer = if out.scenario.final_writer_is_b() { &topo.b } else { &topo.a };
        out.ledger = self.runtime.block_on(check_ledger(&writer.admin_conninfo(), &out.record.acked, None));
        let routes = out.record.routes();
        if routes.len() > 1 {
            for route in routes {
                let mine = out.record.of_route(&route);
                let clients: HashSet<u32> = mine.ops.iter().map(|op| op.client).collect();
                let check = self.runtime.block_on(check_ledger(&writer.admin_conninfo(), &mine.acked, Some(&clients)));
                out.ledger_by_route.push((route, check));
            }
        }
        out.target_exit = target.stop();
        if out.target_exit.is_some() {
            out.target_exit =
                Some(format!("{}\n{}", out.target_exit.take().unwrap_or_default(), target.output_tail(20)));
        }
        Ok(())
    }
}

/// The workload's connection settings: the target, as the app role, with SCRAM.
pub fn client_config() -> Config {
    let (host, port) = LISTEN.split_once(':').unwrap_or(("127.0.0.1", "6432"));
    let mut config = Config::new();
    config
        .host(host)
        .port(port.parse().unwrap_or(6432))
        .user(APP_USER.user)
        .password(APP_USER.password)
        .dbname("pgmux")
        .application_name("pgmux-chaos")
        .connect_timeout(Duration::from_secs(5));
    config
}

/// The lock observer's connection: node A directly, as the app role (it owns the table).
fn node_config() -> Config {
    let mut config = Config::new();
    config
        .host(NODE_A)
        .port(crate::node::PG_PORT)
        .user(APP_USER.user)
        .password(APP_USER.password)
        .dbname("pgmux")
        .application_name("pgmux-chaos-observer")
        .connect_timeout(Duration::from_secs(5));
    config
}

/// Wait until a query through the target's `route` works (it may start before it can reach the database).
async fn wait_serving(target: &Target, route: &str) -> Result<(), String> {
    let started = Instant::now();
    let mut last = String::new();
    let mut config = client_config();
    config.dbname(route);
    while started.elapsed() < Duration::from_secs(20) {
        match config.connect(NoTls).await {
            Ok((client, connection)) => {
                let task = tokio::spawn(connection);
                let ok = client.simple_query("SELECT 1").await;
                task.abort();
                match ok {
                    Ok(_) => return Ok(()),
                    Err(e) => last = crate::topology::describe(&e),
                }
            }
            Err(e) => last = crate::topology::describe(&e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("{} does not serve queries on {route}: {last}\n{}", target.kind.name(), target.output_tail(20)))
}

/// Count the app role's connections on A every 100 ms from the fault to the end of the run, on one
/// connection of the superuser's (reopened when A restarts).
async fn watch_connections(conninfo: &str, clock: Clock, run_ms: u64) -> Vec<(f64, Option<i64>)> {
    let sql = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE usename = '{}' AND backend_type = 'client backend'",
        APP_USER.user
    );
    let mut samples = Vec::new();
    let mut session: Option<(tokio_postgres::Client, tokio::task::JoinHandle<()>)> = None;
    tokio::time::sleep_until(clock.instant_at(0.0)).await;
    let end = clock.instant_at(run_ms as f64);
    while tokio::time::Instant::now() < end && samples.len() < 10_000 {
        let at = clock.now_ms();
        if session.as_ref().is_none_or(|(client, _)| client.is_closed()) {
            let connect = tokio::time::timeout(Duration::from_secs(1), tokio_postgres::connect(conninfo, NoTls));
            session = match connect.await {
                Ok(Ok((client, connection))) => Some((client, tokio::spawn(async move { drop(connection.await) }))),
                _ => None,
            };
        }
        let mut count = None;
        if let Some((client, _)) = &session
            && let Ok(Ok(rows)) = tokio::time::timeout(Duration::from_secs(1), client.simple_query(&sql)).await
        {
            count = rows.iter().find_map(|m| match m {
                SimpleQueryMessage::Row(row) => row.get(0).and_then(|n| n.parse().ok()),
                _ => None,
            });
        }
        samples.push((at, count));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some((_, task)) = session {
        task.abort();
    }
    samples
}

/// Acknowledged writes against the ledger; with `only`, the rows of those clients alone.
async fn check_ledger(conninfo: &str, acked: &[(u32, u32)], only: Option<&HashSet<u32>>) -> LedgerCheck {
    let mut check = LedgerCheck { acked: acked.len() as u64, ..LedgerCheck::default() };
    let rows = match admin_sql(conninfo, "SELECT client, seq, count(*) FROM ledger GROUP BY 1, 2").await {
        Ok(rows) => rows,
        Err(e) => {
            check.error = Some(format!("cannot read the ledger on the final writer: {e}"));
            return check;
        }
    };
    let mut present: HashMap<(u32, u32), u64> = HashMap::new();
    for message in rows {
        if let SimpleQueryMessage::Row(row) = message {
            let num = |i: usize| row.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            let key = (num(0) as u32, num(1) as u32);
            if only.is_some_and(|clients| !clients.contains(&key.0)) {
                continue;
            }
            present.insert(key, num(2));
            check.rows += num(2);
        }
    }
    let acked_set: HashSet<(u32, u32)> = acked.iter().copied().collect();
    check.lost = acked_set.iter().filter(|k| !present.contains_key(k)).count() as u64;
    check.duplicated = present.values().filter(|&&n| n > 1).count() as u64;
    check.unacked_present = present.keys().filter(|k| !acked_set.contains(k)).count() as u64;
    check
}
