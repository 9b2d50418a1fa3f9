//! The pinned tools, installed once per test process by `setup.sh` (quick when they are already there).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::{crate_dir, repo_root};

/// Paths of the tools the tests run.
#[derive(Clone, Debug)]
pub struct Tools {
    pub exporter: PathBuf,
    pub promtool: PathBuf,
    /// The virtualenv's python, with prometheus-client, aws-embedded-metrics and jsonschema.
    pub python: PathBuf,
    pub pgbouncer: PathBuf,
}

/// Runs `setup.sh` once per process and returns where the tools are; panics with its message when it fails.
pub fn tools() -> &'static Tools {
    static TOOLS: OnceLock<Tools> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let script = crate_dir().join("setup.sh");
        let out = Command::new(&script).output().unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} failed ({}); it installs the pinned tools these tests need:\n{}{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let target = repo_root().join("target");
        Tools {
            exporter: target.join("tools/pgbouncer_exporter"),
            promtool: target.join("tools/promtool"),
            python: target.join("obs-venv/bin/python"),
            pgbouncer: pgbouncer_binary(),
        }
    })
}

/// `PGMUX_PGBOUNCER`, else Debian's `/usr/sbin/pgbouncer` (not on a normal user's PATH), else `pgbouncer`.
fn pgbouncer_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("PGMUX_PGBOUNCER") {
        return PathBuf::from(path);
    }
    let debian = PathBuf::from("/usr/sbin/pgbouncer");
    if debian.is_file() { debian } else { PathBuf::from("pgbouncer") }
}
