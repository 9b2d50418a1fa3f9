//! Session state the router notes: pins, settings to read back, the fast path, answered units.

use super::*;

#[test]
fn listen_and_other_session_state_pin_the_client_and_the_pin_is_reported_once() {
    let mut rig = Rig::new(10);
    rig.client(&[query("LISTEN jobs")]);
    rig.serve(&[done("LISTEN"), ready(b'I')]);
    assert_eq!(rig.router.pin(), Some(PinReason::Listen));
    assert_eq!(rig.router.pin_to_report(), Some(PinReason::Listen));
    assert_eq!(rig.router.pin_to_report(), None);
}

#[test]
fn set_and_set_config_mark_the_settings_for_reading_back() {
    let mut rig = Rig::new(10);
    rig.client(&[query("SET TimeZone = 'UTC'")]);
    rig.serve(&[done("SET"), ready(b'I')]);
    assert!(rig.router.take_settings_dirty() && !rig.router.take_settings_dirty());
    rig.client(&[parse("", "select set_config('search_path', 'x', false)")]);
    assert!(rig.router.settings_dirty());
}

#[test]
fn with_tracking_off_names_go_through_unchanged() {
    let mut rig = Rig::untracked();
    assert_eq!(
        rig.client(&[parse("s1", "select 1"), bind("s1"), close(b'S', "s1"), sync()]),
        strs(&["P s1", "B s1", "CS s1", "S"])
    );
    assert!(!rig.router.passes(b'Q') && rig.router.passes(b'P'), "only SQL is read");
}

#[test]
fn only_uninspected_messages_in_normal_mode_take_the_fast_path() {
    let mut rig = Rig::new(10);
    assert!(rig.router.passes(b'E') && rig.router.passes(b'S') && rig.router.passes(b'd'));
    assert!(
        !rig.router.passes(b'P') && !rig.router.passes(b'B') && !rig.router.passes(b'Q') && !rig.router.passes(b'D')
    );
    rig.router.answer_unit(b'B', Bytes::from(error("53300", "busy")));
    assert!(!rig.router.passes(b'E'), "skipping: every message goes through the router");
}

#[test]
fn answering_a_unit_ends_a_simple_query_at_once_and_an_extended_one_at_its_sync() {
    let mut rig = Rig::new(10);
    let Verdict::Answer(q) = rig.router.answer_unit(b'Q', Bytes::from(error("53300", "busy"))) else { panic!() };
    assert_eq!(tokens(&q), strs(&["E 53300", "Z"]));
    assert_eq!(rig.router.mode(), Mode::Normal);
    let Verdict::Answer(p) = rig.router.answer_unit(b'P', Bytes::from(error("53300", "busy"))) else { panic!() };
    assert_eq!(tokens(&p), strs(&["E 53300"]));
    assert_eq!(rig.router.mode(), Mode::SkipToSync);
}

#[test]
fn a_server_status_in_a_transaction_keeps_the_link_until_idle() {
    let mut rig = Rig::new(10);
    rig.client(&[query("begin; select 1")]);
    rig.serve(&[done("BEGIN"), rows_described(), row(), done("SELECT 1"), ready(b'T')]);
    assert!(!rig.servers[0].tracker.may_release());
    assert_eq!(rig.servers[0].tracker.status(), TxStatus::InTransaction);
    rig.client(&[query("commit")]);
    rig.serve(&[done("COMMIT"), ready(b'I')]);
    assert!(rig.servers[0].tracker.may_release());
}

#[test]
fn a_query_that_is_not_utf8_is_read_for_state_all_the_same() {
    // A LATIN1 client's advisory lock, with an accented literal in the same statement.
    let mut rig = Rig::new(10);
    let mut body = b"select pg_advisory_lock(1), 'caf\xe9'".to_vec();
    body.push(0);
    assert_eq!(rig.client(&[pgmux_testkit::wire::msg(b'Q', &body)]), strs(&["Q"]));
    assert_eq!(rig.router.pin(), Some(PinReason::AdvisoryLock));
}
