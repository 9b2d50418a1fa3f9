//! pgmux as a child process, configured the way the Lambda extension is (environment variables only), so the
//! demo and the benchmark driver measure the real binary rather than an in-process pool.

use std::io::{self, Read};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use pgmux_testkit::process::{ChildProcess, Waited};

/// How long pgmux may take to accept connections after it is started.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(50);

/// The environment pgmux is started with.
#[derive(Clone, Debug)]
pub struct PgmuxSettings {
    /// The pgmux binary.
    pub binary: PathBuf,
    /// `PGMUX_LISTEN`.
    pub listen: SocketAddr,
    /// `PGMUX_DATABASE_URL`: the server, and the user and password that clients also log in with.
    pub database_url: String,
    /// `PGMUX_POOL_MAX`; `None` leaves it unset (the database decides).
    pub pool_max: Option<u32>,
    /// `PGMUX_CLIENT_AUTH` (`scram-sha-256` in the demo).
    pub client_auth: String,
    /// `PGMUX_LOG_LEVEL`.
    pub log_level: String,
    /// `PGMUX_MAX_CLIENT_CONN`; `None` keeps pgmux's default.
    pub max_client_conn: Option<u32>,
    /// `PGMUX_UNIX_SOCKET_DIR`; `None`: TCP only.
    pub unix_socket_dir: Option<PathBuf>,
    /// `PGMUX_POOL_GROW_AFTER` (`0ms`: the pool grows at once, as PgBouncer's does); `None` keeps the default.
    pub pool_grow_after: Option<String>,
    /// The network namespace to run in (the lab's application host); `None`: this one.
    pub netns: Option<String>,
}

impl PgmuxSettings {
    /// The command that runs pgmux with these settings (and nothing inherited that could change them), in a
    /// process group of its own: a Ctrl-C in the terminal reaches the demo or the driver, which stop pgmux
    /// themselves (or kill it by exiting), not pgmux directly in the middle of a measurement.
    pub fn command(&self) -> Command {
        let mut cmd = match &self.netns {
            Some(ns) => pgmux_testkit::netns::exec_in(ns, &self.binary),
            None => Command::new(&self.binary),
        };
        cmd.process_group(0);
        cmd.env("PGMUX_LISTEN", self.listen.to_string())
            .env("PGMUX_DATABASE_URL", &self.database_url)
            .env("PGMUX_CLIENT_AUTH", &self.client_auth)
            .env("PGMUX_LOG_LEVEL", &self.log_level)
            .env_remove("AWS_LAMBDA_RUNTIME_API"); // sidecar mode, whatever the caller's environment
        let optional = [
            ("PGMUX_POOL_MAX", self.pool_max.map(|n| n.to_string())),
            ("PGMUX_MAX_CLIENT_CONN", self.max_client_conn.map(|n| n.to_string())),
            ("PGMUX_UNIX_SOCKET_DIR", self.unix_socket_dir.as_ref().map(|d| d.display().to_string())),
            ("PGMUX_POOL_GROW_AFTER", self.pool_grow_after.clone()),
        ];
        for (var, value) in optional {
            match value {
                Some(value) => cmd.env(var, value),
                None => cmd.env_remove(var),
            };
        }
        cmd
    }
}

/// A running pgmux. Dropping it stops it (SIGTERM, then SIGKILL after 10 s); it also dies with the thread
/// that started it (`PR_SET_PDEATHSIG`), so start it from a thread that outlives it, such as `main`.
#[derive(Debug)]
pub struct PgmuxProcess {
    process: ChildProcess,
    listen: SocketAddr,
    output: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
}

/// The binary next to the running executable (`target/<profile>/pgmux` for `target/<profile>/pgmux-demo`).
pub fn default_binary() -> io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    Ok(exe.with_file_name("pgmux"))
}

