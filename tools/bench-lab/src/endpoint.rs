//! Where a client reaches what it measures, and how it logs in: a pooler on a TCP port or a Unix socket
//! (trust, no TLS: the client is on the pooler's host), or PostgreSQL across the lab's link (`sslmode=
//! verify-full` against the lab's CA, SCRAM). The same value drives pgbench (as libpq's `PG*` variables) and
//! the driver's own tokio-postgres clients, so both take the same path.

use std::path::PathBuf;
use std::time::Duration;

use pgmux_testkit::{APP_USER, DATABASE};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;
use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, Config, NoTls};

use crate::pgtls::VerifyFull;

/// How long a benchmark client waits for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// An address, a host name, or (starting with `/`) the directory of a Unix socket, as libpq reads it.
    pub host: String,
    pub port: u16,
    /// The application user's password; `None` where the target trusts its clients.
    pub password: Option<String>,
    /// The CA file for `sslmode=verify-full`; `None`: no TLS.
    pub ca: Option<PathBuf>,
}

/// A connected client and the task driving its connection (which ends when the client is dropped).
pub type Connected = (Client, JoinHandle<Result<(), tokio_postgres::Error>>);

impl Endpoint {
    /// A trusting target on a TCP address.
    pub fn tcp(host: impl ToString, port: u16) -> Endpoint {
        Endpoint { host: host.to_string(), port, password: None, ca: None }
    }

    /// A trusting target's Unix socket: `<dir>/.s.PGSQL.<port>`.
    pub fn unix(dir: impl Into<PathBuf>, port: u16) -> Endpoint {
        Endpoint { host: dir.into().display().to_string(), port, password: None, ca: None }
    }

    /// PostgreSQL by name, TLS with the name checked against `ca`, SCRAM with the application's password.
    pub fn verify_full(host: &str, port: u16, ca: PathBuf) -> Endpoint {
        Endpoint { host: host.to_owned(), port, password: Some(APP_USER.password.to_owned()), ca: Some(ca) }
    }

    /// The libpq environment for this endpoint (pgbench, psql): host, port, TLS mode, CA, password.
    pub fn libpq_env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![("PGHOST", self.host.clone()), ("PGPORT", self.port.to_string())];
        match &self.ca {
            Some(ca) => {
                env.push(("PGSSLMODE", "verify-full".to_owned()));
                env.push(("PGSSLROOTCERT", ca.display().to_string()));
            }
            None => env.push(("PGSSLMODE", "disable".to_owned())),
        }
        if let Some(password) = &self.password {
            env.push(("PGPASSWORD", password.clone()));
        }
        env
    }

    /// tokio-postgres settings for the application user.
    pub fn config(&self) -> Config {
        let mut config = Config::new();
        config
            .host(&self.host)
            .port(self.port)
            .user(APP_USER.user)
            .dbname(DATABASE)
            .application_name("pgmux-bench")
            .connect_timeout(CONNECT_TIMEOUT)
            .ssl_mode(if self.ca.is_some() { SslMode::Require } else { SslMode::Disable });
        if let Some(password) = &self.password {
            config.password(password);
        }
        config
    }

    /// Connect as [`Endpoint::config`] says, with TLS when the endpoint has a CA.
    pub async fn connect(&self) -> Result<Connected, String> {
        self.connect_with(&self.config()).await
    }

    /// Connect with `config` (this endpoint's, perhaps changed), TLS as the endpoint says.
    pub async fn connect_with(&self, config: &Config) -> Result<Connected, String> {
        match &self.ca {
            Some(ca) => {
                let tls = VerifyFull::new(ca)?;
                let (client, connection) = config.connect(tls).await.map_err(|e| describe(&e))?;
                Ok((client, tokio::spawn(connection)))
            }
            None => {
                let (client, connection) = config.connect(NoTls).await.map_err(|e| describe(&e))?;
                Ok((client, tokio::spawn(connection)))
            }
        }
    }
}

/// `SQLSTATE: message` for a server's error, else the error and its causes.
pub fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} {}: {}", db.severity(), db.code().code(), db.message());
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// The SQLSTATE of a failure, or a class of its own for one without (the socket, TLS, a timeout).
pub fn error_class(e: &tokio_postgres::Error) -> String {
    match e.code() {
        Some(code) => code.code().to_owned(),
        None if e.is_closed() => "closed".to_owned(),
        None => "no SQLSTATE".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_sees_what_tokio_postgres_sees() {
        let direct = Endpoint::verify_full("db.pgmux.test", 5999, "/lab/ca.pem".into());
        let env = direct.libpq_env();
        for pair in [
            ("PGHOST", "db.pgmux.test"),
            ("PGPORT", "5999"),
            ("PGSSLMODE", "verify-full"),
            ("PGSSLROOTCERT", "/lab/ca.pem"),
            ("PGPASSWORD", APP_USER.password),
        ] {
            assert!(env.iter().any(|(k, v)| (*k, v.as_str()) == pair), "{pair:?} missing from {env:?}");
        }
        assert_eq!(direct.config().get_ssl_mode(), SslMode::Require);
        let socket = Endpoint::unix("/tmp/x", 6432);
        assert_eq!(socket.host, "/tmp/x");
        assert!(socket.libpq_env().contains(&("PGSSLMODE", "disable".to_owned())));
        assert!(!socket.libpq_env().iter().any(|(k, _)| *k == "PGPASSWORD"));
        assert!(matches!(socket.config().get_hosts(), [tokio_postgres::config::Host::Unix(_)]));
    }
}
