//! Sockets, both ways: a connection with its read buffer, framer and write queue ([`io`]), and TLS to
//! clients and to servers ([`tls`]). Below the protocol: it moves bytes and whole frames, and reads none.

pub(crate) mod armed;
pub(crate) mod der;
pub(crate) mod io;
pub mod tls;
mod v1_cert;
