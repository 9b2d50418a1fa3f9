//! prometheus-community/pgbouncer_exporter v0.12.1 scraping an admin console: against PgBouncer 1.18 now
//! (the reference: which series it exports, and that its totals match a known workload), and against
//! pgmux's console once it is wired (ignored until then).

use std::collections::BTreeSet;
use std::time::Duration;

use pgmux_observability_tests::exporter::{Exporter, is_own_series};
use pgmux_observability_tests::pgbouncer::{PgBouncer, STATS_USER};
use pgmux_observability_tests::pgmux::Pgmux;
use pgmux_observability_tests::series::{Sample, shapes, value};
use pgmux_observability_tests::tools::tools;
use pgmux_observability_tests::{crate_dir, poll, workload};
use pgmux_testkit::{APP_USER, DATABASE, PgOptions, PgServer};

/// Where the reference series set is kept.
const FIXTURE: &str = "fixtures/pgbouncer_exporter_series.txt";

/// The series shapes (name and label names) in a scrape, without the exporter's own.
fn pooler_shapes(samples: &[Sample]) -> BTreeSet<String> {
    shapes(samples.iter().filter(|s| !is_own_series(&s.name)))
}

/// The shapes in the fixture (lines that are not comments).
fn fixture_shapes() -> BTreeSet<String> {
    let text = std::fs::read_to_string(crate_dir().join(FIXTURE)).expect("read the fixture");
    text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_owned).collect()
}

/// Scrapes until the totals for `database` show `want`, for up to 15 s (PgBouncer publishes them every
/// `stats_period`); returns the last scrape's (transactions, queries).
fn totals_when_settled(exporter: &Exporter, database: &str, want: (f64, f64)) -> (f64, f64) {
    let read = || {
        let s = exporter.samples();
        let xacts = value(&s, "pgbouncer_stats_totals_sql_transactions_pooled_total", &[("database", database)]);
        let queries = value(&s, "pgbouncer_stats_totals_queries_pooled_total", &[("database", database)]);
        (xacts.unwrap_or(f64::NAN), queries.unwrap_or(f64::NAN))
    };
    poll(Duration::from_secs(15), || Some(read()).filter(|got| *got == want)).unwrap_or_else(read)
}

/// `pgbouncer_up 1`: every one of the exporter's eight queries worked; its log names the one that did not.
fn assert_up(exporter: &Exporter) {
    let up = value(&exporter.samples(), "pgbouncer_up", &[]);
    assert_eq!(up, Some(1.0), "pgbouncer_up\n--- exporter log ---\n{}", exporter.log());
}

#[test]
fn exporter_against_pgbouncer_reports_up_its_series_and_the_workload() {
    tools();
    let pg = PgServer::start_with(&PgOptions { trust_loopback: true, ..PgOptions::default() });
    let bouncer = PgBouncer::start(pg.port());
    let exporter =
        Exporter::start(&format!("postgres://{STATS_USER}@127.0.0.1:{}/pgbouncer?sslmode=disable", bouncer.port));
    assert_up(&exporter);

    let sent = workload::run(bouncer.port, APP_USER.user, None, DATABASE);
    let want = (sent.transactions as f64, sent.queries as f64);
    let got = totals_when_settled(&exporter, DATABASE, want);
    assert_eq!(
        got,
        want,
        "exporter's (transactions, queries) vs the workload\n--- PgBouncer log ---\n{}",
        bouncer.log()
    );

    let samples = exporter.samples();
    assert!(value(&samples, "pgbouncer_version_info", &[]).is_some());
    let received = value(&samples, "pgbouncer_stats_totals_received_bytes_total", &[("database", DATABASE)]);
    assert!(received.is_some_and(|b| b > 0.0), "bytes received: {received:?}");

    let shapes = pooler_shapes(&samples);
    if std::env::var_os("PGMUX_UPDATE_FIXTURES").is_some() {
        let header = "# Series (name{label names}) pgbouncer_exporter v0.12.1 exports against PgBouncer 1.18.0\n\
                      # (Debian 1.18.0-1+deb12u1), its own go_/process_/promhttp_/build_info left out. Written by\n\
                      # tests/observability/tests/exporter.rs with PGMUX_UPDATE_FIXTURES=1; pgmux must export them all.\n";
        let body: String = shapes.iter().map(|s| format!("{s}\n")).collect();
        std::fs::write(crate_dir().join(FIXTURE), format!("{header}{body}")).expect("write the fixture");
    }
    assert_eq!(shapes, fixture_shapes(), "the exporter's series against PgBouncer changed");
}

/// Series pgmux may export beyond the fixture: STATS_TOTALS columns PgBouncer added after 1.18, which
/// pgmux's console has because it follows PgBouncer 1.25's columns (observability.md §2.3).
const NEWER_THAN_1_18: [&str; 4] = [
    "pgbouncer_stats_totals_binds_total{database}",
    "pgbouncer_stats_totals_client_parses_total{database}",
    "pgbouncer_stats_totals_server_assignments_total{database}",
    "pgbouncer_stats_totals_server_parses_total{database}",
];

