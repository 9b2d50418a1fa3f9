//! RDS IAM database authentication: the token that stands in for a password is a SigV4-presigned URL,
//! made locally from the credentials (no AWS call). [`TokenCache`] keeps one token for a while so that a
//! burst of new server connections costs one signature, not one each.

use std::borrow::Cow;
use std::fmt;
use std::time::{Duration, SystemTime};

use aws_sigv4::http_request::{SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign};
use aws_sigv4::sign::v4;
use parking_lot::Mutex;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use pgmux_secret::Secret;

use crate::credentials::validate_region;
use crate::{AwsCredentials, AwsError};

/// How long RDS accepts a token (the maximum it allows).
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(900);

/// How long [`TokenCache`] hands out the same token: a third of its life is left as margin for clock skew
/// and for a connection attempt that starts just before renewal.
pub const TOKEN_REUSE: Duration = Duration::from_secs(600);
/// A cached token is not handed out when its signing credentials expire sooner than this.
const CREDS_MARGIN: Duration = Duration::from_secs(60);

const SERVICE: &str = "rds-db";

/// What SigV4 (and botocore's `percent_encode`) leaves unescaped: letters, digits and `-_.~`.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// An RDS IAM auth token for `user` at `host:port`, valid for 15 minutes from `now`.
///
/// It is a SigV4-presigned `GET https://host:port/?Action=connect&DBUser=user` for the service `rds-db`
/// without the scheme, parameter for parameter what botocore's `generate_db_auth_token` returns. `host` must
/// be the endpoint the connection goes to (instance, cluster, reader or proxy endpoint). Send it as the
/// cleartext password, over TLS only. It is a [`Secret`]: anyone holding it logs in as `user` until it expires.
pub fn rds_auth_token(
    host: &str,
    port: u16,
    user: &str,
    region: &str,
    creds: &AwsCredentials,
    now: SystemTime,
) -> Result<Secret, AwsError> {
    validate_host(host)?;
    validate_region(region)?;
    if user.is_empty() {
        return Err(AwsError::InvalidSetting { what: "database user", reason: "the user name is empty".into() });
    }

    let query = format!("Action=connect&DBUser={}", utf8_percent_encode(user, UNRESERVED));
    let url = format!("https://{host}:{port}/?{query}");

    let identity = creds.signing_credentials().into();
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(TOKEN_LIFETIME);
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SERVICE)
        .time(now)
        .settings(settings)
        .build()
        .map_err(|e| signing_error(&e))?
        .into();
    let request = SignableRequest::new("GET", url.as_str(), std::iter::empty(), SignableBody::Bytes(&[]))
        .map_err(|e| signing_error(&e))?;
    let (instructions, _signature) = sign(request, &params).map_err(|e| signing_error(&e))?.into_parts();
    let (_headers, signing_params) = instructions.into_parts();

    Ok(Secret::new(assemble_token(host, port, &query, signing_params)))
}

/// `host:port/?Action=...&DBUser=...&X-Amz-...`, with the signature last as botocore writes it (aws-sigv4
/// puts the session token after the signature; the order does not change what RDS verifies, but matching
/// botocore byte for byte makes tokens comparable in tests and logs).
fn assemble_token(host: &str, port: u16, query: &str, params: Vec<(&'static str, Cow<'static, str>)>) -> String {
    let mut token = format!("{host}:{port}/?{query}");
    let mut signature = None;
    for (name, value) in params {
        if name == "X-Amz-Signature" {
            signature = Some(value);
            continue;
        }
        token.push('&');
        token.push_str(name);
        token.push('=');
        token.extend(utf8_percent_encode(&value, UNRESERVED));
    }
    if let Some(signature) = signature {
        token.push_str("&X-Amz-Signature=");
        token.push_str(&signature);
    }
    token
}

fn signing_error(error: &(dyn std::error::Error + 'static)) -> AwsError {
    AwsError::Signing { service: SERVICE, reason: crate::error::chain(error) }
}

/// A DNS name or IP address, nothing that could change the shape of the signed URL.
fn validate_host(host: &str) -> Result<(), AwsError> {
    let ok = !host.is_empty()
        && host.len() <= 253
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'[' | b']'));
    if ok {
        Ok(())
    } else {
        Err(AwsError::InvalidSetting {
            what: "database host for IAM authentication",
            reason: format!("{host:?} is not a host name or IP address"),
        })
    }
}

type Clock = Box<dyn Fn() -> SystemTime + Send + Sync>;

/// Hands out IAM auth tokens for new server connections: one token is reused until it is
/// [`TOKEN_REUSE`] (10 minutes) old, then the next call makes a new one. Tokens live 15 minutes and only
/// matter while a connection authenticates, so established connections are unaffected by renewal.
///
/// Thread-safe; a cached call is a mutex lock and a string clone. Age is measured on the wall clock, which
/// (unlike a monotonic clock) keeps running while a classic Lambda environment is frozen, and is what RDS
/// checks the token against.
pub struct TokenCache {
    host: String,
    port: u16,
    user: String,
    region: String,
    creds: AwsCredentials,
    clock: Clock,
    current: Mutex<Option<(Secret, SystemTime)>>,
}

impl TokenCache {
    /// A cache for tokens to `host:port` as `user`, signed with `creds` for `region`.
    pub fn new(host: String, port: u16, user: String, region: String, creds: AwsCredentials) -> Self {
        Self::with_clock(host, port, user, region, creds, SystemTime::now)
    }

    /// [`TokenCache::new`] with the time taken from `clock` (for tests).
    pub fn with_clock(
        host: String,
        port: u16,
        user: String,
        region: String,
        creds: AwsCredentials,
        clock: impl Fn() -> SystemTime + Send + Sync + 'static,
    ) -> Self {
        TokenCache { host, port, user, region, creds, clock: Box::new(clock), current: Mutex::new(None) }
    }

