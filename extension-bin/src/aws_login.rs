//! Database credentials from AWS, plugged into the pooler's `Credentials`: a Secrets Manager secret (read
//! when the first client needs it, re-read when a login is refused: rotation), RDS IAM auth tokens (one per
//! new server connection, from a cache renewed well before the 15-minute expiry), or both. The AWS
//! credentials that sign both come from the environment (Lambda), the container credentials endpoint (ECS,
//! EKS Pod Identity) or the EC2 instance metadata service, in that order.

use std::sync::Arc;

use pgmux_aws::iam::TokenCache;
use pgmux_aws::secrets::{DbSecret, SecretsClient};
use pgmux_aws::{AwsCredentials, CredentialsProvider};
use pgmux_proxy::config::credentials::{BoxFuture, Credentials, CredentialsError, LoginInfo};
use pgmux_proxy::config::{Config, Secret};
use tokio::sync::Mutex;

/// Where the host, user and password come from before IAM replaces the password.
enum Base {
    /// database_url's values.
    Url(LoginInfo),
    /// A secret, read lazily and cached.
    Secret(Box<SecretSource>),
}

struct SecretSource {
    client: SecretsClient,
    arn: String,
    cached: Mutex<Option<LoginInfo>>,
}

/// An IAM token cache and the (host, port, user) and credentials it signs with.
struct IamCache {
    host: String,
    port: u16,
    user: String,
    creds: AwsCredentials,
    cache: Arc<TokenCache>,
}

/// Credentials built from the configuration's AWS keys.
pub struct AwsLogin {
    base: Base,
    /// With `iam_auth`: the token cache for the current (host, port, user).
    iam: Option<Mutex<Option<IamCache>>>,
    region: Option<String>,
    /// AWS credentials for both (environment, container endpoint or instance metadata).
    aws: Arc<CredentialsProvider>,
    overrides: Config,
}

impl std::fmt::Debug for AwsLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let base = match &self.base {
            Base::Url(_) => "database_url",
            Base::Secret(_) => "secret",
        };
        f.debug_struct("AwsLogin").field("base", &base).field("iam", &self.iam.is_some()).finish()
    }
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A source set up wrongly: the operator must fix the configuration or the environment.
fn config_err(e: impl std::fmt::Display) -> CredentialsError {
    CredentialsError::Config(e.to_string())
}

/// A source that did not answer as it should: worth another try later.
fn unavailable(e: impl std::fmt::Display) -> CredentialsError {
    CredentialsError::Unavailable(e.to_string())
}

impl AwsLogin {
    /// `None` when the configuration uses neither a secret nor IAM (database_url alone does).
    pub fn from_config(config: &Config) -> Result<Option<Self>, CredentialsError> {
        if config.secret_arn.is_empty() && !config.iam_auth {
            return Ok(None);
        }
        let aws = Arc::new(CredentialsProvider::from_env().map_err(config_err)?);
        tracing::info!(source = aws.source(), "AWS credentials");
        let base = if config.secret_arn.is_empty() {
            Base::Url(config.database_url.login.clone())
        } else {
            let client = SecretsClient::from_vars_with(env_var, Arc::clone(&aws)).map_err(config_err)?;
            Base::Secret(Box::new(SecretSource { client, arn: config.secret_arn.clone(), cached: Mutex::new(None) }))
        };
        let region = if config.iam_auth { Some(pgmux_aws::region_from_env().map_err(config_err)?) } else { None };
        Ok(Some(AwsLogin {
            base,
            iam: config.iam_auth.then(|| Mutex::new(None)),
            region,
            aws,
            overrides: config.clone(),
        }))
    }

    async fn base_login(&self) -> Result<LoginInfo, CredentialsError> {
        let info = match &self.base {
            Base::Url(info) => info.clone(),
            Base::Secret(source) => {
                let mut cached = source.cached.lock().await;
                match &*cached {
                    Some(info) => info.clone(),
                    None => {
                        let info = read_secret(&source.client, &source.arn).await?;
                        *cached = Some(info.clone());
                        info
                    }
                }
            }
        };
        Ok(self.overrides.with_overrides(info))
    }

    /// The IAM token for `info`'s host, port and user, from a cache made for them.
    async fn token(&self, info: &LoginInfo) -> Result<Option<Secret>, CredentialsError> {
        let (Some(iam), Some(region)) = (&self.iam, &self.region) else { return Ok(None) };
        let creds = self
            .aws
            .credentials()
            .await
            .map_err(|e| unavailable(format!("AWS credentials ({}): {e}", self.aws.source())))?;
        let mut slot = iam.lock().await;
        let fresh = match &*slot {
            Some(c) if c.host == info.host && c.port == info.port && c.user == info.user && c.creds == creds => {
                Arc::clone(&c.cache)
            }
            _ => {
                let cache = Arc::new(TokenCache::new(
                    info.host.clone(),
                    info.port,
                    info.user.clone(),
                    region.clone(),
                    creds.clone(),
                ));
                *slot = Some(IamCache {
                    host: info.host.clone(),
                    port: info.port,
                    user: info.user.clone(),
                    creds,
                    cache: Arc::clone(&cache),
                });
                cache
            }
        };
        drop(slot);
        fresh.token().map(Some).map_err(unavailable)
    }
}

async fn read_secret(client: &SecretsClient, arn: &str) -> Result<LoginInfo, CredentialsError> {
    let secret: DbSecret = client.get_db_secret(arn).await.map_err(|e| unavailable(format!("secret {arn}: {e}")))?;
    let host = secret.host.clone().unwrap_or_default();
    Ok(LoginInfo {
        host,
        port: secret.port.unwrap_or(5432),
        user: secret.username.clone(),
        password: Some(secret.password),
        dbname: secret.dbname.clone().unwrap_or_else(|| "postgres".to_owned()),
        scram_keys: None,
    })
}

impl Credentials for AwsLogin {
    fn login(&self) -> BoxFuture<'_, Result<LoginInfo, CredentialsError>> {
        Box::pin(async move {
            let mut info = self.base_login().await?;
            if info.host.is_empty() {
                return Err(config_err("the secret has no host: set database_host"));
            }
            if let Some(token) = self.token(&info).await? {
                info.password = Some(token);
            }
            Ok(info)
        })
    }

    fn refresh(&self) -> BoxFuture<'_, Result<bool, CredentialsError>> {
        Box::pin(async move {
            let Base::Secret(source) = &self.base else { return Ok(false) };
            let fresh = read_secret(&source.client, &source.arn).await?;
            let mut cached = source.cached.lock().await;
            let changed = cached.as_ref() != Some(&fresh);
            *cached = Some(fresh);
            Ok(changed)
        })
    }
}
