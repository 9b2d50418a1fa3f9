//! Secrets Manager `GetSecretValue`, for database credentials kept in an RDS-format secret (and re-read
//! after a rotation). One JSON-1.1 call signed with aws-sigv4, sent with the crate's small HTTPS client.

mod db_secret;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use serde_json::Value;

pub use db_secret::{DbSecret, parse_db_secret};

use crate::credentials::{env_var, validate_region};
use crate::error::{chain, snippet};
use crate::https::{Endpoint, EndpointError, HttpsClient, Response};
use crate::{AwsCredentials, AwsError, CredentialsProvider, region_from_vars};

const SERVICE: &str = "Secrets Manager";
const SIGNING_NAME: &str = "secretsmanager";
const TARGET_GET_SECRET_VALUE: &str = "secretsmanager.GetSecretValue";
const CONTENT_TYPE: &str = "application/x-amz-json-1.1";

/// Per attempt, connect to last byte. The SDKs' default is similar; Lambda Init should not hang on it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Attempts per call for retryable failures (network, throttling, 5xx), as the AWS SDKs' standard mode.
const MAX_ATTEMPTS: u32 = 3;

/// A Secrets Manager client for one endpoint and region.
#[derive(Debug)]
pub struct SecretsClient {
    endpoint: Result<Endpoint, EndpointError>,
    endpoint_url: String,
    region: String,
    creds: Arc<CredentialsProvider>,
    timeout: Duration,
    http: HttpsClient,
}

impl SecretsClient {
    /// A client configured from the environment: credentials and region as [`CredentialsProvider::from_env`] and
    /// [`crate::region_from_env`], endpoint from `AWS_ENDPOINT_URL_SECRETS_MANAGER`, else `AWS_ENDPOINT_URL`,
    /// else `https://secretsmanager.{region}.amazonaws.com` (`-fips` with `AWS_USE_FIPS_ENDPOINT=true`,
    /// `.com.cn` in China). `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true` ignores the endpoint variables.
    pub fn from_env() -> Result<Self, AwsError> {
        Self::from_vars(env_var)
    }

    /// [`SecretsClient::from_env`] reading through `vars` instead of the process environment.
    pub fn from_vars(vars: impl Fn(&str) -> Option<String>) -> Result<Self, AwsError> {
        let provider = Arc::new(CredentialsProvider::from_vars(&vars)?);
        Self::from_vars_with(vars, provider)
    }

    /// [`SecretsClient::from_vars`] with credentials from `creds` (shared with other callers).
    pub fn from_vars_with(
        vars: impl Fn(&str) -> Option<String>,
        creds: Arc<CredentialsProvider>,
    ) -> Result<Self, AwsError> {
        let get = |name: &str| vars(name).filter(|v| !v.is_empty());
        let region = region_from_vars(get)?;
        let is_true = |name: &str| get(name).is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let configured = if is_true("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS") {
            None
        } else {
            get("AWS_ENDPOINT_URL_SECRETS_MANAGER").or_else(|| get("AWS_ENDPOINT_URL"))
        };
        let endpoint = configured.unwrap_or_else(|| default_endpoint(&region, is_true("AWS_USE_FIPS_ENDPOINT")));
        let client = Self::with_provider(endpoint, region, creds);
        if let Err(reason) = &client.endpoint {
            return Err(AwsError::InvalidSetting { what: "Secrets Manager endpoint", reason: reason.to_string() });
        }
        Ok(client)
    }

    /// A client for `endpoint` (a URL; `http://` is accepted for local stand-ins such as moto). An unusable
    /// endpoint or region is reported by the first call.
    pub fn new(endpoint: String, region: String, creds: AwsCredentials) -> Self {
        Self::with_provider(endpoint, region, Arc::new(CredentialsProvider::fixed(creds)))
    }

    /// [`SecretsClient::new`] with credentials from `creds`, fetched for each call.
    pub fn with_provider(endpoint: String, region: String, creds: Arc<CredentialsProvider>) -> Self {
        let parsed = Endpoint::parse(&endpoint);
        SecretsClient {
            endpoint: parsed,
            endpoint_url: endpoint,
            region,
            creds,
            timeout: DEFAULT_TIMEOUT,
            http: HttpsClient::new(SERVICE),
        }
    }

