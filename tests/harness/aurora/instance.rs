//! One instance of the stand-in cluster: a real PostgreSQL (the kit's [`PgServer`]) under an instance name, the
//! settings it restarts with, and the streaming-replication chores: a standby made by `pg_basebackup`, pointed
//! at a primary, and waited for until it streams.

use std::fs::OpenOptions;
use std::io::Write;
use std::thread;
use std::time::{Duration, Instant};

use crate::process::{ChildProcess, Waited};
use crate::server::HOST;
use crate::{PgOptions, PgServer, SUPERUSER, bins, sys, template};

use super::topology::SERVER_ID_SETTING;

/// How long a base backup of the (small) test cluster may take.
const BASEBACKUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a standby may take to stream from its primary after it starts or is pointed elsewhere.
const STREAM_TIMEOUT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(50);

/// A node of the stand-in: its instance name (Aurora's `server_id`) and its server.
#[derive(Debug)]
pub(super) struct Instance {
    pub(super) name: String,
    pub(super) server: PgServer,
    opts: PgOptions,
    /// `pg_wal_replay_pause()` is in force (a standby that receives WAL but does not apply it).
    pub(super) replay_paused: bool,
}

impl Instance {
    /// A primary: a copy of the kit's template cluster.
    pub(super) fn primary(name: &str) -> Instance {
        let opts = options(name);
        let server = PgServer::start_with(&opts);
        Instance { name: name.to_owned(), server, opts, replay_paused: false }
    }

    /// A streaming standby of `primary`, made with `pg_basebackup -R` and started; returns once it streams.
    pub(super) fn standby_of(primary: &Instance, name: &str) -> Instance {
        let dir = template::new_dir(&format!("aurora-{name}"));
        let data = dir.path().join("data");
        let log = dir.path().join("basebackup.log");
        let mut cmd = sys::pg_command(&bins::bin_dir().join("pg_basebackup"), dir.path());
        cmd.args(["-h", HOST, "-p", &primary.server.port().to_string(), "-U", SUPERUSER.user, "-w"])
            .arg("-D")
            .arg(&data)
            // Stream the WAL the copy needs, checkpoint at once rather than spread, skip fsync (a test
            // cluster), and write standby.signal; primary_conninfo is ours (below).
            .args(["-X", "stream", "-c", "fast", "--no-sync", "-R"])
            .env("PGPASSWORD", SUPERUSER.password)
            .env("PGSSLMODE", "disable");
        let what = format!("pg_basebackup of {} for {name}", primary.name);
        let mut child = ChildProcess::spawn_logged(&what, cmd, &log)
            .unwrap_or_else(|e| panic!("pgmux-testkit: cannot run {what}: {e}"));
        match child.wait(BASEBACKUP_TIMEOUT, || false) {
            Waited::Exited(status) if status.success() => {}
            Waited::Exited(status) => panic!("pgmux-testkit: {what} failed ({status}):\n{}", child.output_tail(20)),
            _ => panic!("pgmux-testkit: {what} took over {BASEBACKUP_TIMEOUT:?}:\n{}", child.output_tail(20)),
        }
        drop(child);
        write_primary_conninfo(&data, primary, name);

        let opts = options(name);
        let server = PgServer::launch_on(dir, data, &opts);
        let standby = Instance { name: name.to_owned(), server, opts, replay_paused: false };
        standby.wait_streaming(primary);
        standby
    }

    /// Follow `primary` from now on (after a promotion): a running standby rereads its configuration and its
    /// WAL receiver reconnects; a stopped one connects there when it starts.
    pub(super) fn follow(&self, primary: &Instance) {
        write_primary_conninfo(self.server.data_dir(), primary, &self.name);
        if self.server.is_running() {
            self.server.psql("select pg_reload_conf()");
        }
    }

    /// Wait until `primary` lists this standby as streaming and it is in recovery; panics after
    /// [`STREAM_TIMEOUT`] saying what was seen.
    pub(super) fn wait_streaming(&self, primary: &Instance) {
        let on_primary = format!(
            "select count(*) from pg_stat_replication where application_name = {} and state = 'streaming'",
            super::topology::literal(&self.name)
        );
        let started = Instant::now();
        loop {
            let streams = primary.server.try_psql(&on_primary);
            let recovering = self.server.try_psql("select pg_is_in_recovery()");
            if streams.as_deref() == Ok("1") && recovering.as_deref() == Ok("t") {
                return;
            }
            assert!(
                started.elapsed() < STREAM_TIMEOUT,
                "pgmux-testkit: {} does not stream from {} after {STREAM_TIMEOUT:?} (streaming: {streams:?}, \
                 in recovery: {recovering:?})\n--- {} log ---\n{}",
                self.name,
                primary.name,
                self.name,
                self.server.log_tail(20)
            );
            thread::sleep(POLL);
        }
    }

    pub(super) fn in_recovery(&self) -> bool {
        self.server.psql("select pg_is_in_recovery()") == "t"
    }

    /// Start a stopped instance on its port and data directory with its own settings.
    pub(super) fn start(&mut self) {
        self.server.restart_with(&self.opts);
        // A restarted standby replays again, whatever it did before.
        self.replay_paused = false;
    }
}

/// The settings every instance runs with, besides the kit's own.
fn options(name: &str) -> PgOptions {
    let settings = [
        // Names the instance: in `ps`, as the application name of its WAL receiver (so in the primary's
        // pg_stat_replication), and for `aurora_db_instance_identifier()`.
        ("cluster_name", name),
        (SERVER_ID_SETTING, name),
        // What the AWS JDBC wrapper looks for to call a server Aurora.
        ("rds.extensions", "aurora_stat_utils"),
        // A standby stopped for a while can catch up from the primary's WAL without a replication slot.
        ("wal_keep_size", "64MB"),
        // Reconnect soon after the primary comes back (5 s by default).
        ("wal_retrieve_retry_interval", "200ms"),
    ];
    PgOptions {
        extra_conf: settings.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        ..PgOptions::default()
    }
}

/// Point the standby in `data` at `primary`: appended to `postgresql.auto.conf`, where the last line wins over
/// the one `pg_basebackup -R` wrote and over earlier ones of ours; a command-line setting could not be
/// changed by a reload.
fn write_primary_conninfo(data: &std::path::Path, primary: &Instance, name: &str) {
    let conninfo = format!(
        "host={HOST} port={} user={} password={} application_name={name} sslmode=disable",
        primary.server.port(),
        SUPERUSER.user,
        SUPERUSER.password
    );
    let path = data.join("postgresql.auto.conf");
    let line = format!("primary_conninfo = '{}'\n", conninfo.replace('\'', "''"));
    OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(line.as_bytes()))
        .unwrap_or_else(|e| panic!("pgmux-testkit: cannot write {}: {e}", path.display()));
}
