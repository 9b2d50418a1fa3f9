//! Who may log in how, by where they come from: `client_auth = "hba"` reads a file in PostgreSQL's
//! pg_hba.conf format (`auth_hba_file`, PgBouncer's name) and, for the `map=` option of `cert` and `peer`
//! lines, one in pg_ident.conf's format (`auth_ident_file`). Pure: reading the files, and finding the line
//! that decides a login. The login side (the client's certificate, the Unix peer's OS user) is in
//! `client::access`.
//!
//! What is read, as PostgreSQL documents it: `local DATABASE USER METHOD [OPTIONS]` and
//! `host|hostssl|hostnossl DATABASE USER ADDRESS METHOD [OPTIONS]`; comma lists; `"quoted"` names (a
//! doubled quote is a quote; a quoted `all` is a name, not the keyword); `#` comments; `all`, `sameuser` and
//! `replication` as databases; `all` as user; addresses as CIDR, as `address mask`, or `all`. Methods:
//! trust, reject, password, md5, scram-sha-256, cert and peer. What pgmux does not do (group membership
//! `+role`, `@file` includes, host names, `samehost`, regular expressions in the ident file, other methods
//! and options) is refused when the file is read, naming the file and the line, so that a reload keeps the
//! rules that were in force rather than guess.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

#[cfg(test)]
mod tests;

/// A file that cannot be used; the line, when one is at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key} {}{}: {reason}", file.display(), line.map(|n| format!(", line {n}")).unwrap_or_default())]
pub struct HbaError {
    /// `auth_hba_file` or `auth_ident_file`.
    pub key: &'static str,
    /// The file.
    pub file: PathBuf,
    /// Its line at fault (from 1).
    pub line: Option<usize>,
    /// What is wrong, and what to do.
    pub reason: String,
}

/// How a line's clients come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// `local`: the Unix socket.
    Local,
    /// `host`: TCP, with or without TLS.
    Host,
    /// `hostssl`: TCP with TLS.
    HostSsl,
    /// `hostnossl`: TCP without TLS.
    HostNoSsl,
}

/// What the first matching line asks of a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Let in.
    Trust,
    /// Refuse.
    Reject,
    /// The password in clear text (pgmux's `plain`).
    Password,
    /// The md5 challenge (SCRAM for a user stored as a SCRAM verifier, as PostgreSQL does).
    Md5,
    /// SCRAM-SHA-256.
    ScramSha256,
    /// A client certificate from `tls_client_ca` whose common name is the user (or maps to it).
    Cert,
    /// The OS user at the other end of the Unix socket is the user (or maps to it).
    Peer,
}

/// A database or user name as a line lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Name {
    All,
    SameUser,
    Replication,
    Exactly(String),
}

/// Which client addresses a `host*` line covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Address {
    Any,
    Net { net: IpAddr, prefix: u8 },
}

/// One line of the hba file.
#[derive(Clone, Debug)]
pub struct Rule {
    /// Its line number in the file, for logs.
    pub line: usize,
    link: Link,
    databases: Vec<Name>,
    users: Vec<Name>,
    address: Address,
    /// What it asks.
    pub method: Method,
    /// `map=`: the ident map that says which OS or certificate names may log in as which users.
    pub map: Option<String>,
}

/// Where a login comes from and what it asks for.
#[derive(Clone, Copy, Debug)]
pub struct Attempt<'a> {
    /// `None`: the Unix socket; else the client's address.
    pub address: Option<IpAddr>,
    /// Over TLS.
    pub tls: bool,
    /// The database the client named.
    pub database: &'a str,
    /// The user the client named.
    pub user: &'a str,
}

/// The hba file's rules and the ident file's maps, as read at start-up or at the last good reload.
#[derive(Clone, Debug, Default)]
pub struct AccessRules {
    /// The hba file, for messages.
    pub file: PathBuf,
    rules: Vec<Rule>,
    maps: Vec<MapLine>,
}

