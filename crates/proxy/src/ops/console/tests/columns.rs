//! The column lists against what their readers need: pgbouncer_exporter v0.12.1 (observability.md §1.2-1.4)
//! and PgBouncer's own order.

use crate::ops::console::columns::*;
use crate::ops::console::command::Show;
use crate::ops::console::table::ColumnDef;
use crate::ops::console::table::ColumnType;

fn names(cols: &[ColumnDef]) -> Vec<&'static str> {
    cols.iter().map(|c| c.name).collect()
}

/// The SHOWs pgbouncer_exporter and Datadog read, and pgmux's own: `text` and `int8` only.
const ALL_SHOWS: [Show; 17] = [
    Show::Version,
    Show::Pools,
    Show::Stats,
    Show::StatsTotals,
    Show::StatsAverages,
    Show::Totals,
    Show::Clients,
    Show::Servers,
    Show::Databases,
    Show::Config,
    Show::Lists,
    Show::Users,
    Show::State,
    Show::Sizing,
    Show::Pins,
    Show::Prepared,
    Show::Latency,
];

/// The SHOWs for scripts, in PgBouncer's own types.
const SCRIPT_SHOWS: [Show; 8] = [
    Show::Sockets,
    Show::ActiveSockets,
    Show::Fds,
    Show::Mem,
    Show::DnsHosts,
    Show::DnsZones,
    Show::Peers,
    Show::PeerPools,
];

#[test]
fn every_show_has_columns_with_unique_documented_names() {
    for show in ALL_SHOWS.into_iter().chain(SCRIPT_SHOWS) {
        let cols = of(show).unwrap_or_else(|| panic!("{show:?} has no columns"));
        let mut seen = names(cols);
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), cols.len(), "{show:?} repeats a column");
        for c in cols {
            assert!(!c.doc.is_empty(), "{show:?}.{} is undocumented", c.name);
            assert!(c.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'), "{}", c.name);
        }
    }
    assert_eq!(of(Show::Help), None);
}

#[test]
fn pools_in_pgbouncer_s_order() {
    assert_eq!(
        names(POOLS),
        [
            "database",
            "user",
            "cl_active",
            "cl_waiting",
            "cl_active_cancel_req",
            "cl_waiting_cancel_req",
            "sv_active",
            "sv_active_cancel",
            "sv_being_canceled",
            "sv_idle",
            "sv_used",
            "sv_tested",
            "sv_login",
            "maxwait",
            "maxwait_us",
            "pool_mode",
            "load_balance_hosts",
        ]
    );
}

#[test]
fn stats_is_totals_then_averages() {
    assert_eq!(STATS.len(), 25);
    assert!(STATS[1..13].iter().all(|c| c.name.starts_with("total_")));
    assert!(STATS[13..].iter().all(|c| c.name.starts_with("avg_")));
    assert_eq!(names(&STATS_TOTALS[1..]).len(), 12);
    assert_eq!(STATS_AVERAGES[9].name, "avg_client_parse_count", "PgBouncer's inconsistent prefix, kept");
}

#[test]
fn what_the_exporter_requires() {
    assert_eq!(names(VERSION), ["version"], "exactly one column named version");
    assert_eq!(LISTS.len(), 2, "exactly two columns");
    assert!((3..=4).contains(&CONFIG.len()) && names(CONFIG)[..2] == ["key", "value"]);
    for needed in ["database", "user", "state", "application_name"] {
        assert!(names(CONNECTIONS).contains(&needed), "SHOW CLIENTS lacks {needed}");
    }
    let stats_totals = names(STATS_TOTALS);
    for needed in [
        "query_count",
        "query_time",
        "bytes_received",
        "bytes_sent",
        "wait_time",
        "xact_count",
        "xact_time",
        "client_parse_count",
        "server_parse_count",
        "bind_count",
        "server_assignment_count",
    ] {
        assert!(stats_totals.contains(&needed), "STATS_TOTALS lacks {needed}");
    }
    let databases = names(DATABASES);
    for needed in [
        "name",
        "host",
        "port",
        "database",
        "force_user",
        "pool_size",
        "max_connections",
        "current_connections",
        "paused",
        "disabled",
    ] {
        assert!(databases.contains(&needed), "DATABASES lacks {needed}");
    }
    assert!(
        !(databases.contains(&"reserve_pool") && databases.contains(&"reserve_pool_size")),
        "both map to pgbouncer_databases_reserve_pool: a duplicate series fails the scrape"
    );
    let pools = names(POOLS);
    for needed in ["cl_active", "cl_waiting", "sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login", "maxwait"] {
        assert!(pools.contains(&needed), "POOLS lacks {needed}");
    }
}

#[test]
fn labels_are_text_and_numbers_are_int8() {
    // The exporter turns a label column of any type it reads as bytes (numeric, name, bytea) into
    // "<invalid>"; labels must be text or integers. Metric columns must parse as numbers.
    let labels = [
        (DATABASES, &["name", "host", "database", "force_user", "pool_mode"][..]),
        (POOLS, &["database", "user"][..]),
        (STATS_TOTALS, &["database"][..]),
        (CONNECTIONS, &["database", "user", "state", "application_name"][..]),
    ];
    for (cols, label_names) in labels {
        for c in cols.iter().filter(|c| label_names.contains(&c.name)) {
            assert_eq!(c.ty, ColumnType::Text, "{} is a label", c.name);
        }
    }
    for show in ALL_SHOWS {
        for c in of(show).unwrap() {
            assert!(matches!(c.ty, ColumnType::Text | ColumnType::Int8), "{show:?}.{}: {:?}", c.name, c.ty);
        }
    }
    for c in STATS_TOTALS.iter().skip(1).chain(&POOLS[2..15]) {
        assert_eq!(c.ty, ColumnType::Int8, "{} is a counter or gauge", c.name);
    }
}

