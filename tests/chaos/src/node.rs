//! One PostgreSQL 15 node of the topology (a primary or a streaming standby), run as the `postgres` user on
//! its own 127.x address inside the namespace, with the operations the faults are made of: fast and
//! immediate stops, promotion, restarting as a standby of the other node, SIGSTOP/SIGCONT.
//!
//! The postmaster is started directly (not by `pg_ctl start`, which would detach it) from a thread that
//! waits for it, so that it gets SIGKILL if the driver dies (`PR_SET_PDEATHSIG`); stops and promotion go
//! through `pg_ctl`, which signals whatever pid `postmaster.pid` names, exactly as an operator's would.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use pgmux_testkit::process::{WatchedChild, run};
use pgmux_testkit::{SUPERUSER, pg_bin_dir, run_as_postgres};

/// The port every node listens on (each on its own address).
pub const PG_PORT: u16 = 5432;
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// `pg_hba.conf` of every node: SCRAM over TCP for everyone and for replication; the postgres user over the
/// node's Unix socket (pg_ctl and the setup only).
const PG_HBA: &str = "\
local   all             postgres                        trust
host    all             all             127.0.0.0/8     scram-sha-256
host    replication     all             127.0.0.0/8     scram-sha-256
";

/// A node's data directory, address and running postmaster.
#[derive(Debug)]
pub struct Node {
    pub name: &'static str,
    /// The address it listens on (`127.0.10.1` for A, `127.0.10.2` for B).
    pub addr: String,
    dir: PathBuf,
    /// Spawned and waited for by a thread of its own: a restart may come from the fault injector's thread,
    /// whose end must not kill the postmaster (`PR_SET_PDEATHSIG` follows the spawning thread).
    postmaster: Option<WatchedChild>,
}

impl Node {
    /// A node whose data directory is `dir/data` (not started).
    pub fn new(name: &'static str, addr: &str, dir: PathBuf) -> Node {
        Node { name, addr: addr.to_owned(), dir, postmaster: None }
    }

    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    /// `host=… port=… user=postgres password=…`: a libpq connection string as the superuser.
    pub fn admin_conninfo(&self) -> String {
        format!(
            "host={} port={PG_PORT} user={} password={} dbname=pgmux",
            self.addr, SUPERUSER.user, SUPERUSER.password
        )
    }

