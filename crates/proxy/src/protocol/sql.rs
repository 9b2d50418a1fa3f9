//! The little SQL reading pgmux does: spotting session state that transaction pooling cannot carry (so that
//! the client is pinned to its server), `set_config` calls (so that the session's settings are read back),
//! and a lone `DEALLOCATE name` of a protocol-level statement. One pass over the text, no parser: what it
//! misses is listed in the README, and every match errs on the safe side (pinning).

use std::fmt;

/// Why a client keeps its server connection until it disconnects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinReason {
    /// `LISTEN`: notifications go to the server connection that listens.
    Listen,
    /// A session-level advisory lock.
    AdvisoryLock,
    /// A temporary table, sequence or view that outlives its transaction.
    TempObject,
    /// A cursor declared `WITH HOLD`.
    HoldCursor,
    /// SQL-level `PREPARE`.
    SqlPrepare,
    /// `LOAD` of a library.
    Load,
}

impl PinReason {
    /// Every reason, for metrics.
    pub const ALL: [PinReason; 6] = [
        PinReason::Listen,
        PinReason::AdvisoryLock,
        PinReason::TempObject,
        PinReason::HoldCursor,
        PinReason::SqlPrepare,
        PinReason::Load,
    ];

    /// The reason from a CommandComplete tag, for statements recognised by their tag.
    pub(crate) fn from_tag(tag: &[u8]) -> Option<PinReason> {
        match tag {
            b"LISTEN" => Some(PinReason::Listen),
            b"PREPARE" => Some(PinReason::SqlPrepare),
            b"LOAD" => Some(PinReason::Load),
            _ => None,
        }
    }
}

impl fmt::Display for PinReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PinReason::Listen => "LISTEN",
            PinReason::AdvisoryLock => "session advisory lock",
            PinReason::TempObject => "temporary object outliving its transaction",
            PinReason::HoldCursor => "WITH HOLD cursor",
            PinReason::SqlPrepare => "SQL PREPARE",
            PinReason::Load => "LOAD",
        })
    }
}

/// What a statement's text says (public for the micro-benchmarks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SqlFacts {
    /// Session state that pins.
    pub(crate) pin: Option<PinReason>,
    /// A `set_config` call: session settings may change without a SET tag.
    pub(crate) set_config: bool,
}

fn starts_with_ci(hay: &[u8], needle: &[u8]) -> bool {
    hay.len() >= needle.len() && hay[..needle.len()].eq_ignore_ascii_case(needle)
}

fn contains_ci(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle))
}

/// The next word (letters and underscores) at `at`, skipping whitespace; and where it ends.
fn word_after(hay: &[u8], mut at: usize) -> (&[u8], usize) {
    while at < hay.len() && hay[at].is_ascii_whitespace() {
        at += 1;
    }
    let start = at;
    while at < hay.len() && (hay[at].is_ascii_alphabetic() || hay[at] == b'_') {
        at += 1;
    }
    (&hay[start..at], at)
}

/// Bytes that may continue an identifier: a keyword is looked for only where a word starts.
const fn word_bytes() -> [bool; 256] {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        t[c] = b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80;
        c += 1;
    }
    t
}
static WORD: [bool; 256] = word_bytes();

/// Reads a statement's text for session state. It runs for every statement a client sends, so it looks
/// closer only where a keyword it knows may start. Each of them (`pg_[try_]advisory_lock`, `set_config`,
/// `with`, `into`, `create`) has a `t` or a `_` two bytes after its first letter, or a `t` four after
/// (`create`): those two bytes are found eight at a time (see [`marks`]), and only the word starts two
/// and four bytes before one are looked at. Two bytes to find rather than the five first letters, and
/// fewer places to look at: in the usual statement (`SELECT ... FROM ... WHERE ...`) none.
pub fn scan<S: AsRef<[u8]> + ?Sized>(sql: &S) -> SqlFacts {
    let b = sql.as_ref();
    let mut found = Found::default();
    let mut at = 0;
    let mut chunks = b.chunks_exact(8);
    for chunk in chunks.by_ref() {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        found.look_at(b, at, marks(u64::from_le_bytes(word)));
        at += 8;
    }
    // The last few bytes, padded with zeros (never a mark).
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut word = [0; 8];
        word[..tail.len()].copy_from_slice(tail);
        found.look_at(b, at, marks(u64::from_le_bytes(word)));
    }
    found.finish(b)
}

