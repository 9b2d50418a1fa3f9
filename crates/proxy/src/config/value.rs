//! The value types of configuration keys and how each is parsed from TOML, from an environment variable
//! string, or from its built-in default.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::duration::parse_duration;

use super::error::ValueError;
pub use super::role::{NodeRole, TargetSessionAttrs};
pub use super::secret::Secret;
pub use super::url::{DatabaseUrl, LoginInfo, SslMode};

/// A value before parsing.
#[derive(Debug)]
pub(crate) enum Raw<'a> {
    /// From the TOML file.
    Toml(&'a toml::Value),
    /// From an environment variable.
    Env(&'a str),
    /// The default written in the key table.
    Default(&'static str),
}

impl Raw<'_> {
    /// The value as text: strings as they are, other TOML scalars in their TOML form.
    fn text(&self) -> Result<String, ValueError> {
        match self {
            Raw::Env(s) => Ok((*s).to_owned()),
            Raw::Default(s) => Ok((*s).to_owned()),
            Raw::Toml(toml::Value::String(s)) => Ok(s.clone()),
            Raw::Toml(v @ (toml::Value::Integer(_) | toml::Value::Boolean(_) | toml::Value::Float(_))) => {
                Ok(v.to_string())
            }
            Raw::Toml(other) => Err(ValueError::NotSingle(other.type_str())),
        }
    }
}

/// `text` is not what a key of this type accepts.
fn expected(what: &'static str, text: String) -> ValueError {
    ValueError::Expected { expected: what, got: text }
}

/// A type a configuration key can hold.
pub(crate) trait ConfigValue: Sized {
    fn parse(raw: &Raw<'_>) -> Result<Self, ValueError>;
    /// The value as a user would write it, with secrets redacted.
    fn show(&self) -> String;
}

impl ConfigValue for usize {
    fn parse(raw: &Raw<'_>) -> Result<Self, ValueError> {
        let text = raw.text()?;
        text.trim().parse().map_err(|_| expected("a whole number", text))
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl ConfigValue for bool {
    fn parse(raw: &Raw<'_>) -> Result<Self, ValueError> {
        let text = raw.text()?;
        match text.trim().to_ascii_lowercase().as_str() {
            "true" | "on" | "yes" | "1" => Ok(true),
            "false" | "off" | "no" | "0" => Ok(false),
            _ => Err(expected("true or false", text)),
        }
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl ConfigValue for u16 {
    fn parse(raw: &Raw<'_>) -> Result<Self, ValueError> {
        let text = raw.text()?;
        text.trim().parse().map_err(|_| expected("a port number", text))
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl ConfigValue for PathBuf {
    fn parse(raw: &Raw<'_>) -> Result<Self, ValueError> {
        Ok(PathBuf::from(raw.text()?))
    }
    fn show(&self) -> String {
        self.display().to_string()
    }
}

/// An optional setting: empty means unset.
impl<T: ConfigValue> ConfigValue for Option<T> {
    fn parse(raw: &Raw<'_>) -> Result<Self, ValueError> {
        if raw.text()?.trim().is_empty() { Ok(None) } else { T::parse(raw).map(Some) }
    }
    fn show(&self) -> String {
        self.as_ref().map(ConfigValue::show).unwrap_or_default()
    }
}

impl ConfigValue for Secret {
    fn parse(raw: &Raw<'_>) -> Result<Self, ValueError> {
        Ok(Secret::new(raw.text()?))
    }
    fn show(&self) -> String {
        if self.is_empty() { String::new() } else { self.to_string() }
    }
}

impl ConfigValue for super::ReaderFallback {
    fn parse(raw: &Raw<'_>) -> Result<Self, ValueError> {
        super::ReaderFallback::parse(raw.text()?.trim())
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl ConfigValue for super::PoolMode {
    fn parse(raw: &Raw<'_>) -> Result<Self, ValueError> {
        super::PoolMode::parse(raw.text()?.trim())
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl ConfigValue for SslMode {
    fn parse(raw: &Raw<'_>) -> Result<Self, ValueError> {
        let text = raw.text()?;
        Ok(SslMode::parse(text.trim())?)
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl ConfigValue for TargetSessionAttrs {
    fn parse(raw: &Raw<'_>) -> Result<Self, ValueError> {
        Ok(TargetSessionAttrs::parse(raw.text()?.trim())?)
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl ConfigValue for String {
    fn parse(raw: &Raw<'_>) -> Result<Self, ValueError> {
        raw.text()
    }
    fn show(&self) -> String {
        self.clone()
    }
}

impl ConfigValue for SocketAddr {
    fn parse(raw: &Raw<'_>) -> Result<Self, ValueError> {
        let text = raw.text()?;
        text.trim().parse().map_err(|_| expected("an address like 127.0.0.1:6432", text))
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl ConfigValue for Duration {
    /// `500ms`, `5s`, `2m`, `1h`, or a bare number of seconds.
    fn parse(raw: &Raw<'_>) -> Result<Self, ValueError> {
        let text = raw.text()?;
        match parse_duration(text.trim()) {
            Some(d) => Ok(d),
            None => Err(expected("a duration like 500ms, 5s or 2m", text)),
        }
    }
    fn show(&self) -> String {
        format_duration(*self)
    }
}

/// A duration in the largest unit that shows it exactly.
pub(crate) fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0 => "0s".to_owned(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

/// How clients prove who they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// No password.
    Trust,
    /// PostgreSQL's MD5 challenge.
    Md5,
    /// SCRAM-SHA-256.
    ScramSha256,
    /// The password in clear text (PgBouncer's `plain`), checked against however it is stored; accepted only
    /// over TLS, the Unix socket or loopback.
    Plain,
    /// The first line of `auth_hba_file` that covers the login picks one of the others (or cert, peer,
    /// reject).
    Hba,
    /// A client certificate from `tls_client_ca` whose common name is the user.
    Cert,
    /// Over the Unix socket, the OS user at the other end is the user.
    Peer,
}

impl fmt::Display for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClientAuth::Trust => "trust",
            ClientAuth::Md5 => "md5",
            ClientAuth::ScramSha256 => "scram-sha-256",
            ClientAuth::Plain => "plain",
            ClientAuth::Hba => "hba",
            ClientAuth::Cert => "cert",
            ClientAuth::Peer => "peer",
        })
    }
}

impl ConfigValue for ClientAuth {
    fn parse(raw: &Raw<'_>) -> Result<Self, ValueError> {
        let text = raw.text()?;
        match text.trim().to_ascii_lowercase().as_str() {
            "trust" => Ok(ClientAuth::Trust),
            "md5" => Ok(ClientAuth::Md5),
            "scram-sha-256" | "scram" => Ok(ClientAuth::ScramSha256),
            "plain" => Ok(ClientAuth::Plain),
            "hba" => Ok(ClientAuth::Hba),
            "cert" => Ok(ClientAuth::Cert),
            "peer" => Ok(ClientAuth::Peer),
            _ => Err(expected("trust, md5, scram-sha-256, plain, hba, cert or peer", text)),
        }
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

impl ConfigValue for LogFormat {
    fn parse(raw: &Raw<'_>) -> Result<Self, ValueError> {
        let text = raw.text()?;
        match text.trim().to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(expected("text or json", text)),
        }
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl ConfigValue for DatabaseUrl {
    fn parse(raw: &Raw<'_>) -> Result<Self, ValueError> {
        let text = raw.text()?;
        if text.is_empty() && matches!(raw, Raw::Default(_)) {
            // No default: `validate` reports the missing key.
            return Ok(DatabaseUrl {
                login: LoginInfo {
                    host: String::new(),
                    port: 5432,
                    user: String::new(),
                    password: None,
                    dbname: String::new(),
                    scram_keys: None,
                },
                sslmode: None,
                sslrootcert: None,
            });
        }
        Ok(DatabaseUrl::parse(text.trim())?)
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

/// A list of user names: a TOML array of strings, or names separated by commas (in TOML or the
/// environment). Empty when unset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserList(pub Vec<String>);

impl UserList {
    /// Whether `user` is on the list.
    pub fn contains(&self, user: &str) -> bool {
        self.0.iter().any(|u| u == user)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl ConfigValue for UserList {
    fn parse(raw: &Raw<'_>) -> Result<Self, ValueError> {
        let names: Vec<String> = match raw {
            Raw::Toml(toml::Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_owned).ok_or_else(|| ValueError::NotUserNames(v.to_string())))
                .collect::<Result<_, _>>()?,
            _ => raw.text()?.split(',').map(|s| s.trim().to_owned()).collect(),
        };
        let names: Vec<String> = names.into_iter().map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()).collect();
        if let Some(bad) = names.iter().find(|n| n.len() > 63 || n.chars().any(char::is_control)) {
            return Err(ValueError::NotAUserName(bad.clone()));
        }
        Ok(UserList(names))
    }
    fn show(&self) -> String {
        self.0.join(",")
    }
}
