//! pgmux and PgBouncer of one setting (the machine, or the network lab's application host), started on
//! demand. A pooler that exits on its own is noted (with its last output) and started again when next
//! needed, so that a crash costs the figures of one step rather than the run.

use std::net::{IpAddr, SocketAddr};

use pgmux_testkit::process::tail;

use crate::endpoint::Endpoint;
use crate::pgbouncer::{PgBouncerProcess, PgBouncerSettings};
use crate::results::Target;
use crate::{PgmuxProcess, PgmuxSettings};

/// Where ports come from: free ones of 127.0.0.1, or a counter in a namespace that is ours alone.
#[derive(Debug)]
pub enum Ports {
    Free,
    Counter(u16),
}

impl Ports {
    pub fn take(&mut self) -> u16 {
        match self {
            Ports::Free => pgmux_testkit::free_port(),
            Ports::Counter(next) => {
                *next = next.checked_add(1).unwrap_or(20_000);
                *next
            }
        }
    }
}

#[derive(Debug)]
pub struct Poolers {
    pub pgmux_settings: PgmuxSettings,
    pub bouncer_settings: PgBouncerSettings,
    pub ports: Ports,
    pgmux: Option<PgmuxProcess>,
    bouncer: Option<PgBouncerProcess>,
    /// What pgmux wrote (warnings and worse at `log_level=warn`), over every instance so far.
    pgmux_log: Vec<String>,
    /// PgBouncer's log lines at WARNING or worse, over every instance so far.
    bouncer_log: Vec<String>,
}

impl Poolers {
    pub fn new(pgmux_settings: PgmuxSettings, bouncer_settings: PgBouncerSettings, ports: Ports) -> Poolers {
        Poolers {
            pgmux_settings,
            bouncer_settings,
            ports,
            pgmux: None,
            bouncer: None,
            pgmux_log: Vec::new(),
            bouncer_log: Vec::new(),
        }
    }

    /// Where clients reach `target`'s pooler, starting it if need be: on its Unix socket when `unix` asks
    /// (an error if it has none, rather than measuring TCP under a Unix-socket row), else over TCP. Not for
    /// direct.
    pub fn endpoint(&mut self, target: Target, unix: bool) -> Result<Endpoint, String> {
        let addr = self.addr(target)?;
        let dir = match target {
            Target::Direct => None,
            Target::Pgmux => self.pgmux_settings.unix_socket_dir.clone(),
            Target::PgBouncer => self.bouncer_settings.unix_socket_dir.clone(),
        };
        match dir {
            Some(dir) if unix => Ok(Endpoint::unix(dir, addr.port())),
            None if unix => Err(format!("{} has no Unix socket in this setting", target.label())),
            _ => Ok(Endpoint::tcp(addr.ip(), addr.port())),
        }
    }

    /// The address `target` listens on (TCP; its Unix socket has the same port), starting it if it is not
    /// running. Not for direct.
    pub fn addr(&mut self, target: Target) -> Result<SocketAddr, String> {
        match target {
            Target::Direct => Err("direct has no pooler".to_owned()),
            Target::Pgmux => {
                if self.pgmux.is_none() {
                    let mut settings = self.pgmux_settings.clone();
                    settings.listen.set_port(self.ports.take());
                    let process = PgmuxProcess::start(&settings).map_err(|e| format!("starting pgmux: {e}"))?;
                    self.pgmux = Some(process);
                }
                Ok(self.pgmux.as_ref().map_or(self.pgmux_settings.listen, PgmuxProcess::listen))
            }
            Target::PgBouncer => {
                if self.bouncer.is_none() {
                    let port = self.ports.take();
                    self.bouncer = Some(PgBouncerProcess::start(&self.bouncer_settings, "pgbouncer", port)?);
                }
                let port = self.bouncer.as_ref().map_or(0, PgBouncerProcess::port);
                Ok(SocketAddr::new(self.bouncer_settings.listen_addr, port))
            }
        }
    }

    /// The pooler's pid; `None` for direct or a pooler not running.
    pub fn pid(&self, target: Target) -> Option<u32> {
        match target {
            Target::Pgmux => self.pgmux.as_ref()?.pid(),
            Target::PgBouncer => self.bouncer.as_ref()?.pid(),
            Target::Direct => None,
        }
    }

    /// If `target`'s pooler exited on its own, forget it (the next [`Poolers::addr`] starts a new one) and
    /// say how it ended.
    pub fn exited(&mut self, target: Target) -> Option<String> {
        match target {
            Target::Pgmux => {
                let exit = self.pgmux.as_mut()?.exited()?;
                let output = self.pgmux.as_ref().map(PgmuxProcess::output).unwrap_or_default();
                self.stop_pgmux();
                Some(format!("{exit}; its output ends: {}", tail(&output, 5).replace('\n', " / ")))
            }
            Target::PgBouncer => {
                let exit = self.bouncer.as_mut()?.exited()?;
                self.bouncer = None;
                Some(exit.replace('\n', " / "))
            }
            Target::Direct => None,
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut bouncer) = self.bouncer.take() {
            self.bouncer_log.extend(bouncer.warnings());
            bouncer.stop();
        }
        self.stop_pgmux();
    }

    /// Keep what an instance started outside this set (W9's fleets) wrote, with the rest.
    pub fn absorb_pgmux(&mut self, mut pgmux: PgmuxProcess) {
        pgmux.stop();
        self.pgmux_log.extend(pgmux.output().lines().filter(|l| !l.trim().is_empty()).map(str::to_owned));
    }

    /// [`Poolers::absorb_pgmux`] for PgBouncer.
    pub fn absorb_bouncer(&mut self, mut bouncer: PgBouncerProcess) {
        self.bouncer_log.extend(bouncer.warnings());
        bouncer.stop();
    }

    /// Every non-empty line pgmux wrote so far, over every instance, the running one's last.
    pub fn pgmux_output_lines(&self) -> Vec<String> {
        let mut lines = self.pgmux_log.clone();
        if let Some(pgmux) = &self.pgmux {
            lines.extend(pgmux.output().lines().filter(|l| !l.trim().is_empty()).map(str::to_owned));
        }
        lines
    }

    /// What the poolers logged so far, as (name, what, lines).
    pub fn logs(&self) -> [(&'static str, &'static str, &[String]); 2] {
        [("pgmux", "output lines", &self.pgmux_log), ("PgBouncer", "warnings", &self.bouncer_log)]
    }

    /// The address poolers of this set listen on.
    pub fn listen_ip(&self) -> IpAddr {
        self.pgmux_settings.listen.ip()
    }

    /// Stop pgmux alone, keeping what it wrote (the next [`Poolers::addr`] starts it again, with the
    /// settings then in force).
    pub fn stop_pgmux(&mut self) {
        if let Some(pgmux) = self.pgmux.take() {
            self.absorb_pgmux(pgmux);
        }
    }
}

impl Drop for Poolers {
    fn drop(&mut self) {
        self.stop();
    }
}
