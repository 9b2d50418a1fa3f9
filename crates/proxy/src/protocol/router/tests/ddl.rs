//! Prepared statements across DDL: the check before a Bind on a copy prepared anew, and PostgreSQL's
//! 0A000 for a statement whose result columns changed.

use super::*;

/// A RowDescription of int4 columns with these names (from table 16384, in text).
fn columns(names: &[&str]) -> Vec<u8> {
    let mut body = (names.len() as u16).to_be_bytes().to_vec();
    for (i, name) in names.iter().enumerate() {
        body.extend(cstr(name));
        body.extend_from_slice(&16384i32.to_be_bytes());
        body.extend_from_slice(&(i as i16 + 1).to_be_bytes());
        body.extend_from_slice(&23i32.to_be_bytes());
        body.extend_from_slice(&4i16.to_be_bytes());
        body.extend_from_slice(&(-1i32).to_be_bytes());
        body.extend_from_slice(&0i16.to_be_bytes());
    }
    msg(b'T', &body)
}

const STAR: &str = "select * from t";

/// The client prepares `s1` as `select * from t` the way drivers do (Parse, Describe, Sync) on server 0,
/// sees one column `a`, and runs it once.
fn described_once(rig: &mut Rig) {
    assert_eq!(rig.client(&[parse("s1", STAR), describe(b'S', "s1"), sync()]), strs(&["P pgmux_1", "DS pgmux_1", "S"]));
    assert_eq!(rig.serve(&[parsed(), params_described(), columns(&["a"]), ready(b'I')]), strs(&["1", "t", "T", "Z"]));
    assert_eq!(rig.client(&[bind("s1"), execute(), sync()]), strs(&["B pgmux_1", "E", "S"]));
    rig.serve(&[bound(), row(), done("SELECT 1"), ready(b'I')]);
}

fn use_s1() -> [Vec<u8>; 3] {
    [bind("s1"), execute(), sync()]
}

#[test]
fn a_statement_prepared_anew_for_a_client_that_knows_its_shape_is_described_before_its_bind_goes() {
    let mut rig = Rig::new(10);
    described_once(&mut rig);
    rig.on = 1;
    assert_eq!(rig.client(&use_s1()), strs(&["P pgmux_1", "DS pgmux_1", "H"]), "the Bind waits");
    assert!(rig.router.holding() && !rig.router.passes(b'E'), "and nothing takes the fast path");
    assert_eq!(rig.serve(&[parsed(), params_described()]), Vec::<String>::new());
    assert!(rig.router.holding(), "until the RowDescription");
    assert_eq!(rig.serve(&[columns(&["a"])]), Vec::<String>::new(), "the client asked none of it");
    assert!(!rig.router.holding());
    assert_eq!(rig.sent(), strs(&["B pgmux_1", "E", "S"]), "the same columns: the Bind and the rest go on");
    assert_eq!(rig.serve(&[bound(), row(), done("SELECT 1"), ready(b'I')]), strs(&["2", "D", "C", "Z"]));
    assert!(rig.servers[1].tracker.may_release());
    // Once per statement and server: the next use goes straight through.
    assert_eq!(rig.client(&use_s1()), strs(&["B pgmux_1", "E", "S"]));
}

#[test]
fn after_ddl_a_copy_prepared_anew_that_returns_other_columns_gets_0a000_in_the_binds_turn_and_nothing_runs() {
    let mut rig = Rig::new(10);
    described_once(&mut rig);
    rig.on = 1;
    rig.client(&use_s1());
    // ALTER TABLE t ADD COLUMN b happened: the new copy returns two columns. The client gets PostgreSQL's
    // error at once, in the Bind's turn.
    assert_eq!(rig.serve(&[parsed(), params_described(), columns(&["a", "b"])]), strs(&["*E 0A000"]));
    assert_eq!(rig.sent(), strs(&["P pgmux_failed", "S"]), "no Bind, no Execute: a failing Parse, then the Sync");
    assert_eq!(rig.router.mode(), Mode::Normal, "the Sync ended the unit");
    let seen = rig.serve(&[error("42601", "syntax error at or near \"pgmux\""), ready(b'I')]);
    assert_eq!(seen, strs(&["Z"]), "the syntax error pgmux asked for is not seen");
    assert!(rig.servers[1].tracker.may_release());
    assert_ne!(rig.registry.intern(&parse_key(STAR)).id, 1, "a new statement for whoever prepares the text next");
}

