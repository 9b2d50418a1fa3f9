//! The network lab: PostgreSQL where pgmux really meets it, a network hop away, with TLS and SCRAM.
//!
//! ```text
//!  application host (namespace pgmux-bench-<pid>-app)      │  database host (the machine)
//!  clients: pgbench, pgmux-bench-client                     │
//!  pgmux, PgBouncer on 10.x.y.2 ──── veth ───────────────── 10.x.y.1:<port> Toxiproxy ── 127.0.0.1 PostgreSQL
//!  /etc/netns/…/hosts: db.pgmux.test → 10.x.y.1             │            latency toxic, server → client
//! ```
//!
//! PostgreSQL listens on 127.0.0.1 only, so the application host reaches it only through Toxiproxy, whose
//! latency toxic on the server-to-client direction adds the configured round trip to every exchange (this
//! kernel has no `sch_netem`). The application role may log in only over TLS, with SCRAM-SHA-256; every
//! client on the application host uses `sslmode=verify-full` against a CA made by this run, by the name
//! `db.pgmux.test`. Before anything is measured, [`NetLab::start`] checks all of that from the application
//! host and measures the round trip ([`Topology`]).

use std::net::{IpAddr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pgmux_testkit::netns;
use pgmux_testkit::process::{ChildProcess, Waited};
use pgmux_testkit::toxiproxy::{Toxic, Toxiproxy, free_port_on};
use pgmux_testkit::{APP_USER, DATABASE, MD5_USER, PgOptions, PgServer, SUPERUSER};
use serde::Serialize;
use tokio_postgres::Config;

use crate::app_host::{AppHost, DB_HOST_NAME};
use crate::endpoint::Endpoint;
use crate::jobs::{Job, JobReport, ProbeReport};
use crate::lab::{INIT_LIMIT, Tools, wait_for_drain};
use crate::pgbench::Pgbench;
use crate::pgbouncer::{PgBouncerProcess, PgBouncerSettings};
use crate::pki::Pki;
use crate::plan::Plan;
use crate::poolers::{Poolers, Ports};
use crate::results::Target;
use crate::workload::ServerMonitor;
use crate::{PgmuxProcess, PgmuxSettings, interrupt};

/// `select 1` round trips the topology check times.
const PINGS: usize = 50;
/// How long the topology check may take.
const PROBE_LIMIT: Duration = Duration::from_secs(60);

/// What the lab is and what was measured of it before the run, for the report.
#[derive(Clone, Debug, Serialize)]
pub struct Topology {
    pub rtt_ms: u64,
    pub probe: ProbeReport,
    /// The topology in words, measured figures included.
    pub lines: Vec<String>,
}

#[derive(Debug)]
pub struct NetLab {
    pub poolers: Poolers,
    pub pgbench: Pgbench,
    pub topology: Topology,
    /// Surprises, for the report.
    pub notes: Vec<String>,
    /// PostgreSQL directly, from the application host: by name, through the delay line.
    pub direct: Endpoint,
    client: PathBuf,
    dir: PathBuf,
    jobs: usize,
    options: PgOptions,
    // Dropped in field order: the poolers (in Poolers' Drop) first, the namespace last.
    /// The delay line; held for as long as the lab (dropping it stops it).
    _toxiproxy: Toxiproxy,
    pub pg: PgServer,
    pub host: AppHost,
}

impl NetLab {
    /// Build the lab and check it; fails (with what is wrong) rather than measure a lab that is not what
    /// the report would say it is.
    pub fn start(plan: &Plan, tools: &Tools, scratch: &Path) -> Result<NetLab, String> {
        let dir = scratch.join("net");
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        pgmux_testkit::give_to_postgres(&dir).map_err(|e| format!("chown of {}: {e}", dir.display()))?;
        let host = AppHost::create()?;
        let pki = Pki::create(&dir, DB_HOST_NAME)?;
        let options = server_options(plan, &pki, &dir)?;
        let pg = start_server(&options)?;
        let toxiproxy = Toxiproxy::start()?;
        let port = free_port_on(&host.db_addr.to_string())?;
        let api = toxiproxy.client();
        let listen = format!("{}:{port}", host.db_addr);
        api.create_proxy("postgres", &listen, &format!("127.0.0.1:{}", pg.port())).map_err(|e| e.to_string())?;
        api.add_toxic("postgres", &Toxic::latency("rtt", plan.rtt_ms, 0)).map_err(|e| e.to_string())?;
        let direct = Endpoint::verify_full(DB_HOST_NAME, port, pki.ca.clone());
        let pgbench = Pgbench {
            program: tools.pgbench.clone(),
            user: APP_USER.user.to_owned(),
            database: DATABASE.to_owned(),
            scratch: dir.clone(),
            netns: Some(host.name().to_owned()),
        };
        let poolers = poolers(plan, tools, &host, &direct, &dir)?;
        let probe = ProbeReport {
            ssl: String::new(),
            tls: String::new(),
            round_trip: Default::default(),
            without_tls: Ok(()),
            by_address: Ok(()),
        };
        let topology = Topology { rtt_ms: plan.rtt_ms, probe, lines: Vec::new() };
        let mut lab = NetLab {
            poolers,
            pgbench,
            topology,
            notes: Vec::new(),
            direct,
            client: tools.client.clone(),
            dir,
            jobs: 0,
            options,
            _toxiproxy: toxiproxy,
            pg,
            host,
        };
        lab.topology = lab.check()?;
        eprintln!("pgmux-bench: network lab ready; pgbench -i -s {} through the link", plan.scale);
        lab.pgbench.initialise(&lab.direct, plan.scale, INIT_LIMIT)?;
        Ok(lab)
    }

    /// The topology check, run from the application host: TLS on a direct connection, the two refusals,
    /// the round trip.
    fn check(&mut self) -> Result<Topology, String> {
        let job = Job::Probe { direct: self.direct.clone(), address: self.host.db_addr.to_string(), pings: PINGS };
        let JobReport::Probe(probe) = self.run_job(&job, PROBE_LIMIT)? else {
            return Err("the probe answered with another report".to_owned());
        };
        if probe.ssl != "on" {
            return Err(format!("SHOW ssl says {:?} on a direct connection", probe.ssl));
        }
        if probe.without_tls.is_ok() {
            return Err("a connection without TLS was accepted".to_owned());
        }
        if probe.by_address.is_ok() {
            return Err("verify-full accepted the certificate for an address it does not name".to_owned());
        }
        let rtt = &probe.round_trip;
        let (ns, app, db, port) = (self.host.name(), self.host.app_addr, self.host.db_addr, self.direct.port);
        let ms = |v: Option<f64>| v.map_or_else(|| "?".to_owned(), |v| format!("{v:.2}"));
        let lines = vec![
            format!(
                "Application host: network namespace `{ns}` ({app}), holding the clients (pgbench, \
                 `pgmux-bench-client`), pgmux and PgBouncer; `{DB_HOST_NAME}` resolves to {db} there, through the \
                 namespace's own hosts file (`/etc/netns/{ns}/hosts`)."
            ),
            format!(
                "Database host: the machine's own namespace. PostgreSQL listens on 127.0.0.1 only; the \
                 application host reaches it only through Toxiproxy {} on {db}:{port} (a veth pair between the \
                 two), whose latency toxic delays every server-to-client chunk by {} ms.",
                pgmux_testkit::toxiproxy::VERSION,
                self.topology.rtt_ms
            ),
            format!(
                "TLS and SCRAM: PostgreSQL `ssl=on` with a certificate for `{DB_HOST_NAME}` from a CA made by this \
                 run; the application role logs in only over TLS, with SCRAM-SHA-256 (`hostssl … scram-sha-256`). \
                 Direct clients (libpq's `sslmode=verify-full`, or the driver's rustls with the same checks and \
                 channel binding), pgmux (`sslmode=verify-full`, `sslrootcert`) and PgBouncer \
                 (`server_tls_sslmode = verify-full`, `server_tls_ca_file`, the password in `auth_file`) all \
                 verify the certificate and the name. Clients log in to the poolers with trust, on the \
                 application host's own address."
            ),
            format!(
                "Checked from the application host before measuring: `SHOW ssl` = {} ({}) on a direct \
                 connection; without TLS refused: {}; by address instead of name refused: {}; `select 1` round \
                 trip p50 {} ms, p99 {} ms over {} queries.",
                probe.ssl,
                probe.tls,
                short(probe.without_tls.as_ref().err()),
                short(probe.by_address.as_ref().err()),
                ms(rtt.p50_ms),
                ms(rtt.p99_ms),
                rtt.count
            ),
        ];
        Ok(Topology { rtt_ms: self.topology.rtt_ms, probe, lines })
    }

    /// Where clients on the application host reach `target`, starting its pooler there if need be: over
    /// TCP, or (`unix`) on the pooler's Unix socket, as a Lambda function reaches its extension. PostgreSQL
    /// itself is across the link, so direct has only TCP.
    pub fn endpoint(&mut self, target: Target, unix: bool) -> Result<Endpoint, String> {
        match target {
            Target::Direct if unix => Err("direct has no Unix socket on the application host".to_owned()),
            Target::Direct => Ok(self.direct.clone()),
            _ => self.poolers.endpoint(target, unix),
        }
    }

    /// Both poolers stopped, their server connections gone, `target` started afresh.
    pub fn fresh(&mut self, target: Target) -> Result<Endpoint, String> {
        self.poolers.stop();
        if let Some(note) = wait_for_drain(&self.pg) {
            self.note(note);
        }
        self.endpoint(target, false)
    }

    /// Restart PostgreSQL with `max_connections` if it runs with another value (the poolers stop first).
    pub fn use_max_connections(&mut self, max_connections: u32) -> Result<(), String> {
        if self.options.max_connections == max_connections {
            return Ok(());
        }
        self.poolers.stop();
        self.options.max_connections = max_connections;
        let (pg, options) = (&mut self.pg, &self.options);
        std::panic::catch_unwind(AssertUnwindSafe(|| pg.restart_with(options)))
            .map_err(|panic| format!("restarting PostgreSQL: {}", panic_text(&panic)))
    }

    /// Counts the application role's server connections, from the database host.
    pub fn monitor(&self, interval: Duration) -> ServerMonitor {
        ServerMonitor { config: self.superuser(), usename: APP_USER.user.to_owned(), interval }
    }

    fn superuser(&self) -> Config {
        let mut config = Config::new();
        config.host("127.0.0.1").port(self.pg.port()).user(SUPERUSER.user).password(SUPERUSER.password);
        config.dbname(DATABASE).application_name("pgmux-bench monitor");
        config
    }

    /// Another role's login, from the database host (W9's other tenant).
    pub fn other_role(&self) -> Config {
        let mut config = Config::new();
        config.host("127.0.0.1").port(self.pg.port()).user(MD5_USER.user).password(MD5_USER.password);
        config.dbname(DATABASE).application_name("pgmux-bench other role");
        config
    }

    /// `count` pgmux instances on the application host, each with its defaults for the pool (sized from
    /// the database), as W9's fleet.
    pub fn pgmux_fleet(&mut self, count: usize) -> Result<Vec<PgmuxProcess>, String> {
        let mut settings = self.poolers.pgmux_settings.clone();
        settings.pool_max = None;
        let mut fleet = Vec::with_capacity(count);
        for _ in 0..count {
            settings.listen.set_port(self.poolers.ports.take());
            fleet.push(PgmuxProcess::start(&settings).map_err(|e| format!("starting pgmux: {e}"))?);
        }
        Ok(fleet)
    }

    /// `count` PgBouncers on the application host with PgBouncer's default pool size.
    pub fn bouncer_fleet(&mut self, count: usize) -> Result<Vec<PgBouncerProcess>, String> {
        let mut settings = self.poolers.bouncer_settings.clone();
        settings.pool_size = None;
        settings.max_client_conn = 1000;
        let mut fleet = Vec::with_capacity(count);
        for i in 0..count {
            let port = self.poolers.ports.take();
            fleet.push(PgBouncerProcess::start(&settings, &format!("fleet-{}", i + 1), port)?);
        }
        Ok(fleet)
    }

    /// Run `job` on the application host and wait for its report, at most `limit` (or until Ctrl-C).
    pub fn run_job(&mut self, job: &Job, limit: Duration) -> Result<JobReport, String> {
        self.jobs += 1;
        let [input, output, log] =
            ["json", "report.json", "log"].map(|ext| self.dir.join(format!("job-{}.{ext}", self.jobs)));
        let text = serde_json::to_string(job).map_err(|e| e.to_string())?;
        std::fs::write(&input, text).map_err(|e| format!("writing {}: {e}", input.display()))?;
        let mut cmd = netns::exec_in(self.host.name(), &self.client);
        cmd.arg(&input).arg(&output).process_group(0);
        let mut child = ChildProcess::spawn_logged("pgmux-bench-client", cmd, &log).map_err(|e| e.to_string())?;
        let waited = child.wait(limit, interrupt::requested);
        child.stop();
        match waited {
            Waited::Exited(status) if status.success() => {
                let report =
                    std::fs::read_to_string(&output).map_err(|e| format!("reading the client's report: {e}"))?;
                serde_json::from_str(&report).map_err(|e| format!("the client's report: {e}"))
            }
            Waited::Exited(status) => Err(format!("the client failed ({status}): {}", child.output_tail(3))),
            Waited::TimedOut => Err(format!("the client did not finish within {limit:?}")),
            Waited::Interrupted => Err("interrupted".to_owned()),
        }
    }

    pub fn note(&mut self, note: String) {
        eprintln!("pgmux-bench: {note}");
        self.notes.push(note);
    }
}

/// PostgreSQL of the database host: TLS on, the application role over TLS with SCRAM only, the superuser
/// (the driver's monitor) and the other role of W9 from 127.0.0.1 without TLS.
fn server_options(plan: &Plan, pki: &Pki, dir: &Path) -> Result<PgOptions, String> {
    let hba = dir.join("pg_hba.conf");
    let text = format!(
        "host    all  {su}  127.0.0.1/32  scram-sha-256\n\
         host    all  {other}  127.0.0.1/32  md5\n\
         hostssl all  {app}  127.0.0.1/32  scram-sha-256\n",
        su = SUPERUSER.user,
        other = MD5_USER.user,
        app = APP_USER.user
    );
    std::fs::write(&hba, text)
        .and_then(|()| pgmux_testkit::give_to_postgres(&hba))
        .map_err(|e| format!("writing {}: {e}", hba.display()))?;
    let setting = |k: &str, v: String| (k.to_owned(), v);
    Ok(PgOptions {
        max_connections: plan.max_connections,
        extra_conf: vec![
            setting("shared_buffers", plan.shared_buffers.clone()),
            setting("ssl", "on".to_owned()),
            setting("ssl_cert_file", pki.server_cert.display().to_string()),
            setting("ssl_key_file", pki.server_key.display().to_string()),
            setting("hba_file", hba.display().to_string()),
        ],
        trust_loopback: false,
    })
}

/// The harness panics when a server does not start; here that is an error for the network steps only.
fn start_server(options: &PgOptions) -> Result<PgServer, String> {
    std::panic::catch_unwind(AssertUnwindSafe(|| PgServer::start_with(options)))
        .map_err(|panic| format!("PostgreSQL for the network lab: {}", panic_text(&panic)))
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "panicked".to_owned())
}

