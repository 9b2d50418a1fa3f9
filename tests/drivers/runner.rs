//! The driver compatibility matrix (tests/drivers/README.md): a throwaway PostgreSQL, pgmux in transaction
//! mode with `pool_max = 2` in front of it, and every driver suite run against pgmux in turn. Prints each
//! scenario line, the driver × scenario matrix and `N passed, N failed`; writes the matrix to
//! `target/driver-matrix.md`; fails unless every scenario passed.
//!
//! Settings, all optional: `MATRIX_ONLY=go,rust` (a subset of node, python, go, java, rust);
//! `MATRIX_PGMUX_EXTRA` (TOML appended to pgmux's settings); `MATRIX_EXPECT_FAILURES=1` (negative control:
//! report, do not assert); `MATRIX_REPORT` (where the Markdown goes, relative to the repository root);
//! `MATRIX_CLIENTS`, `MATRIX_TXNS`, `MATRIX_TIMEOUT_S` (passed to the suites; 50, 100, 120);
//! `MATRIX_DIRECT=1` (baseline: no pgmux, the suites talk to PostgreSQL itself, `PGPORT` = `DIRECT_PGPORT`;
//! the report goes to `target/driver-matrix-direct.md`); `MATRIX_PGBOUNCER=1` (reference: PgBouncer in
//! transaction mode in place of pgmux, with the pool size pgmux would get; reports without asserting, to
//! `target/driver-matrix-pgbouncer.md`; the binary is `PGMUX_PGBOUNCER` or `/usr/sbin/pgbouncer`;
//! `MATRIX_PGBOUNCER_EXTRA` is ini lines for its `[pgbouncer]` section, replacing the runner's value of each key
//! they set).

mod matrix;
mod pgbouncer;
mod suites;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pgmux_proxy::{Config, Listener, ListenerHandle};
use pgmux_testkit::{APP_USER, DATABASE, MD5_USER, PLAIN_USER, PgOptions, PgServer, SUPERUSER};

use matrix::Matrix;
use pgbouncer::PgBouncer;
use suites::{Run, Suite};

/// S17's two routes: database names of a second pgmux that has `[[databases]]` (and PgBouncer's), both the
/// server's `pgmux`; A logs in as the cleartext role, B as the md5 role, each the client's own user. Neither
/// is the application role, whose backends other scenarios count.
const ROUTE_A: &str = "matrix_a";
const ROUTE_B: &str = "matrix_b";

// Ignored so that `cargo test --workspace` (make unit) does not need Node, Python, Go and Java: `make drivers`
// builds every suite and runs this with `--ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by make drivers (needs every driver's dependencies)"]
async fn driver_matrix() {
    let started = Instant::now();
    let settings = Settings::from_env();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("PGMUX_TEST_LOG").unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
    let mut stage = Stage::start(&settings).await;
    let listening = match (&stage.proxy, &stage.bouncer) {
        (Some(proxy), _) => format!(" on {}", proxy.addr),
        (None, Some(bouncer)) => format!(" on 127.0.0.1:{}", bouncer.port),
        (None, None) => String::new(),
    };
    println!(
        "driver matrix: PostgreSQL {} on port {}, {}{listening}; suites: {}",
        stage.pg_version,
        stage.pg.port(),
        stage.front,
        settings.suites.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
    );
    let mut runs = Vec::new();
    for suite in &settings.suites {
        runs.push(stage.run(suite, &settings.root).await);
    }
    let setting = stage.describe();
    if let Some(proxy) = stage.proxy.take() {
        proxy.shutdown().await;
    }
    if let Some(proxy) = stage.routes.take() {
        proxy.shutdown().await;
    }
    let bouncer_log = match stage.bouncer.take() {
        Some(bouncer) => Some(tokio::task::spawn_blocking(move || bouncer.stop()).await.expect("stop PgBouncer")),
        None => None,
    };

    let matrix = Matrix { runs };
    let elapsed = started.elapsed();
    println!("\n---- every scenario line ----");
    for line in matrix.all_lines() {
        println!("{line}");
    }
    println!("\n{}\n{}", matrix.table(), matrix.suites());
    let mut markdown = matrix.markdown(&setting, elapsed);
    if let Some(log) = &bouncer_log {
        println!("PgBouncer's log, warnings and disconnect reasons:\n{log}");
        markdown.push_str(&format!(
            "\n## PgBouncer's log\n\nWarnings, errors and the reasons it gave for closing connections, with how \
             often each came (addresses, pointers and ages left out):\n\n```\n{log}```\n"
        ));
    }
    let report = &settings.report;
    if let Some(dir) = report.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    std::fs::write(report, markdown).unwrap_or_else(|e| panic!("cannot write {}: {e}", report.display()));
    println!("matrix written to {} ({:.0} s)", report.display(), elapsed.as_secs_f64());
    println!("{} passed, {} failed", matrix.passed(), matrix.failed());
    if settings.expect_failures {
        println!("MATRIX_EXPECT_FAILURES=1: negative control, failures are reported and not asserted");
    } else if settings.front == FrontKind::PgBouncer {
        println!("MATRIX_PGBOUNCER=1: reference run, failures are reported and not asserted");
    } else {
        // The failed lines go in the message too: a CI log often keeps only the end of the output.
        assert_eq!(
            matrix.failed(),
            0,
            "{} failure(s); see {}:\n{}",
            matrix.failed(),
            report.display(),
            matrix.failures().join("\n")
        );
    }
}

