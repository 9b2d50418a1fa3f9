//! Sans-IO pieces of the PostgreSQL wire protocol (version 3.0) that pgmux needs.
//!
//! The proxy forwards almost every message untouched; this crate lets it find message boundaries
//! ([`frame`]), read the handful of fields it must see ([`backend`], [`frontend`]), write the messages it
//! synthesises ([`encode`]), and run password authentication on both sides ([`auth`]). No sockets, no
//! async: every function works on byte slices and is tested with golden bytes.

pub mod auth;
pub mod backend;
mod cursor;
pub mod encode;
pub mod frame;
pub mod frontend;
pub mod sqlstate;

pub use backend::TxStatus;
pub use frame::{FrameError, Framer, Sender, Step};

/// A message whose body does not match its type's layout.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed {what} message: {reason}")]
pub struct ParseError {
    /// The message type being parsed.
    pub what: &'static str,
    /// What was wrong.
    pub reason: &'static str,
}

impl ParseError {
    pub(crate) fn new(what: &'static str, reason: &'static str) -> Self {
        ParseError { what, reason }
    }
}
