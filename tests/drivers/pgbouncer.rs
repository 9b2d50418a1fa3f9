//! PgBouncer in pgmux's place for `MATRIX_PGBOUNCER=1`: the reference column of the matrix. It is set up the
//! way the matrix sets up pgmux (transaction pooling, the same pool size, SCRAM for clients, the same waits)
//! so that a difference in the report is a difference between the poolers, not between their settings.
//!
//! Clients log in with SCRAM against the application role's own secret, copied from `pg_authid`; PgBouncer
//! then logs in to PostgreSQL with the client's proof (its SCRAM pass-through), as pgmux does with the
//! password it holds. It refuses to run as root, so as root it runs as `postgres` in a directory of its own.
//! It is spawned from a thread that lives until it stops: `PR_SET_PDEATHSIG` kills it with the test process.
//!
//! PgBouncer 1.18 can exit on a fatal error (a cancel race: pgbouncer/pgbouncer#801). Then every later
//! scenario would fail with "connection refused", hiding what PgBouncer does with them, so the keeper starts
//! it again on the same port, says so on stdout, and the report lists each exit. A scenario that connects in
//! the moment before it is back (the keeper looks every 100 ms) still sees "connection refused".

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use pgmux_testkit::{APP_USER, DATABASE, MD5_USER, PLAIN_USER};

/// How long PgBouncer may take to listen.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long it may take to exit after SIGTERM (in 1.18 an immediate shutdown) before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Restarts after it exits on its own; past this it stays down (a crash loop is not worth more).
const MAX_RESTARTS: usize = 20;
/// Keys of the `[pgbouncer]` section that say where things are rather than how it pools: left out of the
/// settings the report shows.
const PLUMBING: [&str; 6] = ["listen_addr", "listen_port", "unix_socket_dir", "auth_file", "logfile", "pidfile"];

/// A running PgBouncer.
#[derive(Debug)]
pub struct PgBouncer {
    /// Where it listens, on 127.0.0.1.
    pub port: u16,
    /// `PgBouncer 1.18.0`: the first line of `pgbouncer --version`.
    pub version: String,
    /// Its `[pgbouncer]` settings that bear on pooling, `key = value`, as the report shows them.
    pub settings: Vec<String>,
    log: PathBuf,
    stop: mpsc::Sender<()>,
    /// Returns how PgBouncer exited each time it exited on its own.
    keeper: JoinHandle<Vec<String>>,
    /// Its configuration and log; removed when this is dropped, after PgBouncer has stopped.
    dir: tempfile::TempDir,
}

impl PgBouncer {
    /// Starts PgBouncer in front of PostgreSQL on 127.0.0.1:`server_port` with a pool of `pool_size` for the
    /// application role, whose SCRAM secret is `secret`. `extra` is ini lines for `[pgbouncer]`, each
    /// replacing the runner's line for its key. Panics, quoting PgBouncer's log, if it does not listen.
    pub fn start(server_port: u16, pool_size: usize, secret: &str, extra: &str) -> PgBouncer {
        let binary = binary();
        let version = version(&binary);
        let dir = tempfile::Builder::new().prefix("pgmux-matrix-pgbouncer-").tempdir().expect("a temporary directory");
        pgmux_testkit::give_to_postgres(dir.path()).expect("chown the PgBouncer directory to postgres");
        let (port, log) = (pgmux_testkit::free_port(), dir.path().join("pgbouncer.log"));
        let paths = [
            ("listen_addr", "127.0.0.1".to_owned()),
            ("listen_port", port.to_string()),
            ("unix_socket_dir", dir.path().display().to_string()),
            ("auth_file", dir.path().join("userlist.txt").display().to_string()),
            ("logfile", log.display().to_string()),
        ];
        let section = pooler_section(&paths, pool_size, extra);
        // S17's two routes are two more names for the same database; its users log in with their plaintext
        // passwords (PgBouncer does SCRAM with clients, and cleartext or md5 with the server, from them).
        let mut databases = String::new();
        for name in [DATABASE, crate::ROUTE_A, crate::ROUTE_B] {
            databases.push_str(&format!("{name} = host=127.0.0.1 port={server_port} dbname={DATABASE}\n"));
        }
        let ini = format!("[databases]\n{databases}\n[pgbouncer]\n{}\n", section.join("\n"));
        let mut users = format!("\"{}\" \"{secret}\"\n", APP_USER.user);
        for role in [PLAIN_USER, MD5_USER] {
            users.push_str(&format!("\"{}\" \"{}\"\n", role.user, role.password));
        }
        std::fs::write(dir.path().join("userlist.txt"), users).expect("write PgBouncer's auth file");
        let ini_path = dir.path().join("pgbouncer.ini");
        std::fs::write(&ini_path, ini).expect("write pgbouncer.ini");

        let mut cmd = Command::new(&binary);
        cmd.arg("-q").arg(&ini_path).current_dir(dir.path()).stdin(Stdio::null()).stdout(Stdio::null());
        cmd.stderr(std::fs::File::create(dir.path().join("stderr")).expect("create PgBouncer's stderr file"));
        pgmux_testkit::run_as_postgres(&mut cmd);
        pgmux_testkit::die_with_parent(&mut cmd);
        let (stop, stop_rx) = mpsc::channel();
        let (spawned_tx, spawned_rx) = mpsc::channel();
        let keeper = thread::Builder::new()
            .name("pgbouncer".into())
            .spawn(move || keep(cmd, port, &spawned_tx, &stop_rx))
            .expect("spawn the thread that runs PgBouncer");
        if let Err(e) = spawned_rx.recv().expect("the PgBouncer thread reports its spawn") {
            panic!("cannot run {}: {e}", binary.display());
        }
        let settings = section.iter().filter(|line| !PLUMBING.contains(&key(line))).cloned().collect();
        let bouncer = PgBouncer { port, version, settings, log, stop, keeper, dir };
        if let Err(why) = wait_listening(port, || bouncer.keeper.is_finished()) {
            let stderr = std::fs::read_to_string(bouncer.dir.path().join("stderr")).unwrap_or_default();
            let log = std::fs::read_to_string(&bouncer.log).unwrap_or_default();
            let _ = bouncer.stop();
            panic!("PgBouncer did not start: {why}\n--- its log ---\n{log}\n--- its stderr ---\n{stderr}");
        }
        bouncer
    }

