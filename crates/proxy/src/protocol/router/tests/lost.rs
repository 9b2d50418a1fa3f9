//! A server connection lost: what each owed reply becomes, and 08006 against 08007.

use super::*;

#[test]
fn a_fatal_error_or_an_unexplained_reply_loses_the_server() {
    let mut rig = Rig::new(10);
    rig.client(&[query("select pg_sleep(1)")]);
    let lost = rig.try_serve(&[fatal()]).expect_err("FATAL ends the session");
    assert!(matches!(lost, ServerFailure::Fatal(ref e) if e.code == "57P01"), "{lost}");
    let mut rig = Rig::new(10);
    let lost = rig.try_serve(&[bound()]).expect_err("nothing was owed");
    assert!(matches!(lost, ServerFailure::Unexpected(_)), "{lost}");
}

#[test]
fn a_server_lost_mid_unit_answers_each_owed_reply_and_skips_the_rest_of_the_unit() {
    let mut rig = Rig::new(10);
    rig.client(&[query("select 1"), parse("s1", "select 2"), bind("s1")]);
    let tracker = std::mem::take(&mut rig.servers[0].tracker);
    let reply = rig.router.server_lost(tracker, "lost", &rig.registry);
    assert_eq!(tokens(&reply), strs(&["E 08006", "Z", "E 08006"]), "the Query's reply, then the open unit's error");
    assert_eq!(rig.router.mode(), Mode::SkipToSync);
    assert!(!rig.named("s1"), "the Parse never ran");
    assert_eq!(rig.router.unlinked(b'E', &execute()), Verdict::Drop);
    assert!(matches!(rig.router.unlinked(b'S', &sync()), Verdict::Answer(_)));
}

#[test]
fn a_server_lost_while_the_client_idles_in_a_transaction_fails_its_next_unit_once() {
    let mut rig = Rig::new(10);
    rig.client(&[query("begin")]);
    rig.serve(&[done("BEGIN"), ready(b'T')]);
    let tracker = std::mem::take(&mut rig.servers[0].tracker);
    let reply = rig.router.server_lost(tracker, "lost", &rig.registry);
    assert!(reply.is_empty(), "nothing was owed: the client hears of it at its next unit");
    assert_eq!(rig.router.mode(), Mode::LostTransaction);
    let Verdict::Answer(err) = rig.router.unlinked(b'Q', &query("insert into t values (1)")) else { panic!() };
    assert_eq!(tokens(&err), strs(&["E 08006", "Z"]));
    assert_eq!(rig.router.unlinked(b'Q', &query("select 1")), Verdict::NeedServer, "once");
}

#[test]
fn settings_lost_before_they_were_read_back_fail_the_next_unit_once_and_say_so() {
    let mut rig = Rig::new(10);
    rig.client(&[query("set statement_timeout = '1ms'")]);
    rig.serve(&[done("SET"), ready(b'I')]);
    assert!(rig.router.take_settings_dirty());
    let tracker = std::mem::take(&mut rig.servers[0].tracker);
    assert!(rig.router.server_lost(tracker, "lost", &rig.registry).is_empty(), "nothing was owed");
    rig.router.settings_lost();
    // An extended-protocol unit: the error now, its ReadyForQuery at its Sync.
    let Verdict::Answer(err) = rig.router.unlinked(b'P', &parse("", "show statement_timeout")) else { panic!() };
    assert_eq!(tokens(&err), strs(&["E 08006"]));
    let message = String::from_utf8_lossy(&err).into_owned();
    assert!(message.contains("settings") && message.contains("SET them again"), "{message}");
    assert_eq!(rig.router.unlinked(b'B', &bind("")), Verdict::Drop);
    assert!(matches!(rig.router.unlinked(b'S', &sync()), Verdict::Answer(_)));
    assert_eq!(rig.router.unlinked(b'Q', &query("select 1")), Verdict::NeedServer, "once");
}