/// What the suites talk to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FrontKind {
    Pgmux,
    /// No pooler (`MATRIX_DIRECT=1`).
    Direct,
    /// PgBouncer in place of pgmux (`MATRIX_PGBOUNCER=1`).
    PgBouncer,
}

/// What the environment asks of this run.
struct Settings {
    /// The repository root, the suites' working directory.
    root: PathBuf,
    suites: Vec<Suite>,
    /// TOML appended to pgmux's settings (`MATRIX_PGMUX_EXTRA`).
    extra: String,
    front: FrontKind,
    /// Ini lines for PgBouncer's `[pgbouncer]` section (`MATRIX_PGBOUNCER_EXTRA`).
    bouncer_extra: String,
    /// Report without asserting (`MATRIX_EXPECT_FAILURES=1`).
    expect_failures: bool,
    /// Where the Markdown goes.
    report: PathBuf,
}

impl Settings {
    fn from_env() -> Settings {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf();
        let bin_dir = bin_dir();
        let suites = chosen_suites(&root, &bin_dir);
        let flag = |name: &str| std::env::var(name).is_ok_and(|v| v == "1");
        let front = match (flag("MATRIX_DIRECT"), flag("MATRIX_PGBOUNCER")) {
            (false, false) => FrontKind::Pgmux,
            (true, false) => FrontKind::Direct,
            (false, true) => FrontKind::PgBouncer,
            (true, true) => panic!("MATRIX_DIRECT=1 and MATRIX_PGBOUNCER=1 exclude each other: set one"),
        };
        let report = match std::env::var("MATRIX_REPORT") {
            Ok(path) if !path.is_empty() => root.join(path),
            _ => {
                let name = match front {
                    FrontKind::Pgmux => "driver-matrix.md",
                    FrontKind::Direct => "driver-matrix-direct.md",
                    FrontKind::PgBouncer => "driver-matrix-pgbouncer.md",
                };
                bin_dir.parent().unwrap_or(&bin_dir).join(name)
            }
        };
        Settings {
            root,
            suites,
            extra: std::env::var("MATRIX_PGMUX_EXTRA").unwrap_or_default(),
            front,
            bouncer_extra: std::env::var("MATRIX_PGBOUNCER_EXTRA").unwrap_or_default(),
            expect_failures: flag("MATRIX_EXPECT_FAILURES"),
            report,
        }
    }
}

/// PostgreSQL with the fixtures, pgmux or PgBouncer in front of it (unless direct), and the suites'
/// environment.
struct Stage {
    pg: Arc<PgServer>,
    proxy: Option<ListenerHandle>,
    /// The pgmux with two routes that S17 uses (when the suites talk to pgmux).
    routes: Option<ListenerHandle>,
    bouncer: Option<PgBouncer>,
    pg_version: String,
    /// What the suites talk to, in words.
    front: String,
    contract: BTreeMap<String, String>,
    timeout: Duration,
    /// pgmux's Unix-socket directory (S16), removed after the run.
    _sockets: tempfile::TempDir,
    /// Each pgmux's runtime thread runs until its sender here is dropped (see `start_pgmux`).
    _runtimes: Vec<tokio::sync::oneshot::Sender<()>>,
}

