//! Parameter sync plans, start-up parsing and the catalog of known values.

use super::*;
use pgmux_proto::sqlstate;

fn p(name: &str, value: &str) -> Param {
    Param { name: name.into(), value: value.into() }
}

fn server(reported: &[(&str, &str)]) -> ServerParams {
    let mut s = ServerParams::default();
    for (n, v) in reported {
        s.report(n, v);
    }
    s
}

fn defaults() -> Defaults {
    Defaults::from_reported(
        &server(&[
            ("DateStyle", "ISO, MDY"),
            ("TimeZone", "UTC"),
            ("application_name", ""),
            ("server_version", "15.8"),
        ])
        .reported,
    )
}

#[test]
fn nothing_to_do_when_the_server_already_matches() {
    let s = server(&[("DateStyle", "ISO, MDY"), ("TimeZone", "UTC"), ("application_name", "")]);
    assert_eq!(sync_statement(&ClientParams::default(), &s, &defaults()), None);
    let mut c = ClientParams::default();
    c.report("DateStyle", "ISO, MDY");
    assert_eq!(sync_statement(&c, &s, &defaults()), None, "a value equal to the server's needs no SET");
}

#[test]
fn differing_values_are_set_and_foreign_ones_reset() {
    let mut s = server(&[("DateStyle", "German, DMY"), ("TimeZone", "UTC"), ("application_name", "other")]);
    s.applied.insert("search_path".into(), p("search_path", "other_schema"));
    let mut c = ClientParams::default();
    c.report("TimeZone", "Europe/Paris");
    Arc::make_mut(&mut c.values).insert("statement_timeout".into(), p("statement_timeout", "5s"));
    let sql = sync_statement(&c, &s, &defaults()).unwrap();
    assert_eq!(
        sql,
        "RESET \"application_name\"; RESET \"DateStyle\"; RESET \"search_path\"; \
         SELECT pg_catalog.set_config(E'statement_timeout', E'5s', false), \
         pg_catalog.set_config(E'TimeZone', E'Europe/Paris', false);",
        "RESETs first: the client's own timeouts, once set, would hold for the rest of the transaction"
    );
}

#[test]
fn values_are_quoted_whatever_standard_conforming_strings_is() {
    let mut c = ClientParams::default();
    Arc::make_mut(&mut c.values).insert("x.y".into(), p("x.y", r"it's a \ path"));
    let sql = sync_statement(&c, &ServerParams::default(), &Defaults::default()).unwrap();
    assert!(sql.contains(r"E'it''s a \\ path'"), "{sql}");
}

#[test]
fn fixed_parameters_are_never_reset() {
    let s = server(&[("server_version", "16.1"), ("is_superuser", "on")]);
    assert_eq!(sync_statement(&ClientParams::default(), &s, &defaults()), None);
    let mut c = ClientParams::default();
    c.report("server_version", "9.0");
    assert!(c.values.is_empty(), "a client cannot want a fixed parameter");
}

#[test]
fn synced_records_unreported_values_only() {
    let mut s = server(&[("TimeZone", "UTC")]);
    let c = unchecked(&[p("TimeZone", "UTC"), p("search_path", "a, b")]);
    synced(&c, &mut s);
    assert_eq!(s.applied.keys().collect::<Vec<_>>(), vec!["search_path"]);
    assert_eq!(sync_statement(&c, &s, &defaults()), None);
}

#[test]
fn catalog_learns_canonical_values_once() {
    let cat = Catalog::default();
    let raw = vec![p("datestyle", "iso"), p("search_path", "app")];
    assert_eq!(cat.resolve(&raw), None, "unknown values need a server");
    let s = server(&[("DateStyle", "ISO, MDY")]);
    let learned = cat.learn(&raw, &s);
    assert_eq!(learned.values["datestyle"], p("DateStyle", "ISO, MDY"));
    assert_eq!(learned.values["search_path"], p("search_path", "app"));
    let resolved = cat.resolve(&raw).unwrap();
    assert_eq!(resolved, learned);
    assert!(Arc::ptr_eq(&resolved.values, &learned.values), "clients with equal parameters share one set");
}

