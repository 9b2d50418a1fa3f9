//! The poolers under test, as an operator would run them: the `pgmux` binary configured by environment
//! variables, and Debian's PgBouncer 1.18 with its defaults (and, optionally, tuned as failover.md 7.4
//! suggests), both in transaction mode in front of the writer host name, SCRAM on both sides. With more than
//! one route, each is a database name of its own for the same server database, so each has its own pool:
//! `PGMUX_DATABASES` for pgmux (and `PGMUX_USERS` for the app role's password), `[databases]` for PgBouncer.
//! The reader scenario adds [`READER_ROUTE`]: for pgmux a reader route whose one reader is the standby's
//! proxy (the writer is its fallback, pgmux's default), for PgBouncer a database on the standby's proxy.

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pgmux_testkit::APP_USER;
use pgmux_testkit::process::{ChildProcess, NotListening, Stopped, Waited};
use serde::Serialize;

use crate::hosts::WRITER_NAME;
use crate::node::PG_PORT;
use crate::topology::PROXY_B;
use crate::workload::READER_ROUTE;

/// Where every target listens, inside the namespace.
pub const LISTEN: &str = "127.0.0.1:6432";
const LISTEN_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TargetKind {
    Pgmux,
    /// PgBouncer 1.18 with its defaults (pool size and client limits aside).
    Pgbouncer,
    /// PgBouncer with failover.md 7.4's tuning: short login retry, DNS TTL, keepalives, user timeout.
    PgbouncerTuned,
}

impl TargetKind {
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Pgmux => "pgmux",
            TargetKind::Pgbouncer => "pgbouncer",
            TargetKind::PgbouncerTuned => "pgbouncer-tuned",
        }
    }

    pub fn parse(name: &str) -> Result<TargetKind, String> {
        [TargetKind::Pgmux, TargetKind::Pgbouncer, TargetKind::PgbouncerTuned]
            .into_iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| format!("unknown target {name:?} (pgmux, pgbouncer, pgbouncer-tuned)"))
    }
}

/// What every target needs besides its kind.
#[derive(Clone, Debug)]
pub struct TargetSettings {
    pub pgmux: PathBuf,
    pub pgbouncer: PathBuf,
    /// Server connections per pool.
    pub pool_size: u32,
    /// Extra `PGMUX_<KEY>=value` settings for pgmux (to try a new setting without editing the driver).
    pub pgmux_env: Vec<(String, String)>,
    /// The database names clients use; beyond the first (`pgmux`, the server database), each another
    /// route to it. One route: pgmux as before routes existed, `database_url` alone.
    pub routes: Vec<String>,
    /// Add [`READER_ROUTE`], read on the standby (the reader scenario).
    pub reader: bool,
}

/// `PGMUX_DATABASES` for `routes`, when there is more than one: each a name for the server's `pgmux`.
pub fn pgmux_routes(routes: &[String]) -> Option<String> {
    (routes.len() > 1).then(|| routes.iter().map(|r| format!("{r} = dbname=pgmux")).collect::<Vec<_>>().join("; "))
}

/// A running target; dropping it stops it (SIGTERM, SIGKILL after 10 s), then removes its directory.
#[derive(Debug)]
pub struct Target {
    pub kind: TargetKind,
    process: ChildProcess,
    dir: tempfile::TempDir,
}

impl Target {
    pub fn start(kind: TargetKind, settings: &TargetSettings) -> Result<Target, String> {
        let dir = crate::topology::scratch_dir(kind.name())?;
        let cmd = match kind {
            TargetKind::Pgmux => pgmux_command(settings),
            TargetKind::Pgbouncer | TargetKind::PgbouncerTuned => pgbouncer_command(kind, settings, dir.path())?,
        };
        let process = ChildProcess::spawn_logged(kind.name(), cmd, &dir.path().join("output.log"))
            .map_err(|e| format!("{}: {e}", kind.name()))?;
        let mut target = Target { kind, process, dir };
        target.wait_listening()?;
        Ok(target)
    }