/// One line of the ident file: `map system-name database-user`.
#[derive(Clone, Debug)]
struct MapLine {
    map: String,
    system: String,
    /// `None`: `all`, any user.
    user: Option<String>,
}

/// Whether an ident map lets `system` log in as a user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapVerdict {
    /// It does.
    Allowed,
    /// The map has no line for that pair.
    NoMatch,
    /// No map of that name (or no ident file).
    NoSuchMap,
}

impl AccessRules {
    /// Reads the hba file and, if named, the ident file.
    pub fn load(hba: &Path, ident: Option<&Path>) -> Result<AccessRules, HbaError> {
        let read = |key: &'static str, file: &Path| {
            std::fs::read_to_string(file).map_err(|e| HbaError {
                key,
                file: file.to_owned(),
                line: None,
                reason: format!("cannot read it: {e}"),
            })
        };
        let rules = parse_hba(&read("auth_hba_file", hba)?).map_err(|(line, reason)| HbaError {
            key: "auth_hba_file",
            file: hba.to_owned(),
            line: Some(line),
            reason,
        })?;
        let maps = match ident {
            Some(file) => parse_ident(&read("auth_ident_file", file)?).map_err(|(line, reason)| HbaError {
                key: "auth_ident_file",
                file: file.to_owned(),
                line: Some(line),
                reason,
            })?,
            None => Vec::new(),
        };
        Ok(AccessRules { file: hba.to_owned(), rules, maps })
    }

    /// The first line that covers `attempt`; `None`: none does, and the login is refused.
    pub fn find(&self, attempt: &Attempt<'_>) -> Option<&Rule> {
        self.rules.iter().find(|rule| rule.covers(attempt))
    }

    /// Whether `map` lets the OS or certificate name `system` log in as `user`.
    pub fn map_allows(&self, map: &str, system: &str, user: &str) -> MapVerdict {
        let mut lines = self.maps.iter().filter(|l| l.map == map).peekable();
        if lines.peek().is_none() {
            return MapVerdict::NoSuchMap;
        }
        if lines.any(|l| l.system == system && l.user.as_deref().is_none_or(|u| u == user)) {
            MapVerdict::Allowed
        } else {
            MapVerdict::NoMatch
        }
    }
}

impl Rule {
    fn covers(&self, attempt: &Attempt<'_>) -> bool {
        let link = match (self.link, attempt.address) {
            (Link::Local, None) => true,
            (Link::Host, Some(_)) => true,
            (Link::HostSsl, Some(_)) => attempt.tls,
            (Link::HostNoSsl, Some(_)) => !attempt.tls,
            _ => false,
        };
        let address = match (self.address, attempt.address) {
            (_, None) | (Address::Any, _) => true,
            (Address::Net { net, prefix }, Some(client)) => in_net(client, net, prefix),
        };
        let database = self.databases.iter().any(|name| match name {
            Name::All => true,
            Name::SameUser => attempt.database == attempt.user,
            // pgmux serves no replication connections: such a line covers none of its logins.
            Name::Replication => false,
            Name::Exactly(db) => db == attempt.database,
        });
        let user = self.users.iter().any(|name| match name {
            Name::Exactly(user) => user == attempt.user,
            _ => true,
        });
        link && address && database && user
    }
}

