//! The driver's options (one parser for the binary and the short-form test), the run inside the namespace
//! (seed, Toxiproxy, every scenario × target × run, the soak), and where the results go: JSON under
//! `target/`, a markdown report, and optionally the generated section of `docs/resilience.md`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::faults::{self, FaultTiming, Scenario};
use crate::goals::{self, Verdict};
use crate::hosts::HostsFile;
use crate::report::{self, Summary};
use crate::runner::{Bench, ScenarioRun};
use crate::soak::{self, SoakResult};
use crate::target::{Target, TargetKind, TargetSettings};
use crate::topology::{self, Seed, Topology};
use crate::workload::Plan;

pub const USAGE: &str = "\
usage: pgmux-chaos [--quick] [--runs N] [--targets LIST] [--scenarios LIST] [--soak SECONDS]
                   [--pgmux PATH] [--pgbouncer PATH] [--pgmux-env KEY=VALUE]... [--flip-delay MS]
                   [--hold MS] [--json PATH] [--markdown PATH] [--doc PATH]

  --quick          the short form: 6 scenarios, ~10 clients over two routes, pgmux and PgBouncer, one run
  --runs N         repeat every scenario N times (long form: 3)
  --targets LIST   pgmux,pgbouncer,pgbouncer-tuned (long form: all three)
  --scenarios LIST a comma-separated subset (default: all; --quick: its six)
  --soak SECONDS   connect-per-transaction soak against pgmux (long form: 1800; 0 = none)
  --pgmux PATH     the pgmux binary (default: target/debug/pgmux, or target/release/pgmux if newer)
  --pgmux-env K=V  an extra setting for pgmux (PGMUX_<KEY>=value); repeatable
  --flip-delay MS  failover scenarios: time from the fault to the name flip (default 0; demote and
                   read-only wait at least 2000)
  --hold MS        how long hangs and network toxics last (quick: 4000, long: 15000)
  --json PATH      results (default target/chaos/<quick|long>.json)
  --markdown PATH  the report as markdown (default target/chaos/<quick|long>.md)
  --doc PATH       also rewrite the generated section of this file (make chaos: docs/resilience.md)
";

#[derive(Clone, Debug, Serialize)]
pub struct Options {
    pub quick: bool,
    pub runs: u32,
    pub targets: Vec<TargetKind>,
    pub scenarios: Vec<Scenario>,
    pub soak_secs: u64,
    pub pgmux: PathBuf,
    pub pgbouncer: PathBuf,
    pub pgmux_env: Vec<(String, String)>,
    pub json: PathBuf,
    pub markdown: PathBuf,
    pub doc: Option<PathBuf>,
    pub plan: Plan,
    pub timing: FaultTiming,
}

/// `target/` of this workspace (or `CARGO_TARGET_DIR`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"))
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("..")
}

impl Options {
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let quick = args.iter().any(|a| a == "--quick");
        let mut opts = Options::defaults(quick);
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut value = || it.next().cloned().ok_or_else(|| format!("{arg} needs a value\n{USAGE}"));
            match arg.as_str() {
                "--quick" => {}
                "--runs" => opts.runs = number(&value()?)?.clamp(1, 100) as u32,
                "--targets" => opts.targets = list(&value()?, TargetKind::parse)?,
                "--scenarios" => opts.scenarios = list(&value()?, Scenario::parse)?,
                "--soak" => opts.soak_secs = number(&value()?)?,
                "--pgmux" => opts.pgmux = PathBuf::from(value()?),
                "--pgbouncer" => opts.pgbouncer = PathBuf::from(value()?),
                "--pgmux-env" => {
                    let kv = value()?;
                    let (k, v) = kv.split_once('=').ok_or_else(|| format!("--pgmux-env {kv}: not KEY=VALUE"))?;
                    let key =
                        if k.starts_with("PGMUX_") { k.to_owned() } else { format!("PGMUX_{}", k.to_uppercase()) };
                    opts.pgmux_env.push((key, v.to_owned()));
                }
                "--flip-delay" => opts.timing.flip_delay_ms = number(&value()?)?,
                "--hold" => opts.timing.hold_ms = number(&value()?)?.max(500),
                "--json" => opts.json = PathBuf::from(value()?),
                "--markdown" => opts.markdown = PathBuf::from(value()?),
                "--doc" => opts.doc = Some(PathBuf::from(value()?)),
                "-h" | "--help" => return Err(USAGE.to_owned()),
                other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
            }
        }
        // Hangs must end before the operations caught in them are abandoned.
        opts.plan.op_timeout_ms = opts.plan.op_timeout_ms.max(opts.timing.hold_ms + 10_000);
        opts.plan.run_ms = opts.plan.run_ms.max(opts.timing.hold_ms + 2000);
        Ok(opts)
    }

    fn defaults(quick: bool) -> Options {
        let form = if quick { "quick" } else { "long" };
        let out = target_dir().join("chaos");
        let (plan, timing) = if quick {
            let plan = Plan {
                idle: 4,
                busy: 3,
                in_flight: 2,
                idle_offsets_ms: vec![200, 1000, 2500, 4000],
                lead_ms: 1500,
                run_ms: 5000,
                long_query_ms: 3000,
                op_timeout_ms: 15_000,
                lock_holder: false,
                readers: 0,
                // Two routes (two pools on the same primary), each judged on its own (issue 30).
                routes: vec!["pgmux".into(), "pgmux_b".into()],
            };
            (plan, FaultTiming { hold_ms: 4000, flip_delay_ms: 0 })
        } else {
            let plan = Plan {
                idle: 12,
                busy: 6,
                in_flight: 4,
                idle_offsets_ms: vec![200, 1000, 2000, 5000, 10_000, 20_000],
                lead_ms: 2000,
                run_ms: 25_000,
                long_query_ms: 10_000,
                op_timeout_ms: 40_000,
                lock_holder: false,
                readers: 0,
                routes: vec!["pgmux".into()],
            };
            (plan, FaultTiming { hold_ms: 15_000, flip_delay_ms: 0 })
        };
        Options {
            quick,
            runs: if quick { 1 } else { 3 },
            targets: if quick {
                vec![TargetKind::Pgmux, TargetKind::Pgbouncer]
            } else {
                vec![TargetKind::Pgmux, TargetKind::Pgbouncer, TargetKind::PgbouncerTuned]
            },
            scenarios: if quick { faults::QUICK.to_vec() } else { faults::ALL.to_vec() },
            soak_secs: if quick { 0 } else { 1800 },
            pgmux: default_pgmux(),
            pgbouncer: std::env::var_os("PGMUX_PGBOUNCER").map_or_else(|| "/usr/sbin/pgbouncer".into(), PathBuf::from),
            pgmux_env: Vec::new(),
            json: out.join(format!("{form}.json")),
            markdown: out.join(format!("{form}.md")),
            doc: None,
            plan,
            timing,
        }
    }
}

