//! Session parameters under transaction pooling.
//!
//! A client's start-up parameters (`DateStyle`, `TimeZone`, `search_path`, `-c` options, …) must hold on
//! every server connection it lands on, and must not leak to the next client. Each server connection knows
//! what it has: the values the server *reported* (ParameterStatus, the truth for GUC_REPORT parameters) and
//! the values pgmux *applied* for the others. When a client links to a server, [`sync_statement`] names the
//! difference as one statement of `set_config` calls and `RESET`s, or nothing when there is none.
//!
//! Reported values are canonical (`iso` is reported as `ISO, MDY`), so a client's raw value must be turned
//! into the server's form before it can be compared. [`Catalog`] remembers, across clients, what each raw
//! value becomes and which values the server has accepted; only the first client to use a new value pays
//! a round trip at login to have it checked.
//!
//! Linking happens once per transaction, so the common case must cost nothing: clients that logged in with
//! the same parameters share one interned set, and a server remembers which set it was last synced to. When
//! both still match, no comparison is made at all.

use std::collections::BTreeMap;
use std::sync::Arc;

/// Parameters by lower-case name.
pub(crate) type ParamMap = BTreeMap<String, Param>;

use parking_lot::Mutex;

/// Reported parameters no session can change, or that follow from others: never reset, never compared.
/// (`session_authorization` is not among them: a superuser's session may change it, and it must then
/// follow that client and be reset for the next.)
const FIXED: &[&str] = &["server_version", "server_encoding", "integer_datetimes", "is_superuser", "in_hot_standby"];

/// Reported parameters that also say what the node is: a server reports a change of these for its own
/// reasons too (a reload that turns a writer read-only), so a report is not taken as the linked client's
/// setting. They follow a client only when read back as a setting of its session.
const NODE_ROLE: &[&str] = &["default_transaction_read_only"];

/// Most raw values the catalog remembers; past this, new values are checked on every login.
const CATALOG_LIMIT: usize = 4096;

/// Parameter names are case-insensitive in PostgreSQL.
fn key(name: &str) -> String {
    name.to_ascii_lowercase()
}

/// One parameter: its name as first seen and its value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Param {
    pub(crate) name: String,
    pub(crate) value: String,
}

/// What one server connection has set.
#[derive(Clone, Debug, Default)]
pub(crate) struct ServerParams {
    /// Values from ParameterStatus, by lower-case name.
    pub(crate) reported: ParamMap,
    /// Values pgmux set for parameters the server does not report, by lower-case name.
    pub(crate) applied: ParamMap,
    /// What the pool's `connect_query` left set in the session (parameters the server does not report): the
    /// value a client that wants none of its own gets back, in place of a `RESET`. Boxed: a server connection
    /// is moved in futures on the data path, and most pools have no connect_query.
    baseline: Option<Box<ParamMap>>,
    /// Bumped on every change of `reported` or `applied`.
    generation: u64,
    /// The client set this server was last found in sync with, and the generation it had then.
    in_sync_with: Option<(Arc<ParamMap>, u64)>,
    /// Whether pgmux applied an `idle_session_timeout` (a client's): the server would end the connection
    /// while it sits idle in the pool, so it is taken off before the connection goes back.
    ends_idle: bool,
}

impl ServerParams {
    /// Records a ParameterStatus.
    pub(crate) fn report(&mut self, name: &str, value: &str) {
        let k = key(name);
        if self.reported.get(&k).is_some_and(|p| p.value == value) {
            return;
        }
        self.reported.insert(k, Param { name: name.to_owned(), value: value.to_owned() });
        self.generation += 1;
    }

    /// True if nothing changed on either side since this server was last synced to this client set.
    pub(crate) fn in_sync(&self, client: &ClientParams) -> bool {
        matches!(&self.in_sync_with, Some((set, generation))
            if *generation == self.generation && Arc::ptr_eq(set, &client.values))
    }

    /// Remembers that the server now matches `client`.
    pub(crate) fn mark_in_sync(&mut self, client: &ClientParams) {
        self.in_sync_with = Some((Arc::clone(&client.values), self.generation));
    }

