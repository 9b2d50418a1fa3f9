//! What a benchmark run does: rounds, run lengths, client counts and pool sizes, for the full run and for
//! `--quick` (the same steps in seconds, for `make test`), and the sentences the report uses to say so.

use std::time::Duration;

use serde::Serialize;

use crate::metric::{World, world_of};
use crate::results::Metric;

/// Every workload, in the order a round runs them: on loopback, over Unix sockets (`u`), with pgmux's pool
/// grown at once (`g`), in the network lab (`n`, W8, W9; `un`: there, on the poolers' Unix sockets; `fn`: there,
/// with as few clients as the pools have connections).
pub const STEPS: [&str; 22] = [
    "W1", "W2", "W3", "W4", "W5", "W6", "W7", "W2u", "W3u", "W2g", "W3g", "W2gu", "W3gu", "W1n", "W2n", "W3n", "W2un",
    "W3un", "W2fn", "W5n", "W8", "W9",
];

/// The knobs of one run. Both poolers and the direct runs see the same figures.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub quick: bool,
    /// The workloads to run, of [`STEPS`] (all of them unless `--only` says otherwise).
    pub steps: Vec<String>,
    pub rounds: usize,
    /// Length of each pgbench run (W1–W4).
    pub pgbench_secs: f64,
    pub pgbench_clients: u32,
    pub pgbench_threads: u32,
    /// `pgbench -i -s`.
    pub scale: u32,
    /// pgmux's `pool_max` and PgBouncer's `default_pool_size`.
    pub pool_size: u32,
    /// W5: concurrent invocations, how long to keep starting them, and the think time between two queries.
    pub burst_clients: usize,
    pub burst_secs: f64,
    pub burst_think_secs: f64,
    /// W6: idle clients, how many connect at once, and how long the pooler's CPU is counted while they sit.
    pub idle_clients: usize,
    pub idle_concurrency: usize,
    pub idle_cpu_secs: u64,
    /// W7: starts per pooler per round.
    pub starts: usize,
    /// PostgreSQL's `max_connections` and `shared_buffers`.
    pub max_connections: u32,
    pub shared_buffers: String,
    /// The network lab's added round trip, in whole milliseconds (Toxiproxy's latency toxic).
    pub rtt_ms: u64,
    /// W8: sequential connects per target and round.
    pub connects: usize,
    /// W9: pgmux or PgBouncer instances (one per simulated execution environment), clients per instance,
    /// how long they run, their pause between transactions, PostgreSQL's `max_connections` meanwhile, and
    /// the connections another role holds.
    pub fleet_instances: usize,
    pub fleet_clients: usize,
    pub fleet_secs: f64,
    pub fleet_think_secs: f64,
    pub fleet_max_connections: u32,
    pub fleet_held: usize,
}

impl Plan {
    /// The full run of `make bench`.
    pub fn full() -> Plan {
        Plan {
            quick: false,
            steps: STEPS.map(String::from).to_vec(),
            rounds: 3,
            pgbench_secs: 15.0,
            pgbench_clients: 50,
            pgbench_threads: 2,
            scale: 10,
            pool_size: 20,
            burst_clients: 64,
            burst_secs: 15.0,
            burst_think_secs: 5.0,
            idle_clients: 10_000,
            idle_concurrency: 200,
            idle_cpu_secs: 10,
            starts: 20,
            max_connections: 200,
            shared_buffers: "256MB".to_owned(),
            rtt_ms: 1,
            connects: 200,
            fleet_instances: 8,
            fleet_clients: 32,
            fleet_secs: 15.0,
            fleet_think_secs: 0.01,
            fleet_max_connections: 50,
            fleet_held: 10,
        }
    }

    /// `--quick`: every step once, briefly, to prove the driver and the three targets work.
    pub fn quick() -> Plan {
        Plan {
            quick: true,
            rounds: 1,
            // Not 1 s: pgbench's -T clock runs while its 50 clients connect, which on a busy 2-core machine
            // can take most of a second and leave a run with no transactions at all.
            pgbench_secs: 2.0,
            burst_clients: 8,
            burst_secs: 1.0,
            burst_think_secs: 0.2,
            idle_clients: 200,
            idle_cpu_secs: 2,
            starts: 3,
            connects: 20,
            fleet_instances: 2,
            fleet_clients: 8,
            fleet_secs: 1.5,
            ..Plan::full()
        }
    }

