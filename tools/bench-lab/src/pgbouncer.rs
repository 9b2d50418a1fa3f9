//! PgBouncer as the benchmark's reference pooler: Debian's binary, configured the way pgmux is (transaction
//! pooling, a pool of 20, trust for its clients), started as the `postgres` user when we are root (it
//! refuses to run as root), in a temporary directory of its own.
//!
//! Two settings differ from PgBouncer's defaults, both so that it does the same work as pgmux at
//! `log_level=warn`: `log_connections` and `log_disconnections` are off (W1 reconnects thousands of times a
//! second, and each would be a log line), and `listen_backlog` is 1024, tokio's default, so that W6's
//! bursts of 200 connects meet the same accept queue on both.
//!
//! In the network lab it runs on the application host and reaches PostgreSQL the way its documentation
//! says for a remote, TLS-only server with SCRAM: `server_tls_sslmode = verify-full` with
//! `server_tls_ca_file`, and the user's password in `auth_file` (PgBouncer logs in to the server with the
//! password it finds there; its clients still log in with trust, as pgmux's do).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pgmux_testkit::netns;
use pgmux_testkit::process::{ChildProcess, tail};

use crate::interrupt;

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
    /// Where it accepts clients.
    pub listen_addr: IpAddr,
    /// A directory for its Unix socket (`unix_socket_dir`), writable by `postgres`; `None`: none.
    pub unix_socket_dir: Option<PathBuf>,
    /// PostgreSQL's host (an address, or a name the host resolves) and port.
    pub server_host: String,
    pub server_port: u16,
    /// The CA for `server_tls_sslmode = verify-full`; `None`: no TLS to the server.
    pub server_ca: Option<PathBuf>,
    pub database: String,
    /// The one user, logging in with trust; listed in the auth file with `password` (empty for a server
    /// that trusts PgBouncer too).
    pub user: String,
    pub password: String,
    /// `default_pool_size`; `None` leaves PgBouncer's default (20).
    pub pool_size: Option<u32>,
    pub max_client_conn: u32,
    /// The network namespace to run in (the lab's application host); `None`: this one.
    pub netns: Option<String>,
}

