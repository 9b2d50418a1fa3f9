//! The console's grammar: what pgbouncer_exporter, psql, psycopg and an operator send, and what an
//! attacker might.

use pgmux_proto::sqlstate::{
    CHARACTER_NOT_IN_REPERTOIRE, INSUFFICIENT_PRIVILEGE, PROGRAM_LIMIT_EXCEEDED, SYNTAX_ERROR,
};

use crate::ops::console::command::*;
use crate::ops::console::grammar::{parse, parse_query_body};

fn ok(q: &str) -> Command {
    parse(q).unwrap_or_else(|e| panic!("{q:?}: {e}"))
}

fn err(q: &str) -> CommandError {
    match parse(q) {
        Ok(c) => panic!("{q:?} parsed as {c:?}"),
        Err(e) => e,
    }
}

#[test]
fn the_exporter_s_eight_queries() {
    // pgbouncer_exporter v0.12.1, exact strings (observability.md §1.2).
    assert_eq!(ok("SHOW STATS"), Command::Show(Show::Stats));
    assert_eq!(ok("SHOW VERSION;"), Command::Show(Show::Version));
    assert_eq!(ok("SHOW LISTS;"), Command::Show(Show::Lists));
    assert_eq!(ok("SHOW CONFIG;"), Command::Show(Show::Config));
    assert_eq!(ok("SHOW CLIENTS;"), Command::Show(Show::Clients));
    assert_eq!(ok("SHOW databases;"), Command::Show(Show::Databases));
    assert_eq!(ok("SHOW stats_totals;"), Command::Show(Show::StatsTotals));
    assert_eq!(ok("SHOW pools;"), Command::Show(Show::Pools));
}

#[test]
fn every_show_item() {
    let items = [
        ("version", Show::Version),
        ("pools", Show::Pools),
        ("stats", Show::Stats),
        ("stats_totals", Show::StatsTotals),
        ("stats_averages", Show::StatsAverages),
        ("totals", Show::Totals),
        ("clients", Show::Clients),
        ("servers", Show::Servers),
        ("databases", Show::Databases),
        ("config", Show::Config),
        ("lists", Show::Lists),
        ("users", Show::Users),
        ("state", Show::State),
        ("help", Show::Help),
        ("sizing", Show::Sizing),
        ("pins", Show::Pins),
        ("prepared", Show::Prepared),
        ("latency", Show::Latency),
        ("sockets", Show::Sockets),
        ("active_sockets", Show::ActiveSockets),
        ("fds", Show::Fds),
        ("mem", Show::Mem),
        ("dns_hosts", Show::DnsHosts),
        ("dns_zones", Show::DnsZones),
        ("peers", Show::Peers),
        ("peer_pools", Show::PeerPools),
    ];
    for (word, show) in items {
        assert_eq!(ok(&format!("show {word}")), Command::Show(show));
        assert_eq!(ok(&format!("SHOW {}", word.to_uppercase())), Command::Show(show));
    }
}

#[test]
fn keywords_in_any_case() {
    assert_eq!(ok("sHoW pOoLs"), Command::Show(Show::Pools));
    assert_eq!(ok("Reload"), Command::Reload);
    assert_eq!(ok("shutdown wait_for_CLIENTS"), Command::Shutdown(ShutdownMode::WaitForClients));
}

#[test]
fn whitespace_anywhere_between_words() {
    assert_eq!(ok("  \t\n SHOW \r\n  POOLS \t ; \n "), Command::Show(Show::Pools));
    assert_eq!(ok("SHOW POOLS;"), Command::Show(Show::Pools));
    assert_eq!(ok("SHOW POOLS ;"), Command::Show(Show::Pools));
}

#[test]
fn select_is_an_alias_of_show() {
    assert_eq!(ok("SELECT version"), Command::Show(Show::Version));
}

#[test]
fn empty_queries_are_empty() {
    for q in ["", "   ", ";", " ; ", "\n"] {
        assert_eq!(ok(q), Command::Empty, "{q:?}");
    }
    assert_eq!(Command::Empty.tag(), None);
}

#[test]
fn several_statements_are_refused() {
    let e = err("SHOW STATS; SHOW POOLS");
    assert_eq!(e.code, SYNTAX_ERROR);
    assert!(e.message.contains("one command per query"), "{}", e.message);
    assert_eq!(err("RELOAD;;").code, SYNTAX_ERROR);
    assert_eq!(err("; SHOW POOLS").code, SYNTAX_ERROR);
}