    /// Most client connections either pooler must accept: W6's clients plus room for the monitor and a
    /// straggler from the previous step.
    pub fn max_client_conn(&self) -> u32 {
        u32::try_from(self.idle_clients).unwrap_or(u32::MAX).saturating_add(100).max(1000)
    }

    /// Most open files the driver and the poolers need: every W6 client is a socket in the driver and
    /// another in the pooler.
    pub fn open_files(&self) -> u64 {
        u64::from(self.max_client_conn()) + 1024
    }

    /// The rows this run fills: those of its steps.
    pub fn metrics(&self) -> Vec<Metric> {
        Metric::ALL.iter().copied().filter(|m| self.steps.iter().any(|s| s == m.step())).collect()
    }

    /// Whether any step runs in `world`.
    pub fn runs_in(&self, world: World) -> bool {
        self.steps.iter().any(|s| world_of(s) == world)
    }

    pub fn pgbench_duration(&self) -> Duration {
        Duration::from_secs_f64(self.pgbench_secs)
    }

    /// The settings as the report lists them.
    pub fn describe(&self) -> Vec<String> {
        let order = "the order of pgmux, PgBouncer and direct rotated each round";
        vec![
            format!("{} round(s), {order}; the table shows medians over the rounds.", self.rounds),
            format!(
                "W1–W4: `pgbench -c {} -j {} -n -T {}` on a `pgbench -i -s {}` database, `PGSSLMODE=disable`.",
                self.pgbench_clients, self.pgbench_threads, self.pgbench_secs, self.scale
            ),
            format!(
                "W5: {} concurrent invocations, each connecting, `select now()`, sleeping {} s, `select now()`, \
                 disconnecting, started for {} s (tokio-postgres, simple protocol); server connections sampled \
                 from `pg_stat_activity` every 100 ms; each pooler freshly started; its CPU per 1,000 invocations \
                 from each thread's schedstat over the burst.",
                self.burst_clients, self.burst_think_secs, self.burst_secs
            ),
            format!(
                "W6: {} clients, {} connecting at a time, each logged in and through one `select 1`, then idle; \
                 RSS is `VmRSS` of the pooler process, freshly started; its CPU per second over the next {} s \
                 while they sit idle (each thread's schedstat).",
                self.idle_clients, self.idle_concurrency, self.idle_cpu_secs
            ),
            format!(
                "W7: median of {} starts per round, from exec until a TCP connect succeeds (spawned with \
                 `posix_spawn`, so that the driver's own size adds no fork time; polled every 0.1 ms).",
                self.starts
            ),
            "CPU: the pooler's utime + stime during the W2 / W3 run over the transactions pgbench reports; the \
             whole machine's: busy time in `/proc/stat` (user, nice, system, irq, softirq) during the same run. A \
             pooler that cost nothing would reach its tps × machine / (machine − pooler)."
                .to_owned(),
            format!(
                "Pools: pgmux `pool_max={pool}`, PgBouncer `pool_mode=transaction default_pool_size={pool}`; \
                 both `max_client_conn={}`, trust authentication on both sides; pgmux `log_level=warn`, \
                 PgBouncer `log_connections=0 log_disconnections=0 listen_backlog=1024`.",
                self.max_client_conn(),
                pool = self.pool_size
            ),
            format!(
                "PostgreSQL: `max_connections={}`, `shared_buffers={}`, `fsync=off`, `synchronous_commit=off`, \
                 trust on 127.0.0.1 and its Unix socket; everything on one machine.",
                self.max_connections, self.shared_buffers
            ),
            "W2g, W3g (and W2gu, W3gu over Unix sockets): W2 and W3 again, pgmux restarted with \
             `pool_grow_after = 0`, so that its pool grows at once whenever a client finds nothing idle, as \
             PgBouncer's does, rather than lazily; PgBouncer as in W2 and W3, measured again beside it. Server \
             connections: those the pooler process holds to PostgreSQL when pgbench ends (`/proc/PID/fd` and \
             `/proc/PID/net/tcp`), pgmux's control connection included."
                .to_owned(),
            "Unix sockets (W2u, W3u): the loopback setting with pgbench on each pooler's own Unix socket \
             (pgmux `unix_socket_dir`, PgBouncer `unix_socket_dir`) and, for direct, PostgreSQL's; the \
             poolers still reach PostgreSQL over 127.0.0.1."
                .to_owned(),
            format!(
                "Network (W1n–W3n, W2un, W3un, W2fn, W5n, W8, W9): the topology below, {} ms added round trip; \
                 W1n–W3n and W5n as on loopback; W2un and W3un as W2n and W3n with pgbench on each pooler's Unix \
                 socket on the application host (as a Lambda function reaches its extension), the pooler still \
                 reaching PostgreSQL across the link; W2fn as W2n with {} clients, as many as each pool's \
                 connections, so that the line empties now and then; latency per transaction is pgbench's average.",
                self.rtt_ms, self.pool_size
            ),
            format!(
                "W8: {} sequential connects per target and round, each `select 1` then a clean close, timed \
                 together; the pooler freshly started, so its first connect opens a server connection.",
                self.connects
            ),
            format!(
                "W9: {} instances of the pooler, each with {} clients running `BEGIN`, `SELECT 1`, `COMMIT` (three \
                 round trips) with {} ms between transactions for {} s; a client that fails waits 100 ms and \
                 reconnects. PostgreSQL `max_connections={}` while another role holds {} connections: \
                 {} − 3 reserved − {} = {} for the application role, the database's own limit. pgmux with its \
                 defaults (sized from the database, no `pool_max`), whose budget is 90 % of the {} usable, less \
                 everyone else's connections; PgBouncer with its default `default_pool_size` (20); direct: {} × \
                 {} clients with a connection each, as classic Lambda has. Server connections sampled every 50 \
                 ms. Meanwhile the other role opens a new connection every 100 ms (`select 1`, then closes it), \
                 as another application would.",
                self.fleet_instances,
                self.fleet_clients,
                self.fleet_think_secs * 1e3,
                self.fleet_secs,
                self.fleet_max_connections,
                self.fleet_held,
                self.fleet_max_connections,
                self.fleet_held,
                self.fleet_budget(),
                self.fleet_max_connections - 3,
                self.fleet_instances,
                self.fleet_clients,
            ),
        ]
    }