impl PgBouncerSettings {
    /// The ini text for a PgBouncer listening on `port` and logging to `logfile`.
    pub fn ini(&self, port: u16, logfile: &Path) -> String {
        let mut optional = String::new();
        if let Some(pool) = self.pool_size {
            optional.push_str(&format!("default_pool_size = {pool}\n"));
        }
        if let Some(ca) = &self.server_ca {
            optional.push_str(&format!("server_tls_sslmode = verify-full\nserver_tls_ca_file = {}\n", ca.display()));
        }
        let unix_socket_dir = self.unix_socket_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default();
        format!(
            "[databases]\n\
             {db} = host={server_host} port={server_port} dbname={db}\n\
             \n\
             [pgbouncer]\n\
             listen_addr = {listen_addr}\n\
             listen_port = {port}\n\
             unix_socket_dir = {unix_socket_dir}\n\
             auth_type = trust\n\
             auth_file = {auth_file}\n\
             pool_mode = transaction\n\
             {optional}\
             min_pool_size = 0\n\
             reserve_pool_size = 0\n\
             max_client_conn = {max_client_conn}\n\
             ignore_startup_parameters = extra_float_digits\n\
             logfile = {logfile}\n\
             log_connections = 0\n\
             log_disconnections = 0\n\
             listen_backlog = 1024\n",
            db = self.database,
            server_host = self.server_host,
            server_port = self.server_port,
            listen_addr = self.listen_addr,
            auth_file = self.auth_file().display(),
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
        let auth = self.auth_file();
        std::fs::write(&auth, format!("\"{}\" \"{}\"\n", self.user, self.password))?;
        pgmux_testkit::give_to_postgres(&auth)?;
        let ini = self.dir.join(format!("{name}.ini"));
        std::fs::write(&ini, self.ini(port, &self.dir.join(format!("{name}.log"))))?;
        let mut cmd = match &self.netns {
            Some(ns) => netns::exec_as_postgres(ns, &self.binary),
            None => {
                let mut cmd = Command::new(&self.binary);
                pgmux_testkit::run_as_postgres(&mut cmd);
                cmd
            }
        };
        cmd.arg("-q").arg(&ini).current_dir(&self.dir);
        // A group of its own: a Ctrl-C in the terminal reaches only the driver, which stops it.
        cmd.process_group(0);
        Ok(cmd)
    }
}

/// A running PgBouncer. Dropping it stops it.
#[derive(Debug)]
pub struct PgBouncerProcess {
    child: ChildProcess,
    port: u16,
    log: PathBuf,
}

impl PgBouncerProcess {
    /// Start PgBouncer on `port` (as instance `name`: its ini, log and output files) and wait until it
    /// accepts connections; the error quotes its log.
    pub fn start(settings: &PgBouncerSettings, name: &str, port: u16) -> Result<PgBouncerProcess, String> {
        let cmd = settings.command(name, port).map_err(|e| format!("writing the PgBouncer configuration: {e}"))?;
        let started = Instant::now();
        let output = settings.dir.join(format!("{name}.stderr"));
        let mut child = ChildProcess::spawn_logged(name, cmd, &output).map_err(|e| e.to_string())?;
        let log = settings.dir.join(format!("{name}.log"));
        let addr = SocketAddr::new(settings.listen_addr, port);
        let every = Duration::from_millis(20);
        if let Err(e) = child.wait_listening(addr, started, LISTEN_TIMEOUT, every, interrupt::requested) {
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
        self.child.stop().map(|stopped| stopped.to_string())
    }
}

fn read_tail(path: &Path, lines: usize) -> String {
    tail(&std::fs::read_to_string(path).unwrap_or_default(), lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> PgBouncerSettings {
        PgBouncerSettings {
            binary: "/usr/sbin/pgbouncer".into(),
            dir: "/tmp/bench".into(),
            listen_addr: IpAddr::from([127, 0, 0, 1]),
            unix_socket_dir: Some("/tmp/bench/socket".into()),
            server_host: "127.0.0.1".into(),
            server_port: 5999,
            server_ca: None,
            database: "pgmux".into(),
            user: "pgmux_app".into(),
            password: String::new(),
            pool_size: Some(20),
            max_client_conn: 10_100,
            netns: None,
        }
    }

    fn has_lines(ini: &str, lines: &[&str]) {
        for line in lines {
            assert!(ini.lines().any(|l| l == *line), "missing {line:?} in\n{ini}");
        }
    }

    #[test]
    fn ini_pools_by_transaction_with_trust() {
        let ini = loopback().ini(6999, Path::new("/tmp/bench/pgbouncer.log"));
        has_lines(
            &ini,
            &[
                "pgmux = host=127.0.0.1 port=5999 dbname=pgmux",
                "listen_addr = 127.0.0.1",
                "listen_port = 6999",
                "unix_socket_dir = /tmp/bench/socket",
                "auth_type = trust",
                "auth_file = /tmp/bench/userlist.txt",
                "pool_mode = transaction",
                "default_pool_size = 20",
                "max_client_conn = 10100",
                "ignore_startup_parameters = extra_float_digits",
                "logfile = /tmp/bench/pgbouncer.log",
            ],
        );
        assert!(ini.find("[databases]") < ini.find("[pgbouncer]"));
        assert!(!ini.contains("server_tls"));
    }

    #[test]
    fn ini_for_a_remote_server_with_tls_and_its_default_pool() {
        let settings = PgBouncerSettings {
            listen_addr: IpAddr::from([10, 0, 0, 6]),
            unix_socket_dir: None,
            server_host: "db.pgmux.test".into(),
            server_ca: Some("/lab/ca.pem".into()),
            password: "pw".into(),
            pool_size: None,
            ..loopback()
        };
        let ini = settings.ini(7000, Path::new("/lab/fleet-1.log"));
        has_lines(
            &ini,
            &[
                "pgmux = host=db.pgmux.test port=5999 dbname=pgmux",
                "listen_addr = 10.0.0.6",
                "server_tls_sslmode = verify-full",
                "server_tls_ca_file = /lab/ca.pem",
            ],
        );
        assert!(!ini.contains("default_pool_size"), "{ini}");
        assert!(ini.lines().any(|l| l.trim_end() == "unix_socket_dir ="), "{ini}");
    }
}
