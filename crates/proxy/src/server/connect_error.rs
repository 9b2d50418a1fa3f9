//! Why pgmux could not open a server connection, as a type the caller branches on (a refusal is
//! back-pressure, an auth failure asks for fresh credentials, some causes pass by themselves). The text
//! names the server and the cause.

use std::io;
use std::time::Duration;

use pgmux_proto::auth::scram::ScramError;
use pgmux_proto::sqlstate;

use crate::config::{NodeRole, SslMode, TargetSessionAttrs};
use crate::protocol::failure::{Fault, ServerError, ServerFailure};

/// Why pgmux could not open a server connection. The text names the server and the cause.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    #[error("could not connect to the database at {addr}: {source}")]
    Io { addr: String, source: io::Error },
    #[error("timed out after {}s (server_connect_timeout) connecting to the database at {addr}", .after.as_secs_f32())]
    Timeout { addr: String, after: Duration },
    #[error("the database at {addr} refused the login of user \"{user}\": {error}")]
    Rejected { addr: String, user: String, error: Box<ServerError> },
    #[error("the database at {addr} asks for {what}, which pgmux does not support")]
    Unsupported { addr: String, what: String },
    #[error("the database at {addr} asks for a password, and pgmux has none to give")]
    NoPassword { addr: String },
    /// pgmux holds the user's password only as a hash, which answers md5 and nothing else.
    #[error(
        "the database at {addr} asks for {what}, and pgmux holds the password of user \"{user}\" only as {stored}; \
         give it in plaintext (or switch the user to md5 on the server)"
    )]
    StoredPassword { addr: String, user: String, what: &'static str, stored: &'static str },
    #[error("the database at {addr} broke the protocol during login: {failure}")]
    Protocol { addr: String, failure: ServerFailure },
    /// The SCRAM exchange failed: a malformed server message, or a server proof that does not match (the
    /// server does not know the password). `None`: a SASL message outside an exchange.
    #[error("SCRAM authentication with the database at {addr} failed: {}", .error.as_ref().map_or("a SASL message outside a SASL exchange".to_owned(), |e| e.to_string()))]
    Scram { addr: String, error: Option<ScramError> },
    #[error("TLS with the database at {addr} failed: {reason}")]
    Tls { addr: String, reason: String },
    #[error("the database at {addr} does not offer TLS, and sslmode={mode} requires it")]
    NoTls { addr: String, mode: SslMode },
    #[error("the database at {addr} is a {role} node, and target_session_attrs={wanted} needs another")]
    WrongRole { addr: String, role: NodeRole, wanted: TargetSessionAttrs },
    /// The new connection logged in, and `connect_query` failed on it (the query itself is not repeated:
    /// it may hold a secret).
    #[error("connect_query failed on a new server connection to {addr}: {failure}")]
    ConnectQuery { addr: String, failure: Box<ServerFailure> },
}

impl ConnectError {
    /// The server rejected the user or password (so fresh credentials may help).
    pub(crate) fn is_auth_failure(&self) -> bool {
        matches!(self.rejected_code(), Some(sqlstate::INVALID_PASSWORD | sqlstate::INVALID_AUTHORIZATION_SPECIFICATION))
    }

    /// The server has no slot left for a new connection (SQLSTATE 53300): back-pressure, not an outage.
    pub(crate) fn is_refusal(&self) -> bool {
        self.rejected_code() == Some(sqlstate::TOO_MANY_CONNECTIONS)
    }

    fn rejected_code(&self) -> Option<&str> {
        match self {
            ConnectError::Rejected { error, .. } => Some(&error.code),
            _ => None,
        }
    }

    /// Whether trying again soon may well work: the database is away (refused, unreachable, starting up or
    /// shutting down, gone during login) or in the wrong role for now (a failover under way). Anything
    /// else (a wrong password, a database that does not exist, TLS that cannot be satisfied) needs a fix.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            // A failing connect_query is treated as a failed login that may pass: clients wait while pgmux
            // tries again (a lock or a missing object may clear; a wrong query shows in the log meanwhile).
            ConnectError::Io { .. }
            | ConnectError::Timeout { .. }
            | ConnectError::WrongRole { .. }
            | ConnectError::ConnectQuery { .. } => true,
            ConnectError::Rejected { error, .. } => {
                error.code.starts_with(sqlstate::CLASS_OPERATOR_INTERVENTION_SERVER)
                    || error.code.starts_with(sqlstate::CLASS_CONNECTION_EXCEPTION)
                    || error.code == sqlstate::TOO_MANY_CONNECTIONS
            }
            ConnectError::Protocol { failure, .. } => {
                matches!(failure, ServerFailure::Io(_) | ServerFailure::Closed | ServerFailure::Timeout(_))
                    || failure.reply().is_some_and(|e| e.code.starts_with(sqlstate::CLASS_OPERATOR_INTERVENTION_SERVER))
            }
            ConnectError::Unsupported { .. }
            | ConnectError::NoPassword { .. }
            | ConnectError::StoredPassword { .. }
            | ConnectError::Scram { .. }
            | ConnectError::Tls { .. }
            | ConnectError::NoTls { .. } => false,
        }
    }

    /// Whose fault it was.
    pub(crate) fn fault(&self) -> Fault {
        match self {
            ConnectError::Io { .. } | ConnectError::Timeout { .. } | ConnectError::Tls { .. } => Fault::Network,
            ConnectError::Rejected { .. }
            | ConnectError::Unsupported { .. }
            | ConnectError::NoTls { .. }
            | ConnectError::Scram { .. }
            | ConnectError::WrongRole { .. }
            | ConnectError::ConnectQuery { .. } => Fault::Server,
            ConnectError::Protocol { failure, .. } => failure.fault(),
            ConnectError::NoPassword { .. } | ConnectError::StoredPassword { .. } => Fault::Pgmux,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(code: &str) -> Box<ServerError> {
        Box::new(ServerError {
            severity: "FATAL".into(),
            code: code.into(),
            message: "m".into(),
            detail: None,
            hint: None,
        })
    }

    #[test]
    fn refusals_and_auth_failures_are_told_apart_by_sqlstate() {
        let rejected = |code: &str| ConnectError::Rejected { addr: "h:1".into(), user: "u".into(), error: error(code) };
        assert!(rejected("53300").is_refusal() && !rejected("53300").is_auth_failure());
        assert!(rejected("28P01").is_auth_failure() && rejected("28000").is_auth_failure());
        assert!(!rejected("57P03").is_refusal());
        assert_eq!(rejected("28P01").fault(), Fault::Server);
        let lost = ConnectError::Protocol { addr: "h:1".into(), failure: ServerFailure::Closed };
        assert_eq!(lost.fault(), Fault::Server);
        assert!(lost.to_string().contains("closed"), "{lost}");
    }
}