    /// W9's budget for the application role: `max_connections` less the superuser's reserved slots (3, the
    /// default) and the other role's connections.
    pub fn fleet_budget(&self) -> usize {
        (self.fleet_max_connections as usize).saturating_sub(3 + self.fleet_held)
    }

    pub fn fleet_duration(&self) -> Duration {
        Duration::from_secs_f64(self.fleet_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_is_the_full_plan_shrunk() {
        let (full, quick) = (Plan::full(), Plan::quick());
        assert_eq!((full.rounds, full.idle_clients, full.starts), (3, 10_000, 20));
        assert_eq!((quick.rounds, quick.idle_clients, quick.starts, quick.burst_clients), (1, 200, 3, 8));
        assert_eq!((quick.pool_size, quick.pgbench_clients), (full.pool_size, full.pgbench_clients));
        assert!(full.max_client_conn() >= 10_100);
        assert!(full.describe().iter().any(|line| line.contains("-T 15`")));
        assert_eq!(full.metrics(), Metric::ALL);
        assert_eq!(full.fleet_budget(), 37);
        assert!(full.runs_in(World::Network) && quick.runs_in(World::Unix));
        let loopback = Plan { steps: vec!["W2".into()], ..Plan::full() };
        assert!(!loopback.runs_in(World::Network));
        let w7 = Plan { steps: vec!["W7".into()], ..Plan::full() };
        assert_eq!(w7.metrics(), [Metric::StartupMs]);
    }
}
