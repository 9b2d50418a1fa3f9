//! Why a server connection stopped being usable, as types the caller branches on: whose fault it was,
//! and whether the connection may be lent again. Nothing here is a `String` that a caller would have to read
//! to decide what to do. (Why a connection could not be opened at all is `server::ConnectError`.)

use std::io;
use std::time::Duration;

use pgmux_proto::backend::ErrorFields;
use pgmux_proto::encode::{self, Severity};
use pgmux_proto::{FrameError, ParseError, TxStatus};

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
}
