//! `pgmux-bench-client JOB.json REPORT.json`: runs one job of the network lab's clients (see
//! `pgmux_bench_lab::jobs`) where it is started, which is the lab's application host (`pgmux-bench` starts it
//! there with `ip netns exec`), and writes what it measured as JSON. Not meant to be run by hand.

use std::path::PathBuf;
use std::process::ExitCode;

use pgmux_bench_lab::jobs::{self, Job};

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [job, report] = args.as_slice() else {
        eprintln!("usage: pgmux-bench-client JOB.json REPORT.json (started by pgmux-bench)");
        return ExitCode::from(2);
    };
    match run(job, report) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pgmux-bench-client: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(job: &PathBuf, report: &PathBuf) -> Result<(), String> {
    let text = std::fs::read_to_string(job).map_err(|e| format!("reading {}: {e}", job.display()))?;
    let job: Job = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", job.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let outcome = runtime.block_on(jobs::run(job))?;
    let json = serde_json::to_string(&outcome).map_err(|e| e.to_string())?;
    std::fs::write(report, json).map_err(|e| format!("writing {}: {e}", report.display()))
}
