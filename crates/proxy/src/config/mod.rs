//! pgmux's configuration: one struct, read from a TOML file and then from `PGMUX_<KEY>` environment
//! variables, checked once at start-up.
//!
//! Every key is declared once, in the table below; the struct, the defaults, the `--help` listing and the
//! parser all come from that table, so they cannot drift apart. A bad value stops start-up with an error
//! that names the key and where it came from.

pub(crate) mod aurora;
pub mod auth_file;
pub mod credentials;
mod duration;
mod error;
pub mod hba;
pub mod learned;
mod live;
mod load;
pub mod pgbouncer_ini;
mod profile;
pub use profile::Profile;
mod role;
pub mod routes;
mod secret;
pub mod source;
mod url;
pub mod user_timeouts;
mod validate;
mod value;

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use error::{ConfigError, Reason, Source, UnknownName, UrlError, ValueError};
pub use live::LiveConfig;
pub use pgbouncer_ini::{IniConfig, IniError, IniErrorKind, Unsupported};
pub use routes::{PoolMode, ReaderFallback, RouteSpec, ServerAuth, UserSpec};
pub use value::{
    ClientAuth, DatabaseUrl, LogFormat, LoginInfo, NodeRole, Secret, SslMode, TargetSessionAttrs, UserList,
};
use value::{ConfigValue, Raw};

/// One configuration key, for `--help` and documentation.
#[derive(Clone, Copy, Debug)]
pub struct KeyInfo {
    /// Key name in the TOML file; the environment variable is `PGMUX_` + its upper case.
    pub name: &'static str,
    /// The default, as a user would write it.
    pub default: &'static str,
    /// What the key does.
    pub help: &'static str,
}

impl KeyInfo {
    /// The environment variable that overrides this key.
    pub fn env_var(&self) -> String {
        format!("PGMUX_{}", self.name.to_ascii_uppercase())
    }
}

