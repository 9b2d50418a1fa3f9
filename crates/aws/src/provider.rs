//! Where AWS credentials come from, in the order the AWS SDKs look: the environment variables (Lambda
//! puts the execution role's there), the container credentials endpoint (ECS tasks, EKS Pod Identity),
//! then the EC2 instance metadata service (IMDSv2, an instance profile). Credentials from an endpoint
//! expire: they are fetched again well before that, and a failed fetch keeps the ones still valid.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::Full;
use serde::Deserialize;
use tokio::sync::Mutex;

use crate::credentials::env_var;
use crate::https::{Endpoint, HttpsClient, Response};
use crate::{AwsCredentials, AwsError};

/// Fetch again when fewer than this remain before the credentials expire. Longer than an IAM token is
/// reused (10 minutes), so a token never outlives the credentials that signed it.
const REFRESH_BEFORE: Duration = Duration::from_secs(15 * 60);
/// But not more often than this while the old ones still work: the endpoints hand out new credentials
/// only some minutes before expiry, and asking each login would flood them.
const MIN_FETCH_INTERVAL: Duration = Duration::from_secs(60);
/// Per request, as the SDKs' default for both endpoints.
const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(2);
/// Lifetime asked for an IMDSv2 session token; one is fetched per credentials fetch.
const IMDS_TOKEN_TTL: &str = "300";
const IMDS_DEFAULT: &str = "http://169.254.169.254";
const ECS_HOST: &str = "http://169.254.170.2";

/// Where the credentials come from.
#[derive(Debug)]
enum Source {
    Fixed(AwsCredentials),
    /// `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` / `_FULL_URI`, with the authorization token's source.
    Container {
        url: String,
        auth: Option<ContainerAuth>,
    },
    /// IMDSv2 at this base URL.
    Imds {
        base: String,
    },
}

#[derive(Debug)]
enum ContainerAuth {
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`: read at every fetch (EKS rotates it).
    File(PathBuf),
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN`.
    Value(String),
}

/// The latest credentials fetched, and when.
#[derive(Debug)]
struct Cached {
    creds: AwsCredentials,
    fetched: SystemTime,
}

/// AWS credentials for signing, kept fresh. Cheap to call: a lock and a clone while the cached credentials
/// have more than 15 minutes left.
#[derive(Debug)]
pub struct CredentialsProvider {
    source: Source,
    http: HttpsClient,
    cached: Mutex<Option<Cached>>,
}

impl CredentialsProvider {
    /// The SDKs' chain over the process environment: see [`CredentialsProvider::from_vars`].
    pub fn from_env() -> Result<Self, AwsError> {
        Self::from_vars(env_var)
    }