    /// Sets the time limit per attempt (default [`DEFAULT_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The endpoint URL requests go to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint_url
    }

    /// The current value of an RDS-format secret (`secret_id` is a name or an ARN).
    pub async fn get_db_secret(&self, secret_id: &str) -> Result<DbSecret, AwsError> {
        parse_db_secret(&self.get_secret_string(secret_id).await?)
    }

    /// The current `SecretString` of any secret. Binary secrets are refused with an error.
    pub async fn get_secret_string(&self, secret_id: &str) -> Result<String, AwsError> {
        let endpoint = self.endpoint.as_ref().map_err(|reason| AwsError::InvalidSetting {
            what: "Secrets Manager endpoint",
            reason: reason.to_string(),
        })?;
        validate_region(&self.region)?;
        let body = serde_json::json!({ "SecretId": secret_id }).to_string();

        let mut attempt = 1;
        let response = loop {
            let creds = self.creds.credentials().await?;
            let request = self.signed_request(endpoint, &creds, TARGET_GET_SECRET_VALUE, &body, SystemTime::now())?;
            let result = self.http.send(endpoint, request, self.timeout).await.and_then(check_status);
            match result {
                Err(e) if e.is_retryable() && attempt < MAX_ATTEMPTS => {
                    tracing::debug!(attempt, error = %e, "Secrets Manager call failed; retrying");
                    pgmux_timer::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                    attempt += 1;
                }
                other => break other?,
            }
        };
        secret_string(&response.body)
    }

    /// A signed JSON-1.1 request for `target` at time `now`.
    fn signed_request(
        &self,
        endpoint: &Endpoint,
        creds: &AwsCredentials,
        target: &str,
        body: &str,
        now: SystemTime,
    ) -> Result<Request<Full<Bytes>>, AwsError> {
        let signing_error =
            |e: &(dyn std::error::Error + 'static)| AwsError::Signing { service: SIGNING_NAME, reason: chain(e) };
        let url = endpoint.request_url();
        let headers = [("host", endpoint.authority.as_str()), ("content-type", CONTENT_TYPE), ("x-amz-target", target)];
        let identity = creds.signing_credentials().into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(SIGNING_NAME)
            .time(now)
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| signing_error(&e))?
            .into();
        let signable =
            SignableRequest::new("POST", url.as_str(), headers.into_iter(), SignableBody::Bytes(body.as_bytes()))
                .map_err(|e| signing_error(&e))?;
        let (instructions, _signature) = sign(signable, &params).map_err(|e| signing_error(&e))?.into_parts();

        let mut builder = Request::post(endpoint.path.as_str())
            .header("host", endpoint.authority.as_str())
            .header("content-type", CONTENT_TYPE)
            .header("x-amz-target", target)
            .header("user-agent", concat!("pgmux/", env!("CARGO_PKG_VERSION")));
        for (name, value) in instructions.headers() {
            builder = builder.header(name, value);
        }
        builder.body(Full::new(Bytes::from(body.to_string()))).map_err(|e| AwsError::Signing {
            service: SIGNING_NAME,
            reason: format!("the signed request is not valid HTTP: {e}"),
        })
    }
}

/// `https://secretsmanager[-fips].{region}.amazonaws.com[.cn]`.
fn default_endpoint(region: &str, fips: bool) -> String {
    let suffix = if region.starts_with("cn-") { "amazonaws.com.cn" } else { "amazonaws.com" };
    let fips = if fips { "-fips" } else { "" };
    format!("https://secretsmanager{fips}.{region}.{suffix}")
}

/// A 2xx response as is; anything else as [`AwsError::Service`] with the AWS error type and message.
fn check_status(response: Response) -> Result<Response, AwsError> {
    if (200..300).contains(&response.status) {
        return Ok(response);
    }
    let json: Option<Value> = serde_json::from_slice(&response.body).ok();
    let field = |names: &[&str]| {
        names.iter().find_map(|n| json.as_ref()?.get(n)?.as_str().map(str::to_string)).filter(|s| !s.is_empty())
    };
    // The JSON protocols put the type in `__type` (sometimes `namespace#Type`) and/or in the
    // `x-amzn-ErrorType` header (sometimes `Type:http://...`).
    let header = response.headers.get("x-amzn-errortype").and_then(|v| v.to_str().ok()).map(str::to_string);
    let raw_type = field(&["__type", "code", "Code"]).or(header).unwrap_or_else(|| "Unknown".into());
    let error_type = raw_type.rsplit('#').next().unwrap_or(&raw_type);
    let error_type = error_type.split(':').next().unwrap_or(error_type).to_string();
    let message = field(&["message", "Message", "errorMessage"]).unwrap_or_else(|| snippet(&response.body, 300));
    Err(AwsError::Service { service: SERVICE, status: response.status, error_type, message })
}

fn secret_string(body: &[u8]) -> Result<String, AwsError> {
    let invalid = |reason: String| AwsError::InvalidResponse { service: SERVICE, reason };
    // Not `snippet(body)` in these messages: the body holds the secret.
    let json: Value = serde_json::from_slice(body).map_err(|e| {
        invalid(format!("GetSecretValue returned invalid JSON (at line {}, column {})", e.line(), e.column()))
    })?;
    match json.get("SecretString") {
        Some(Value::String(s)) => Ok(s.clone()),
        _ if json.get("SecretBinary").is_some() => {
            Err(invalid("the secret is binary (SecretBinary); a database secret must be a SecretString".into()))
        }
        _ => Err(invalid("GetSecretValue returned no SecretString".into())),
    }
}

#[cfg(test)]
mod tests;
