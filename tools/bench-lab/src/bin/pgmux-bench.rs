//! `pgmux-bench`: the end-to-end benchmark. pgmux, PgBouncer and PostgreSQL directly, side by side, round by
//! round: W1–W7 on one machine over loopback, W2/W3 over Unix sockets, and W1–W3, W5, W8 and W9 in a network
//! lab with the database behind a delayed link, TLS and SCRAM (see `--help`); the medians, ratios, machine,
//! versions, topology and per-round figures go to docs/benchmarks.md between its markers.
//!
//! ```text
//! make bench                                   # the full run, rewrites docs/benchmarks.md
//! target/debug/pgmux-bench --quick --out F.md  # every step once, in seconds (part of make test)
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use clap::Parser;
use pgmux_bench_lab::args::parse_duration;
use pgmux_bench_lab::lab::{Lab, Tools};
use pgmux_bench_lab::machine::{self, Machine, Versions};
use pgmux_bench_lab::markdown::{self, RunReport};
use pgmux_bench_lab::plan::{Plan, STEPS};
use pgmux_bench_lab::suite::Suite;
use pgmux_bench_lab::{interrupt, pgbench, pgbouncer, pooler};

#[derive(Debug, Parser)]
#[command(
    name = "pgmux-bench",
    about = "pgmux vs. PgBouncer vs. PostgreSQL directly. On loopback: W1 pgbench -S -C (reconnect per \
             transaction), W2/W3/W4 pgbench -S -M simple/extended/prepared, W5 the Lambda burst (peak server \
             connections, query latency), W6 memory with 10,000 idle clients, W7 start-up time, and each \
             pooler's CPU time per transaction in W2 and W3. Over Unix sockets: W2u, W3u. W2g, W3g, W2gu, W3gu: \
             the same with pgmux's pool grown at once (pool_grow_after = 0), as PgBouncer's. In the network lab \
             (a namespace for the application host, Toxiproxy's delay, TLS verify-full, SCRAM; needs root): \
             W1n-W3n, W2un/W3un on each pooler's Unix socket there, W2fn W2n with as many clients as the pools' \
             connections, W5n, W8 connect + select 1 + disconnect, \
             W9 a fleet of poolers against a small max_connections.",
    after_help = "Exits non-zero if a figure is missing or failed unexpectedly (W4 through a pooler may fail: \
                  that is recorded). Timings are reported, never judged."
)]
struct Args {
    /// Every step once, in seconds: 1 round, 2 s pgbench runs, W5 with 8 clients, W6 with 200 clients, W7
    /// with 3 starts. Writes only where --out says.
    #[arg(long)]
    quick: bool,
    /// Rounds [default: 3; --quick: 1].
    #[arg(long)]
    rounds: Option<usize>,
    /// Length of each pgbench run, whole seconds [default: 15s; --quick: 2s].
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// W6's idle clients [default: 10000; --quick: 200].
    #[arg(long)]
    idle_clients: Option<usize>,
    /// Run only these workloads, e.g. `W2,W3u,W8` (then nothing is written unless --out says where).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// The network lab's added round trip, whole milliseconds [default: 1ms].
    #[arg(long, value_parser = parse_duration)]
    rtt: Option<Duration>,
    /// W9's pooler instances [default: 8; --quick: 2].
    #[arg(long)]
    fleet: Option<usize>,
    /// The pgmux binary [default: `pgmux` next to this executable].
    #[arg(long)]
    pgmux: Option<PathBuf>,
    /// The pgbouncer binary [default: $PGMUX_PGBOUNCER, /usr/sbin/pgbouncer, or PATH].
    #[arg(long)]
    pgbouncer: Option<PathBuf>,
    /// The pgbench binary [default: beside the PostgreSQL server binaries, or PATH].
    #[arg(long)]
    pgbench: Option<PathBuf>,
    /// Markdown file whose section between `<!-- bench:begin -->` and `<!-- bench:end -->` is rewritten
    /// (created if missing) [default: docs/benchmarks.md of this workspace; --quick: none].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write every figure as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

impl Args {
    fn plan(&self) -> anyhow::Result<Plan> {
        let mut plan = if self.quick { Plan::quick() } else { Plan::full() };
        if let Some(rounds) = self.rounds {
            plan.rounds = rounds;
        }
        if let Some(duration) = self.duration {
            plan.pgbench_secs = duration.as_secs_f64().round().max(1.0);
        }
        if let Some(clients) = self.idle_clients {
            plan.idle_clients = clients;
        }
        if let Some(rtt) = self.rtt {
            if rtt.subsec_nanos() % 1_000_000 != 0 || rtt.is_zero() {
                bail!("--rtt: whole milliseconds, at least 1 (Toxiproxy's latency toxic has no finer grain)");
            }
            plan.rtt_ms = u64::try_from(rtt.as_millis()).unwrap_or(u64::MAX);
        }
        if let Some(fleet) = self.fleet {
            plan.fleet_instances = fleet;
        }
        if !self.only.is_empty() {
            let mut only = Vec::new();
            for asked in &self.only {
                match STEPS.iter().find(|step| step.eq_ignore_ascii_case(asked.trim())) {
                    Some(step) => only.push(*step),
                    None => bail!("--only: no workload {asked:?} (there are {})", STEPS.join(", ")),
                }
            }
            plan.steps.retain(|step| only.contains(&step.as_str()));
        }
        if plan.rounds == 0 || plan.idle_clients == 0 || plan.fleet_instances == 0 {
            bail!("--rounds, --idle-clients and --fleet must be at least 1");
        }
        Ok(plan)
    }

