//! The pgmux pooler: accepts PostgreSQL clients, authenticates them, and lends them server connections one
//! transaction at a time.

pub mod admin;
mod cancel;
mod client_auth;
pub mod config;
pub mod credentials;
mod io;
mod params;
mod proxy;
mod server;
mod session;
mod shared;
pub mod sizing;
mod slots;
pub mod sql;
mod startup;
mod statements;
mod stop;
pub mod tls;
pub mod tracker;

pub use config::Config;
pub use proxy::{Extras, Proxy, ProxyError, ProxyHandle};
pub use sql::PinReason;
pub use stop::{Level, Stop};
