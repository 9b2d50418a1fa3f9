//! The SQLSTATE codes pgmux reports to clients or acts on when a server sends them, named as PostgreSQL's
//! errcodes.txt names them. Code elsewhere uses these names, never the five characters.

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
/// `42P05`: a prepared statement of that name already exists.
pub const DUPLICATE_PREPARED_STATEMENT: &str = "42P05";
/// `42601`: a command pgmux's admin console does not know.
pub const SYNTAX_ERROR: &str = "42601";
/// `42501`: the user may not run that command.
pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
/// `25006`: a write on a read-only node or in a read-only transaction.
pub const READ_ONLY_SQL_TRANSACTION: &str = "25006";
/// `08007`: the connection was lost while a commit was in flight, so whether it committed is unknown.
pub const TRANSACTION_RESOLUTION_UNKNOWN: &str = "08007";
/// `57P02`: the server is restarting after a crash.
pub const CRASH_SHUTDOWN: &str = "57P02";
/// `57P03`: the server is starting up or shutting down and accepts no connections.
pub const CANNOT_CONNECT_NOW: &str = "57P03";
/// `54000`: a message or value too large for a limit.
pub const PROGRAM_LIMIT_EXCEEDED: &str = "54000";
/// `22023`: a setting's value is out of range or of the wrong kind.
pub const INVALID_PARAMETER_VALUE: &str = "22023";
/// `55000`: the object (a setting, a pool) is not in a state that allows the command.
pub const OBJECT_NOT_IN_PREREQUISITE_STATE: &str = "55000";
/// `25P03`: a client idle inside a transaction too long.
pub const IDLE_IN_TRANSACTION_SESSION_TIMEOUT: &str = "25P03";
/// `25P04`: a transaction open too long (PostgreSQL 17's `transaction_timeout`).
pub const TRANSACTION_TIMEOUT: &str = "25P04";
/// `57P05`: a client idle between transactions too long.
pub const IDLE_SESSION_TIMEOUT: &str = "57P05";

/// Class `08`: connection exceptions (the server's side of a connection went wrong).
pub const CLASS_CONNECTION_EXCEPTION: &str = "08";
/// Class `57P`: the server is shutting down, restarting or starting (operator intervention).
pub const CLASS_OPERATOR_INTERVENTION_SERVER: &str = "57P";

/// `00000`: not an error; the code a NOTICE carries when it only informs (the console's `SHOW HELP`, an
/// ignored `SET`).
pub const SUCCESSFUL_COMPLETION: &str = "00000";
/// `22021`: a NUL inside a query, or bytes that are not UTF-8.
pub const CHARACTER_NOT_IN_REPERTOIRE: &str = "22021";
/// `42704`: the named object (a client id on the admin console) does not exist.
pub const UNDEFINED_OBJECT: &str = "42704";
/// `55P02`: a setting that cannot be changed while pgmux runs.
pub const CANT_CHANGE_RUNTIME_PARAM: &str = "55P02";
/// `F0000`: the config file could not be reloaded (PgBouncer's code for a failed RELOAD).
pub const CONFIG_FILE_ERROR: &str = "F0000";
/// `53200`: out of memory (pgmux's memory for clients' large messages, `max_client_buffers`, is in use).
pub const OUT_OF_MEMORY: &str = "53200";
