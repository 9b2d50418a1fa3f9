//! Where pgmux logs in and as whom. The database URL gives fixed values; the binary can plug in sources that
//! change (a Secrets Manager secret that rotates, RDS IAM tokens that expire) through [`Credentials`], so
//! that AWS code stays out of the core.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;

use crate::config::Config;
pub use crate::config::LoginInfo;

/// A boxed future, for the object-safe trait below.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why the credentials for a new server connection could not be had. The message names the source and what
/// to fix; it never contains a secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    /// The source is set up wrongly (a secret without a host, no AWS region, ...): a configuration fix.
    #[error("{0}")]
    Config(String),
    /// The source could not be reached or refused pgmux (Secrets Manager, the AWS credentials endpoint, ...):
    /// worth trying again later.
    #[error("{0}")]
    Unavailable(String),
}

/// A source of [`LoginInfo`] for new server connections.
pub trait Credentials: Send + Sync + fmt::Debug {
    /// What the next new server connection should use.
    fn login(&self) -> BoxFuture<'_, Result<LoginInfo, CredentialsError>>;

    /// The server refused the last login's password: look again (a secret may have rotated). `Ok(true)`
    /// if anything changed and a retry is worth it.
    fn refresh(&self) -> BoxFuture<'_, Result<bool, CredentialsError>> {
        Box::pin(async { Ok(false) })
    }

    /// The login, when it never changes (the configuration's own values), to be read where it is: every
    /// client of the default pool compares its database and user with it, and a copy of it per client would
    /// be strings allocated and freed. `None` for sources whose values change.
    fn fixed(&self) -> Option<&LoginInfo> {
        None
    }

    /// A source that learns its logins from the pool's clients (SCRAM passthrough, passthrough): what the
    /// login path hands their proofs to. `None` for every other source.
    fn learned(&self) -> Option<&super::learned::LearnedCredentials> {
        None
    }
}

/// How pgmux gets into the database, beyond what the configuration says: where logins come from (a
/// rotating secret, IAM tokens) and which CAs to trust. The binary fills it from AWS; tests leave it default.
#[derive(Debug, Default)]
pub struct ServerAccess {
    /// Where server logins come from; `database_url`'s fixed values when `None`.
    pub credentials: Option<Arc<dyn Credentials>>,
    /// CA certificates trusted for the database besides `ssl_root_cert` (the binary passes the RDS bundle).
    pub extra_root_certs: Vec<CertificateDer<'static>>,
    /// Where the pools of named databases get IAM tokens or secrets; without it such a pool cannot log in.
    pub pool_credentials: Option<Arc<dyn PoolCredentials>>,
    /// Where a discovered reader instance is reached; by its endpoint's name (DNS) at the route's port when
    /// `None`. The test harness's Aurora stand-in puts each instance on a port of its own.
    pub instance_endpoints: Option<Arc<dyn InstanceEndpoints>>,
}

/// Where the instance endpoint `host` (`<server_id>.<instance_domain>`, from the cluster's topology) is
/// reached: a host and port to connect to, or `None` while it is not known (the instance is left out of
/// the rotation until it is). Without one, an instance is reached by its endpoint's name at the route's port.
pub trait InstanceEndpoints: Send + Sync + fmt::Debug {
    fn locate(&self, host: &str) -> Option<(String, u16)>;
}

/// Where the logins of one pool come from when its database or user asks for IAM or a Secrets Manager
/// secret: the binary builds them with AWS. `login` is where and as whom (its password unset).
pub trait PoolCredentials: Send + Sync + fmt::Debug {
    fn for_pool(
        &self,
        login: &LoginInfo,
        auth: crate::config::ServerAuth,
        secret_arn: Option<&str>,
    ) -> Result<Arc<dyn Credentials>, CredentialsError>;
}

impl Credentials for super::learned::LearnedCredentials {
    fn login(&self) -> BoxFuture<'_, Result<LoginInfo, CredentialsError>> {
        let current = self.current().map_err(CredentialsError::Config);
        Box::pin(async move { current })
    }

    fn learned(&self) -> Option<&super::learned::LearnedCredentials> {
        Some(self)
    }
}

/// Fixed values: `database_url`'s with the host and port overrides applied, or a pool's.
#[derive(Debug)]
pub struct StaticCredentials(LoginInfo);

impl StaticCredentials {
    /// These values.
    pub fn new(login: LoginInfo) -> Self {
        StaticCredentials(login)
    }

    /// From the configuration's `database_url`.
    pub fn from_config(config: &Config) -> Self {
        StaticCredentials(config.with_overrides(config.database_url.login.clone()))
    }
}

impl Credentials for StaticCredentials {
    fn login(&self) -> BoxFuture<'_, Result<LoginInfo, CredentialsError>> {
        let info = self.0.clone();
        Box::pin(async move { Ok(info) })
    }

    fn fixed(&self) -> Option<&LoginInfo> {
        Some(&self.0)
    }
}
