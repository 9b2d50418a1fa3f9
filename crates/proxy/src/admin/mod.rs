//! The admin console's pure parts: the command language ([`command`]). The session that serves the
//! virtual database `pgbouncer` (and `pgmux`) drives them; nothing here touches a socket.

pub mod command;
mod grammar;
mod lexer;

pub use command::{Access, Command, CommandError, SessionSetting, ShutdownMode, Show, parse, parse_query_body};