#[test]
fn settings_that_could_not_be_read_back_yet_are_asked_for_again() {
    let mut rig = Rig::new(10);
    rig.client(&[query("set work_mem = '64kB'")]);
    rig.serve(&[done("SET"), ready(b'I')]);
    assert!(rig.router.take_settings_dirty());
    assert!(!rig.router.settings_dirty());
    rig.router.settings_unread();
    assert!(rig.router.take_settings_dirty(), "the next release reads them");
}

#[test]
fn a_server_lost_with_a_commit_or_an_autocommit_write_in_flight_says_the_outcome_is_unknown() {
    let lose = |rig: &mut Rig| {
        let tracker = std::mem::take(&mut rig.servers[0].tracker);
        tokens(&rig.router.server_lost(tracker, "lost", &rig.registry))
    };
    let mut rig = Rig::new(10);
    rig.client(&[query("insert into t values (1)")]);
    assert_eq!(lose(&mut rig), strs(&["E 08007", "Z"]), "an autocommit write may have committed");

    let mut rig = Rig::new(10);
    rig.client(&[query("select * from t")]);
    assert_eq!(lose(&mut rig), strs(&["E 08006", "Z"]), "a read did nothing");

    let mut rig = Rig::new(10);
    rig.client(&[query("begin; insert into t values (1)")]);
    rig.serve(&[done("BEGIN"), done("INSERT 0 1"), ready(b'T')]);
    rig.client(&[query("insert into t values (2)")]);
    assert_eq!(lose(&mut rig), strs(&["E 08006", "Z"]), "inside a transaction nothing commits before COMMIT");

    let mut rig = Rig::new(10);
    rig.client(&[query("begin")]);
    rig.serve(&[done("BEGIN"), ready(b'T')]);
    rig.client(&[query("commit")]);
    assert_eq!(lose(&mut rig), strs(&["E 08007", "Z"]));

    // The extended protocol: the statement's text comes from its Parse.
    let mut rig = Rig::new(10);
    prepared_once(&mut rig, "ins", "insert into t values ($1)");
    rig.client(&[bind("ins"), execute(), sync()]);
    assert_eq!(lose(&mut rig), strs(&["E 08007", "Z"]));
    // Once its unit has ended, a write is no longer in flight.
    let mut rig = Rig::new(10);
    prepared_once(&mut rig, "ins", "insert into t values ($1)");
    rig.client(&[query("select 1")]);
    assert_eq!(lose(&mut rig), strs(&["E 08006", "Z"]));
}

/// A simple Query's text is read for a commit only when its server is lost before the answer (issue 32):
/// the kept text must be read when another Query follows it, and dropped once everything is answered.
#[test]
fn a_query_s_text_read_only_at_a_loss_still_counts_every_query_in_flight_and_no_answered_one() {
    let lose = |rig: &mut Rig| {
        let tracker = std::mem::take(&mut rig.servers[0].tracker);
        tokens(&rig.router.server_lost(tracker, "lost", &rig.registry))
    };
    // A pipeline: the write is followed by a read before either is answered.
    let mut rig = Rig::new(10);
    rig.client(&[query("insert into t values (1)"), query("select 1")]);
    assert_eq!(lose(&mut rig), strs(&["E 08007", "Z", "E 08007", "Z"]), "the write is still in flight");
    // The same, the write answered first: only the read is in flight.
    let mut rig = Rig::new(10);
    rig.client(&[query("insert into t values (1)")]);
    rig.serve(&[done("INSERT 0 1"), ready(b'I')]);
    rig.client(&[query("select 1")]);
    assert_eq!(lose(&mut rig), strs(&["E 08006", "Z"]), "the answered write is not in flight");
    // A write inside a transaction block, then its COMMIT, both in flight: the COMMIT, the one kept unread,
    // is read at the loss.
    let mut rig = Rig::new(10);
    rig.client(&[query("begin")]);
    rig.serve(&[done("BEGIN"), ready(b'T')]);
    rig.client(&[query("insert into t values (1)"), query("commit")]);
    assert_eq!(lose(&mut rig), strs(&["E 08007", "Z", "E 08007", "Z"]), "the COMMIT is in flight");
}
