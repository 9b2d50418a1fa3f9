//! PgBouncer 1.18 (Debian's) with its admin console, in front of a throwaway PostgreSQL: the reference the
//! exporter test records, and that pgmux's console must later match.
//!
//! It refuses to run as root, so as root it runs as `postgres` in a directory given to that user. It is
//! spawned from the test's own thread with `PR_SET_PDEATHSIG`, so it dies with the test process; dropping
//! the handle stops it (SIGTERM, SIGKILL after 5 s).

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use pgmux_testkit::{APP_USER, DATABASE};

use crate::tools::tools;

/// May run every console command.
pub const ADMIN_USER: &str = "pgb_admin";
/// May run SHOW only: what pgbouncer_exporter logs in as.
pub const STATS_USER: &str = "pgb_stats";

/// A running PgBouncer.
#[derive(Debug)]
pub struct PgBouncer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl PgBouncer {
    /// Starts PgBouncer for database [`DATABASE`] on PostgreSQL at 127.0.0.1:`server_port` (which must trust
    /// loopback logins), transaction pooling, a pool of 2, statistics refreshed every second.
    pub fn start(server_port: u16) -> PgBouncer {
        let binary = tools().pgbouncer.clone();
        let dir = tempfile::Builder::new().prefix("pgmux-obs-pgbouncer-").tempdir().expect("a temporary directory");
        let port = pgmux_testkit::free_port();
        let (ini, users, log) =
            (dir.path().join("pgbouncer.ini"), dir.path().join("userlist.txt"), dir.path().join("pgbouncer.log"));
        let config = format!(
            "[databases]\n{DATABASE} = host=127.0.0.1 port={server_port} dbname={DATABASE}\n\n[pgbouncer]\n\
             listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\nauth_type = trust\n\
             auth_file = {}\nadmin_users = {ADMIN_USER}\nstats_users = {STATS_USER}\npool_mode = transaction\n\
             default_pool_size = 2\nstats_period = 1\nignore_startup_parameters = extra_float_digits\n\
             logfile = {}\n",
            users.display(),
            log.display()
        );
        fs::write(&ini, config).expect("write pgbouncer.ini");
        let userlist = format!("\"{}\" \"\"\n\"{ADMIN_USER}\" \"\"\n\"{STATS_USER}\" \"\"\n", APP_USER.user);
        fs::write(&users, userlist).expect("write userlist.txt");
        for path in [dir.path(), &ini, &users] {
            pgmux_testkit::give_to_postgres(path).expect("give PgBouncer's files to postgres");
        }
        let mut cmd = Command::new(&binary);
        cmd.arg(&ini).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        pgmux_testkit::run_as_postgres(&mut cmd);
        pgmux_testkit::die_with_parent(&mut cmd);
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!("cannot run {} ({e}); apt-get install pgbouncer, or set PGMUX_PGBOUNCER", binary.display())
        });
        let mut bouncer = PgBouncer { port, child, log, _dir: dir };
        let listening = crate::poll(Duration::from_secs(10), || {
            if let Ok(Some(status)) = bouncer.child.try_wait() {
                return Some(Err(format!("it exited: {status}")));
            }
            std::net::TcpStream::connect(("127.0.0.1", port)).ok().map(|_| Ok(()))
        });
        match listening {
            Some(Ok(())) => bouncer,
            Some(Err(why)) => panic!("PgBouncer did not start: {why}\n--- its log ---\n{}", bouncer.log()),
            None => panic!("PgBouncer is not listening on {port} after 10 s\n--- its log ---\n{}", bouncer.log()),
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_else(|e| format!("(cannot read {}: {e})", self.log.display()))
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        // SIGTERM: 1.18 closes everything and exits. `kill` the program, so no unsafe code is needed.
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let stopped = crate::poll(Duration::from_secs(5), || self.child.try_wait().ok().flatten());
        if stopped.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
