//! PgBouncer's timeouts, each on a clock moved by the test (a jump of an hour takes no time):
//! query_timeout, client_idle_timeout, idle_transaction_timeout, and query_wait_timeout for a client in line.

use std::time::Duration;

use super::client::{codes, status};
use super::{Rig, jump, tags};
use crate::testing::{FakeServer, Reply};

const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test]
async fn query_timeout_cancels_a_long_query_and_the_client_goes_on_with_a_new_connection() {
    let mut rig = Rig::new(2, "query_timeout = \"1h\"").await;
    rig.fake.on("pg_sleep", Reply::held(Reply::Tag("SELECT 1")));
    let mut client = rig.login().await;
    client.send_query("SELECT pg_sleep(7200)").await;
    rig.fake.until("the query running", |f| f.holding() == 1).await;
    jump(HOUR).await;
    let reply = client.until_ready().await;
    assert_eq!((codes(&reply), status(&reply)), (vec!["57014".to_owned()], b'I'));
    assert!(reply[0].message().contains("query_timeout"), "{}", reply[0].message());
    rig.fake.until("the server's cancel", |f| f.cancels() == [FakeServer::key(1)]).await;
    assert_eq!(tags(&client.query("SELECT 1").await), "CZ");
    assert_eq!(rig.fake.ran("SELECT 1"), [2], "the cancelled connection is not lent again");
}

#[tokio::test]
async fn client_idle_timeout_closes_a_client_idle_that_long_between_transactions() {
    let mut rig = Rig::new(2, "client_idle_timeout = \"1h\"").await;
    let mut client = rig.login().await;
    jump(HOUR / 2).await;
    assert_eq!(tags(&client.query("SELECT 1").await), "CZ", "half the time, and the client spoke");
    jump(HOUR).await;
    assert_eq!(codes(&client.closed().await), ["57P05"]);
}

#[tokio::test]
async fn idle_transaction_timeout_closes_the_client_and_rolls_its_transaction_back() {
    let mut rig = Rig::new(2, "idle_transaction_timeout = \"1h\"").await;
    let mut client = rig.login().await;
    client.query("BEGIN").await;
    jump(HOUR).await;
    assert_eq!(codes(&client.closed().await), ["25P03"]);
    assert_eq!(rig.fake.sql().last(), Some(&(1, "ROLLBACK".to_owned())));
    assert_eq!(rig.pool().idle, 1);
}

#[tokio::test]
async fn a_client_in_line_past_query_wait_timeout_gets_53300_and_its_query_never_runs() {
    let mut rig = Rig::new(1, "query_wait_timeout = \"1h\"").await;
    let mut holder = rig.login().await;
    holder.query("BEGIN").await;
    let mut waiter = rig.login().await;
    waiter.send_query("SELECT 2").await;
    rig.pool_until("the client waits in line", |p| p.waiting == 1).await;
    jump(HOUR).await;
    assert_eq!(codes(&waiter.until_ready().await), ["53300"]);
    assert!(rig.fake.ran("SELECT 2").is_empty());
}
