//! The benchmark's world: one throwaway PostgreSQL with the pgbench tables, and pgmux and PgBouncer in
//! front of it, started on demand, reached over 127.0.0.1 or their Unix sockets; and, when a network
//! workload is planned, the network lab ([`NetLab`]) beside it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pgmux_testkit::{APP_USER, DATABASE, PgOptions, PgServer};
use tempfile::TempDir;

use crate::endpoint::Endpoint;
use crate::metric::World;
use crate::netlab::NetLab;
use crate::pgbench::Pgbench;
use crate::pgbouncer::PgBouncerSettings;
use crate::plan::Plan;
use crate::poolers::{Poolers, Ports};
use crate::results::Target;
use crate::{PgmuxSettings, interrupt, logs};

/// How long `pgbench -i` may take.
pub const INIT_LIMIT: Duration = Duration::from_secs(300);
/// How long the server connections of stopped poolers may take to go away.
const DRAIN_LIMIT: Duration = Duration::from_secs(15);

/// Scratch directories are `<tmp>/pgmux-bench-<pid>-<random>`, so that a later run can remove those of a
/// driver that was killed before it could.
const SCRATCH_PREFIX: &str = "pgmux-bench-";

/// The programs under test and the clients.
#[derive(Clone, Debug)]
pub struct Tools {
    pub pgmux: PathBuf,
    pub pgbouncer: PathBuf,
    pub pgbench: PathBuf,
    /// `pgmux-bench-client`, the network lab's clients.
    pub client: PathBuf,
}

#[derive(Debug)]
pub struct Lab {
    /// The network lab, once asked for: `Err` says why it could not be built.
    net: Option<Result<NetLab, String>>,
    pub pgbench: Pgbench,
    pub poolers: Poolers,
    /// Pooler exits and other surprises, for the report.
    pub notes: Vec<String>,
    tools: Tools,
    // Dropped in field order: the network lab and the poolers (in Drop) before PostgreSQL and the directory.
    pub pg: PgServer,
    pub scratch: TempDir,
}

impl Lab {
    /// Start PostgreSQL (trust on 127.0.0.1 and its socket) and fill it with `pgbench -i -s <scale>`. No
    /// pooler runs yet.
    pub fn start(plan: &Plan, tools: &Tools) -> Result<Lab, String> {
        remove_orphans();
        let scratch = tempfile::Builder::new()
            .prefix(&format!("{SCRATCH_PREFIX}{}-", std::process::id()))
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        // PgBouncer runs as `postgres` when we are root and writes its log and socket here.
        let sockets = [scratch.path().join("pgmux-socket"), scratch.path().join("pgbouncer-socket")];
        for dir in [scratch.path()].into_iter().chain(sockets.iter().map(PathBuf::as_path)) {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            pgmux_testkit::give_to_postgres(dir).map_err(|e| format!("chown of {}: {e}", dir.display()))?;
        }
        let hba = scratch.path().join("pg_hba_trust.conf");
        std::fs::write(&hba, "local all all trust\nhost all all 127.0.0.1/32 trust\n")
            .and_then(|()| pgmux_testkit::give_to_postgres(&hba))
            .map_err(|e| format!("writing {}: {e}", hba.display()))?;
        let pg = PgServer::start_with(&PgOptions {
            max_connections: plan.max_connections,
            extra_conf: vec![
                ("shared_buffers".into(), plan.shared_buffers.clone()),
                ("hba_file".into(), hba.display().to_string()),
            ],
            trust_loopback: false,
        });
        let pgbench = Pgbench {
            program: tools.pgbench.clone(),
            user: APP_USER.user.to_owned(),
            database: DATABASE.to_owned(),
            scratch: scratch.path().to_owned(),
            netns: None,
        };
        eprintln!("pgmux-bench: PostgreSQL on port {}; pgbench -i -s {}", pg.port(), plan.scale);
        pgbench.initialise(&Endpoint::tcp("127.0.0.1", pg.port()), plan.scale, INIT_LIMIT)?;
        let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let pgmux_settings = PgmuxSettings {
            binary: tools.pgmux.clone(),
            listen: SocketAddr::new(loopback, 0), // a free port at each start
            database_url: pg.url(&APP_USER),
            pool_max: Some(plan.pool_size),
            client_auth: "trust".to_owned(),
            log_level: "warn".to_owned(),
            max_client_conn: Some(plan.max_client_conn()),
            unix_socket_dir: Some(sockets[0].clone()),
            pool_grow_after: None,
            netns: None,
        };
        let bouncer_settings = PgBouncerSettings {
            binary: tools.pgbouncer.clone(),
            dir: scratch.path().to_owned(),
            listen_addr: loopback,
            unix_socket_dir: Some(sockets[1].clone()),
            server_host: "127.0.0.1".to_owned(),
            server_port: pg.port(),
            server_ca: None,
            database: DATABASE.to_owned(),
            user: APP_USER.user.to_owned(),
            password: String::new(),
            pool_size: Some(plan.pool_size),
            max_client_conn: plan.max_client_conn(),
            netns: None,
        };
        Ok(Lab {
            net: None,
            pgbench,
            poolers: Poolers::new(pgmux_settings, bouncer_settings, Ports::Free),
            notes: Vec::new(),
            tools: tools.clone(),
            pg,
            scratch,
        })
    }

