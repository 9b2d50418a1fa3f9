//! prometheus-community/pgbouncer_exporter v0.12.1, pointed at an admin console, and its scrapes.

use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::http::{self, Response};
use crate::series::{self, Sample};
use crate::tools::tools;

/// A running exporter. Dropping it kills it.
#[derive(Debug)]
pub struct Exporter {
    pub addr: SocketAddr,
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Exporter {
    /// Starts the exporter with `dsn` (e.g. `postgres://pgb_stats@127.0.0.1:6432/pgbouncer?sslmode=disable`),
    /// listening on a free loopback port; waits until it answers HTTP.
    pub fn start(dsn: &str) -> Exporter {
        let dir = tempfile::Builder::new().prefix("pgmux-obs-exporter-").tempdir().expect("a temporary directory");
        let log = dir.path().join("exporter.log");
        let addr = SocketAddr::from(([127, 0, 0, 1], pgmux_testkit::free_port()));
        let stderr = File::create(&log).expect("create the exporter's log");
        let mut cmd = Command::new(&tools().exporter);
        cmd.arg(format!("--pgBouncer.connectionString={dsn}"))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        pgmux_testkit::die_with_parent(&mut cmd);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot run {}: {e}", tools().exporter.display()));
        let mut exporter = Exporter { addr, child, log, _dir: dir };
        let up = crate::poll(Duration::from_secs(15), || {
            if let Ok(Some(status)) = exporter.child.try_wait() {
                return Some(Err(format!("it exited: {status}")));
            }
            http::get(addr, "/", None).ok().map(|_| Ok(()))
        });
        match up {
            Some(Ok(())) => exporter,
            Some(Err(why)) => panic!("pgbouncer_exporter did not start: {why}\n{}", exporter.log()),
            None => panic!("pgbouncer_exporter does not answer on {addr} after 15 s\n{}", exporter.log()),
        }
    }

    /// `GET /metrics`; panics unless it is a 200.
    pub fn scrape(&self) -> Response {
        let resp = http::get(self.addr, "/metrics", None).unwrap_or_else(|e| panic!("scrape {}: {e}", self.addr));
        assert_eq!(resp.status, 200, "scrape failed: {}\n--- exporter log ---\n{}", resp.body, self.log());
        resp
    }

    /// The samples of one scrape.
    pub fn samples(&self) -> Vec<Sample> {
        series::samples(&self.scrape().body).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Its log so far (stderr: logfmt lines, including each failed query).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The series the exporter itself and the Go runtime add whatever it scrapes.
pub fn is_own_series(name: &str) -> bool {
    ["go_", "process_", "promhttp_"].iter().any(|p| name.starts_with(p)) || name == "pgbouncer_exporter_build_info"
}
