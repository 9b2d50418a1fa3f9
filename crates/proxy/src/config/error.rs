//! Why a configuration cannot be used, in types a caller can branch on: which key, where its value came
//! from, and whether the value could not be read at all ([`ValueError`]) or was read but breaks a rule.
//! The messages are the ones users see at start-up, in `RELOAD` and `SET` errors, and in the docs.

/// Where a value came from, for error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The built-in default.
    Default,
    /// The TOML file.
    File,
    /// An environment variable.
    Env(String),
}

/// A configuration that cannot be used; the message names the key and the problem.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {reason}")]
    Read {
        /// File path.
        path: String,
        /// OS error.
        reason: String,
    },
    /// The file is not valid TOML.
    #[error("config file is not valid TOML: {0}")]
    Toml(String),
    /// A required key is not set.
    #[error("{0} is required: set it in the config file or with PGMUX_{upper}", upper = .0.to_ascii_uppercase())]
    Missing(&'static str),
    /// A key the file uses does not exist.
    #[error("unknown config key `{0}` (see pgmux --help for the list)")]
    UnknownKey(String),
    /// A database or user entry cannot be read.
    #[error("{0}")]
    Entry(#[from] super::routes::EntryError),
    /// Two database entries, or two user entries, have one name.
    #[error("{kind} {name:?} is listed twice")]
    Duplicate {
        /// `database` or `user`.
        kind: &'static str,
        name: String,
    },
    /// A PgBouncer ini file that cannot be read as pgmux's configuration: which file, which line, why.
    #[error(transparent)]
    Ini(Box<super::IniError>),
    /// A key has a value that cannot be used.
    #[error("invalid value for {key}{}: {reason}", source_note(.origin))]
    Invalid {
        /// Key name.
        key: String,
        /// Where the value came from.
        origin: Source,
        /// What is wrong.
        reason: Reason,
    },
}

impl ConfigError {
    /// The key at fault, if one is.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Missing(key) => Some(key),
            ConfigError::UnknownKey(key) | ConfigError::Invalid { key, .. } => Some(key),
            ConfigError::Entry(e) => e.key.as_deref(),
            ConfigError::Ini(e) => e.key(),
            ConfigError::Read { .. } | ConfigError::Toml(_) | ConfigError::Duplicate { .. } => None,
        }
    }
}

fn source_note(source: &Source) -> String {
    match source {
        Source::Default => " (default)".to_owned(),
        Source::File => " (config file)".to_owned(),
        Source::Env(var) => format!(" (environment variable {var})"),
    }
}

/// What is wrong with a key's value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    /// The value is not of the key's type.
    #[error(transparent)]
    Value(#[from] ValueError),
    /// The value is of the key's type but out of range, or does not go with another key's.
    #[error("{0}")]
    Rule(&'static str),
}

/// Why a value could not be read as its key's type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// A TOML table or array where one value belongs; says which TOML type it was.
    #[error("expected a single value, got a {0}")]
    NotSingle(&'static str),
    /// Text the type does not accept; `expected` says what it would.
    #[error("expected {expected}, got {got:?}")]
    Expected {
        /// What the type accepts, as a user would read it ("a whole number").
        expected: &'static str,
        /// The text given.
        got: String,
    },
    /// A word that is none of the key's names (`sslmode`, `target_session_attrs`).
    #[error(transparent)]
    Unknown(#[from] UnknownName),
    /// A route or user key's value that is not a whole number; names the key.
    #[error("{key} must be a whole number, not {got:?}")]
    NotANumber {
        /// The key.
        key: String,
        /// The text given.
        got: String,
    },
    /// A value pgmux understands and refuses: the message says why and what to use instead.
    #[error("{0}")]
    NotSupported(&'static str),
    /// An item of a TOML array of user names that is not a string, as TOML writes it.
    #[error("expected user names, got {0}")]
    NotUserNames(String),
    /// A user name longer than PostgreSQL allows, or with a control character.
    #[error("{0:?} is not a user name")]
    NotAUserName(String),
    /// `database_url` is not a URL pgmux can log in with.
    #[error(transparent)]
    Url(#[from] UrlError),
}

/// A word that is not one of a setting's names.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {setting} {got:?}: expected {expected}")]
pub struct UnknownName {
    /// The setting, as libpq names it.
    pub setting: &'static str,
    /// The word given.
    pub got: String,
    /// The names it knows, for the message.
    pub expected: &'static str,
}

/// Why a `postgres://` URL cannot be used; the messages name the part at fault, never the password.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// Not `postgres://` or `postgresql://`.
    #[error("expected a URL starting with postgres://")]
    Scheme,
    /// No `user@` before the host.
    #[error("the URL names no user (user@host)")]
    NoUserInfo,
    /// An empty user name.
    #[error("the URL names no user")]
    NoUser,
    /// An IPv6 address without its closing bracket.
    #[error("unclosed [ in host")]
    UnclosedBracket,
    /// An empty host.
    #[error("the URL names no host")]
    NoHost,
    /// A port that is not a number from 0 to 65535.
    #[error("bad port {0:?}")]
    BadPort(String),
    /// A `%` not followed by two hex digits.
    #[error("bad percent-encoding")]
    PercentEncoding,
    /// Percent-encoded bytes that are not UTF-8.
    #[error("percent-encoding is not UTF-8")]
    NotUtf8,
    /// A `?sslmode=` that libpq does not know.
    #[error(transparent)]
    SslMode(#[from] UnknownName),
    /// A query parameter other than `sslmode` and `sslrootcert`.
    #[error("unknown URL parameter {0:?} (pgmux knows sslmode and sslrootcert)")]
    UnknownParameter(String),
}
