//! The pgmux pooler: accepts PostgreSQL clients, authenticates them, and lends them server connections one
//! transaction at a time.

// Tests may use tokio's timers directly; pgmux's own code takes them from pgmux_timer (crates/clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod client;
pub mod config;
mod listener;
pub mod net;
mod observe;
mod ops;
pub mod pools;
pub mod protocol;
mod runtime;
mod server;
mod session;
#[cfg(test)]
mod testing;

pub use config::Config;
pub use config::credentials::ServerAccess;
pub use config::source::{ConfigSource, SourceError};
pub use listener::{Admin, Listener, ListenerHandle, SetupError};
/// The meter's clock, public for the micro-benchmarks.
pub use observe::clock;
pub use ops::reload::ReloadError;
pub use protocol::sql::PinReason;
pub use runtime::stop::{Level, Stop};
