//! The workloads and the CPU figures, each run against pgmux, PgBouncer and PostgreSQL directly, round by
//! round: W1–W7 on loopback and W2u/W3u over Unix sockets here, the network lab's in [`crate::suite_net`].
//! A step that fails records the failure as its figure and the run goes on.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use pgmux_testkit::procfs;
use pgmux_testkit::{APP_USER, DATABASE, SUPERUSER};
use tokio::runtime::Runtime;
use tokio_postgres::Config;

use crate::endpoint::Endpoint;
use crate::idle_clients::IdleClients;
use crate::lab::Lab;
use crate::pgbench::{Pgbench, PgbenchOutcome};
use crate::plan::Plan;
use crate::results::{Metric, Outcome, Results, Target, World, median};
use crate::{ServerMonitor, Workload, interrupt, startup};

/// Extra time a step may take beyond its planned length before it is abandoned.
pub(crate) const SLACK: Duration = Duration::from_secs(60);
/// How long W6's clients sit idle before the pooler's memory is read.
const IDLE_SETTLE: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct Suite<'a> {
    pub lab: &'a mut Lab,
    pub plan: &'a Plan,
    pub runtime: &'a Runtime,
    pub results: Results,
    /// The round under way (0-based).
    pub round: usize,
}

/// The figures of one step against one target.
pub(crate) type Figures = Vec<(Metric, Outcome)>;

/// The pooler a pgbench run measures (`pid`, none for direct) and the port it reaches the database on, to
/// count its server connections.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Server {
    pub pid: Option<u32>,
    pub port: u16,
}

/// The rows one pgbench run fills: its tps, and optionally pgbench's average latency, the pooler's CPU
/// time per transaction and the whole machine's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PgbenchRows {
    pub tps: Metric,
    pub latency: Option<Metric>,
    pub cpu: Option<Metric>,
    pub machine: Option<Metric>,
    /// The server connections the pooler holds when pgbench ends.
    pub servers: Option<Metric>,
    /// pgbench's clients, if not the plan's (W2fn).
    pub clients: Option<u32>,
}

impl PgbenchRows {
    pub(crate) const fn tps(tps: Metric) -> PgbenchRows {
        PgbenchRows { tps, latency: None, cpu: None, machine: None, servers: None, clients: None }
    }

    const fn cpu(tps: Metric, cpu: Metric, machine: Metric) -> PgbenchRows {
        PgbenchRows { tps, latency: None, cpu: Some(cpu), machine: Some(machine), servers: None, clients: None }
    }

    /// W2g and the like: the pooler's rows alone.
    const fn pooler(tps: Metric, cpu: Metric) -> PgbenchRows {
        PgbenchRows { tps, latency: None, cpu: Some(cpu), machine: None, servers: None, clients: None }
    }

    /// The network lab's: tps, pgbench's latency and the pooler's CPU.
    const fn net(tps: Metric, latency: Metric, cpu: Metric) -> PgbenchRows {
        PgbenchRows { tps, latency: Some(latency), cpu: Some(cpu), machine: None, servers: None, clients: None }
    }

    const fn servers(self, servers: Metric) -> PgbenchRows {
        PgbenchRows { servers: Some(servers), ..self }
    }

    const fn clients(self, clients: u32) -> PgbenchRows {
        PgbenchRows { clients: Some(clients), ..self }
    }
}

