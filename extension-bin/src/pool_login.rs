//! Server logins of the pools of named databases whose route or user says `auth = "iam"` or
//! `auth = "secret"`: the core's `PoolCredentials`, filled with AWS.
//!
//! - **IAM**: one token per (host, port, user), shared by every pool that logs in there as that user, reused
//!   for at most `TOKEN_REUSE` (10 of its 15 minutes) and never into the last minute of the AWS credentials
//!   that signed it (`pgmux_aws::iam::TokenCache`). New AWS credentials (a rotated role session) start a new
//!   cache.
//! - **Secret**: each pool reads its own secret (the route's or the user's `secret_arn`) when it first logs
//!   in, and again when the server refuses the password: a rotated secret takes effect at the next login of
//!   that pool, and rotating one user's secret touches no other pool. The secret's `username` must be the
//!   pool's user; its password is used, its host and database are not (the route says where).
//!
//! The AWS parts (credentials, region, the Secrets Manager client) are made when a pool first needs them, so
//! that a configuration with no such route costs nothing, and a route added by a reload finds them.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use pgmux_aws::iam::TokenCache;
use pgmux_aws::secrets::SecretsClient;
use pgmux_aws::{AwsCredentials, CredentialsProvider};
use pgmux_proxy::config::credentials::{BoxFuture, Credentials, CredentialsError, LoginInfo, PoolCredentials};
use pgmux_proxy::config::{Secret, ServerAuth};

/// Environment lookups, replaceable in tests.
type Vars = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// What AWS logins need, made once.
struct Parts {
    aws: Arc<CredentialsProvider>,
    region: Result<String, String>,
    secrets: Result<Arc<SecretsClient>, String>,
}

/// The binary's [`PoolCredentials`].
pub struct AwsPoolLogins {
    vars: Vars,
    parts: OnceLock<Result<Parts, String>>,
    tokens: Arc<IamTokens>,
}

impl std::fmt::Debug for AwsPoolLogins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsPoolLogins").finish_non_exhaustive()
    }
}

impl AwsPoolLogins {
    /// Reads the AWS settings from the process environment when a pool first needs them.
    pub fn from_env() -> Self {
        Self::from_vars(Arc::new(|name| std::env::var(name).ok()))
    }

    fn from_vars(vars: Vars) -> Self {
        AwsPoolLogins { vars, parts: OnceLock::new(), tokens: Arc::default() }
    }

    fn parts(&self) -> Result<&Parts, CredentialsError> {
        let made = self.parts.get_or_init(|| {
            let vars = Arc::clone(&self.vars);
            let aws = Arc::new(CredentialsProvider::from_vars(|n| vars(n)).map_err(|e| e.to_string())?);
            tracing::info!(source = aws.source(), "AWS credentials for pools with auth = iam or secret");
            let region = pgmux_aws::region_from_vars(|n| vars(n)).map_err(|e| e.to_string());
            let secrets =
                SecretsClient::from_vars_with(|n| vars(n), Arc::clone(&aws)).map(Arc::new).map_err(|e| e.to_string());
            Ok(Parts { aws, region, secrets })
        });
        made.as_ref().map_err(|e| CredentialsError::Config(format!("AWS credentials: {e}")))
    }
}

impl PoolCredentials for AwsPoolLogins {
    fn for_pool(
        &self,
        login: &LoginInfo,
        auth: ServerAuth,
        secret_arn: Option<&str>,
    ) -> Result<Arc<dyn Credentials>, CredentialsError> {
        let parts = self.parts()?;
        let mut login = login.clone();
        login.password = None;
        match auth {
            ServerAuth::Iam => {
                let region = parts.region.clone().map_err(CredentialsError::Config)?;
                let tokens = Arc::clone(&self.tokens);
                Ok(Arc::new(PoolIam { login, aws: Arc::clone(&parts.aws), region, tokens }))
            }
            ServerAuth::Secret => {
                let Some(arn) = secret_arn else {
                    return Err(CredentialsError::Config(format!(
                        "user \"{}\" logs in with a Secrets Manager secret (auth = secret), and neither its route \
                         nor its [[users]] entry names one: set secret_arn",
                        login.user
                    )));
                };
                let client = parts.secrets.clone().map_err(CredentialsError::Config)?;
                let cached = tokio::sync::Mutex::new(None);
                Ok(Arc::new(PoolSecret { login, client, arn: arn.to_owned(), cached }))
            }
            other => Err(CredentialsError::Config(format!("auth = {other} does not come from AWS"))),
        }
    }
}

