//! The SQLSTATE codes pgmux itself reports to clients, named as PostgreSQL's errcodes.txt names them.

/// `08001`: pgmux could not reach or log in to the database.
pub const SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION: &str = "08001";
/// `08006`: the server connection was lost.
pub const CONNECTION_FAILURE: &str = "08006";
/// `08P01`: the client broke the protocol.
pub const PROTOCOL_VIOLATION: &str = "08P01";
/// `28000`: the client may not log in this way.
pub const INVALID_AUTHORIZATION_SPECIFICATION: &str = "28000";
/// `28P01`: wrong password.
pub const INVALID_PASSWORD: &str = "28P01";
/// `3D000`: unknown database.
pub const INVALID_CATALOG_NAME: &str = "3D000";
/// `53300`: too many clients, or no server connection in time.
pub const TOO_MANY_CONNECTIONS: &str = "53300";
/// `57014`: the client cancelled its query.
pub const QUERY_CANCELED: &str = "57014";
/// `57P01`: pgmux is shutting down.
pub const ADMIN_SHUTDOWN: &str = "57P01";
/// `0A000`: a feature pgmux does not support.
pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
/// `XX000`: something inside pgmux went wrong.
pub const INTERNAL_ERROR: &str = "XX000";