#[test]
fn clients_that_log_in_together_share_one_set() {
    // Both logged in before either's values were known, so both had a server check them.
    let cat = Catalog::default();
    let raw = vec![p("datestyle", "iso")];
    let s = server(&[("DateStyle", "ISO, MDY")]);
    let first = cat.learn(&raw, &s);
    let second = cat.learn(&raw, &s);
    assert!(Arc::ptr_eq(&first.values, &second.values));
}

#[test]
fn a_server_in_sync_with_a_shared_set_needs_no_comparison() {
    let cat = Catalog::default();
    let raw = vec![p("application_name", "app")];
    let mut s = server(&[("application_name", "app")]);
    let a = cat.learn(&raw, &s);
    let b = cat.resolve(&raw).unwrap();
    assert!(!s.in_sync(&a));
    synced(&a, &mut s);
    assert!(s.in_sync(&a) && s.in_sync(&b));
    // The server changes (another client's SET): no longer in sync.
    s.report("application_name", "other");
    assert!(!s.in_sync(&a));
    synced(&a, &mut s);
    // The client changes its own set: no longer the shared one.
    let mut c = b.clone();
    c.report("TimeZone", "UTC");
    assert!(!s.in_sync(&c));
    assert!(s.in_sync(&a), "the others keep the shared set");
    // Reports of an unchanged value change nothing.
    s.report("application_name", "other");
    assert!(s.in_sync(&a));
}

#[test]
fn the_client_sees_server_defaults_with_its_own_values() {
    let d = defaults();
    let mut c = ClientParams::default();
    c.report("TimeZone", "Asia/Tokyo");
    let seen: Vec<_> = d.for_client(&c).collect();
    assert!(seen.contains(&("TimeZone", "Asia/Tokyo")));
    assert!(seen.contains(&("server_version", "15.8")));
    assert!(seen.contains(&("DateStyle", "ISO, MDY")));
}

