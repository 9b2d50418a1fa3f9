//! Toxiproxy (Shopify/toxiproxy v2), the TCP proxy that injects latency, black holes, resets and slow links
//! between a client and a server, for fault tests and the benchmark lab: built once from the Go module
//! proxy into `target/tools/`, started on a loopback port, and driven through its REST API ([`ToxiClient`]).
//!
//! The build is a throw-away Go module that `require`s the pinned version, with a `go.sum` kept beside this
//! file so that every downloaded module is checked against known hashes; it takes about a minute the first
//! time and is skipped when the binary is already there and reports the pinned version. Concurrent test
//! processes serialise on a lock file. A missing `go` is an error naming the package to install, never a
//! skip.
//!
//! ```no_run
//! use pgmux_testkit::toxiproxy::{Toxic, Toxiproxy};
//!
//! let toxiproxy = Toxiproxy::start().unwrap();
//! let api = toxiproxy.client();
//! let listen = api.create_proxy("db", "127.0.0.1:0", "127.0.0.1:5432").unwrap();
//! api.add_toxic("db", &Toxic::latency("slow", 20, 0)).unwrap();
//! # let _ = listen;
//! ```

mod api;
#[cfg(test)]
mod tests;

use std::fs::{self, OpenOptions};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

pub use api::{Stream, ToxiClient, Toxic, ToxicKind};

use crate::process::ChildProcess;
use crate::sys;

/// The pinned release; the Go module proxy serves it as `github.com/Shopify/toxiproxy/v2@VERSION`.
pub const VERSION: &str = "v2.12.0";
const MODULE: &str = "github.com/Shopify/toxiproxy/v2";
/// Hashes of the module and of everything it pulls in at [`VERSION`] (what `go build -mod=mod` wrote).
const GO_SUM: &str = include_str!("toxiproxy.go.sum");
const BINARY: &str = "toxiproxy-server";
const READY_TIMEOUT: Duration = Duration::from_secs(15);
const STOP_GRACE: Duration = Duration::from_secs(5);
const PORT_ATTEMPTS: usize = 5;

/// Where built tools live: `PGMUX_TOOLS_DIR`, else `$CARGO_TARGET_DIR/tools`, else `target/tools` of this
/// workspace.
pub fn tools_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PGMUX_TOOLS_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir).join("tools");
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("target").join("tools")
}

/// The Toxiproxy server binary at [`VERSION`], building it first if needed. The error says what failed
/// (no `go`, a download, the build) with Go's output.
pub fn ensure_built() -> Result<PathBuf, String> {
    let dir = tools_dir().join(format!("toxiproxy-{VERSION}"));
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let binary = dir.join(BINARY);
    let lock_path = dir.join(".build.lock");
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| format!("cannot open {}: {e}", lock_path.display()))?;
    sys::lock_exclusive(&lock).map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
    if reports_version(&binary) {
        return Ok(binary);
    }
    build(&dir, &binary)?;
    if !reports_version(&binary) {
        return Err(format!("{} was built but does not report version {VERSION}", binary.display()));
    }
    drop(lock);
    Ok(binary)
}

fn reports_version(binary: &Path) -> bool {
    Command::new(binary)
        .arg("-version")
        .output()
        .is_ok_and(|out| out.status.success() && String::from_utf8_lossy(&out.stdout).contains(VERSION))
}

