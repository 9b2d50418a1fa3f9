//! Shutdown: no new clients, open transactions may finish, then every client is told 57P01; a hard stop
//! ends everything at once and leaves no connection behind.

use super::client::codes;
use super::{Rig, tags};

#[tokio::test]
async fn an_idle_client_is_told_57p01_as_soon_as_shutdown_begins() {
    let mut rig = Rig::new(2, "").await;
    let mut client = rig.login().await;
    rig.stop.begin_graceful();
    assert_eq!(codes(&client.closed().await), ["57P01"]);
}

#[tokio::test]
async fn an_open_transaction_may_finish_before_its_client_is_told_57p01() {
    let mut rig = Rig::new(2, "").await;
    let mut client = rig.login().await;
    client.query("BEGIN").await;
    rig.stop.begin_graceful();
    assert_eq!(tags(&client.query("COMMIT").await), "CZ");
    assert_eq!(codes(&client.closed().await), ["57P01"]);
    assert_eq!(rig.pool().idle, 1, "the connection went back clean");
}

#[tokio::test]
async fn a_hard_stop_closes_a_client_mid_transaction_and_its_connection() {
    let mut rig = Rig::new(2, "").await;
    let mut client = rig.login().await;
    client.query("BEGIN").await;
    rig.stop.force();
    assert_eq!(codes(&client.closed().await), ["57P01"]);
    rig.fake.until("the connection closed", |f| f.open() == 0).await;
}

#[tokio::test]
async fn a_client_arriving_during_shutdown_is_refused_with_57p01() {
    let mut rig = Rig::new(2, "").await;
    rig.stop.begin_graceful();
    let mut client = rig.connect().await;
    client.startup(&[("user", "app"), ("database", "db")]).await;
    assert_eq!(codes(&client.closed().await), ["57P01"]);
}

#[tokio::test]
async fn a_pinned_client_idle_between_transactions_is_told_57p01_as_soon_as_shutdown_begins() {
    let mut rig = Rig::new(2, "").await;
    let mut client = rig.login().await;
    client.query("LISTEN jobs").await;
    rig.stop.begin_graceful();
    assert_eq!(codes(&client.closed().await), ["57P01"]);
}
