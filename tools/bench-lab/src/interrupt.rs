//! Ctrl-C (and SIGTERM) for the benchmark driver: the first one asks the run to stop, so that every child
//! is stopped and every temporary directory removed on the way out; a second one exits at once (the
//! children still die, of `PR_SET_PDEATHSIG`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Whether the run was asked to stop. Every wait in the driver checks this.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}

/// Handle SIGINT and SIGTERM from now on, on `runtime`, which must live as long as the run.
pub fn install(runtime: &tokio::runtime::Runtime) -> std::io::Result<()> {
    let _guard = runtime.enter();
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    runtime.spawn(async move {
        loop {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            if REQUESTED.swap(true, Ordering::Relaxed) {
                eprintln!("pgmux-bench: interrupted again; exiting now");
                std::process::exit(130);
            }
            eprintln!("pgmux-bench: interrupted; stopping the children (again to exit at once)");
        }
    });
    Ok(())
}

/// A future that completes once the run is asked to stop; for `select!` against async work.
pub async fn wait() {
    while !requested() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