/// Starts pgmux as its binary runs by default (`workers = 1`): on a thread of its own, on a current-thread
/// runtime, where the relay loop skips a client read that could only find nothing (`net::armed` in pgmux-proxy;
/// the integration tests run pgmux on two workers, where every read is polled). The thread runs until the
/// sender pushed on `runtimes` is dropped.
async fn start_pgmux(config: Config, runtimes: &mut Vec<tokio::sync::oneshot::Sender<()>>) -> ListenerHandle {
    let (started, handle) = tokio::sync::oneshot::channel();
    let (quit, until) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("pgmux".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            runtime.block_on(async move {
                let _ = started.send(Listener::start(config).await.expect("start pgmux"));
                let _ = until.await;
            });
        })
        .expect("a thread for pgmux");
    runtimes.push(quit);
    handle.await.expect("pgmux started on its thread")
}

impl Stage {
    async fn start(settings: &Settings) -> Stage {
        let opts = PgOptions { max_connections: 100, ..Default::default() };
        let pg =
            Arc::new(tokio::task::spawn_blocking(move || PgServer::start_with(&opts)).await.expect("start PostgreSQL"));
        apply_fixtures(&pg, &settings.root).await;
        // PgBouncer gets the pool pgmux would get (MATRIX_PGMUX_EXTRA may change pool_max).
        let sockets = tempfile::tempdir().expect("a directory for pgmux's Unix socket");
        let config = pgmux_config(&pg, &settings.extra, sockets.path());
        let pool_max = config.pool_max.expect("the matrix always sets pool_max");
        let pg_version = psql(&pg, "SHOW server_version").await.expect("SHOW server_version");
        let mut runtimes = Vec::new();
        let (proxy, bouncer, front) = match settings.front {
            FrontKind::Direct => {
                (None, None, "no pgmux (MATRIX_DIRECT=1: the suites talk to PostgreSQL itself)".to_owned())
            }
            FrontKind::Pgmux => {
                let proxy = start_pgmux(config, &mut runtimes).await;
                let front = match settings.extra.trim() {
                    "" => format!("pgmux in transaction mode, pool_max = {pool_max}"),
                    extra => format!("pgmux in transaction mode, pool_max = {pool_max}, extra settings `{extra}`"),
                };
                (Some(proxy), None, front)
            }
            FrontKind::PgBouncer => {
                let secret =
                    psql(&pg, &format!("SELECT rolpassword FROM pg_authid WHERE rolname = '{}'", APP_USER.user))
                        .await
                        .expect("read the application role's SCRAM secret");
                let (port, extra) = (pg.port(), settings.bouncer_extra.clone());
                let bouncer = tokio::task::spawn_blocking(move || PgBouncer::start(port, pool_max, &secret, &extra))
                    .await
                    .expect("start PgBouncer");
                let front = format!(
                    "no pgmux: {} (MATRIX_PGBOUNCER=1) in its place, settings `{}`",
                    bouncer.version,
                    bouncer.settings.join("`, `")
                );
                (None, Some(bouncer), front)
            }
        };
        let (port, socket_dir) = match (&proxy, &bouncer) {
            (Some(proxy), _) => (proxy.addr.port(), sockets.path().to_owned()),
            (None, Some(bouncer)) => (bouncer.port, bouncer.socket_dir()),
            // PostgreSQL's own socket, beside its data directory.
            (None, None) => (pg.port(), pg.data_dir().parent().expect("the server's directory").to_owned()),
        };
        let mut contract = contract_env(&pg, port, &socket_dir, pool_max);
        // S17: a pgmux of its own with two routes, beside the one every other scenario uses; PgBouncer has
        // the same names in its [databases]; PostgreSQL itself has only `pgmux`, under two users.
        let routes = match settings.front {
            FrontKind::Pgmux => Some(start_pgmux(routes_config(&pg, &settings.extra), &mut runtimes).await),
            FrontKind::Direct | FrontKind::PgBouncer => None,
        };
        let (routes_port, route_a, route_b) = match (&routes, settings.front) {
            (Some(r), _) => (r.addr.port(), ROUTE_A, ROUTE_B),
            (None, FrontKind::PgBouncer) => (port, ROUTE_A, ROUTE_B),
            (None, _) => (port, DATABASE, DATABASE),
        };
        contract.extend([
            ("MATRIX_ROUTES_PGPORT".to_owned(), routes_port.to_string()),
            ("MATRIX_ROUTE_A".to_owned(), route_a.to_owned()),
            ("MATRIX_ROUTE_A_USER".to_owned(), PLAIN_USER.user.to_owned()),
            ("MATRIX_ROUTE_A_PASSWORD".to_owned(), PLAIN_USER.password.to_owned()),
            ("MATRIX_ROUTE_B".to_owned(), route_b.to_owned()),
            ("MATRIX_ROUTE_B_USER".to_owned(), MD5_USER.user.to_owned()),
            ("MATRIX_ROUTE_B_PASSWORD".to_owned(), MD5_USER.password.to_owned()),
        ]);
        let timeout = Duration::from_secs(contract["MATRIX_TIMEOUT_S"].parse().unwrap_or(120));
        Stage {
            pg,
            proxy,
            routes,
            bouncer,
            pg_version,
            front,
            contract,
            timeout,
            _sockets: sockets,
            _runtimes: runtimes,
        }
    }

