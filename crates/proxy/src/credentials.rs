//! Where pgmux logs in and as whom. The database URL gives fixed values; the binary can plug in sources that
//! change (a Secrets Manager secret that rotates, RDS IAM tokens that expire) through [`Credentials`], so
//! that AWS code stays out of the core.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use crate::config::Config;

/// A boxed future, for the object-safe trait below.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Everything needed to open and log in a server connection.
#[derive(Clone, PartialEq, Eq)]
pub struct LoginInfo {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Role.
    pub user: String,
    /// Password (or IAM token), if the server asks for one.
    pub password: Option<String>,
    /// Database.
    pub dbname: String,
}

impl fmt::Debug for LoginInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoginInfo")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("dbname", &self.dbname)
            .finish()
    }
}

impl LoginInfo {
    /// `host:port` for messages.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// Applies `database_host` / `database_port` from the configuration.
    pub fn with_overrides(mut self, config: &Config) -> Self {
        if !config.database_host.is_empty() {
            self.host.clone_from(&config.database_host);
        }
        if let Some(port) = config.database_port {
            self.port = port;
        }
        self
    }
}

/// The credentials could not be had (a secret could not be read, AWS credentials are missing, …).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CredentialsError(pub String);

/// A source of [`LoginInfo`] for new server connections.
pub trait Credentials: Send + Sync + fmt::Debug {
    /// What the next new server connection should use.
    fn login(&self) -> BoxFuture<'_, Result<LoginInfo, CredentialsError>>;

    /// The server refused the last login's password: look again (a secret may have rotated). `Ok(true)`
    /// if anything changed and a retry is worth it.
    fn refresh(&self) -> BoxFuture<'_, Result<bool, CredentialsError>> {
        Box::pin(async { Ok(false) })
    }
}

/// The fixed values of `database_url`, with the host and port overrides applied.
#[derive(Debug)]
pub struct StaticCredentials(LoginInfo);

impl StaticCredentials {
    /// From the configuration's `database_url`.
    pub fn from_config(config: &Config) -> Self {
        let url = &config.database_url;
        let info = LoginInfo {
            host: url.host.clone(),
            port: url.port,
            user: url.user.clone(),
            password: url.password.clone(),
            dbname: url.dbname.clone(),
        };
        StaticCredentials(info.with_overrides(config))
    }
}

impl Credentials for StaticCredentials {
    fn login(&self) -> BoxFuture<'_, Result<LoginInfo, CredentialsError>> {
        let info = self.0.clone();
        Box::pin(async move { Ok(info) })
    }
}
