//! Why a server connection could not be opened or stopped being usable, as types the caller branches on:
//! whose fault it was, and whether the connection may be lent again. Nothing here is a `String` that a
//! caller would have to read to decide what to do.

use std::io;
use std::time::Duration;

use pgmux_proto::auth::scram::ScramError;
use pgmux_proto::backend::ErrorFields;
use pgmux_proto::encode::{self, Severity};
use pgmux_proto::{FrameError, ParseError, TxStatus, sqlstate};

use crate::config::{NodeRole, SslMode, TargetSessionAttrs};
use crate::protocol::tracker::Unexpected;

/// Whose fault a failure was: what an operator looks at first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The client's own statement or settings (a query error, a value the server refused).
    Client,
    /// The database: it ended the session, refused a login, or broke the protocol.
    Server,
    /// The path between pgmux and the database: a reset, a timeout, an unreachable host.
    Network,
    /// pgmux itself: its configuration, or its own bookkeeping lost step with the server.
    Pgmux,
}

/// An error reply from the server, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServerError {
    pub(crate) severity: String,
    pub(crate) code: String,
    pub(crate) message: String,
    pub(crate) detail: Option<String>,
    pub(crate) hint: Option<String>,
}

impl ServerError {
    pub(crate) fn from_fields(f: &ErrorFields<'_>) -> Self {
        ServerError {
            severity: f.severity.to_owned(),
            code: f.code.to_owned(),
            message: f.message.to_owned(),
            detail: f.detail.map(str::to_owned),
            hint: f.hint.map(str::to_owned),
        }
    }

    /// The same error for a client, at the given severity.
    pub(crate) fn to_client(&self, severity: Severity) -> encode::ErrorMessage {
        encode::ErrorMessage {
            severity,
            code: self.code.clone().into(),
            message: self.message.clone(),
            detail: self.detail.clone(),
            hint: self.hint.clone(),
        }
    }
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (SQLSTATE {})", self.message, self.code)
    }
}

/// A server connection in use stopped working, or a statement pgmux ran on its own account failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServerFailure {
    /// The socket failed: a reset, a write to a closed peer, a kernel timeout.
    #[error("network error: {0}")]
    Io(#[from] io::Error),
    /// The server closed the connection without a word.
    #[error("the server closed the connection")]
    Closed,
    /// The bytes from the server are not PostgreSQL messages.
    #[error("the server broke the protocol: {0}")]
    Framing(#[from] FrameError),
    /// A message pgmux reads did not have its type's layout.
    #[error("the server broke the protocol: {0}")]
    Parse(#[from] ParseError),
    /// A message no request explains: pgmux's view of the conversation and the server's disagree.
    #[error("pgmux lost step with the server: {0}")]
    Unexpected(#[from] Unexpected),
    /// FATAL or PANIC: the server ended the session (a restart, `pg_terminate_backend`, a crash).
    #[error("the server ended the session: {0}")]
    Fatal(Box<ServerError>),
    /// An ordinary error for a statement pgmux ran itself; the connection is still good.
    #[error("{0}")]
    Query(Box<ServerError>),
    /// The server stayed inside a transaction after a statement pgmux ran outside one.
    #[error("the server stayed in a transaction ({0:?}) after pgmux's own statement")]
    NotIdle(TxStatus),
    /// No answer in time.
    #[error("the server did not answer within {0:?}")]
    Timeout(Duration),
}

impl ServerFailure {
    /// Whose fault it was.
    pub(crate) fn fault(&self) -> Fault {
        match self {
            ServerFailure::Io(_) | ServerFailure::Timeout(_) => Fault::Network,
            ServerFailure::Closed | ServerFailure::Fatal(_) | ServerFailure::Framing(_) | ServerFailure::Parse(_) => {
                Fault::Server
            }
            ServerFailure::Unexpected(_) | ServerFailure::NotIdle(_) => Fault::Pgmux,
            ServerFailure::Query(_) => Fault::Client,
        }
    }

    /// Whether the server connection can still be lent: only after an ordinary error, which the server
    /// follows with ReadyForQuery like any reply.
    pub(crate) fn reusable(&self) -> bool {
        matches!(self, ServerFailure::Query(_))
    }

    /// The server's own error reply, if it sent one.
    pub(crate) fn reply(&self) -> Option<&ServerError> {
        match self {
            ServerFailure::Fatal(e) | ServerFailure::Query(e) => Some(&**e),
            _ => None,
        }
    }
}

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
            ConnectError::Io { .. } | ConnectError::Timeout { .. } | ConnectError::WrongRole { .. } => true,
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
            | ConnectError::WrongRole { .. } => Fault::Server,
            ConnectError::Protocol { failure, .. } => failure.fault(),
            ConnectError::NoPassword { .. } => Fault::Pgmux,
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
    fn failures_say_whose_fault_and_whether_the_connection_survives() {
        let cases = [
            (ServerFailure::Io(io::ErrorKind::ConnectionReset.into()), Fault::Network, false),
            (ServerFailure::Timeout(Duration::from_secs(1)), Fault::Network, false),
            (ServerFailure::Closed, Fault::Server, false),
            (ServerFailure::Fatal(error("57P01")), Fault::Server, false),
            (ServerFailure::Framing(FrameError::UnknownTag(0)), Fault::Server, false),
            (ServerFailure::Unexpected(Unexpected(b'1')), Fault::Pgmux, false),
            (ServerFailure::Query(error("22023")), Fault::Client, true),
        ];
        for (failure, fault, reusable) in cases {
            assert_eq!((failure.fault(), failure.reusable()), (fault, reusable), "{failure}");
        }
        assert_eq!(ServerFailure::Fatal(error("57P01")).reply().map(|e| e.code.as_str()), Some("57P01"));
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
