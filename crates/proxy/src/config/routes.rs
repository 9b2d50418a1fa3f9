//! Routes and users: the databases clients may name, where each is on the server and how pgmux logs in
//! there, and what is particular to a user (a password, a secret, IAM, limits).
//!
//! One vocabulary for three ways of writing it: TOML (`[[databases]]`, `[[users]]`), the environment
//! (`PGMUX_DATABASES`, `PGMUX_USERS`: `name = key=value ...` entries separated by `;` or new lines, as
//! Lambda takes them), and PgBouncer's `[databases]` / `[users]` sections, whose values are libpq-style
//! `key=value` strings ([`Entry::parse_connstr`]). Each key is applied by one function per kind
//! ([`RouteSpec::apply`], [`UserSpec::apply`]), so the three cannot drift apart. A key pgmux has no
//! equivalent for is refused in TOML and the environment, and in PgBouncer's files collected for one warning
//! ([`Applied::Unsupported`]), never ignored in silence.

use std::fmt;

use super::{Secret, UnknownName, ValueError};

mod entry;
pub use entry::Entry;

/// How a pool's server logins get their credential.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerAuth {
    /// A password from the configuration or an `auth_file` (plaintext, or an md5 hash for md5 servers), or
    /// a SCRAM verifier, with which the pool logs in by the key a client proved (SCRAM passthrough).
    Password,
    /// An RDS IAM auth token per login, for the pool's user, signed with the AWS credentials.
    Iam,
    /// A Secrets Manager secret (`secret_arn` of the route or the user), re-read when a login is refused.
    Secret,
    /// The client's own password, accepted only over the Unix socket, loopback or TLS, proved once by a
    /// server login and checked locally afterwards.
    Passthrough,
}

impl ServerAuth {
    fn parse(s: &str) -> Result<ServerAuth, ValueError> {
        match s {
            "password" => Ok(ServerAuth::Password),
            "iam" => Ok(ServerAuth::Iam),
            "secret" => Ok(ServerAuth::Secret),
            "passthrough" => Ok(ServerAuth::Passthrough),
            other => Err(UnknownName {
                setting: "auth",
                got: other.to_owned(),
                expected: "password, iam, secret or passthrough",
            }
            .into()),
        }
    }
}

impl fmt::Display for ServerAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServerAuth::Password => "password",
            ServerAuth::Iam => "iam",
            ServerAuth::Secret => "secret",
            ServerAuth::Passthrough => "passthrough",
        })
    }
}

/// How long a client keeps its server connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PoolMode {
    /// For one transaction at a time (pgmux's way).
    #[default]
    Transaction,
    /// For as long as the client is connected: what migrations and session-level tools need.
    Session,
}

impl PoolMode {
    pub(crate) fn parse(s: &str) -> Result<PoolMode, ValueError> {
        match s {
            "transaction" => Ok(PoolMode::Transaction),
            "session" => Ok(PoolMode::Session),
            "statement" => Err(ValueError::NotSupported(
                "pool_mode = statement is not supported: pgmux never ends a transaction for a client \
                 (multi-statement transactions would break); use transaction",
            )),
            other => {
                Err(UnknownName { setting: "pool_mode", got: other.to_owned(), expected: "transaction or session" }
                    .into())
            }
        }
    }
}

impl fmt::Display for PoolMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PoolMode::Transaction => "transaction",
            PoolMode::Session => "session",
        })
    }
}

