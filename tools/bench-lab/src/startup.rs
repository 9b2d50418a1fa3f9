//! W7: how long a pooler takes from exec until its listener accepts a TCP connection. In Lambda that time
//! is part of every cold start; on a sidecar, of every restart.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use pgmux_testkit::process::ChildProcess;

use crate::interrupt;

/// Longest a start may take before it counts as failed.
const START_LIMIT: Duration = Duration::from_secs(10);
/// Connect attempts are this far apart: a refused connect on loopback takes microseconds, so polling this
/// often costs little and resolves start-ups of a few milliseconds to a tenth of one.
const POLL: Duration = Duration::from_micros(100);

/// Start a pooler `starts` times, each on a fresh port (`command(port)` builds the command; its set-up is
/// not timed), and return the times from spawn to the first accepted connection. Each instance is stopped
/// before the next starts. The first failure ends the series.
pub fn time_starts(
    name: &str,
    starts: usize,
    output: &Path,
    mut command: impl FnMut(u16) -> io::Result<Command>,
) -> Result<Vec<Duration>, String> {
    let mut times = Vec::with_capacity(starts);
    for _ in 0..starts {
        let port = pgmux_testkit::free_port();
        let cmd = command(port).map_err(|e| format!("preparing {name}: {e}"))?;
        let _ = std::fs::remove_file(output);
        let started = Instant::now();
        let mut child = ChildProcess::spawn_short_lived_logged(name, cmd, output).map_err(|e| e.to_string())?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let took = child.wait_listening(addr, started, START_LIMIT, POLL, interrupt::requested);
        child.stop();
        match took {
            Ok(took) => times.push(took),
            Err(e) => return Err(format!("{e}; its output: {}", child.output_tail(5).replace('\n', " / "))),
        }
    }
    Ok(times)
}
