use super::*;

#[test]
fn text_that_is_not_utf8_is_read_all_the_same() {
    // A client whose encoding is LATIN1 sends bytes that are not UTF-8; what pins is still ASCII.
    let latin1: &[u8] = b"select pg_advisory_lock(1), 'caf\xe9'";
    assert_eq!(scan(latin1).pin, Some(PinReason::AdvisoryLock));
    assert!(may_commit(b"insert into t values ('\xe9')".as_slice(), false));
    assert_eq!(deallocate_name(b"deallocate s\xe9".as_slice()), None);
}

#[test]
fn what_may_commit_if_the_connection_is_lost_mid_flight() {
    for (sql, in_tx, want) in [
        ("select * from t", false, false),
        ("insert into t values (1)", false, true),
        ("insert into t values (1)", true, false),
        ("commit", true, true),
        ("END", true, true),
        ("begin; insert into t values (1); commit", false, true),
        ("begin; insert into t values (1)", false, false),
        ("rollback", true, false),
        ("prepare transaction 'x'", true, true),
        ("explain select 1", false, false),
        ("explain analyze delete from t", false, true),
        ("/* hi */ select 1; -- insert\n", false, false),
        ("select ';insert'; select $$;insert$$", false, false),
        ("select 1; update t set v = 2", false, true),
        ("with x as (insert into t values (1) returning *) select * from x", false, true),
        // Text it cannot follow counts as a write, unless it is one statement: PostgreSQL refuses it whole.
        ("select 'unterminated; insert into t values (1)", false, true),
        ("select 'unterminated", false, false),
        ("select 1 -- a comment; with a semicolon\n", false, false),
        ("select 1; -- insert\n;  ", false, false),
        ("  ;; select 1 ;; ", false, false),
        ("update t set v = 1;", false, true),
        ("", false, false),
        // The first word is matched whole and in either case.
        ("SELECT 1", false, false),
        ("selects from t", false, true),
        ("sel", false, true),
        ("ROLLBACK PREPARED 'x'", false, true),
        ("rollback prepared 'x'", true, false),
        ("Savepoint a", false, false),
        ("DEALLOCATE s", false, false),
        ("deallocated", false, true),
        ("START TRANSACTION; insert into t values (1)", false, false),
        ("Commit", false, true),
        ("unlisten *", false, false),
        ("truncate t", false, true),
        ("set_config_x()", false, true),
    ] {
        assert_eq!(may_commit(sql, in_tx), want, "{sql:?} in a transaction: {in_tx}");
    }
}

/// The scan as it was before it looked eight bytes at a time: every byte, a word start at a time.
fn scan_bytewise(b: &[u8]) -> SqlFacts {
    let mut found = Found::default();
    for i in 0..b.len() {
        if WORD[usize::from(b[i])] && (i == 0 || !WORD[usize::from(b[i - 1])]) {
            found.word_start(b, i);
        }
    }
    found.finish(b)
}

