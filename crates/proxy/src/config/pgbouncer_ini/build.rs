//! What PgBouncer's settings mean for pgmux: the items of the files applied to a [`Config`] that starts
//! from PgBouncer's defaults, entries through the same functions as TOML, the settings combined at the end
//! (`listen`, client TLS, the budget), and what is not carried out collected for the warning.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::path::Path;

use super::settings::{self, Converted, Meaning, PGBOUNCER_DEFAULTS, Unit};
use super::syntax::{Item, Reader, Section};
use super::{At, IniConfig, IniError, IniErrorKind, Unsupported};
use crate::config::routes::{self, Entry, EntryError, RouteSpec, UserSpec};
use crate::config::{Config, ConfigError, Profile, Source, ValueError};

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

pub(super) fn build<I>(profile: Profile, file: &Path, reader: Reader, env: I) -> Result<IniConfig, ConfigError>
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
                "trust" | "md5" | "scram-sha-256" | "plain" | "hba" | "cert" | "peer" => {
                    self.set("client_auth", &value, item)
                }
                _ => refuse(
                    "pgmux checks clients with trust, md5, scram-sha-256, plain, hba, cert or peer (ldap, pam and \
                     any are PgBouncer's alone)",
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
            "listen_addr" | "listen_port" | "client_tls_sslmode" => {
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

    /// `client_tls_sslmode` is pgmux's `tls_mode`, with PgBouncer's default (disable: the certificate is not
    /// offered) when the file leaves it out; the certificate, key and CA files are keys of their own.
    fn client_tls(&mut self) -> Result<(), Box<IniError>> {
        if self.env_sets("tls_mode") {
            return Ok(());
        }
        match self.held.get("client_tls_sslmode").cloned() {
            Some(item) => {
                let mode = item.value.trim().to_ascii_lowercase();
                self.set("tls_mode", &mode, &item)
            }
            None => {
                self.cfg.tls_mode = crate::config::SslMode::Disable;
                Ok(())
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
