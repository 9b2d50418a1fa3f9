//! The console's SHOW commands asked of PgBouncer 1.18 and of the pgmux binary, side by side on the bare
//! protocol, each with a client in an open transaction behind it: pgmux answers every PgBouncer SHOW a
//! script may run (FDS, SOCKETS, ACTIVE_SOCKETS, MEM, DNS_HOSTS, DNS_ZONES, PEERS, PEER_POOLS) without an
//! error, with PgBouncer's column names in PgBouncer's order (1.18's list is a subsequence of pgmux's: 1.25
//! added columns) and, in the commands added for scripts, PgBouncer's types. SHOW CONFIG's shared settings
//! hold values of PgBouncer's form (a number where PgBouncer has one), and SHOW SERVERS' local end of each
//! server connection is the backend's `client_port` in pg_stat_activity.

use std::collections::BTreeMap;
use std::time::Duration;

use pgmux_observability_tests::pgbouncer::{ADMIN_USER, PgBouncer, STATS_USER};
use pgmux_observability_tests::pgmux::Pgmux;
use pgmux_observability_tests::tools::tools;
use pgmux_observability_tests::wire::{Answer, Session};
use pgmux_testkit::{APP_USER, DATABASE, PgOptions, PgServer};
use tokio_postgres::NoTls;

/// The commands added for scripts: compared by name, order and type.
const FOR_SCRIPTS: [&str; 6] = ["FDS", "SOCKETS", "ACTIVE_SOCKETS", "MEM", "DNS_HOSTS", "DNS_ZONES"];
/// The commands pgbouncer_exporter and Datadog read: compared by name and order (pgmux sends PgBouncer's
/// int4 columns as int8 there, on purpose: crates/proxy/src/ops/console/table.rs).
const FOR_EXPORTERS: [&str; 3] = ["CONFIG", "CLIENTS", "SERVERS"];
/// PgBouncer 1.19's peering, which 1.18 does not have: pgmux's answer only.
const NEWER_THAN_1_18: [&str; 2] = ["PEERS", "PEER_POOLS"];

/// Whether `part` appears in `whole` in the same order.
fn subsequence(part: &[&str], whole: &[&str]) -> bool {
    let mut rest = whole.iter();
    part.iter().all(|p| rest.any(|w| w == p))
}

fn ask(port: u16, user: &str, sql: &str) -> Answer {
    let mut session = Session::login(port, user).unwrap_or_else(|e| panic!("console login as {user} on {port}: {e}"));
    session.query(sql).unwrap_or_else(|e| panic!("{sql} on {port}: {e}"))
}

/// A client holding a server connection in an open transaction, until dropped with its runtime.
async fn in_transaction(port: u16) -> tokio_postgres::Client {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1").port(port).user(APP_USER.user).dbname(DATABASE).connect_timeout(Duration::from_secs(10));
    let (client, conn) = cfg.connect(NoTls).await.unwrap_or_else(|e| panic!("connect to {port}: {e}"));
    tokio::spawn(conn);
    client.simple_query("BEGIN; SELECT 1").await.expect("an open transaction");
    client
}

/// `SHOW CONFIG` as key → value.
fn config(answer: &Answer) -> BTreeMap<String, String> {
    answer.rows.iter().map(|r| (r[0].clone().unwrap_or_default(), r[1].clone().unwrap_or_default())).collect()
}