#[test]
fn startup_parameters_and_options() {
    let params: Vec<(String, String)> = [
        ("user", "u"),
        ("database", "d"),
        ("application_name", "app"),
        ("options", r"-c search_path=a,b --statement-timeout=5s -cwork_mem=64MB -c x.y=with\ space"),
        ("_pq_.foo", "1"),
        ("replication", "false"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let got = from_startup(&params, &StartupRules::default()).unwrap();
    assert_eq!(
        got,
        vec![
            p("application_name", "app"),
            p("search_path", "a,b"),
            p("statement_timeout", "5s"),
            p("work_mem", "64MB"),
            p("x.y", "with space"),
        ]
    );
}

#[test]
fn bad_startup_options_are_refused_with_a_reason() {
    for bad in ["-B 100", "-c", "-c nothing", "plain"] {
        let params = vec![("options".to_string(), bad.to_string())];
        let err = from_startup(&params, &StartupRules::default()).unwrap_err();
        assert_eq!(err.code, sqlstate::SYNTAX_ERROR, "{bad}");
        assert!(err.message.contains("only '-c config=val' and '--config=val' are allowed"), "{}", err.message);
    }
    let repl = vec![("replication".to_string(), "database".to_string())];
    assert!(from_startup(&repl, &StartupRules::default()).unwrap_err().message.contains("replication"));
}

#[test]
fn a_later_value_for_the_same_name_wins() {
    let params =
        vec![("DateStyle".to_string(), "ISO".to_string()), ("options".to_string(), "-c datestyle=German".to_string())];
    assert_eq!(from_startup(&params, &StartupRules::default()).unwrap(), vec![p("datestyle", "German")]);
}

#[test]
fn a_read_only_report_is_the_nodes_until_read_back_as_the_sessions_own() {
    // A reload turned the writer read-only while the client was linked: the report is not the client's.
    let mut c = ClientParams::default();
    c.report("default_transaction_read_only", "on");
    assert!(!c.read_only() && c.values.is_empty(), "a report alone is not the client's setting");
    let mut s = server(&[("TimeZone", "UTC"), ("default_transaction_read_only", "on")]);
    adopt_session(&mut c, &mut s, &[], false);
    assert!(!c.read_only(), "not a setting of the session: the node's own (configuration file)");

    // The client's own SET: read back with source `session`, it follows the client.
    adopt_session(&mut c, &mut s, &[p("default_transaction_read_only", "on")], false);
    assert!(c.read_only());
    assert!(s.applied.is_empty(), "a reported parameter is never applied by hand");
    assert_eq!(sync_statement(&c, &s, &defaults()), None, "the server already has it");
    let elsewhere = server(&[("TimeZone", "UTC"), ("default_transaction_read_only", "off")]);
    assert_eq!(
        sync_statement(&c, &elsewhere, &defaults()).as_deref(),
        Some("SELECT pg_catalog.set_config(E'default_transaction_read_only', E'on', false);"),
        "set again on the client's next server"
    );

    // RESET: no longer a session setting, so no longer the client's.
    adopt_session(&mut c, &mut s, &[], false);
    assert!(!c.read_only());
}

#[test]
fn time_values_are_read_in_milliseconds_as_postgresql_reads_them() {
    assert_eq!(millis("0"), Some(0));
    assert_eq!(millis("1"), Some(1));
    assert_eq!(millis("1ms"), Some(1));
    assert_eq!(millis("1.5s"), Some(1500));
    assert_eq!(millis("2min"), Some(120_000));
    assert_eq!(millis(" 1 h "), Some(3_600_000));
    assert_eq!(millis("1d"), Some(86_400_000));
    assert_eq!(millis("500us"), Some(1));
    assert_eq!(millis("soon"), None);
    assert_eq!(millis("1fortnight"), None);
    assert_eq!(millis("-1"), None);
}

#[test]
fn a_client_s_idle_session_timeout_is_its_own_and_leaves_the_server_it_was_read_from() {
    let mut c = ClientParams::default();
    let mut s = server(&[("TimeZone", "UTC")]);
    adopt_session(&mut c, &mut s, &[p("idle_session_timeout", "1"), p("work_mem", "64")], false);
    assert_eq!(c.idle_session_timeout(), Some(std::time::Duration::from_millis(1)));
    assert!(s.ends_idle(), "the server holds it until pgmux takes it off");
    // Read again with the RESET that takes it off: the client keeps it, the server no longer has it.
    adopt_session(&mut c, &mut s, &[p("idle_session_timeout", "1"), p("work_mem", "64")], true);
    assert_eq!(c.idle_session_timeout(), Some(std::time::Duration::from_millis(1)));
    assert!(!s.ends_idle() && !s.applied.contains_key("idle_session_timeout"), "{:?}", s.applied);
    assert!(!s.in_sync(&c), "the client's next transaction here applies it again");
    let sql = sync_statement(&c, &s, &defaults()).unwrap();
    assert!(sql.contains("E'idle_session_timeout', E'1'"), "{sql}");
    // Zero is no timeout.
    adopt_session(&mut c, &mut s, &[p("idle_session_timeout", "0")], false);
    assert_eq!(c.idle_session_timeout(), None);
    assert!(!s.ends_idle());
}

#[test]
fn session_authorization_follows_its_client_and_is_reset_for_the_next() {
    // A superuser's session changed it: the server reports it, and it is the client's.
    let mut c = ClientParams::default();
    c.report("session_authorization", "bob");
    assert_eq!(c.values.get("session_authorization").map(|p| p.value.as_str()), Some("bob"));
    let mut defaults_with_login = server(&[("TimeZone", "UTC"), ("session_authorization", "app")]);
    let defaults = Defaults::from_reported(&defaults_with_login.reported);
    defaults_with_login.report("session_authorization", "bob");
    let sql = sync_statement(&ClientParams::default(), &defaults_with_login, &defaults).unwrap();
    assert_eq!(sql, "RESET \"session_authorization\";", "the next client is not bob");
}

#[test]
fn what_connect_query_set_is_the_servers_starting_point_and_comes_back_in_place_of_a_reset() {
    let mut s = server(&[("TimeZone", "UTC")]);
    s.set_baseline(&[p("enable_seqscan", "off"), p("TimeZone", "UTC")]);
    let plain = ClientParams::default();
    assert_eq!(sync_statement(&plain, &s, &defaults()), None, "a client that sets nothing: nothing to do");
    // A client changed it (read back from its session): the next one gets connect_query's value back.
    let mut c = ClientParams::default();
    adopt_session(&mut c, &mut s, &[p("enable_seqscan", "on"), p("work_mem", "64")], false);
    assert_eq!(
        sync_statement(&plain, &s, &defaults()).as_deref(),
        Some("RESET \"work_mem\"; SELECT pg_catalog.set_config(E'enable_seqscan', E'off', false);")
    );
    synced(&plain, &mut s);
    assert_eq!(
        s.applied.get("enable_seqscan").map(|p| p.value.as_str()),
        Some("off"),
        "held, as connect_query left it"
    );
    assert_eq!(sync_statement(&plain, &s, &defaults()), None);
    assert!(
        sync_statement(&c, &s, &defaults()).unwrap().contains("E'enable_seqscan', E'on'"),
        "and the client's own again"
    );
}

fn startup(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn ignore_startup_parameters_drops_a_name_wherever_it_comes() {
    let rules = StartupRules::new("extra_float_digits, Geqo", "");
    let params = startup(&[
        ("extra_float_digits", "3"),
        ("geqo", "off"),
        ("options", "-c extra_float_digits=2 -c work_mem=64MB --GEQO=on"),
    ]);
    assert_eq!(from_startup(&params, &rules).unwrap(), vec![p("work_mem", "64MB")]);
    // A value longer than PgBouncer's packet buffer (4096 bytes: test_startup_packet_larger_than_pktbuf) is
    // dropped all the same.
    let long = format!("-c extra_float_digits={}", "1".repeat(4096));
    assert_eq!(from_startup(&startup(&[("options", &long)]), &rules).unwrap(), vec![]);
    assert_eq!(from_startup(&params, &StartupRules::default()).unwrap().len(), 3, "without the list: all kept");
}

#[test]
fn track_extra_parameters_set_refuses_what_it_does_not_list_unless_options_is_ignored() {
    let rules = StartupRules::new("extra_float_digits", "search_path, IntervalStyle");
    let ok =
        startup(&[("DateStyle", "ISO"), ("options", "-c timezone=UTC -c intervalstyle=iso_8601 -c search_path=a")]);
    assert_eq!(from_startup(&ok, &rules).unwrap().len(), 4);
    let err = from_startup(&startup(&[("options", "-c enable_seqscan=false")]), &rules).unwrap_err();
    assert_eq!((&*err.code, &*err.message), ("0A000", "unsupported startup parameter in options: enable_seqscan"));
    let err = from_startup(&startup(&[("enable_seqscan", "false")]), &rules).unwrap_err();
    assert_eq!(err.message, "unsupported startup parameter: enable_seqscan");
    // `options` ignored: what is not followed inside it is dropped; what is followed still applies.
    let rules = StartupRules::new("extra_float_digits, options", "search_path");
    let params = startup(&[("options", "-c enable_seqscan=false -ctimezone=Europe/Lisbon")]);
    assert_eq!(from_startup(&params, &rules).unwrap(), vec![p("timezone", "Europe/Lisbon")]);
    // Unset (pgmux's default): every parameter is followed; so with a list that names nothing.
    assert_eq!(from_startup(&startup(&[("enable_seqscan", "false")]), &StartupRules::default()).unwrap().len(), 1);
    let blank = StartupRules::new(" , ", " ,, ");
    assert_eq!(from_startup(&startup(&[("enable_seqscan", "false")]), &blank).unwrap().len(), 1);
}