    fn out(&self) -> Option<PathBuf> {
        match &self.out {
            Some(path) => Some(path.clone()),
            None if self.quick || !self.only.is_empty() => None,
            None => Some(workspace().join("docs/benchmarks.md")),
        }
    }
}

/// The workspace this driver was built from (for docs/benchmarks.md and the git revision): two levels above
/// this crate's `tools/bench-lab`.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).map_or_else(|| PathBuf::from("."), Path::to_owned)
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pgmux-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    let plan = args.plan()?;
    let tools = find_tools(&args)?;
    let out = args.out();
    for path in out.iter().chain(&args.json) {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if !dir.is_dir() {
            bail!("cannot write {}: no directory {}", path.display(), dir.display());
        }
    }
    // Before anything is spawned: children inherit the limit.
    let files = pgmux_testkit::raise_open_file_limit(plan.open_files()).context("raising the open-file limit")?;
    if files < plan.open_files() {
        bail!(
            "W6 needs {} open files but the limit is {files}; raise it (`ulimit -n {}`, as root if need be) or \
             pass --idle-clients",
            plan.open_files(),
            plan.open_files()
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("tokio runtime")?;
    interrupt::install(&runtime).context("installing the Ctrl-C handler")?;

    let started = Instant::now();
    let load_before = machine::load_average();
    let mut lab = Lab::start(&plan, &tools).map_err(|e| anyhow!(e))?;
    let versions = versions(&tools, &lab);
    let mut suite = Suite { lab: &mut lab, plan: &plan, runtime: &runtime, results: Default::default(), round: 0 };
    for round in 0..plan.rounds {
        suite.round(round);
    }
    let results = suite.results;
    lab.stop_poolers();
    if interrupt::requested() {
        bail!("interrupted; nothing written");
    }
    let notes = lab.notes_and_logs();
    let topology = lab.built_net().map(|net| net.topology.clone());
    drop(lab);

    let report = RunReport {
        date: machine::utc_now(),
        machine: Machine::here(),
        versions,
        plan: plan.clone(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        notes,
        elapsed_secs: started.elapsed().as_secs_f64(),
        load: [load_before, machine::load_average()],
        results,
        topology,
    };
    if let Some(topology) = &report.topology {
        topology.lines.iter().for_each(|line| println!("topology: {line}"));
    }
    print!("{}", markdown::results_table(&report.results, &plan.metrics()));
    for note in &report.notes {
        println!("note: {note}");
    }
    write_outputs(&report, out.as_deref(), args.json.as_deref())?;
    eprintln!("pgmux-bench: done in {:.0} s", report.elapsed_secs);
    let problems = report.results.problems(&plan.metrics(), plan.rounds);
    if problems.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("pgmux-bench: {} figure(s) missing or failed:", problems.len());
    for problem in problems {
        eprintln!("  {problem}");
    }
    Ok(ExitCode::FAILURE)
}

fn find_tools(args: &Args) -> anyhow::Result<Tools> {
    let pgmux = match &args.pgmux {
        Some(path) => path.clone(),
        None => pooler::default_binary().context("cannot locate this executable")?,
    };
    if !pgmux.is_file() {
        bail!(
            "pgmux binary not found at {}: build it with `cargo build --release -p pgmux` (or pass --pgmux PATH)",
            pgmux.display()
        );
    }
    let pgbouncer = pgbouncer::find(args.pgbouncer.as_deref()).map_err(|e| anyhow!(e))?;
    let pgbench = pgbench::find(args.pgbench.as_deref()).map_err(|e| anyhow!(e))?;
    let client = std::env::current_exe().context("cannot locate this executable")?.with_file_name("pgmux-bench-client");
    if !client.is_file() {
        bail!("{} not found: build it with `cargo build -p pgmux-bench-lab`", client.display());
    }
    Ok(Tools { pgmux, pgbouncer, pgbench, client })
}

fn versions(tools: &Tools, lab: &Lab) -> Versions {
    let pgmux_version = machine::program_version(&tools.pgmux);
    Versions {
        pgmux: format!("{} ({pgmux_version})", machine::pgmux_revision(&workspace())),
        pgbouncer: machine::program_version(&tools.pgbouncer),
        postgres: lab.pg.try_psql("show server_version").unwrap_or_else(|e| format!("unknown ({e})")),
        pgbench: machine::program_version(&tools.pgbench),
    }
}

fn write_outputs(report: &RunReport, out: Option<&Path>, json: Option<&Path>) -> anyhow::Result<()> {
    if let Some(path) = out {
        let existing = match std::fs::read_to_string(path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let document = markdown::replace_section(existing.as_deref(), &markdown::section(report))
            .map_err(|e| anyhow!("{}: {e}", path.display()))?;
        std::fs::write(path, document).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("pgmux-bench: results written to {}", path.display());
    }
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(report)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
        eprintln!("pgmux-bench: figures written to {}", path.display());
    }
    Ok(())
}
