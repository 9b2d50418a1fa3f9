//! The public face of one throwaway server: its directory, its port, its URLs, and its lifecycle.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use crate::postmaster::{Postmaster, launch};
use crate::psql::psql_as;
use crate::{DATABASE, PgOptions, Role, SUPERUSER, template};

pub(crate) const HOST: &str = "127.0.0.1";
pub(crate) const LOG_FILE: &str = "postgres.log";

/// A PostgreSQL server of its own for one test: a copy of the template cluster in a temporary directory,
/// listening on 127.0.0.1 on a free port. Dropping it stops the server and removes the directory.
#[derive(Debug)]
pub struct PgServer {
    dir: TempDir,
    data: PathBuf,
    port: u16,
    postmaster: Option<Postmaster>,
}

impl PgServer {
    /// Start a server with [`PgOptions::default`].
    pub fn start() -> PgServer {
        PgServer::start_with(&PgOptions::default())
    }

    /// Start a server; panics with the reason and the server log tail if it does not come up.
    pub fn start_with(opts: &PgOptions) -> PgServer {
        let template = template::template();
        let dir = template::new_dir("pg");
        let data = dir.path().join("data");
        let copied = Command::new("cp")
            .arg("-a")
            .arg(template)
            .arg(&data)
            .output()
            .unwrap_or_else(|e| panic!("pgmux-testkit: cannot run `cp`: {e}"));
        assert!(
            copied.status.success(),
            "pgmux-testkit: copying the template cluster failed: {}",
            String::from_utf8_lossy(&copied.stderr)
        );
        PgServer::launch_on(dir, data, opts)
    }

    /// Start a server on a data directory the caller prepared inside `dir` (a standby that `pg_basebackup`
    /// made, say); it owns `dir` from then on.
    pub(crate) fn launch_on(dir: TempDir, data: PathBuf, opts: &PgOptions) -> PgServer {
        match launch(dir.path(), &data, None, opts) {
            Ok((postmaster, port)) => PgServer { dir, data, port, postmaster: Some(postmaster) },
            Err(message) => panic!("pgmux-testkit: PostgreSQL did not start: {message}"),
        }
    }

    /// Always `"127.0.0.1"`: the server listens on nothing else (and on a Unix socket in its directory).
    pub fn host(&self) -> &'static str {
        HOST
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster's data directory (`PGDATA`).
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// `postgres://user:password@127.0.0.1:port/pgmux`.
    pub fn url(&self, role: &Role) -> String {
        format!("postgres://{}:{}@{HOST}:{}/{DATABASE}", url_encode(role.user), url_encode(role.password), self.port)
    }

    /// Run SQL as [`SUPERUSER`] in [`DATABASE`] over TCP and return psql's trimmed, unaligned, tuples-only
    /// output (`-X -q -At -v ON_ERROR_STOP=1`, statements read from stdin). Panics with psql's stderr.
    pub fn psql(&self, sql: &str) -> String {
        self.try_psql(sql)
            .unwrap_or_else(|e| panic!("pgmux-testkit: psql failed on port {}: {e}\nSQL: {sql}", self.port))
    }

    /// [`PgServer::psql`], returning psql's stderr as the error.
    pub fn try_psql(&self, sql: &str) -> Result<String, String> {
        psql_as(self.port, &SUPERUSER, DATABASE, sql)
    }

    /// Stop the server at once (SIGQUIT, SIGKILL after 5 s). Does nothing if it is already stopped.
    pub fn stop(&mut self) {
        self.hang(false);
        self.postmaster.take();
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) to the postmaster and every process it started: a hung server,
    /// whose kernel still accepts connections and acknowledges what is sent while nothing answers (a black
    /// hole, as far as a client can tell). Stopping the server wakes it first. How many were signalled.
    pub fn hang(&self, hung: bool) -> usize {
        let Some(root) = self.postmaster.as_ref().filter(|p| p.exited().is_none()).map(Postmaster::pid) else {
            return 0;
        };
        let signal = if hung { libc::SIGSTOP } else { libc::SIGCONT };
        let mut pids = vec![root];
        if let Ok(entries) = std::fs::read_dir("/proc") {
            let children = entries
                .flatten()
                .filter_map(|entry| entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()))
                .filter(|&pid| crate::procfs::parent_pid(pid) == Some(root));
            pids.extend(children);
        }
        pids.into_iter().filter(|&pid| crate::send_signal(pid, signal)).count()
    }

    /// Stop the server with a fast shutdown (SIGINT: sessions are terminated, a checkpoint is written, and a
    /// primary's WAL senders pass everything up to it on to the standbys first), escalating to SIGQUIT and
    /// SIGKILL after 5 s each. Does nothing if it is already stopped.
    pub fn stop_fast(&mut self) {
        self.hang(false);
        if let Some(mut postmaster) = self.postmaster.take() {
            postmaster.shutdown(libc::SIGINT);
        }
    }

    /// Whether the postmaster was started and has not exited since (it may still be starting up or shutting
    /// down).
    pub fn is_running(&self) -> bool {
        self.postmaster.as_ref().is_some_and(|postmaster| postmaster.exited().is_none())
    }

    /// Stop the server and start it again on the same port and data directory with other settings.
    ///
    /// A running server is stopped with a fast shutdown (SIGINT: sessions are terminated, then a checkpoint),
    /// not an immediate one: with `synchronous_commit=off` an immediate stop can lose the last commits. To
    /// test crash recovery instead, call [`PgServer::stop`] first.
    pub fn restart_with(&mut self, opts: &PgOptions) {
        self.stop_fast();
        match launch(self.dir.path(), &self.data, Some(self.port), opts) {
            Ok((postmaster, _)) => self.postmaster = Some(postmaster),
            Err(message) => panic!("pgmux-testkit: PostgreSQL did not restart: {message}"),
        }
    }

    /// The last `lines` lines of the server log (stdout and stderr of the postmaster).
    pub fn log_tail(&self, lines: usize) -> String {
        read_log_tail(&self.dir.path().join(LOG_FILE), 0, lines)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
        // The TempDir field removes the directory after this.
    }
}

/// The last `lines` lines of the log written after byte offset `from`.
pub(crate) fn read_log_tail(path: &Path, from: u64, lines: usize) -> String {
    let mut text = Vec::new();
    let read = File::open(path).and_then(|mut file| {
        file.seek(SeekFrom::Start(from))?;
        file.read_to_end(&mut text)
    });
    if let Err(e) = read {
        return format!("(cannot read {}: {e})", path.display());
    }
    let text = String::from_utf8_lossy(&text);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Percent-encode everything but RFC 3986 unreserved characters (user names and passwords in URLs).
fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
