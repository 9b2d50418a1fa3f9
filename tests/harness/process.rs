//! Child processes of the test tools (the harness's own servers, the chaos suite, the benchmark lab), handled
//! one way: they die with the thread that started them (`PR_SET_PDEATHSIG`), they are asked to stop
//! (SIGTERM) before they are killed, every wait has a deadline, and a command run to completion reports its
//! failure with what it printed.
//!
//! Two shapes of child. A [`ChildProcess`] is spawned and reaped by the caller's thread, which must outlive
//! it (the driver's main thread, say). A [`WatchedChild`] is spawned and reaped by a thread of its own, for a
//! server that must outlive the thread that starts it (a postmaster restarted by a fault injector's thread).

use std::fmt;
use std::fs::OpenOptions;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Condvar, Mutex, PoisonError, mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::sys;

#[cfg(test)]
mod tests;

/// How long a child may take to exit after SIGTERM before it gets SIGKILL, unless its owner says otherwise.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// How often a wait looks at the child (and at the caller's interrupt flag).
const POLL: Duration = Duration::from_millis(20);
/// How long one attempt to connect to a child's listener may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// A running child, reaped by the thread that owns this value. Dropping it stops it (SIGTERM, then SIGKILL).
#[derive(Debug)]
pub struct ChildProcess {
    name: String,
    child: Option<Child>,
    /// The file its stdout and stderr go to, when it has one.
    log: Option<PathBuf>,
    grace: Duration,
}

/// How waiting for a child ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Waited {
    Exited(ExitStatus),
    /// The deadline passed; the child still runs.
    TimedOut,
    /// The caller's interrupt flag was raised; the child still runs.
    Interrupted,
}

/// How a child was stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Stopped {
    /// It had exited before it was asked to.
    AlreadyExited(ExitStatus),
    /// It exited after SIGTERM.
    Exited(ExitStatus),
    /// It was still running `grace` after SIGTERM and got SIGKILL.
    Killed { grace: Duration },
}

impl fmt::Display for Stopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stopped::AlreadyExited(status) | Stopped::Exited(status) => write!(f, "{status}"),
            Stopped::Killed { grace } => write!(f, "killed: still running {grace:?} after SIGTERM"),
        }
    }
}

/// A child that did not come to listen, and why ([`ChildProcess::wait_listening`]).
#[derive(Debug, PartialEq, Eq)]
pub struct NotListening {
    pub name: String,
    pub addr: SocketAddr,
    pub limit: Duration,
    pub why: Waited,
}

impl fmt::Display for NotListening {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let NotListening { name, addr, limit, why } = self;
        match why {
            Waited::Exited(status) => write!(f, "{name} exited before listening on {addr} ({status})"),
            Waited::TimedOut => write!(f, "{name} did not listen on {addr} within {limit:?}"),
            Waited::Interrupted => write!(f, "interrupted"),
        }
    }
}

impl std::error::Error for NotListening {}

impl ChildProcess {
    /// Spawn `cmd` as it is set up (stdio included), with the parent-death signal: the child gets SIGKILL
    /// when the calling thread exits, so call this from a thread that outlives the child.
    pub fn spawn(name: &str, mut cmd: Command) -> io::Result<ChildProcess> {
        sys::die_with_parent(&mut cmd);
        ChildProcess::start(name, cmd, None)
    }

    /// [`ChildProcess::spawn`] with stdin closed and stdout and stderr appended to `log`. A file rather
    /// than a pipe: nobody has to drain it while the child runs, and it is there to quote when it fails.
    pub fn spawn_logged(name: &str, mut cmd: Command, log: &Path) -> io::Result<ChildProcess> {
        sys::die_with_parent(&mut cmd);
        log_to(&mut cmd, log)?;
        ChildProcess::start(name, cmd, Some(log))
    }

    /// [`ChildProcess::spawn_logged`] without the parent-death signal, for children that live milliseconds
    /// and are stopped by the caller right away (the benchmark's timed starts). Setting that signal takes a
    /// `pre_exec` hook, which makes std fork the whole caller instead of using `posix_spawn`; once the
    /// caller has held thousands of connections, that fork alone adds milliseconds to every start it times.
    pub fn spawn_short_lived_logged(name: &str, mut cmd: Command, log: &Path) -> io::Result<ChildProcess> {
        log_to(&mut cmd, log)?;
        ChildProcess::start(name, cmd, Some(log))
    }

