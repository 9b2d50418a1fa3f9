//! What makes a client's router forget a statement name, or take one back: DEALLOCATE and DISCARD ALL, and
//! an error that skips a pipeline's messages up to its Sync.

use super::*;

// ---- DEALLOCATE and DISCARD ----

#[test]
fn deallocate_of_a_client_name_needs_no_server() {
    let mut rig = Rig::new(10);
    prepared_once(&mut rig, "s1", "select 1");
    let Verdict::Answer(reply) = rig.router.unlinked(b'Q', &query("DEALLOCATE s1")) else { panic!("answered") };
    assert_eq!(tokens(&reply), strs(&["C", "Z"]));
    assert!(!rig.named("s1"));
    assert_eq!(rig.router.unlinked(b'Q', &query("DEALLOCATE s1")), Verdict::NeedServer, "no longer the client's");
}

#[test]
fn deallocate_inside_a_transaction_is_answered_in_turn_with_the_transaction_status() {
    let mut rig = Rig::new(10);
    prepared_once(&mut rig, "s1", "select 1");
    rig.client(&[query("begin")]);
    rig.serve(&[done("BEGIN"), ready(b'T')]);
    assert_eq!(rig.client(&[query("deallocate s1")]), Vec::<String>::new());
    let seen = rig.serve(&[]);
    assert_eq!(seen, strs(&["*C", "*Z"]));
}

#[test]
fn deallocate_all_and_discard_all_forget_every_name_and_the_server_statements() {
    let mut rig = Rig::new(10);
    prepared_once(&mut rig, "s1", "select 1");
    assert_eq!(rig.client(&[query("DEALLOCATE ALL")]), strs(&["Q"]));
    rig.serve(&[done("DEALLOCATE ALL"), ready(b'I')]);
    assert!(!rig.named("s1") && !rig.server_has(0, "select 1"));

    prepared_once(&mut rig, "s2", "select 2");
    rig.client(&[query("select pg_advisory_lock(1)")]);
    assert!(rig.router.pin().is_some());
    rig.client(&[query("DISCARD ALL")]);
    rig.serve(&[rows_described(), row(), done("SELECT 1"), ready(b'I'), done("DISCARD ALL"), ready(b'I')]);
    assert!(!rig.named("s2") && !rig.server_has(0, "select 2"));
    assert_eq!(rig.router.pin(), None, "DISCARD ALL released the lock");
    assert!(rig.router.take_settings_dirty(), "and reset every setting");
}

// ---- Errors in pipelines ----

#[test]
fn an_error_in_a_pipeline_skips_to_the_sync_and_undoes_the_names_it_skipped() {
    let mut rig = Rig::new(10);
    let sent = rig.client(&[parse("s1", "select 1/0"), bind("s1"), execute(), parse("s2", "select 2"), sync()]);
    assert_eq!(sent, strs(&["P pgmux_1", "B pgmux_1", "E", "P pgmux_2", "S"]));
    let seen = rig.serve(&[parsed(), bound(), error("22012", "division by zero"), ready(b'E')]);
    assert_eq!(seen, strs(&["1", "2", "E", "Z"]));
    assert!(rig.named("s1"), "s1 was parsed before the error");
    assert!(!rig.named("s2") && !rig.server_has(0, "select 2"), "s2's Parse was skipped");
    assert!(rig.servers[0].tracker.nothing_owed());
}

#[test]
fn an_error_for_an_injected_parse_reaches_the_client_and_the_statement_is_not_counted_on_the_server() {
    let mut rig = Rig::new(10);
    prepared_once(&mut rig, "s1", "select * from t");
    rig.on = 1;
    rig.client(&[bind("s1"), execute(), sync()]);
    let seen = rig.serve(&[error("42P01", "relation \"t\" does not exist"), ready(b'I')]);
    assert_eq!(seen, strs(&["E", "Z"]));
    assert!(!rig.server_has(1, "select * from t"));
}

#[test]
fn a_close_pgmux_answered_is_undone_when_an_earlier_error_skips_it() {
    let mut rig = Rig::new(10);
    prepared_once(&mut rig, "s1", "select 1");
    rig.client(&[bind("nope"), close(b'S', "s1"), sync()]);
    let seen = rig.serve(&[error("26000", "nope"), ready(b'I')]);
    assert_eq!(seen, strs(&["E", "Z"]), "the skipped Close gets no CloseComplete");
    assert!(rig.named("s1"), "the name is back");
}

#[test]
fn cached_plan_must_not_change_result_type_invalidates_the_statement_once_everywhere() {
    let mut rig = Rig::new(10);
    prepared_once(&mut rig, "s1", "select * from t");
    rig.client(&[bind("s1"), execute(), sync()]);
    let seen = rig.serve(&[error("0A000", "cached plan must not change result type"), ready(b'I')]);
    assert_eq!(seen, strs(&["E", "Z"]), "the client sees PostgreSQL's own error, once");
    // The next use prepares the statement again under a new name, on this server and any other.
    assert_eq!(rig.client(&[bind("s1"), execute(), sync()]), strs(&["P pgmux_2", "B pgmux_2", "E", "S"]));
    assert_eq!(rig.serve(&[parsed(), bound(), done("SELECT 1"), ready(b'I')]), strs(&["2", "C", "Z"]));
    let mut other = rig.other_client();
    std::mem::swap(&mut rig.router, &mut other);
    assert_eq!(rig.client(&[parse("x", "select * from t"), sync()]), strs(&["S"]), "the new one is shared");
}
