//! The network lab's workloads ([`crate::netlab`]): W1n–W3n, W2un, W3un (pgbench on the application host), W5n (the
//! Lambda burst), W8 (connect, `select 1`, disconnect) and W9 (a fleet of poolers against a small
//! `max_connections`). The clients run on the application host; server connections are counted from the
//! database host while they do.

use std::time::Duration;

use tokio::sync::watch;
use tokio_postgres::{Client, Config, NoTls};

use crate::endpoint::Endpoint;
use crate::jobs::{FleetReport, Job, JobReport};
use crate::netlab::NetLab;
use crate::results::{Metric, Outcome, Target};
use crate::suite::{BurstRows, CpuMark, Figures, PgbenchRows, SLACK, Server, Suite, fail_all, rows_for};
use crate::workload::ServerMonitor;
use crate::{PgmuxProcess, interrupt};

/// How often W9 samples the server's connections: its peaks may be short.
const FLEET_SAMPLING: Duration = Duration::from_millis(50);

/// How often W9's other application opens a connection of its own while the fleet runs.
const NEWCOMER_EVERY: Duration = Duration::from_millis(100);

/// A W9 fleet's instances, stopped when dropped.
enum Fleet {
    Pgmux(Vec<PgmuxProcess>),
    PgBouncer(Vec<crate::pgbouncer::PgBouncerProcess>),
    None,
}