#[test]
fn control_commands_with_and_without_a_database() {
    assert_eq!(ok("PAUSE"), Command::Pause(None));
    assert_eq!(ok("PAUSE appdb"), Command::Pause(Some("appdb".into())));
    assert_eq!(ok("resume appdb;"), Command::Resume(Some("appdb".into())));
    assert_eq!(ok("RESUME"), Command::Resume(None));
    assert_eq!(ok("RECONNECT"), Command::Reconnect(None));
    assert_eq!(ok("reconnect AppDB"), Command::Reconnect(Some("AppDB".into())), "names keep their case");
    assert_eq!(ok("WAIT_CLOSE"), Command::WaitClose(None));
    assert_eq!(ok("wait_close appdb"), Command::WaitClose(Some("appdb".into())));
}

#[test]
fn quoted_database_names() {
    assert_eq!(ok("PAUSE \"my-db\""), Command::Pause(Some("my-db".into())));
    assert_eq!(ok("PAUSE \"say \"\"hi\"\"\""), Command::Pause(Some("say \"hi\"".into())));
    assert_eq!(ok("PAUSE \"bäckerei\""), Command::Pause(Some("bäckerei".into())), "any character inside quotes");
    assert_eq!(err("PAUSE \"\"").code, SYNTAX_ERROR, "an empty name");
}

#[test]
fn too_many_arguments() {
    assert_eq!(err("PAUSE a b").code, SYNTAX_ERROR);
    assert_eq!(err("RELOAD now").code, SYNTAX_ERROR);
    assert_eq!(err("SHOW POOLS CLIENTS").code, SYNTAX_ERROR);
    assert_eq!(err("SHUTDOWN later").code, SYNTAX_ERROR);
}

#[test]
fn kill_client_needs_a_numeric_id() {
    assert_eq!(ok("KILL_CLIENT 42"), Command::KillClient(42));
    assert_eq!(ok("kill_client 18446744073709551615"), Command::KillClient(u64::MAX));
    for bad in
        ["KILL_CLIENT", "KILL_CLIENT abc", "KILL_CLIENT -1", "KILL_CLIENT 1.5", "KILL_CLIENT 18446744073709551616"]
    {
        let e = err(bad);
        assert_eq!(e.code, SYNTAX_ERROR, "{bad}");
        assert!(e.message.contains("SHOW CLIENTS"), "{bad}: {}", e.message);
    }
}

#[test]
fn shutdown_modes() {
    assert_eq!(ok("SHUTDOWN"), Command::Shutdown(ShutdownMode::Immediate));
    assert_eq!(ok("SHUTDOWN WAIT_FOR_SERVERS"), Command::Shutdown(ShutdownMode::WaitForServers));
    assert_eq!(ok("SHUTDOWN WAIT_FOR_CLIENTS;"), Command::Shutdown(ShutdownMode::WaitForClients));
}

#[test]
fn set_with_bare_and_quoted_values() {
    let set = |k: &str, v: &str| Command::Set { key: k.into(), value: v.into() };
    assert_eq!(ok("SET pool_max = 50"), set("pool_max", "50"));
    assert_eq!(ok("set POOL_MAX=50;"), set("pool_max", "50"), "keys are lower-cased");
    assert_eq!(ok("SET query_wait_timeout = '30s'"), set("query_wait_timeout", "30s"));
    assert_eq!(ok("SET query_wait_timeout TO 30s"), set("query_wait_timeout", "30s"));
    assert_eq!(ok("SET log_level = 'pgmux=debug,info'"), set("log_level", "pgmux=debug,info"));
    assert_eq!(ok("SET admin_users = 'it''s'"), set("admin_users", "it's"));
    assert_eq!(ok("SET metrics_listen = 127.0.0.1:9930"), set("metrics_listen", "127.0.0.1:9930"));
    assert_eq!(ok("SET server_lifetime = -1"), set("server_lifetime", "-1"));
    assert_eq!(ok("SET \"Pool_Max\" = 3"), set("pool_max", "3"));
    assert_eq!(ok("SET log_level = ''"), set("log_level", ""), "an empty quoted value is a value");
    assert_eq!(Command::Set { key: "a".into(), value: "b".into() }.tag().as_deref(), Some("SET"));
}

#[test]
fn malformed_set() {
    for bad in
        ["SET", "SET pool_max", "SET pool_max =", "SET = 5", "SET pool_max = 5 6", "SET pool_max == 5", "SET a = 'open"]
    {
        assert_eq!(err(bad).code, SYNTAX_ERROR, "{bad}");
    }
}

#[test]
fn driver_session_settings_are_faked() {
    // psycopg2 sends SET DATESTYLE TO 'ISO' when the console does not report ISO; drivers SHOW these.
    assert_eq!(ok("SET DATESTYLE TO 'ISO'"), Command::SetIgnored(SessionSetting::DateStyle));
    assert_eq!(ok("SET client_encoding = 'UTF8'"), Command::SetIgnored(SessionSetting::ClientEncoding));
    assert_eq!(ok("SHOW TimeZone"), Command::Show(Show::Setting(SessionSetting::TimeZone)));
    assert_eq!(SessionSetting::DateStyle.value(), "ISO");
    assert_eq!(SessionSetting::StandardConformingStrings.name(), "standard_conforming_strings");
    assert_eq!(Command::SetIgnored(SessionSetting::DateStyle).access(), Access::Stats);
}

