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
//!   `[databases]` and `[users]` entries through the same functions as TOML ([`routes::route_from`]);
//! - the settings pgmux does not have are returned in [`IniConfig::unsupported`] and logged in one warning,
//!   never silently dropped and never fatal; a key PgBouncer does not have either is an error naming it and
//!   its line, and so is a value pgmux refuses (`pool_mode = statement`, `auth_type = ldap`, ...);
//! - `PGMUX_<KEY>` environment variables override the file as they override TOML; a file setting whose
//!   pgmux key the environment sets is not read at all (so `PGMUX_POOL_MODE=transaction` runs a file that
//!   says `pool_mode = statement`);
//! - the result goes through the same checks as a TOML file ([`Config::finish`]).

mod settings;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

pub use settings::{Converted, Meaning, NO_LIMIT, PGBOUNCER_DEFAULTS, SETTINGS, Unit};

use super::routes::{self, Entry, EntryError, RouteSpec, UserSpec};
use super::{Config, ConfigError, Profile, Source, ValueError};

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

/// PgBouncer's sections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    Databases,
    Users,
    PgBouncer,
    Peers,
}

impl Section {
    fn named(name: &str) -> Option<Section> {
        match name {
            "databases" => Some(Section::Databases),
            "users" => Some(Section::Users),
            "pgbouncer" => Some(Section::PgBouncer),
            "peers" => Some(Section::Peers),
            _ => None,
        }
    }
}

/// One line of an ini file.
#[derive(Debug, PartialEq, Eq)]
enum Line<'a> {
    /// Blank, or a comment.
    Blank,
    Section(&'a str),
    Include(&'a str),
    Pair(String, &'a str),
}

/// What one line is; pure, so the syntax is tested without files.
fn lex(line: &str) -> Result<Line<'_>, IniErrorKind> {
    let line = line.trim();
    if line.is_empty() || line.starts_with([';', '#']) {
        return Ok(Line::Blank);
    }
    if let Some(rest) = line.strip_prefix('[') {
        let name = rest.strip_suffix(']').ok_or(IniErrorKind::Syntax("a section header must end with ]"))?;
        return Ok(Line::Section(name.trim()));
    }
    if let Some(rest) = line.strip_prefix("%include")
        && (rest.is_empty() || rest.starts_with(char::is_whitespace))
    {
        let path = rest.trim();
        if path.is_empty() {
            return Err(IniErrorKind::Syntax("%include needs a file name"));
        }
        return Ok(Line::Include(path));
    }
    let (key, rest) = name(line)?;
    let value = rest.trim_start().strip_prefix('=').ok_or(IniErrorKind::Syntax("expected key = value"))?;
    Ok(Line::Pair(key, value.trim()))
}

/// The name a line starts with, bare or in double quotes, and the rest of the line.
fn name(line: &str) -> Result<(String, &str), IniErrorKind> {
    if let Some(quoted) = line.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = quoted.char_indices();
        while let Some((i, c)) = chars.next() {
            if c != '"' {
                out.push(c);
            } else if quoted[i + 1..].starts_with('"') {
                out.push('"');
                chars.next();
            } else {
                return Ok((out, &quoted[i + 1..]));
            }
        }
        return Err(IniErrorKind::Syntax("a quoted name is not closed"));
    }
    let end = line.find(|c: char| !(c.is_ascii_alphanumeric() || "_.-*".contains(c))).unwrap_or(line.len());
    if end == 0 {
        return Err(IniErrorKind::Syntax("expected a name (letters, digits, _ . - *; others in double quotes)"));
    }
    Ok((line[..end].to_owned(), &line[end..]))
}

/// One `key = value` line and where it was.
#[derive(Clone, Debug)]
struct Item {
    at: At,
    section: Section,
    key: String,
    value: String,
}

/// The lines of a file and its includes, in order.
#[derive(Default)]
struct Reader {
    items: Vec<Item>,
    files: Vec<PathBuf>,
    /// The files being read, outermost first, as the file system names them (for cycles).
    open: Vec<PathBuf>,
    section: Option<Section>,
}