    /// Whether the session holds a client's `idle_session_timeout`, which must not stay on a connection
    /// idle in the pool.
    #[inline]
    pub(crate) fn ends_idle(&self) -> bool {
        self.ends_idle
    }

    /// Takes the session's settings read back after `connect_query` as its starting point: what it holds
    /// now, and what a client that sets none of them gets back.
    pub(crate) fn set_baseline(&mut self, settings: &[Param]) {
        let baseline: ParamMap = settings
            .iter()
            .filter(|p| !self.reported.contains_key(&key(&p.name)))
            .map(|p| (key(&p.name), p.clone()))
            .collect();
        self.set_applied(baseline.clone());
        self.baseline = (!baseline.is_empty()).then(|| Box::new(baseline));
    }

    /// connect_query's value of `k`, if it set one.
    fn base(&self, k: &str) -> Option<&Param> {
        self.baseline.as_ref()?.get(k)
    }

    /// Puts `applied` in place (and says whether it changed).
    fn set_applied(&mut self, applied: ParamMap) {
        if applied != self.applied {
            self.ends_idle = applied.get(IDLE_SESSION_TIMEOUT).is_some_and(|p| millis(&p.value) != Some(0));
            self.applied = applied;
            self.generation += 1;
        }
    }
}

/// The setting that ends a session idle for that long: a client's is kept for the client (pgmux closes the
/// client itself when it idles that long) and taken off its server connection when it goes back.
pub(crate) const IDLE_SESSION_TIMEOUT: &str = "idle_session_timeout";

/// A time setting's value in milliseconds, as PostgreSQL reads it: a number with an optional unit (`us`,
/// `ms`, `s`, `min`, `h`, `d`; none means milliseconds), rounded. `None` if it is not one.
pub(crate) fn millis(value: &str) -> Option<u64> {
    let value = value.trim();
    let split = value.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(value.len());
    let (number, unit) = value.split_at(split);
    let per_unit = match unit.trim() {
        "us" => 0.001,
        "" | "ms" => 1.0,
        "s" => 1_000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return None,
    };
    let ms = number.parse::<f64>().ok()? * per_unit;
    (ms.is_finite() && ms >= 0.0 && ms < u64::MAX as f64).then(|| ms.round() as u64)
}

/// What a client wants on every server: lower-case name → value (canonical for reported parameters).
/// Clients with the same start-up parameters share one set until one of them changes its own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ClientParams {
    pub(crate) values: Arc<ParamMap>,
}

impl ClientParams {
    /// Records a value the server reported while this client was linked (its own `SET`).
    /// Reports of the node's role are not the client's (see [`NODE_ROLE`]).
    pub(crate) fn report(&mut self, name: &str, value: &str) {
        let k = key(name);
        if FIXED.contains(&k.as_str())
            || NODE_ROLE.contains(&k.as_str())
            || self.values.get(&k).is_some_and(|p| p.value == value)
        {
            return;
        }
        Arc::make_mut(&mut self.values).insert(k, Param { name: name.to_owned(), value: value.to_owned() });
    }

    /// Whether the client made its own transactions read-only by default: a 25006 is then its own doing.
    pub(crate) fn read_only(&self) -> bool {
        self.values.get("default_transaction_read_only").is_some_and(|p| p.value.eq_ignore_ascii_case("on"))
    }

    /// The client's own `idle_session_timeout`, if it set one: pgmux ends the client's session when it
    /// idles that long between transactions, as PostgreSQL would have.
    pub(crate) fn idle_session_timeout(&self) -> Option<std::time::Duration> {
        let ms = millis(&self.values.get(IDLE_SESSION_TIMEOUT)?.value)?;
        (ms > 0).then(|| std::time::Duration::from_millis(ms))
    }
}