    /// The directory of its Unix socket (`.s.PGSQL.<port>`).
    pub fn socket_dir(&self) -> PathBuf {
        self.dir.path().to_owned()
    }

    /// Stops it and summarises its log: warnings, errors and the reasons it gave for closing connections,
    /// each with how often it came, then each time PgBouncer exited before it was asked to.
    pub fn stop(self) -> String {
        let _ = self.stop.send(());
        let exits = self.keeper.join().unwrap_or_else(|_| vec!["the thread that ran it panicked".to_owned()]);
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut summary = summarise_log(&log);
        for exit in exits {
            summary.push_str(&format!("PgBouncer exited before the runner stopped it: {exit}\n"));
        }
        summary
    }
}

/// The runner's `[pgbouncer]` lines, `paths` first, with each key `extra` sets replaced by its line there.
fn pooler_section(paths: &[(&str, String)], pool_size: usize, extra: &str) -> Vec<String> {
    let pooling = [
        ("auth_type", "scram-sha-256".to_owned()),
        ("pool_mode", "transaction".to_owned()),
        // pgmux's pool_max; no reserve pool and no warm pool, as pgmux has neither.
        ("default_pool_size", pool_size.to_string()),
        ("min_pool_size", "0".to_owned()),
        ("reserve_pool_size", "0".to_owned()),
        // pgmux's max_client_conn and query_wait_timeout in the matrix.
        ("max_client_conn", "1000".to_owned()),
        ("query_wait_timeout", "60".to_owned()),
        // The usual setting for drivers that send it (sqlx, older pgjdbc): without it they cannot log in.
        ("ignore_startup_parameters", "extra_float_digits".to_owned()),
        // The reasons it closes connections are the report's evidence; connections themselves are noise.
        ("log_connections", "0".to_owned()),
        ("log_disconnections", "1".to_owned()),
    ];
    let extra: Vec<&str> = extra.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with(';')).collect();
    let mut lines: Vec<String> = paths
        .iter()
        .map(|(k, v)| (*k, v.clone()))
        .chain(pooling)
        .filter(|(k, _)| !extra.iter().any(|l| key(l) == *k))
        .map(|(k, v)| format!("{k} = {v}"))
        .collect();
    lines.extend(extra.iter().map(|l| (*l).to_owned()));
    lines
}

/// The key of an ini line `key = value`.
fn key(line: &str) -> &str {
    line.split('=').next().unwrap_or_default().trim()
}

