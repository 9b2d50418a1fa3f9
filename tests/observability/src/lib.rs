//! Helpers for issue 12's tests against the real tools: the pinned tools themselves ([`tools`]), PgBouncer
//! with its admin console ([`pgbouncer`]), pgbouncer_exporter and a scrape of it ([`exporter`]), the pgmux
//! binary ([`pgmux`]), a known workload ([`workload`]), a bare HTTP GET ([`http`]), a console session on
//! the bare protocol that sees column types ([`wire`]), the samples and series set of a Prometheus text
//! ([`series`]), and the Python checks ([`python`]).
//!
//! Every tool is installed by `setup.sh` (pinned, under `target/`), which the first test of a process runs;
//! a tool that cannot be installed fails the test with setup.sh's message. Nothing is skipped, in CI or not.

pub mod exporter;
pub mod http;
pub mod pgbouncer;
pub mod pgmux;
pub mod python;
pub mod series;
pub mod tools;
pub mod wire;
pub mod workload;

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The checkout's root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the checkout's root exists")
}

/// This crate's directory (schema, Python scripts, fixtures).
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Polls `check` every 100 ms until it returns `Some`, or `within` passes (then `None`).
pub fn poll<T>(within: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