/// The high bit of each byte of `word` (eight bytes of text, the first in the low byte) that may be a `t`
/// (either case) or a `_`. A byte `c` is one when `c | 0x20` is `t` or `0x7f`: that maps exactly `t` and
/// `T`, and `_` and DEL (a DEL costs a look, nothing more). A zero byte of `c ^ mark` is found by the usual
/// borrow trick, which never misses one but may also flag a byte above a true zero; flagged bytes only
/// lead to word starts that are checked again, so that costs only time.
#[inline]
fn marks(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let lower = word | (ONES * 0x20);
    let mut flagged = 0;
    for mark in [b't', 0x7f] {
        let x = lower ^ (ONES * u64::from(mark));
        flagged |= x.wrapping_sub(ONES) & !x;
    }
    flagged & (ONES * 0x80)
}

/// What [`scan`] has found so far.
#[derive(Default)]
struct Found {
    facts: SqlFacts,
    /// A `TEMP[ORARY]` after `CREATE` or `INTO`: it pins unless the text says `ON COMMIT DROP`.
    temp: bool,
}

impl Found {
    /// What the whole text `b` says, once every word start has been looked at.
    fn finish(self, b: &[u8]) -> SqlFacts {
        let mut facts = self.facts;
        if self.temp && !contains_ci(b, b"on commit drop") && facts.pin.is_none() {
            facts.pin = Some(PinReason::TempObject);
        }
        facts
    }

    /// Looks at the bytes flagged in `flagged` (see [`marks`]) of the eight starting at `base`: a keyword
    /// may start two or four bytes before each.
    #[inline(always)] // called for every eight bytes: a call costs more than the common case's work
    fn look_at(&mut self, b: &[u8], base: usize, mut flagged: u64) {
        while flagged != 0 {
            let j = base + (flagged.trailing_zeros() / 8) as usize;
            flagged &= flagged - 1;
            for back in [2, 4] {
                if let Some(i) = j.checked_sub(back)
                    && (i == 0 || !WORD[usize::from(b[i - 1])])
                {
                    self.word_start(b, i);
                }
            }
        }
    }

    /// A word (or a byte that does not continue one) starts at `i`; nothing happens unless a keyword does.
    /// Looking at the same place twice finds the same, and the order does not matter: an advisory lock
    /// pins whatever else was found, a `WITH HOLD` only if nothing was.
    fn word_start(&mut self, b: &[u8], i: usize) {
        let Some(&first) = b.get(i) else { return };
        let rest = &b[i..];
        let facts = &mut self.facts;
        match first | 0x20 {
            b'p' if starts_with_ci(rest, b"pg_advisory_lock") || starts_with_ci(rest, b"pg_try_advisory_lock") => {
                facts.pin = Some(PinReason::AdvisoryLock);
            }
            b's' if starts_with_ci(rest, b"set_config") => facts.set_config = true,
            b'w' if starts_with_ci(rest, b"with") => {
                let (next, _) = word_after(b, i + 4);
                if next.eq_ignore_ascii_case(b"hold") && facts.pin.is_none() {
                    facts.pin = Some(PinReason::HoldCursor);
                }
            }
            // CREATE [GLOBAL | LOCAL] TEMP[ORARY] ..., SELECT ... INTO TEMP[ORARY] ...
            b'c' | b'i' if starts_with_ci(rest, b"create") || starts_with_ci(rest, b"into") => {
                let skip = if starts_with_ci(rest, b"create") { 6 } else { 4 };
                let (mut next, end) = word_after(b, i + skip);
                if next.eq_ignore_ascii_case(b"global") || next.eq_ignore_ascii_case(b"local") {
                    next = word_after(b, end).0;
                }
                if next.eq_ignore_ascii_case(b"temp") || next.eq_ignore_ascii_case(b"temporary") {
                    self.temp = true;
                }
            }
            _ => {}
        }
    }
}

