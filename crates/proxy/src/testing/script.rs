//! What the fake server answers to a statement: a reply a test scripted for text it contains, or what
//! PostgreSQL would say to a statement of that kind (a tag, a change of transaction status). Pure: no
//! socket, so a connection's loop only has to write what this decides.

use bytes::BytesMut;
use pgmux_proto::TxStatus;
use pgmux_proto::encode::{self, Column, ErrorMessage};

/// A scripted answer to a statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Rows of text columns (as many as the first row has), then `SELECT n`.
    Rows(Vec<Vec<&'static str>>),
    /// CommandComplete with this tag.
    Tag(&'static str),
    /// An ErrorResponse (ERROR) with this SQLSTATE: an open transaction is then failed.
    Error(&'static str),
    /// A FATAL ErrorResponse with this SQLSTATE, then the socket closes.
    Fatal(&'static str),
    /// The socket closes without a word.
    Close,
    /// FATAL with this code, then the socket resets, as a server's does when it exits with the client's
    /// bytes unread (a session ended while idle, as the query came).
    FatalUnread(&'static str),
    /// FATAL with this code and an end of file, then a reset: what pgmux's end of a server that closed
    /// before the query reached it holds once the query has come (its kernel answers the query's bytes
    /// with a reset, which pgmux reads after the end of file).
    FatalClosedFirst(&'static str),
    /// The first 20 KiB of a 64 KiB DataRow, then the socket closes.
    CutRow,
    /// Nothing until the test releases it ([`FakeServer::release`](super::FakeServer::release)), then the
    /// inner reply; a cancel with this connection's key meanwhile ends it with 57014 instead.
    Hold(Box<Reply>),
}

impl Reply {
    /// Rows of one column, a row per value.
    pub(crate) fn column(values: &[&'static str]) -> Reply {
        Reply::Rows(values.iter().map(|v| vec![*v]).collect())
    }

    /// `inner`, held until released or cancelled.
    pub(crate) fn held(inner: Reply) -> Reply {
        Reply::Hold(Box::new(inner))
    }
}

/// A scripted reply for statements whose text contains `pattern`, for the next `left` of them (or all).
#[derive(Clone, Debug)]
pub(super) struct Rule {
    pub(super) pattern: &'static str,
    pub(super) reply: Reply,
    pub(super) left: Option<usize>,
}

/// Takes the reply of the first rule that matches `sql` and still applies, counting it down.
pub(super) fn scripted(rules: &mut [Rule], sql: &str) -> Option<Reply> {
    let rule = rules.iter_mut().find(|r| sql.contains(r.pattern) && r.left != Some(0))?;
    if let Some(left) = &mut rule.left {
        *left -= 1;
    }
    Some(rule.reply.clone())
}

/// The statements of a simple Query (split at every `;`: the fake reads no quotes).
pub(super) fn statements(sql: &str) -> Vec<&str> {
    sql.split(';').map(str::trim).filter(|s| !s.is_empty()).collect()
}

/// What a statement with no scripted reply gets, and the transaction status after it, as PostgreSQL
/// would: transaction control moves the status, anything else in a failed transaction is refused.
pub(super) fn unscripted(sql: &str, status: TxStatus) -> (Reply, TxStatus) {
    let word = sql.split_whitespace().next().unwrap_or_default().to_ascii_uppercase();
    match (word.as_str(), status) {
        ("BEGIN" | "START", TxStatus::Idle) => (Reply::Tag("BEGIN"), TxStatus::InTransaction),
        ("COMMIT" | "END", TxStatus::Failed) => (Reply::Tag("ROLLBACK"), TxStatus::Idle),
        ("COMMIT" | "END", _) => (Reply::Tag("COMMIT"), TxStatus::Idle),
        ("ROLLBACK" | "ABORT", _) => (Reply::Tag("ROLLBACK"), TxStatus::Idle),
        (_, TxStatus::Failed) => (Reply::Error("25P02"), TxStatus::Failed),
        ("SELECT", _) => (Reply::Tag("SELECT 0"), status),
        ("INSERT", _) => (Reply::Tag("INSERT 0 1"), status),
        (other, _) => (Reply::Tag(tag_of(other)), status),
    }
}

/// The tag of a statement led by `word`, from a fixed list (a tag must outlive the reply).
fn tag_of(word: &str) -> &'static str {
    const TAGS: &[&str] =
        &["LISTEN", "UNLISTEN", "SET", "RESET", "UPDATE 1", "DELETE 1", "CREATE TABLE", "DISCARD ALL"];
    TAGS.iter().find(|t| t.split(' ').next() == Some(word)).copied().unwrap_or("DO")
}

/// The status after `reply` to a statement run in `status`: an error fails an open transaction.
pub(super) fn status_after(reply: &Reply, status: TxStatus) -> TxStatus {
    match (reply, status) {
        (Reply::Error(_), TxStatus::InTransaction) => TxStatus::Failed,
        _ => status,
    }
}

/// An ErrorResponse the fake sends.
pub(super) fn error(code: &str, fatal: bool) -> bytes::Bytes {
    let message = format!("error {code} from the fake server");
    if fatal {
        ErrorMessage::fatal(code.to_owned(), message).to_bytes()
    } else {
        ErrorMessage::error(code.to_owned(), message).to_bytes()
    }
}

/// The RowDescription of [`Reply::Rows`]: `columns` text columns.
pub(super) fn row_description(buf: &mut BytesMut, columns: usize) {
    let column = Column { name: "?column?", type_oid: 25, type_len: -1 };
    encode::row_description(buf, &vec![column; columns]);
}

/// The DataRows and tag of [`Reply::Rows`].
pub(super) fn rows(buf: &mut BytesMut, rows: &[Vec<&str>]) {
    for row in rows {
        let values: Vec<Option<&[u8]>> = row.iter().map(|v| Some(v.as_bytes())).collect();
        encode::data_row(buf, &values);
    }
    encode::command_complete(buf, &format!("SELECT {}", rows.len()));
}

/// The start of a DataRow that says 64 KiB and brings 20 KiB ([`Reply::CutRow`]).
pub(super) fn cut_row(buf: &mut BytesMut) {
    let start = buf.len();
    buf.extend_from_slice(b"D");
    buf.extend_from_slice(&(64u32 * 1024).to_be_bytes());
    buf.extend_from_slice(&1i16.to_be_bytes());
    buf.extend_from_slice(&(64i32 * 1024 - 10).to_be_bytes());
    buf.resize(start + 20 * 1024, b'x');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_control_moves_the_status_and_a_failed_transaction_refuses_the_rest() {
        assert_eq!(unscripted("begin", TxStatus::Idle), (Reply::Tag("BEGIN"), TxStatus::InTransaction));
        assert_eq!(unscripted("SELECT 1", TxStatus::Failed), (Reply::Error("25P02"), TxStatus::Failed));
        assert_eq!(unscripted("COMMIT", TxStatus::Failed), (Reply::Tag("ROLLBACK"), TxStatus::Idle));
        assert_eq!(unscripted("LISTEN x", TxStatus::Idle), (Reply::Tag("LISTEN"), TxStatus::Idle));
        assert_eq!(status_after(&Reply::Error("42P01"), TxStatus::InTransaction), TxStatus::Failed);
        assert_eq!(statements(" BEGIN; SELECT 1 ;; "), ["BEGIN", "SELECT 1"]);
    }

    #[test]
    fn a_rule_for_a_number_of_statements_runs_out() {
        let mut rules = vec![Rule { pattern: "INSERT", reply: Reply::Error("25006"), left: Some(1) }];
        assert_eq!(scripted(&mut rules, "INSERT INTO t VALUES (1)"), Some(Reply::Error("25006")));
        assert_eq!(scripted(&mut rules, "INSERT INTO t VALUES (1)"), None);
    }
}