    fn wait_listening(&mut self) -> Result<(), String> {
        let addr: SocketAddr = LISTEN.parse().map_err(|e| format!("{LISTEN}: {e}"))?;
        let every = Duration::from_millis(20);
        match self.process.wait_listening(addr, Instant::now(), LISTEN_TIMEOUT, every, || false) {
            Ok(_) => Ok(()),
            Err(NotListening { why: Waited::Exited(status), .. }) => {
                Err(format!("{} exited ({status}):\n{}", self.kind.name(), self.output_tail(30)))
            }
            Err(_) => Err(format!("{} did not listen on {LISTEN}:\n{}", self.kind.name(), self.output_tail(30))),
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// The process's resident memory in KiB (`VmRSS` of `/proc/<pid>/status`).
    pub fn rss_kib(&self) -> Option<u64> {
        pgmux_testkit::procfs::rss_kib(self.pid()?).ok()
    }

    /// The end of what the target logged (PgBouncer's log file and its stderr).
    pub fn output_tail(&self, lines: usize) -> String {
        let mut text = String::new();
        for file in ["output.log", "pgbouncer.log"] {
            text.push_str(&fs::read_to_string(self.dir.path().join(file)).unwrap_or_default());
        }
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGTERM, then SIGKILL after a grace period; idempotent. Says so if it had exited on its own.
    pub fn stop(&mut self) -> Option<String> {
        match self.process.stop()? {
            Stopped::AlreadyExited(status) => Some(format!("{} had exited by itself ({status})", self.kind.name())),
            Stopped::Exited(_) | Stopped::Killed { .. } => None,
        }
    }
}

fn pgmux_command(settings: &TargetSettings) -> Command {
    let mut cmd = Command::new(&settings.pgmux);
    // Only our settings: nothing inherited from the caller's environment may change what is measured.
    for (key, _) in std::env::vars() {
        if key.starts_with("PGMUX_") {
            cmd.env_remove(key);
        }
    }
    let url =
        format!("postgres://{}:{}@{WRITER_NAME}:{PG_PORT}/pgmux?sslmode=disable", APP_USER.user, APP_USER.password);
    cmd.env("PGMUX_LISTEN", LISTEN)
        .env("PGMUX_DATABASE_URL", url)
        .env("PGMUX_POOL_MAX", settings.pool_size.to_string())
        .env("PGMUX_CLIENT_AUTH", "scram-sha-256")
        .env("PGMUX_LOG_LEVEL", "info")
        .env_remove("AWS_LAMBDA_RUNTIME_API");
    let mut databases = pgmux_routes(&settings.routes);
    if settings.reader {
        let first = databases.take().unwrap_or_else(|| "pgmux = dbname=pgmux".to_owned());
        databases = Some(format!("{first}; {READER_ROUTE} = dbname=pgmux readers={PROXY_B}:{PG_PORT}"));
    }
    if let Some(databases) = databases {
        // Routes log in as the client, with the password pgmux knows for it.
        cmd.env("PGMUX_DATABASES", databases)
            .env("PGMUX_USERS", format!("{} = password={}", APP_USER.user, APP_USER.password));
    }
    for (key, value) in &settings.pgmux_env {
        cmd.env(key, value);
    }
    cmd
}

/// PgBouncer's ini for `kind`: its defaults, but for what every target shares (transaction mode, the pool
/// size, SCRAM with the app role's password in the auth file).
pub fn pgbouncer_ini(kind: TargetKind, pool_size: u32, dir: &Path, routes: &[String], reader: bool) -> String {
    let (host, port) = LISTEN.split_once(':').unwrap_or(("127.0.0.1", "6432"));
    let mut databases = format!("pgmux = host={WRITER_NAME} port={PG_PORT} dbname=pgmux\n");
    for route in routes.iter().filter(|r| *r != "pgmux") {
        databases.push_str(&format!("{route} = host={WRITER_NAME} port={PG_PORT} dbname=pgmux\n"));
    }
    if reader {
        databases.push_str(&format!("{READER_ROUTE} = host={PROXY_B} port={PG_PORT} dbname=pgmux\n"));
    }
    let mut ini = format!(
        "[databases]\n\
         {databases}\
         \n\
         [pgbouncer]\n\
         listen_addr = {host}\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = scram-sha-256\n\
         auth_file = {dir}/userlist.txt\n\
         pool_mode = transaction\n\
         default_pool_size = {pool_size}\n\
         max_client_conn = 1000\n\
         ignore_startup_parameters = extra_float_digits\n\
         logfile = {dir}/pgbouncer.log\n",
        dir = dir.display()
    );
    if kind == TargetKind::PgbouncerTuned {
        ini.push_str(
            "server_login_retry = 1\n\
             dns_max_ttl = 1\n\
             tcp_keepidle = 1\n\
             tcp_keepintvl = 1\n\
             tcp_keepcnt = 3\n\
             tcp_user_timeout = 5000\n\
             server_check_delay = 0\n",
        );
    }
    ini
}

fn pgbouncer_command(kind: TargetKind, settings: &TargetSettings, dir: &Path) -> Result<Command, String> {
    let ini_path = dir.join("pgbouncer.ini");
    let ini = pgbouncer_ini(kind, settings.pool_size, dir, &settings.routes, settings.reader);
    fs::write(&ini_path, ini).map_err(|e| format!("ini: {e}"))?;
    let userlist = dir.join("userlist.txt");
    fs::write(&userlist, format!("\"{}\" \"{}\"\n", APP_USER.user, APP_USER.password))
        .map_err(|e| format!("userlist: {e}"))?;
    for path in [&ini_path, &userlist] {
        pgmux_testkit::give_to_postgres(path).map_err(|e| format!("chown: {e}"))?;
    }
    let mut cmd = Command::new(&settings.pgbouncer);
    cmd.arg(&ini_path).current_dir(dir);
    // PgBouncer refuses to run as root.
    pgmux_testkit::run_as_postgres(&mut cmd);
    Ok(cmd)
}