#[test]
fn every_pgbouncer_show_is_a_command_a_script_can_run() {
    // PgBouncer 1.25's show_map (src/admin.c): each answers with PgBouncer's columns, rows or none.
    for (q, show) in [
        ("SHOW MEM", Show::Mem),
        ("SHOW FDS", Show::Fds),
        ("SHOW SOCKETS", Show::Sockets),
        ("show active_sockets", Show::ActiveSockets),
        ("SHOW DNS_HOSTS", Show::DnsHosts),
        ("SHOW DNS_ZONES;", Show::DnsZones),
        ("SHOW PEERS", Show::Peers),
        ("select peer_pools", Show::PeerPools),
    ] {
        assert_eq!(ok(q), Command::Show(show), "{q}");
    }
}

#[test]
fn kill_takes_an_optional_database() {
    assert_eq!(ok("KILL"), Command::Kill(None));
    assert_eq!(ok("kill appdb;"), Command::Kill(Some("appdb".into())));
    assert_eq!(err("KILL a b").code, SYNTAX_ERROR);
    assert_eq!(ok("KILL appdb").tag().as_deref(), Some("KILL"));
}

#[test]
fn disable_and_enable_take_a_database() {
    assert_eq!(ok("DISABLE appdb"), Command::Disable("appdb".into()));
    assert_eq!(ok("enable appdb;"), Command::Enable("appdb".into()));
    assert_eq!(ok("DISABLE appdb").tag().as_deref(), Some("DISABLE"));
    for q in ["DISABLE", "ENABLE", "DISABLE a b"] {
        assert_eq!(err(q).code, SYNTAX_ERROR, "{q}");
    }
    assert!(err("ENABLE").message.contains("needs a database name"));
}

#[test]
fn pgbouncer_commands_pgmux_has_no_equivalent_of_say_what_to_do_instead() {
    let e = err("SUSPEND");
    assert_eq!(e.code, "0A000");
    assert!(e.hint.is_some(), "says what to do instead");
}

#[test]
fn unknown_commands_name_what_was_sent() {
    let e = err("FROB the pool");
    assert_eq!(e.code, SYNTAX_ERROR);
    assert!(e.message.starts_with("invalid command 'FROB the pool'"), "{}", e.message);
    assert_eq!(e.hint.as_deref(), Some("SHOW HELP lists the commands"));
    let e = err("SHOW FOO");
    assert!(e.message.contains("unknown SHOW item foo"), "{}", e.message);
    assert_eq!(err("SHOW").code, SYNTAX_ERROR);
    assert_eq!(err("select 1 + 1").code, SYNTAX_ERROR);
    assert_eq!(err("'SHOW POOLS'").code, SYNTAX_ERROR, "a string is not a keyword");
}

#[test]
fn sql_is_not_a_command() {
    for q in ["select * from pg_stat_activity", "SHOW POOLS -- all", "BEGIN; SHOW POOLS; COMMIT", "SHOW (POOLS)"] {
        assert_eq!(err(q).code, SYNTAX_ERROR, "{q}");
    }
}

#[test]
fn access_rights() {
    assert_eq!(ok("SHOW POOLS").access(), Access::Stats);
    assert_eq!(ok("SHOW CONFIG").access(), Access::Stats);
    for admin in
        ["PAUSE", "RESUME", "RECONNECT", "WAIT_CLOSE", "RELOAD", "KILL_CLIENT 1", "SHUTDOWN", "SET pool_max = 1"]
    {
        let cmd = ok(admin);
        assert_eq!(cmd.access(), Access::Admin, "{admin}");
        let e = cmd.check_access(Access::Stats).expect("refused to a stats user");
        assert_eq!(e.code, INSUFFICIENT_PRIVILEGE);
        assert!(e.message.contains("admin access needed"));
        assert_eq!(cmd.check_access(Access::Admin), None);
    }
    assert_eq!(ok("SHOW STATS").check_access(Access::Stats), None);
    assert_eq!(ok("SHOW SOCKETS").check_access(Access::Stats), None);
    // As in PgBouncer, where stats_users may run every SHOW but FDS.
    assert_eq!(ok("SHOW FDS").check_access(Access::Stats).map(|e| e.code), Some(INSUFFICIENT_PRIVILEGE));
    assert_eq!(ok("SHOW FDS").check_access(Access::Admin), None);
}