#[test]
fn every_show_answers_with_pgbouncer_s_columns() {
    tools();
    let pg = PgServer::start_with(&PgOptions { trust_loopback: true, ..PgOptions::default() });
    let bouncer = PgBouncer::start(pg.port());
    let pgmux = Pgmux::start(&pg, false, "client_auth = \"trust\"\nstats_users = \"watcher\"\n");
    let port = pgmux.addr.port();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let _holders = rt.block_on(async { (in_transaction(bouncer.port).await, in_transaction(port).await) });

    for show in FOR_SCRIPTS.iter().chain(&FOR_EXPORTERS).chain(&NEWER_THAN_1_18) {
        let sql = format!("SHOW {show}");
        let ours = ask(port, APP_USER.user, &sql);
        assert_eq!(ours.error, None, "{sql}: pgmux answered with an error\n{}", pgmux.log());
        assert_eq!(ours.tag.as_deref(), Some("SHOW"), "{sql}");
        assert!(!ours.columns.is_empty(), "{sql}: no RowDescription");
        eprintln!("{sql}: pgmux's rows {:?}", ours.rows);
        if NEWER_THAN_1_18.contains(show) {
            assert!(ours.rows.is_empty(), "{sql}: pgmux has no peers");
            continue;
        }
        let theirs = ask(bouncer.port, ADMIN_USER, &sql);
        assert_eq!(theirs.error, None, "{sql} on PgBouncer\n{}", bouncer.log());
        eprintln!("{sql}\n  PgBouncer 1.18: {:?}\n  pgmux:          {:?}", theirs.columns, ours.columns);
        assert!(
            subsequence(&theirs.names(), &ours.names()),
            "{sql}: PgBouncer's columns {:?} are not all in pgmux's {:?}, in order",
            theirs.names(),
            ours.names()
        );
        if FOR_SCRIPTS.contains(show) {
            for (name, oid) in &theirs.columns {
                assert_eq!(ours.type_of(name), Some(*oid), "{sql}: the type of {name}");
            }
        }
    }

    // What pgmux has nothing for is no rows, not made-up ones.
    for show in ["FDS", "DNS_HOSTS", "DNS_ZONES"] {
        assert!(ask(port, APP_USER.user, &format!("SHOW {show}")).rows.is_empty(), "SHOW {show}");
    }
    // The open transaction: its client and its server connection are active sockets.
    let active = ask(port, APP_USER.user, "SHOW ACTIVE_SOCKETS");
    let states = active.column("state");
    assert!(states.contains(&Some("cl_active")) && states.contains(&Some("sv_active")), "{active:?}");
    let sockets = ask(port, APP_USER.user, "SHOW SOCKETS");
    assert!(sockets.column("recv_pos").iter().all(Option::is_none), "buffer positions are NULL: {sockets:?}");
    let mem = ask(port, APP_USER.user, "SHOW MEM");
    let names = mem.column("name");
    assert!(names.contains(&Some("client_entry")) && names.contains(&Some("server_entry")), "{mem:?}");

    // FDS is for admins only, in both.
    let refused = ask(port, "watcher", "SHOW FDS");
    assert_eq!(refused.error.as_ref().map(|(code, _)| code.as_str()), Some("42501"), "{refused:?}");
    assert!(ask(bouncer.port, STATS_USER, "SHOW FDS").error.is_some(), "PgBouncer refuses it to stats_users");
    assert_eq!(ask(port, "watcher", "SHOW SOCKETS").error, None);

    // SHOW CONFIG: the settings both list hold a number where PgBouncer holds one.
    let (ours, theirs) =
        (config(&ask(port, APP_USER.user, "SHOW CONFIG")), config(&ask(bouncer.port, ADMIN_USER, "SHOW CONFIG")));
    let shared: Vec<&String> = theirs.keys().filter(|k| ours.contains_key(*k)).collect();
    for key in ["pool_mode", "default_pool_size", "listen_port", "listen_addr", "auth_type", "stats_period"] {
        assert!(shared.iter().any(|k| *k == key), "{key} is not in pgmux's SHOW CONFIG");
    }
    for key in &shared {
        if theirs[*key].parse::<f64>().is_ok() {
            assert!(
                ours[*key].parse::<f64>().is_ok(),
                "{key}: PgBouncer says {:?}, pgmux {:?}",
                theirs[*key],
                ours[*key]
            );
        }
    }
    assert_eq!(ours["pool_mode"], "transaction");
    assert_eq!(ours["listen_port"], port.to_string());
    assert_eq!(ours["admin_users"], APP_USER.user, "the users in force, not an empty key");
    assert_eq!(ours["stats_period"], "60");
    assert_eq!(ours["default_pool_size"], "2", "pool_max");

    // SHOW SERVERS: the local end of each server connection is its backend's client_port.
    let servers = ask(port, APP_USER.user, "SHOW SERVERS");
    let backends = pg.psql(&format!(
        "select client_port from pg_stat_activity where usename = '{}' and backend_type = 'client backend'",
        APP_USER.user
    ));
    let client_ports: Vec<&str> = backends.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    assert!(!servers.rows.is_empty(), "the open transaction's server connection");
    for (addr, local_port) in servers.column("local_addr").into_iter().zip(servers.column("local_port")) {
        assert_eq!(addr, Some("127.0.0.1"), "{servers:?}");
        let local_port = local_port.expect("local_port");
        assert!(client_ports.contains(&local_port), "local_port {local_port} not among {client_ports:?}");
    }
}