/// `target/debug/pgmux` or `target/release/pgmux`, whichever was built last.
fn default_pgmux() -> PathBuf {
    let candidates = ["debug", "release"].map(|profile| target_dir().join(profile).join("pgmux"));
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    candidates
        .iter()
        .filter(|p| p.is_file())
        .max_by_key(|p| modified(p))
        .cloned()
        .unwrap_or_else(|| candidates[0].clone())
}

fn number(text: &str) -> Result<u64, String> {
    text.parse().map_err(|_| format!("{text:?} is not a number"))
}

fn list<T>(text: &str, parse: fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    text.split(',').filter(|s| !s.is_empty()).map(parse).collect()
}

/// Where and with what a run was made.
#[derive(Clone, Debug, Serialize)]
pub struct Meta {
    pub date: String,
    pub commit: String,
    pub machine: String,
    pub pgmux: String,
    pub pgmux_binary: String,
    pub pgbouncer: String,
    pub postgres: String,
    pub toxiproxy: String,
}

/// Everything a driver run produced.
#[derive(Clone, Debug, Serialize)]
pub struct Results {
    pub meta: Meta,
    pub options: Options,
    pub summaries: Vec<Summary>,
    pub goals: Vec<GoalResult>,
    pub soak: Option<SoakResult>,
}

#[derive(Clone, Debug, Serialize)]
pub struct GoalResult {
    pub id: String,
    pub text: String,
    pub enforced: bool,
    pub result: Verdict,
}

/// The run inside the namespace: every scenario for every target, `runs` times, then the soak.
pub fn drive(opts: &Options, namespace: &str) -> Result<Results, String> {
    for (what, path) in [("pgmux", &opts.pgmux), ("pgbouncer", &opts.pgbouncer)] {
        if !path.is_file() {
            let fix = if what == "pgmux" { "cargo build -p pgmux" } else { "apt-get install pgbouncer" };
            return Err(format!("{what} not found at {} ({fix})", path.display()));
        }
    }
    // Read now: the commit is the one the run starts from, even if the tree changes while it runs.
    let meta = meta(opts);
    let hosts = HostsFile::new(namespace)?;
    let seed = Seed::create()?;
    let toxiproxy = topology::start_toxiproxy()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let settings = TargetSettings {
        pgmux: opts.pgmux.clone(),
        pgbouncer: opts.pgbouncer.clone(),
        pool_size: 10,
        pgmux_env: opts.pgmux_env.clone(),
        routes: opts.plan.routes.clone(),
        reader: false,
    };
    let bench = Bench {
        seed: &seed,
        hosts: &hosts,
        toxi: toxiproxy.client(),
        settings: &settings,
        plan: &opts.plan,
        timing: &opts.timing,
        runtime: &runtime,
    };
    let mut runs: Vec<ScenarioRun> = Vec::new();
    'all: for run in 1..=opts.runs {
        for &scenario in &opts.scenarios {
            for &target in &opts.targets {
                if crate::isolate::stop_requested() {
                    break 'all;
                }
                eprintln!("pgmux-chaos: run {run}/{}: {} against {}", opts.runs, scenario.name(), target.name());
                let result = bench.run(scenario, target, run);
                if let Some(e) = &result.error {
                    eprintln!("pgmux-chaos:   failed: {e}");
                }
                runs.push(result);
            }
        }
    }
    if crate::isolate::stop_requested() {
        return Err("interrupted".to_owned());
    }
    let soak = if opts.soak_secs > 0 { Some(run_soak(&bench, opts.soak_secs)?) } else { None };
    write_raw(opts, &runs)?;
    let summaries = report::summarize(&runs);
    let goals = goals::judge(&summaries, soak.as_ref())
        .into_iter()
        .map(|(g, v)| GoalResult { id: g.id.into(), text: g.text.into(), enforced: g.enforced, result: v })
        .collect();
    Ok(Results { meta, options: opts.clone(), summaries, goals, soak })
}