/// Where and as whom a token logs in: host, port, user.
type TokenKey = (String, u16, String);

/// Token caches by (host, port, user), each with the AWS credentials it signs with.
#[derive(Default)]
struct IamTokens {
    caches: parking_lot::Mutex<HashMap<TokenKey, (AwsCredentials, Arc<TokenCache>)>>,
}

impl IamTokens {
    /// A token to `host:port` as `user`, signed with `creds` (a cache per place and user, renewed when the
    /// credentials change).
    fn token(&self, login: &LoginInfo, region: &str, creds: AwsCredentials) -> Result<Secret, pgmux_aws::AwsError> {
        let key = (login.host.clone(), login.port, login.user.clone());
        let cache = {
            let mut caches = self.caches.lock();
            match caches.get(&key) {
                Some((signed_with, cache)) if *signed_with == creds => Arc::clone(cache),
                _ => {
                    let (host, port, user) = key.clone();
                    let cache = Arc::new(TokenCache::new(host, port, user, region.to_owned(), creds.clone()));
                    caches.insert(key, (creds, Arc::clone(&cache)));
                    cache
                }
            }
        };
        cache.token()
    }
}

/// IAM logins of one pool.
struct PoolIam {
    login: LoginInfo,
    aws: Arc<CredentialsProvider>,
    region: String,
    tokens: Arc<IamTokens>,
}

impl std::fmt::Debug for PoolIam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolIam").field("user", &self.login.user).field("host", &self.login.host).finish()
    }
}

impl Credentials for PoolIam {
    fn login(&self) -> BoxFuture<'_, Result<LoginInfo, CredentialsError>> {
        Box::pin(async move {
            if self.login.host.is_empty() {
                return Err(CredentialsError::Config("an IAM login needs the database host: set host".into()));
            }
            let creds =
                self.aws.credentials().await.map_err(|e| {
                    CredentialsError::Unavailable(format!("AWS credentials ({}): {e}", self.aws.source()))
                })?;
            let token = self
                .tokens
                .token(&self.login, &self.region, creds)
                .map_err(|e| CredentialsError::Unavailable(e.to_string()))?;
            Ok(LoginInfo { password: Some(token), ..self.login.clone() })
        })
    }
}

/// Secret logins of one pool: its own cached copy of its secret's password.
struct PoolSecret {
    login: LoginInfo,
    client: Arc<SecretsClient>,
    arn: String,
    cached: tokio::sync::Mutex<Option<Secret>>,
}

impl std::fmt::Debug for PoolSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolSecret").field("user", &self.login.user).field("arn", &self.arn).finish()
    }
}

impl PoolSecret {
    async fn read(&self) -> Result<Secret, CredentialsError> {
        let secret = self
            .client
            .get_db_secret(&self.arn)
            .await
            .map_err(|e| CredentialsError::Unavailable(format!("secret {}: {e}", self.arn)))?;
        if secret.username != self.login.user {
            return Err(CredentialsError::Config(format!(
                "secret {} is the login of user \"{}\", and this pool logs in as \"{}\"",
                self.arn, secret.username, self.login.user
            )));
        }
        Ok(secret.password)
    }
}

