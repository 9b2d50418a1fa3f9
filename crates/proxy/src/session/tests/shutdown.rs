//! Shutdown: no new clients, open transactions may finish, then every client is told 57P01; a hard stop
//! ends everything at once and leaves no connection behind.

use super::client::codes;
use super::{Rig, tags};
use crate::testing::Reply;

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

#[tokio::test]
async fn shutdown_begun_while_a_client_s_settings_are_read_back_closes_it_once_they_are() {
    // The relay loop looks at the shutdown watch once per poll of its task (`Session::next_event`): a
    // release that had to wait (here for the settings' read-back) ends in a poll of its own, which must look.
    let mut rig = Rig::new(2, "").await;
    rig.fake.on("current_setting('role')", Reply::Rows(vec![vec!["0", "0", "\"$user\", public", "none"]]));
    rig.fake.on("source = 'session'", Reply::held(Reply::Rows(vec![vec!["work_mem", "65536", "4096"]])));
    let mut client = rig.login().await;
    client.send_query("SET work_mem = '64MB'").await;
    rig.fake.until("the read-back held", |f| f.holding() == 1).await;
    rig.stop.begin_graceful();
    // The raise woke the session in its release, which goes on waiting for the server.
    tokio::task::yield_now().await;
    rig.fake.release();
    let msgs = client.closed().await;
    assert_eq!(tags(&msgs[..msgs.len() - 1]), "CZ", "the SET was answered");
    assert_eq!(codes(&msgs), ["57P01"], "then the client was told, without sending anything more");
}