impl PgmuxProcess {
    /// Start pgmux and wait until its port accepts TCP connections. The error carries pgmux's output if it
    /// exited or never listened.
    pub fn start(settings: &PgmuxSettings) -> io::Result<PgmuxProcess> {
        if !settings.binary.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "pgmux binary not found at {}: build it with `cargo build --release -p pgmux` \
                     (or pass --pgmux PATH)",
                    settings.binary.display()
                ),
            ));
        }
        let mut cmd = settings.command();
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        // SIGKILL for the child when the thread that started it exits: a killed demo leaves no pooler behind.
        let mut process = ChildProcess::spawn("pgmux", cmd)?;
        let output = Arc::new(Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        if let Some(stdout) = process.take_stdout() {
            readers.push(collect(stdout, Arc::clone(&output)));
        }
        if let Some(stderr) = process.take_stderr() {
            readers.push(collect(stderr, Arc::clone(&output)));
        }
        let mut pgmux = PgmuxProcess { process, listen: settings.listen, output, readers };
        pgmux.wait_listening()?;
        Ok(pgmux)
    }

    pub fn listen(&self) -> SocketAddr {
        self.listen
    }

    /// pgmux's pid while it has not been reaped (for its memory and CPU time in `/proc`).
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// How pgmux exited, if it has exited on its own.
    pub fn exited(&mut self) -> Option<String> {
        self.process.exited().map(|status| status.to_string())
    }

    /// Everything pgmux wrote to stdout and stderr so far.
    pub fn output(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }

    /// [`PgmuxProcess::output`] for an error message.
    fn output_for_error(&self) -> String {
        let output = self.output();
        if output.trim().is_empty() { "(pgmux wrote nothing)".to_owned() } else { output }
    }

    fn wait_listening(&mut self) -> io::Result<()> {
        let waited = self.process.wait_listening(self.listen, Instant::now(), LISTEN_TIMEOUT, POLL, || false);
        match waited {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.why, Waited::Exited(_)) => {
                self.join_readers();
                Err(io::Error::other(format!("{e}; its output:\n{}", self.output_for_error())))
            }
            Err(_) => {
                self.stop();
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "pgmux did not accept connections on {} within {LISTEN_TIMEOUT:?}; its output:\n{}",
                        self.listen,
                        self.output_for_error()
                    ),
                ))
            }
        }
    }

    /// SIGTERM, wait up to 10 s, then SIGKILL. Returns how it exited; idempotent (`None` the second time).
    pub fn stop(&mut self) -> Option<String> {
        let stopped = self.process.stop()?;
        self.join_readers();
        Some(stopped.to_string())
    }

    fn join_readers(&mut self) {
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
    }
}

impl Drop for PgmuxProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

fn collect(mut pipe: impl Read + Send + 'static, into: Arc<Mutex<Vec<u8>>>) -> JoinHandle<()> {
    thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.lock().unwrap_or_else(PoisonError::into_inner).extend_from_slice(&buf[..n]);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(cmd: &Command, var: &str) -> Option<Option<String>> {
        cmd.get_envs().find(|(k, _)| *k == var).map(|(_, v)| v.map(|v| v.to_string_lossy().into_owned()))
    }

    #[test]
    fn pool_grow_after_is_passed_when_set_and_removed_when_not() {
        let mut settings = PgmuxSettings {
            binary: PathBuf::from("/nonexistent/pgmux"),
            listen: SocketAddr::from(([127, 0, 0, 1], 6432)),
            database_url: "postgres://u@127.0.0.1:5432/db".to_owned(),
            pool_max: Some(20),
            client_auth: "trust".to_owned(),
            log_level: "warn".to_owned(),
            max_client_conn: None,
            unix_socket_dir: None,
            pool_grow_after: Some("0ms".to_owned()),
            netns: None,
        };
        let eager = settings.command();
        assert_eq!(env_of(&eager, "PGMUX_POOL_GROW_AFTER"), Some(Some("0ms".to_owned())));
        settings.pool_grow_after = None;
        // Removed, not merely unset: a value in the driver's own environment must not reach pgmux.
        assert_eq!(env_of(&settings.command(), "PGMUX_POOL_GROW_AFTER"), Some(None));
    }
}