impl Suite<'_> {
    /// The network lab, with PostgreSQL at the plan's `max_connections` (W9 lowers it).
    fn net_for(&mut self, max_connections: u32) -> Result<&mut NetLab, String> {
        let net = self.lab.net(self.plan)?;
        net.use_max_connections(max_connections)?;
        Ok(net)
    }

    /// W1n–W3n: pgbench on the application host, over TCP; W2un, W3un: on each pooler's Unix socket there.
    pub(crate) fn net_pgbench(&mut self, target: Target, unix: bool, mode: &[&str], rows: PgbenchRows) -> Figures {
        let placed = self.net_for(self.plan.max_connections).and_then(|net| {
            let endpoint = net.endpoint(target, unix)?;
            let server = Server { pid: net.poolers.pid(target), port: net.direct.port };
            Ok((endpoint, server, net.pgbench.clone()))
        });
        match placed {
            Ok((endpoint, server, pgbench)) => self.run_pgbench(&pgbench, &endpoint, server, target, mode, rows),
            Err(e) => fail_all(&rows_for(rows, target), &e),
        }
    }

    /// W5n: the Lambda burst against a freshly started pooler on the application host (or directly, each
    /// invocation with its own TLS connection).
    pub(crate) fn net_burst(&mut self, target: Target) -> Figures {
        let rows = BurstRows::new(
            [Metric::NetBurstServerPeak, Metric::NetBurstQueryP50, Metric::NetBurstQueryP99, Metric::NetBurstErrors],
            Metric::NetBurstCpu,
            target,
        );
        let metrics = rows.all();
        let plan = self.plan;
        let limit = Duration::from_secs_f64(plan.burst_secs + 2.0 * plan.burst_think_secs) + SLACK;
        let outcome = self.net_for(plan.max_connections).and_then(|net| {
            let endpoint = net.fresh(target)?;
            let job = Job::Burst {
                endpoint,
                clients: plan.burst_clients,
                duration_secs: plan.burst_secs,
                think_secs: plan.burst_think_secs,
            };
            Ok((job, net.monitor(Duration::from_millis(100)), net.poolers.pid(target)))
        });
        let (job, monitor, pid) = match outcome {
            Ok(ready) => ready,
            Err(e) => return fail_all(&metrics, &e),
        };
        let mut cpu_used = Err("the burst did not run".to_owned());
        let ran = self.watched(monitor, |net| {
            let cpu = CpuMark::now(pid);
            let report = net.run_job(&job, limit);
            cpu_used = cpu.used_finely();
            report
        });
        match ran {
            Ok((JobReport::Burst(report), peak)) => {
                self.burst_figures("W5n", target, &report, Some(peak), &rows, cpu_used)
            }
            Ok(_) => fail_all(&metrics, "the client answered with another report"),
            Err(e) => fail_all(&metrics, &e),
        }
    }

    /// W8: sequential connect, `select 1`, disconnect against a freshly started pooler, or directly.
    pub(crate) fn connects(&mut self, target: Target) -> Figures {
        let metrics = [Metric::ConnectP50, Metric::ConnectP99, Metric::ConnectLoginP50];
        let count = self.plan.connects;
        let limit = Duration::from_secs(count as u64) + SLACK;
        let report = self.net_for(self.plan.max_connections).and_then(|net| {
            let endpoint = net.fresh(target)?;
            net.run_job(&Job::Connects { endpoint, count }, limit)
        });
        match report {
            Ok(JobReport::Connects(report)) => {
                let value = |v: Option<f64>| v.map_or_else(|| Outcome::Failed("no samples".into()), Outcome::Value);
                vec![
                    (Metric::ConnectP50, value(report.total.p50_ms)),
                    (Metric::ConnectP99, value(report.total.p99_ms)),
                    (Metric::ConnectLoginP50, value(report.connect.p50_ms)),
                ]
            }
            Ok(_) => fail_all(&metrics, "the client answered with another report"),
            Err(e) => fail_all(&metrics, &e),
        }
    }

    /// W9: a fleet of poolers (or of direct clients) against `max_connections` small enough to run out,
    /// while another role holds some of it.
    pub(crate) fn fleet(&mut self, target: Target) -> Figures {
        let metrics = [Metric::FleetServerPeak, Metric::FleetErrors, Metric::FleetTps, Metric::FleetOthersRefused];
        match self.run_fleet(target) {
            Ok((report, peak, newcomers)) => {
                let summary = report.error_summary();
                if report.error_count() > 0 {
                    self.note(format!("W9 through {} (round {}): failures {summary}", target.label(), self.round + 1));
                }
                self.results.detail(Metric::FleetErrors, target, self.round, summary);
                if newcomers.refused > 0 {
                    self.note(format!(
                        "W9 through {} (round {}): the other application was refused {} of {} new connections ({})",
                        target.label(),
                        self.round + 1,
                        newcomers.refused,
                        newcomers.tried,
                        newcomers.example
                    ));
                }
                let tps = report.transactions as f64 / report.elapsed_secs.max(1e-9);
                vec![
                    (Metric::FleetServerPeak, Outcome::Value(peak as f64)),
                    (Metric::FleetErrors, Outcome::Value(report.error_count() as f64)),
                    (Metric::FleetTps, Outcome::Value(tps)),
                    (Metric::FleetOthersRefused, Outcome::Value(newcomers.refused as f64)),
                ]
            }
            Err(e) => fail_all(&metrics, &e),
        }
    }

    fn run_fleet(&mut self, target: Target) -> Result<(FleetReport, u64, Newcomers), String> {
        let plan = self.plan;
        let net = self.net_for(plan.fleet_max_connections)?;
        net.poolers.stop();
        if let Some(note) = crate::lab::wait_for_drain(&net.pg) {
            net.note(note);
        }
        let other = net.other_role();
        let held = self.block_on(SLACK, hold(other.clone(), plan.fleet_held))??;
        let net = self.lab.net(plan)?;
        let (fleet, endpoints) = match target {
            Target::Pgmux => {
                let fleet = net.pgmux_fleet(plan.fleet_instances)?;
                let endpoints = fleet.iter().map(|p| Endpoint::tcp(p.listen().ip(), p.listen().port())).collect();
                (Fleet::Pgmux(fleet), endpoints)
            }
            Target::PgBouncer => {
                let fleet = net.bouncer_fleet(plan.fleet_instances)?;
                let ip = net.poolers.bouncer_settings.listen_addr;
                let endpoints = fleet.iter().map(|b| Endpoint::tcp(ip, b.port())).collect();
                (Fleet::PgBouncer(fleet), endpoints)
            }
            Target::Direct => (Fleet::None, vec![net.direct.clone(); plan.fleet_instances]),
        };
        let job = Job::Fleet {
            endpoints,
            clients_each: plan.fleet_clients,
            duration_secs: plan.fleet_secs,
            think_secs: plan.fleet_think_secs,
        };
        let monitor = net.monitor(FLEET_SAMPLING);
        let (stop_newcomers, stopped) = watch::channel(false);
        let newcomers = self.runtime.spawn(newcomers(other, stopped));
        let outcome = self.watched(monitor, |net| net.run_job(&job, plan.fleet_duration() + SLACK));
        let _ = stop_newcomers.send(true);
        let newcomers = self.block_on(SLACK, newcomers)?.map_err(|e| format!("the other application: {e}"))?;
        let net = self.lab.net(plan)?;
        match fleet {
            Fleet::Pgmux(fleet) => fleet.into_iter().for_each(|p| net.poolers.absorb_pgmux(p)),
            Fleet::PgBouncer(fleet) => fleet.into_iter().for_each(|b| net.poolers.absorb_bouncer(b)),
            Fleet::None => {}
        }
        drop(held);
        match outcome? {
            (JobReport::Fleet(report), peak) => Ok((report, peak, newcomers)),
            _ => Err("the client answered with another report".to_owned()),
        }
    }

    /// Run `work` on the network lab while `monitor` counts server connections from the database host;
    /// returns what the work returned and the peak count.
    fn watched<T>(
        &mut self,
        monitor: ServerMonitor,
        work: impl FnOnce(&mut NetLab) -> Result<T, String>,
    ) -> Result<(T, u64), String> {
        let (stop, stopped) = watch::channel(false);
        let sampler = self
            .block_on(SLACK, monitor.start(stopped))?
            .map_err(|e| format!("the server connection sampler: {}", crate::endpoint::describe(&e)))?;
        let outcome = self.lab.net(self.plan).and_then(work);
        let _ = stop.send(true);
        let peak = self.block_on(SLACK, sampler)?.map_err(|e| format!("the server connection sampler: {e}"))?;
        if interrupt::requested() {
            return Err("interrupted".to_owned());
        }
        outcome.map(|value| (value, peak))
    }
}

