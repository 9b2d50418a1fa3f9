//! The postmaster process: starting it so that it dies with us, waiting until it answers, and stopping it.

use std::fs::{self, OpenOptions};
use std::path::Path;
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use crate::process::WatchedChild;
use crate::psql::psql_with_timeout;
use crate::server::{HOST, LOG_FILE, read_log_tail};
use crate::{PgOptions, SUPERUSER, bins, free_port, sys, template};

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const READY_POLL: Duration = Duration::from_millis(50);
const STOP_GRACE: Duration = Duration::from_secs(5);
const PORT_ATTEMPTS: usize = 5;

/// Start `postgres` on `data` and wait until it answers `select 1`. With no fixed port, a port taken by
/// someone else between `free_port` and bind is retried on another.
pub(crate) fn launch(
    dir: &Path,
    data: &Path,
    fixed_port: Option<u16>,
    opts: &PgOptions,
) -> Result<(Postmaster, u16), String> {
    let log_path = dir.join(LOG_FILE);
    for _ in 0..PORT_ATTEMPTS {
        let port = fixed_port.unwrap_or_else(free_port);
        let log_start = fs::metadata(&log_path).map_or(0, |m| m.len());
        let postmaster = Postmaster::spawn(dir, data, port, opts, &log_path)
            .map_err(|e| format!("cannot spawn {}: {e}", bins::bin_dir().join("postgres").display()))?;
        let outcome = wait_ready(&postmaster, port);
        let log = || read_log_tail(&log_path, log_start, 30);
        match outcome {
            Ok(()) => return Ok((postmaster, port)),
            // Dropping `postmaster` at the end of the iteration reaps the failed one.
            Err(_) if fixed_port.is_none() && log().contains("could not bind") => continue,
            Err(reason) => {
                drop(postmaster);
                return Err(format!(
                    "port {port}, data directory {}: {reason}\n--- server log (last 30 lines) ---\n{}",
                    data.display(),
                    log()
                ));
            }
        }
    }
    Err(format!("no free port after {PORT_ATTEMPTS} attempts"))
}

fn wait_ready(postmaster: &Postmaster, port: u16) -> Result<(), String> {
    let started = Instant::now();
    loop {
        if let Some(exit) = postmaster.exited() {
            return Err(format!("the postmaster exited ({exit})"));
        }
        let last_error = match psql_with_timeout(port, &SUPERUSER, "postgres", "select 1", Some(2)) {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        if started.elapsed() > READY_TIMEOUT {
            return Err(format!("not ready after {READY_TIMEOUT:?}; last psql error: {last_error}"));
        }
        thread::sleep(READY_POLL);
    }
}

/// A `pg_hba.conf` beside the data directory that trusts 127.0.0.1 ahead of the template's lines; the data
/// directory's own file stays as it is, so a later restart without the option is strict again.
fn write_trusting_hba(dir: &Path) -> std::io::Result<std::path::PathBuf> {
    let path = dir.join("pg_hba_trust_loopback.conf");
    fs::write(&path, format!("host    all     all             127.0.0.1/32    trust\n{}", template::PG_HBA))?;
    sys::give_to_postgres(&path)?;
    Ok(path)
}

/// A postmaster process, spawned from (and waited on by) a thread of its own that lives exactly as long as
/// the process ([`WatchedChild`]): `PR_SET_PDEATHSIG` fires when the *spawning thread* exits, and that must
/// not be a test thread that finishes early. Dropping it stops the server.
#[derive(Debug)]
pub(crate) struct Postmaster {
    process: WatchedChild,
}

impl Postmaster {
    fn spawn(dir: &Path, data: &Path, port: u16, opts: &PgOptions, log_path: &Path) -> std::io::Result<Postmaster> {
        let log = OpenOptions::new().create(true).append(true).open(log_path)?;
        let log_err = log.try_clone()?;
        let mut cmd = sys::pg_command(&bins::bin_dir().join("postgres"), dir);
        cmd.arg("-D").arg(data).arg("-p").arg(port.to_string());
        let mut settings: Vec<(String, String)> = vec![
            ("listen_addresses".into(), HOST.into()),
            ("unix_socket_directories".into(), dir.display().to_string()),
            ("max_connections".into(), opts.max_connections.to_string()),
            ("fsync".into(), "off".into()),
            ("synchronous_commit".into(), "off".into()),
            ("full_page_writes".into(), "off".into()),
            ("shared_buffers".into(), "16MB".into()),
        ];
        if opts.trust_loopback {
            settings.push(("hba_file".into(), write_trusting_hba(dir)?.display().to_string()));
        }
        settings.extend(opts.extra_conf.iter().cloned());
        for (key, value) in settings {
            cmd.arg("-c").arg(format!("{key}={value}"));
        }
        cmd.stdin(Stdio::null()).stdout(log).stderr(log_err);

        let process = WatchedChild::spawn(&format!("postmaster-{port}"), cmd)?;
        Ok(Postmaster { process })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// How the postmaster exited, if it has.
    pub(crate) fn exited(&self) -> Option<String> {
        self.process.exited()
    }

    /// Wait until the postmaster has exited (after someone else asked it to stop).
    pub(crate) fn wait_exit(&self, timeout: Duration) -> Option<String> {
        self.process.wait_exit(timeout)
    }

    /// Stop with `signal` (SIGQUIT: immediate, SIGINT: fast), escalating to SIGQUIT and then SIGKILL after
    /// [`STOP_GRACE`] each. Signals only a process not yet seen to exit ([`WatchedChild::signal`]).
    pub(crate) fn shutdown(&mut self, signal: libc::c_int) {
        let escalation = [libc::SIGINT, libc::SIGQUIT, libc::SIGKILL];
        let first = escalation.iter().position(|&s| s == signal).unwrap_or(0);
        for &signal in &escalation[first..] {
            if !self.process.signal(signal) || self.wait_exit(STOP_GRACE).is_some() {
                break;
            }
        }
        self.process.join();
    }
}

impl Drop for Postmaster {
    fn drop(&mut self) {
        self.shutdown(libc::SIGQUIT);
    }
}
