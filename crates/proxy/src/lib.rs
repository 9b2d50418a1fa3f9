//! The pgmux pooler: accepts PostgreSQL clients, authenticates them, and lends them server connections one
//! transaction at a time.

pub mod admin;
pub mod budget;
mod cancel;
mod client_auth;
pub mod config;
mod console;
mod listener;
mod memory;
mod metrics_http;
pub mod net;
mod observe;
mod params;
mod pool;
mod reload;
mod router;
mod runtime;
mod server;
mod session;
mod shared;
mod sizing;
pub mod sql;
mod startup;
mod statements;
#[cfg(test)]
mod testing;
pub mod tracker;
mod unix_socket;

pub use config::Config;
pub use config::credentials::ServerAccess;
pub use config::source::ConfigSource;
pub use listener::{Admin, Listener, ListenerHandle, SetupError};
pub use runtime::stop::{Level, Stop};
pub use sql::PinReason;
