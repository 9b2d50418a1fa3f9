//! A child process of the benchmark driver (PgBouncer, pgbench, a pooler started only to time its start-up)
//! that cannot outlive the driver, is stopped in order, and whose output lands in a file.
//!
//! Each child gets `PR_SET_PDEATHSIG` (it dies if the spawning thread does, even on SIGKILL of the driver)
//! and a process group of its own, so that a Ctrl-C in the terminal reaches only the driver, which then
//! stops its children itself, PostgreSQL last. Output goes to a file rather than a pipe: nobody has to drain
//! it while the child runs, and it is there to quote when something fails.
#![allow(unsafe_code)] // kill(2); see the SAFETY note

use std::fs::OpenOptions;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::interrupt;

/// How long a child may take to exit after SIGTERM before it gets SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);

/// A running child. Dropping it stops it (SIGTERM, then SIGKILL).
#[derive(Debug)]
pub struct Supervised {
    name: String,
    child: Option<Child>,
    output: PathBuf,
}

/// How waiting for a child ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Waited {
    Exited(ExitStatus),
    TimedOut,
    Interrupted,
}

impl Supervised {
    /// Spawn `cmd` with stdin closed and stdout and stderr appended to `output`. Call it from a thread that
    /// outlives the child (the driver's main thread): the death signal fires when the spawning thread exits.
    pub fn spawn(name: &str, mut cmd: Command, output: &Path) -> io::Result<Supervised> {
        pgmux_testkit::die_with_parent(&mut cmd);
        Self::spawn_short_lived(name, cmd, output)
    }

    /// [`Supervised::spawn`] without the parent-death signal, for children that live milliseconds and are
    /// stopped by the caller right away (W7's starts). Setting that signal takes a `pre_exec` hook, which
    /// makes std fork the whole driver instead of using `posix_spawn`; once the driver has held W6's
    /// 10,000 connections, that fork alone adds milliseconds to every start it times.
    pub fn spawn_short_lived(name: &str, mut cmd: Command, output: &Path) -> io::Result<Supervised> {
        let file = OpenOptions::new().create(true).append(true).open(output)?;
        cmd.stdin(Stdio::null()).stdout(file.try_clone()?).stderr(file);
        cmd.process_group(0);
        let program = cmd.get_program().to_string_lossy().into_owned();
        let child = cmd.spawn().map_err(|e| io::Error::new(e.kind(), format!("cannot start {program}: {e}")))?;
        Ok(Supervised { name: name.to_owned(), child: Some(child), output: output.to_owned() })
    }

    /// The child's pid while it has not been reaped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// How it exited, if it has (and reaps it).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// Wait until the child exits, `limit` passes, or the driver is interrupted; the child is left running
    /// in the last two cases.
    pub fn wait(&mut self, limit: Duration) -> Waited {
        let started = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                return Waited::Exited(status);
            }
            if interrupt::requested() {
                return Waited::Interrupted;
            }
            if started.elapsed() >= limit {
                return Waited::TimedOut;
            }
            thread::sleep(POLL);
        }
    }

    /// Poll `addr` until it accepts a TCP connection; the time it took from `since`. Fails if the child
    /// exits first, after `limit`, or on interrupt. Polls every `every` (1 ms when timing a start-up: a
    /// refused connect on loopback costs microseconds).
    pub fn wait_listening(
        &mut self,
        addr: SocketAddr,
        since: Instant,
        limit: Duration,
        every: Duration,
    ) -> Result<Duration, String> {
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
                return Ok(since.elapsed());
            }
            if let Some(status) = self.exited() {
                return Err(format!("{} exited before listening on {addr} ({status})", self.name));
            }
            if interrupt::requested() {
                return Err("interrupted".to_owned());
            }
            if since.elapsed() > limit {
                return Err(format!("{} did not listen on {addr} within {limit:?}", self.name));
            }
            thread::sleep(every);
        }
    }

    /// SIGTERM, wait up to 10 s, then SIGKILL. Returns how it exited; `None` the second time.
    pub fn stop(&mut self) -> Option<String> {
        let mut child = self.child.take()?;
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status.to_string());
        }
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: kill has no memory-safety preconditions; the child is not reaped yet, so the pid is
            // still the child's.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let started = Instant::now();
        while started.elapsed() < STOP_GRACE {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status.to_string());
            }
            thread::sleep(POLL);
        }
        let _ = child.kill();
        let _ = child.wait();
        Some(format!("killed: still running {STOP_GRACE:?} after SIGTERM"))
    }

    /// Everything the child wrote so far.
    pub fn output(&self) -> String {
        std::fs::read(&self.output).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
    }

    /// The last `lines` lines of the child's output, for an error message.
    pub fn output_tail(&self, lines: usize) -> String {
        tail(&self.output(), lines)
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last `lines` lines of `text`, or a note that there were none.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if all.is_empty() {
        return "(no output)".to_owned();
    }
    all[all.len().saturating_sub(lines)..].join("\n")
}