    /// A token for a new connection: the cached one while it is younger than 10 minutes, else a new one.
    pub fn token(&self) -> Result<Secret, AwsError> {
        let now = (self.clock)();
        // Signing takes microseconds: doing it under the lock keeps a burst of callers from all signing.
        let mut current = self.current.lock();
        if let Some((token, made_at)) = current.as_ref() {
            // A clock that went backwards (made_at in the future) also renews: the age is unknown.
            // Nor is a token kept into the last minute of the temporary credentials that signed it: RDS
            // refuses it once they have expired.
            let creds_ok =
                self.creds.expiry().is_none_or(|end| end.duration_since(now).is_ok_and(|left| left > CREDS_MARGIN));
            if creds_ok && now.duration_since(*made_at).is_ok_and(|age| age < TOKEN_REUSE) {
                return Ok(token.clone());
            }
        }
        let token = rds_auth_token(&self.host, self.port, &self.user, &self.region, &self.creds, now)?;
        *current = Some((token.clone(), now));
        Ok(token)
    }
}

impl fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenCache")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("region", &self.region)
            .field("creds", &self.creds)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn creds(token: Option<&str>) -> AwsCredentials {
        AwsCredentials::new("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", token.map(Into::into))
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn token_shape() {
        let token = rds_auth_token(
            "db.cluster-abc.us-east-1.rds.amazonaws.com",
            5432,
            "app_user",
            "us-east-1",
            &creds(None),
            at(1_700_000_000),
        )
        .unwrap();
        let prefix = "db.cluster-abc.us-east-1.rds.amazonaws.com:5432/?Action=connect&DBUser=app_user\
            &X-Amz-Algorithm=AWS4-HMAC-SHA256\
            &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20231114%2Fus-east-1%2Frds-db%2Faws4_request\
            &X-Amz-Date=20231114T221320Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host&X-Amz-Signature=";
        let token = token.expose();
        assert!(token.starts_with(prefix), "{token}");
        let signature = &token[prefix.len()..];
        assert_eq!(signature.len(), 64);
        assert!(signature.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(!token.contains("wJalr"));
    }

    #[test]
    fn session_token_is_encoded_before_the_signature() {
        let token =
            rds_auth_token("h", 5432, "u", "eu-west-1", &creds(Some("IQo+ab/cd==")), at(1_700_000_000)).unwrap();
        let token = token.expose();
        assert!(token.contains("&X-Amz-Security-Token=IQo%2Bab%2Fcd%3D%3D&X-Amz-Signature="), "{token}");
    }

    #[test]
    fn user_names_are_percent_encoded() {
        let token = rds_auth_token("h", 5432, "app user+@x", "eu-west-1", &creds(None), at(0)).unwrap();
        let token = token.expose();
        assert!(token.starts_with("h:5432/?Action=connect&DBUser=app%20user%2B%40x&"), "{token}");
    }

    #[test]
    fn bad_inputs_are_rejected() {
        let c = creds(None);
        assert!(rds_auth_token("", 5432, "u", "us-east-1", &c, at(0)).is_err());
        assert!(rds_auth_token("h/evil?", 5432, "u", "us-east-1", &c, at(0)).is_err());
        assert!(rds_auth_token("h", 5432, "", "us-east-1", &c, at(0)).is_err());
        assert!(rds_auth_token("h", 5432, "u", "US EAST", &c, at(0)).is_err());
    }

    #[test]
    fn cache_reuses_for_ten_minutes_then_renews() {
        let now = Arc::new(AtomicU64::new(1_700_000_000));
        let clock = now.clone();
        let cache = TokenCache::with_clock("h".into(), 5432, "u".into(), "us-east-1".into(), creds(None), move || {
            at(clock.load(Ordering::SeqCst))
        });
        let first = cache.token().unwrap();
        now.fetch_add(599, Ordering::SeqCst);
        assert_eq!(cache.token().unwrap(), first, "reused before 10 minutes");
        now.fetch_add(1, Ordering::SeqCst);
        let second = cache.token().unwrap();
        assert_ne!(second, first, "renewed at 10 minutes");
        assert!(second.expose().contains("X-Amz-Date=20231114T222320Z"), "{}", second.expose());
        now.fetch_add(60, Ordering::SeqCst);
        assert_eq!(cache.token().unwrap(), second);
        now.fetch_sub(3600, Ordering::SeqCst);
        assert_ne!(cache.token().unwrap(), second, "a clock that went backwards renews");
    }

    #[test]
    fn no_token_is_reused_into_the_last_minute_of_its_credentials() {
        let now = Arc::new(AtomicU64::new(1_700_000_000));
        let clock = now.clone();
        let expiring = creds(Some("session")).with_expiry(at(1_700_000_300));
        let cache = TokenCache::with_clock("h".into(), 5432, "u".into(), "us-east-1".into(), expiring, move || {
            at(clock.load(Ordering::SeqCst))
        });
        let first = cache.token().unwrap();
        now.fetch_add(239, Ordering::SeqCst);
        assert_eq!(cache.token().unwrap(), first, "61 s left: reused");
        now.fetch_add(1, Ordering::SeqCst);
        assert_ne!(cache.token().unwrap(), first, "60 s left: signed again");
    }

    #[test]
    fn cache_debug_hides_the_secret() {
        let cache = TokenCache::new("h".into(), 5432, "u".into(), "us-east-1".into(), creds(Some("SESSIONTOKENVALUE")));
        let debug = format!("{cache:?}");
        assert!(!debug.contains("wJalr") && !debug.contains("SESSIONTOKENVALUE"), "{debug}");
    }
}