    /// Runs one suite, or says why it cannot run; then checks that it left no transaction open.
    async fn run(&self, suite: &Suite, root: &Path) -> Run {
        let run = match suite.not_ready(root) {
            Some(why) => Run::not_run(suite.name, why),
            None => {
                println!("[{}] {}", suite.name, suite.command.join(" "));
                let mut run = suites::run(suite, root, &self.contract, self.timeout).await;
                if let Err(why) = no_idle_in_transaction(&self.pg).await {
                    run.problems.push(why);
                }
                run
            }
        };
        for problem in &run.problems {
            println!("[{}] {} suite FAIL {problem}", run.suite, run.suite);
        }
        run
    }

    /// The report's first paragraph.
    fn describe(&self) -> String {
        format!(
            "PostgreSQL {}, {}; MATRIX_CLIENTS={}, MATRIX_TXNS={}, MATRIX_TIMEOUT_S={}. Written on {} by \
             `{}`.",
            self.pg_version,
            self.front,
            self.contract["MATRIX_CLIENTS"],
            self.contract["MATRIX_TXNS"],
            self.contract["MATRIX_TIMEOUT_S"],
            pgmux_testkit::utc_now(),
            command_line(),
        )
    }
}

/// This run as a command: the `MATRIX_*` variables that are set, then cargo's command.
fn command_line() -> String {
    let mut vars: Vec<(String, String)> = std::env::vars().filter(|(k, _)| k.starts_with("MATRIX_")).collect();
    vars.sort();
    let mut out = String::new();
    for (key, value) in vars {
        let plain = !value.is_empty() && value.chars().all(|c| c.is_ascii_alphanumeric() || "-_./,:".contains(c));
        if plain {
            out.push_str(&format!("{key}={value} "));
        } else {
            out.push_str(&format!("{key}='{}' ", value.replace('\'', r"'\''")));
        }
    }
    out + "cargo test -p pgmux-testkit --test drivers -- --ignored"
}

/// `target/<profile>`: the test executable is `target/<profile>/deps/drivers-<hash>`.
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// The suites to run: all, or those `MATRIX_ONLY` names.
fn chosen_suites(root: &Path, bin_dir: &Path) -> Vec<Suite> {
    let all = suites::all(root, bin_dir);
    let only = std::env::var("MATRIX_ONLY").unwrap_or_default();
    if only.trim().is_empty() {
        return all;
    }
    let names: Vec<&str> = only.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
    for name in &names {
        assert!(
            all.iter().any(|s| s.name == *name),
            "MATRIX_ONLY names {name:?}; the suites are {}",
            all.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
        );
    }
    all.into_iter().filter(|s| names.contains(&s.name)).collect()
}

/// pgmux's settings for the matrix, with `extra` (MATRIX_PGMUX_EXTRA) appended; its Unix socket in `sockets`.
fn pgmux_config(pg: &PgServer, extra: &str, sockets: &Path) -> Config {
    let mut text = format!(
        "listen = \"127.0.0.1:0\"\ndatabase_url = {:?}\nunix_socket_dir = {:?}\n{extra}\n",
        pg.url(&APP_USER),
        sockets.display().to_string()
    );
    let defaults = [
        ("pool_max", "pool_max = 2"),
        ("client_auth", "client_auth = \"scram-sha-256\""),
        ("max_client_conn", "max_client_conn = 1000"),
        ("query_wait_timeout", "query_wait_timeout = \"60s\""),
        // A fixed pool of pool_max connections, no control connection: the suites count the backends.
        ("max_connections_percent", "max_connections_percent = 0"),
    ];
    for (key, line) in defaults {
        if !extra.lines().any(|l| l.trim_start().starts_with(key)) {
            text.push_str(line);
            text.push('\n');
        }
    }
    Config::from_toml_str(&text)
        .unwrap_or_else(|e| panic!("pgmux rejects the matrix settings (MATRIX_PGMUX_EXTRA = {extra:?}): {e}"))
}

