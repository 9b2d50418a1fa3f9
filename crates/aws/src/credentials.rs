//! Credentials and region from the standard AWS environment variables, which is how Lambda hands them to
//! an extension (the function's execution role). Every `*_from_env` has a `*_from_vars` twin that reads
//! from a lookup function instead, so tests and the binary's config overlay never touch the process env.

use std::fmt;

use pgmux_secret::Secret;

use crate::AwsError;

/// AWS credentials: an access key pair and, for temporary credentials (Lambda, STS), a session token.
///
/// `Debug` shows the access key id only; the secret key and the token print as [`Secret`]s do, `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct AwsCredentials {
    inner: aws_credential_types::Credentials,
}

impl AwsCredentials {
    /// Credentials from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and (optional) `AWS_SESSION_TOKEN`.
    pub fn from_env() -> Result<Self, AwsError> {
        Self::from_vars(env_var)
    }

    /// [`AwsCredentials::from_env`] reading through `vars` instead of the process environment.
    /// An empty value counts as unset.
    pub fn from_vars(vars: impl Fn(&str) -> Option<String>) -> Result<Self, AwsError> {
        let get = |name: &str| vars(name).filter(|v| !v.is_empty());
        let access_key_id = get("AWS_ACCESS_KEY_ID")
            .ok_or(AwsError::MissingEnv { name: "AWS_ACCESS_KEY_ID", purpose: "AWS credentials" })?;
        let secret_access_key = get("AWS_SECRET_ACCESS_KEY")
            .ok_or(AwsError::MissingEnv { name: "AWS_SECRET_ACCESS_KEY", purpose: "AWS credentials" })?;
        Ok(Self::new(access_key_id, secret_access_key, get("AWS_SESSION_TOKEN")))
    }

    /// Credentials from explicit values.
    pub fn new(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Self {
        let inner = aws_credential_types::Credentials::new(
            access_key_id.into(),
            secret_access_key.into(),
            session_token,
            None,
            "pgmux",
        );
        AwsCredentials { inner }
    }

    /// The same credentials, valid until `at`.
    pub fn with_expiry(mut self, at: std::time::SystemTime) -> Self {
        *self.inner.expiry_mut() = Some(at);
        self
    }

    /// When temporary credentials expire (`None`: they do not, or nobody said).
    pub fn expiry(&self) -> Option<std::time::SystemTime> {
        self.inner.expiry()
    }

    /// The access key id (not a secret; handy in logs).
    pub fn access_key_id(&self) -> &str {
        self.inner.access_key_id()
    }

    /// Whether these are temporary credentials carrying a session token.
    pub fn has_session_token(&self) -> bool {
        self.inner.session_token().is_some()
    }

    /// The credentials as the SigV4 signer takes them (`.into()` an `Identity`).
    pub(crate) fn signing_credentials(&self) -> aws_credential_types::Credentials {
        self.inner.clone()
    }
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.inner.access_key_id())
            .field("secret_access_key", &Secret::new(self.inner.secret_access_key()))
            .field("session_token", &self.inner.session_token().map(Secret::new))
            .finish()
    }
}

/// The region from `AWS_REGION` (set by Lambda), else `AWS_DEFAULT_REGION`.
pub fn region_from_env() -> Result<String, AwsError> {
    region_from_vars(env_var)
}

/// [`region_from_env`] reading through `vars`. The region must look like one (`us-east-1`, `cn-north-1`):
/// it ends up in host names and signatures, where a typo otherwise surfaces as a confusing DNS or
/// signature error.
pub fn region_from_vars(vars: impl Fn(&str) -> Option<String>) -> Result<String, AwsError> {
    let get = |name: &str| vars(name).filter(|v| !v.is_empty());
    let region = get("AWS_REGION")
        .or_else(|| get("AWS_DEFAULT_REGION"))
        .ok_or(AwsError::MissingEnv { name: "AWS_REGION or AWS_DEFAULT_REGION", purpose: "the AWS region" })?;
    validate_region(&region)?;
    Ok(region)
}

pub(crate) fn validate_region(region: &str) -> Result<(), AwsError> {
    let ok = !region.is_empty()
        && region.len() <= 64
        && region.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !region.starts_with('-')
        && !region.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(AwsError::InvalidSetting {
            what: "AWS region",
            reason: format!("{region:?} is not a region name like us-east-1"),
        })
    }
}

/// The process environment, with empty values treated as unset (as the AWS SDKs do).
pub(crate) fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn credentials_from_vars() {
        let c = AwsCredentials::from_vars(vars(&[
            ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
            ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
            ("AWS_SESSION_TOKEN", "IQoJb3JpZ2luX2VjEXAMPLETOKEN"),
        ]))
        .unwrap();
        assert_eq!(c.access_key_id(), "AKIDEXAMPLE");
        assert!(c.has_session_token());

        let debug = format!("{c:?}");
        assert!(debug.contains("AKIDEXAMPLE"));
        assert!(!debug.contains("wJalr"), "{debug}");
        assert!(!debug.contains("IQoJ"), "{debug}");
        assert!(debug.contains("secret_access_key: Secret(***), session_token: Some(Secret(***))"), "{debug}");

        let no_token = AwsCredentials::from_vars(vars(&[
            ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_SESSION_TOKEN", ""),
        ]))
        .unwrap();
        assert!(!no_token.has_session_token());
    }

    #[test]
    fn missing_credentials_name_the_variable() {
        let err = AwsCredentials::from_vars(vars(&[("AWS_ACCESS_KEY_ID", "AKID")])).unwrap_err();
        assert!(err.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{err}");
        let err = AwsCredentials::from_vars(vars(&[("AWS_ACCESS_KEY_ID", "")])).unwrap_err();
        assert!(err.to_string().contains("AWS_ACCESS_KEY_ID"), "{err}");
    }

    #[test]
    fn region_precedence_and_validation() {
        let both = vars(&[("AWS_REGION", "eu-west-1"), ("AWS_DEFAULT_REGION", "us-east-1")]);
        assert_eq!(region_from_vars(both).unwrap(), "eu-west-1");
        assert_eq!(region_from_vars(vars(&[("AWS_DEFAULT_REGION", "us-east-1")])).unwrap(), "us-east-1");
        assert_eq!(
            region_from_vars(vars(&[("AWS_REGION", ""), ("AWS_DEFAULT_REGION", "cn-north-1")])).unwrap(),
            "cn-north-1"
        );
        let err = region_from_vars(vars(&[])).unwrap_err();
        assert!(err.to_string().contains("AWS_REGION or AWS_DEFAULT_REGION"), "{err}");
        let err = region_from_vars(vars(&[("AWS_REGION", "us-east-1.evil.com/")])).unwrap_err();
        assert!(matches!(err, AwsError::InvalidSetting { .. }), "{err}");
    }
}
