//! Running the driver inside its own namespace: the outer process (the `pgmux-chaos` binary as started, or
//! the short-form test) creates the namespace, re-executes the driver in it, forwards SIGINT/SIGTERM, and
//! deletes the namespace whatever happened; and the stop flag both sides check.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use pgmux_testkit::process::ChildProcess;

use crate::netns::{HostsFile, Namespace};

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
    let mut ns = Namespace::create(&HostsFile::text(first_writer))?;
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
