//! Running the driver inside its own network namespace, so that its addresses, its host name and its
//! faults touch nothing of the machine: the outer process (the `pgmux-chaos` binary as started, or the
//! short-form test) creates the namespace (`pgmux_testkit::netns`), re-executes the driver in it, forwards
//! SIGINT/SIGTERM, and deletes the namespace whatever happened (a run that was killed leaves it to the next
//! run's sweep); and the stop flag both sides check.
//!
//! Why re-exec rather than `setns` on client threads: `ip netns exec` also gives the command a mount
//! namespace in which `/etc/netns/<ns>/hosts` is bind-mounted over `/etc/hosts`, and every process started
//! from it (PostgreSQL, Toxiproxy, pgmux, PgBouncer, the clients) inherits both. With `setns`, each child
//! would need the same mount dance before exec, and the driver's own resolver would still read the machine's
//! file.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use pgmux_testkit::netns::{self, Namespace};
use pgmux_testkit::process::ChildProcess;

use crate::NAMING;
use crate::hosts::HostsFile;

/// Set inside the namespace: the name of the namespace the driver runs in.
pub const INSIDE_ENV: &str = "PGMUX_CHAOS_NAMESPACE";
/// How long the inner driver gets to tear down (stop poolers and PostgreSQL) after SIGTERM.
const INNER_GRACE: Duration = Duration::from_secs(60);

static STOP: AtomicBool = AtomicBool::new(false);

/// Whether SIGINT or SIGTERM arrived; every wait of the driver checks this.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// Catch SIGINT and SIGTERM from now on (a thread with its own small runtime): the first sets the stop flag,
/// the second exits at once (children still die of `PR_SET_PDEATHSIG`; a next run sweeps the namespace).
pub fn catch_signals(who: &'static str) -> Result<(), String> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    thread::Builder::new()
        .name("chaos-signals".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.to_string()));
                    return;
                }
            };
            runtime.block_on(async move {
                use tokio::signal::unix::{SignalKind, signal};
                let (mut int, mut term) = match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
                    (Ok(int), Ok(term)) => (int, term),
                    (Err(e), _) | (_, Err(e)) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                loop {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                    if STOP.swap(true, Ordering::Relaxed) {
                        eprintln!("{who}: interrupted again; exiting now");
                        std::process::exit(130);
                    }
                    eprintln!("{who}: interrupted; tearing down (again to exit at once)");
                }
            });
        })
        .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    ready_rx.recv().map_err(|_| "the signal thread died".to_owned())?
}

/// Run `driver args...` inside a fresh namespace and return its exit code; the namespace is gone when this
/// returns, whatever the outcome. Call [`catch_signals`] first so that an interrupt tears down too.
pub fn run_isolated(driver: &Path, args: &[String], first_writer: &str) -> Result<i32, String> {
    if !pgmux_testkit::as_root() {
        return Err("the chaos suite needs root (network namespaces, PostgreSQL as the postgres user)".into());
    }
    sweep_leftovers();
    let mut ns = Namespace::create(NAMING, &HostsFile::text(first_writer)).map_err(|e| e.to_string())?;
    let mut cmd = ns.command(driver);
    cmd.args(args).env(INSIDE_ENV, ns.name()).stdin(Stdio::null());
    // A group of its own: a terminal's Ctrl-C reaches only us, and we tell the driver to tear down.
    cmd.process_group(0);
    let mut inner = ChildProcess::spawn("the chaos driver", cmd)
        .map_err(|e| format!("cannot start {} in {}: {e}", driver.display(), ns.name()))?;
    let (status, forwarded) =
        inner.wait_passing_on_stop(stop_requested, INNER_GRACE).map_err(|e| format!("waiting for the driver: {e}"))?;
    ns.delete();
    if forwarded {
        return Err("interrupted".to_owned());
    }
    Ok(status.code().unwrap_or(1))
}

/// Remove what runs killed with SIGKILL left: their namespaces and `/etc/netns` directories, and their data
/// directories `pgmux-chaos-<pid>-*` (in /dev/shm or the temporary directory).
pub fn sweep_leftovers() {
    netns::sweep(NAMING);
    for base in [PathBuf::from("/dev/shm"), std::env::temp_dir()] {
        let Ok(entries) = fs::read_dir(&base) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name
                .strip_prefix(NAMING.prefix)
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(pid) = pid
                && pid != std::process::id()
                && !Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    }
}
