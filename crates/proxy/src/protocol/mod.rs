//! What the messages mean: what the server still owes ([`tracker`]), what to do with each client and
//! server message ([`router`]), prepared statements by content ([`statements`]), what SQL text says about
//! the session ([`sql`]), session parameters and their sync ([`params`]), and why a server connection
//! failed ([`failure`]). Pure: no sockets, no awaits; driven by bytes, tested with byte fixtures.

pub(crate) mod failure;
pub(crate) mod params;
pub(crate) mod router;
pub mod sql;
pub(crate) mod statements;
pub mod tracker;