#[test]
fn a_stale_statement_fails_every_use_until_the_client_prepares_it_again_as_in_postgresql() {
    let mut rig = Rig::new(10);
    described_once(&mut rig);
    // On the server that had it, PostgreSQL says so itself.
    rig.client(&use_s1());
    let seen = rig.serve(&[error("0A000", "cached plan must not change result type"), ready(b'I')]);
    assert_eq!(seen, strs(&["E", "Z"]));
    // Used again: the statement is renewed, and the new one checked against what the client saw.
    assert_eq!(rig.client(&use_s1()), strs(&["P pgmux_2", "DS pgmux_2", "H"]));
    assert_eq!(rig.serve(&[parsed(), params_described(), columns(&["a", "b"])]), strs(&["*E 0A000"]));
    assert_eq!(rig.sent(), strs(&["P pgmux_failed", "S"]));
    assert_eq!(rig.serve(&[error("42601", "syntax error"), ready(b'I')]), strs(&["Z"]));
    // Again: that copy is known to differ now, so no round trip.
    assert_eq!(rig.client(&use_s1()), strs(&["P pgmux_failed", "S"]));
    assert_eq!(rig.serve(&[error("42601", "syntax error"), ready(b'I')]), strs(&["*E 0A000", "Z"]));
    // On the other server, its own copy is checked.
    rig.on = 1;
    assert_eq!(rig.client(&use_s1()), strs(&["P pgmux_2", "DS pgmux_2", "H"]));
    assert_eq!(rig.serve(&[parsed(), params_described(), columns(&["a", "b"])]), strs(&["*E 0A000"]));
    assert_eq!(rig.sent(), strs(&["P pgmux_failed", "S"]));
    rig.serve(&[error("42601", "syntax error"), ready(b'I')]);
    // The driver prepares it again (Close, Parse, Describe) and sees the new column.
    rig.on = 0;
    let sent = rig.client(&[close(b'S', "s1"), parse("s1", STAR), describe(b'S', "s1"), sync()]);
    assert_eq!(sent, strs(&["DS pgmux_2", "S"]), "the server has the new statement: no Parse needed");
    let seen = rig.serve(&[params_described(), columns(&["a", "b"]), ready(b'I')]);
    assert_eq!(seen, strs(&["*3", "*1", "t", "T", "Z"]));
    assert_eq!(rig.client(&use_s1()), strs(&["B pgmux_2", "E", "S"]));
    rig.serve(&[bound(), row(), done("SELECT 1"), ready(b'I')]);
    rig.on = 1;
    assert_eq!(rig.client(&use_s1()), strs(&["B pgmux_2", "E", "S"]), "this server's copy returns the same");
}

#[test]
fn a_stale_describe_gets_its_parameter_description_then_0a000_as_in_postgresql() {
    let mut rig = Rig::new(10);
    described_once(&mut rig);
    rig.on = 1;
    assert_eq!(rig.client(&[describe(b'S', "s1"), sync()]), strs(&["P pgmux_1", "DS pgmux_1", "H"]));
    assert!(rig.router.holding());
    assert_eq!(rig.serve(&[parsed(), params_described(), columns(&["a", "b"])]), strs(&["t", "*E 0A000"]));
    assert_eq!(rig.sent(), strs(&["P pgmux_failed", "S"]));
    assert_eq!(rig.serve(&[error("42601", "syntax error"), ready(b'I')]), strs(&["Z"]));
    // Where it still returns what the client saw, the client's Describe is the check and sees the answer.
    let mut rig = Rig::new(10);
    described_once(&mut rig);
    rig.on = 1;
    rig.client(&[describe(b'S', "s1"), bind("s1"), execute(), sync()]);
    assert_eq!(rig.serve(&[parsed(), params_described(), columns(&["a"])]), strs(&["t", "T"]));
    assert_eq!(rig.sent(), strs(&["B pgmux_1", "E", "S"]));
}

#[test]
fn a_check_that_fails_on_the_server_ends_the_unit_with_the_servers_error() {
    let mut rig = Rig::new(10);
    described_once(&mut rig);
    rig.on = 1;
    rig.client(&use_s1());
    // DROP TABLE t: PostgreSQL would have said the same to the Bind.
    let seen = rig.serve(&[error("42P01", "relation \"t\" does not exist")]);
    assert_eq!(seen, strs(&["E"]));
    assert!(!rig.router.holding());
    assert_eq!(rig.sent(), strs(&["S"]), "the held Bind and the Execute are skipped, the Sync goes");
    assert_eq!(rig.serve(&[ready(b'I')]), strs(&["Z"]));
    assert!(!rig.server_has(1, STAR) && rig.servers[1].tracker.may_release());
}

