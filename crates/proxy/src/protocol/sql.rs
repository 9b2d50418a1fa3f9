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
mod tests;