/// A database as clients name it (`name`), and where and how pgmux reaches it. Unset fields fall back on
/// the global settings (`database_url`'s host and port, `pool_max`, ...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteSpec {
    /// The name clients give as their database; `*` is the fallback for any other name.
    pub name: String,
    pub host: Option<String>,
    pub port: Option<u16>,
    /// The database on the server (default: the client-visible name; for `*`, the name the client gave).
    pub dbname: Option<String>,
    /// A server user every client of this route logs in as (default: the client's own user, one pool each).
    pub user: Option<String>,
    /// That user's password.
    pub password: Option<Secret>,
    pub auth: Option<ServerAuth>,
    pub secret_arn: Option<String>,
    /// PgBouncer's `pool_size`: server connections of one pool of this route.
    pub pool_max: Option<usize>,
    pub min_pool_size: Option<usize>,
    /// All pools of this route together.
    pub max_db_connections: Option<usize>,
    /// Client connections naming this database at once (PgBouncer's `max_db_client_connections`).
    pub max_db_client_connections: Option<usize>,
    pub pool_mode: Option<PoolMode>,
    /// Its pools' reserve (PgBouncer's `reserve_pool_size`, also `reserve_pool`).
    pub reserve_pool_size: Option<usize>,
    /// Its own `server_lifetime` (unset: the global one).
    pub server_lifetime: Option<std::time::Duration>,
    /// Its own `connect_query` (unset: the global one).
    pub connect_query: Option<String>,
    /// The user whose credentials read others' (PgBouncer's `auth_user`, with `auth_query`).
    pub auth_user: Option<String>,
    /// The entry whose server and database `auth_query` runs on (PgBouncer's `auth_dbname`).
    pub auth_dbname: Option<String>,
    /// Its own `auth_query` (unset: the global one): what its clients' users are looked up with.
    pub auth_query: Option<String>,
    /// A reader route's instances, `host[:port]` each (the port defaults to the route's), or `aurora`:
    /// those the cluster's topology lists. Each transaction goes to a healthy one; `host`/`port` stay the
    /// writer, for `reader_fallback = writer`.
    pub readers: Vec<String>,
    /// Where `readers = "aurora"` finds instance endpoints (`<server_id>.<instance_domain>`); default: the
    /// domain the route's cluster endpoint implies.
    pub instance_domain: Option<String>,
    pub reader_fallback: Option<ReaderFallback>,
}

/// Where a reader route's transaction goes when no reader is healthy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReaderFallback {
    /// To the writer (counted): reads keep working while the writer does.
    #[default]
    Writer,
    /// To a reader anyway, waiting as for any connection (up to `query_wait_timeout`).
    Wait,
    /// Nowhere: the transaction fails at once with 08006.
    Error,
}

impl ReaderFallback {
    pub(crate) fn parse(s: &str) -> Result<ReaderFallback, ValueError> {
        match s {
            "writer" => Ok(ReaderFallback::Writer),
            "wait" => Ok(ReaderFallback::Wait),
            "error" => Ok(ReaderFallback::Error),
            other => Err(UnknownName {
                setting: "reader_fallback",
                got: other.to_owned(),
                expected: "writer, wait or error",
            }
            .into()),
        }
    }
}

impl fmt::Display for ReaderFallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReaderFallback::Writer => "writer",
            ReaderFallback::Wait => "wait",
            ReaderFallback::Error => "error",
        })
    }
}

/// What is particular to one user: credentials and limits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserSpec {
    pub name: String,
    /// Plaintext, `md5<32 hex>` or a `SCRAM-SHA-256$...` verifier: what clients are checked against, and
    /// (plaintext or md5 only) what pgmux logs in to the server with.
    pub password: Option<Secret>,
    pub auth: Option<ServerAuth>,
    pub secret_arn: Option<String>,
    /// PgBouncer's `pool_size` for this user's pools.
    pub pool_max: Option<usize>,
    /// All of this user's pools together.
    pub max_user_connections: Option<usize>,
    /// Its pools' reserve (PgBouncer's `reserve_pool_size`).
    pub reserve_pool_size: Option<usize>,
    /// Client connections logged in as this user at once (PgBouncer's `max_user_client_connections`).
    pub max_user_client_connections: Option<usize>,
    pub pool_mode: Option<PoolMode>,
    /// Its own query_timeout, idle_transaction_timeout, client_idle_timeout and transaction_timeout.
    pub timeouts: super::user_timeouts::UserTimeouts,
}

/// Why an entry could not be read: which entry, which key, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{entry}: {reason}")]
pub struct EntryError {
    /// `database <name>` or `user <name>`, or the variable an entry came from.
    pub entry: String,
    /// The key, when one is to blame.
    pub key: Option<String>,
    pub kind: EntryErrorKind,
    pub reason: String,
}