impl Reader {
    /// Reads `path`; `from` is the `%include` line that names it.
    fn file(&mut self, path: &Path, from: Option<&At>) -> Result<(), Box<IniError>> {
        let fail = |kind| match from {
            Some(at) => IniError::at(at, kind),
            None => Box::new(IniError { file: path.to_owned(), line: None, kind }),
        };
        let unreadable = |e: std::io::Error| fail(IniErrorKind::Read { path: path.to_owned(), reason: e.to_string() });
        if self.open.len() > MAX_INCLUDE_DEPTH {
            return Err(fail(IniErrorKind::IncludeTooDeep));
        }
        let canonical = std::fs::canonicalize(path).map_err(unreadable)?;
        if self.open.contains(&canonical) {
            return Err(fail(IniErrorKind::IncludeCycle(path.to_owned())));
        }
        let text = std::fs::read_to_string(path).map_err(unreadable)?;
        self.open.push(canonical);
        self.files.push(path.to_owned());
        self.text(&text, path)?;
        self.open.pop();
        Ok(())
    }

    fn text(&mut self, text: &str, file: &Path) -> Result<(), Box<IniError>> {
        for (n, raw) in text.lines().enumerate() {
            let at = At { file: file.to_owned(), line: n + 1 };
            match lex(raw).map_err(|kind| IniError::at(&at, kind))? {
                Line::Blank => {}
                Line::Section(name) => {
                    let section = Section::named(name)
                        .ok_or_else(|| IniError::at(&at, IniErrorKind::UnknownSection(name.to_owned())))?;
                    self.section = Some(section);
                }
                Line::Include(path) => self.file(Path::new(path), Some(&at))?,
                Line::Pair(key, value) => {
                    let section =
                        self.section.ok_or_else(|| IniError::at(&at, IniErrorKind::OutsideSection(key.clone())))?;
                    self.items.push(Item { at, section, key, value: value.to_owned() });
                }
            }
        }
        Ok(())
    }
}

/// The configuration being built from the items, and what it leaves out.
struct Builder {
    cfg: Config,
    env: BTreeMap<String, String>,
    /// Which pgmux keys the file set, for the checks' messages.
    sources: BTreeMap<&'static str, Source>,
    /// For each pgmux key the file set, the PgBouncer setting and its line.
    origins: BTreeMap<&'static str, (String, At)>,
    /// What is not carried out, with the entry it belongs to (a later entry of that name replaces it).
    unsupported: Vec<(Option<String>, Unsupported)>,
    routes: Vec<RouteSpec>,
    users: Vec<UserSpec>,
    /// Settings the reader combines at the end, by name: the last value of each.
    held: BTreeMap<&'static str, Item>,
}

fn build<I>(profile: Profile, file: &Path, reader: Reader, env: I) -> Result<IniConfig, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let mut cfg = Config::base(profile);
    for (key, value) in PGBOUNCER_DEFAULTS {
        cfg.set_text(key, value).unwrap_or_else(|e| unreachable!("PgBouncer's default of {key} is invalid: {e}"));
    }
    let mut b = Builder {
        cfg,
        env: env.into_iter().collect(),
        sources: BTreeMap::new(),
        origins: BTreeMap::new(),
        unsupported: Vec::new(),
        routes: Vec::new(),
        users: Vec::new(),
        held: BTreeMap::new(),
    };
    // A setting given twice counts once, at its last value and line.
    let mut settings: Vec<Item> = Vec::new();
    for item in reader.items {
        match item.section {
            Section::PgBouncer => {
                settings.retain(|s| s.key != item.key);
                settings.push(item);
            }
            Section::Databases => b.database(&item)?,
            Section::Users => b.user(&item)?,
            Section::Peers => {
                if !b.unsupported.iter().any(|(_, u)| u.setting == "[peers]") {
                    b.push(None, "[peers]".to_owned(), Some(&item.at), Some("peering is PgBouncer's own"));
                }
            }
        }
    }
    for item in &settings {
        b.setting(item)?;
    }
    b.listen()?;
    b.client_tls()?;
    b.budget();
    let Builder { mut cfg, env, sources, origins, unsupported, routes, users, .. } = b;
    cfg.databases = routes;
    cfg.users = users;
    let config = cfg.finish(sources, env).map_err(|e| located(e, file, &origins))?;
    Ok(IniConfig { config, unsupported: unsupported.into_iter().map(|(_, u)| u).collect(), files: reader.files })
}