/// Whether `client` is in `net`/`prefix`; an IPv4 client seen as an IPv4-mapped IPv6 address counts as IPv4.
fn in_net(client: IpAddr, net: IpAddr, prefix: u8) -> bool {
    let client = match client {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(client, IpAddr::V4),
        v4 => v4,
    };
    match (client, net) {
        (IpAddr::V4(c), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(c) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(c), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(c) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// One name of a field: its text, and whether it was quoted (a quoted keyword is a name).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Token {
    text: String,
    quoted: bool,
}

/// A line's fields, each a comma list of tokens; `#` starts a comment outside quotes. Spaces around a
/// comma do not end the list.
fn fields(line: &str) -> Result<Vec<Vec<Token>>, String> {
    let mut fields: Vec<Vec<Token>> = Vec::new();
    let mut chars = line.chars().peekable();
    let mut continues = false;
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.peek() {
            None | Some('#') => break,
            Some(',') => {
                if fields.is_empty() {
                    return Err("a comma with nothing before it".into());
                }
                chars.next();
                continues = true;
                continue;
            }
            Some(_) => {}
        }
        let mut token = Token { text: String::new(), quoted: false };
        let mut in_quotes = false;
        while let Some(&c) = chars.peek() {
            if in_quotes {
                chars.next();
                if c == '"' {
                    if chars.peek() == Some(&'"') {
                        chars.next();
                        token.text.push('"');
                    } else {
                        in_quotes = false;
                    }
                } else {
                    token.text.push(c);
                }
            } else if c == '"' {
                chars.next();
                in_quotes = true;
                token.quoted = true;
            } else if c.is_whitespace() || c == ',' || c == '#' {
                break;
            } else {
                chars.next();
                token.text.push(c);
            }
        }
        if in_quotes {
            return Err("a quoted name is not closed".into());
        }
        match fields.last_mut() {
            Some(last) if continues => last.push(token),
            _ => fields.push(vec![token]),
        }
        continues = false;
    }
    if continues {
        return Err("the line ends with a comma".into());
    }
    Ok(fields)
}

fn parse_hba(text: &str) -> Result<Vec<Rule>, (usize, String)> {
    let mut rules = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let n = index + 1;
        let fields = fields(line).map_err(|e| (n, e))?;
        if fields.is_empty() {
            continue;
        }
        rules.push(parse_rule(n, fields).map_err(|e| (n, e))?);
    }
    Ok(rules)
}

/// The field's one token, refusing a list.
fn single<'a>(field: &'a [Token], what: &str) -> Result<&'a Token, String> {
    match field {
        [one] => Ok(one),
        _ => Err(format!("{what} cannot be a list")),
    }
}

fn parse_rule(line: usize, fields: Vec<Vec<Token>>) -> Result<Rule, String> {
    let mut fields = fields.into_iter();
    let mut next = |what: &str| fields.next().ok_or_else(|| format!("the line ends before its {what}"));
    let link = match single(&next("connection type")?, "the connection type")?.text.as_str() {
        "local" => Link::Local,
        "host" => Link::Host,
        "hostssl" => Link::HostSsl,
        "hostnossl" => Link::HostNoSsl,
        "hostgssenc" | "hostnogssenc" => return Err("pgmux has no GSSAPI encryption: use host or hostssl".into()),
        other => return Err(format!("unknown connection type \"{other}\": local, host, hostssl or hostnossl")),
    };
    let databases = names(next("database")?, true)?;
    let users = names(next("user")?, false)?;
    let address = if link == Link::Local {
        Address::Any
    } else {
        let address = next("address")?;
        let address = single(&address, "the address")?;
        match address.text.split_once('/') {
            _ if address.text == "all" && !address.quoted => Address::Any,
            Some((ip, prefix)) => cidr(ip, prefix)?,
            None => {
                let ip = ip_of(&address.text)?;
                let mask = next("address mask")?;
                let mask = ip_of(&single(&mask, "the mask")?.text)?;
                Address::Net { net: ip, prefix: prefix_of_mask(ip, mask)? }
            }
        }
    };
    let method = match single(&next("method")?, "the method")?.text.as_str() {
        "trust" => Method::Trust,
        "reject" => Method::Reject,
        "password" => Method::Password,
        "md5" => Method::Md5,
        "scram-sha-256" => Method::ScramSha256,
        "cert" => Method::Cert,
        "peer" => Method::Peer,
        other => {
            return Err(format!(
                "pgmux does not check clients with \"{other}\": trust, reject, password, md5, scram-sha-256, cert \
                 or peer"
            ));
        }
    };
    let mut map = None;
    for option in fields {
        let option = single(&option, "an option")?;
        match option.text.split_once('=') {
            Some(("map", name)) if !name.is_empty() && matches!(method, Method::Cert | Method::Peer) => {
                map = Some(name.trim_matches('"').to_owned());
            }
            Some(("map", _)) => return Err("map= applies to cert and peer lines only, and names a map".into()),
            _ => {
                return Err(format!(
                    "pgmux does not know the option \"{}\" (only map= for cert and peer)",
                    option.text
                ));
            }
        }
    }
    Ok(Rule { line, link, databases, users, address, method, map })
}