/// What kind of mistake an [`EntryError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryErrorKind {
    /// Not `key=value` pairs: a key without a value, an unclosed quote, an entry without a name.
    Syntax,
    /// A key neither pgmux nor PgBouncer has.
    UnknownKey,
    /// A value the key cannot take.
    Invalid,
}

impl EntryError {
    fn syntax(entry: &str, reason: String) -> EntryError {
        EntryError { entry: entry.to_owned(), key: None, kind: EntryErrorKind::Syntax, reason }
    }

    fn at(entry: String, key: &str, failed: KeyError) -> EntryError {
        let (kind, reason) = match failed {
            KeyError::Unknown => (EntryErrorKind::UnknownKey, format!("unknown key {key:?}")),
            KeyError::Invalid(reason) => (EntryErrorKind::Invalid, reason.to_string()),
        };
        EntryError { entry, key: Some(key.to_owned()), kind, reason }
    }
}

/// Why one key could not be applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// The kind of entry has no such key.
    Unknown,
    /// The value does not fit the key.
    Invalid(ValueError),
}

impl From<ValueError> for KeyError {
    fn from(reason: ValueError) -> KeyError {
        KeyError::Invalid(reason)
    }
}

/// What applying one key did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    Set,
    /// A key PgBouncer has and pgmux does not: the caller refuses it or lists it in a warning.
    Unsupported,
}

fn number<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, ValueError> {
    v.trim().parse().map_err(|_| ValueError::NotANumber { key: key.to_owned(), got: v.to_owned() })
}

fn parse_bool(v: &str) -> Result<bool, ValueError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "yes" | "1" => Ok(true),
        "false" | "off" | "no" | "0" => Ok(false),
        _ => Err(ValueError::Expected { expected: "true or false", got: v.to_owned() }),
    }
}

fn text(v: &str) -> Option<String> {
    (!v.is_empty()).then(|| v.to_owned())
}

/// The `readers` value that makes a reader route find its instances in the cluster's topology.
const DISCOVER_READERS: &str = "aurora";

/// Keys of PgBouncer's `[databases]` entries that pgmux does not have.
const ROUTE_KEYS_NOT_SUPPORTED: &[&str] = &[
    "client_encoding",
    "datestyle",
    "timezone",
    "application_name",
    "load_balance_hosts",
    "query_wait_timeout",
    "target_session_attrs",
];

/// Keys of PgBouncer's `[users]` entries that pgmux does not have.
const USER_KEYS_NOT_SUPPORTED: &[&str] = &["query_wait_timeout"];

impl RouteSpec {
    /// Whether its readers come from the cluster's topology (`readers = "aurora"`).
    pub fn discovers_readers(&self) -> bool {
        matches!(self.readers.as_slice(), [one] if one.eq_ignore_ascii_case(DISCOVER_READERS))
    }