/// Quotes a string literal that means the same whatever `standard_conforming_strings` is.
fn literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 3);
    out.push_str("E'");
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// Quotes an identifier.
fn ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// The statements that make `server` match `client`, or `None` if it already does: `RESET`s, then one
/// `SELECT` of `set_config` calls, which parse list values (`search_path`) the way a start-up packet does.
/// They run as one of pgmux's own statements, shielded from what the server's session has set now
/// (`ServerConn::run_guarded`), and change nothing unless all of them succeed.
pub(crate) fn sync_statement(client: &ClientParams, server: &ServerParams, defaults: &Defaults) -> Option<String> {
    let mut sets = Vec::new();
    let mut resets = Vec::new();
    for (k, want) in client.values.iter() {
        let have = server.reported.get(k).or_else(|| server.applied.get(k));
        if have.map(|p| &p.value) != Some(&want.value) {
            sets.push(format!("pg_catalog.set_config({}, {}, false)", literal(&want.name), literal(&want.value)));
        }
    }
    for (k, have) in &server.reported {
        if client.values.contains_key(k) || FIXED.contains(&k.as_str()) {
            continue;
        }
        if defaults.value(k) != Some(have.value.as_str()) {
            resets.push(format!("RESET {}", ident(&have.name)));
        }
    }
    for (k, have) in &server.applied {
        if client.values.contains_key(k) {
            continue;
        }
        // Back to what connect_query set, or to the session's default.
        match server.base(k) {
            Some(base) if base.value == have.value => {}
            Some(base) => {
                sets.push(format!("pg_catalog.set_config({}, {}, false)", literal(&base.name), literal(&base.value)))
            }
            None => resets.push(format!("RESET {}", ident(&have.name))),
        }
    }
    if sets.is_empty() && resets.is_empty() {
        return None;
    }
    // The RESETs first: a client's own timeout, once set, holds for the rest of the statement's transaction.
    let mut sql = String::new();
    for r in resets {
        sql.push_str(&r);
        sql.push_str("; ");
    }
    if !sets.is_empty() {
        sql.push_str("SELECT ");
        sql.push_str(&sets.join(", "));
        sql.push(';');
    }
    Some(sql.trim_end().to_owned())
}

/// After a successful sync, the server holds exactly the client's values (and connect_query's where the
/// client has none).
pub(crate) fn synced(client: &ClientParams, server: &mut ServerParams) {
    let mut applied: ParamMap = client
        .values
        .iter()
        .filter(|(k, _)| !server.reported.contains_key(*k))
        .map(|(k, p)| (k.clone(), p.clone()))
        .collect();
    for (k, base) in server.baseline.iter().flat_map(|b| b.iter()) {
        applied.entry(k.clone()).or_insert_with(|| base.clone());
    }
    server.set_applied(applied);
    server.mark_in_sync(client);
}

/// Takes the session settings read back from a server (`pg_settings` with source `session`) as what the
/// client now wants and what the server now has: the client's own SET, RESET and set_config calls then
/// follow it to other servers, and the next client on this one gets them reset. Reported parameters are
/// left alone: ParameterStatus keeps them current already, except those that also say the node's role
/// ([`NODE_ROLE`]), which the client wants exactly when its session has set them. `taken_off`: the read
/// also took the session's `idle_session_timeout` off the server (it stays the client's).
pub(crate) fn adopt_session(client: &mut ClientParams, server: &mut ServerParams, settings: &[Param], taken_off: bool) {
    let unreported: ParamMap = settings
        .iter()
        .filter(|p| !server.reported.contains_key(&key(&p.name)))
        .map(|p| (key(&p.name), p.clone()))
        .collect();
    let mut wanted: ParamMap = client
        .values
        .iter()
        .filter(|(k, _)| server.reported.contains_key(*k) && !NODE_ROLE.contains(&k.as_str()))
        .map(|(k, p)| (k.clone(), p.clone()))
        .collect();
    wanted.extend(unreported.iter().map(|(k, p)| (k.clone(), p.clone())));
    wanted.extend(
        settings
            .iter()
            .map(|p| (key(&p.name), p))
            .filter(|(k, _)| NODE_ROLE.contains(&k.as_str()))
            .map(|(k, p)| (k, p.clone())),
    );
    if *client.values != wanted {
        client.values = Arc::new(wanted);
    }
    // An idle_session_timeout was read, then taken off the server (`taken_off`).
    let mut unreported = unreported;
    if taken_off {
        unreported.remove(IDLE_SESSION_TIMEOUT);
    }
    server.set_applied(unreported);
    if taken_off {
        // The client wants what the server no longer has: its next transaction here applies it again.
        server.in_sync_with = None;
    } else {
        server.mark_in_sync(client);
    }
}