/// S17's pgmux: the matrix's settings, and two routes to the same database that log in as the client's own
/// user, so that the two connections of one driver land in two pools of two users.
fn routes_config(pg: &PgServer, extra: &str) -> Config {
    let routes = format!(
        "[[databases]]\nname = \"{ROUTE_A}\"\ndbname = \"{DATABASE}\"\n\
         [[databases]]\nname = \"{ROUTE_B}\"\ndbname = \"{DATABASE}\"\n\
         [[users]]\nname = \"{}\"\npassword = \"{}\"\n\
         [[users]]\nname = \"{}\"\npassword = \"{}\"\n",
        PLAIN_USER.user, PLAIN_USER.password, MD5_USER.user, MD5_USER.password
    );
    let mut text = format!("listen = \"127.0.0.1:0\"\ndatabase_url = {:?}\n", pg.url(&APP_USER));
    for (key, line) in [
        ("pool_max", "pool_max = 2"),
        ("client_auth", "client_auth = \"scram-sha-256\""),
        ("max_connections_percent", "max_connections_percent = 0"),
    ] {
        if !extra.lines().any(|l| l.trim_start().starts_with(key)) {
            text.push_str(line);
            text.push('\n');
        }
    }
    text.push_str(&format!("{extra}\n{routes}"));
    Config::from_toml_str(&text)
        .unwrap_or_else(|e| panic!("pgmux rejects S17's settings (MATRIX_PGMUX_EXTRA = {extra:?}): {e}"))
}

/// Applies `tests/drivers/setup.sql` as the superuser.
async fn apply_fixtures(pg: &Arc<PgServer>, root: &Path) {
    let path = root.join("tests/drivers/setup.sql");
    let sql = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    psql(pg, &sql).await.unwrap_or_else(|e| panic!("tests/drivers/setup.sql failed: {e}"));
}

/// psql as the superuser, off the runtime's threads.
async fn psql(pg: &Arc<PgServer>, sql: &str) -> Result<String, String> {
    let (pg, sql) = (Arc::clone(pg), sql.to_owned());
    tokio::task::spawn_blocking(move || pg.try_psql(&sql)).await.map_err(|e| e.to_string())?
}

/// The contract's environment for every suite.
fn contract_env(pg: &PgServer, port: u16, socket_dir: &Path, pool_max: usize) -> BTreeMap<String, String> {
    let knob = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
    BTreeMap::from([
        ("PGHOST".into(), "127.0.0.1".into()),
        ("PGPORT".into(), port.to_string()),
        ("MATRIX_SOCKET_DIR".into(), socket_dir.display().to_string()),
        ("PGUSER".into(), APP_USER.user.into()),
        ("PGPASSWORD".into(), APP_USER.password.into()),
        ("PGDATABASE".into(), DATABASE.into()),
        ("DIRECT_PGPORT".into(), pg.port().to_string()),
        ("DIRECT_PGUSER".into(), SUPERUSER.user.into()),
        ("DIRECT_PGPASSWORD".into(), SUPERUSER.password.into()),
        ("MATRIX_CLIENTS".into(), knob("MATRIX_CLIENTS", "50")),
        ("MATRIX_TXNS".into(), knob("MATRIX_TXNS", "100")),
        ("MATRIX_TIMEOUT_S".into(), knob("MATRIX_TIMEOUT_S", "120")),
        ("MATRIX_POOL_MAX".into(), pool_max.to_string()),
    ])
}

/// The contract says a suite leaves no backend idle in a transaction; pgmux's servers are looked at
/// directly, a few times over two seconds (a transaction may still be closing).
async fn no_idle_in_transaction(pg: &Arc<PgServer>) -> Result<(), String> {
    let sql = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE usename = '{}' AND state LIKE 'idle in transaction%'",
        APP_USER.user
    );
    let mut last = String::new();
    for _ in 0..10 {
        last = psql(pg, &sql).await?;
        if last == "0" {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!("left {last} backend(s) idle in transaction"))
}