    fn start(name: &str, mut cmd: Command, log: Option<&Path>) -> io::Result<ChildProcess> {
        let program = cmd.get_program().to_string_lossy().into_owned();
        let child = cmd.spawn().map_err(|e| io::Error::new(e.kind(), format!("cannot start {program}: {e}")))?;
        Ok(ChildProcess { name: name.to_owned(), child: Some(child), log: log.map(Path::to_owned), grace: STOP_GRACE })
    }

    /// How long [`ChildProcess::stop`] (and so a drop) gives it after SIGTERM; [`STOP_GRACE`] by default.
    pub fn with_stop_grace(mut self, grace: Duration) -> ChildProcess {
        self.grace = grace;
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The child's pid while it has not been reaped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// How it exited, if it has (and reaps it).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// Its stdout, when the command piped it, for a reader of the caller's.
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.as_mut()?.stdout.take()
    }

    /// Its stderr, when the command piped it.
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.as_mut()?.stderr.take()
    }

    /// Send `signal` while the child runs; false once it has exited (its pid may be someone else's by then).
    pub fn signal(&mut self, signal: libc::c_int) -> bool {
        let pid = self.pid();
        match (pid, self.exited()) {
            (Some(pid), None) => sys::send_signal(pid, signal),
            _ => false,
        }
    }

    /// Wait until the child exits, `limit` passes, or `interrupted()` says so; the child is left running in
    /// the last two cases.
    pub fn wait(&mut self, limit: Duration, interrupted: impl Fn() -> bool) -> Waited {
        let started = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                return Waited::Exited(status);
            }
            if interrupted() {
                return Waited::Interrupted;
            }
            if started.elapsed() >= limit {
                return Waited::TimedOut;
            }
            thread::sleep(POLL);
        }
    }

    /// Poll `addr` every `every` until it accepts a TCP connection; the time it took from `since`. Fails
    /// saying why otherwise: the child exited first, `limit` passed since `since`, or `interrupted()` said
    /// so. (When timing a start-up, poll often: a refused connect costs microseconds.)
    pub fn wait_listening(
        &mut self,
        addr: SocketAddr,
        since: Instant,
        limit: Duration,
        every: Duration,
        interrupted: impl Fn() -> bool,
    ) -> Result<Duration, NotListening> {
        let why = loop {
            if TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).is_ok() {
                return Ok(since.elapsed());
            }
            if let Some(status) = self.exited() {
                break Waited::Exited(status);
            }
            if interrupted() {
                break Waited::Interrupted;
            }
            if since.elapsed() > limit {
                break Waited::TimedOut;
            }
            thread::sleep(every);
        };
        Err(NotListening { name: self.name.clone(), addr, limit, why })
    }

    /// Wait until the child exits on its own. Once `stop()` says so, pass the request on (SIGTERM, once)
    /// and give it `grace` before SIGKILL. Returns how it exited and whether it was asked to.
    pub fn wait_passing_on_stop(&mut self, stop: impl Fn() -> bool, grace: Duration) -> io::Result<(ExitStatus, bool)> {
        let Some(child) = self.child.as_mut() else {
            return Err(io::Error::other(format!("{} was already reaped", self.name)));
        };
        let mut asked: Option<Instant> = None;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok((status, asked.is_some()));
            }
            if stop() {
                match asked {
                    None => {
                        sys::send_signal(child.id(), libc::SIGTERM);
                        asked = Some(Instant::now());
                    }
                    Some(at) if at.elapsed() > grace => {
                        let _ = child.kill();
                    }
                    Some(_) => {}
                }
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, wait up to the grace period, then SIGKILL. How it went; `None` the second time.
    pub fn stop(&mut self) -> Option<Stopped> {
        let mut child = self.child.take()?;
        if let Ok(Some(status)) = child.try_wait() {
            return Some(Stopped::AlreadyExited(status));
        }
        // Not reaped yet, so the pid is still the child's.
        sys::send_signal(child.id(), libc::SIGTERM);
        let started = Instant::now();
        while started.elapsed() < self.grace {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(Stopped::Exited(status));
            }
            thread::sleep(POLL);
        }
        let _ = child.kill();
        let _ = child.wait();
        Some(Stopped::Killed { grace: self.grace })
    }

    /// Everything the child wrote to its log so far (empty without one).
    pub fn output(&self) -> String {
        self.log.as_deref().map(read_lossy).unwrap_or_default()
    }

    /// The last `lines` lines of the child's log, for an error message.
    pub fn output_tail(&self, lines: usize) -> String {
        tail(&self.output(), lines)
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Close `cmd`'s stdin and append its stdout and stderr to `log` (created if missing).
pub fn log_to(cmd: &mut Command, log: &Path) -> io::Result<()> {
    let file = OpenOptions::new().create(true).append(true).open(log)?;
    cmd.stdin(Stdio::null()).stdout(file.try_clone()?).stderr(file);
    Ok(())
}

/// The last `lines` non-blank lines of `text`, or a note that there were none.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if all.is_empty() {
        return "(no output)".to_owned();
    }
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn read_lossy(path: &Path) -> String {
    std::fs::read(path).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
}