#[test]
fn eight_bytes_at_a_time_finds_what_every_byte_would() {
    // Each keyword at every offset within a chunk, after bytes that do and do not end a word, in both
    // cases, cut short, and at the very end of the text.
    let pieces: [&[u8]; 12] = [
        b"pg_advisory_lock(1)",
        b"PG_TRY_ADVISORY_LOCK(1)",
        b"set_config('a', 'b', false)",
        b"with hold for select 1",
        b"WITH  HOLD",
        b"create temp table t (a int)",
        b"CREATE LOCAL TEMPORARY TABLE t (a int)",
        b"into temp t",
        b"create temp table t (a int) on commit drop",
        b"pg_advisory_lock",
        b"set_confi",
        b"wit",
    ];
    let befores: [&[u8]; 8] = [b"", b" ", b"x", b"_", b"$", b"1", b"(", b"\xe9"];
    let mut checked = 0;
    for piece in pieces {
        for before in befores {
            for pad in 0..64 {
                for upper in [false, true] {
                    let mut text = b"select ".repeat(pad / 7);
                    text.extend(std::iter::repeat_n(b' ', pad % 7));
                    text.extend_from_slice(before);
                    text.extend_from_slice(piece);
                    if upper {
                        text.make_ascii_uppercase();
                    }
                    for end in [text.len(), text.len().saturating_sub(3)] {
                        let t = &text[..end];
                        assert_eq!(scan(t), scan_bytewise(t), "{:?}", String::from_utf8_lossy(t));
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 12 * 8 * 64 * 2 * 2);
    // Bytes whose low five bits match a first letter's but are not letters are not taken for one.
    assert_eq!(scan(b"\x10g_advisory_lock(1)".as_slice()), SqlFacts::default());
    assert_eq!(scan(b"0g_advisory_lock(1)".as_slice()), SqlFacts::default());
}

#[test]
fn texts_made_of_keywords_and_their_neighbours_read_as_every_byte_would() {
    // Statements pieced together at random (a fixed seed, a bounded count) from the keywords, near
    // misses and the bytes around words: the marks two and four bytes after a keyword's start must
    // lead to every keyword the byte-by-byte reading finds, wherever chunks begin and end.
    let pieces: [&[u8]; 24] = [
        b"pg_advisory_lock(",
        b"pg_try_advisory_lock_shared(",
        b"pg_advisory_xact_lock(",
        b"set_config(",
        b"with",
        b"hold",
        b"without",
        b"create",
        b"into",
        b"temp",
        b"temporary",
        b"global",
        b"local",
        b"on commit drop",
        b"select",
        b"from",
        b"where",
        b"pgbench_accounts",
        b"t",
        b"_",
        b" ",
        b"  ",
        b"\n",
        b"(1);",
    ];
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut pinned = 0;
    for _ in 0..20_000 {
        let mut text = Vec::new();
        for _ in 0..next(12) {
            text.extend_from_slice(pieces[next(pieces.len())]);
            if next(3) == 0 {
                text.push(b' ');
            }
        }
        if next(2) == 0 {
            text.make_ascii_uppercase();
        }
        let want = scan_bytewise(&text);
        pinned += usize::from(want.pin.is_some());
        assert_eq!(scan(&text), want, "{:?}", String::from_utf8_lossy(&text));
    }
    assert!(pinned > 1_000, "the texts pin often enough to mean something: {pinned}");
}

fn pin(sql: &str) -> Option<PinReason> {
    scan(sql).pin
}

#[test]
fn session_state_is_spotted() {
    assert_eq!(pin("SELECT pg_advisory_lock(42)"), Some(PinReason::AdvisoryLock));
    assert_eq!(pin("select PG_TRY_ADVISORY_LOCK_SHARED(1)"), Some(PinReason::AdvisoryLock));
    assert_eq!(pin("create temp table x (a int)"), Some(PinReason::TempObject));
    assert_eq!(pin("CREATE GLOBAL TEMPORARY TABLE x (a int)"), Some(PinReason::TempObject));
    assert_eq!(pin("select * into temp t2 from t"), Some(PinReason::TempObject));
    assert_eq!(pin("DECLARE c CURSOR WITH HOLD FOR SELECT 1"), Some(PinReason::HoldCursor));
}

#[test]
fn transaction_scoped_state_does_not_pin() {
    assert_eq!(pin("select pg_advisory_xact_lock(42)"), None);
    assert_eq!(pin("create temp table x (a int) on commit drop"), None);
    assert_eq!(pin("DECLARE c CURSOR WITHOUT HOLD FOR SELECT 1"), None);
    assert_eq!(pin("with held as (select 1) select * from held"), None);
    assert_eq!(pin("create table temperatures (a int)"), None);
    assert_eq!(pin("SET LOCAL statement_timeout = '1s'"), None);
    assert_eq!(pin("update t set v = 'temp' where id = 1"), None);
}

#[test]
fn set_config_is_noticed() {
    assert!(scan("SELECT set_config('jit', 'off', false)").set_config);
    assert!(!scan("select 1").set_config);
}

#[test]
fn deallocate_names() {
    assert_eq!(deallocate_name("DEALLOCATE _pg3_3"), Some("_pg3_3".into()));
    assert_eq!(deallocate_name("deallocate prepare S_1;"), Some("s_1".into()));
    assert_eq!(deallocate_name("DEALLOCATE \"S_1\""), Some("S_1".into()));
    assert_eq!(deallocate_name("DEALLOCATE ALL"), None);
    assert_eq!(deallocate_name("DEALLOCATEx"), None);
    assert_eq!(deallocate_name("DEALLOCATE a; select 1"), None);
    assert_eq!(deallocate_name("select 1"), None);
}

#[test]
fn tags_that_pin() {
    assert_eq!(PinReason::from_tag(b"LISTEN"), Some(PinReason::Listen));
    assert_eq!(PinReason::from_tag(b"PREPARE"), Some(PinReason::SqlPrepare));
    assert_eq!(PinReason::from_tag(b"SELECT 1"), None);
}
