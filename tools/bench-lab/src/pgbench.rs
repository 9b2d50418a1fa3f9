//! pgbench, the reference client for W1–W4: finding it, running it with a deadline, and reading its report.
//!
//! A run counts only if pgbench exits 0 and reports transactions. Otherwise the figure becomes a failure
//! whose reason is the error pgbench printed (for `-M prepared` through a transaction pooler: `prepared
//! statement "P_0" does not exist`), so that the report shows why instead of a partial tps.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pgmux_testkit::netns;
use pgmux_testkit::process::{ChildProcess, Waited, tail};

use crate::endpoint::Endpoint;
use crate::interrupt;

/// Where pgbench is: `explicit` if given, else beside the PostgreSQL server binaries (Debian keeps it in
/// `/usr/lib/postgresql/<v>/bin`, and `/usr/bin/pgbench` is only a wrapper that needs a cluster), else PATH.
pub fn find(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = explicit {
        return if path.is_file() {
            Ok(path.to_owned())
        } else {
            Err(format!("pgbench not found at {} (apt-get install postgresql-15 has it)", path.display()))
        };
    }
    if let Ok(dir) = pgmux_testkit::pg_bin_dir()
        && dir.join("pgbench").is_file()
    {
        return Ok(dir.join("pgbench"));
    }
    let on_path = Command::new("pgbench").arg("--version").output().is_ok_and(|out| out.status.success());
    if on_path {
        return Ok(PathBuf::from("pgbench"));
    }
    Err("pgbench not found: apt-get install postgresql-15 (Debian puts it in /usr/lib/postgresql/15/bin), \
         or pass --pgbench PATH"
        .to_owned())
}

/// pgbench as one user, on one database, against whatever [`Endpoint`] it is given (with its TLS mode and
/// password); run on the machine, or on the network lab's application host.
#[derive(Clone, Debug)]
pub struct Pgbench {
    pub program: PathBuf,
    pub user: String,
    pub database: String,
    /// Where each run's output goes (overwritten per run).
    pub scratch: PathBuf,
    /// The network namespace to run in (`ip netns exec`); `None`: this one.
    pub netns: Option<String>,
}

/// What one run gave.
#[derive(Clone, Debug, PartialEq)]
pub enum PgbenchOutcome {
    /// `latency_ms` is pgbench's "latency average" (clients / tps, connection time included with `-C`).
    Done {
        tps: f64,
        transactions: u64,
        latency_ms: Option<f64>,
    },
    Failed(String),
}

impl Pgbench {
    /// `pgbench <args> -U <user> <database>` against `endpoint`, killed after `limit` or on Ctrl-C.
    /// `clients` is only for the failure message ("12 of 50 clients aborted").
    pub fn run(&self, endpoint: &Endpoint, args: &[String], clients: u32, limit: Duration) -> PgbenchOutcome {
        let output = self.scratch.join("pgbench.out");
        let _ = std::fs::remove_file(&output);
        let mut cmd = self.command(endpoint);
        cmd.args(args).arg(&self.database);
        let mut child = match ChildProcess::spawn_logged("pgbench", cmd, &output) {
            Ok(child) => child,
            Err(e) => return PgbenchOutcome::Failed(e.to_string()),
        };
        let waited = child.wait(limit, interrupt::requested);
        child.stop();
        let text = child.output();
        match waited {
            Waited::Exited(status) => parse(&text, status.success(), clients),
            Waited::TimedOut => PgbenchOutcome::Failed(format!("still running after {limit:?}; killed")),
            Waited::Interrupted => PgbenchOutcome::Failed("interrupted".to_owned()),
        }
    }

    /// `pgbench -i -s <scale>` (run once, directly against PostgreSQL).
    pub fn initialise(&self, endpoint: &Endpoint, scale: u32, limit: Duration) -> Result<(), String> {
        let output = self.scratch.join("pgbench-init.out");
        let mut cmd = self.command(endpoint);
        cmd.args(["-i", "-s", &scale.to_string(), "-q"]).arg(&self.database);
        let mut child = ChildProcess::spawn_logged("pgbench -i", cmd, &output).map_err(|e| e.to_string())?;
        match child.wait(limit, interrupt::requested) {
            Waited::Exited(status) if status.success() => Ok(()),
            Waited::Exited(status) => Err(format!("pgbench -i failed ({status}):\n{}", child.output_tail(10))),
            Waited::TimedOut => Err(format!("pgbench -i did not finish within {limit:?}")),
            Waited::Interrupted => Err("interrupted".to_owned()),
        }
    }

    fn command(&self, endpoint: &Endpoint) -> Command {
        let mut cmd = match &self.netns {
            Some(name) => netns::exec_in(name, &self.program),
            None => Command::new(&self.program),
        };
        cmd.args(["-U", &self.user]);
        // A group of its own: a Ctrl-C in the terminal reaches only the driver, which stops it.
        cmd.process_group(0);
        for var in ["PGPASSWORD", "PGOPTIONS", "PGSERVICE", "PGSSLROOTCERT", "PGHOSTADDR"] {
            cmd.env_remove(var);
        }
        cmd.envs(endpoint.libpq_env());
        cmd
    }
}

