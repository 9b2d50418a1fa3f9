//! PgBouncer's rules for start-up parameters, when a configuration asks for them: `ignore_startup_parameters`
//! drops names (directly or in `options`), `track_extra_parameters` limits what a client may send, and a
//! malformed `options` gets a syntax error. Without them pgmux follows every parameter (tests in params.rs).

use pgmux_testkit::APP_USER;

use crate::common::{self, code, message, scalar};

const TRACK: &str = "pool_max = 1\ntrack_extra_parameters = \"search_path, IntervalStyle\"";

async fn with_options(fx: &common::Fixture, options: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    common::connect(fx.addr(), &APP_USER, |c| {
        c.options(options);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignored_parameters_are_dropped_and_untracked_ones_refused_as_pgbouncer_does() {
    let fx = common::start(&format!("{TRACK}\nignore_startup_parameters = \"extra_float_digits\"")).await;
    // Followed: the five PgBouncer always tracks, and the listed ones, in any of libpq's spellings.
    let c = with_options(&fx, r"-c timezone=Europe/Lisbon  -c    datestyle=German,\ YMD --search-path=pg_catalog")
        .await
        .expect("followed parameters");
    let other = common::connect(fx.addr(), &APP_USER, |_| {}).await.unwrap();
    for _ in 0..3 {
        assert_eq!(scalar(&c, "show timezone").await, "Europe/Lisbon");
        assert_eq!(scalar(&c, "show datestyle").await, "German, YMD");
        assert_eq!(scalar(&c, "show search_path").await, "pg_catalog");
        assert_eq!(scalar(&other, "show timezone").await, fx.pg.psql("show timezone"), "not leaked");
    }
    // Ignored: dropped, the server's value stays.
    let c = with_options(&fx, "-c extra_float_digits=2").await.expect("ignored, not refused");
    assert_eq!(scalar(&c, "show extra_float_digits").await, "1");
    // Not followed: refused, naming it.
    let err = with_options(&fx, "-c enable_seqscan=false").await.expect_err("not tracked");
    assert_eq!(
        (code(&err), message(&err)),
        ("0A000".into(), "unsupported startup parameter in options: enable_seqscan".into())
    );
    // Malformed: PostgreSQL's code, PgBouncer's words.
    for bad in ["-d", "-c timezone"] {
        let err = with_options(&fx, bad).await.expect_err(bad);
        assert_eq!(code(&err), "42601", "{bad}");
        assert!(message(&err).contains("only '-c config=val' and '--config=val' are allowed"), "{err:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_options_ignored_an_untracked_setting_in_it_is_dropped_and_a_tracked_one_applied() {
    let fx = common::start(&format!("{TRACK}\nignore_startup_parameters = \"extra_float_digits, options\"")).await;
    let c = with_options(&fx, "-c enable_seqscan=false -ctimezone=Europe/Lisbon").await.expect("not refused");
    assert_eq!(scalar(&c, "show enable_seqscan").await, "on", "dropped");
    assert_eq!(scalar(&c, "show timezone").await, "Europe/Lisbon", "applied");
}

/// PgBouncer's test_startup_packet_larger_than_pktbuf: a start-up packet over 4 KiB whose long value is in
/// an ignored parameter. Dropped, it logs in; without the list the server refuses the value, and the client
/// gets the server's own error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_ignored_value_in_a_large_startup_packet_is_dropped() {
    let long = format!("-c extra_float_digits={}", "1".repeat(4096));
    let fx = common::start("pool_max = 1\nignore_startup_parameters = \"extra_float_digits\"").await;
    let c = with_options(&fx, &long).await.expect("a long ignored value");
    assert_eq!(scalar(&c, "show extra_float_digits").await, "1");
    drop(fx);
    let fx = common::start("pool_max = 1").await;
    let err = with_options(&fx, &long).await.expect_err("followed: the server refuses the value");
    assert_eq!(code(&err), "22023", "the server's invalid_parameter_value");
}