    /// Applies one key of a route entry.
    pub fn apply(&mut self, key: &str, value: &str) -> Result<Applied, KeyError> {
        match key {
            "host" => self.host = text(value),
            "port" => self.port = Some(number(key, value)?),
            "dbname" => self.dbname = text(value),
            "user" => self.user = text(value),
            "password" => self.password = Some(Secret::new(value)),
            "auth" => self.auth = Some(ServerAuth::parse(value)?),
            "secret_arn" => {
                self.secret_arn = text(value);
                self.auth.get_or_insert(ServerAuth::Secret);
            }
            "iam" => {
                if parse_bool(value)? {
                    self.auth = Some(ServerAuth::Iam);
                }
            }
            "pool_size" | "pool_max" => self.pool_max = Some(number(key, value)?),
            "min_pool_size" => self.min_pool_size = Some(number(key, value)?),
            "reserve_pool_size" | "reserve_pool" => self.reserve_pool_size = Some(number(key, value)?),
            "max_db_connections" => self.max_db_connections = Some(number(key, value)?),
            "max_db_client_connections" => self.max_db_client_connections = Some(number(key, value)?),
            "pool_mode" => self.pool_mode = Some(PoolMode::parse(value)?),
            "server_lifetime" => {
                let expected = ValueError::Expected {
                    expected: "a duration like 30s, 1h or a number of seconds",
                    got: value.to_owned(),
                };
                self.server_lifetime = Some(super::duration::parse_duration(value.trim()).ok_or(expected)?);
            }
            "connect_query" => self.connect_query = text(value.trim()),
            "auth_user" => self.auth_user = text(value),
            "auth_dbname" => self.auth_dbname = text(value),
            "auth_query" => self.auth_query = text(value.trim()),
            "readers" => {
                self.readers = value.split(',').map(str::trim).filter(|h| !h.is_empty()).map(str::to_owned).collect();
            }
            "instance_domain" => self.instance_domain = text(value.trim()),
            "reader_fallback" => self.reader_fallback = Some(ReaderFallback::parse(value.trim())?),
            k if ROUTE_KEYS_NOT_SUPPORTED.contains(&k) => return Ok(Applied::Unsupported),
            _ => return Err(KeyError::Unknown),
        }
        Ok(Applied::Set)
    }
}

impl UserSpec {
    /// Applies one key of a user entry.
    pub fn apply(&mut self, key: &str, value: &str) -> Result<Applied, KeyError> {
        if let Some(set) = self.timeouts.apply(key, value) {
            return set.map(|()| Applied::Set).map_err(KeyError::from);
        }
        match key {
            "password" => self.password = Some(Secret::new(value)),
            "auth" => self.auth = Some(ServerAuth::parse(value)?),
            "secret_arn" => {
                self.secret_arn = text(value);
                self.auth.get_or_insert(ServerAuth::Secret);
            }
            "iam" => {
                if parse_bool(value)? {
                    self.auth = Some(ServerAuth::Iam);
                }
            }
            "pool_size" | "pool_max" => self.pool_max = Some(number(key, value)?),
            "max_user_connections" => self.max_user_connections = Some(number(key, value)?),
            "reserve_pool_size" => self.reserve_pool_size = Some(number(key, value)?),
            "max_user_client_connections" => self.max_user_client_connections = Some(number(key, value)?),
            "pool_mode" => self.pool_mode = Some(PoolMode::parse(value)?),
            k if USER_KEYS_NOT_SUPPORTED.contains(&k) => return Ok(Applied::Unsupported),
            _ => return Err(KeyError::Unknown),
        }
        Ok(Applied::Set)
    }
}

/// Builds a route from an entry: every key applied, the ones pgmux does not have returned.
pub fn route_from(entry: &Entry) -> Result<(RouteSpec, Vec<String>), EntryError> {
    let mut route = RouteSpec { name: entry.name.clone(), ..RouteSpec::default() };
    let mut unsupported = Vec::new();
    for (k, v) in &entry.pairs {
        let applied = route.apply(k, v).map_err(|e| EntryError::at(format!("database {}", entry.name), k, e))?;
        if applied == Applied::Unsupported {
            unsupported.push(k.clone());
        }
    }
    Ok((route, unsupported))
}

/// Builds a user from an entry, as [`route_from`] does.
pub fn user_from(entry: &Entry) -> Result<(UserSpec, Vec<String>), EntryError> {
    let mut user = UserSpec { name: entry.name.clone(), ..UserSpec::default() };
    let mut unsupported = Vec::new();
    for (k, v) in &entry.pairs {
        let applied = user.apply(k, v).map_err(|e| EntryError::at(format!("user {}", entry.name), k, e))?;
        if applied == Applied::Unsupported {
            unsupported.push(k.clone());
        }
    }
    Ok((user, unsupported))
}

/// The environment variable that lists the databases, for Lambda and containers.
pub const DATABASES_VAR: &str = "PGMUX_DATABASES";
/// The environment variable that lists the users.
pub const USERS_VAR: &str = "PGMUX_USERS";