/// A column list as PgBouncer's `pktbuf_write_RowDescription` format string spells it (`s` text, `i` int4,
/// `q` int8, `b` bytea).
fn letters(cols: &[ColumnDef]) -> String {
    cols.iter()
        .map(|c| match c.ty {
            ColumnType::Text => 's',
            ColumnType::Int4 => 'i',
            ColumnType::Int8 => 'q',
            ColumnType::Bytea => 'b',
            ColumnType::Numeric => 'N',
        })
        .collect()
}

#[test]
fn script_shows_have_pgbouncer_s_names_order_and_types() {
    // PgBouncer 1.25, src/admin.c: the RowDescription of each command, names and type letters.
    assert_eq!(
        names(FDS),
        [
            "fd",
            "task",
            "user",
            "database",
            "addr",
            "port",
            "cancel",
            "link",
            "client_encoding",
            "std_strings",
            "datestyle",
            "timezone",
            "password",
            "scram_client_key",
            "scram_server_key"
        ]
    );
    assert_eq!(letters(FDS), "issssiqisssssbb");
    assert_eq!(names(MEM), ["name", "size", "used", "free", "memtotal"]);
    assert_eq!(letters(MEM), "siiii");
    assert_eq!((names(DNS_HOSTS), letters(DNS_HOSTS)), (vec!["hostname", "ttl", "addrs"], "sqs".to_owned()));
    assert_eq!((names(DNS_ZONES), letters(DNS_ZONES)), (vec!["zonename", "serial", "count"], "sqi".to_owned()));
    assert_eq!((names(PEERS), letters(PEERS)), (vec!["peer_id", "host", "port", "pool_size"], "isii".to_owned()));
    assert_eq!(
        names(PEER_POOLS),
        ["peer_id", "cl_active_cancel_req", "cl_waiting_cancel_req", "sv_active_cancel", "sv_login"]
    );
    assert_eq!(letters(PEER_POOLS), "iiiii");
    // SOCKETS: SHOW CLIENTS' columns, then the seven buffer positions. PgBouncer's `T` (a timestamp written
    // as text) is text; `id` is int8 where PgBouncer says int4 (pgmux's ids are 64-bit).
    assert_eq!(names(&SOCKETS[..21]), names(CONNECTIONS));
    assert_eq!(
        names(&SOCKETS[21..]),
        ["recv_pos", "pkt_pos", "pkt_remain", "send_pos", "send_remain", "pkt_avail", "send_avail"]
    );
    assert_eq!(letters(SOCKETS), "ssssssisissiiississiqiiiiiii");
}

#[test]
fn times_are_microseconds_and_maxwait_is_split() {
    let pools = names(POOLS);
    let (maxwait, maxwait_us) =
        (pools.iter().position(|n| *n == "maxwait").unwrap(), pools.iter().position(|n| *n == "maxwait_us").unwrap());
    assert_eq!(maxwait + 1, maxwait_us);
    for c in STATS_TOTALS.iter().filter(|c| c.name.ends_with("_time")) {
        assert!(c.doc.contains("µs"), "{}: {}", c.name, c.doc);
    }
    for c in LATENCY.iter().filter(|c| c.name.ends_with("_us")) {
        assert!(c.doc.contains("µs"), "{}", c.name);
    }
}

#[test]
fn lists_rows_are_pgbouncer_s() {
    assert_eq!(LISTS_ROWS.len(), 14);
    assert_eq!((LISTS_ROWS[0], LISTS_ROWS[13]), ("databases", "dns_pending"));
}

/// The columns of a SHOW; `None` for HELP (a notice, no rows) and the session settings (one column named
/// after the setting: [`super::table::setting`]).
fn of(show: Show) -> Option<&'static [ColumnDef]> {
    Some(match show {
        Show::Version => VERSION,
        Show::Pools => POOLS,
        Show::Stats => STATS,
        Show::StatsTotals => STATS_TOTALS,
        Show::StatsAverages => STATS_AVERAGES,
        Show::Totals => TOTALS,
        Show::Clients | Show::Servers => CONNECTIONS,
        Show::Databases => DATABASES,
        Show::Config => CONFIG,
        Show::Lists => LISTS,
        Show::Users => USERS,
        Show::State => STATE,
        Show::Sizing => SIZING,
        Show::Pins => PINS,
        Show::Prepared => PREPARED,
        Show::Latency => LATENCY,
        Show::Sockets | Show::ActiveSockets => SOCKETS,
        Show::Fds => FDS,
        Show::Mem => MEM,
        Show::DnsHosts => DNS_HOSTS,
        Show::DnsZones => DNS_ZONES,
        Show::Peers => PEERS,
        Show::PeerPools => PEER_POOLS,
        Show::Help | Show::Setting(_) => return None,
    })
}
