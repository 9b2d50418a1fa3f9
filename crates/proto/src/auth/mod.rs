//! Password authentication, both as a server (pgmux checking its clients) and as a client (pgmux logging
//! in to PostgreSQL): SCRAM-SHA-256 (RFC 5802 / RFC 7677, as PostgreSQL implements it) and MD5.

pub mod md5;
pub mod plain;
pub mod scram;