type Step = fn(&mut Suite<'_>, Target) -> Figures;

const SIMPLE: [&str; 3] = ["-S", "-M", "simple"];
const EXTENDED: [&str; 3] = ["-S", "-M", "extended"];

/// Every step by name, in the order a round runs them.
fn steps() -> [(&'static str, Step); 22] {
    use Metric as M;
    [
        ("W1", |s, t| s.pgbench(World::Loopback, t, &["-S", "-C"], PgbenchRows::tps(M::ReconnectTps))),
        ("W2", |s, t| {
            let rows = PgbenchRows::cpu(M::SimpleTps, M::CpuSimple, M::MachineCpuSimple).servers(M::ServersSimple);
            s.pgbench(World::Loopback, t, &SIMPLE, rows)
        }),
        ("W3", |s, t| {
            let rows = PgbenchRows::cpu(M::ExtendedTps, M::CpuExtended, M::MachineCpuExtended);
            s.pgbench(World::Loopback, t, &EXTENDED, rows)
        }),
        ("W4", |s, t| s.pgbench(World::Loopback, t, &["-S", "-M", "prepared"], PgbenchRows::tps(M::PreparedTps))),
        ("W5", |s, t| s.burst(t)),
        ("W6", |s, t| s.idle(t)),
        ("W7", |s, t| s.startup(t)),
        ("W2u", |s, t| {
            let rows = PgbenchRows::cpu(M::UnixSimpleTps, M::UnixCpuSimple, M::UnixMachineCpuSimple);
            s.pgbench(World::Unix, t, &SIMPLE, rows)
        }),
        ("W3u", |s, t| {
            let rows = PgbenchRows::cpu(M::UnixExtendedTps, M::UnixCpuExtended, M::UnixMachineCpuExtended);
            s.pgbench(World::Unix, t, &EXTENDED, rows)
        }),
        ("W2g", |s, t| {
            let rows = PgbenchRows::pooler(M::EagerSimpleTps, M::EagerCpuSimple).servers(M::EagerServersSimple);
            s.pgbench(World::Loopback, t, &SIMPLE, rows)
        }),
        ("W3g", |s, t| {
            s.pgbench(World::Loopback, t, &EXTENDED, PgbenchRows::pooler(M::EagerExtendedTps, M::EagerCpuExtended))
        }),
        ("W2gu", |s, t| {
            s.pgbench(World::Unix, t, &SIMPLE, PgbenchRows::pooler(M::UnixEagerSimpleTps, M::UnixEagerCpuSimple))
        }),
        ("W3gu", |s, t| {
            s.pgbench(World::Unix, t, &EXTENDED, PgbenchRows::pooler(M::UnixEagerExtendedTps, M::UnixEagerCpuExtended))
        }),
        ("W1n", |s, t| {
            let rows = PgbenchRows::net(M::NetReconnectTps, M::NetReconnectLatency, M::NetReconnectCpu);
            s.net_pgbench(t, false, &["-S", "-C"], rows)
        }),
        ("W2n", |s, t| {
            let rows = PgbenchRows::net(M::NetSimpleTps, M::NetSimpleLatency, M::NetSimpleCpu);
            s.net_pgbench(t, false, &SIMPLE, rows.servers(M::NetServersSimple))
        }),
        ("W3n", |s, t| {
            let rows = PgbenchRows::net(M::NetExtendedTps, M::NetExtendedLatency, M::NetExtendedCpu);
            s.net_pgbench(t, false, &EXTENDED, rows)
        }),
        ("W2un", |s, t| {
            let rows = PgbenchRows::net(M::NetUnixSimpleTps, M::NetUnixSimpleLatency, M::NetUnixSimpleCpu);
            s.net_pgbench(t, true, &SIMPLE, rows)
        }),
        ("W3un", |s, t| {
            let rows = PgbenchRows::net(M::NetUnixExtendedTps, M::NetUnixExtendedLatency, M::NetUnixExtendedCpu);
            s.net_pgbench(t, true, &EXTENDED, rows)
        }),
        ("W2fn", |s, t| {
            let rows = PgbenchRows { latency: Some(M::NetFewLatency), ..PgbenchRows::tps(M::NetFewTps) };
            s.net_pgbench(t, false, &SIMPLE, rows.servers(M::NetFewServers).clients(s.plan.pool_size))
        }),
        ("W5n", |s, t| s.net_burst(t)),
        ("W8", |s, t| s.connects(t)),
        ("W9", |s, t| s.fleet(t)),
    ]
}

impl Suite<'_> {
    /// One round: every workload, each against the three targets in this round's order.
    pub fn round(&mut self, round: usize) {
        self.round = round;
        for (name, step) in steps().into_iter().filter(|(name, _)| self.plan.steps.iter().any(|s| s == name)) {
            for target in Target::order(round) {
                let applies = Metric::ALL.iter().any(|m| m.step() == name && m.applies_to(target));
                if interrupt::requested() || !applies {
                    continue;
                }
                eprintln!("pgmux-bench: round {} {name} {}", round + 1, target.label());
                if crate::metric::world_of(name) != World::Network {
                    // W2g and the like: pgmux's pool grows at once (restarted when that changes).
                    self.lab.grow_pgmux_eagerly(name.contains('g'));
                }
                let written = self.pgmux_output(name).len();
                let mut figures = step(self, target);
                self.note_pgmux_output(name, target, round, written);
                if let Some(note) = self.check(name, target, &format!("{name} (round {})", round + 1)) {
                    // Whatever the step measured, the pooler did not survive it.
                    for (_, outcome) in &mut figures {
                        *outcome = Outcome::Failed(note.clone());
                    }
                }
                for (metric, outcome) in figures {
                    if let Outcome::Failed(why) = &outcome {
                        eprintln!("pgmux-bench:   {} fails: {why}", metric.label());
                    }
                    self.results.record(metric, target, round, outcome);
                }
            }
        }
    }

    /// Every line pgmux has written so far in `step`'s setting (none if that setting is not up).
    fn pgmux_output(&mut self, step: &str) -> Vec<String> {
        if crate::metric::world_of(step) != World::Network {
            return self.lab.poolers.pgmux_output_lines();
        }
        self.lab.net(self.plan).map(|net| net.poolers.pgmux_output_lines()).unwrap_or_default()
    }

    /// Notes what pgmux wrote while `step` ran against `target` (at `log_level=warn` every line is worth a
    /// look), so that a line in the condensed list at the end can be traced to its workload and round.
    fn note_pgmux_output(&mut self, step: &str, target: Target, round: usize, written_before: usize) {
        let lines = self.pgmux_output(step);
        let Some(first) = lines.get(written_before) else { return };
        let first: String = crate::logs::strip_ansi(first).chars().take(400).collect();
        let note = format!(
            "pgmux wrote {} line(s) while {step} ran against {} (round {}); the first: {first}",
            lines.len() - written_before,
            target.label(),
            round + 1
        );
        if crate::metric::world_of(step) != World::Network {
            eprintln!("pgmux-bench: {note}");
            self.lab.notes.push(note);
        } else if let Ok(net) = self.lab.net(self.plan) {
            net.note(note);
        }
    }

    /// Whether `target`'s pooler of `step`'s setting exited on its own; the note if so.
    fn check(&mut self, step: &str, target: Target, when: &str) -> Option<String> {
        if crate::metric::world_of(step) != World::Network {
            return self.lab.check(target, when);
        }
        let net = self.lab.net(self.plan).ok()?;
        let exit = net.poolers.exited(target)?;
        let note = format!("{} in the network lab exited during {when}: {exit}", target.label());
        net.note(note.clone());
        Some(note)
    }

    /// Where `target` is in a loopback or Unix setting, its pooler's pid, and pgbench for it.
    fn local(&mut self, world: World, target: Target) -> Result<(Endpoint, Option<u32>, Pgbench), String> {
        let endpoint = self.lab.endpoint(world, target)?;
        Ok((endpoint, self.lab.poolers.pid(target), self.lab.pgbench.clone()))
    }

    /// W1–W4, W2u, W3u: one pgbench run and what `rows` asks of it.
    fn pgbench(&mut self, world: World, target: Target, mode: &[&str], rows: PgbenchRows) -> Figures {
        match self.local(world, target) {
            Ok((endpoint, pid, pgbench)) => {
                let server = Server { pid, port: self.lab.pg.port() };
                self.run_pgbench(&pgbench, &endpoint, server, target, mode, rows)
            }
            Err(e) => fail_all(&rows_for(rows, target), &e),
        }
    }

    /// One pgbench run against `endpoint`; also the CPU time per transaction during it when `rows` asks:
    /// the pooler's (its process, `server.pid`) and the whole machine's (busy time in `/proc/stat`, for a
    /// pooler's share of the machine).
    pub(crate) fn run_pgbench(
        &mut self,
        pgbench: &Pgbench,
        endpoint: &Endpoint,
        server: Server,
        target: Target,
        mode: &[&str],
        rows: PgbenchRows,
    ) -> Figures {
        let pooler_cpu = rows.cpu.filter(|m| m.applies_to(target));
        let pid = server.pid;
        let plan = self.plan;
        let clients = rows.clients.unwrap_or(plan.pgbench_clients);
        let args = pgbench_args(plan, mode, clients);
        let cpu = CpuMark::now(pid);
        let machine_before = procfs::machine_busy_seconds();
        let outcome = pgbench.run(endpoint, &args, clients, plan.pgbench_duration() + SLACK);
        // Read at once, before the pooler lets idle connections go.
        let servers = rows.servers.filter(|m| m.applies_to(target)).map(|metric| {
            let held = pid.ok_or_else(|| "no pooler process".to_owned()).and_then(|pid| {
                procfs::tcp_connections_to(pid, server.port).map_err(|e| format!("counting its sockets: {e}"))
            });
            (metric, held.map_or_else(Outcome::Failed, |n| Outcome::Value(n as f64)))
        });
        let machine_used = match (procfs::machine_busy_seconds(), machine_before) {
            (Ok(after), Ok(before)) => Ok(after - before),
            (Err(e), _) | (_, Err(e)) => Err(format!("reading /proc/stat: {e}")),
        };
        let cpu_used = cpu.used();
        match outcome {
            PgbenchOutcome::Done { tps: rate, transactions, latency_ms } => {
                let per_tx = |secs: Result<f64, String>| {
                    secs.map(|s| s * 1e6 / transactions as f64).map_or_else(Outcome::Failed, Outcome::Value)
                };
                let mut figures = vec![(rows.tps, Outcome::Value(rate))];
                if let Some(metric) = rows.latency {
                    let latency =
                        latency_ms.map_or_else(|| Outcome::Failed("no latency reported".into()), Outcome::Value);
                    figures.push((metric, latency));
                }
                if let Some(metric) = pooler_cpu {
                    figures.push((metric, per_tx(cpu_used)));
                }
                if let Some(metric) = rows.machine {
                    figures.push((metric, per_tx(machine_used)));
                }
                figures.extend(servers);
                figures
            }
            PgbenchOutcome::Failed(why) => fail_all(&rows_for(rows, target), &why),
        }
    }

    /// W5: the Lambda burst against a freshly started pooler (or directly), counting server connections.
    fn burst(&mut self, target: Target) -> Figures {
        let rows = BurstRows::new(
            [Metric::BurstServerPeak, Metric::BurstQueryP50, Metric::BurstQueryP99, Metric::BurstErrors],
            Metric::BurstCpu,
            target,
        );
        let metrics = rows.all();
        let endpoint = match self.lab.fresh(target) {
            Ok(endpoint) => endpoint,
            Err(e) => return fail_all(&metrics, &e),
        };
        let pid = self.lab.poolers.pid(target);
        // The sampler logs in as the superuser, so that it does not count itself among the app's backends.
        let monitor = match self.lab.pg.url(&SUPERUSER).parse::<Config>() {
            Ok(config) => config,
            Err(e) => return fail_all(&metrics, &format!("the sampler's URL: {e}")),
        };
        let plan = self.plan;
        let workload = Workload {
            clients: plan.burst_clients,
            duration: Duration::from_secs_f64(plan.burst_secs),
            think: Duration::from_secs_f64(plan.burst_think_secs),
            client: endpoint,
            monitor: Some(ServerMonitor {
                config: monitor,
                usename: APP_USER.user.to_owned(),
                interval: Duration::from_millis(100),
            }),
            progress: None,
        };
        let limit = workload.duration + workload.think * 2 + SLACK;
        let cpu = CpuMark::now(pid);
        let outcome = self.block_on(limit, workload.run());
        let cpu_used = cpu.used_finely();
        let report = match outcome {
            Ok(Ok(report)) => report,
            Ok(Err(e)) => return fail_all(&metrics, &format!("the server connection sampler failed: {e}")),
            Err(e) => return fail_all(&metrics, &e),
        };
        self.burst_figures("W5", target, &report, report.peak_server_connections, &rows, cpu_used)
    }

    /// W5's or W5n's figures from a report, with the pooler's CPU seconds during the burst; failed
    /// invocations noted.
    pub(crate) fn burst_figures(
        &mut self,
        step: &str,
        target: Target,
        report: &crate::WorkloadReport,
        peak: Option<u64>,
        rows: &BurstRows,
        cpu_used: Result<f64, String>,
    ) -> Figures {
        if report.errors == report.invocations {
            let why = report.error_samples.first().map_or("every invocation failed", |s| s.message.as_str());
            return fail_all(&rows.all(), why);
        }
        if report.errors > 0 {
            let samples: Vec<String> =
                report.error_samples.iter().map(|s| format!("{}× {}", s.count, s.message)).collect();
            self.note(format!(
                "{step} through {}: {} of {} invocations failed: {}",
                target.label(),
                report.errors,
                report.invocations,
                samples.join("; ")
            ));
        }
        let value = |v: Option<f64>| v.map_or_else(|| Outcome::Failed("no samples".to_owned()), Outcome::Value);
        let mut figures = vec![
            (rows.peak, value(peak.map(|n| n as f64))),
            (rows.p50, value(report.query.p50_ms)),
            (rows.p99, value(report.query.p99_ms)),
            (rows.errors, Outcome::Value(report.errors as f64)),
        ];
        if let Some(cpu_row) = rows.cpu {
            // Seconds per invocation × 10⁶: milliseconds per 1,000 invocations.
            let per_thousand = cpu_used.map(|secs| secs * 1e6 / report.invocations.max(1) as f64);
            figures.push((cpu_row, per_thousand.map_or_else(Outcome::Failed, Outcome::Value)));
        }
        figures
    }

    /// W6: the pooler's memory before and with many idle, logged-in clients.
    fn idle(&mut self, target: Target) -> Figures {
        let metrics = [Metric::IdleRssBefore, Metric::IdleRssWith, Metric::IdlePerClient, Metric::IdleCpu];
        match self.measure_idle(target) {
            Ok((before, with, cpu)) => {
                let per_client = (with as f64 - before as f64) / self.plan.idle_clients as f64;
                vec![
                    (Metric::IdleRssBefore, Outcome::Value(before as f64 / 1024.0)),
                    (Metric::IdleRssWith, Outcome::Value(with as f64 / 1024.0)),
                    (Metric::IdlePerClient, Outcome::Value(per_client)),
                    (Metric::IdleCpu, cpu.map_or_else(Outcome::Failed, Outcome::Value)),
                ]
            }
            Err(e) => fail_all(&metrics, &e),
        }
    }

    /// RSS in KiB before the clients connect and once they all sit idle; the pooler's CPU time per second
    /// (µs) while they do.
    fn measure_idle(&mut self, target: Target) -> Result<(u64, u64, Result<f64, String>), String> {
        let endpoint = self.lab.fresh(target)?;
        let pid = self.lab.poolers.pid(target).ok_or("the pooler has no pid")?;
        let port = endpoint.port;
        let rss = || procfs::rss_kib(pid).map_err(|e| format!("reading the pooler's memory: {e}"));
        let before = rss()?;
        let clients = IdleClients {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            user: APP_USER.user.to_owned(),
            database: DATABASE.to_owned(),
            clients: self.plan.idle_clients,
            concurrency: self.plan.idle_concurrency,
        };
        let held = self.block_on(SLACK * 2, clients.connect())??;
        std::thread::sleep(IDLE_SETTLE);
        let with = rss();
        // What the pooler does on its own while nothing happens: its timers' wake-ups.
        let window = Duration::from_secs(self.plan.idle_cpu_secs);
        let cpu = CpuMark::now(Some(pid));
        std::thread::sleep(window);
        let cpu = cpu.used_finely().map(|secs| secs * 1e6 / window.as_secs_f64());
        self.runtime.block_on(held.close());
        Ok((before, with?, cpu))
    }

    /// W7: median start-up time over the plan's starts.
    fn startup(&mut self, target: Target) -> Figures {
        let (name, starts) = (target.label(), self.plan.starts);
        let output = self.lab.scratch.path().join("w7.out");
        let times = match target {
            Target::Pgmux => {
                let mut settings = self.lab.poolers.pgmux_settings.clone();
                startup::time_starts(name, starts, &output, |port| {
                    settings.listen.set_port(port);
                    Ok(settings.command())
                })
            }
            Target::PgBouncer => {
                let settings = &self.lab.poolers.bouncer_settings;
                startup::time_starts(name, starts, &output, |port| settings.command("w7", port))
            }
            Target::Direct => Err("not applicable".to_owned()),
        };
        let outcome = match times {
            Ok(times) => median(times.iter().map(|t| t.as_secs_f64() * 1e3).collect())
                .map_or_else(|| Outcome::Failed("no starts".to_owned()), Outcome::Value),
            Err(e) => Outcome::Failed(e),
        };
        vec![(Metric::StartupMs, outcome)]
    }

    /// Run async work with a deadline, giving up on Ctrl-C.
    pub(crate) fn block_on<T>(&self, limit: Duration, work: impl Future<Output = T>) -> Result<T, String> {
        self.runtime.block_on(async {
            tokio::select! {
                done = tokio::time::timeout(limit, work) => done.map_err(|_| format!("did not finish within {limit:?}")),
                () = interrupt::wait() => Err("interrupted".to_owned()),
            }
        })
    }

    pub(crate) fn note(&mut self, note: String) {
        eprintln!("pgmux-bench: {note}");
        self.lab.notes.push(note);
    }
}

/// `<mode> -c <clients> -j <threads> -T <secs> -n` (no vacuum: the select-only runs do not need one).
fn pgbench_args(plan: &Plan, mode: &[&str], clients: u32) -> Vec<String> {
    let mut args: Vec<String> = mode.iter().map(|arg| (*arg).to_owned()).collect();
    let secs = plan.pgbench_secs.ceil() as u64;
    for (flag, value) in [("-c", u64::from(clients)), ("-j", u64::from(plan.pgbench_threads)), ("-T", secs)] {
        args.extend([flag.to_owned(), value.to_string()]);
    }
    args.push("-n".to_owned());
    args
}

pub(crate) fn fail_all(metrics: &[Metric], why: &str) -> Figures {
    metrics.iter().map(|&m| (m, Outcome::Failed(why.to_owned()))).collect()
}

/// The rows a burst (W5, W5n) fills for one target: the server connections' peak, the queries' p50 and
/// p99, the failed invocations, and the pooler's CPU where there is a pooler.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct BurstRows {
    pub(crate) peak: Metric,
    pub(crate) p50: Metric,
    pub(crate) p99: Metric,
    pub(crate) errors: Metric,
    pub(crate) cpu: Option<Metric>,
}

