//! The benchmark's world: one throwaway PostgreSQL with the pgbench tables, and pgmux and PgBouncer in
//! front of it, started on demand. A pooler that exits on its own is noted (with its last output) and
//! started again when next needed, so that a crash costs the figures of one step rather than the run.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use pgmux_testkit::{APP_USER, DATABASE, PgOptions, PgServer};
use tempfile::TempDir;

use crate::child::tail;
use crate::pgbench::Pgbench;
use crate::pgbouncer::{PgBouncerProcess, PgBouncerSettings};
use crate::plan::Plan;
use crate::results::Target;
use crate::{PgmuxProcess, PgmuxSettings, interrupt, logs};

/// How long `pgbench -i` may take.
const INIT_LIMIT: Duration = Duration::from_secs(300);
/// How long the server connections of stopped poolers may take to go away.
const DRAIN_LIMIT: Duration = Duration::from_secs(15);

/// Scratch directories are `<tmp>/pgmux-bench-<pid>-<random>`, so that a later run can remove those of a
/// driver that was killed before it could.
const SCRATCH_PREFIX: &str = "pgmux-bench-";

/// The programs under test and the client.
#[derive(Clone, Debug)]
pub struct Tools {
    pub pgmux: PathBuf,
    pub pgbouncer: PathBuf,
    pub pgbench: PathBuf,
}

#[derive(Debug)]
pub struct Lab {
    pub pgbench: Pgbench,
    pub pgmux_settings: PgmuxSettings,
    pub bouncer_settings: PgBouncerSettings,
    pgmux: Option<PgmuxProcess>,
    bouncer: Option<PgBouncerProcess>,
    /// What pgmux wrote (warnings and worse at `log_level=warn`), over every instance so far.
    pgmux_log: Vec<String>,
    /// PgBouncer's log lines at WARNING or worse, over every instance so far.
    bouncer_log: Vec<String>,
    /// Pooler exits and other surprises, for the report.
    pub notes: Vec<String>,
    // Dropped in field order: the poolers above are stopped (in Drop) before PostgreSQL and the directory.
    pub pg: PgServer,
    pub scratch: TempDir,
}