fn build(dir: &Path, binary: &Path) -> Result<(), String> {
    let go = find_go()?;
    let module = dir.join("module");
    fs::create_dir_all(&module).map_err(|e| format!("cannot create {}: {e}", module.display()))?;
    let go_mod = format!("module pgmux.test/toxiproxy-build\n\ngo 1.23\n\nrequire {MODULE} {VERSION}\n");
    fs::write(module.join("go.mod"), go_mod).map_err(|e| format!("writing go.mod: {e}"))?;
    fs::write(module.join("go.sum"), GO_SUM).map_err(|e| format!("writing go.sum: {e}"))?;
    let partial = dir.join(format!("{BINARY}.partial"));
    let out = Command::new(&go)
        .current_dir(&module)
        .args(["build", "-mod=mod", "-trimpath", "-o"])
        .arg(&partial)
        .arg(format!("-ldflags=-X {MODULE}.Version={VERSION}"))
        .arg(format!("{MODULE}/cmd/server"))
        // Our flags only, and the toolchain that is installed: never fetch another Go.
        .env("GOFLAGS", "-mod=mod -buildvcs=false")
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", go.display()))?;
    if !out.status.success() {
        return Err(format!(
            "building Toxiproxy {VERSION} with {} failed ({}):\n{}{}",
            go.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    fs::rename(&partial, binary).map_err(|e| format!("cannot move the built binary to {}: {e}", binary.display()))
}

/// `go` on PATH, else where Debian's and the upstream tarball put it.
fn find_go() -> Result<PathBuf, String> {
    if Command::new("go").arg("version").output().is_ok_and(|out| out.status.success()) {
        return Ok(PathBuf::from("go"));
    }
    ["/usr/local/go/bin/go", "/usr/lib/go/bin/go"].iter().map(PathBuf::from).find(|path| path.is_file()).ok_or_else(
        || {
            "Toxiproxy is built from the Go module proxy, but `go` was not found (apt-get install golang-go; \
             tests/prereqs.sh does)"
                .to_owned()
        },
    )
}

/// A running Toxiproxy server. It dies with the thread that started it (`PR_SET_PDEATHSIG`), so start it
/// from a thread that outlives it; dropping it stops it and removes its log directory.
#[derive(Debug)]
pub struct Toxiproxy {
    server: ChildProcess,
    api: SocketAddr,
    // Its log's directory; dropped after the server (fields drop in order).
    _dir: tempfile::TempDir,
}

impl Toxiproxy {
    /// Build if needed, and start on a free port of 127.0.0.1.
    pub fn start() -> Result<Toxiproxy, String> {
        let binary = ensure_built()?;
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port_on("127.0.0.1")?;
            match Toxiproxy::spawn(&binary, SocketAddr::from(([127, 0, 0, 1], port))) {
                Ok(toxiproxy) => return Ok(toxiproxy),
                Err(e) => last = e,
            }
        }
        Err(format!("Toxiproxy did not start after {PORT_ATTEMPTS} attempts: {last}"))
    }

    /// Build if needed, and start with its API on `api`.
    pub fn start_on(api: SocketAddr) -> Result<Toxiproxy, String> {
        Toxiproxy::spawn(&ensure_built()?, api)
    }

    fn spawn(binary: &Path, api: SocketAddr) -> Result<Toxiproxy, String> {
        let dir = tempfile::Builder::new()
            .prefix("pgmux-toxiproxy-")
            .tempdir()
            .map_err(|e| format!("cannot create a directory for Toxiproxy's log: {e}"))?;
        let mut cmd = Command::new(binary);
        cmd.args(["-host", &api.ip().to_string(), "-port", &api.port().to_string()]).env("LOG_LEVEL", "warn");
        let server = ChildProcess::spawn_logged("Toxiproxy", cmd, &dir.path().join("toxiproxy.log"))
            .map_err(|e| e.to_string())?
            .with_stop_grace(STOP_GRACE);
        let mut toxiproxy = Toxiproxy { server, api, _dir: dir };
        toxiproxy.wait_ready()?;
        Ok(toxiproxy)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.server.exited() {
                return Err(format!("Toxiproxy exited ({status}): {}", self.log_tail()));
            }
            match self.client().version() {
                Ok(version) if version.contains(VERSION) => return Ok(()),
                Ok(version) => return Err(format!("Toxiproxy on {} reports {version:?}, not {VERSION}", self.api)),
                Err(_) if started.elapsed() < READY_TIMEOUT => thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(format!("Toxiproxy did not answer within {READY_TIMEOUT:?}: {e}")),
            }
        }
    }

    /// The API's address.
    pub fn api(&self) -> SocketAddr {
        self.api
    }

    /// A client of this server's API.
    pub fn client(&self) -> ToxiClient {
        ToxiClient::new(self.api)
    }

    /// The server's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.server.pid()
    }

    /// The end of the server's log, for error messages.
    pub fn log_tail(&self) -> String {
        self.server.output_tail(20)
    }

    /// SIGTERM, then SIGKILL after a grace period; idempotent. (Dropping it does the same.)
    pub fn stop(&mut self) {
        self.server.stop();
    }
}

/// A port on `ip` that was free a moment ago (like [`crate::free_port`], for any loopback address).
pub fn free_port_on(ip: &str) -> Result<u16, String> {
    let listener = TcpListener::bind((ip, 0)).map_err(|e| format!("cannot bind {ip}:0 to find a free port: {e}"))?;
    listener.local_addr().map(|addr| addr.port()).map_err(|e| format!("cannot read a bound address: {e}"))
}
