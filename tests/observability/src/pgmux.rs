//! The pgmux binary as a process, for the tests that wait for the admin console and `/metrics` wiring: it is
//! driven through its documented interface only (a TOML file, its listeners), so these tests do not depend
//! on how the core is arranged inside.

use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use pgmux_testkit::{APP_USER, PgServer};

use crate::repo_root;

/// A running pgmux. Dropping it stops it (SIGTERM, SIGKILL after 10 s).
#[derive(Debug)]
pub struct Pgmux {
    /// Where clients (and the admin console's users) connect.
    pub addr: SocketAddr,
    /// `metrics_listen`, when the test set it.
    pub metrics: Option<SocketAddr>,
    child: Child,
    log: PathBuf,
    /// The configuration file and what it held before `extra` (for rewriting it).
    config: PathBuf,
    base: String,
    _dir: tempfile::TempDir,
}

/// `PGMUX_BIN`, else `target/debug/pgmux`; panics saying how to build it.
pub fn binary() -> PathBuf {
    let path = std::env::var_os("PGMUX_BIN").map_or_else(|| repo_root().join("target/debug/pgmux"), PathBuf::from);
    assert!(path.is_file(), "{} is missing: run `cargo build -p pgmux` first (or set PGMUX_BIN)", path.display());
    path
}

impl Pgmux {
    /// Starts pgmux in front of `pg` with a pool of 2, sizing off, and `extra` TOML lines (which may set
    /// `metrics_listen`, `admin_users`, `stats_users`, ...). With `with_metrics`, `metrics_listen` is set to a
    /// free loopback port.
    pub fn start(pg: &PgServer, with_metrics: bool, extra: &str) -> Pgmux {
        let dir = tempfile::Builder::new().prefix("pgmux-obs-pgmux-").tempdir().expect("a temporary directory");
        let addr = SocketAddr::from(([127, 0, 0, 1], pgmux_testkit::free_port()));
        let metrics = with_metrics.then(|| SocketAddr::from(([127, 0, 0, 1], pgmux_testkit::free_port())));
        let mut config = format!(
            "listen = \"{addr}\"\ndatabase_url = {:?}\npool_max = 2\nmax_connections_percent = 0\n",
            pg.url(&APP_USER)
        );
        if let Some(m) = metrics {
            config.push_str(&format!("metrics_listen = \"{m}\"\n"));
        }
        let base = config.clone();
        config.push_str(extra);
        let path = dir.path().join("pgmux.toml");
        std::fs::write(&path, config).expect("write pgmux.toml");
        let log = dir.path().join("pgmux.log");
        let mut cmd = Command::new(binary());
        cmd.arg("--config").arg(&path).stdin(Stdio::null());
        cmd.stdout(File::create(&log).expect("create pgmux.log"));
        cmd.stderr(File::options().append(true).open(&log).expect("open pgmux.log"));
        pgmux_testkit::die_with_parent(&mut cmd);
        let child = cmd.spawn().expect("start pgmux");
        let mut pgmux = Pgmux { addr, metrics, child, log, config: path, base, _dir: dir };
        for listener in std::iter::once(addr).chain(metrics) {
            let up = crate::poll(Duration::from_secs(15), || {
                if let Ok(Some(status)) = pgmux.child.try_wait() {
                    return Some(Err(format!("it exited: {status}")));
                }
                TcpStream::connect(listener).ok().map(|_| Ok(()))
            });
            match up {
                Some(Ok(())) => {}
                Some(Err(why)) => panic!("pgmux did not start: {why}\n{}", pgmux.log()),
                None => panic!("pgmux is not listening on {listener} after 15 s\n{}", pgmux.log()),
            }
        }
        pgmux
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Rewrites the configuration file: what `start` wrote, less the keys `extra` sets, then `extra` (which
    /// may be anything, even invalid). pgmux reads it again on SIGHUP or the console's RELOAD.
    pub fn rewrite_config(&self, extra: &str) {
        let key = |line: &str| line.split('=').next().unwrap_or_default().trim().to_owned();
        let replaced: Vec<String> = extra.lines().map(key).collect();
        let kept: String =
            self.base.lines().filter(|l| !replaced.contains(&key(l))).map(|l| format!("{l}\n")).collect();
        std::fs::write(&self.config, format!("{kept}{extra}")).expect("rewrite pgmux.toml");
    }

    /// Sends a signal (`HUP`, `TERM`, ...) to the process.
    pub fn signal(&self, name: &str) {
        let sent = Command::new("kill").args([&format!("-{name}"), &self.child.id().to_string()]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -{name} failed");
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Pgmux {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        if crate::poll(Duration::from_secs(10), || self.child.try_wait().ok().flatten()).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
