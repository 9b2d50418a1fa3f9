//! The value types of configuration keys and how each is parsed from TOML, from an environment variable
//! string, or from its built-in default.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

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
    fn text(&self) -> Result<String, String> {
        match self {
            Raw::Env(s) => Ok((*s).to_owned()),
            Raw::Default(s) => Ok((*s).to_owned()),
            Raw::Toml(toml::Value::String(s)) => Ok(s.clone()),
            Raw::Toml(v @ (toml::Value::Integer(_) | toml::Value::Boolean(_) | toml::Value::Float(_))) => {
                Ok(v.to_string())
            }
            Raw::Toml(other) => Err(format!("expected a single value, got a {}", other.type_str())),
        }
    }
}

/// A type a configuration key can hold.
pub(crate) trait ConfigValue: Sized {
    fn parse(raw: &Raw<'_>) -> Result<Self, String>;
    /// The value as a user would write it, with secrets redacted.
    fn show(&self) -> String;
}

impl ConfigValue for usize {
    fn parse(raw: &Raw<'_>) -> Result<Self, String> {
        let text = raw.text()?;
        text.trim().parse().map_err(|_| format!("expected a whole number, got {text:?}"))
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl ConfigValue for String {
    fn parse(raw: &Raw<'_>) -> Result<Self, String> {
        raw.text()
    }
    fn show(&self) -> String {
        self.clone()
    }
}

impl ConfigValue for SocketAddr {
    fn parse(raw: &Raw<'_>) -> Result<Self, String> {
        let text = raw.text()?;
        text.trim().parse().map_err(|_| format!("expected an address like 127.0.0.1:6432, got {text:?}"))
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl ConfigValue for Duration {
    /// `500ms`, `5s`, `2m`, `1h`, or a bare number of seconds.
    fn parse(raw: &Raw<'_>) -> Result<Self, String> {
        let text = raw.text()?;
        parse_duration(text.trim()).ok_or_else(|| format!("expected a duration like 500ms, 5s or 2m, got {text:?}"))
    }
    fn show(&self) -> String {
        format_duration(*self)
    }
}

fn parse_duration(s: &str) -> Option<Duration> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let ms = match unit.trim() {
        "ms" => n,
        "" | "s" => n.checked_mul(1000)?,
        "m" | "min" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(ms))
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
}

impl fmt::Display for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClientAuth::Trust => "trust",
            ClientAuth::Md5 => "md5",
            ClientAuth::ScramSha256 => "scram-sha-256",
        })
    }
}

impl ConfigValue for ClientAuth {
    fn parse(raw: &Raw<'_>) -> Result<Self, String> {
        let text = raw.text()?;
        match text.trim().to_ascii_lowercase().as_str() {
            "trust" => Ok(ClientAuth::Trust),
            "md5" => Ok(ClientAuth::Md5),
            "scram-sha-256" | "scram" => Ok(ClientAuth::ScramSha256),
            _ => Err(format!("expected trust, md5 or scram-sha-256, got {text:?}")),
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
    fn parse(raw: &Raw<'_>) -> Result<Self, String> {
        let text = raw.text()?;
        match text.trim().to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(format!("expected text or json, got {text:?}")),
        }
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

/// TLS towards the server, as libpq's `sslmode` names it. This build speaks plain TCP only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS if the server offers it (this build: never).
    Prefer,
}

/// Where and as whom to connect: a `postgres://` URL taken apart.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Role to log in as.
    pub user: String,
    /// Its password, if the server asks for one.
    pub password: Option<String>,
    /// Database name.
    pub dbname: String,
    /// TLS mode.
    pub sslmode: SslMode,
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({self})")
    }
}

impl fmt::Display for DatabaseUrl {
    /// The URL with the password replaced, safe for logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pw = if self.password.is_some() { ":***" } else { "" };
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        write!(f, "postgres://{}{pw}@{host}:{}/{}", self.user, self.port, self.dbname)
    }
}

impl DatabaseUrl {
    /// `host:port` for messages.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// Parses `postgres://` or `postgresql://` URLs; user, password and database may be percent-encoded.
    pub fn parse(url: &str) -> Result<Self, String> {
        let rest = url
            .strip_prefix("postgres://")
            .or_else(|| url.strip_prefix("postgresql://"))
            .ok_or("expected a URL starting with postgres://")?;
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hostport) = authority.rsplit_once('@').ok_or("the URL names no user (user@host)")?;
        let (user, password) = match userinfo.split_once(':') {
            Some((u, p)) => (decode(u)?, Some(decode(p)?)),
            None => (decode(userinfo)?, None),
        };
        if user.is_empty() {
            return Err("the URL names no user".into());
        }
        let (host, port) = split_host_port(hostport)?;
        let dbname = if path.is_empty() { user.clone() } else { decode(path)? };
        let mut sslmode = SslMode::Prefer;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match (k, v) {
                ("sslmode", "disable") => sslmode = SslMode::Disable,
                ("sslmode", "allow" | "prefer") => sslmode = SslMode::Prefer,
                ("sslmode", other) => {
                    return Err(format!("sslmode={other} needs TLS to the server, which this build does not have"));
                }
                (other, _) => return Err(format!("unknown URL parameter {other:?}")),
            }
        }
        Ok(DatabaseUrl { host, port, user, password, dbname, sslmode })
    }
}

fn split_host_port(hostport: &str) -> Result<(String, u16), String> {
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or("unclosed [ in host")?;
        (h.to_owned(), after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (hostport.to_owned(), None),
        }
    };
    if host.is_empty() {
        return Err("the URL names no host".into());
    }
    let port = match port {
        None | Some("") => 5432,
        Some(p) => p.parse().map_err(|_| format!("bad port {p:?}"))?,
    };
    Ok((host, port))
}

fn decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or("bad percent-encoding")?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| "bad percent-encoding")?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "percent-encoding is not UTF-8".into())
}

impl ConfigValue for DatabaseUrl {
    fn parse(raw: &Raw<'_>) -> Result<Self, String> {
        let text = raw.text()?;
        if text.is_empty() && matches!(raw, Raw::Default(_)) {
            // No default: `validate` reports the missing key.
            return Ok(DatabaseUrl {
                host: String::new(),
                port: 5432,
                user: String::new(),
                password: None,
                dbname: String::new(),
                sslmode: SslMode::Prefer,
            });
        }
        DatabaseUrl::parse(text.trim())
    }
    fn show(&self) -> String {
        self.to_string()
    }
}
