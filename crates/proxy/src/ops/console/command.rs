//! The admin console's language: one simple-query string in, one typed [`Command`] (or a
//! [`CommandError`] with a SQLSTATE) out. Pure, so every hostile input can be tried in a unit test.
//!
//! The grammar is PgBouncer's, a little more lenient:
//! - `SHOW item`, `SELECT item` (PgBouncer's alias), `PAUSE [db]`, `RESUME [db]`, `RECONNECT [db]`,
//!   `WAIT_CLOSE [db]`, `RELOAD`, `KILL_CLIENT id`, `SHUTDOWN [WAIT_FOR_SERVERS | WAIT_FOR_CLIENTS]`;
//! - `SET key = value` or `SET key TO value`, the value `'quoted'` (`''` for a quote) or bare
//!   (letters, digits and `_ . : / + -`, so `30s`, `-1` and `127.0.0.1:9930` need no quotes);
//! - keywords in any case; a database name bare or `"double-quoted"` (`""` for a quote); whitespace
//!   (ASCII only) between words; one optional `;` at the end.
//!
//! One command per Query: a `;` followed by more text is refused (42601), as PgBouncer does, rather than
//! run part of what was sent. An empty query (or a lone `;`) is [`Command::Empty`], answered like
//! PostgreSQL with EmptyQueryResponse.
//!
//! SQLSTATEs: an unknown command or bad arguments get **42601** (`syntax_error`), not PgBouncer's 08P01,
//! because 08 is the connection-exception class and some drivers drop the connection on it, while the
//! console must stay usable after a typo. PgBouncer commands pgmux has no equivalent of get 0A000, an admin
//! command from a `stats_users` user 42501, a query over [`MAX_QUERY_LEN`] 54000, a NUL or invalid UTF-8
//! 22021. Messages quote at most 64 characters of the input, with control characters escaped.

use std::fmt;

use pgmux_proto::encode::{ErrorMessage, Severity};
use pgmux_proto::sqlstate::{self, INSUFFICIENT_PRIVILEGE, PROGRAM_LIMIT_EXCEEDED, SYNTAX_ERROR};

/// Longest query the console reads; every command fits in far less.
pub const MAX_QUERY_LEN: usize = 4096;
/// Longest database name, setting name or value (PostgreSQL's NAMEDATALEN is 64; values get more room).
pub const MAX_WORD_LEN: usize = 1024;

/// What a `SHOW` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Show {
    Version,
    Pools,
    Stats,
    StatsTotals,
    StatsAverages,
    Totals,
    Clients,
    Servers,
    Databases,
    Config,
    Lists,
    Users,
    State,
    Help,
    /// Every connection with PgBouncer's buffer columns (NULL in pgmux).
    Sockets,
    /// The connections a transaction is using now.
    ActiveSockets,
    /// PgBouncer's sockets for an online restart: none in pgmux. Admin only, as in PgBouncer.
    Fds,
    /// What pgmux keeps per connection.
    Mem,
    /// PgBouncer's DNS cache: none in pgmux.
    DnsHosts,
    DnsZones,
    /// PgBouncer's peering: none in pgmux.
    Peers,
    PeerPools,
    /// pgmux's own: the pool limit and where it comes from.
    Sizing,
    /// pgmux's own: pinned clients and why.
    Pins,
    /// pgmux's own: prepared statements per server connection.
    Prepared,
    /// pgmux's own: latency percentiles.
    Latency,
    /// A session setting PgBouncer fakes so that drivers can connect (`SHOW DateStyle` from psycopg).
    Setting(SessionSetting),
}

/// The session settings the console pretends to have, with PgBouncer's fixed answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SessionSetting {
    ClientEncoding,
    DefaultTransactionIsolation,
    StandardConformingStrings,
    DateStyle,
    TimeZone,
}

impl SessionSetting {
    fn from_name(name: &str) -> Option<SessionSetting> {
        Some(match name {
            "client_encoding" => SessionSetting::ClientEncoding,
            "default_transaction_isolation" => SessionSetting::DefaultTransactionIsolation,
            "standard_conforming_strings" => SessionSetting::StandardConformingStrings,
            "datestyle" => SessionSetting::DateStyle,
            "timezone" => SessionSetting::TimeZone,
            _ => return None,
        })
    }

    /// The column name of its `SHOW`, as PgBouncer's console names it: in lower case, every one (PostgreSQL
    /// itself says `DateStyle` and `TimeZone`; scripts written against PgBouncer look for `datestyle`).
    pub fn name(self) -> &'static str {
        match self {
            SessionSetting::ClientEncoding => "client_encoding",
            SessionSetting::DefaultTransactionIsolation => "default_transaction_isolation",
            SessionSetting::StandardConformingStrings => "standard_conforming_strings",
            SessionSetting::DateStyle => "datestyle",
            SessionSetting::TimeZone => "timezone",
        }
    }

    /// PgBouncer's answer.
    pub fn value(self) -> &'static str {
        match self {
            SessionSetting::ClientEncoding => "UTF-8",
            SessionSetting::DefaultTransactionIsolation => "read committed",
            SessionSetting::StandardConformingStrings => "on",
            SessionSetting::DateStyle => "ISO",
            SessionSetting::TimeZone => "GMT",
        }
    }
}

