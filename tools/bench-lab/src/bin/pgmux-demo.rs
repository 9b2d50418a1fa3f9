//! `pgmux-demo`: the AWS Lambda Managed Instances field report, reproduced on one machine. 64 concurrent
//! invocations connect, `select now()`, sleep 5 s, `select now()` and disconnect, for 30 s: first through
//! pgmux, then straight against PostgreSQL; the table shows how many server connections each needed.
//!
//! ```text
//! cargo build --release -p pgmux -p pgmux-bench-lab
//! target/release/pgmux-demo            # or --quick for a 3 s run
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use pgmux_bench_lab::args::parse_duration;
use pgmux_bench_lab::endpoint::Endpoint;
use pgmux_bench_lab::report::Settings;
use pgmux_bench_lab::{Comparison, PgmuxProcess, PgmuxSettings, Progress, ServerMonitor, Workload, pooler};
use pgmux_testkit::{APP_USER, PgOptions, PgServer, SUPERUSER};

/// PostgreSQL's `max_connections` for the demo: room for the direct run's 64 clients and more.
const PG_MAX_CONNECTIONS: u32 = 200;
/// How often the sampler counts server connections.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug, Parser)]
#[command(
    name = "pgmux-demo",
    about = "64 Lambda-style invocations (connect, select now(), sleep, select now(), disconnect) through \
             pgmux and directly against PostgreSQL, side by side.",
    after_help = "Build with --release: the clients' SCRAM key derivation is slow in a debug build."
)]
struct Args {
    /// Concurrent invocations [default: 64; --quick: 16].
    #[arg(long)]
    clients: Option<usize>,
    /// How long to keep starting invocations, e.g. 30s, 1m, 500ms [default: 30s; --quick: 3s].
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Sleep between the two queries of an invocation [default: 5s; --quick: 0.5s].
    #[arg(long, value_parser = parse_duration)]
    think: Option<Duration>,
    /// pgmux's pool size (PGMUX_POOL_MAX).
    #[arg(long, default_value_t = 20)]
    pool_max: u32,
    /// The pgmux binary [default: `pgmux` next to this executable].
    #[arg(long)]
    pgmux: Option<PathBuf>,
    /// A short run: 16 clients, 3 s, 0.5 s think (explicit flags still win).
    #[arg(long)]
    quick: bool,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Skip the pgmux run (its column shows "-"); for when pgmux is not built yet.
    #[arg(long)]
    direct_only: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let clients = args.clients.unwrap_or(if args.quick { 16 } else { 64 });
    let duration = args.duration.unwrap_or(Duration::from_secs(if args.quick { 3 } else { 30 }));
    let think = args.think.unwrap_or(Duration::from_millis(if args.quick { 500 } else { 5000 }));
    if clients == 0 {
        bail!("--clients must be at least 1");
    }
    let pgmux_binary = match (&args.pgmux, args.direct_only) {
        (_, true) => None,
        (Some(path), false) => Some(path.clone()),
        (None, false) => Some(pooler::default_binary().context("cannot locate this executable")?),
    };
    if let Some(path) = &pgmux_binary
        && !path.is_file()
    {
        bail!(
            "pgmux binary not found at {}: build it with `cargo build --release -p pgmux`, or pass \
             --pgmux PATH (or --direct-only)",
            path.display()
        );
    }

    eprintln!("starting PostgreSQL (max_connections {PG_MAX_CONNECTIONS})...");
    let pg = PgServer::start_with(&PgOptions { max_connections: PG_MAX_CONNECTIONS, ..PgOptions::default() });
    eprintln!("PostgreSQL listening on {}:{}", pg.host(), pg.port());
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the tokio runtime")?;
    let monitor = ServerMonitor {
        config: pg.url(&SUPERUSER).parse().context("the monitor URL")?,
        usename: APP_USER.user.to_owned(),
        interval: SAMPLE_EVERY,
    };
    let workload = |label: &str, client: Endpoint| Workload {
        clients,
        duration,
        think,
        client,
        monitor: Some(monitor.clone()),
        progress: Some(Progress {
            label: label.to_owned(),
            interval: (duration / 6).clamp(Duration::from_secs(1), Duration::from_secs(10)),
        }),
    };
    let plan = format!("{clients} clients for {duration:?}, think {think:?}");

    let pgmux = match pgmux_binary {
        None => None,
        Some(binary) => {
            let listen = SocketAddr::from(([127, 0, 0, 1], pgmux_testkit::free_port()));
            let mut process = PgmuxProcess::start(&PgmuxSettings {
                binary,
                listen,
                database_url: pg.url(&APP_USER),
                pool_max: Some(args.pool_max),
                client_auth: "scram-sha-256".to_owned(),
                log_level: "warn".to_owned(),
                max_client_conn: None,
                unix_socket_dir: None,
                pool_grow_after: None,
                netns: None,
            })
            .context("starting pgmux")?;
            eprintln!("pgmux listening on {listen} (pool max {}); running {plan}", args.pool_max);
            let client = client_config(listen.port());
            let report = runtime.block_on(workload("pgmux", client).run());
            let exit = process.stop();
            let output = process.output();
            if !output.trim().is_empty() {
                let lines: Vec<&str> = output.lines().collect();
                eprintln!("pgmux output (last 20 of {} lines):", lines.len());
                for line in &lines[lines.len().saturating_sub(20)..] {
                    eprintln!("  {line}");
                }
            }
            eprintln!("pgmux stopped: {}", exit.unwrap_or_default());
            Some(report.context("the pgmux run")?)
        }
    };

    runtime.block_on(wait_for_drain(&monitor))?;
    eprintln!("running directly against PostgreSQL: {plan}");
    let direct = runtime.block_on(workload("direct", client_config(pg.port())).run()).context("the direct run")?;

    let comparison = Comparison {
        settings: Settings {
            clients,
            duration_secs: duration.as_secs_f64(),
            think_secs: think.as_secs_f64(),
            pool_max: args.pool_max,
            postgres_max_connections: PG_MAX_CONNECTIONS,
        },
        pgmux,
        direct: Some(direct),
    };
    print!("{}", comparison.table());
    print!("{}", comparison.error_summary());
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&comparison)?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
        eprintln!("figures written to {}", path.display());
    }
    Ok(())
}

/// The clients log in as the application user with its password (SCRAM), through pgmux or directly.
fn client_config(port: u16) -> Endpoint {
    Endpoint { password: Some(APP_USER.password.to_owned()), ..Endpoint::tcp("127.0.0.1", port) }
}

/// Wait (up to 10 s) until the previous run's server connections are gone, so they do not count in the next.
async fn wait_for_drain(monitor: &ServerMonitor) -> anyhow::Result<()> {
    let (client, connection) = monitor.config.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let started = Instant::now();
    loop {
        let row = client
            .query_one(
                "select count(*) from pg_stat_activity where usename = $1 and backend_type = 'client backend'",
                &[&monitor.usename],
            )
            .await?;
        let left: i64 = row.get(0);
        if left == 0 {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(10) {
            eprintln!("warning: {left} connections of {} still open; going on", monitor.usename);
            return Ok(());
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_and_flags() {
        let args = Args::parse_from(["pgmux-demo", "--quick", "--clients", "8", "--duration", "1s"]);
        assert!(args.quick);
        assert_eq!(args.clients, Some(8));
        assert_eq!(args.think, None);
    }
}