/// pgmux and PgBouncer on the application host, both reaching the database by name with verify-full, and
/// each with a Unix socket of its own (a filesystem socket is seen from every network namespace).
fn poolers(plan: &Plan, tools: &Tools, host: &AppHost, direct: &Endpoint, dir: &Path) -> Result<Poolers, String> {
    let ca = direct.ca.clone().unwrap_or_default();
    let sockets = [dir.join("pgmux-socket"), dir.join("pgbouncer-socket")];
    for socket_dir in &sockets {
        std::fs::create_dir_all(socket_dir).map_err(|e| format!("cannot create {}: {e}", socket_dir.display()))?;
        pgmux_testkit::give_to_postgres(socket_dir).map_err(|e| format!("chown of {}: {e}", socket_dir.display()))?;
    }
    let [pgmux_socket, bouncer_socket] = sockets;
    let app = IpAddr::V4(host.app_addr);
    let pgmux = PgmuxSettings {
        binary: tools.pgmux.clone(),
        listen: SocketAddr::new(app, 0),
        database_url: format!(
            "postgres://{}:{}@{DB_HOST_NAME}:{}/{DATABASE}?sslmode=verify-full&sslrootcert={}",
            APP_USER.user,
            APP_USER.password,
            direct.port,
            ca.display()
        ),
        pool_max: Some(plan.pool_size),
        client_auth: "trust".to_owned(),
        log_level: "warn".to_owned(),
        max_client_conn: Some(plan.max_client_conn()),
        unix_socket_dir: Some(pgmux_socket),
        pool_grow_after: None,
        netns: Some(host.name().to_owned()),
    };
    let bouncer = PgBouncerSettings {
        binary: tools.pgbouncer.clone(),
        dir: dir.to_owned(),
        listen_addr: app,
        unix_socket_dir: Some(bouncer_socket),
        server_host: DB_HOST_NAME.to_owned(),
        server_port: direct.port,
        server_ca: Some(ca),
        database: DATABASE.to_owned(),
        user: APP_USER.user.to_owned(),
        password: APP_USER.password.to_owned(),
        pool_size: Some(plan.pool_size),
        max_client_conn: plan.max_client_conn(),
        netns: Some(host.name().to_owned()),
    };
    Ok(Poolers::new(pgmux, bouncer, Ports::Counter(20_000)))
}

/// The first line of an error, shortened for the report.
fn short(error: Option<&String>) -> String {
    let text = error.map_or("", String::as_str).lines().next().unwrap_or("");
    if text.chars().count() <= 100 {
        return text.to_owned();
    }
    let cut: String = text.chars().take(100).collect();
    format!("{cut}…")
}
