//! A transaction: the client's messages reach the server and the replies reach the client, the server
//! connection stays with the client until ReadyForQuery says idle, and then serves someone else.

use super::client::{bind, describe_portal, execute, parse, status, sync};
use super::{Rig, tags};
use crate::testing::Reply;

#[tokio::test]
async fn a_simple_query_reaches_the_server_and_its_rows_reach_the_client() {
    let mut rig = Rig::new(2, "").await;
    rig.fake.on("SELECT 42", Reply::Rows(vec!["42"]));
    let mut client = rig.login().await;
    let reply = client.query("SELECT 42").await;
    assert_eq!(tags(&reply), "TDCZ");
    assert_eq!(reply[1].value(), "42");
    assert_eq!(rig.fake.ran("SELECT 42"), [1]);
}

#[tokio::test]
async fn an_extended_protocol_unit_reaches_the_server_in_order_and_its_replies_come_back() {
    let mut rig = Rig::new(2, "").await;
    rig.fake.on("SELECT 7", Reply::Rows(vec!["7"]));
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
