//! A client that goes away with a server connection in hand: what it left on the server is cleaned up and
//! the connection returned, or closed when it cannot be cleaned (a query still running); never lent dirty.

use super::client::{bind, execute, parse};
use super::{Rig, tags};
use crate::testing::{FakeServer, Reply};

#[tokio::test]
async fn a_client_that_vanishes_inside_a_transaction_has_it_rolled_back_and_the_connection_returned() {
    let mut rig = Rig::new(2, "").await;
    let mut client = rig.login().await;
    client.query("BEGIN").await;
    client.query("INSERT INTO ledger VALUES (1)").await;
    client.vanish().await;
    assert_eq!(rig.fake.sql().last(), Some(&(1, "ROLLBACK".to_owned())));
    assert_eq!((rig.pool().idle, rig.fake.open()), (1, 1));
}

#[tokio::test]
async fn a_client_that_vanishes_mid_unit_has_the_unit_closed_with_a_sync_and_the_connection_returned() {
    let mut rig = Rig::new(2, "").await;
    let mut client = rig.login().await;
    client.send(&[parse("", "SELECT 1"), bind(""), execute()].concat()).await;
    let mut replies = Vec::new();
    for _ in 0..3 {
        replies.push(client.recv().await.expect("a reply"));
    }
    assert_eq!(tags(&replies), "12C");
    client.vanish().await;
    assert_eq!(rig.fake.log().last(), Some(&(1, "S".to_owned())));
    assert_eq!(rig.pool().idle, 1);
}

#[tokio::test]
async fn a_client_that_vanishes_while_its_query_runs_has_it_cancelled_and_the_connection_closed() {
    let mut rig = Rig::new(2, "").await;
    rig.fake.on("pg_sleep", Reply::held(Reply::Tag("SELECT 1")));
    let mut client = rig.login().await;
    client.send_query("SELECT pg_sleep(60)").await;
    rig.fake.until("the query running", |f| f.holding() == 1).await;
    client.vanish().await;
    assert_eq!(rig.fake.cancels(), [FakeServer::key(1)]);
    // A cancel may land late: the connection must not serve anyone else.
    rig.fake.until("the connection closed", |f| f.open() == 0).await;
    assert_eq!(rig.pool().size, 0);
}

#[tokio::test]
async fn a_client_that_vanishes_while_waiting_in_line_gives_up_its_place() {
    let mut rig = Rig::new(1, "").await;
    let mut holder = rig.login().await;
    holder.query("BEGIN").await;
    let mut waiter = rig.login().await;
    waiter.send_query("SELECT 2").await;
    rig.pool_until("the client waits in line", |p| p.waiting == 1).await;
    waiter.vanish().await;
    holder.query("COMMIT").await;
    assert_eq!(rig.pool().idle, 1, "the connection is not handed to a client that left");
    assert!(rig.fake.ran("SELECT 2").is_empty());
}