impl Lab {
    /// Start PostgreSQL (trust on 127.0.0.1) and fill it with `pgbench -i -s <scale>`. No pooler runs yet.
    pub fn start(plan: &Plan, tools: &Tools) -> Result<Lab, String> {
        remove_orphans();
        let scratch = tempfile::Builder::new()
            .prefix(&format!("{SCRATCH_PREFIX}{}-", std::process::id()))
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        // PgBouncer runs as `postgres` when we are root and writes its log here.
        pgmux_testkit::give_to_postgres(scratch.path()).map_err(|e| format!("chown of the scratch dir: {e}"))?;
        let pg = PgServer::start_with(&PgOptions {
            max_connections: plan.max_connections,
            extra_conf: vec![("shared_buffers".into(), plan.shared_buffers.clone())],
            trust_loopback: true,
        });
        let pgbench = Pgbench {
            program: tools.pgbench.clone(),
            user: APP_USER.user.to_owned(),
            database: DATABASE.to_owned(),
            scratch: scratch.path().to_owned(),
        };
        eprintln!("pgmux-bench: PostgreSQL on port {}; pgbench -i -s {}", pg.port(), plan.scale);
        pgbench.initialise(pg.port(), plan.scale, INIT_LIMIT)?;
        let pgmux_settings = PgmuxSettings {
            binary: tools.pgmux.clone(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)), // a free port at each start
            database_url: pg.url(&APP_USER),
            pool_max: plan.pool_size,
            client_auth: "trust".to_owned(),
            log_level: "warn".to_owned(),
            max_client_conn: Some(plan.max_client_conn()),
        };
        let bouncer_settings = PgBouncerSettings {
            binary: tools.pgbouncer.clone(),
            dir: scratch.path().to_owned(),
            server_port: pg.port(),
            database: DATABASE.to_owned(),
            user: APP_USER.user.to_owned(),
            pool_size: plan.pool_size,
            max_client_conn: plan.max_client_conn(),
        };
        Ok(Lab {
            pgbench,
            pgmux_settings,
            bouncer_settings,
            pgmux: None,
            bouncer: None,
            pgmux_log: Vec::new(),
            bouncer_log: Vec::new(),
            notes: Vec::new(),
            pg,
            scratch,
        })
    }

    /// The port `target` listens on, starting the pooler if it is not running.
    pub fn port(&mut self, target: Target) -> Result<u16, String> {
        match target {
            Target::Direct => Ok(self.pg.port()),
            Target::Pgmux => {
                if self.pgmux.is_none() {
                    let mut settings = self.pgmux_settings.clone();
                    settings.listen.set_port(pgmux_testkit::free_port());
                    let process = PgmuxProcess::start(&settings).map_err(|e| format!("starting pgmux: {e}"))?;
                    self.pgmux = Some(process);
                }
                Ok(self.pgmux.as_ref().map_or(0, |p| p.listen().port()))
            }
            Target::PgBouncer => {
                if self.bouncer.is_none() {
                    self.bouncer = Some(PgBouncerProcess::start(&self.bouncer_settings)?);
                }
                Ok(self.bouncer.as_ref().map_or(0, PgBouncerProcess::port))
            }
        }
    }

    /// The pooler's pid; `None` for direct or a pooler not running.
    pub fn pid(&self, target: Target) -> Option<u32> {
        match target {
            Target::Pgmux => self.pgmux.as_ref()?.pid(),
            Target::PgBouncer => self.bouncer.as_ref()?.pid(),
            Target::Direct => None,
        }
    }

    /// Whether `target`'s pooler exited on its own (during `step`): if so, note it with its last output,
    /// forget it (the next [`Lab::port`] starts a new one) and return the note.
    pub fn check(&mut self, target: Target, step: &str) -> Option<String> {
        let exit = match target {
            Target::Pgmux => {
                let exit = self.pgmux.as_mut()?.exited()?;
                let output = self.pgmux.as_ref().map(PgmuxProcess::output).unwrap_or_default();
                self.forget_pgmux();
                format!("{exit}; its output ends: {}", tail(&output, 5).replace('\n', " / "))
            }
            Target::PgBouncer => {
                let exit = self.bouncer.as_mut()?.exited()?;
                self.bouncer = None;
                exit.replace('\n', " / ")
            }
            Target::Direct => return None,
        };
        let note = format!("{} exited during {step}: {exit}", target.label());
        eprintln!("pgmux-bench: {note}");
        self.notes.push(note.clone());
        Some(note)
    }

    /// Stop both poolers, wait until PostgreSQL has no connections of the application user left, and start
    /// `target` (nothing for direct): so that W5 counts only `target`'s server connections and W6 measures a
    /// pooler that carries nothing from the steps before.
    pub fn fresh(&mut self, target: Target) -> Result<u16, String> {
        self.stop_poolers();
        self.wait_for_drain();
        self.port(target)
    }

    pub fn stop_poolers(&mut self) {
        if let Some(mut bouncer) = self.bouncer.take() {
            self.bouncer_warnings(&bouncer);
            bouncer.stop();
        }
        self.forget_pgmux();
    }

    /// The notes, and what the poolers logged, condensed: pgmux's output (at `log_level=warn`, anything it
    /// writes is worth a look) and PgBouncer's warnings. Call after [`Lab::stop_poolers`] to have it all.
    pub fn notes_and_logs(&self) -> Vec<String> {
        let mut notes = self.notes.clone();
        let sources = [("pgmux", "output lines", &self.pgmux_log), ("PgBouncer", "warnings", &self.bouncer_log)];
        for (name, what, lines) in sources {
            if !lines.is_empty() {
                let condensed = logs::condense(lines, 5).join(" ¶ ");
                notes.push(format!("{name} wrote {} {what}; most frequent: {condensed}", lines.len()));
            }
        }
        notes
    }

    fn forget_pgmux(&mut self) {
        if let Some(mut pgmux) = self.pgmux.take() {
            pgmux.stop();
            self.pgmux_log.extend(pgmux.output().lines().filter(|l| !l.trim().is_empty()).map(str::to_owned));
        }
    }

    fn bouncer_warnings(&mut self, bouncer: &PgBouncerProcess) {
        self.bouncer_log.extend(bouncer.warnings());
    }

    fn wait_for_drain(&mut self) {
        let sql = format!(
            "select count(*) from pg_stat_activity where usename = '{}' and backend_type = 'client backend'",
            APP_USER.user
        );
        let started = Instant::now();
        loop {
            let left = self.pg.try_psql(&sql).unwrap_or_else(|e| e);
            if left == "0" || interrupt::requested() {
                return;
            }
            if started.elapsed() > DRAIN_LIMIT {
                let note =
                    format!("{left} server connections were still open {DRAIN_LIMIT:?} after the poolers stopped");
                eprintln!("pgmux-bench: {note}");
                self.notes.push(note);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Remove the scratch directories of drivers that no longer run (killed with SIGKILL: their children died
/// with them, of `PR_SET_PDEATHSIG`, but nobody removed the directory).
fn remove_orphans() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name.to_str().and_then(|n| n.strip_prefix(SCRATCH_PREFIX)).and_then(|rest| rest.split('-').next());
        let Some(pid) = pid.and_then(|pid| pid.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.stop_poolers();
    }
}