/// Waits until something accepts on 127.0.0.1:`port`, or `gone()`, or [`LISTEN_TIMEOUT`].
fn wait_listening(port: u16, gone: impl Fn() -> bool) -> Result<(), String> {
    let (addr, started) = (SocketAddr::from(([127, 0, 0, 1], port)), Instant::now());
    loop {
        if gone() {
            return Err("it exited".to_owned());
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if started.elapsed() > LISTEN_TIMEOUT {
            return Err(format!("not listening on {addr} after {} s", LISTEN_TIMEOUT.as_secs()));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Runs PgBouncer until `stop` says so, starting it again when it exits on its own; returns how it exited
/// each time it did. The first spawn's outcome goes to `spawned`.
fn keep(
    mut cmd: Command,
    port: u16,
    spawned: &mpsc::Sender<Result<(), String>>,
    stop: &mpsc::Receiver<()>,
) -> Vec<String> {
    let started = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(child) => {
            let _ = spawned.send(Ok(()));
            child
        }
        Err(e) => {
            let _ = spawned.send(Err(e.to_string()));
            return vec![format!("not started: {e}")];
        }
    };
    let mut exits = Vec::new();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let exit = format!("{status}, {:.0} s into the run", started.elapsed().as_secs_f64());
            if exits.len() >= MAX_RESTARTS {
                println!("PgBouncer exited ({exit}); not started again after {MAX_RESTARTS} restarts");
                exits.push(exit);
                return exits;
            }
            match cmd.spawn() {
                Ok(again) => {
                    child = again;
                    let listening =
                        wait_listening(port, || false).map_or_else(|e| format!(", {e}"), |()| String::new());
                    println!("PgBouncer exited ({exit}); started again on port {port}{listening}");
                    exits.push(format!("{exit}; started again"));
                }
                Err(e) => {
                    println!("PgBouncer exited ({exit}); cannot start it again: {e}");
                    exits.push(format!("{exit}; cannot start it again: {e}"));
                    return exits;
                }
            }
        }
        match stop.recv_timeout(Duration::from_millis(100)) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    // SIGTERM is an immediate shutdown in 1.18 (a graceful one from 1.23): every client has gone by now.
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return exits;
        }
        thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    exits
}

/// `PGMUX_PGBOUNCER`, else Debian's `/usr/sbin/pgbouncer` (not on a normal user's PATH), else `pgbouncer`.
fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("PGMUX_PGBOUNCER") {
        return PathBuf::from(path);
    }
    let debian = Path::new("/usr/sbin/pgbouncer");
    if debian.is_file() { debian.to_owned() } else { PathBuf::from("pgbouncer") }
}

fn version(binary: &Path) -> String {
    let out = Command::new(binary).arg("--version").output().unwrap_or_else(|e| {
        panic!(
            "MATRIX_PGBOUNCER=1 needs PgBouncer: cannot run {} ({e}); apt-get install pgbouncer, or set \
             PGMUX_PGBOUNCER to its path",
            binary.display()
        )
    });
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().next().unwrap_or("PgBouncer (version unknown)").trim().to_owned()
}

/// The log's warnings, errors and `closing because` lines without time, pid, connection pointer, client
/// address and age, most frequent first, one `<count>× <line>` per line.
fn summarise_log(log: &str) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for line in log.lines() {
        let wanted =
            [" WARNING ", " ERROR ", " FATAL "].iter().any(|w| line.contains(w)) || line.contains("closing because");
        if wanted {
            *counts.entry(normalise(line)).or_default() += 1;
        }
    }
    let mut lines: Vec<(String, usize)> = counts.into_iter().collect();
    lines.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    if lines.is_empty() {
        return "(nothing)\n".to_owned();
    }
    lines.iter().map(|(line, n)| format!("{n:>6}× {line}\n")).collect()
}

/// `2026-11-20 16:25:01.123 UTC [4242] WARNING C-0x55d1: pgmux/pgmux_app@127.0.0.1:51234 pooler error: x`
/// becomes `WARNING C: pgmux/pgmux_app pooler error: x`.
fn normalise(line: &str) -> String {
    let rest = line.split_once("] ").map_or(line, |(_, rest)| rest);
    let words: Vec<String> = rest
        .split(' ')
        .filter(|w| !(w.starts_with("(age=") && w.ends_with(')')))
        .map(|w| {
            let w = match w.split_once("-0x") {
                Some((kind, _)) if kind.len() == 1 && w.ends_with(':') => format!("{kind}:"),
                _ => w.to_owned(),
            };
            match w.split_once('@') {
                Some((who, addr)) if who.contains('/') && addr.contains(':') => who.to_owned(),
                _ => w,
            }
        })
        .collect();
    words.join(" ").trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_lines_replace_the_runner_s_value_of_their_key() {
        let paths = [("listen_port", "6432".to_owned())];
        let section = pooler_section(&paths, 2, "max_prepared_statements = 100\n pool_mode = session\n");
        assert!(section.contains(&"listen_port = 6432".to_owned()));
        assert!(section.contains(&"default_pool_size = 2".to_owned()));
        assert!(section.contains(&"pool_mode = session".to_owned()));
        assert!(!section.contains(&"pool_mode = transaction".to_owned()));
        assert!(section.contains(&"max_prepared_statements = 100".to_owned()));
    }

    #[test]
    fn log_lines_lose_time_pointers_addresses_and_ages() {
        let log = "\
2026-11-20 16:25:01.123 UTC [4242] WARNING C-0x55d1a2: pgmux/pgmux_app@127.0.0.1:51234 pooler error: unsupported startup parameter: search_path
2026-11-20 16:25:01.124 UTC [4242] LOG C-0x55d1a3: pgmux/pgmux_app@127.0.0.1:51236 closing because: client close request (age=0s)
2026-11-20 16:25:02.124 UTC [4242] LOG C-0x55d1a4: pgmux/pgmux_app@127.0.0.1:51238 closing because: client close request (age=12s)
2026-11-20 16:25:03.000 UTC [4242] LOG stats: 12 xacts/s, 12 queries/s
";
        assert_eq!(
            summarise_log(log),
            "     2× LOG C: pgmux/pgmux_app closing because: client close request\n     1× WARNING C: \
             pgmux/pgmux_app pooler error: unsupported startup parameter: search_path\n"
        );
    }
}
