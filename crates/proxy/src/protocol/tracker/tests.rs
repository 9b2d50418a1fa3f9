//! The tracker driven by message tags alone: pipelines, Flush-based units, COPY, errors, and the replies
//! pgmux swallows or answers itself.

use bytes::Bytes;
use pgmux_proto::TxStatus::{self, *};

use super::*;

type T = TxTracker<&'static str>;

fn feed(t: &mut T, client: &[u8]) {
    for &tag in client {
        if tag == b'D' {
            t.client_describe(b'S');
        } else {
            t.client_message(tag);
        }
    }
}

/// Server messages in order; returns what reached the client (answers included) and the undone notes.
fn serve(t: &mut T, server: &[u8]) -> (String, Vec<&'static str>) {
    let mut seen = String::new();
    let mut undone = Vec::new();
    for &tag in server {
        t.take_answers(|b| seen.push_str(&format!("[{}]", String::from_utf8_lossy(&b))));
        let route = match tag {
            b'Z' => t.server_ready(Idle, |n| undone.push(n)).unwrap(),
            _ => t.server_message(tag, |n| undone.push(n)).unwrap(),
        };
        if route == Route::Forward {
            seen.push(tag as char);
        }
    }
    t.take_answers(|b| seen.push_str(&format!("[{}]", String::from_utf8_lossy(&b))));
    (seen, undone)
}

fn ready(t: &mut T, status: TxStatus) {
    t.server_ready(status, |_| {}).unwrap();
}

#[test]
fn a_simple_query_outside_a_transaction_releases_at_its_reply() {
    let mut t = T::default();
    feed(&mut t, b"Q");
    assert!(!t.may_release());
    assert_eq!(serve(&mut t, b"TDCZ").0, "TDCZ");
    assert!(t.may_release());
}

#[test]
fn a_transaction_keeps_the_link_until_idle() {
    let mut t = T::default();
    feed(&mut t, b"Q");
    ready(&mut t, InTransaction);
    assert!(!t.may_release(), "BEGIN leaves the server in a transaction");
    feed(&mut t, b"Q");
    t.server_message(b'E', |_| {}).unwrap();
    ready(&mut t, Failed);
    assert!(!t.may_release(), "an error inside the transaction keeps it");
    feed(&mut t, b"Q");
    ready(&mut t, Idle);
    assert!(t.may_release(), "ROLLBACK ends it");
}

#[test]
fn pipelined_units_release_after_the_last_reply() {
    let mut t = T::default();
    feed(&mut t, b"PBDES");
    feed(&mut t, b"BES");
    feed(&mut t, b"BES");
    assert_eq!(t.pending(), 3);
    let (seen, _) = serve(&mut t, b"12tTDCZ2DCZ");
    assert_eq!(seen, "12tTDCZ2DCZ");
    assert!(!t.may_release());
    serve(&mut t, b"2DCZ");
    assert!(t.may_release());
}

#[test]
fn a_flush_based_prepare_keeps_the_link_until_its_sync() {
    // asyncpg / postgres.js: Parse, Describe, Flush ... then Bind, Execute, Sync.
    let mut t = T::default();
    feed(&mut t, b"PDH");
    serve(&mut t, b"1tT");
    assert!(!t.may_release(), "the unit is open");
    feed(&mut t, b"BES");
    serve(&mut t, b"2DCZ");
    assert!(t.may_release());
}

#[test]
fn portal_streaming_keeps_the_link() {
    // pg-cursor: Bind a named portal, Execute(100) + Flush, repeatedly, Sync only at the end.
    let mut t = T::default();
    feed(&mut t, b"PBEH");
    serve(&mut t, b"12DDs");
    feed(&mut t, b"EH");
    serve(&mut t, b"DDs");
    assert!(!t.may_release());
    feed(&mut t, b"CS");
    serve(&mut t, b"3Z");
    assert!(t.may_release());
}

#[test]
fn simple_copy_in_keeps_its_query_reply() {
    let mut t = T::default();
    feed(&mut t, b"Q");
    serve(&mut t, b"G");
    assert!(t.copy_in());
    feed(&mut t, b"ddd");
    feed(&mut t, b"c");
    assert!(!t.copy_in(), "CopyDone ends the client's part");
    serve(&mut t, b"CZ");
    assert!(t.may_release());
}

#[test]
fn extended_copy_in_ignores_the_syncs_sent_before_copy_mode() {
    // tokio-postgres / libpq: Bind, Execute, Sync; CopyInResponse; data, CopyDone, Sync; one reply.
    let mut t = T::default();
    feed(&mut t, b"BES");
    serve(&mut t, b"2G");
    assert_eq!(t.pending(), 0);
    assert!(!t.may_release());
    feed(&mut t, b"ddS");
    assert_eq!(t.pending(), 0, "a Sync in copy mode is ignored");
    feed(&mut t, b"cS");
    serve(&mut t, b"CZ");
    assert!(t.may_release());
}