/// A failed check, pointed at the line that set the key it names.
fn located(e: ConfigError, file: &Path, origins: &BTreeMap<&'static str, (String, At)>) -> ConfigError {
    if matches!(e, ConfigError::Missing("database_url")) {
        return ConfigError::Ini(Box::new(IniError {
            file: file.to_owned(),
            line: None,
            kind: IniErrorKind::NoDatabases,
        }));
    }
    match e.key().and_then(|k| origins.get(k)) {
        Some((setting, at)) => {
            IniError::at(at, IniErrorKind::Checked { setting: setting.clone(), source: Box::new(e) }).into()
        }
        None => e,
    }
}

impl Builder {
    fn push(&mut self, owner: Option<String>, setting: String, at: Option<&At>, note: Option<&str>) {
        let note = note.map(str::to_owned);
        self.unsupported.push((owner, Unsupported { setting, at: at.cloned(), note }));
    }

    /// Whether the environment sets pgmux's `key` (then the file's value is not read).
    fn env_sets(&self, key: &str) -> bool {
        self.env.contains_key(&format!("PGMUX_{}", key.to_ascii_uppercase()))
    }

    /// Sets pgmux's `key` from a PgBouncer setting.
    fn set(&mut self, key: &'static str, text: &str, item: &Item) -> Result<(), Box<IniError>> {
        self.cfg
            .set_text(key, text)
            .map_err(|reason| IniError::at(&item.at, IniErrorKind::Invalid { key: item.key.clone(), reason }))?;
        self.sources.insert(key, Source::File);
        self.origins.insert(key, (item.key.clone(), item.at.clone()));
        Ok(())
    }

    fn setting(&mut self, item: &Item) -> Result<(), Box<IniError>> {
        let meaning = settings::meaning(&item.key)
            .ok_or_else(|| IniError::at(&item.at, IniErrorKind::UnknownSetting(item.key.clone())))?;
        let value = item.value.as_str();
        match meaning {
            // An empty value is PgBouncer's "not set": nothing asked for, nothing left out.
            Meaning::Unsupported if value.is_empty() => Ok(()),
            Meaning::Unsupported => {
                self.push(None, item.key.clone(), Some(&item.at), None);
                Ok(())
            }
            Meaning::Key(key, _) if self.env_sets(key) => Ok(()),
            Meaning::Key(key, unit) => match unit.convert(value) {
                Ok(Converted::Set(text)) => self.set(key, &text, item),
                Ok(Converted::Keep) => Ok(()),
                Err(bad) => Err(IniError::at(
                    &item.at,
                    IniErrorKind::Invalid {
                        key: item.key.clone(),
                        reason: ValueError::Expected { expected: bad.expected, got: value.to_owned() },
                    },
                )),
            },
            Meaning::Rule => self.rule(item),
        }
    }