impl BurstRows {
    pub(crate) fn new([peak, p50, p99, errors]: [Metric; 4], cpu: Metric, target: Target) -> BurstRows {
        BurstRows { peak, p50, p99, errors, cpu: Some(cpu).filter(|m| m.applies_to(target)) }
    }

    /// Every row, in the table's order.
    pub(crate) fn all(&self) -> Vec<Metric> {
        [self.peak, self.p50, self.p99, self.errors].into_iter().chain(self.cpu).collect()
    }
}

/// A pooler process's CPU time (user and system) at one moment, to difference around a run: in clock ticks
/// for the whole process, and to the nanosecond for each of its threads.
pub(crate) struct CpuMark {
    pid: Option<u32>,
    seconds: Option<Result<f64, String>>,
    threads: Option<HashMap<u32, u64>>,
}

impl CpuMark {
    pub(crate) fn now(pid: Option<u32>) -> CpuMark {
        let threads = pid.and_then(|pid| procfs::thread_runtimes_ns(pid).ok());
        CpuMark { pid, seconds: pid.map(CpuMark::read), threads }
    }

    fn read(pid: u32) -> Result<f64, String> {
        procfs::cpu_seconds(pid).map_err(|e| format!("reading the pooler's CPU time: {e}"))
    }

    /// The CPU seconds the process has used since the mark, in clock ticks (10 ms): enough for a pgbench run.
    pub(crate) fn used(&self) -> Result<f64, String> {
        match (self.pid.map(CpuMark::read), &self.seconds) {
            (Some(Ok(after)), Some(Ok(before))) => Ok(after - before),
            (Some(Err(e)), _) => Err(e),
            (_, Some(Err(e))) => Err(e.clone()),
            _ => Err("no pooler process to measure".to_owned()),
        }
    }