#[test]
fn extended_copy_in_that_fails_is_answered_at_the_next_sync() {
    let mut t = T::default();
    feed(&mut t, b"BES");
    serve(&mut t, b"2G");
    feed(&mut t, b"d");
    serve(&mut t, b"E");
    feed(&mut t, b"cS");
    serve(&mut t, b"Z");
    assert!(t.may_release());
}

#[test]
fn function_call_is_answered_by_ready_for_query() {
    let mut t = T::default();
    feed(&mut t, b"F");
    serve(&mut t, b"VZ");
    assert!(t.may_release());
}

#[test]
fn an_unsolicited_reply_is_an_error() {
    let mut t = T::default();
    assert_eq!(t.server_ready(Idle, |_| {}), Err(Unexpected(b'Z')));
    assert_eq!(t.server_message(b'C', |_| {}), Err(Unexpected(b'C')));
    feed(&mut t, b"BES");
    assert_eq!(t.server_message(b'1', |_| {}), Err(Unexpected(b'1')), "ParseComplete for a Bind");
}

#[test]
fn an_injected_parse_is_swallowed_and_an_answered_one_goes_out_in_order() {
    let mut t = T::default();
    // Client: Bind s1 (server lacks it: pgmux injects a Parse first), Execute, Sync.
    t.owe(Reply::Parse, Fate::Swallow, Some("injected"));
    feed(&mut t, b"BES");
    assert_eq!(serve(&mut t, b"12DCZ").0, "2DCZ");
    // Client: Parse s2 (server has it: pgmux answers), Bind, Execute, Sync.
    t.owe(Reply::Parse, Fate::Answer(Bytes::from_static(b"1")), Some("answered"));
    feed(&mut t, b"BES");
    assert_eq!(serve(&mut t, b"2DCZ").0, "[1]2DCZ");
    assert!(t.may_release());
}

#[test]
fn an_answer_after_outstanding_replies_waits_for_them() {
    let mut t = T::default();
    feed(&mut t, b"BE");
    t.owe(Reply::Close, Fate::Answer(Bytes::from_static(b"3")), None);
    feed(&mut t, b"S");
    let mut early = String::new();
    t.take_answers(|b| early.push_str(&String::from_utf8_lossy(&b)));
    assert_eq!(early, "", "the Bind and Execute replies come first");
    assert_eq!(serve(&mut t, b"2DCZ").0, "2DC[3]Z");
}

#[test]
fn an_error_skips_to_the_sync_and_returns_the_notes_to_undo() {
    let mut t = T::default();
    t.owe(Reply::Parse, Fate::Forward, Some("parse s1"));
    t.owe(Reply::Bind, Fate::Forward, Some("bind s1"));
    t.owe(Reply::Close, Fate::Answer(Bytes::from_static(b"3")), Some("close s0"));
    feed(&mut t, b"ES");
    let (seen, undone) = serve(&mut t, b"EZ");
    assert_eq!(seen, "EZ", "the answered CloseComplete is skipped with the rest");
    assert_eq!(undone, vec!["parse s1", "bind s1", "close s0"]);
    assert!(t.may_release());
}

#[test]
fn an_error_for_an_injected_parse_is_forwarded() {
    let mut t = T::default();
    t.owe(Reply::Parse, Fate::Swallow, Some("injected"));
    feed(&mut t, b"BES");
    let (seen, undone) = serve(&mut t, b"EZ");
    assert_eq!(seen, "EZ");
    assert_eq!(undone, vec!["injected"]);
}

#[test]
fn abandoning_returns_every_note() {
    let mut t = T::default();
    t.owe(Reply::Parse, Fate::Swallow, Some("a"));
    feed(&mut t, b"BES");
    t.owe(Reply::Close, Fate::Answer(Bytes::new()), Some("b"));
    assert_eq!(t.abandon(), vec!["a", "b"]);
    assert_eq!(t.pending(), 0);
}

#[test]
fn a_message_pgmux_sent_to_fail_is_never_seen_not_even_its_error() {
    let mut t = T::default();
    feed(&mut t, b"P");
    t.owe(Reply::Bind, Fate::Answer(Bytes::from_static(b"E")), None);
    t.owe(Reply::Parse, Fate::Fail, Some("failing"));
    feed(&mut t, b"S");
    let (seen, undone) = serve(&mut t, b"1EZ");
    assert_eq!(seen, "1[E]Z", "the answer in the Bind's turn; the failing Parse's error swallowed");
    assert_eq!(undone, vec!["failing"]);
    assert!(t.may_release());
}

#[test]
fn the_note_of_a_completed_describe_is_taken_out_and_no_other() {
    let mut t = T::default();
    t.owe(Reply::Parse, Fate::Swallow, Some("parse"));
    t.owe(Reply::DescribeStatement, Fate::Swallow, Some("describe"));
    assert_eq!(t.take_completed_note(b'T'), None, "the head is the Parse");
    serve(&mut t, b"1");
    assert_eq!(t.take_completed_note(b't'), None, "ParameterDescription does not complete it");
    assert_eq!(t.take_completed_note(b'T'), Some("describe"));
    let (_, undone) = serve(&mut t, b"T");
    assert!(undone.is_empty());
    assert!(t.nothing_owed());
}