/// The server's own values at login, as the most recent new server connection reported them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Defaults {
    /// Each with its lower-case name, the key clients' values are found by (no lower-casing per login).
    params: Vec<(String, Param)>,
}

impl Defaults {
    pub(crate) fn from_reported(reported: &ParamMap) -> Self {
        Defaults { params: reported.iter().map(|(k, p)| (k.clone(), p.clone())).collect() }
    }

    /// Whether no server has reported its values yet.
    pub(crate) fn is_empty(&self) -> bool {
        self.params.is_empty()
    }

    pub(crate) fn value(&self, lower: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == lower).map(|(_, p)| p.value.as_str())
    }

    /// The ParameterStatus set a client should see: the defaults with its own values in their place.
    pub(crate) fn for_client<'a>(&'a self, client: &'a ClientParams) -> impl Iterator<Item = (&'a str, &'a str)> {
        self.params.iter().map(move |(k, p)| match client.values.get(k) {
            Some(own) => (p.name.as_str(), own.value.as_str()),
            None => (p.name.as_str(), p.value.as_str()),
        })
    }
}

/// Shared across clients: what raw start-up values turn into.
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    known: Mutex<Known>,
}

/// Hashed with foldhash, not SipHash: every login looks its parameters up here. The keys are what clients
/// send, but only after they logged in, and at most [`CATALOG_LIMIT`] of them, so a client that chose
/// colliding values could slow the lookups of this bounded table only.
#[derive(Debug, Default)]
struct Known {
    /// (lower-case name, raw value) → the parameter as the server names and reports it; the raw value itself
    /// for parameters the server does not report.
    values: foldhash::HashMap<(String, String), Param>,
    /// A whole start-up parameter list → the interned set its clients share.
    sets: foldhash::HashMap<Vec<Param>, Arc<ParamMap>>,
}

impl Catalog {
    /// The client's wanted values if every raw value is already known, else `None`: a server must check them.
    pub(crate) fn resolve(&self, raw: &[Param]) -> Option<ClientParams> {
        let mut known = self.known.lock();
        if let Some(set) = known.sets.get(raw) {
            return Some(ClientParams { values: Arc::clone(set) });
        }
        let mut map = ParamMap::new();
        for p in raw {
            let k = key(&p.name);
            let param = known.values.get(&(k.clone(), p.value.clone()))?;
            map.insert(k, param.clone());
        }
        let set = Arc::new(map);
        if known.sets.len() < CATALOG_LIMIT {
            known.sets.insert(raw.to_vec(), Arc::clone(&set));
        }
        Some(ClientParams { values: set })
    }

    /// Learns from a server that accepted `raw`: what each value became.
    pub(crate) fn learn(&self, raw: &[Param], server: &ServerParams) -> ClientParams {
        let mut known = self.known.lock();
        let mut map = ParamMap::new();
        for p in raw {
            let k = key(&p.name);
            let param = server.reported.get(&k).unwrap_or(p).clone();
            if known.values.len() < CATALOG_LIMIT {
                known.values.insert((k.clone(), p.value.clone()), param.clone());
            }
            map.insert(k, param);
        }
        // Clients that logged in together before their values were known share one set all the same, so
        // that a server synced to one of them is in sync for all.
        let set = match known.sets.get(raw) {
            Some(set) if **set == map => Arc::clone(set),
            _ => {
                let set = Arc::new(map);
                if known.sets.len() < CATALOG_LIMIT {
                    known.sets.insert(raw.to_vec(), Arc::clone(&set));
                }
                set
            }
        };
        ClientParams { values: set }
    }
}

/// Raw client values as wanted values, for the first sync that checks them.
pub(crate) fn unchecked(raw: &[Param]) -> ClientParams {
    ClientParams { values: Arc::new(raw.iter().map(|p| (key(&p.name), p.clone())).collect()) }
}

mod startup;
pub(crate) use startup::{StartupRules, from_startup};

mod greeting;
pub(crate) use greeting::Greetings;

#[cfg(test)]
mod tests;