/// The statement name of a lone `DEALLOCATE [PREPARE] name`, as PostgreSQL would fold it; `None` for
/// anything else (including `DEALLOCATE ALL`).
pub(crate) fn deallocate_name<S: AsRef<[u8]> + ?Sized>(sql: &S) -> Option<String> {
    if !starts_deallocate(sql.as_ref()) {
        return None;
    }
    let sql = std::str::from_utf8(sql.as_ref()).ok()?;
    let s = sql.trim().trim_end_matches(';').trim_end();
    let b = s.as_bytes();
    if !starts_with_ci(b, b"deallocate") {
        return None;
    }
    let mut rest = s[10..].trim_start();
    if rest.len() == s.len() - 10 {
        return None; // no space after the keyword
    }
    if starts_with_ci(rest.as_bytes(), b"prepare ") {
        rest = rest[8..].trim_start();
    }
    if let Some(quoted) = rest.strip_prefix('"') {
        let name = quoted.strip_suffix('"')?;
        return (!name.contains('"')).then(|| name.to_owned());
    }
    let ident = rest.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'$') && !rest.is_empty();
    (ident && !rest.eq_ignore_ascii_case("all")).then(|| rest.to_ascii_lowercase())
}

/// Whether a statement's text may begin with DEALLOCATE: looked at before anything else, since it runs for
/// every simple Query.
pub(crate) fn starts_deallocate(sql: &[u8]) -> bool {
    matches!(sql.iter().find(|c| !c.is_ascii_whitespace()), Some(b'd' | b'D'))
}

/// Bytes after which [`statement_end`] has to look closer: all others are skipped at once.
const fn special_bytes() -> [bool; 256] {
    let mut t = [false; 256];
    let specials = *b";'\"-/$";
    let mut i = 0;
    while i < specials.len() {
        t[specials[i] as usize] = true;
        i += 1;
    }
    t
}
static SPECIAL: [bool; 256] = special_bytes();

