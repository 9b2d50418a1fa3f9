//! From a query to a [`Command`]: the entry points ([`parse`], [`parse_query_body`]), then from tokens to a
//! command: which words each command takes, and what to say when they are wrong.

use pgmux_proto::sqlstate::CHARACTER_NOT_IN_REPERTOIRE;

use super::command::{
    Command, CommandError, MAX_QUERY_LEN, Show, ShutdownMode, quote, session_setting, syntax, too_long, unsupported,
};
use super::lexer::{self, Token};

/// Parses the body of a `Query` message: the query, NUL-terminated as on the wire (the final NUL is
/// optional here).
pub fn parse_query_body(body: &[u8]) -> Result<Command, CommandError> {
    let body = body.strip_suffix(b"\0").unwrap_or(body);
    if body.len() > MAX_QUERY_LEN {
        return Err(too_long(body.len()));
    }
    if body.contains(&0) {
        return Err(CommandError::new(CHARACTER_NOT_IN_REPERTOIRE, "the query holds a NUL byte"));
    }
    match std::str::from_utf8(body) {
        Ok(text) => parse(text),
        Err(_) => Err(CommandError::new(CHARACTER_NOT_IN_REPERTOIRE, "the query is not valid UTF-8")),
    }
}

/// Parses one admin command.
pub fn parse(query: &str) -> Result<Command, CommandError> {
    if query.len() > MAX_QUERY_LEN {
        return Err(too_long(query.len()));
    }
    if query.contains('\0') {
        return Err(CommandError::new(CHARACTER_NOT_IN_REPERTOIRE, "the query holds a NUL byte"));
    }
    let tokens = lexer::tokens(query).map_err(|why| syntax(query, why))?;
    command(query, &tokens)
}

/// The command `tokens` (of `query`, quoted in errors) spell.
pub(super) fn command(query: &str, tokens: &[Token]) -> Result<Command, CommandError> {
    let tokens = tokens.strip_suffix(&[Token::Semicolon]).unwrap_or(tokens);
    if tokens.contains(&Token::Semicolon) {
        return Err(syntax(query, "one command per query; send each command in a Query of its own"));
    }
    let Some((first, args)) = tokens.split_first() else {
        return Ok(Command::Empty);
    };
    let Token::Word(verb) = first else {
        return Err(syntax(query, "a command starts with a keyword"));
    };
    match verb.to_ascii_lowercase().as_str() {
        "show" | "select" => show(query, args).map(Command::Show),
        "set" => set(query, args),
        "pause" => optional_database(query, "PAUSE", args).map(Command::Pause),
        "resume" => optional_database(query, "RESUME", args).map(Command::Resume),
        "reconnect" => optional_database(query, "RECONNECT", args).map(Command::Reconnect),
        "wait_close" => optional_database(query, "WAIT_CLOSE", args).map(Command::WaitClose),
        "reload" if args.is_empty() => Ok(Command::Reload),
        "reload" => Err(syntax(query, "RELOAD takes no argument")),
        "kill_client" => kill_client(query, args),
        "shutdown" => shutdown(query, args),
        "kill" => optional_database(query, "KILL", args).map(Command::Kill),
        "suspend" => Err(unsupported("SUSPEND", "PAUSE holds new transactions until RESUME")),
        "disable" => database(query, "DISABLE", args).map(Command::Disable),
        "enable" => database(query, "ENABLE", args).map(Command::Enable),
        _ => Err(syntax(query, format!("unknown command {}", quote(verb)))),
    }
}