    /// The first source `vars` configures: `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` (with
    /// `AWS_SESSION_TOKEN`); else `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` (on `169.254.170.2`) or
    /// `AWS_CONTAINER_CREDENTIALS_FULL_URI`, with `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` or
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN`; else, unless `AWS_EC2_METADATA_DISABLED=true`, the instance
    /// metadata service at `AWS_EC2_METADATA_SERVICE_ENDPOINT` (default `http://169.254.169.254`). Nothing
    /// is fetched here: the first [`CredentialsProvider::credentials`] call does.
    pub fn from_vars(vars: impl Fn(&str) -> Option<String>) -> Result<Self, AwsError> {
        let get = |name: &str| vars(name).filter(|v| !v.is_empty());
        if get("AWS_ACCESS_KEY_ID").is_some() || get("AWS_SECRET_ACCESS_KEY").is_some() {
            return Ok(Self::fixed(AwsCredentials::from_vars(get)?));
        }
        let container = match (get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"), get("AWS_CONTAINER_CREDENTIALS_FULL_URI"))
        {
            (Some(relative), _) => Some(format!("{ECS_HOST}{relative}")),
            (None, Some(full)) => Some(full),
            (None, None) => None,
        };
        if let Some(url) = container {
            check_container_url(&url)?;
            let auth = match (get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"), get("AWS_CONTAINER_AUTHORIZATION_TOKEN")) {
                (Some(file), _) => Some(ContainerAuth::File(file.into())),
                (None, Some(value)) => Some(ContainerAuth::Value(value)),
                (None, None) => None,
            };
            return Ok(Self::with_source(Source::Container { url, auth }));
        }
        if get("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Err(AwsError::MissingEnv {
                name: "AWS_ACCESS_KEY_ID or AWS_CONTAINER_CREDENTIALS_FULL_URI (AWS_EC2_METADATA_DISABLED is true)",
                purpose: "AWS credentials",
            });
        }
        let base = get("AWS_EC2_METADATA_SERVICE_ENDPOINT").unwrap_or_else(|| IMDS_DEFAULT.to_owned());
        let base = base.trim_end_matches('/').to_owned();
        Endpoint::parse(&base).map_err(|e| AwsError::InvalidSetting {
            what: "AWS_EC2_METADATA_SERVICE_ENDPOINT",
            reason: e.to_string(),
        })?;
        Ok(Self::with_source(Source::Imds { base }))
    }

    /// Always these credentials.
    pub fn fixed(creds: AwsCredentials) -> Self {
        Self::with_source(Source::Fixed(creds))
    }

    fn with_source(source: Source) -> Self {
        CredentialsProvider { source, http: HttpsClient::new("AWS credentials endpoint"), cached: Mutex::new(None) }
    }

    /// Where the credentials come from, for logs and `pgmux check`.
    pub fn source(&self) -> &'static str {
        match self.source {
            Source::Fixed(_) => "environment variables",
            Source::Container { .. } => "container credentials endpoint",
            Source::Imds { .. } => "EC2 instance metadata (IMDSv2)",
        }
    }

    /// Credentials to sign with now.
    pub async fn credentials(&self) -> Result<AwsCredentials, AwsError> {
        self.credentials_at(SystemTime::now()).await
    }

    async fn credentials_at(&self, now: SystemTime) -> Result<AwsCredentials, AwsError> {
        if let Source::Fixed(creds) = &self.source {
            return Ok(creds.clone());
        }
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.as_ref() {
            let left = remaining(&c.creds, now);
            let recent = now.duration_since(c.fetched).is_ok_and(|age| age < MIN_FETCH_INTERVAL);
            if left > REFRESH_BEFORE || (recent && !left.is_zero()) {
                return Ok(c.creds.clone());
            }
        }
        match self.fetch().await {
            Ok(creds) => {
                *cached = Some(Cached { creds: creds.clone(), fetched: now });
                Ok(creds)
            }
            Err(e) => match cached.as_mut() {
                // Still valid: keep them, and try again in a minute.
                Some(c) if !remaining(&c.creds, now).is_zero() => {
                    tracing::warn!(source = self.source(), error = %e, "could not renew AWS credentials; using the current ones");
                    c.fetched = now;
                    Ok(c.creds.clone())
                }
                _ => Err(e),
            },
        }
    }

    async fn fetch(&self) -> Result<AwsCredentials, AwsError> {
        match &self.source {
            Source::Fixed(creds) => Ok(creds.clone()),
            Source::Container { url, auth } => {
                let token = match auth {
                    None => None,
                    Some(ContainerAuth::Value(v)) => Some(v.clone()),
                    Some(ContainerAuth::File(path)) => Some(
                        std::fs::read_to_string(path)
                            .map_err(|e| AwsError::InvalidSetting {
                                what: "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                                reason: format!("cannot read {}: {e}", path.display()),
                            })?
                            .trim()
                            .to_owned(),
                    ),
                };
                let body = self.call(Method::GET, url, token.map(|t| ("authorization", t))).await?;
                parse_credentials(&body)
            }
            Source::Imds { base } => {
                let token_url = format!("{base}/latest/api/token");
                let session = self
                    .call(
                        Method::PUT,
                        &token_url,
                        Some(("x-aws-ec2-metadata-token-ttl-seconds", IMDS_TOKEN_TTL.into())),
                    )
                    .await?;
                let session = String::from_utf8_lossy(&session).trim().to_owned();
                let header = || Some(("x-aws-ec2-metadata-token", session.clone()));
                let roles_url = format!("{base}/latest/meta-data/iam/security-credentials/");
                let roles = self.call(Method::GET, &roles_url, header()).await?;
                let roles = String::from_utf8_lossy(&roles);
                let Some(role) = roles.lines().map(str::trim).find(|l| !l.is_empty()) else {
                    return Err(AwsError::InvalidResponse {
                        service: "EC2 instance metadata",
                        reason: "no IAM role is attached to this instance (no instance profile)".into(),
                    });
                };
                let body = self.call(Method::GET, &format!("{roles_url}{role}"), header()).await?;
                parse_credentials(&body)
            }
        }
    }

    /// One request; the body of a 200 response.
    async fn call(&self, method: Method, url: &str, header: Option<(&str, String)>) -> Result<Bytes, AwsError> {
        let endpoint = Endpoint::parse(url)
            .map_err(|e| AwsError::InvalidSetting { what: "AWS credentials endpoint", reason: e.to_string() })?;
        let mut request =
            Request::builder().method(method).uri(endpoint.path.as_str()).header("host", &endpoint.authority);
        if let Some((name, value)) = header {
            request = request.header(name, value);
        }
        let request = request.body(Full::new(Bytes::new())).map_err(|e| AwsError::InvalidSetting {
            what: "AWS credentials endpoint",
            reason: format!("cannot build a request to {url}: {e}"),
        })?;
        let Response { status, body, .. } = self.http.send(&endpoint, request, ENDPOINT_TIMEOUT).await?;
        if status != 200 {
            return Err(AwsError::InvalidResponse {
                service: "AWS credentials endpoint",
                reason: format!(
                    "{url} answered HTTP {status}: {}",
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                ),
            });
        }
        Ok(body)
    }
}