fn run_soak(bench: &Bench<'_>, secs: u64) -> Result<SoakResult, String> {
    eprintln!("pgmux-chaos: soak against pgmux for {secs} s");
    let _topo = Topology::build(bench.seed, bench.hosts, bench.toxi)?;
    let target = Target::start(TargetKind::Pgmux, bench.settings)?;
    Ok(bench.runtime.block_on(soak::soak(&target, Duration::from_secs(secs))))
}

/// Every operation of every run, for whoever wants to look closer (beside the JSON summary).
fn write_raw(opts: &Options, runs: &[ScenarioRun]) -> Result<(), String> {
    let path = opts.json.with_extension("runs.json");
    write_file(&path, &serde_json::to_string(runs).map_err(|e| e.to_string())?)
}

pub fn write_file(path: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn meta(opts: &Options) -> Meta {
    let first_line = |program: &Path, arg: &str| {
        std::process::Command::new(program)
            .arg(arg)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or("?").trim().to_owned())
            .unwrap_or_else(|e| format!("unknown ({e})"))
    };
    let postgres =
        pgmux_testkit::pg_bin_dir().map_or("unknown".into(), |b| first_line(&b.join("postgres"), "--version"));
    Meta {
        date: pgmux_testkit::utc_now(),
        commit: git_revision(),
        machine: machine(),
        pgmux: first_line(&opts.pgmux, "--version"),
        pgmux_binary: opts.pgmux.display().to_string(),
        pgbouncer: first_line(&opts.pgbouncer, "--version"),
        postgres,
        toxiproxy: pgmux_testkit::toxiproxy::VERSION.to_owned(),
    }
}

fn git_revision() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(workspace_root())
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match (git(&["rev-parse", "--short", "HEAD"]), git(&["status", "--porcelain", "--untracked-files=no"])) {
        (Some(rev), Some(changes)) if changes.is_empty() => rev,
        (Some(rev), _) => format!("{rev}-dirty"),
        _ => "unknown".to_owned(),
    }
}

fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.trim() == "model name").map(|(_, v)| v.trim().to_owned()))
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    format!("{cpu}, {cores} cores, Linux {}", read("/proc/sys/kernel/osrelease").trim())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosts::HostsFile;
    use crate::topology::{PROXY_A, PROXY_B};

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn options_parse_and_bad_input_is_refused() {
        let quick = Options::parse(&args(&["--quick"])).expect("quick");
        assert_eq!(quick.scenarios, faults::QUICK.to_vec());
        assert_eq!(quick.soak_secs, 0);
        let opts = Options::parse(&args(&[
            "--targets",
            "pgmux,pgbouncer-tuned",
            "--scenarios",
            "demote,lossy",
            "--runs",
            "2",
            "--hold",
            "30000",
            "--pgmux-env",
            "query_timeout=5s",
        ]))
        .expect("options");
        assert_eq!(opts.targets, vec![TargetKind::Pgmux, TargetKind::PgbouncerTuned]);
        assert_eq!(opts.scenarios, vec![Scenario::Demote, Scenario::Lossy]);
        assert_eq!(opts.runs, 2);
        assert_eq!(opts.pgmux_env, vec![("PGMUX_QUERY_TIMEOUT".to_owned(), "5s".to_owned())]);
        // A hang must end before the operations caught in it are abandoned.
        assert!(opts.plan.op_timeout_ms > opts.timing.hold_ms);
        for bad in [&["--runs"][..], &["--targets", "haproxy"], &["--scenarios", "meteor"], &["--frobnicate"]] {
            assert!(Options::parse(&args(bad)).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn every_scenario_name_parses_back() {
        for scenario in faults::ALL {
            assert_eq!(Scenario::parse(&scenario.name()), Ok(scenario));
        }
    }

    #[test]
    fn the_hosts_flip_keeps_the_length() {
        assert_eq!(HostsFile::text(PROXY_A).len(), HostsFile::text(PROXY_B).len());
        assert!(HostsFile::new("not-ours").is_err());
    }
}