/// The same scrape against pgmux's console on its own listener (virtual database `pgbouncer`, the user of
/// `database_url`, who is in `admin_users` by default): `pgbouncer_up 1`, every series PgBouncer gives
/// (and only the newer columns besides), one sample per label set (a duplicate makes the exporter answer
/// HTTP 500, which `scrape` refuses), and totals that match the workload.
#[test]
fn exporter_against_pgmux_sees_pgbouncer_s_series_and_the_workload() {
    tools();
    let pg = PgServer::start();
    let pgmux = Pgmux::start(&pg, false, "");
    let dsn = format!("postgres://{}:{}@{}/pgbouncer?sslmode=disable", APP_USER.user, APP_USER.password, pgmux.addr);
    let exporter = Exporter::start(&dsn);
    assert_up(&exporter);

    let sent = workload::run(pgmux.addr.port(), APP_USER.user, Some(APP_USER.password), DATABASE);
    let want = (sent.transactions as f64, sent.queries as f64);
    let got = totals_when_settled(&exporter, DATABASE, want);
    assert_eq!(got, want, "exporter's (transactions, queries) vs the workload\n--- pgmux log ---\n{}", pgmux.log());

    let samples = exporter.samples();
    let shapes = pooler_shapes(&samples);
    let fixture = fixture_shapes();
    let missing: Vec<&String> = fixture.difference(&shapes).collect();
    assert!(missing.is_empty(), "series PgBouncer gives and pgmux does not: {missing:?}");
    let extra: Vec<&String> = shapes.difference(&fixture).filter(|s| !NEWER_THAN_1_18.contains(&s.as_str())).collect();
    assert!(extra.is_empty(), "series pgmux gives and PgBouncer does not: {extra:?}");
    let mut label_sets: Vec<String> =
        samples.iter().filter(|s| !is_own_series(&s.name)).map(|s| format!("{}{:?}", s.name, s.labels)).collect();
    let all = label_sets.len();
    label_sets.sort_unstable();
    label_sets.dedup();
    assert_eq!(label_sets.len(), all, "a series appears twice");
}

/// Two routes behind one pgmux (issue 30): `app` logs in as the client, `reports` always as the md5 user in
/// session mode. The exporter's scrape stays whole (up, no label set twice) and shows each pool and each
/// database under its own labels, and each route's traffic under its own name (the default database, which
/// no client used, counts none).
#[test]
fn exporter_against_pgmux_with_two_routes_sees_both_databases() {
    const ROUTES: &str = "[[databases]]\nname = \"app\"\ndbname = \"pgmux\"\n\
        [[databases]]\nname = \"reports\"\ndbname = \"pgmux\"\nuser = \"pgmux_md5\"\npassword = \"md5-pw-2\"\n\
        pool_mode = \"session\"\n\
        [[users]]\nname = \"pgmux_app\"\npassword = \"app-pw-1\"\n";
    tools();
    let pg = PgServer::start();
    let pgmux = Pgmux::start(&pg, false, ROUTES);
    let dsn = format!("postgres://{}:{}@{}/pgbouncer?sslmode=disable", APP_USER.user, APP_USER.password, pgmux.addr);
    let exporter = Exporter::start(&dsn);
    assert_up(&exporter);

    for route in ["app", "reports"] {
        let t = workload::run(pgmux.addr.port(), APP_USER.user, Some(APP_USER.password), route);
        let sent = (t.transactions as f64, t.queries as f64);
        let got = totals_when_settled(&exporter, route, sent);
        assert_eq!(got, sent, "{route}'s (transactions, queries)\n--- pgmux log ---\n{}", pgmux.log());
    }
    let got = totals_when_settled(&exporter, DATABASE, (0.0, 0.0));
    assert_eq!(got, (0.0, 0.0), "the default database's (transactions, queries): no client used it");

    assert_up(&exporter);
    let samples = exporter.samples();
    for (database, user) in [("app", APP_USER.user), ("reports", "pgmux_md5")] {
        let labels = [("database", database), ("user", user)];
        let open: f64 = ["pgbouncer_pools_server_idle_connections", "pgbouncer_pools_server_active_connections"]
            .iter()
            .filter_map(|name| value(&samples, name, &labels))
            .sum();
        assert!(open >= 1.0, "pool ({database}, {user}): {open} server connections\n{}", exporter.log());
    }
    for (name, mode) in [("app", "transaction"), ("reports", "session")] {
        let pool_size = value(&samples, "pgbouncer_databases_pool_size", &[("name", name), ("pool_mode", mode)]);
        assert!(pool_size.is_some(), "no database row for {name} in {mode} mode");
    }
    let mut label_sets: Vec<String> =
        samples.iter().filter(|s| !is_own_series(&s.name)).map(|s| format!("{}{:?}", s.name, s.labels)).collect();
    let all = label_sets.len();
    label_sets.sort_unstable();
    label_sets.dedup();
    assert_eq!(label_sets.len(), all, "a series appears twice");
}