/// A child spawned and reaped by a thread of its own, which lives exactly as long as the child: the
/// parent-death signal fires when the *spawning thread* exits, so a server started from a short-lived
/// thread would otherwise die with it. Dropping it kills a child still running; stopping it politely is its
/// owner's business (a postmaster has its own ways).
#[derive(Debug)]
pub struct WatchedChild {
    pid: u32,
    exit: Arc<ExitState>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct ExitState {
    status: Mutex<Option<String>>,
    changed: Condvar,
}

impl WatchedChild {
    /// Spawn `cmd` (with the parent-death signal) from a new thread named `name`, which then waits for it.
    pub fn spawn(name: &str, mut cmd: Command) -> io::Result<WatchedChild> {
        sys::die_with_parent(&mut cmd);
        let exit = Arc::new(ExitState::default());
        let (spawned_tx, spawned_rx) = mpsc::channel();
        let waiter_exit = Arc::clone(&exit);
        let thread = thread::Builder::new().name(name.to_owned()).spawn(move || {
            let mut child = match cmd.spawn() {
                Ok(child) => child,
                Err(e) => {
                    let _ = spawned_tx.send(Err(e));
                    return;
                }
            };
            let _ = spawned_tx.send(Ok(child.id()));
            let status = match child.wait() {
                Ok(status) => status.to_string(),
                Err(e) => format!("wait failed: {e}"),
            };
            *waiter_exit.status.lock().unwrap_or_else(PoisonError::into_inner) = Some(status);
            waiter_exit.changed.notify_all();
        })?;
        match spawned_rx.recv() {
            Ok(Ok(pid)) => Ok(WatchedChild { pid, exit, thread: Some(thread) }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(io::Error::other(format!("the thread {name} died before spawning"))),
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// How the child exited, if it has.
    pub fn exited(&self) -> Option<String> {
        self.exit.status.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Wait up to `timeout` for the child to exit (after someone asked it to); how it exited, if it did.
    pub fn wait_exit(&self, timeout: Duration) -> Option<String> {
        let guard = self.exit.status.lock().unwrap_or_else(PoisonError::into_inner);
        let (guard, _) = self
            .exit
            .changed
            .wait_timeout_while(guard, timeout, |status| status.is_none())
            .unwrap_or_else(PoisonError::into_inner);
        guard.clone()
    }

    /// Send `signal` to a child not yet seen to exit, so that a recycled pid is not hit (short of a reap and
    /// a reuse between the check and the signal).
    pub fn signal(&self, signal: libc::c_int) -> bool {
        self.exited().is_none() && sys::send_signal(self.pid, signal)
    }

    /// Wait for the child's thread, which ends when the child has exited.
    pub fn join(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for WatchedChild {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.signal(libc::SIGKILL);
            self.join();
        }
    }
}

/// A command run to completion that did not succeed.
#[derive(Debug)]
pub enum RunError {
    /// It could not be started at all (not installed, say).
    CannotStart { what: String, source: io::Error },
    /// It ran and failed; what it printed.
    Failed { what: String, status: ExitStatus, stdout: String, stderr: String },
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::CannotStart { what, source } => write!(f, "cannot run {what}: {source}"),
            RunError::Failed { what, status, stdout, stderr } => {
                let printed: Vec<&str> = [stdout, stderr].iter().map(|s| s.trim()).filter(|s| !s.is_empty()).collect();
                let printed = if printed.is_empty() { "(no output)".to_owned() } else { printed.join("\n") };
                write!(f, "{what} failed ({status}): {printed}")
            }
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::CannotStart { source, .. } => Some(source),
            RunError::Failed { .. } => None,
        }
    }
}

/// Run `cmd` to completion with stdin closed, capturing its output; a failure says what (`what`), how it
/// ended and what it printed.
pub fn run(mut cmd: Command, what: &str) -> Result<Output, RunError> {
    let out =
        cmd.stdin(Stdio::null()).output().map_err(|source| RunError::CannotStart { what: what.to_owned(), source })?;
    if out.status.success() {
        return Ok(out);
    }
    Err(RunError::Failed {
        what: what.to_owned(),
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}
