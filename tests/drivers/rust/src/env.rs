//! The environment the runner hands every suite (tests/drivers/README.md, "Contract between the runner and a
//! suite"): where pgmux and PostgreSQL are, who to log in as, and the load knobs.

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;

/// Everything the contract's variables say, parsed once.
#[derive(Debug, Clone)]
pub struct Env {
    pub host: String,
    /// pgmux (or PostgreSQL itself when the suite is run straight against it).
    pub port: u16,
    /// The directory of the same server's Unix socket, `.s.PGSQL.<port>`.
    pub socket_dir: String,
    pub user: String,
    pub password: String,
    pub database: String,
    /// PostgreSQL, for oracle queries as the superuser.
    pub direct_port: u16,
    pub direct_user: String,
    pub direct_password: String,
    /// Concurrent clients in load scenarios.
    pub clients: usize,
    /// Transactions per client in load scenarios.
    pub txns: usize,
    /// Each scenario gives up after this long.
    pub timeout: Duration,
    /// Server connections of `user` must never exceed this (checked only through a pooler).
    pub pool_max: i64,
}

impl Env {
    /// Reads the contract's variables; the error names every one that is missing or malformed.
    pub fn from_env() -> Result<Env, String> {
        let mut problems = Vec::new();
        let mut text = |name: &str| match std::env::var(name) {
            Ok(v) if !v.is_empty() => v,
            _ => {
                problems.push(format!("{name} is not set"));
                String::new()
            }
        };
        let host = text("PGHOST");
        let port = text("PGPORT");
        let socket_dir = text("MATRIX_SOCKET_DIR");
        let user = text("PGUSER");
        let password = text("PGPASSWORD");
        let database = text("PGDATABASE");
        let direct_port = text("DIRECT_PGPORT");
        let direct_user = text("DIRECT_PGUSER");
        let direct_password = text("DIRECT_PGPASSWORD");
        let mut number = |name: &str, default: u64| -> u64 {
            match std::env::var(name) {
                Err(_) => default,
                Ok(v) => v.parse().unwrap_or_else(|_| {
                    problems.push(format!("{name}={v:?} is not a whole number"));
                    default
                }),
            }
        };
        let clients = number("MATRIX_CLIENTS", 50);
        let txns = number("MATRIX_TXNS", 100);
        let timeout_s = number("MATRIX_TIMEOUT_S", 60);
        let pool_max = number("MATRIX_POOL_MAX", 2);
        let mut port_number = |name: &str, v: &str| -> u16 {
            v.parse().unwrap_or_else(|_| {
                if !v.is_empty() {
                    problems.push(format!("{name}={v:?} is not a port"));
                }
                0
            })
        };
        let port = port_number("PGPORT", &port);
        let direct_port = port_number("DIRECT_PGPORT", &direct_port);
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        Ok(Env {
            host,
            port,
            socket_dir,
            user,
            password,
            database,
            direct_port,
            direct_user,
            direct_password,
            clients: usize::try_from(clients.max(1)).unwrap_or(50),
            txns: usize::try_from(txns.max(1)).unwrap_or(100),
            timeout: Duration::from_secs(timeout_s.max(1)),
            pool_max: i64::try_from(pool_max).unwrap_or(2),
        })
    }

    /// Whether the suite talks to PostgreSQL itself rather than to a pooler (then the backend limit of the
    /// load scenarios does not apply: every client has a backend of its own).
    pub fn is_direct(&self) -> bool {
        self.port == self.direct_port
    }

    /// tokio-postgres settings for an application client named `app` (its `application_name`).
    pub fn tokio_config(&self, app: &str) -> tokio_postgres::Config {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host(&self.host)
            .port(self.port)
            .user(&self.user)
            .password(&self.password)
            .dbname(&self.database)
            .application_name(app)
            .connect_timeout(self.timeout);
        cfg
    }

    /// tokio-postgres settings for the oracle: PostgreSQL itself, as the superuser.
    pub fn oracle_config(&self) -> tokio_postgres::Config {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host(&self.host)
            .port(self.direct_port)
            .user(&self.direct_user)
            .password(&self.direct_password)
            .dbname(&self.database)
            .application_name("matrix-oracle")
            .connect_timeout(self.timeout);
        cfg
    }

    /// sqlx settings for an application client named `app`: the driver's defaults otherwise (its start-up
    /// parameters DateStyle, TimeZone, extra_float_digits; persistent statements; sslmode prefer).
    pub fn sqlx_options(&self, app: &str) -> PgConnectOptions {
        PgConnectOptions::new_without_pgpass()
            .host(&self.host)
            .port(self.port)
            .username(&self.user)
            .password(&self.password)
            .database(&self.database)
            .application_name(app)
    }
}