    /// The settings [`Meaning::Rule`] names.
    fn rule(&mut self, item: &Item) -> Result<(), Box<IniError>> {
        let value = item.value.to_ascii_lowercase();
        let refuse = |why: &'static str| {
            Err(IniError::at(
                &item.at,
                IniErrorKind::NotSupported { key: item.key.clone(), value: item.value.clone(), why },
            ))
        };
        match item.key.as_str() {
            "pool_mode" if self.env_sets("pool_mode") => Ok(()),
            "pool_mode" if value == "statement" => refuse(
                "pgmux lends a server connection for a transaction or a session; statement mode would take it \
                 back after every statement and break multi-statement transactions (use transaction, or set \
                 PGMUX_POOL_MODE to override the file)",
            ),
            "pool_mode" => self.set("pool_mode", &value, item),
            "auth_type" if self.env_sets("client_auth") => Ok(()),
            "auth_type" => match value.as_str() {
                "trust" | "md5" | "scram-sha-256" => self.set("client_auth", &value, item),
                _ => refuse(
                    "pgmux checks clients with trust, md5 or scram-sha-256 (cert, hba, ldap, pam, plain and any \
                     are PgBouncer's alone)",
                ),
            },
            "unix_socket_dir" if item.value.starts_with('@') => {
                refuse("pgmux makes its Unix socket in a directory, not in the abstract namespace")
            }
            "unix_socket_dir" if self.env_sets("unix_socket_dir") => Ok(()),
            "unix_socket_dir" => self.set("unix_socket_dir", &item.value, item),
            "verbose" if self.env_sets("log_level") => Ok(()),
            "verbose" => match Unit::CountOrKeep.convert(&item.value) {
                Ok(Converted::Keep) => Ok(()),
                Ok(Converted::Set(n)) => self.set("log_level", if n == "1" { "debug" } else { "trace" }, item),
                Err(bad) => Err(IniError::at(
                    &item.at,
                    IniErrorKind::Invalid {
                        key: item.key.clone(),
                        reason: ValueError::Expected { expected: bad.expected, got: item.value.clone() },
                    },
                )),
            },
            "stats_period" if item.value.trim() == "60" => Ok(()),
            "stats_period" => {
                self.push(None, item.key.clone(), Some(&item.at), Some("pgmux's averages always cover 60 seconds"));
                Ok(())
            }
            "listen_addr" | "listen_port" | "client_tls_sslmode" | "client_tls_cert_file" | "client_tls_key_file" => {
                let name = settings::SETTINGS.iter().find(|(n, _)| *n == item.key).map(|(n, _)| *n);
                if let Some(name) = name {
                    self.held.insert(name, item.clone());
                }
                Ok(())
            }
            other => unreachable!("{other} is marked Rule but has none"),
        }
    }

    /// `listen_addr` and `listen_port` as pgmux's one `listen`.
    fn listen(&mut self) -> Result<(), Box<IniError>> {
        if self.env_sets("listen") {
            return Ok(());
        }
        let port = match self.held.get("listen_port") {
            Some(item) => {
                let port = item.value.trim().parse::<u16>().map_err(|_| {
                    IniError::at(
                        &item.at,
                        IniErrorKind::Invalid {
                            key: item.key.clone(),
                            reason: ValueError::Expected { expected: "a port number", got: item.value.clone() },
                        },
                    )
                })?;
                Some((port, item.clone()))
            }
            None => None,
        };
        let addr = self.held.get("listen_addr").cloned();
        let ip = match &addr {
            Some(item) if !item.value.is_empty() => listen_ip(&item.value).map_err(|why| {
                IniError::at(
                    &item.at,
                    IniErrorKind::NotSupported { key: item.key.clone(), value: item.value.clone(), why },
                )
            })?,
            _ => {
                let at = addr.as_ref().map(|a| &a.at);
                let note = "not set: PgBouncer then listens on its Unix socket only; pgmux listens on 127.0.0.1 too";
                self.push(None, "listen_addr".to_owned(), at, Some(note));
                IpAddr::V4(Ipv4Addr::LOCALHOST)
            }
        };
        let listen = SocketAddr::new(ip, port.as_ref().map_or(6432, |(p, _)| *p)).to_string();
        if let Some(item) = addr.as_ref().or(port.as_ref().map(|(_, i)| i)) {
            self.set("listen", &listen, item)?;
        }
        Ok(())
    }

    /// PgBouncer has no cap on all server connections together; pgmux's budget (`pool_max`, with sizing
    /// from the server off) takes `max_client_conn` unless the environment sets it: transaction and session
    /// pooling alike use at most one server connection per client, so the cap binds only on pools kept warm
    /// by `min_pool_size`, and then an idle pool gives way to a waiting one.
    fn budget(&mut self) {
        if self.env_sets("pool_max") {
            return;
        }
        let clients = self.env.get("PGMUX_MAX_CLIENT_CONN").and_then(|v| v.trim().parse().ok());
        self.cfg.pool_max = Some(clients.unwrap_or(self.cfg.max_client_conn).max(2));
    }

    /// `client_tls_sslmode` with its certificate and key: pgmux offers TLS to the clients that ask.
    fn client_tls(&mut self) -> Result<(), Box<IniError>> {
        let mode = self.held.get("client_tls_sslmode").cloned();
        let mode_name = mode.as_ref().map_or("disable".to_owned(), |m| m.value.to_ascii_lowercase());
        match mode_name.as_str() {
            "disable" => Ok(()),
            "allow" | "prefer" => {
                for (setting, key) in [("client_tls_cert_file", "tls_cert"), ("client_tls_key_file", "tls_key")] {
                    if let Some(item) = self.held.get(setting).cloned()
                        && !self.env_sets(key)
                    {
                        self.set(key, &item.value, &item)?;
                    }
                }
                Ok(())
            }
            _ => {
                let item = mode.expect("a mode other than disable was set");
                let kind = match mode_name.as_str() {
                    "require" | "verify-ca" | "verify-full" => IniErrorKind::NotSupported {
                        key: item.key.clone(),
                        value: item.value.clone(),
                        why: "pgmux offers TLS to the clients that ask for it (allow, prefer) but cannot require \
                              it or check client certificates",
                    },
                    _ => IniErrorKind::Invalid {
                        key: item.key.clone(),
                        reason: ValueError::Expected {
                            expected: "disable, allow, prefer, require, verify-ca or verify-full",
                            got: item.value.clone(),
                        },
                    },
                };
                Err(IniError::at(&item.at, kind))
            }
        }
    }

    fn database(&mut self, item: &Item) -> Result<(), Box<IniError>> {
        let name = item.key.as_str();
        if name == "pgbouncer" || name == "pgmux" {
            return Err(IniError::at(&item.at, IniErrorKind::ReservedName(name.to_owned())));
        }
        let entry_error = |e: EntryError| IniError::at(&item.at, IniErrorKind::Entry(e));
        let entry = Entry::parse_connstr(name, &item.value).map_err(entry_error)?;
        let (mut route, keys) = routes::route_from(&entry).map_err(entry_error)?;
        let owner = Some(format!("database {name}"));
        // A later entry of the same name replaces this one, as in PgBouncer.
        self.routes.retain(|r| r.name != name);
        self.unsupported.retain(|(o, _)| *o != owner);
        for key in keys {
            self.push(owner.clone(), format!("database {name}: {key}"), Some(&item.at), None);
        }
        if route.auth_user.is_some() {
            let note = "auth_user and auth_query are not supported: list the users in auth_file or [users]";
            self.push(owner.clone(), format!("database {name}: auth_user"), Some(&item.at), Some(note));
        }
        match route.host.clone().as_deref() {
            None | Some("") if self.env_sets("database_host") => route.host = None,
            None | Some("") => {
                route.host = Some("127.0.0.1".to_owned());
                let note = "no host: PgBouncer would use the server's Unix socket; pgmux connects to 127.0.0.1";
                self.push(owner, format!("database {name}: host"), Some(&item.at), Some(note));
            }
            Some(host) if host.starts_with(['/', '@']) => {
                return Err(IniError::at(
                    &item.at,
                    IniErrorKind::NotSupported {
                        key: format!("database {name}: host"),
                        value: host.to_owned(),
                        why: "pgmux reaches servers over TCP: give the server's address (host=127.0.0.1)",
                    },
                ));
            }
            Some(list) if list.contains(',') => {
                let first = list.split(',').map(str::trim).find(|h| !h.is_empty()).unwrap_or("127.0.0.1").to_owned();
                let note = format!("a host list: pgmux connects to the first host, {first}");
                route.host = Some(first);
                self.unsupported.push((
                    owner,
                    Unsupported {
                        setting: format!("database {name}: host"),
                        at: Some(item.at.clone()),
                        note: Some(note),
                    },
                ));
            }
            Some(_) => {}
        }
        self.routes.push(route);
        Ok(())
    }

    fn user(&mut self, item: &Item) -> Result<(), Box<IniError>> {
        let name = item.key.as_str();
        let entry_error = |e: EntryError| IniError::at(&item.at, IniErrorKind::Entry(e));
        let entry = Entry::parse_connstr(name, &item.value).map_err(entry_error)?;
        let (user, keys) = routes::user_from(&entry).map_err(entry_error)?;
        let owner = Some(format!("user {name}"));
        self.users.retain(|u| u.name != name);
        self.unsupported.retain(|(o, _)| *o != owner);
        for key in keys {
            self.push(owner.clone(), format!("user {name}: {key}"), Some(&item.at), None);
        }
        self.users.push(user);
        Ok(())
    }
}

/// The one address `listen_addr` names: `*` is every IPv4 address, a name is resolved (IPv4 first).
fn listen_ip(value: &str) -> Result<IpAddr, &'static str> {
    let mut ips: Vec<IpAddr> = Vec::new();
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let ip = match part {
            "*" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
            _ => match part.trim_matches(['[', ']']).parse::<IpAddr>() {
                Ok(ip) => ip,
                Err(_) => {
                    let found: Vec<SocketAddr> =
                        (part, 0).to_socket_addrs().map_err(|_| "the name does not resolve to an address")?.collect();
                    let pick = found.iter().find(|a| a.is_ipv4()).or(found.first());
                    pick.ok_or("the name does not resolve to an address")?.ip()
                }
            },
        };
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    if ips.contains(&IpAddr::V4(Ipv4Addr::UNSPECIFIED)) {
        return Ok(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    }
    match ips.as_slice() {
        [one] => Ok(*one),
        [] => Ok(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        _ => Err("pgmux listens on one address: name one, or * for all"),
    }
}
