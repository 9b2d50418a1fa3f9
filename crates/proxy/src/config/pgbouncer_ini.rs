//! PgBouncer's own configuration file read as pgmux's, so that `pgmux pgbouncer.ini` can stand where
//! `pgbouncer pgbouncer.ini` stood.
//!
//! The syntax is PgBouncer's. `[section]` lines open `[databases]`, `[users]`, `[pgbouncer]` or `[peers]`.
//! A `key = value` line's value is the rest of the line with the blanks at both ends removed; there is no
//! quoting at this level, and a `;` or `#` inside a value is part of it (connection strings hold them):
//! only a line that starts with one is a comment. A database or user name with other characters than
//! letters, digits and `_.-*` is written in double quotes, `""` standing for a quote. `%include FILE` reads
//! another file in place, a relative name taken from the current directory as PgBouncer takes it; at most
//! [`MAX_INCLUDE_DEPTH`] deep, and a file that includes itself, directly or not, is an error.
//!
//! The meaning is PgBouncer's too, within what pgmux has:
//! - what the file does not set has PgBouncer's default, not pgmux's ([`settings::PGBOUNCER_DEFAULTS`]:
//!   session pooling, pools of 20, port 6432, md5, 100 clients, ...);
//! - a setting given twice takes the last value (PgBouncer's test suite appends its own lines);
//! - `[pgbouncer]` settings are read under PgBouncer's names and units ([`settings::SETTINGS`]);
//!   `[databases]` and `[users]` entries through the same functions as TOML ([`crate::config::routes::route_from`]);
//! - the settings pgmux does not have are returned in [`IniConfig::unsupported`] and logged in one warning,
//!   never silently dropped and never fatal; a key PgBouncer does not have either is an error naming it and
//!   its line, and so is a value pgmux refuses (`pool_mode = statement`, `auth_type = ldap`, ...);
//! - `PGMUX_<KEY>` environment variables override the file as they override TOML; a file setting whose
//!   pgmux key the environment sets is not read at all (so `PGMUX_POOL_MODE=transaction` runs a file that
//!   says `pool_mode = statement`);
//! - the result goes through the same checks as a TOML file ([`Config::finish`]).

mod build;
mod settings;
mod syntax;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::{Path, PathBuf};

pub use settings::{Converted, Meaning, NO_LIMIT, PGBOUNCER_DEFAULTS, PGMUX_ONLY, SETTINGS, Unit};
pub use syntax::Section;

use super::routes::EntryError;
use super::{Config, ConfigError, Profile, ValueError};
use build::build;
use syntax::{Line, Reader, lex};

/// How deep `%include` may nest below the file pgmux was given.
pub const MAX_INCLUDE_DEPTH: usize = 10;

/// A place in a file, for errors and the warning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct At {
    pub file: PathBuf,
    pub line: usize,
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// A PgBouncer setting pgmux does not have, or carries out differently, and where it was set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    /// The setting: `logfile`; `database p0: reserve_pool_size` or `user u: reserve_pool_size` for a key of
    /// an entry; `[peers]` for the section.
    pub setting: String,
    /// Where it was set; `None` for what the file leaves unset and pgmux does differently.
    pub at: Option<At>,
    /// What pgmux does instead, where that needs saying.
    pub note: Option<String>,
}

/// A configuration read from PgBouncer's files, with what in them pgmux does not carry out.
#[derive(Clone, Debug)]
pub struct IniConfig {
    pub config: Config,
    /// In the order the files set them.
    pub unsupported: Vec<Unsupported>,
    /// The files read: the one given, then each `%include`.
    pub files: Vec<PathBuf>,
}

impl IniConfig {
    /// The one start-up warning that lists [`unsupported`](Self::unsupported); `None` if it is empty. Names
    /// settings and places, never values (some hold passwords: `auth_ldap_options`).
    pub fn warning(&self) -> Option<String> {
        if self.unsupported.is_empty() {
            return None;
        }
        let items: Vec<String> = self
            .unsupported
            .iter()
            .map(|u| {
                let mut s = u.setting.clone();
                if let Some(at) = &u.at {
                    s.push_str(&format!(" ({at})"));
                }
                if let Some(note) = &u.note {
                    s.push_str(&format!(": {note}"));
                }
                s
            })
            .collect();
        Some(format!(
            "{} PgBouncer setting(s) pgmux does not have or carries out differently \
             (docs/migrating-from-pgbouncer.md): {}",
            items.len(),
            items.join("; ")
        ))
    }
}

/// Why PgBouncer's files cannot be read as pgmux's configuration: which file, which line, what.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{kind}", place(.file, .line))]
pub struct IniError {
    pub file: PathBuf,
    /// `None` when no one line is to blame (a file that cannot be read, no databases).
    pub line: Option<usize>,
    pub kind: IniErrorKind,
}

