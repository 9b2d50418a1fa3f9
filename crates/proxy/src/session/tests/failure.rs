//! A server connection that fails under a client: the client is told 08006 (or 08007 if a commit was in
//! flight) in place of each reply it was owed and keeps its connection to pgmux; a transaction that
//! provably never ran runs again on another connection without the client seeing anything.

use super::client::{codes, status};
use super::{Rig, tags};
use crate::testing::Reply;

#[tokio::test]
async fn a_fatal_error_mid_transaction_gives_08006_and_the_next_query_a_new_connection() {
    let mut rig = Rig::new(2, "").await;
    rig.fake.on("SELECT doomed", Reply::Fatal("57P01"));
    let mut client = rig.login().await;
    client.query("BEGIN").await;
    let lost = client.query("SELECT doomed").await;
    // Not the server's FATAL, which would end the client's own connection.
    assert_eq!((codes(&lost), status(&lost)), (vec!["08006".to_owned()], b'I'));
    assert_eq!(tags(&client.query("SELECT 1").await), "CZ");
    assert_eq!(rig.fake.ran("SELECT 1"), [2]);
}

#[tokio::test]
async fn a_server_that_closes_while_a_commit_runs_leaves_the_outcome_unknown_08007() {
    let mut rig = Rig::new(2, "").await;
    rig.fake.on("COMMIT", Reply::Close);
    let mut client = rig.login().await;
    client.query("BEGIN").await;
    client.query("INSERT INTO ledger VALUES (1)").await;
    assert_eq!(codes(&client.query("COMMIT").await), ["08007"]);
    assert_eq!(rig.pool().size, 0, "the closed connection is gone from the pool");
}

#[tokio::test]
async fn a_query_whose_first_write_fails_runs_again_on_a_new_connection_unseen() {
    let mut rig = Rig::new(2, "").await;
    let mut client = rig.login().await;
    // The idle connection breaks without a sign pgmux could see before writing to it: the fake stops
    // reading it, and pgmux's end can no longer send.
    rig.fake.deafen();
    rig.break_idle_connection();
    assert_eq!(tags(&client.query("SELECT 1").await), "CZ", "nothing of the failure reached the client");
    assert_eq!(rig.fake.ran("SELECT 1"), [2]);
}

#[tokio::test]
async fn a_transaction_refused_as_read_only_runs_again_on_a_new_connection_unseen() {
    let mut rig = Rig::new(2, "").await;
    // A demoted writer answers the first write so; a new connection finds the new writer.
    rig.fake.on_once("INSERT", Reply::Error("25006"));
    let mut client = rig.login().await;
    assert_eq!(tags(&client.query("INSERT INTO ledger VALUES (1)").await), "CZ");
    assert_eq!(rig.fake.ran("INSERT"), [1, 2]);
}

#[tokio::test]
async fn a_session_ended_before_it_read_the_transaction_runs_it_again_unseen() {
    let mut rig = Rig::new(2, "").await;
    // pg_terminate_backend, a shutdown or idle_session_timeout ends an idle session as a query comes: the
    // FATAL is its first reply, and the server exits with the query unread (a reset).
    for code in ["57P01", "57P05"] {
        rig.fake.on_once("INSERT", Reply::FatalUnread(code));
        let mut client = rig.login().await;
        assert_eq!(tags(&client.query("INSERT INTO ledger VALUES (1)").await), "CZ", "{code}");
    }
    assert_eq!(rig.fake.ran("INSERT").len(), 4, "each ended once, then ran on another connection");
}

#[tokio::test]
async fn a_session_that_ended_before_the_transaction_came_runs_it_again_unseen() {
    let mut rig = Rig::new(2, "").await;
    // The server had said FATAL and closed before the query reached it, but after pgmux last looked at the
    // idle connection: the query's bytes were answered with a reset, which comes after the end of file.
    rig.fake.on_once("INSERT", Reply::FatalClosedFirst("57P01"));
    let mut client = rig.login().await;
    assert_eq!(tags(&client.query("INSERT INTO ledger VALUES (1)").await), "CZ");
    assert_eq!(rig.fake.ran("INSERT").len(), 2, "ended once, then ran on another connection");
}

#[tokio::test]
async fn a_session_ended_as_the_transaction_ran_tells_the_client_in_the_server_s_words() {
    let mut rig = Rig::new(2, "").await;
    // The same FATAL with a plain close: the server may have read the query and run part of it.
    rig.fake.on_once("INSERT", Reply::Fatal("57P01"));
    let mut client = rig.login().await;
    let lost = client.query("INSERT INTO ledger VALUES (1)").await;
    assert_eq!(codes(&lost), ["08007"], "a statement that commits itself: its fate is unknown");
    let said = lost.iter().find(|m| m.tag == b'E').map(|m| m.message()).unwrap_or_default();
    assert!(said.contains("error 57P01 from the fake server"), "the server's words, not a bare close: {said}");
    // Another FATAL with a reset is no sign that the query went unread: only the codes of a session ended
    // from outside are.
    rig.fake.on_once("UPDATE", Reply::FatalUnread("XX000"));
    assert_eq!(codes(&client.query("UPDATE ledger SET n = 2").await), ["08007"]);
    assert_eq!(tags(&client.query("SELECT 1").await), "CZ");
}

#[tokio::test]
async fn a_server_that_dies_mid_row_closes_the_client_whose_stream_cannot_be_repaired() {
    let mut rig = Rig::new(2, "").await;
    rig.fake.on("SELECT wide", Reply::CutRow);
    let mut client = rig.login().await;
    client.send_query("SELECT wide").await;
    // The row's first piece went on as it came; nothing can follow it but the end of the connection.
    assert_eq!(tags(&client.closed().await), "T");
    client.session_over().await;
    assert_eq!(rig.pool().size, 0);
}

#[tokio::test]
async fn a_server_lost_while_a_setting_is_read_back_tells_the_client_its_settings_are_gone() {
    let mut rig = Rig::new(2, "").await;
    rig.fake.on("WHERE source = 'session'", Reply::Close);
    let mut client = rig.login().await;
    assert_eq!(tags(&client.query("SET work_mem = '64MB'").await), "CZ");
    // Its next statement would run without the setting it made: it is told instead, once.
    assert_eq!(codes(&client.query("SELECT 1").await), ["08006"]);
    assert_eq!(tags(&client.query("SELECT 2").await), "CZ");
    assert_eq!((rig.fake.ran("SELECT 1"), rig.fake.ran("SELECT 2")), (vec![], vec![2]));
}

#[tokio::test]
async fn a_restart_between_transactions_goes_unseen_by_a_client_holding_no_connection() {
    let mut rig = Rig::new(2, "").await;
    let mut client = rig.login().await;
    client.query("SELECT 1").await;
    rig.fake.terminate_all();
    rig.fake.until("its connections ended", |f| f.open() == 0).await;
    assert_eq!(tags(&client.query("SELECT 2").await), "CZ");
    assert_eq!(rig.fake.ran("SELECT 2"), [2], "the ended connection was noticed before it was lent");
}

#[tokio::test]
async fn a_client_idle_in_a_transaction_that_a_restart_ended_is_told_at_its_next_statement() {
    let mut rig = Rig::new(2, "").await;
    let mut client = rig.login().await;
    client.query("BEGIN").await;
    rig.fake.terminate_all();
    rig.fake.until("its connections ended", |f| f.open() == 0).await;
    assert_eq!(codes(&client.query("SELECT 1").await), ["08006"]);
    assert_eq!(tags(&client.query("SELECT 2").await), "CZ");
    assert!(rig.fake.ran("SELECT 1").is_empty());
}
