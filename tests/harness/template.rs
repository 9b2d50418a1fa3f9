//! The template cluster, built once per process so that each test pays for a directory copy and a server
//! start, not for initdb; and the naming of the harness's temporary directories, so that a later process can
//! clean up after one that was killed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use tempfile::TempDir;

use crate::{APP_USER, DATABASE, MD5_USER, PLAIN_USER, PgOptions, SUPERUSER, bins, sys};
use crate::{postmaster, psql};

/// Every directory the harness creates is `<tmp>/pgmux-testkit-<pid>-<kind>-<random>`.
const DIR_PREFIX: &str = "pgmux-testkit-";

/// Written over initdb's: the md5 and cleartext roles first, since the first matching line wins; `all` does not
/// cover replication connections, so the superuser's streaming standbys (`crate::aurora`) have a line of their own.
pub(crate) const PG_HBA: &str = "\
# pgmux-testkit: each test role logs in with the method its name says.
host    all     pgmux_md5       127.0.0.1/32    md5
host    all     pgmux_plain     127.0.0.1/32    password
host    all     all             127.0.0.1/32    scram-sha-256
host    all     all             ::1/128         scram-sha-256
local   all     all                             scram-sha-256
host    replication     postgres        127.0.0.1/32    scram-sha-256
";

/// The template's data directory (a copy source; no server runs on it after it is built).
static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();

/// The template's data directory, building it on first use. Panics with initdb's or the server's output if
/// that fails (and the next caller tries again).
pub(crate) fn template() -> &'static Path {
    TEMPLATE.get_or_init(build)
}

/// A fresh private directory that PostgreSQL (possibly running as `postgres`) may write to.
pub(crate) fn new_dir(kind: &str) -> TempDir {
    let dir = tempfile::Builder::new()
        .prefix(&format!("{DIR_PREFIX}{}-{kind}-", std::process::id()))
        .tempdir_in(base_dir())
        .unwrap_or_else(|e| {
            panic!("pgmux-testkit: cannot create a temporary directory in {}: {e}", base_dir().display())
        });
    sys::give_to_postgres(dir.path())
        .unwrap_or_else(|e| panic!("pgmux-testkit: cannot chown {} to postgres: {e}", dir.path().display()));
    dir
}

/// Where the clusters live: `PGMUX_TEST_TMPDIR` if set, else `/dev/shm` when it has room (a cluster is about
/// 40 MB, mostly 1,000 small files: creating them on tmpfs makes a server start in about 0.1 s instead of
/// 0.4 s on a disk), else the system temporary directory.
fn base_dir() -> &'static Path {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        if let Some(dir) = std::env::var_os("PGMUX_TEST_TMPDIR") {
            return PathBuf::from(dir);
        }
        let shm = Path::new("/dev/shm");
        let roomy = sys::available_bytes(shm).is_some_and(|bytes| bytes >= SHM_MIN_FREE);
        if roomy && tempfile::tempdir_in(shm).is_ok() { shm.to_owned() } else { std::env::temp_dir() }
    })
}

/// Free space `/dev/shm` needs before the harness uses it (Docker's default of 64 MB does not qualify).
const SHM_MIN_FREE: u64 = 2 << 30;

fn build() -> PathBuf {
    let bin = bins::bin_dir();
    remove_orphans();
    let dir = new_dir("template");
    let data = dir.path().join("data");

    let pwfile = dir.path().join("pwfile");
    fs::write(&pwfile, SUPERUSER.password).unwrap_or_else(|e| panic!("pgmux-testkit: writing the pwfile: {e}"));
    sys::give_to_postgres(&pwfile).unwrap_or_else(|e| panic!("pgmux-testkit: chown of the pwfile: {e}"));
    let initdb = sys::pg_command(&bin.join("initdb"), dir.path())
        .arg("-D")
        .arg(&data)
        .args(["-N", "-U", SUPERUSER.user, "--auth=scram-sha-256"])
        .arg(format!("--pwfile={}", pwfile.display()))
        .args(["-E", "UTF8", "--locale=C"])
        .output();
    check("initdb", initdb);
    let _ = fs::remove_file(&pwfile);
    fs::write(data.join("pg_hba.conf"), PG_HBA).unwrap_or_else(|e| panic!("pgmux-testkit: writing pg_hba.conf: {e}"));

    let (postmaster, port) = postmaster::launch(dir.path(), &data, None, &PgOptions::default())
        .unwrap_or_else(|message| panic!("pgmux-testkit: the template cluster did not start: {message}"));
    let roles = format!(
        "SET password_encryption = 'scram-sha-256';
         CREATE ROLE {app} LOGIN PASSWORD '{app_pw}';
         CREATE ROLE {plain} LOGIN PASSWORD '{plain_pw}';
         SET password_encryption = 'md5';
         CREATE ROLE {md5} LOGIN PASSWORD '{md5_pw}';
         RESET password_encryption;
         CREATE DATABASE {DATABASE} OWNER {app};
         GRANT ALL ON DATABASE {DATABASE} TO {md5}, {plain};
         GRANT pg_monitor TO {app};",
        app = APP_USER.user,
        app_pw = APP_USER.password,
        plain = PLAIN_USER.user,
        plain_pw = PLAIN_USER.password,
        md5 = MD5_USER.user,
        md5_pw = MD5_USER.password,
    );
    setup_sql(port, "postgres", &roles);
    let schema = format!("GRANT ALL ON SCHEMA public TO {md5}, {plain};", md5 = MD5_USER.user, plain = PLAIN_USER.user);
    setup_sql(port, DATABASE, &schema);

    let stop = sys::pg_command(&bin.join("pg_ctl"), dir.path())
        .arg("stop")
        .arg("-D")
        .arg(&data)
        .args(["-m", "fast", "-w"])
        .output();
    check("pg_ctl stop", stop);
    postmaster.wait_exit(std::time::Duration::from_secs(10));
    drop(postmaster);

    // Kept past the TempDir (statics are never dropped); removed at exit, or by a later process's sweep.
    let kept = dir.keep();
    TEMPLATE_DIR.get_or_init(|| kept.clone());
    // SAFETY: registering a plain extern "C" function with no captured state.
    #[allow(unsafe_code)]
    unsafe {
        libc::atexit(remove_template_at_exit);
    }
    data
}

static TEMPLATE_DIR: OnceLock<PathBuf> = OnceLock::new();

extern "C" fn remove_template_at_exit() {
    if let Some(dir) = TEMPLATE_DIR.get() {
        let _ = fs::remove_dir_all(dir);
    }
}

fn setup_sql(port: u16, database: &str, sql: &str) {
    if let Err(e) = psql::psql_as(port, &SUPERUSER, database, sql) {
        panic!("pgmux-testkit: setting up the template cluster failed: {e}");
    }
}

fn check(what: &str, output: std::io::Result<Output>) {
    match output {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "pgmux-testkit: {what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!("pgmux-testkit: cannot run {what}: {e}"),
    }
}

/// Remove directories left by harness processes that no longer exist (killed before their Drop or atexit ran).
/// Their servers are already gone: they got SIGKILL when their parent died.
fn remove_orphans() {
    let Ok(entries) = fs::read_dir(base_dir()) else {
        return;
    };
    let me = std::process::id();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix(DIR_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != me && !sys::pid_alive(pid) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}