    /// As [`CpuMark::used`], to the nanosecond where the threads say as much: a burst uses a few ticks.
    pub(crate) fn used_finely(&self) -> Result<f64, String> {
        let ticks = self.used()?;
        let after = self.pid.and_then(|pid| procfs::thread_runtimes_ns(pid).ok());
        Ok(match (&self.threads, after) {
            (Some(before), Some(after)) => finer(ticks, before, &after),
            _ => ticks,
        })
    }
}

/// The CPU seconds between two readings of each thread's time (a thread new since the first counted whole),
/// unless the process's clock ticks say more than two ticks' rounding beyond that: then a thread that
/// exited in between took that time with it, and the ticks are the better figure.
fn finer(ticks: f64, before: &HashMap<u32, u64>, after: &HashMap<u32, u64>) -> f64 {
    let ns: u64 = after.iter().map(|(tid, &ns)| ns.saturating_sub(before.get(tid).copied().unwrap_or(0))).sum();
    let threads = ns as f64 / 1e9;
    if ticks > threads + 0.02 { ticks } else { threads }
}

/// The rows a pgbench run fills for `target`.
pub(crate) fn rows_for(rows: PgbenchRows, target: Target) -> Vec<Metric> {
    let pooler_only = |m: &Metric| m.applies_to(target);
    [Some(rows.tps), rows.latency, rows.cpu.filter(pooler_only), rows.machine, rows.servers.filter(pooler_only)]
        .into_iter()
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_s_cpu_comes_from_the_threads_unless_an_exited_one_took_time_with_it() {
        let before = HashMap::from([(1, 1_000_000_000), (2, 5_000_000)]);
        // 3 ms on thread 1, 1 ms on thread 2, 2 ms on a thread started since: 6 ms, where the ticks say 10.
        let after = HashMap::from([(1, 1_003_000_000), (2, 6_000_000), (3, 2_000_000)]);
        assert!((finer(0.01, &before, &after) - 0.006).abs() < 1e-9);
        // Thread 2 exited; the ticks say 50 ms more than the threads still there: the ticks win.
        let after = HashMap::from([(1, 1_003_000_000)]);
        assert_eq!(finer(0.05, &before, &after), 0.05);
    }

    #[test]
    fn a_burst_has_a_cpu_row_only_where_a_pooler_runs() {
        let four = [Metric::BurstServerPeak, Metric::BurstQueryP50, Metric::BurstQueryP99, Metric::BurstErrors];
        assert_eq!(BurstRows::new(four, Metric::BurstCpu, Target::Pgmux).all().last(), Some(&Metric::BurstCpu));
        assert_eq!(BurstRows::new(four, Metric::BurstCpu, Target::Direct).all(), four.to_vec());
    }
}