#[test]
fn inside_a_transaction_the_refusal_fails_the_transaction_as_postgresql_would() {
    let mut rig = Rig::new(10);
    described_once(&mut rig);
    rig.client(&use_s1());
    rig.serve(&[error("0A000", "cached plan must not change result type"), ready(b'I')]);
    rig.client(&use_s1());
    rig.serve(&[parsed(), params_described(), columns(&["a", "b"])]);
    rig.sent();
    rig.serve(&[error("42601", "syntax error"), ready(b'I')]);
    // Known stale now: refused without a round trip, inside BEGIN.
    rig.client(&[query("begin")]);
    rig.serve(&[done("BEGIN"), ready(b'T')]);
    assert_eq!(rig.client(&use_s1()), strs(&["P pgmux_failed", "S"]));
    assert_eq!(rig.serve(&[error("42601", "syntax error"), ready(b'E')]), strs(&["*E 0A000", "Z"]));
    assert_eq!(rig.servers[0].tracker.status(), TxStatus::Failed, "the server's transaction failed too");
    // In the failed transaction PostgreSQL refuses any Bind with 25P02 first: the server is asked.
    assert_eq!(rig.client(&use_s1()), strs(&["B pgmux_2", "E", "S"]));
    let seen = rig.serve(&[error("25P02", "current transaction is aborted"), ready(b'E')]);
    assert_eq!(seen, strs(&["E", "Z"]));
}

#[test]
fn a_server_lost_during_a_check_answers_the_open_unit() {
    let mut rig = Rig::new(10);
    described_once(&mut rig);
    rig.on = 1;
    rig.client(&use_s1());
    let tracker = std::mem::take(&mut rig.servers[1].tracker);
    let reply = rig.router.server_lost(tracker, "lost", &rig.registry);
    assert_eq!(tokens(&reply), strs(&["E 08006"]));
    assert!(!rig.router.holding());
    assert_eq!(rig.router.mode(), Mode::SkipToSync, "the Execute and Sync the client sent are answered without it");
    assert_eq!(rig.router.unlinked(b'E', &execute()), Verdict::Drop);
}

#[test]
fn a_clients_own_parse_is_never_held_and_what_it_returns_is_what_the_client_saw() {
    let mut rig = Rig::new(10);
    described_once(&mut rig);
    // Another client prepares the same text on a server that lacks it, and binds at once.
    let mut other = rig.other_client();
    std::mem::swap(&mut rig.router, &mut other);
    rig.on = 1;
    let sent = rig.client(&[parse("x", STAR), bind("x"), execute(), sync()]);
    assert_eq!(sent, strs(&["P pgmux_1", "DS pgmux_1", "B pgmux_1", "E", "S"]), "described on the way, not waited for");
    // After DDL, its copy returns two columns: that is what this client gets, as PostgreSQL would give it.
    let seen =
        rig.serve(&[parsed(), params_described(), columns(&["a", "b"]), bound(), row(), done("SELECT 1"), ready(b'I')]);
    assert_eq!(seen, strs(&["1", "2", "D", "C", "Z"]));
    // The first client, which saw one column, is refused on that server rather than given two.
    std::mem::swap(&mut rig.router, &mut other);
    assert_eq!(
        rig.client(&use_s1()),
        strs(&["P pgmux_2", "DS pgmux_2", "H"]),
        "renewed: a copy of the old was seen to differ"
    );
    rig.serve(&[parsed(), params_described(), columns(&["a", "b"])]);
    assert_eq!(rig.sent(), strs(&["P pgmux_failed", "S"]));
}

#[test]
fn pinned_clients_whose_same_text_names_their_own_tables_keep_their_own_shapes() {
    // Two sessions, each with its own temporary table `t` of another shape: the same text, two statements
    // that legitimately differ. Neither is refused, and the statement is not renewed back and forth.
    let mut rig = Rig::new(10);
    rig.client(&[query("create temp table t (a int)")]);
    rig.serve(&[done("CREATE TABLE"), ready(b'I')]);
    assert!(rig.router.pin().is_some());
    described_once(&mut rig);
    let mut other = rig.other_client();
    std::mem::swap(&mut rig.router, &mut other);
    rig.on = 1;
    rig.client(&[query("create temp table t (a int, b int)")]);
    rig.serve(&[done("CREATE TABLE"), ready(b'I')]);
    let sent = rig.client(&[parse("x", STAR), describe(b'S', "x"), bind("x"), execute(), sync()]);
    assert_eq!(sent, strs(&["P pgmux_1", "DS pgmux_1", "DS pgmux_1", "B pgmux_1", "E", "S"]));
    let two = columns(&["a", "b"]);
    let seen = rig.serve(&[
        parsed(),
        params_described(),
        two.clone(),
        params_described(),
        two,
        bound(),
        row(),
        done("SELECT 1"),
        ready(b'I'),
    ]);
    assert_eq!(seen, strs(&["1", "t", "T", "2", "D", "C", "Z"]));
    assert_eq!(rig.client(&[bind("x"), execute(), sync()]), strs(&["B pgmux_1", "E", "S"]));
    rig.serve(&[bound(), row(), done("SELECT 1"), ready(b'I')]);
    std::mem::swap(&mut rig.router, &mut other);
    rig.on = 0;
    assert_eq!(rig.client(&use_s1()), strs(&["B pgmux_1", "E", "S"]));
    assert_eq!(rig.registry.intern(&parse_key(STAR)).id, 1, "still the one statement");
}