/// How `SHUTDOWN` should stop pgmux.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownMode {
    /// `SHUTDOWN`: stop now.
    Immediate,
    /// `SHUTDOWN WAIT_FOR_SERVERS`: let running transactions finish, then stop.
    WaitForServers,
    /// `SHUTDOWN WAIT_FOR_CLIENTS`: stop accepting, stop when every client has left.
    WaitForClients,
}

/// One admin console command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Show(Show),
    /// Hold new transactions (of one database, or all), return when no server connection is in use.
    Pause(Option<String>),
    Resume(Option<String>),
    /// Replace every server connection as it comes back.
    Reconnect(Option<String>),
    /// Wait until the connections marked by RECONNECT or RELOAD are closed.
    WaitClose(Option<String>),
    Reload,
    /// End every client of a database (or of all) and close its server connections; the database is then
    /// paused, new clients waiting, until RESUME.
    Kill(Option<String>),
    KillClient(u64),
    /// Refuse new clients of a database (those in stay) until ENABLE.
    Disable(String),
    Enable(String),
    Shutdown(ShutdownMode),
    /// `SET key = value`: change a setting that may change live. The key is lower-cased.
    Set {
        key: String,
        value: String,
    },
    /// `SET` of a session setting a driver sends on connect: answered with a notice, changes nothing.
    SetIgnored(SessionSetting),
    /// Nothing but whitespace and `;`.
    Empty,
}

/// Who may run a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    /// `stats_users` and `admin_users`.
    Stats,
    /// `admin_users` only.
    Admin,
}

impl Command {
    /// The rights the command needs: every SHOW (and the SETs drivers send on connect) is read-only, but
    /// SHOW FDS is for admins, as in PgBouncer (there it shows cancel keys and passwords).
    pub fn access(&self) -> Access {
        match self {
            Command::Show(Show::Fds) => Access::Admin,
            Command::Show(_) | Command::SetIgnored(_) | Command::Empty => Access::Stats,
            _ => Access::Admin,
        }
    }

    /// The CommandComplete tag of a successful run (PgBouncer's: `SHOW` for every SHOW, the command's
    /// name otherwise). `None` for [`Command::Empty`], which gets EmptyQueryResponse instead.
    pub fn tag(&self) -> Option<String> {
        Some(match self {
            Command::Show(_) => "SHOW".into(),
            Command::Pause(_) => "PAUSE".into(),
            Command::Resume(_) => "RESUME".into(),
            Command::Reconnect(_) => "RECONNECT".into(),
            Command::WaitClose(_) => "WAIT_CLOSE".into(),
            Command::Reload => "RELOAD".into(),
            Command::Kill(_) => "KILL".into(),
            Command::KillClient(_) => "KILL_CLIENT".into(),
            Command::Disable(_) => "DISABLE".into(),
            Command::Enable(_) => "ENABLE".into(),
            Command::Shutdown(_) => "SHUTDOWN".into(),
            Command::Set { .. } | Command::SetIgnored(_) => "SET".into(),
            Command::Empty => return None,
        })
    }

    /// The error for a user whose rights do not reach this command, or `None` when they do.
    pub fn check_access(&self, granted: Access) -> Option<CommandError> {
        (granted < self.access()).then(|| {
            CommandError::new(INSUFFICIENT_PRIVILEGE, "admin access needed for this command")
                .with_hint("only users listed in admin_users may run it; stats_users may run SHOW")
        })
    }
}

/// Why a query is not a command: a SQLSTATE, a message that says what to do, maybe a hint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandError {
    pub code: &'static str,
    pub message: String,
    pub hint: Option<String>,
}

impl CommandError {
    pub(super) fn new(code: &'static str, message: impl Into<String>) -> CommandError {
        CommandError { code, message: message.into(), hint: None }
    }

    fn with_hint(mut self, hint: impl Into<String>) -> CommandError {
        self.hint = Some(hint.into());
        self
    }

    /// The ErrorResponse (severity ERROR: the console stays open).
    pub fn to_error_message(&self) -> ErrorMessage {
        ErrorMessage {
            severity: Severity::Error,
            code: self.code.into(),
            message: self.message.clone(),
            detail: None,
            hint: self.hint.clone(),
        }
    }
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for CommandError {}

pub(super) fn too_long(len: usize) -> CommandError {
    CommandError::new(
        PROGRAM_LIMIT_EXCEEDED,
        format!("admin command of {len} bytes; none is longer than {MAX_QUERY_LEN}"),
    )
}

/// `invalid command '<query>'` with the reason, PgBouncer's wording, and where to look.
pub(super) fn syntax(query: &str, why: impl fmt::Display) -> CommandError {
    CommandError::new(SYNTAX_ERROR, format!("invalid command '{}': {why}", quote(query)))
        .with_hint("SHOW HELP lists the commands")
}

/// A command pgmux knows from PgBouncer but does not have.
pub(super) fn unsupported(what: &str, instead: &str) -> CommandError {
    CommandError::new(sqlstate::FEATURE_NOT_SUPPORTED, format!("{what} is not supported by pgmux")).with_hint(instead)
}

/// At most 64 characters of `s`, trimmed, with control characters escaped, for error messages.
pub(super) fn quote(s: &str) -> String {
    let s = s.trim();
    let mut out: String = s.chars().take(64).flat_map(char::escape_debug).collect();
    if s.chars().nth(64).is_some() {
        out.push('…');
    }
    out.replace('\'', "\\'")
}

/// The session setting a key names, if any (for SHOW and SET of driver settings).
pub(super) fn session_setting(key: &str) -> Option<SessionSetting> {
    SessionSetting::from_name(key)
}
