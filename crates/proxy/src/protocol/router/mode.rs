//! What becomes of a client's messages: the router's exclusive [`Mode`] until the next Sync, what a client
//! lost with a server that failed between its transactions ([`Loss`]), and the [`Verdict`] on a message
//! while no server is linked.

use bytes::Bytes;
use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::sqlstate;

/// What becomes of client messages until the next Sync. Exclusive: one mode at a time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Every message is routed.
    #[default]
    Normal,
    /// pgmux answered an error for a unit while no server was linked: drop messages up to the next Sync,
    /// and answer that Sync here.
    SkipToSync,
    /// pgmux answered an error inside a unit on a linked server: drop messages up to the next Sync, which
    /// goes to the server as usual.
    DiscardToSync,
    /// The server was lost while the client sat idle inside a transaction: its next unit gets the error.
    LostTransaction,
    /// The server was lost before pgmux could read back the settings the client's last transaction changed:
    /// its next unit gets the error. (A variant of its own rather than a payload: the mode is compared on
    /// every client message, and a fieldless enum compares as one byte.)
    LostSettings,
    /// pgmux asked the linked server what a statement it prepared anew returns, and the client's next
    /// messages wait for the answer ([`Router::holding`]). Then the client's Bind goes on, or the client
    /// gets `cached plan must not change result type` as PostgreSQL would have answered it.
    Checking,
}

/// What a client lost with a server connection that failed between its transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loss {
    /// It sat idle inside a transaction, which is rolled back.
    Transaction,
    /// Its last transaction changed settings that pgmux had not read back yet.
    Settings,
}

impl Loss {
    pub(super) fn of(mode: Mode) -> Option<Loss> {
        match mode {
            Mode::LostTransaction => Some(Loss::Transaction),
            Mode::LostSettings => Some(Loss::Settings),
            _ => None,
        }
    }

    pub(super) fn error(self) -> Bytes {
        let message = match self {
            Loss::Transaction => {
                "the server connection was lost while this client was in a transaction; the transaction was rolled back"
            }
            Loss::Settings => {
                "the server connection was lost before pgmux could read back the settings this client's last \
                 transaction changed; those settings are gone"
            }
        };
        let mut error = ErrorMessage::error(sqlstate::CONNECTION_FAILURE, message);
        if self == Loss::Settings {
            error = error.with_hint("SET them again; this statement did not run");
        }
        error.to_bytes()
    }
}

/// What to do with a message that begins a unit while no server is linked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Drop it.
    Drop,
    /// Drop it and answer it with these bytes.
    Answer(Bytes),
    /// Get a server and route it there.
    NeedServer,
}