/// A database (`databases`) or user list; keywords only unquoted.
fn names(field: Vec<Token>, databases: bool) -> Result<Vec<Name>, String> {
    field
        .into_iter()
        .map(|token| match token.text.as_str() {
            _ if token.quoted => Ok(Name::Exactly(token.text)),
            "all" => Ok(Name::All),
            "sameuser" if databases => Ok(Name::SameUser),
            "replication" if databases => Ok(Name::Replication),
            "samerole" | "samegroup" if databases => {
                Err("pgmux does not read role membership: samerole is not supported, list the databases".into())
            }
            text if text.starts_with('+') => Err(format!(
                "pgmux does not read role membership: \"{text}\" (a group) is not supported, list the users instead"
            )),
            text if text.starts_with('@') => {
                Err(format!("pgmux does not read included files: \"{text}\" is not supported, list the names"))
            }
            "" => Err("an empty name".into()),
            _ => Ok(Name::Exactly(token.text)),
        })
        .collect()
}

fn ip_of(text: &str) -> Result<IpAddr, String> {
    text.parse().map_err(|_| match text {
        "samehost" | "samenet" => format!("pgmux does not read the host's interfaces: \"{text}\" is not supported"),
        _ => format!("\"{text}\" is not an IP address (pgmux does not resolve host names: write the address)"),
    })
}

fn cidr(ip: &str, prefix: &str) -> Result<Address, String> {
    let net = ip_of(ip)?;
    let most = if net.is_ipv4() { 32 } else { 128 };
    let prefix = prefix
        .parse::<u8>()
        .ok()
        .filter(|p| *p <= most)
        .ok_or_else(|| format!("\"{prefix}\" is not a prefix length from 0 to {most}"))?;
    Ok(Address::Net { net, prefix })
}

/// The prefix length a netmask stands for; the mask must be of the address's family and contiguous.
fn prefix_of_mask(ip: IpAddr, mask: IpAddr) -> Result<u8, String> {
    let (bits, width) = match (ip, mask) {
        (IpAddr::V4(_), IpAddr::V4(m)) => (u128::from(u32::from(m)) << 96, 32),
        (IpAddr::V6(_), IpAddr::V6(m)) => (u128::from(m), 128),
        _ => return Err(format!("the mask {mask} is not of the same family as the address {ip}")),
    };
    let ones = bits.leading_ones();
    if bits.checked_shl(ones).unwrap_or(0) != 0 {
        return Err(format!("the mask {mask} is not contiguous"));
    }
    Ok(u8::try_from(ones.min(width)).unwrap_or(0))
}

fn parse_ident(text: &str) -> Result<Vec<MapLine>, (usize, String)> {
    let mut maps = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let n = index + 1;
        let fields = fields(line).map_err(|e| (n, e))?;
        if fields.is_empty() {
            continue;
        }
        let [map, system, user] = fields.as_slice() else {
            return Err((n, "an ident map line is: map-name system-user-name database-user-name".into()));
        };
        let one = |field: &[Token], what: &str| single(field, what).cloned().map_err(|e| (n, e));
        let (map, system, user) = (one(map, "the map name")?, one(system, "the system name")?, one(user, "the user")?);
        if system.text.starts_with('/') && !system.quoted {
            return Err((n, "pgmux does not match regular expressions: write the system name in full".into()));
        }
        let user = match user.text.as_str() {
            "all" if !user.quoted => None,
            text if text.starts_with('+') && !user.quoted => {
                return Err((n, "pgmux does not read role membership: name the user, not a group".into()));
            }
            _ => Some(user.text),
        };
        maps.push(MapLine { map: map.text, system: system.text, user });
    }
    Ok(maps)
}
