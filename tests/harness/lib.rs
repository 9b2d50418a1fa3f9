//! Throwaway PostgreSQL clusters for tests: one real server per test, started in well under a second.
//!
//! A template cluster is built once per process (initdb, roles, the `pgmux` database, `pg_hba.conf`); every
//! [`PgServer`] is a copy of it in its own temporary directory, on its own free port, started with `postgres`
//! directly. Servers die with the test process even if it is killed (`PR_SET_PDEATHSIG`), and their
//! directories are removed on drop (and, after a crash, by the next process that builds a template). The
//! directories go to `PGMUX_TEST_TMPDIR` if set, else `/dev/shm` if it has 2 GiB free, else the system
//! temporary directory.
//!
//! ```no_run
//! use pgmux_testkit::{APP_USER, PgServer};
//!
//! let pg = PgServer::start();
//! assert_eq!(pg.psql("select 1"), "1");
//! let _url = pg.url(&APP_USER); // postgres://pgmux_app:…@127.0.0.1:<port>/pgmux
//! ```
//!
//! The binaries come from `PGMUX_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin`, else
//! `pg_config --bindir`; when none is found every test panics saying what to install. When the tests run as
//! root, PostgreSQL runs as the `postgres` system user, since it refuses to run as root.

pub mod aurora;
mod bins;
#[cfg(feature = "fixture")]
pub mod fixture;
pub mod netns;
mod postmaster;
pub mod process;
pub mod procfs;
mod psql;
mod server;
mod sys;
mod template;
pub mod toxiproxy;
pub mod wire;

#[cfg(test)]
mod tests;

pub use bins::pg_bin_dir;
pub use server::PgServer;
pub use sys::{die_with_parent, give_to_postgres, raise_open_file_limit, run_as_postgres, send_signal};

/// The test database, owned by [`APP_USER`]; every role may connect to it and create objects in `public`.
pub const DATABASE: &str = "pgmux";

/// A login role of the template cluster. The passwords are fixed test fixtures, not secrets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Role {
    pub user: &'static str,
    pub password: &'static str,
}

/// The bootstrap superuser. Logs in with scram-sha-256.
pub const SUPERUSER: Role = Role { user: "postgres", password: "postgres-pw-0" };

/// The application role pgmux connects as: SCRAM-SHA-256 password, scram-sha-256 in `pg_hba.conf`, owner of
/// [`DATABASE`], member of `pg_monitor` (so it sees every row of `pg_stat_activity`).
pub const APP_USER: Role = Role { user: "pgmux_app", password: "app-pw-1" };

/// A role whose password is stored as an MD5 hash and whose `pg_hba.conf` method is `md5`.
pub const MD5_USER: Role = Role { user: "pgmux_md5", password: "md5-pw-2" };

/// A role whose `pg_hba.conf` method is `password` (cleartext over the wire).
pub const PLAIN_USER: Role = Role { user: "pgmux_plain", password: "plain-pw-3" };

/// Server settings that differ between tests.
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// `max_connections`; 100 by default.
    pub max_connections: u32,
    /// Further settings, passed to `postgres` as `-c key=value` after the harness's own.
    pub extra_conf: Vec<(String, String)>,
    /// Let every role log in over 127.0.0.1 without a password (`host all all 127.0.0.1/32 trust` ahead of
    /// the template's lines); false by default. The benchmark uses it so that pgbench, PgBouncer and pgmux
    /// all pay the same (nil) authentication cost; passwords are still accepted and ignored.
    pub trust_loopback: bool,
}

impl Default for PgOptions {
    fn default() -> PgOptions {
        PgOptions { max_connections: 100, extra_conf: Vec::new(), trust_loopback: false }
    }
}

/// A port on 127.0.0.1 that was free a moment ago: bind port 0, read the port, close.
///
/// Another process may take it before the caller binds it; [`PgServer::start_with`] retries with a new port
/// when that happens.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap_or_else(|e| panic!("pgmux-testkit: cannot bind 127.0.0.1:0 to find a free port: {e}"));
    listener
        .local_addr()
        .unwrap_or_else(|e| panic!("pgmux-testkit: cannot read the address of a bound socket: {e}"))
        .port()
}

/// Now, as `YYYY-MM-DD HH:MM UTC`, for reports.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    utc_timestamp(secs)
}

/// Seconds since the epoch as `YYYY-MM-DD HH:MM UTC` (the civil-from-days algorithm of H. Hinnant).
pub fn utc_timestamp(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let (hour, minute) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02} UTC")
}

/// Whether this process runs as root (effective uid 0), in which case PostgreSQL runs as `postgres`.
pub fn as_root() -> bool {
    sys::effective_uid() == 0
}
