//! PgBouncer as the benchmark's reference pooler: Debian's binary, configured the way pgmux is (transaction
//! pooling, a pool of 20, trust), started as the `postgres` user when we are root (it refuses to run as
//! root), in a temporary directory of its own.
//!
//! Two settings differ from PgBouncer's defaults, both so that it does the same work as pgmux at
//! `log_level=warn`: `log_connections` and `log_disconnections` are off (W1 reconnects thousands of times a
//! second, and each would be a log line), and `listen_backlog` is 1024, tokio's default, so that W6's
//! bursts of 200 connects meet the same accept queue on both.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::child::Supervised;

/// How long PgBouncer may take to listen after it is started.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Where pgbouncer is: `explicit`, else `PGMUX_PGBOUNCER`, else `/usr/sbin/pgbouncer` (Debian; not on a
/// normal user's PATH), else PATH.
pub fn find(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let chosen = explicit.map(Path::to_owned).or_else(|| std::env::var_os("PGMUX_PGBOUNCER").map(PathBuf::from));
    if let Some(path) = chosen {
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("pgbouncer not found at {} (install it with apt-get install pgbouncer)", path.display()))
        };
    }
    let debian = Path::new("/usr/sbin/pgbouncer");
    if debian.is_file() {
        return Ok(debian.to_owned());
    }
    let on_path = Command::new("pgbouncer").arg("--version").output().is_ok_and(|out| out.status.success());
    if on_path {
        return Ok(PathBuf::from("pgbouncer"));
    }
    Err("pgbouncer not found: apt-get install pgbouncer (or run tests/prereqs.sh as root, or pass --pgbouncer PATH)"
        .to_owned())
}

/// Everything a PgBouncer configuration needs but its listening port.
#[derive(Clone, Debug)]
pub struct PgBouncerSettings {
    pub binary: PathBuf,
    /// A directory PgBouncer may write to (its log); owned by `postgres` when we are root.
    pub dir: PathBuf,
    /// PostgreSQL's port on 127.0.0.1.
    pub server_port: u16,
    pub database: String,
    /// The one user, logging in with trust, listed in the auth file with an empty password.
    pub user: String,
    pub pool_size: u32,
    pub max_client_conn: u32,
}

impl PgBouncerSettings {
    /// The ini text for a PgBouncer listening on 127.0.0.1:`port` and logging to `logfile`.
    pub fn ini(&self, port: u16, logfile: &Path) -> String {
        format!(
            "[databases]\n\
             {db} = host=127.0.0.1 port={server_port} dbname={db}\n\
             \n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {auth_file}\n\
             pool_mode = transaction\n\
             default_pool_size = {pool}\n\
             min_pool_size = 0\n\
             reserve_pool_size = 0\n\
             max_client_conn = {max_client_conn}\n\
             ignore_startup_parameters = extra_float_digits\n\
             logfile = {logfile}\n\
             log_connections = 0\n\
             log_disconnections = 0\n\
             listen_backlog = 1024\n",
            db = self.database,
            server_port = self.server_port,
            auth_file = self.auth_file().display(),
            pool = self.pool_size,
            max_client_conn = self.max_client_conn,
            logfile = logfile.display(),
        )
    }

    fn auth_file(&self) -> PathBuf {
        self.dir.join("userlist.txt")
    }

    /// Write the ini (and the auth file) for an instance called `name` on `port`, and return the command that
    /// runs it in the foreground (`-q`: log to the logfile only), as `postgres` when we are root.
    pub fn command(&self, name: &str, port: u16) -> io::Result<Command> {
        std::fs::write(self.auth_file(), format!("\"{}\" \"\"\n", self.user))?;
        let ini = self.dir.join(format!("{name}.ini"));
        std::fs::write(&ini, self.ini(port, &self.dir.join(format!("{name}.log"))))?;
        let mut cmd = Command::new(&self.binary);
        cmd.arg("-q").arg(&ini).current_dir(&self.dir);
        pgmux_testkit::run_as_postgres(&mut cmd);
        Ok(cmd)
    }
}

/// A running PgBouncer. Dropping it stops it.
#[derive(Debug)]
pub struct PgBouncerProcess {
    child: Supervised,
    port: u16,
    log: PathBuf,
}

impl PgBouncerProcess {
    /// Start PgBouncer on a free port and wait until it accepts connections; the error quotes its log.
    pub fn start(settings: &PgBouncerSettings) -> Result<PgBouncerProcess, String> {
        let port = pgmux_testkit::free_port();
        let name = "pgbouncer";
        let cmd = settings.command(name, port).map_err(|e| format!("writing the PgBouncer configuration: {e}"))?;
        let started = Instant::now();
        let mut child =
            Supervised::spawn(name, cmd, &settings.dir.join("pgbouncer.stderr")).map_err(|e| e.to_string())?;
        let log = settings.dir.join(format!("{name}.log"));
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        if let Err(e) = child.wait_listening(addr, started, LISTEN_TIMEOUT, Duration::from_millis(20)) {
            child.stop();
            return Err(format!("{e}; PgBouncer's log:\n{}\n{}", read_tail(&log, 10), child.output_tail(10)));
        }
        Ok(PgBouncerProcess { child, port, log })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.pid()
    }

    /// How it exited, if it has, with the end of its log.
    pub fn exited(&mut self) -> Option<String> {
        let status = self.child.exited()?;
        Some(format!("{status}; its log ends:\n{}", read_tail(&self.log, 10)))
    }

    /// The lines of its log at WARNING level or worse (what pgmux would print at `log_level=warn`).
    pub fn warnings(&self) -> Vec<String> {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines()
            .filter(|l| [" WARNING ", " ERROR ", " FATAL "].iter().any(|w| l.contains(w)))
            .map(str::to_owned)
            .collect()
    }

    pub fn stop(&mut self) -> Option<String> {
        self.child.stop()
    }
}

fn read_tail(path: &Path, lines: usize) -> String {
    crate::child::tail(&std::fs::read_to_string(path).unwrap_or_default(), lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ini_pools_by_transaction_with_trust() {
        let settings = PgBouncerSettings {
            binary: "/usr/sbin/pgbouncer".into(),
            dir: "/tmp/bench".into(),
            server_port: 5999,
            database: "pgmux".into(),
            user: "pgmux_app".into(),
            pool_size: 20,
            max_client_conn: 10_100,
        };
        let ini = settings.ini(6999, Path::new("/tmp/bench/pgbouncer.log"));
        for line in [
            "pgmux = host=127.0.0.1 port=5999 dbname=pgmux",
            "listen_addr = 127.0.0.1",
            "listen_port = 6999",
            "unix_socket_dir =",
            "auth_type = trust",
            "auth_file = /tmp/bench/userlist.txt",
            "pool_mode = transaction",
            "default_pool_size = 20",
            "max_client_conn = 10100",
            "ignore_startup_parameters = extra_float_digits",
            "logfile = /tmp/bench/pgbouncer.log",
        ] {
            assert!(ini.lines().any(|l| l == line), "missing {line:?} in\n{ini}");
        }
        assert!(ini.find("[databases]") < ini.find("[pgbouncer]"));
    }
}
