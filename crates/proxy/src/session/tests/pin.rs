//! Pins: session state that cannot follow a client to another connection (LISTEN, a session advisory lock)
//! keeps its server connection with it across transactions, and goes with the connection when it leaves.

use super::client::codes;
use super::{Rig, tags};

#[tokio::test]
async fn listen_keeps_the_connection_across_transactions_while_others_get_their_own() {
    let mut rig = Rig::new(2, "").await;
    let mut listener = rig.login().await;
    listener.query("LISTEN jobs").await;
    assert_eq!(rig.pool().idle, 0, "kept after the transaction ended");
    let mut other = rig.login().await;
    other.query("SELECT 1").await;
    listener.query("SELECT 2").await;
    assert_eq!((rig.fake.ran("SELECT 1"), rig.fake.ran("SELECT 2")), (vec![2], vec![1]));
}

#[tokio::test]
async fn a_pinned_client_s_terminate_closes_its_connection_where_an_unpinned_one_returns_it() {
    let mut rig = Rig::new(1, "").await;
    let mut plain = rig.login().await;
    plain.query("SELECT 1").await;
    plain.terminate().await;
    assert_eq!((rig.pool().idle, rig.fake.open()), (1, 1));
    let mut locker = rig.login().await;
    assert_eq!(tags(&locker.query("SELECT pg_advisory_lock(1)").await), "CZ");
    locker.terminate().await;
    // The lock must not pass to the next client of that connection.
    rig.fake.until("the connection closed", |f| f.open() == 0).await;
    assert_eq!(rig.pool().size, 0);
}

#[tokio::test]
async fn a_pinned_client_whose_server_ends_between_transactions_is_told_and_disconnected() {
    let mut rig = Rig::new(2, "").await;
    let mut client = rig.login().await;
    client.query("LISTEN jobs").await;
    rig.fake.terminate_all();
    // As for a client pinned to a node no longer trusted: its session state cannot move, so it hears why
    // rather than wait for notifications that will never come.
    assert_eq!(codes(&client.closed().await), ["08006"]);
}