/// What W9's other application got when it opened connections of its own while the fleet ran.
#[derive(Debug, Default)]
struct Newcomers {
    tried: u64,
    refused: u64,
    /// The first refusal, as the client saw it.
    example: String,
}

/// Another application (a cron job, a migration, an operator's psql) opening a connection every
/// [`NEWCOMER_EVERY`], running `select 1` and closing it, until `stop` turns true: what a fleet of poolers
/// leaves the database's other users.
async fn newcomers(config: Config, mut stop: watch::Receiver<bool>) -> Newcomers {
    let mut ticks = tokio::time::interval(NEWCOMER_EVERY);
    let mut seen = Newcomers::default();
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.wait_for(|&stop| stop) => return seen,
        }
        seen.tried += 1;
        let failure = match tokio::time::timeout(SLACK, config.connect(NoTls)).await {
            Err(_) => Some(format!("no answer within {SLACK:?}")),
            Ok(Err(e)) => Some(crate::endpoint::describe(&e)),
            Ok(Ok((client, connection))) => {
                let task = tokio::spawn(connection);
                let failure = client.simple_query("select 1").await.err().map(|e| crate::endpoint::describe(&e));
                drop(client);
                let _ = task.await;
                failure
            }
        };
        if let Some(failure) = failure {
            seen.refused += 1;
            if seen.example.is_empty() {
                seen.example = failure;
            }
        }
    }
}

/// `count` connections of another role, held open (and closed when dropped).
async fn hold(config: Config, count: usize) -> Result<Vec<Client>, String> {
    let mut held = Vec::with_capacity(count);
    for _ in 0..count {
        let (client, connection) =
            config.connect(NoTls).await.map_err(|e| format!("the other role: {}", crate::endpoint::describe(&e)))?;
        tokio::spawn(connection);
        held.push(client);
    }
    Ok(held)
}