/// Skips whitespace, `;` and comments from `at`.
fn skip_blank(b: &[u8], mut at: usize) -> Option<usize> {
    loop {
        match b.get(at..)? {
            [c, ..] if c.is_ascii_whitespace() || *c == b';' => at += 1,
            [b'-', b'-', ..] => at = b[at..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| at + p),
            [b'/', b'*', ..] => at = at + 2 + find(&b[at + 2..], b"*/")? + 2,
            _ => return Some(at),
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Where the statement starting at `at` ends: just after its `;`, or the end of the text.
fn statement_end(b: &[u8], mut at: usize) -> Option<usize> {
    while at < b.len() {
        if !SPECIAL[usize::from(b[at])] {
            at += 1;
            continue;
        }
        match b[at] {
            b';' => return Some(at + 1),
            q @ (b'\'' | b'"') => at = at + 1 + b[at + 1..].iter().position(|&c| c == q)? + 1,
            b'-' if b.get(at + 1) == Some(&b'-') => at = skip_blank(b, at)?,
            b'/' if b.get(at + 1) == Some(&b'*') => at = skip_blank(b, at)?,
            b'$' => {
                // $tag$ ... $tag$ (a lone $1 parameter has no closing $ before a non-tag byte).
                let tag_len = b[at + 1..].iter().position(|&c| !(c.is_ascii_alphanumeric() || c == b'_'));
                match tag_len {
                    Some(n) if b.get(at + 1 + n) == Some(&b'$') && !b[at + 1].is_ascii_digit() => {
                        let tag = &b[at..at + n + 2];
                        at = at + tag.len() + find(&b[at + tag.len()..], tag)? + tag.len();
                    }
                    _ => at += 1,
                }
            }
            _ => at += 1,
        }
    }
    Some(at)
}

/// Whether running `sql` may make a durable change: a COMMIT (or END, `PREPARE TRANSACTION`), or a statement
/// that writes outside a transaction block (autocommit), given whether the session is in one. Used to tell
/// a client whose connection was lost mid-flight 08007 ("transaction resolution unknown") rather than 08006.
/// Reads (SELECT, SHOW, VALUES, ...) and transaction control are not writes; a SELECT that calls a function
/// which writes counts as a read. Text it cannot follow counts as a write. One pass, no allocation: it runs
/// for every statement a client sends.
pub(crate) fn may_commit<S: AsRef<[u8]> + ?Sized>(sql: &S, mut in_transaction: bool) -> bool {
    let b = sql.as_ref();
    // A lone statement (no `;` before the trailing ones, most statements): nothing follows it, so its text
    // is not walked to its end. An unterminated quote in it is then a syntax error, not a second statement.
    let body = b.iter().rposition(|c| !(c.is_ascii_whitespace() || *c == b';')).map_or(0, |p| p + 1);
    let lone = memchr::memchr(b';', &b[..body]).is_none();
    let mut at = 0;
    loop {
        let Some(start) = skip_blank(b, at) else { return true };
        if start >= b.len() {
            return false;
        }
        let (first, end) = word_after(b, start);
        let second = || word_after(b, end).0;
        match Leading::of(first) {
            Leading::Begin => in_transaction = true,
            Leading::Commit => return true,
            Leading::Prepare if second().eq_ignore_ascii_case(b"transaction") => return true,
            Leading::Rollback if !second().eq_ignore_ascii_case(b"prepared") => in_transaction = false,
            Leading::Explain if !in_transaction && second().eq_ignore_ascii_case(b"analyze") => return true,
            Leading::Read | Leading::Prepare | Leading::Explain => {}
            Leading::Rollback | Leading::Other if !in_transaction => return true,
            Leading::Rollback | Leading::Other => {}
        }
        if lone {
            return false;
        }
        let Some(next) = statement_end(b, start) else { return true };
        at = next;
    }
}

/// What a statement's first word makes of it, for [`may_commit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leading {
    /// `BEGIN`, `START TRANSACTION`.
    Begin,
    /// `COMMIT`, `END`.
    Commit,
    /// `ROLLBACK`, `ABORT` (`ROLLBACK PREPARED` is not the session's own transaction).
    Rollback,
    /// `PREPARE`: SQL-level (a read) or `PREPARE TRANSACTION` (a commit).
    Prepare,
    /// `EXPLAIN`: a read unless `EXPLAIN ANALYZE` runs the statement.
    Explain,
    /// Statements that never write: reads, cursors, settings, savepoints, listening.
    Read,
    /// Anything else may write.
    Other,
}

/// A word of up to eight letters (or underscores) as one number, in lower case: the first word of every
/// statement is compared with the keywords this way, eight bytes at once.
const fn key(word: &[u8]) -> u64 {
    let mut k = 0;
    let mut i = 0;
    while i < word.len() && i < 8 {
        // Letters map to lower case; `_` to 0x7f, which no letter maps to.
        k |= ((word[i] | 0x20) as u64) << (8 * i);
        i += 1;
    }
    k
}

impl Leading {
    fn of(first: &[u8]) -> Leading {
        const BEGIN: u64 = key(b"begin");
        const START: u64 = key(b"start");
        const COMMIT: u64 = key(b"commit");
        const END: u64 = key(b"end");
        const ROLLBACK: u64 = key(b"rollback");
        const ABORT: u64 = key(b"abort");
        const PREPARE: u64 = key(b"prepare");
        const EXPLAIN: u64 = key(b"explain");
        const SELECT: u64 = key(b"select");
        const SHOW: u64 = key(b"show");
        const VALUES: u64 = key(b"values");
        const TABLE: u64 = key(b"table");
        const FETCH: u64 = key(b"fetch");
        const MOVE: u64 = key(b"move");
        const DECLARE: u64 = key(b"declare");
        const CLOSE: u64 = key(b"close");
        const SET: u64 = key(b"set");
        const RESET: u64 = key(b"reset");
        const RELEASE: u64 = key(b"release");
        const DISCARD: u64 = key(b"discard");
        const LISTEN: u64 = key(b"listen");
        const UNLISTEN: u64 = key(b"unlisten");
        const LOCK: u64 = key(b"lock");
        if first.len() > 8 {
            let read = first.eq_ignore_ascii_case(b"savepoint") || first.eq_ignore_ascii_case(b"deallocate");
            return if read { Leading::Read } else { Leading::Other };
        }
        match key(first) {
            BEGIN | START => Leading::Begin,
            COMMIT | END => Leading::Commit,
            ROLLBACK | ABORT => Leading::Rollback,
            PREPARE => Leading::Prepare,
            EXPLAIN => Leading::Explain,
            SELECT | SHOW | VALUES | TABLE | FETCH | MOVE | DECLARE | CLOSE | SET | RESET | RELEASE | DISCARD
            | LISTEN | UNLISTEN | LOCK => Leading::Read,
            _ => Leading::Other,
        }
    }
}

#[cfg(test)]
mod tests {
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
}