    /// Start the postmaster and wait until it accepts connections (as a primary or a hot standby).
    pub fn start(&mut self) -> Result<(), String> {
        if self.running() {
            return Ok(());
        }
        let bin = pg_bin_dir()?;
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| format!("node {}: log: {e}", self.name))?;
        pgmux_testkit::give_to_postgres(&self.log_path()).map_err(|e| format!("chown log: {e}"))?;
        let log_err = log.try_clone().map_err(|e| format!("node {}: log: {e}", self.name))?;
        let mut cmd = Command::new(bin.join("postgres"));
        cmd.arg("-D").arg(self.data()).current_dir(&self.dir);
        for (key, value) in settings(&self.addr, &self.dir) {
            cmd.arg("-c").arg(format!("{key}={value}"));
        }
        cmd.stdin(Stdio::null()).stdout(log).stderr(log_err);
        run_as_postgres(&mut cmd);
        let postmaster = WatchedChild::spawn(&format!("postmaster-{}", self.name), cmd)
            .map_err(|e| format!("cannot start postgres for node {}: {e}", self.name))?;
        self.postmaster = Some(postmaster);
        self.wait_ready()
    }

    fn running(&self) -> bool {
        self.postmaster.as_ref().is_some_and(|p| p.exited().is_none())
    }

    /// Poll `pg_isready` until the node accepts connections.
    pub fn wait_ready(&self) -> Result<(), String> {
        let bin = pg_bin_dir()?;
        let started = Instant::now();
        loop {
            if let Some(status) = self.postmaster.as_ref().and_then(WatchedChild::exited) {
                return Err(format!("node {} exited ({status}):\n{}", self.name, self.log_tail(20)));
            }
            let ready = Command::new(bin.join("pg_isready"))
                .args(["-q", "-h", &self.addr, "-p", &PG_PORT.to_string(), "-t", "1"])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(format!("node {} not ready after {READY_TIMEOUT:?}:\n{}", self.name, self.log_tail(20)));
            }
            thread::sleep(Duration::from_millis(30));
        }
    }

    /// `pg_ctl stop -m <mode> -w`, then reap the postmaster. A postmaster that would not stop stays ours
    /// (the drop kills it).
    pub fn stop(&mut self, mode: &str) -> Result<(), String> {
        let Some(running) = self.postmaster.as_ref().map(|p| p.exited().is_none()) else {
            return Ok(());
        };
        if running {
            self.pg_ctl(&["stop", "-m", mode, "-w", "-t", "30"])?;
        }
        if let Some(mut postmaster) = self.postmaster.take() {
            postmaster.join();
        }
        Ok(())
    }

    /// `pg_ctl restart -m <mode>`, as stop and start (pg_ctl would detach the new postmaster from us).
    pub fn restart(&mut self, mode: &str) -> Result<(), String> {
        self.stop(mode)?;
        self.start()
    }

    /// `pg_ctl promote -w`: this standby becomes a primary.
    pub fn promote(&self) -> Result<(), String> {
        self.pg_ctl(&["promote", "-w", "-t", "30"])
    }

    /// Turn this (stopped) data directory into a standby of `primary`: `standby.signal` and a
    /// `primary_conninfo`, as `pg_basebackup -R` would write them.
    pub fn make_standby_of(&self, primary: &Node) -> Result<(), String> {
        let data = self.data();
        let signal = data.join("standby.signal");
        fs::write(&signal, "").map_err(|e| format!("writing {}: {e}", signal.display()))?;
        pgmux_testkit::give_to_postgres(&signal).map_err(|e| format!("chown: {e}"))?;
        let conninfo = format!(
            "\nprimary_conninfo = 'host={} port={PG_PORT} user={} password={} application_name={}'\n",
            primary.addr, SUPERUSER.user, SUPERUSER.password, self.name
        );
        let auto = data.join("postgresql.auto.conf");
        let mut text = fs::read_to_string(&auto).unwrap_or_default();
        text.push_str(&conninfo);
        fs::write(&auto, text).map_err(|e| format!("writing {}: {e}", auto.display()))
    }

    /// The postmaster and every process it started (backends, walsender, checkpointer, ...).
    pub fn pids(&self) -> Vec<u32> {
        let Some(root) = self.postmaster.as_ref().map(WatchedChild::pid) else {
            return Vec::new();
        };
        let mut pids = vec![root];
        if let Ok(entries) = fs::read_dir("/proc") {
            for entry in entries.flatten() {
                let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                    continue;
                };
                if pgmux_testkit::procfs::parent_pid(pid) == Some(root) {
                    pids.push(pid);
                }
            }
        }
        pids
    }

    /// SIGSTOP or SIGCONT to the postmaster and all its children: a hung server whose kernel still ACKs.
    pub fn signal_all(&self, signal: libc::c_int) -> usize {
        self.pids().into_iter().filter(|&pid| pgmux_testkit::send_signal(pid, signal)).count()
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let bin = pg_bin_dir()?;
        let mut cmd = Command::new(bin.join("pg_ctl"));
        cmd.args(args).arg("-D").arg(self.data()).current_dir(&self.dir);
        run_as_postgres(&mut cmd);
        run(cmd, &format!("node {}: pg_ctl {}", self.name, args.join(" "))).map(drop).map_err(|e| e.to_string())
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(self.log_path()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // A stopped node cannot be shut down by pg_ctl: wake it first.
        self.signal_all(libc::SIGCONT);
        if self.stop("immediate").is_err()
            && let Some(mut postmaster) = self.postmaster.take()
        {
            postmaster.signal(libc::SIGKILL);
            postmaster.join();
        }
    }
}

/// The settings every node runs with. `fsync=off` is safe here (the OS never crashes under a test) and
/// `synchronous_commit` stays on, so that an acknowledged commit survives `-m immediate`.
fn settings(addr: &str, dir: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("listen_addresses", addr.to_owned()),
        ("port", PG_PORT.to_string()),
        ("unix_socket_directories", dir.display().to_string()),
        ("max_connections", "100".into()),
        ("shared_buffers", "16MB".into()),
        ("fsync", "off".into()),
        ("full_page_writes", "off".into()),
        ("wal_keep_size", "128MB".into()),
        ("log_min_messages", "warning".into()),
        ("log_line_prefix", "%m [%p] ".into()),
    ]
}

/// The written `pg_hba.conf`, for the seed cluster.
pub fn pg_hba() -> &'static str {
    PG_HBA
}
