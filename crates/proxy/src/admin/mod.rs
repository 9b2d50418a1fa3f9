//! The admin console's pure parts: the command language ([`command`]), the columns of every SHOW
//! ([`columns`]) and the result-set encoder ([`table`]). The session that serves the virtual database
//! `pgbouncer` (and `pgmux`) drives them; nothing here touches a socket.

pub mod columns;
pub mod command;
mod grammar;
mod lexer;
pub mod table;

pub use command::{Access, Command, CommandError, SessionSetting, Show, ShutdownMode, parse, parse_query_body};