fn place(file: &Path, line: &Option<usize>) -> String {
    match line {
        Some(n) => format!("{}:{n}: ", file.display()),
        None => format!("{}: ", file.display()),
    }
}

/// What is wrong, in a type a caller can branch on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IniErrorKind {
    /// The file cannot be read (also an `%include`d one, reported at the `%include` line).
    #[error("cannot read {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    /// A line that is none of PgBouncer's forms.
    #[error("{0}")]
    Syntax(&'static str),
    /// A section PgBouncer does not have.
    #[error("unknown section [{0}]: PgBouncer's are [databases], [users], [pgbouncer] and [peers]")]
    UnknownSection(String),
    /// A setting before the first section header.
    #[error("{0} = ... comes before any [section]")]
    OutsideSection(String),
    /// A `[pgbouncer]` key that is not a PgBouncer setting at all.
    #[error("unknown setting {0:?}: not a PgBouncer setting (docs/migrating-from-pgbouncer.md lists them)")]
    UnknownSetting(String),
    /// `%include` nested deeper than [`MAX_INCLUDE_DEPTH`].
    #[error("%include nested more than {MAX_INCLUDE_DEPTH} deep")]
    IncludeTooDeep,
    /// A file that includes itself.
    #[error("%include {} includes itself", .0.display())]
    IncludeCycle(PathBuf),
    /// A value that is not of its setting's type or unit.
    #[error("{key}: {reason}")]
    Invalid { key: String, reason: ValueError },
    /// A value pgmux understands and refuses, and why.
    #[error("{key} = {value} is not supported: {why}")]
    NotSupported { key: String, value: String, why: &'static str },
    /// A `[databases]` or `[users]` entry that cannot be read (the entry's own message; never a password).
    #[error(transparent)]
    Entry(EntryError),
    /// A database named as the admin console is.
    #[error("database {0:?} is the admin console's name and cannot be a database")]
    ReservedName(String),
    /// Nothing for clients to connect to.
    #[error("no [databases] entry: pgmux needs at least one (or `*`), or PGMUX_DATABASE_URL")]
    NoDatabases,
    /// The settings are each valid but break one of pgmux's rules together (the setting named is the one
    /// the rule names, under PgBouncer's name).
    #[error("{setting}: {source}")]
    Checked { setting: String, source: Box<ConfigError> },
}

impl IniError {
    fn at(at: &At, kind: IniErrorKind) -> Box<IniError> {
        Box::new(IniError { file: at.file.clone(), line: Some(at.line), kind })
    }

    /// The setting at fault, if one is.
    pub fn key(&self) -> Option<&str> {
        match &self.kind {
            IniErrorKind::Invalid { key, .. } | IniErrorKind::NotSupported { key, .. } => Some(key),
            IniErrorKind::UnknownSetting(key) | IniErrorKind::OutsideSection(key) => Some(key),
            IniErrorKind::Checked { setting, .. } => Some(setting),
            IniErrorKind::Entry(e) => e.key.as_deref(),
            _ => None,
        }
    }
}

impl From<Box<IniError>> for ConfigError {
    fn from(e: Box<IniError>) -> ConfigError {
        ConfigError::Ini(e)
    }
}

/// Whether `path` (whose text is `text`) is a PgBouncer ini file rather than pgmux's TOML: its name ends
/// in `.ini`; or, unless it ends in `.toml`, its first line that is not blank or a comment opens one of
/// PgBouncer's sections (`[databases]`, `[pgbouncer]`, ...; pgmux's TOML writes `[[databases]]`) or is an
/// `%include`.
pub fn looks_like_ini(path: &Path, text: &str) -> bool {
    match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("ini") => return true,
        Some("toml") => return false,
        _ => {}
    }
    let first = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with([';', '#']));
    match first {
        Some(line) if line.starts_with("%include") => true,
        Some(line) => matches!(lex(line), Ok(Line::Section(name)) if Section::named(name).is_some()),
        None => false,
    }
}

/// Reads the ini file at `path` (and what it includes) with the defaults of `profile`, then `env`.
pub fn read<I>(profile: Profile, path: &Path, env: I) -> Result<IniConfig, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let mut reader = Reader::default();
    reader.file(path, None)?;
    build(profile, path, reader, env)
}

/// Reads ini text as if it were the file `name` (includes are read from disk).
pub fn from_text<I>(profile: Profile, name: &Path, text: &str, env: I) -> Result<IniConfig, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let mut reader = Reader::default();
    reader.files.push(name.to_owned());
    reader.text(text, name)?;
    build(profile, name, reader, env)
}