#[test]
fn tags_are_pgbouncer_s() {
    assert_eq!(ok("SHOW POOLS").tag().as_deref(), Some("SHOW"));
    assert_eq!(ok("pause").tag().as_deref(), Some("PAUSE"));
    assert_eq!(ok("wait_close").tag().as_deref(), Some("WAIT_CLOSE"));
    assert_eq!(ok("kill_client 3").tag().as_deref(), Some("KILL_CLIENT"));
    assert_eq!(ok("reload").tag().as_deref(), Some("RELOAD"));
}

#[test]
fn huge_queries_are_refused_without_reading_them() {
    let huge = format!("SHOW {}", "x".repeat(MAX_QUERY_LEN));
    assert_eq!(err(&huge).code, PROGRAM_LIMIT_EXCEEDED);
    let mut body = huge.into_bytes();
    body.push(0);
    assert_eq!(parse_query_body(&body).unwrap_err().code, PROGRAM_LIMIT_EXCEEDED);
    // Just under the limit: a word too long for any name.
    let long_word = format!("PAUSE {}", "d".repeat(MAX_WORD_LEN + 1));
    assert_eq!(err(&long_word).code, SYNTAX_ERROR);
    let long_value = format!("SET log_level = '{}'", "v".repeat(MAX_WORD_LEN + 1));
    assert_eq!(err(&long_value).code, SYNTAX_ERROR);
}

#[test]
fn many_semicolons_and_tokens_stay_bounded() {
    let q = ";".repeat(MAX_QUERY_LEN);
    assert_eq!(err(&q).code, SYNTAX_ERROR);
    let q = "a ".repeat(MAX_QUERY_LEN / 2);
    assert_eq!(err(&q).code, SYNTAX_ERROR);
}

#[test]
fn nul_bytes_and_invalid_utf8() {
    assert_eq!(err("SHOW\0POOLS").code, CHARACTER_NOT_IN_REPERTOIRE);
    assert_eq!(parse_query_body(b"SHOW POOLS\0").unwrap(), Command::Show(Show::Pools), "the wire's final NUL");
    assert_eq!(parse_query_body(b"SHOW POOLS").unwrap(), Command::Show(Show::Pools));
    assert_eq!(parse_query_body(b"SHOW\0POOLS\0").unwrap_err().code, CHARACTER_NOT_IN_REPERTOIRE);
    assert_eq!(parse_query_body(b"SHOW \xff\xfe\0").unwrap_err().code, CHARACTER_NOT_IN_REPERTOIRE);
    assert_eq!(parse_query_body(b"\0").unwrap(), Command::Empty);
}

#[test]
fn unicode_outside_quotes_is_a_syntax_error() {
    // Only ASCII whitespace separates words: an invisible Unicode space is not silently taken for one.
    for q in [
        "SHOW PÖÖLS",
        "SHOW POOLS\u{200b}",
        "ＳＨＯＷ POOLS",
        "SHOW 🐘",
        "PAUSE naïve",
        "SHOW\u{2028}POOLS",
        "SHOW\u{3000}POOLS",
    ] {
        let e = err(q);
        assert_eq!(e.code, SYNTAX_ERROR, "{q}");
    }
}

#[test]
fn error_messages_quote_little_and_escape_control_characters() {
    let e = err(&format!("FROB \u{1b}[2J{}", "y".repeat(200)));
    assert!(e.message.contains("\\u{1b}[2J"), "{}", e.message);
    assert!(!e.message.contains('\u{1b}'));
    assert!(e.message.chars().count() < 200, "{}", e.message.len());
    let e = err("FROB '");
    assert!(e.message.contains("invalid command"), "{}", e.message);
}

#[test]
fn errors_become_error_responses_that_keep_the_console_open() {
    let msg = err("FROB").to_error_message();
    assert_eq!(msg.severity, pgmux_proto::encode::Severity::Error);
    assert_eq!(msg.code, SYNTAX_ERROR);
    let bytes = msg.to_bytes();
    assert_eq!(bytes[0], b'E');
    let fields = pgmux_proto::backend::ErrorFields::parse(&bytes[5..]).unwrap();
    assert_eq!((fields.severity, fields.code), ("ERROR", SYNTAX_ERROR));
}

#[test]
fn arbitrary_bytes_never_panic() {
    // A fixed pseudo-random stream of short queries made of the characters the lexer cares about.
    let alphabet: Vec<char> = "SHOWshow PAUSE;=\"'\\\0\n\t_.-:/+0123456789é🐘\u{1}".chars().collect();
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..20_000 {
        let len = (s % 24) as usize;
        let q: String = (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                alphabet[(s % alphabet.len() as u64) as usize]
            })
            .collect();
        let _ = parse(&q);
        let _ = parse_query_body(q.as_bytes());
    }
}
