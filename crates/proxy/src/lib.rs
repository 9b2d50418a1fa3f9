//! The pgmux pooler: accepts PostgreSQL clients, authenticates them, and lends them server connections one
//! transaction at a time.

mod client;
pub mod config;
mod console;
mod listener;
mod metrics_http;
pub mod net;
mod observe;
pub mod pools;
pub mod protocol;
mod reload;
mod runtime;
mod server;
mod session;
#[cfg(test)]
mod testing;

pub use config::Config;
pub use config::credentials::ServerAccess;
pub use config::source::ConfigSource;
pub use listener::{Admin, Listener, ListenerHandle, SetupError};
pub use protocol::sql::PinReason;
pub use runtime::stop::{Level, Stop};
