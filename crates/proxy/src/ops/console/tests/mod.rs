//! The console's pure parts against the bytes and words their readers need: the command language, the
//! columns of every SHOW, and result sets on the wire.

mod columns;
mod command;
mod routes;
mod settings;
mod table;