/// A key PgBouncer has and pgmux does not, in TOML or the environment: an error (in PgBouncer's own files,
/// a warning).
fn refuse_unsupported(entry: &str, keys: Vec<String>) -> Result<(), EntryError> {
    match keys.first() {
        None => Ok(()),
        Some(key) => Err(EntryError {
            entry: entry.to_owned(),
            key: Some(key.clone()),
            kind: EntryErrorKind::UnknownKey,
            reason: format!("{key} is a PgBouncer setting pgmux does not have (docs/migrating-from-pgbouncer.md)"),
        }),
    }
}

/// The entries of a TOML array of tables (`[[databases]]` or `[[users]]`): each table's `name` and its other
/// keys as text.
fn toml_entries(kind: &str, value: &toml::Value) -> Result<Vec<Entry>, EntryError> {
    let bad = |reason: String| EntryError { entry: kind.to_owned(), key: None, kind: EntryErrorKind::Syntax, reason };
    let toml::Value::Array(items) = value else {
        return Err(bad(format!("[[{kind}]] must be a list of tables, got a {}", value.type_str())));
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let toml::Value::Table(table) = item else {
            return Err(bad(format!("each [[{kind}]] entry must be a table, got a {}", item.type_str())));
        };
        let Some(toml::Value::String(name)) = table.get("name") else {
            return Err(bad(format!("each [[{kind}]] entry needs a name")));
        };
        let mut pairs = Vec::with_capacity(table.len());
        for (k, v) in table.iter().filter(|(k, _)| *k != "name") {
            let text = match v {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(_) | toml::Value::Boolean(_) | toml::Value::Float(_) => v.to_string(),
                other => return Err(bad(format!("{name}: {k} must be a single value, got a {}", other.type_str()))),
            };
            pairs.push((k.clone(), text));
        }
        out.push(Entry { name: name.clone(), pairs });
    }
    Ok(out)
}

fn routes_of(entries: &[Entry]) -> Result<Vec<RouteSpec>, EntryError> {
    entries
        .iter()
        .map(|e| {
            let (route, unsupported) = route_from(e)?;
            refuse_unsupported(&format!("database {}", e.name), unsupported)?;
            Ok(route)
        })
        .collect()
}

fn users_of(entries: &[Entry]) -> Result<Vec<UserSpec>, EntryError> {
    entries
        .iter()
        .map(|e| {
            let (user, unsupported) = user_from(e)?;
            refuse_unsupported(&format!("user {}", e.name), unsupported)?;
            Ok(user)
        })
        .collect()
}

/// `[[databases]]` of a TOML file.
pub(crate) fn routes_from_toml(value: &toml::Value) -> Result<Vec<RouteSpec>, EntryError> {
    routes_of(&toml_entries("databases", value)?)
}

/// `[[users]]` of a TOML file.
pub(crate) fn users_from_toml(value: &toml::Value) -> Result<Vec<UserSpec>, EntryError> {
    users_of(&toml_entries("users", value)?)
}

/// `PGMUX_DATABASES`.
pub(crate) fn routes_from_env(list: &str) -> Result<Vec<RouteSpec>, EntryError> {
    routes_of(&Entry::parse_list(DATABASES_VAR, list)?)
}

/// `PGMUX_USERS`.
pub(crate) fn users_from_env(list: &str) -> Result<Vec<UserSpec>, EntryError> {
    users_of(&Entry::parse_list(USERS_VAR, list)?)
}

/// Checks what each entry cannot check alone: names listed once, a route's server user with a password
/// or another way to log in.
pub(crate) fn validate(routes: &[RouteSpec], users: &[UserSpec]) -> Result<(), super::ConfigError> {
    let mut seen = std::collections::BTreeSet::new();
    for r in routes {
        if !seen.insert(r.name.as_str()) {
            return Err(super::ConfigError::Duplicate { kind: "database", name: r.name.clone() });
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for u in users {
        if !seen.insert(u.name.as_str()) {
            return Err(super::ConfigError::Duplicate { kind: "user", name: u.name.clone() });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
