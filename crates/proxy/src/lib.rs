//! The pgmux pooler: accepts PostgreSQL clients, authenticates them, and lends them server connections one
//! transaction at a time.

pub mod admin;
pub mod budget;
mod cancel;
mod client_auth;
pub mod config;
pub mod credentials;
mod io;
mod listener;
mod params;
mod pool;
mod router;
mod server;
mod session;
mod shared;
mod sizing;
mod slots;
pub mod sql;
mod startup;
mod statements;
mod stop;
#[cfg(test)]
mod testing;
pub mod tls;
pub mod tracker;
mod unix_socket;

pub use config::Config;
pub use listener::{Listener, ListenerHandle, ServerAccess, SetupError};
pub use sql::PinReason;
pub use stop::{Level, Stop};