/// Time left before `creds` expire (`MAX` for credentials without an expiry).
fn remaining(creds: &AwsCredentials, now: SystemTime) -> Duration {
    match creds.expiry() {
        None => Duration::MAX,
        Some(at) => at.duration_since(now).unwrap_or(Duration::ZERO),
    }
}

/// Plain HTTP only to addresses on the machine or the task's own link-local endpoints, as the SDKs allow.
fn check_container_url(url: &str) -> Result<(), AwsError> {
    let endpoint = Endpoint::parse(url)
        .map_err(|e| AwsError::InvalidSetting { what: "AWS_CONTAINER_CREDENTIALS_FULL_URI", reason: e.to_string() })?;
    let host = endpoint.host();
    let local = host == "localhost"
        || host == "169.254.170.2"
        || host == "169.254.170.23"
        || host.eq_ignore_ascii_case("fd00:ec2::23")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if endpoint.https || local {
        Ok(())
    } else {
        Err(AwsError::InvalidSetting {
            what: "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            reason: format!(
                "{url} is plain HTTP to {host}: only https://, loopback, 169.254.170.2 and 169.254.170.23 are allowed"
            ),
        })
    }
}

/// The JSON both endpoints answer with.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct EndpointCredentials {
    /// IMDS says `Success`; the container endpoint leaves it out.
    code: Option<String>,
    access_key_id: String,
    secret_access_key: String,
    token: Option<String>,
    expiration: Option<String>,
}

fn parse_credentials(body: &[u8]) -> Result<AwsCredentials, AwsError> {
    let invalid = |reason: String| AwsError::InvalidResponse { service: "AWS credentials endpoint", reason };
    let parsed: EndpointCredentials =
        serde_json::from_slice(body).map_err(|e| invalid(format!("not the credentials document: {e}")))?;
    if let Some(code) = parsed.code.as_deref().filter(|c| *c != "Success") {
        return Err(invalid(format!("the endpoint reported {code:?}")));
    }
    let expiry = match parsed.expiration.as_deref() {
        None => None,
        Some(text) => {
            Some(parse_rfc3339(text).ok_or_else(|| invalid(format!("Expiration {text:?} is not a date-time")))?)
        }
    };
    let creds = AwsCredentials::new(parsed.access_key_id, parsed.secret_access_key, parsed.token);
    Ok(match expiry {
        Some(at) => creds.with_expiry(at),
        None => creds,
    })
}

fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let parsed = aws_smithy_types::DateTime::from_str(text, aws_smithy_types::date_time::Format::DateTime).ok()?;
    SystemTime::try_from(parsed).ok()
}

#[cfg(test)]
mod tests;
