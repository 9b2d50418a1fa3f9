//! `database_url`: a libpq-style `postgres://` URL taken apart, and the `sslmode` values libpq knows.

use std::fmt;
use std::path::PathBuf;

use super::error::{UnknownName, UrlError};
use super::secret::Secret;

/// TLS towards the server, as libpq's `sslmode` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// Plaintext, TLS only if the server insists (treated like `prefer`).
    Allow,
    /// TLS if the server offers it, plaintext otherwise; no certificate check.
    Prefer,
    /// TLS or nothing; no certificate check.
    Require,
    /// TLS with a certificate chain to a trusted CA; any host name.
    VerifyCa,
    /// TLS with a trusted certificate for exactly the host connected to.
    VerifyFull,
}

impl SslMode {
    /// Whether the server's certificate is checked against trusted CAs (`verify-ca`, `verify-full`).
    pub fn verifies_certificate(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }

    /// Parses a libpq `sslmode` value.
    pub fn parse(s: &str) -> Result<Self, UnknownName> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(UnknownName {
                    setting: "sslmode",
                    got: other.to_owned(),
                    expected: "disable, allow, prefer, require, verify-ca or verify-full",
                });
            }
        })
    }

    /// Whether a plaintext connection is acceptable when the server declines TLS.
    pub fn plaintext_ok(self) -> bool {
        matches!(self, SslMode::Disable | SslMode::Allow | SslMode::Prefer)
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        })
    }
}

/// Where and as whom pgmux logs in to the database: what a `postgres://` URL names, and what every source of
/// credentials (the URL, a Secrets Manager secret, an IAM token) produces for a new server connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginInfo {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Role to log in as.
    pub user: String,
    /// Its password or IAM token, if the server asks for one.
    pub password: Option<Secret>,
    /// Database name.
    pub dbname: String,
    /// SCRAM passthrough: a client's proved key, answering the server's SCRAM in place of a password.
    pub scram_keys: Option<pgmux_proto::auth::scram::ScramKeys>,
}

impl LoginInfo {
    /// `host:port` for messages.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// `database_url`, taken apart: the login, and the TLS settings the URL may carry.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl {
    /// Host, port, user, password and database.
    pub login: LoginInfo,
    /// `?sslmode=`, if the URL sets it.
    pub sslmode: Option<SslMode>,
    /// `?sslrootcert=`, if the URL sets it: a PEM file of trusted CAs.
    pub sslrootcert: Option<PathBuf>,
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({self})")
    }
}

impl fmt::Display for DatabaseUrl {
    /// The URL with the password replaced, safe for logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let login = &self.login;
        let pw = login.password.as_ref().map(|p| format!(":{p}")).unwrap_or_default();
        write!(f, "postgres://{}{pw}@{}/{}", login.user, login.address(), login.dbname)
    }
}

impl DatabaseUrl {
    /// Parses `postgres://` or `postgresql://` URLs; user, password and database may be percent-encoded.
    pub fn parse(url: &str) -> Result<Self, UrlError> {
        let rest =
            url.strip_prefix("postgres://").or_else(|| url.strip_prefix("postgresql://")).ok_or(UrlError::Scheme)?;
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hostport) = authority.rsplit_once('@').ok_or(UrlError::NoUserInfo)?;
        let (user, password) = match userinfo.split_once(':') {
            Some((u, p)) => (decode(u)?, Some(Secret::new(decode(p)?))),
            None => (decode(userinfo)?, None),
        };
        if user.is_empty() {
            return Err(UrlError::NoUser);
        }
        let (host, port) = split_host_port(hostport)?;
        let dbname = if path.is_empty() { user.clone() } else { decode(path)? };
        let mut sslmode = None;
        let mut sslrootcert = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "sslmode" => sslmode = Some(SslMode::parse(&decode(v)?)?),
                "sslrootcert" => sslrootcert = Some(PathBuf::from(decode(v)?)),
                other => return Err(UrlError::UnknownParameter(other.to_owned())),
            }
        }
        Ok(DatabaseUrl {
            login: LoginInfo { host, port, user, password, dbname, scram_keys: None },
            sslmode,
            sslrootcert,
        })
    }
}

fn split_host_port(hostport: &str) -> Result<(String, u16), UrlError> {
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or(UrlError::UnclosedBracket)?;
        (h.to_owned(), after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (hostport.to_owned(), None),
        }
    };
    if host.is_empty() {
        return Err(UrlError::NoHost);
    }
    let port = match port {
        None | Some("") => 5432,
        Some(p) => p.parse().map_err(|_| UrlError::BadPort(p.to_owned()))?,
    };
    Ok((host, port))
}

fn decode(s: &str) -> Result<String, UrlError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or(UrlError::PercentEncoding)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| UrlError::PercentEncoding)?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| UrlError::NotUtf8)
}