    /// The network lab, built on first use (and its topology checked); the error if it cannot be.
    pub fn net(&mut self, plan: &Plan) -> Result<&mut NetLab, String> {
        if self.net.is_none() {
            eprintln!("pgmux-bench: building the network lab ({} ms round trip)", plan.rtt_ms);
            let built = NetLab::start(plan, &self.tools, self.scratch.path());
            if let Err(e) = &built {
                eprintln!("pgmux-bench: the network lab could not be built: {e}");
            }
            self.net = Some(built);
        }
        match &mut self.net {
            Some(Ok(net)) => Ok(net),
            Some(Err(e)) => Err(format!("no network lab: {e}")),
            None => unreachable!("built above"),
        }
    }

    /// The network lab if it was built.
    pub fn built_net(&self) -> Option<&NetLab> {
        self.net.as_ref()?.as_ref().ok()
    }

    /// Where clients reach `target` in the loopback or Unix setting, starting its pooler if need be.
    pub fn endpoint(&mut self, world: World, target: Target) -> Result<Endpoint, String> {
        let unix = world == World::Unix;
        match target {
            Target::Direct if unix => Ok(Endpoint::unix(self.pg_socket_dir(), self.pg.port())),
            Target::Direct => Ok(Endpoint::tcp("127.0.0.1", self.pg.port())),
            _ => self.poolers.endpoint(target, unix),
        }
    }

    /// PostgreSQL's socket directory (the harness puts it beside the data directory).
    fn pg_socket_dir(&self) -> &Path {
        self.pg.data_dir().parent().unwrap_or(Path::new("/tmp"))
    }

    /// Whether `target`'s pooler exited on its own (during `step`): if so, note it with its last output and
    /// return the note.
    pub fn check(&mut self, target: Target, step: &str) -> Option<String> {
        let exit = self.poolers.exited(target)?;
        let note = format!("{} exited during {step}: {exit}", target.label());
        eprintln!("pgmux-bench: {note}");
        self.notes.push(note.clone());
        Some(note)
    }

    /// Stop both poolers, wait until PostgreSQL has no connections of the application user left, and start
    /// `target` (nothing for direct): so that W5 counts only `target`'s server connections and W6 measures a
    /// pooler that carries nothing from the steps before.
    pub fn fresh(&mut self, target: Target) -> Result<Endpoint, String> {
        self.poolers.stop();
        if let Some(note) = wait_for_drain(&self.pg) {
            eprintln!("pgmux-bench: {note}");
            self.notes.push(note);
        }
        self.endpoint(World::Loopback, target)
    }

    /// Runs pgmux with `pool_grow_after = 0` (its pool grows at once whenever a client finds nothing idle, as
    /// PgBouncer's does) or with its default lazy growth: stopped when that changes, started again with the
    /// other setting when next needed.
    pub fn grow_pgmux_eagerly(&mut self, eagerly: bool) {
        let want = eagerly.then(|| "0ms".to_owned());
        if self.poolers.pgmux_settings.pool_grow_after != want {
            self.poolers.pgmux_settings.pool_grow_after = want;
            self.poolers.stop_pgmux();
        }
    }

    /// Stop every pooler, the network lab's too.
    pub fn stop_poolers(&mut self) {
        self.poolers.stop();
        if let Some(Ok(net)) = &mut self.net {
            net.poolers.stop();
        }
    }

    /// The notes, and what the poolers logged, condensed: pgmux's output (at `log_level=warn`, anything it
    /// writes is worth a look) and PgBouncer's warnings. Call after [`Lab::stop_poolers`] to have it all.
    pub fn notes_and_logs(&self) -> Vec<String> {
        let mut notes = self.notes.clone();
        let mut sets = vec![("", &self.poolers)];
        if let Some(Ok(net)) = &self.net {
            notes.extend(net.notes.iter().cloned());
            sets.push((" in the network lab", &net.poolers));
        }
        for (place, poolers) in sets {
            for (name, what, lines) in poolers.logs() {
                if !lines.is_empty() {
                    let condensed = logs::condense(lines, 5).join(" ¶ ");
                    notes.push(format!("{name}{place} wrote {} {what}; most frequent: {condensed}", lines.len()));
                }
            }
        }
        notes
    }
}

/// Wait until `pg` has no client backends of the application user; a note if some are still there after
/// the limit.
pub fn wait_for_drain(pg: &PgServer) -> Option<String> {
    let sql = format!(
        "select count(*) from pg_stat_activity where usename = '{}' and backend_type = 'client backend'",
        APP_USER.user
    );
    let started = Instant::now();
    loop {
        let left = pg.try_psql(&sql).unwrap_or_else(|e| e);
        if left == "0" || interrupt::requested() {
            return None;
        }
        if started.elapsed() > DRAIN_LIMIT {
            return Some(format!(
                "{left} server connections were still open {DRAIN_LIMIT:?} after the poolers stopped"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
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