macro_rules! config_keys {
    ($( $(#[doc = $help:literal])+ $name:ident : $ty:ty = $default:literal ; )*) => {
        /// The whole configuration. Build it with [`Config::load`] or [`Config::from_toml_str`].
        #[derive(Clone, Debug)]
        pub struct Config {
            $( $(#[doc = $help])+ pub $name: $ty, )*
            /// How pgmux runs (not a key: chosen by the binary).
            pub profile: Profile,
            /// The databases clients may name (`[[databases]]`, `PGMUX_DATABASES`); empty: the one database
            /// of `database_url` (or of the secret).
            pub databases: Vec<routes::RouteSpec>,
            /// What is particular to some users (`[[users]]`, `PGMUX_USERS`).
            pub users: Vec<routes::UserSpec>,
        }

        /// Every key, in the order `--help` shows them.
        pub const KEYS: &[KeyInfo] = &[
            $( KeyInfo { name: stringify!($name), default: $default, help: concat!($($help),+).trim_ascii() }, )*
        ];

        impl Config {
            /// Applies one raw value; `Ok(false)` if the key is unknown.
            fn set(&mut self, key: &str, raw: &Raw) -> Result<bool, ValueError> {
                match key {
                    $( stringify!($name) => self.$name = <$ty as ConfigValue>::parse(raw)?, )*
                    _ => return Ok(false),
                }
                Ok(true)
            }

            /// Each key with its effective value, secrets redacted.
            pub fn entries(&self) -> Vec<(&'static str, String)> {
                vec![ $( (stringify!($name), ConfigValue::show(&self.$name)), )* ]
            }

            /// The built-in defaults. `database_url` has none and must be set.
            fn defaults() -> Self {
                Config {
                    $( $name: <$ty as ConfigValue>::parse(&Raw::Default($default))
                        .unwrap_or_else(|e| unreachable!("default of {} is invalid: {e}", stringify!($name))), )*
                    profile: Profile::Sidecar,
                    databases: Vec::new(),
                    users: Vec::new(),
                }
            }
        }
    };
}

config_keys! {
    /// Address and port to accept clients on.
    listen: SocketAddr = "127.0.0.1:6432";
    /// A directory to accept clients in through a Unix-domain socket too, named `.s.PGSQL.<port>` after
    /// listen's port as libpq expects (`psql -h DIR`); same authentication as TCP. Unset: TCP only.
    unix_socket_dir: Option<PathBuf> = "";
    /// The database to pool, as `postgres://user:password@host:port/dbname[?sslmode=...]`. Required unless
    /// secret_arn names a secret to read it from.
    database_url: DatabaseUrl = "";
    /// A Secrets Manager secret in the RDS format (host, port, username, password, dbname) to log in with
    /// instead of database_url's; re-read once when a login fails, for rotation.
    secret_arn: String = "";
    /// Overrides the database host of database_url or of the secret.
    database_host: String = "";
    /// Overrides the database port of database_url or of the secret.
    database_port: Option<u16> = "";
    /// Log in with RDS IAM auth tokens made from the AWS credentials in the environment instead of a password.
    iam_auth: bool = "false";
    /// TLS to the database: disable, prefer, require, verify-ca or verify-full. Overrides database_url's
    /// ?sslmode=; the default is prefer, and verify-full in Lambda mode.
    sslmode: Option<SslMode> = "";
    /// A PEM file of CAs to trust for the database, besides the RDS CA bundle built in.
    ssl_root_cert: Option<PathBuf> = "";
    /// The password md5 and scram-sha-256 clients log in with; defaults to database_url's password.
    client_password: Secret = "";
    /// A PEM certificate (chain) to offer clients TLS with; needs tls_key.
    tls_cert: Option<PathBuf> = "";
    /// The PEM private key of tls_cert.
    tls_key: Option<PathBuf> = "";
    /// TLS for clients, as PgBouncer's client_tls_sslmode: disable (none offered), allow or prefer (offered
    /// to the clients that ask, with tls_cert), require (a TCP client without TLS is refused; the Unix
    /// socket needs none), verify-ca or verify-full (require, and a client certificate from tls_client_ca).
    tls_mode: SslMode = "prefer";
    /// A PEM file of the CAs whose client certificates tls_mode = verify-ca or verify-full accepts.
    tls_client_ca: Option<PathBuf> = "";
    /// A cap on server connections open at once. Unset: the database decides (see max_connections_percent),
    /// or 20 when sizing from the database is off.
    pool_max: Option<usize> = "";
    /// pgmux's share of the database's usable connections (max_connections minus the reserved ones), split
    /// with the other pgmux instances it sees and net of everyone else's connections; read by a control
    /// connection. 0 turns this off: no control connection, the limit is pool_max.
    max_connections_percent: usize = "90";
    /// How often the control connection re-reads max_connections and pg_stat_activity.
    pool_sizing_interval: Duration = "10s";
    /// A client that has waited this long with no idle server connection may open a new one (one at a
    /// time); until then it waits for one to come back. Longer when the last login took longer (up to
    /// 50 ms), except in a line that has not emptied for half a second. 0 opens at once.
    pool_grow_after: Duration = "5ms";
    /// Server connections kept open even when idle (within the limit).
    min_pool_size: usize = "0";
    /// Server connections one pool (a database clients name, and the user pgmux logs in there as) may hold,
    /// unless its database or user entry says otherwise (PgBouncer's default_pool_size). Unset: only
    /// pool_max and the budget from the database bound it.
    default_pool_size: Option<usize> = "";
    /// Server connections all pools of one database together may hold, unless its entry says otherwise
    /// (0 = no limit).
    max_db_connections: usize = "0";
    /// Server connections all pools of one user together may hold, unless its entry says otherwise (0 = no
    /// limit).
    max_user_connections: usize = "0";
    /// Server connections a pool may open above its size once a client has waited reserve_pool_timeout
    /// with none free (PgBouncer's reserve pool), unless its database or user entry says otherwise (0 =
    /// none). They close as they come back once nobody waits that long.
    reserve_pool_size: usize = "0";
    /// How long a client waits for a server connection before its pool may use the reserve.
    reserve_pool_timeout: Duration = "5s";
    /// Client connections naming one database at once, unless its entry says otherwise (0 = no limit);
    /// the next one gets SQLSTATE 53300. Users in admin_users are never refused by it on the console.
    max_db_client_connections: usize = "0";
    /// Client connections logged in as one user at once, unless its entry says otherwise (0 = no limit);
    /// the next one gets SQLSTATE 53300.
    max_user_client_connections: usize = "0";
    /// Server connections in use at once (lent to a client for a transaction, or pinned to one), all pools
    /// together, readers included; clients over it wait their turn, first come first served, up to
    /// query_wait_timeout. Idle connections do not count. 0 = no cap. Set it near what the database can run
    /// at once (a few per vCPU), not from max_connections.
    max_active_servers: usize = "0";
    /// How long a client keeps its server connection: `transaction` (for one transaction at a time) or
    /// `session` (until it disconnects: migrations, session-level tools), unless its database or user entry
    /// says otherwise.
    pool_mode: PoolMode = "transaction";
    /// Where a reader route's transaction goes when no reader is healthy: `writer` (counted in a metric),
    /// `wait` (for a reader, up to query_wait_timeout) or `error` (08006 at once), unless the route says.
    reader_fallback: ReaderFallback = "writer";
    /// A reader whose replication lag (Aurora's `replica_lag_in_msec`) is over this takes no new
    /// transactions until it has been back under it for two polls.
    max_replica_lag: Duration = "1s";
    /// How often a reader route's instances are asked whether they are readers, and how far behind.
    topology_interval: Duration = "1s";
    /// A file of users and passwords in PgBouncer's userlist.txt format (`"user" "password"` per line; the
    /// password in plaintext, as `md5` + hex, or as a SCRAM-SHA-256 verifier): whom clients may log in as,
    /// and, for plaintext and md5, how pgmux logs in to the server as them.
    auth_file: Option<PathBuf> = "";
    /// PgBouncer's `auth_user`: for a user pgmux does not know, a role whose login (its password from
    /// `[[users]]` or `auth_file`) runs `auth_query` on the route's server to read that user's password or
    /// verifier. A route's own `auth_user` comes first. Unset: unknown users are refused. Not on RDS or
    /// Aurora, where no role may read `pg_authid` (see docs/authentication.md).
    auth_user: String = "";
    /// The statement `auth_user` runs; `$1` is the user's name (as a quoted literal). It returns the name
    /// and the password (plaintext, md5 hash or SCRAM verifier), NULL for a user without one, or no row
    /// for no such user. The default is PgBouncer's since 1.24.1 (CVE-2025-2291): a password past its
    /// `VALID UNTIL` reads as NULL, and a role that may not log in is no user.
    auth_query: String = "SELECT rolname, CASE WHEN rolvaliduntil < now() THEN NULL ELSE rolpassword END FROM pg_authid WHERE rolname=$1 AND rolcanlogin";
    /// PgBouncer's `auth_dbname`: the `[[databases]]` entry whose server and database `auth_query` runs on
    /// (a route's own `auth_dbname` comes first). Unset: the route's own.
    auth_dbname: String = "";
    /// How clients log in: `trust`, `md5`, `scram-sha-256` or `plain`, with the user and password of
    /// database_url; `hba` (the first line of auth_hba_file that covers the login decides), `cert` (a client
    /// certificate from tls_client_ca whose common name is the user) or `peer` (over the Unix socket, the
    /// client's OS user is the user).
    client_auth: ClientAuth = "scram-sha-256";
    /// With client_auth = hba: a file in PostgreSQL's pg_hba.conf format (local / host / hostssl / hostnossl
    /// lines; methods trust, reject, password, md5, scram-sha-256, cert, peer). See docs/authentication.md.
    auth_hba_file: Option<PathBuf> = "";
    /// With client_auth = hba: a file in PostgreSQL's pg_ident.conf format (`map system-name user`), for the
    /// `map=` option of cert and peer lines.
    auth_ident_file: Option<PathBuf> = "";
    /// Most client connections at once; the next one gets SQLSTATE 53300.
    max_client_conn: usize = "5000";
    /// Longest a client waits for a server connection before it gets SQLSTATE 53300.
    query_wait_timeout: Duration = "30s";
    /// Close a server connection that has been idle this long (0 = never).
    server_idle_timeout: Duration = "60s";
    /// Close a server connection this old when it is next idle (0 = never); each connection's lifetime is
    /// shortened by a random 0-10 % so that connections opened together are not all closed together.
    server_lifetime: Duration = "1h";
    /// On SIGTERM / SIGINT, how long open transactions may run before pgmux exits anyway.
    shutdown_timeout: Duration = "30s";
    /// The longest pause between attempts to open a server connection after one failed (the database
    /// refused it, did not answer, or refused the login): pauses start at 50 ms and double up to this while
    /// clients wait (up to query_wait_timeout). PgBouncer's name; pgmux keeps clients waiting and retrying
    /// rather than failing them until the pause ends.
    server_login_retry: Duration = "250ms";
    /// Longest to wait for the database to accept a new connection and log in.
    server_connect_timeout: Duration = "5s";
    /// Longest a client may take to start up and authenticate.
    client_login_timeout: Duration = "15s";
    /// A server connection idle longer than this is checked with a round trip before it is lent.
    server_check_delay: Duration = "30s";
    /// What that check sends (PgBouncer's server_check_query): empty, an empty query, a round trip that
    /// runs no statement (PgBouncer's default); else this SQL, which must succeed and leave no transaction
    /// open, or the connection is closed and another one used.
    server_check_query: String = "";
    /// Start-up parameters dropped wherever a client sends them, directly or in `options` (PgBouncer's
    /// ignore_startup_parameters; comma-separated names): the session keeps the server's value. `options`
    /// in the list drops the `-c` settings that track_extra_parameters does not follow, rather than refusing
    /// the client.
    ignore_startup_parameters: String = "";
    /// PgBouncer's track_extra_parameters (comma-separated names). Empty (pgmux's default): pgmux follows
    /// every start-up parameter and setting onto each server connection. Set: a client may send only these,
    /// client_encoding, DateStyle, TimeZone, standard_conforming_strings and application_name (and what
    /// ignore_startup_parameters drops); any other is refused with 0A000, as PgBouncer refuses it.
    track_extra_parameters: String = "";
    /// SQL run once on each new server connection, after login and before it is lent (PgBouncer's
    /// connect_query), unless its database's entry has its own: settings every session of the pool should
    /// start with. If it fails, the connection is closed and logged, and waiting clients keep waiting while
    /// pgmux tries again, as after a failed login. Empty: none.
    connect_query: String = "";
    /// Prepared statements each server connection keeps (least recently used closed first); 0 turns
    /// statement tracking off (drivers' named statements then break across transactions).
    max_prepared_statements: usize = "200";
    /// Threads that serve clients. One is fastest when pgmux shares a few cores with its clients and the
    /// database; raise it only when pgmux itself keeps a core busy.
    workers: usize = "1";
    /// Log level: error, warn, info, debug or trace (or a tracing filter directive).
    log_level: String = "info";
    /// Log format: `text` or `json`.
    log_format: LogFormat = "text";

    // Riding through failovers, restarts and dead servers (issue 13).

    /// Which database nodes new server connections may use, with libpq's names: any, read-write, read-only,
    /// primary, standby, prefer-standby. A node whose role does not fit is refused (and pgmux tries again,
    /// re-resolving the host name, until query_wait_timeout); a node seen changing role is drained.
    target_session_attrs: TargetSessionAttrs = "read-write";
    /// Longest pgmux tries to forward a client's cancel request to the server (connect, send) before it
    /// gives up on it (PgBouncer's cancel_wait_timeout; 0 = no limit).
    cancel_wait_timeout: Duration = "10s";
    /// A client that keeps its server connection (session mode, a pin) is closed once it is between
    /// transactions when RECONNECT, a reload or KILL marks that connection to be replaced, rather than when it
    /// leaves (PgBouncer's server_fast_close). Transaction-mode clients never keep one.
    server_fast_close: bool = "false";
    /// TCP keepalive on server sockets, so that a server that vanished is noticed without waiting for a query.
    tcp_keepalive: bool = "true";
    /// Idle time before the first keepalive probe on a server socket.
    tcp_keepidle: Duration = "1s";
    /// Time between keepalive probes on a server socket.
    tcp_keepintvl: Duration = "1s";
    /// Unanswered keepalive probes before a server socket is given up.
    tcp_keepcnt: usize = "3";
    /// Longest data sent to a server may stay unacknowledged before the socket is given up (TCP_USER_TIMEOUT;
    /// 0 = the kernel's default, about 15 minutes).
    tcp_user_timeout: Duration = "5s";
    /// A node that has not answered pgmux's liveness probe (an empty query, once a second while connections
    /// are lent, on an idle connection or a probe connection of its own) within this long is declared hung:
    /// its connections are closed and their clients told (0 = no probe).
    server_probe_timeout: Duration = "2s";
    /// Close a client that stays idle inside a transaction this long while holding a server connection
    /// (SQLSTATE 25P03; 0 = never).
    idle_transaction_timeout: Duration = "0";
    /// Cancel a query that runs longer than this (SQLSTATE 57014 naming the setting; 0 = never).
    query_timeout: Duration = "0";
    /// Close a client connection idle this long between transactions (SQLSTATE 57P05; 0 = never).
    client_idle_timeout: Duration = "0";
    /// Close a client whose transaction has been open this long, counted from its first message, queries
    /// included (SQLSTATE 25P04, as PostgreSQL 17's own transaction_timeout; 0 = never). Its server
    /// connection is rolled back (a running query cancelled, and the connection closed) before it is lent
    /// again. A user's entry may set its own, as it may query_timeout, idle_transaction_timeout and
    /// client_idle_timeout.
    transaction_timeout: Duration = "0";
    /// The largest single message a client may send (SQLSTATE 54000, then the connection closes). Large
    /// enough for real bulk inserts; PostgreSQL's own limit is 1 GiB.
    max_client_message: usize = "268435456";
    /// Most bytes all clients together may hold in messages pgmux must read whole while they arrive (a
    /// Query or Parse above 256 KiB; a large Bind streams and needs none). A client whose message does not
    /// fit gets SQLSTATE 53200 and is disconnected. At least max_client_message.
    max_client_buffers: usize = "536870912";

    // Seeing inside pgmux and steering it live (issue 12).

    /// Users who may open the admin console (database `pgbouncer`, or `pgmux`) and run every command, after
    /// the usual client authentication; comma-separated. Empty: the user of database_url (or of the secret).
    admin_users: UserList = "";
    /// Users who may open the admin console and run SHOW commands only; comma-separated.
    stats_users: UserList = "";
    /// Address of the Prometheus endpoint (`/metrics`, `/healthz`), e.g. 127.0.0.1:9930. Unset: off.
    metrics_listen: Option<SocketAddr> = "";
    /// CloudWatch namespace of the Embedded Metric Format lines pgmux prints in Lambda.
    metrics_namespace: String = "pgmux";
    /// How often pgmux prints its CloudWatch metrics in Lambda (Managed Instances; classic Lambda prints at
    /// SHUTDOWN and whenever a timer gets to run). 0 prints at SHUTDOWN only.
    metrics_interval: Duration = "60s";
    /// Print CloudWatch Embedded Metric Format lines on stdout in Lambda.
    metrics_emf: bool = "true";
}

/// The admin console's virtual database: no server behind it, so never a place to run `auth_query`.
pub const CONSOLE_DATABASE: &str = "pgbouncer";

/// Keys that only a restart changes: the listener and its Unix socket (both bound once, at start), the
/// runtime, the log format. A reload that changes one keeps the running value and says so.
pub const RESTART_ONLY: &[&str] = &["listen", "unix_socket_dir", "workers", "log_format"];

impl Config {
    /// Whether a client must use TLS (over TCP; the Unix socket needs none).
    pub fn requires_client_tls(&self) -> bool {
        matches!(self.tls_mode, SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull)
    }

    /// Whether clients are offered TLS: a certificate, and a mode other than disable.
    pub fn offers_client_tls(&self) -> bool {
        self.tls_mode != SslMode::Disable && self.tls_cert.is_some() && self.tls_key.is_some()
    }
}

impl Config {
    /// This configuration with `key` set to `value`, written as in an environment variable, and checked
    /// again (the console's `SET key = value`).
    pub fn with_value(&self, key: &str, value: &str) -> Result<Config, ConfigError> {
        let mut cfg = self.clone();
        let info = KEYS.iter().find(|k| k.name == key).ok_or_else(|| ConfigError::UnknownKey(key.to_owned()))?;
        let invalid = |reason: ValueError| ConfigError::Invalid {
            key: info.name.to_owned(),
            origin: Source::Default,
            reason: reason.into(),
        };
        cfg.set(info.name, &Raw::Env(value)).map_err(invalid)?;
        if info.name == "sslmode" && value.trim().is_empty() {
            cfg.resolve_sslmode();
        }
        cfg.validate(&BTreeMap::from([(info.name, Source::Env(format!("SET {}", info.name)))]))?;
        Ok(cfg)
    }

    /// Whether a server login made with `other` would differ from one made with this configuration: where
    /// to connect, as whom, with which password or TLS. Then every server connection is replaced.
    pub fn login_differs(&self, other: &Config) -> bool {
        let url =
            |c: &Config| (c.database_url.login.clone(), c.database_url.sslmode, c.database_url.sslrootcert.clone());
        url(self) != url(other)
            || self.secret_arn != other.secret_arn
            || self.database_host != other.database_host
            || self.database_port != other.database_port
            || self.iam_auth != other.iam_auth
            || self.effective_sslmode() != other.effective_sslmode()
            || self.ssl_root_cert != other.ssl_root_cert
    }

    /// `sslmode` from the key, else from database_url, else the profile's default.
    fn resolve_sslmode(&mut self) {
        if self.sslmode.is_none() {
            self.sslmode = Some(self.database_url.sslmode.unwrap_or(self.profile.default_sslmode()));
        }
        if self.ssl_root_cert.is_none() {
            self.ssl_root_cert = self.database_url.sslrootcert.clone();
        }
    }

    /// The TLS mode towards the database.
    pub fn effective_sslmode(&self) -> SslMode {
        self.sslmode.unwrap_or(self.profile.default_sslmode())
    }

    /// The password md5 / scram-sha-256 clients must give: client_password, else database_url's.
    pub fn client_password(&self) -> Option<&Secret> {
        if self.client_password.is_empty() {
            self.database_url.login.password.as_ref()
        } else {
            Some(&self.client_password)
        }
    }

    /// `login` with `database_host` / `database_port` applied.
    pub fn with_overrides(&self, mut login: LoginInfo) -> LoginInfo {
        if !self.database_host.is_empty() {
            login.host.clone_from(&self.database_host);
        }
        if let Some(port) = self.database_port {
            login.port = port;
        }
        login
    }
}

impl fmt::Display for Config {
    /// The effective configuration, one `key = value` per line, password redacted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (key, value) in self.entries() {
            writeln!(f, "{key} = {value}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