/// Read pgbench's report (stdout and stderr together).
pub fn parse(output: &str, exited_ok: bool, clients: u32) -> PgbenchOutcome {
    let tps = field(output, "tps = ");
    let transactions = field(output, "number of transactions actually processed: ");
    let failed = field(output, "number of failed transactions: ").unwrap_or(0.0);
    let latency_ms = field(output, "latency average = ");
    match (exited_ok, tps, transactions) {
        (true, Some(tps), Some(n)) if n > 0.0 && failed == 0.0 => {
            PgbenchOutcome::Done { tps, transactions: n as u64, latency_ms }
        }
        (true, Some(_), Some(n)) if n > 0.0 => PgbenchOutcome::Failed(format!("{failed} failed transactions")),
        (true, _, Some(_)) => {
            let connecting = field(output, "initial connection time = ")
                .map_or(String::new(), |ms| format!(" (its clients took {ms} ms to connect, out of the run's time)"));
            PgbenchOutcome::Failed(format!("no transaction completed{connecting}"))
        }
        _ => PgbenchOutcome::Failed(failure_reason(output, clients)),
    }
}

/// The first number after `prefix` at the start of a line.
fn field(output: &str, prefix: &str) -> Option<f64> {
    let rest = output.lines().find_map(|line| line.trim_start().strip_prefix(prefix))?;
    rest.split_whitespace().next()?.parse().ok()
}

/// Why a run failed: the server error that aborted the first client, with how many clients aborted; else
/// the first other error line; else the tail of the output.
fn failure_reason(output: &str, clients: u32) -> String {
    let errors: Vec<&str> =
        output.lines().filter_map(|line| line.strip_prefix("pgbench: error: ").map(str::trim)).collect();
    let aborted: Vec<&str> = errors.iter().copied().filter(|line| is_client_abort(line)).collect();
    let abort_reason = aborted.iter().find_map(|line| line.split_once("ERROR:").map(|(_, why)| why.trim()));
    let other = errors.iter().copied().find(|line| !is_client_abort(line) && !line.starts_with("Run was aborted"));
    let reason = match (abort_reason, other) {
        (Some(why), _) => why.to_owned(),
        (None, Some(line)) => line.to_owned(),
        (None, None) if !aborted.is_empty() => aborted[0].to_owned(),
        (None, None) => format!("no report; output ends: {}", tail(output, 3).replace('\n', " / ")),
    };
    if aborted.is_empty() { reason } else { format!("{reason} ({} of {clients} clients aborted)", aborted.len()) }
}

/// `client 41 script 0 aborted in command 1 query 0: …`, `client 3 aborted while establishing connection`.
fn is_client_abort(line: &str) -> bool {
    line.starts_with("client ") && line.contains(" aborted")
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "\
pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: <builtin: select only>
scaling factor: 10
query mode: simple
number of clients: 50
number of threads: 2
maximum number of tries: 1
duration: 2 s
number of transactions actually processed: 53845
number of failed transactions: 0 (0.000%)
latency average = 1.853 ms
initial connection time = 20.112 ms
tps = 26991.057286 (without initial connection time)
";

    #[test]
    fn a_good_run() {
        let done = PgbenchOutcome::Done { tps: 26991.057286, transactions: 53845, latency_ms: Some(1.853) };
        assert_eq!(parse(REPORT, true, 50), done);
        let reconnecting = REPORT
            .replace("initial connection time = 20.112 ms", "average connection time = 0.281 ms")
            .replace("26991.057286 (without initial connection time)", "6387.275827 (including reconnection times)");
        let done = PgbenchOutcome::Done { tps: 6387.275827, transactions: 53845, latency_ms: Some(1.853) };
        assert_eq!(parse(&reconnecting, true, 50), done);
    }

    #[test]
    fn prepared_statements_through_a_transaction_pooler() {
        let output = format!(
            "{}{}",
            REPORT.replace("query mode: simple", "query mode: prepared"),
            "pgbench: error: ERROR:  prepared statement \"P_0\" already exists
pgbench: error: client 41 script 0 aborted in command 1 query 0: ERROR:  prepared statement \"P_0\" does not exist
pgbench: error: client 33 script 0 aborted in command 1 query 0: ERROR:  prepared statement \"P_0\" does not exist
pgbench: error: Run was aborted; the above results are incomplete.
"
        );
        assert_eq!(
            parse(&output, false, 50),
            PgbenchOutcome::Failed("prepared statement \"P_0\" does not exist (2 of 50 clients aborted)".into())
        );
    }

    #[test]
    fn cannot_connect() {
        let output = "pgbench: error: connection to server at \"127.0.0.1\", port 5998 failed: Connection refused
\tIs the server running on that host and accepting TCP/IP connections?
pgbench: error: could not create connection for setup
";
        let reason = "connection to server at \"127.0.0.1\", port 5998 failed: Connection refused";
        assert_eq!(parse(output, false, 50), PgbenchOutcome::Failed(reason.into()));
        let reconnect = "pgbench: error: connection to server at \"127.0.0.1\", port 6432 failed: FATAL:  too many
pgbench: error: client 7 aborted while establishing connection
";
        assert!(matches!(parse(reconnect, false, 50),
            PgbenchOutcome::Failed(r) if r.ends_with("FATAL:  too many (1 of 50 clients aborted)")));
    }

    #[test]
    fn odd_endings() {
        assert_eq!(parse("", false, 50), PgbenchOutcome::Failed("no report; output ends: (no output)".into()));
        let none_processed =
            REPORT.replace("processed: 53845", "processed: 0").replace("tps = 26991.057286", "tps = 0.0");
        let reason = "no transaction completed (its clients took 20.112 ms to connect, out of the run's time)";
        assert_eq!(parse(&none_processed, true, 50), PgbenchOutcome::Failed(reason.into()));
        let some_failed = REPORT.replace("failed transactions: 0 (0.000%)", "failed transactions: 3 (0.010%)");
        assert_eq!(parse(&some_failed, true, 50), PgbenchOutcome::Failed("3 failed transactions".into()));
    }
}