fn show(query: &str, args: &[Token]) -> Result<Show, CommandError> {
    let item = match args {
        [Token::Word(w) | Token::Quoted(w)] => w.to_ascii_lowercase(),
        [] => return Err(syntax(query, "SHOW needs an item, e.g. SHOW POOLS")),
        _ => return Err(syntax(query, "SHOW takes one item")),
    };
    Ok(match item.as_str() {
        "version" => Show::Version,
        "pools" => Show::Pools,
        "stats" => Show::Stats,
        "stats_totals" => Show::StatsTotals,
        "stats_averages" => Show::StatsAverages,
        "totals" => Show::Totals,
        "clients" => Show::Clients,
        "servers" => Show::Servers,
        "databases" => Show::Databases,
        "config" => Show::Config,
        "lists" => Show::Lists,
        "users" => Show::Users,
        "state" => Show::State,
        "help" => Show::Help,
        "sizing" => Show::Sizing,
        "pins" => Show::Pins,
        "prepared" => Show::Prepared,
        "latency" => Show::Latency,
        "sockets" => Show::Sockets,
        "active_sockets" => Show::ActiveSockets,
        "fds" => Show::Fds,
        "mem" => Show::Mem,
        "dns_hosts" => Show::DnsHosts,
        "dns_zones" => Show::DnsZones,
        "peers" => Show::Peers,
        "peer_pools" => Show::PeerPools,
        other => match session_setting(other) {
            Some(setting) => Show::Setting(setting),
            None => return Err(syntax(query, format!("unknown SHOW item {}", quote(other)))),
        },
    })
}

fn optional_database(query: &str, verb: &str, args: &[Token]) -> Result<Option<String>, CommandError> {
    match args {
        [] => Ok(None),
        [Token::Word(db) | Token::Quoted(db)] if !db.is_empty() => Ok(Some(db.clone())),
        _ => Err(syntax(query, format!("{verb} takes at most one database name"))),
    }
}

fn database(query: &str, verb: &str, args: &[Token]) -> Result<String, CommandError> {
    match optional_database(query, verb, args)? {
        Some(db) => Ok(db),
        None => Err(syntax(query, format!("{verb} needs a database name"))),
    }
}

fn kill_client(query: &str, args: &[Token]) -> Result<Command, CommandError> {
    match args {
        [Token::Word(id)] => id.parse::<u64>().map(Command::KillClient).map_err(|_| {
            syntax(
                query,
                format!(
                    "KILL_CLIENT needs a client id, the number in the id column of SHOW CLIENTS, not {}",
                    quote(id)
                ),
            )
        }),
        _ => Err(syntax(query, "KILL_CLIENT needs one client id, from the id column of SHOW CLIENTS")),
    }
}

fn shutdown(query: &str, args: &[Token]) -> Result<Command, CommandError> {
    let mode = match args {
        [] => ShutdownMode::Immediate,
        [Token::Word(w)] if w.eq_ignore_ascii_case("wait_for_servers") => ShutdownMode::WaitForServers,
        [Token::Word(w)] if w.eq_ignore_ascii_case("wait_for_clients") => ShutdownMode::WaitForClients,
        _ => return Err(syntax(query, "SHUTDOWN takes nothing, WAIT_FOR_SERVERS or WAIT_FOR_CLIENTS")),
    };
    Ok(Command::Shutdown(mode))
}

fn set(query: &str, args: &[Token]) -> Result<Command, CommandError> {
    let (key, value) = match args {
        [Token::Word(k) | Token::Quoted(k), Token::Equals, value] => (k, value),
        [Token::Word(k) | Token::Quoted(k), Token::Word(to), value] if to.eq_ignore_ascii_case("to") => (k, value),
        _ => return Err(syntax(query, "write SET key = value, the value bare or in 'single quotes'")),
    };
    let value = match value {
        Token::Word(v) | Token::Str(v) | Token::Quoted(v) => v.clone(),
        _ => return Err(syntax(query, "SET needs a value after =")),
    };
    let key = key.to_ascii_lowercase();
    if key.is_empty() {
        return Err(syntax(query, "SET needs a setting name"));
    }
    Ok(match session_setting(&key) {
        Some(setting) => Command::SetIgnored(setting),
        None => Command::Set { key, value },
    })
}
