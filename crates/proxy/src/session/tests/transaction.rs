//! A transaction: the client's messages reach the server and the replies reach the client, the server
//! connection stays with the client until ReadyForQuery says idle, and then serves someone else.

use super::client::{bind, describe_portal, execute, parse, status, sync};
use super::{Rig, tags};
use crate::testing::Reply;

#[tokio::test]
async fn a_simple_query_reaches_the_server_and_its_rows_reach_the_client() {
    let mut rig = Rig::new(2, "").await;
    rig.fake.on("SELECT 42", Reply::column(&["42"]));
    let mut client = rig.login().await;
    let reply = client.query("SELECT 42").await;
    assert_eq!(tags(&reply), "TDCZ");
    assert_eq!(reply[1].value(), "42");
    assert_eq!(rig.fake.ran("SELECT 42"), [1]);
}

#[tokio::test]
async fn an_extended_protocol_unit_reaches_the_server_in_order_and_its_replies_come_back() {
    let mut rig = Rig::new(2, "").await;
    rig.fake.on("SELECT 7", Reply::column(&["7"]));
    let mut client = rig.login().await;
    client.send(&[parse("", "SELECT 7"), bind(""), describe_portal(), execute(), sync()].concat()).await;
    let reply = client.until_ready().await;
    assert_eq!(tags(&reply), "12TDCZ");
    assert_eq!(reply[3].value(), "7");
    let log: Vec<String> = rig.fake.log().into_iter().map(|(_, m)| m).collect();
    assert_eq!(log, ["P SELECT 7", "B", "D", "E", "S"]);
}

#[tokio::test]
async fn the_connection_goes_back_at_idle_and_the_next_client_reuses_it_without_a_login() {
    let mut rig = Rig::new(2, "").await;
    let mut first = rig.login().await;
    assert_eq!(status(&first.query("SELECT 1").await), b'I');
    assert_eq!((rig.pool().size, rig.pool().idle), (1, 1), "given back as soon as the server said idle");
    let mut second = rig.login().await;
    second.query("SELECT 2").await;
    assert_eq!(rig.fake.accepted(), 1);
    assert_eq!(rig.fake.ran("SELECT"), [1, 1]);
}

#[tokio::test]
async fn an_open_transaction_keeps_its_connection_and_the_next_client_waits_for_its_end() {
    let mut rig = Rig::new(1, "").await;
    let mut first = rig.login().await;
    assert_eq!(status(&first.query("BEGIN").await), b'T');
    assert_eq!(rig.pool().idle, 0, "kept inside the transaction");
    let mut second = rig.login().await;
    second.send_query("SELECT 2").await;
    rig.pool_until("the second client waits in line", |p| p.waiting == 1).await;
    assert_eq!(status(&first.query("COMMIT").await), b'I');
    assert_eq!(status(&second.until_ready().await), b'I');
    assert_eq!(rig.fake.sql(), [(1, "BEGIN".into()), (1, "COMMIT".into()), (1, "SELECT 2".into())]);
}

#[tokio::test]
async fn a_failed_transaction_keeps_its_connection_until_the_rollback() {
    let mut rig = Rig::new(2, "").await;
    rig.fake.on("SELECT nothing", Reply::Error("42P01"));
    let mut client = rig.login().await;
    client.query("BEGIN").await;
    let failed = client.query("SELECT nothing").await;
    assert_eq!((tags(&failed).as_str(), status(&failed)), ("EZ", b'E'));
    assert_eq!(rig.pool().idle, 0, "a failed transaction is still a transaction");
    assert_eq!(status(&client.query("ROLLBACK").await), b'I');
    assert_eq!(rig.pool().idle, 1);
}

#[tokio::test]
async fn a_client_s_own_parameters_are_applied_on_a_connection_that_lacks_them() {
    let mut rig = Rig::new(1, "").await;
    let mut named = rig.login_with(&[("application_name", "billing")]).await;
    named.query("SELECT 1").await;
    let mut plain = rig.login().await;
    plain.query("SELECT 2").await;
    let sql = rig.fake.sql();
    let [.., (_, reset), (_, query)] = sql.as_slice() else { panic!("{sql:?}") };
    assert!(reset.contains("RESET") && reset.contains("application_name"), "{sql:?}");
    assert_eq!(query, "SELECT 2");
    assert_eq!(rig.fake.accepted(), 1, "one connection, brought to each client's settings in turn");
}

#[tokio::test]
async fn a_setting_the_client_changes_is_read_back_and_follows_it_to_its_next_connection() {
    let mut rig = Rig::new(2, "").await;
    // What PostgreSQL 15 shows pgmux's read-back after `SET work_mem`: the values pgmux shields and the
    // role, then the settings whose source is the session.
    rig.fake.on("current_setting('role')", Reply::Rows(vec![vec!["0", "0", "\"$user\", public", "none"]]));
    rig.fake.on("source = 'session'", Reply::Rows(vec![vec!["work_mem", "65536", "4096"]]));
    let mut setter = rig.login().await;
    setter.query("SET work_mem = '64MB'").await;
    let mut other = rig.login().await;
    other.query("BEGIN").await;
    setter.query("SELECT 1").await;
    let sql = rig.fake.sql();
    let seen: Vec<(usize, &str)> = sql.iter().map(|(n, s)| (*n, work_mem_step(s))).collect();
    assert_eq!(
        seen,
        [(1, "SET work_mem = '64MB'"), (1, "read back"), (1, "reset"), (1, "BEGIN"), (2, "set"), (2, "SELECT 1")]
    );
}

/// What a statement does with work_mem, in short (pgmux's own are long).
fn work_mem_step(sql: &str) -> &str {
    if sql.contains("WHERE source = 'session'") {
        "read back"
    } else if sql.contains("RESET \"work_mem\"") {
        "reset"
    } else if sql.contains("set_config(E'work_mem', E'65536', false)") {
        "set"
    } else {
        sql
    }
}
