//! Cancel requests: a client's key reaches the server it uses at that moment, with that server's key, and
//! nothing else; a query still waiting in line is cancelled by pgmux itself.

use super::client::{codes, status};
use super::{Rig, tags};
use crate::testing::{FakeServer, Reply};

/// A query the fake holds until it is released or cancelled.
const SLEEP: &str = "SELECT pg_sleep(60)";

#[tokio::test]
async fn a_cancel_reaches_the_server_with_the_server_s_key_and_the_query_ends_with_57014() {
    let mut rig = Rig::new(2, "").await;
    rig.fake.on("pg_sleep", Reply::held(Reply::Tag("SELECT 1")));
    let mut client = rig.login().await;
    client.send_query(SLEEP).await;
    rig.fake.until("the query running", |f| f.holding() == 1).await;
    rig.cancel(client.key).await;
    assert_eq!(rig.fake.cancels(), [FakeServer::key(1)]);
    let reply = client.until_ready().await;
    assert_eq!((codes(&reply), status(&reply)), (vec!["57014".to_owned()], b'I'));
    assert_eq!(rig.pool().idle, 1, "the connection goes back once the cancel has landed");
}

#[tokio::test]
async fn a_cancel_with_a_wrong_secret_reaches_no_server() {
    let mut rig = Rig::new(2, "").await;
    rig.fake.on("pg_sleep", Reply::held(Reply::Tag("SELECT 1")));
    let mut client = rig.login().await;
    client.send_query(SLEEP).await;
    rig.fake.until("the query running", |f| f.holding() == 1).await;
    rig.cancel((client.key.0, client.key.1 ^ 1)).await;
    rig.fake.release();
    assert_eq!(tags(&client.until_ready().await), "CZ");
    assert!(rig.fake.cancels().is_empty(), "{:?}", rig.fake.cancels());
}

#[tokio::test]
async fn a_cancel_while_waiting_in_line_answers_57014_and_the_query_never_runs() {
    let mut rig = Rig::new(1, "").await;
    let mut holder = rig.login().await;
    holder.query("BEGIN").await;
    let mut waiter = rig.login().await;
    waiter.send_query("SELECT 2").await;
    rig.pool_until("the client waits in line", |p| p.waiting == 1).await;
    rig.cancel(waiter.key).await;
    let reply = waiter.until_ready().await;
    assert_eq!((codes(&reply), status(&reply)), (vec!["57014".to_owned()], b'I'));
    holder.query("COMMIT").await;
    assert_eq!(tags(&waiter.query("SELECT 3").await), "CZ");
    assert!(rig.fake.ran("SELECT 2").is_empty() && rig.fake.cancels().is_empty(), "{:?}", rig.fake.log());
}
