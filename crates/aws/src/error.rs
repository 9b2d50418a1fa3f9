//! One error type for everything AWS-facing, worded for the person who has to fix the setup.
//!
//! No variant ever carries a secret: not a password from a secret, not a secret access key, not a session
//! token, not an IAM auth token. Values that come from outside and may be sensitive are named, never shown.

use std::time::Duration;

/// What went wrong talking to AWS or reading AWS settings.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AwsError {
    /// A required environment variable is unset or empty.
    #[error("environment variable {name} is not set ({purpose})")]
    MissingEnv {
        /// The variable (or the variables, in order of precedence, joined with " or ").
        name: &'static str,
        /// What it is needed for.
        purpose: &'static str,
    },

    /// A setting (host name, endpoint URL, Runtime API address, ...) cannot be used as given.
    #[error("invalid {what}: {reason}")]
    InvalidSetting {
        /// Which setting.
        what: &'static str,
        /// Why, including the offending value when it is not sensitive.
        reason: String,
    },

    /// SigV4 signing failed (in practice: a malformed region, host or credential).
    #[error("cannot sign the {service} request: {reason}")]
    Signing {
        /// The signing name (`rds-db`, `secretsmanager`).
        service: &'static str,
        /// The signer's explanation.
        reason: String,
    },

    /// The request never got an HTTP answer: DNS, TCP, TLS or a broken connection.
    #[error("cannot reach {service} at {endpoint}: {reason}")]
    Transport {
        /// The AWS service (`Secrets Manager`, `the Lambda Extensions API`).
        service: &'static str,
        /// The URL or address that was tried.
        endpoint: String,
        /// The underlying error, with its causes.
        reason: String,
    },

    /// No answer in time.
    #[error("{service} at {endpoint} did not answer within {timeout:?}")]
    Timeout {
        /// The AWS service.
        service: &'static str,
        /// The URL or address that was tried.
        endpoint: String,
        /// The limit that ran out.
        timeout: Duration,
    },

    /// The service answered with an error, e.g. HTTP 400 `ResourceNotFoundException`.
    #[error("{service} answered HTTP {status} {error_type}: {message}")]
    Service {
        /// The AWS service.
        service: &'static str,
        /// The HTTP status code.
        status: u16,
        /// The AWS error type without its namespace (`ResourceNotFoundException`, `AccessDeniedException`, ...),
        /// or `Unknown` when the answer did not say.
        error_type: String,
        /// The service's message.
        message: String,
    },

    /// The service answered 2xx, but not with something this crate understands.
    #[error("unexpected answer from {service}: {reason}")]
    InvalidResponse {
        /// The AWS service.
        service: &'static str,
        /// What was wrong with it.
        reason: String,
    },

    /// A database secret is not in the RDS JSON format. Names the field; never echoes a value.
    #[error("database secret: {problem}")]
    InvalidSecret {
        /// The field at fault (`password`, `port`, ...), or `""` for the document as a whole.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },

    /// A Lambda Extensions API call was refused (for instance 403 `Extension.InvalidEventType`).
    #[error("the Lambda Extensions API refused {operation}: HTTP {status} {error_type}: {message}")]
    Extension {
        /// `register`, `event/next`, `init/error`.
        operation: &'static str,
        /// The HTTP status code.
        status: u16,
        /// Lambda's `errorType`, or `Unknown`.
        error_type: String,
        /// Lambda's `errorMessage`, or the start of the body.
        message: String,
    },

    /// `Running::shutdown` was called again after it had already returned.
    #[error("the SHUTDOWN event was already delivered")]
    ShutdownAlreadyDelivered,
}

impl AwsError {
    /// The AWS error type of a [`AwsError::Service`] or [`AwsError::Extension`] error, e.g.
    /// `ResourceNotFoundException`.
    pub fn aws_error_type(&self) -> Option<&str> {
        match self {
            AwsError::Service { error_type, .. } | AwsError::Extension { error_type, .. } => Some(error_type),
            _ => None,
        }
    }

    /// Whether trying the same request again later may succeed: network trouble, timeouts, throttling and
    /// server-side (5xx) errors. Configuration and permission errors are not retryable.
    pub fn is_retryable(&self) -> bool {
        match self {
            AwsError::Transport { .. } | AwsError::Timeout { .. } => true,
            AwsError::Service { status, error_type, .. } => {
                *status >= 500
                    || *status == 429
                    || matches!(
                        error_type.as_str(),
                        "ThrottlingException" | "Throttling" | "TooManyRequestsException" | "RequestLimitExceeded"
                    )
            }
            _ => false,
        }
    }
}

/// `error` and its causes, joined with ": " (hyper and rustls put the useful part in the source chain).
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

/// At most `max` characters of a response body, for error messages about non-JSON answers.
pub(crate) fn snippet(body: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_classification() {
        let service = |status, error_type: &str| AwsError::Service {
            service: "Secrets Manager",
            status,
            error_type: error_type.into(),
            message: String::new(),
        };
        assert!(service(500, "InternalServiceError").is_retryable());
        assert!(service(400, "ThrottlingException").is_retryable());
        assert!(!service(400, "ResourceNotFoundException").is_retryable());
        assert!(!service(400, "AccessDeniedException").is_retryable());
        assert_eq!(service(400, "ResourceNotFoundException").aws_error_type(), Some("ResourceNotFoundException"));
        let timeout = AwsError::Timeout { service: "Secrets Manager", endpoint: "x".into(), timeout: Duration::ZERO };
        assert!(timeout.is_retryable());
        assert_eq!(timeout.aws_error_type(), None);
    }

    #[test]
    fn snippet_cuts_on_characters() {
        assert_eq!(snippet(b"  short  ", 10), "short");
        assert_eq!(snippet("ééééé".as_bytes(), 2), "éé...");
    }
}