impl Credentials for PoolSecret {
    fn login(&self) -> BoxFuture<'_, Result<LoginInfo, CredentialsError>> {
        Box::pin(async move {
            let mut cached = self.cached.lock().await;
            let password = match &*cached {
                Some(password) => password.clone(),
                None => {
                    let password = self.read().await?;
                    *cached = Some(password.clone());
                    password
                }
            };
            Ok(LoginInfo { password: Some(password), ..self.login.clone() })
        })
    }

    fn refresh(&self) -> BoxFuture<'_, Result<bool, CredentialsError>> {
        Box::pin(async move {
            let fresh = self.read().await?;
            let mut cached = self.cached.lock().await;
            let changed = cached.as_ref().map(Secret::expose) != Some(fresh.expose());
            if changed {
                tracing::info!(user = %self.login.user, arn = %self.arn, "secret changed; the pool logs in with it");
            }
            *cached = Some(fresh);
            Ok(changed)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(extra: &'static [(&'static str, &'static str)]) -> Vars {
        Arc::new(move |name| {
            [
                ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
                ("AWS_SECRET_ACCESS_KEY", "secret-example"),
                ("AWS_REGION", "eu-west-1"),
            ]
            .iter()
            .chain(extra)
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
        })
    }

    fn login(host: &str, user: &str) -> LoginInfo {
        LoginInfo {
            host: host.into(),
            port: 5432,
            user: user.into(),
            password: None,
            dbname: "app".into(),
            scram_keys: None,
        }
    }

    async fn token_of(pools: &AwsPoolLogins, login: &LoginInfo) -> String {
        let creds = pools.for_pool(login, ServerAuth::Iam, None).unwrap();
        creds.login().await.unwrap().password.unwrap().expose().to_owned()
    }

    #[tokio::test]
    async fn one_iam_token_per_host_and_user_shared_by_their_pools() {
        let pools = AwsPoolLogins::from_vars(vars(&[]));
        let ann = token_of(&pools, &login("db.example", "ann")).await;
        assert!(ann.starts_with("db.example:5432/?Action=connect&DBUser=ann"), "{ann}");
        // A second pool (another route) to the same host as the same user reuses the token.
        assert_eq!(token_of(&pools, &login("db.example", "ann")).await, ann);
        // Another user, or another host, has its own.
        let bob = token_of(&pools, &login("db.example", "bob")).await;
        assert!(bob.contains("DBUser=bob") && bob != ann, "{bob}");
        let reader = token_of(&pools, &login("reader.example", "ann")).await;
        assert!(reader.starts_with("reader.example:5432/") && reader != ann, "{reader}");
        assert!(!format!("{pools:?}").contains("Action"), "no token in Debug");
    }

    #[test]
    fn new_aws_credentials_start_a_new_token_and_the_old_ones_sign_no_more() {
        let tokens = IamTokens::default();
        let ann = login("db.example", "ann");
        let first = AwsCredentials::new("AKIDFIRST", "secret-1", Some("session-1".into()));
        let t1 = tokens.token(&ann, "eu-west-1", first.clone()).unwrap();
        assert_eq!(tokens.token(&ann, "eu-west-1", first).unwrap().expose(), t1.expose(), "reused");
        let rotated = AwsCredentials::new("AKIDSECOND", "secret-2", Some("session-2".into()));
        let t2 = tokens.token(&ann, "eu-west-1", rotated).unwrap();
        assert!(t2.expose().contains("AKIDSECOND") && !t1.expose().contains("AKIDSECOND"), "{}", t2.expose());
    }

    #[tokio::test]
    async fn a_secret_pool_needs_an_arn_and_aws_parts_are_named_when_missing() {
        let pools = AwsPoolLogins::from_vars(vars(&[]));
        let err = pools.for_pool(&login("db", "ann"), ServerAuth::Secret, None).unwrap_err();
        assert!(err.to_string().contains("set secret_arn"), "{err}");
        let bare = AwsPoolLogins::from_vars(Arc::new(|_| None));
        let err = bare.for_pool(&login("db", "ann"), ServerAuth::Iam, None).unwrap_err();
        // No region: an IAM pool cannot sign, and says which variable to set.
        assert!(err.to_string().contains("AWS_REGION"), "{err}");
    }
}
