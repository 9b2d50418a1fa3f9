//! A SHOW result as the console sends it: RowDescription, one DataRow per row, CommandComplete `SHOW`
//! (the session adds ReadyForQuery). Every value goes in text format, as PgBouncer sends it.
//!
//! Types are what pgbouncer_exporter (lib/pq) and Datadog's check (psycopg2) read without trouble
//! (observability.md §1.4, §2.2): `text` for labels and timestamps, `int8` for counts, times and gauges
//! (in the commands the exporter and Datadog read, PgBouncer's `int4` columns are sent as `int8`, which
//! every client reads as the same integer and which cannot overflow). The commands only scripts read
//! (FDS, SOCKETS, MEM, DNS_*, PEERS) send PgBouncer's own types, `int4` and `bytea` included. A cell of
//! the wrong type for its column is refused when the row is added, so a wiring mistake is an error in a
//! test, not a scrape that breaks the exporter.

use std::borrow::Cow;
use std::fmt;

use bytes::BytesMut;
use pgmux_proto::encode::{self, Column};
use pgmux_proto::sqlstate;

use super::command::SessionSetting;

/// A column's PostgreSQL type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnType {
    /// `text` (OID 25): labels, names, and timestamps written `YYYY-MM-DD HH:MM:SS UTC`.
    Text,
    /// `int4` (OID 23).
    Int4,
    /// `int8` (OID 20).
    Int8,
    /// `numeric` (OID 1700), PgBouncer's type for its statistics.
    #[allow(dead_code, reason = "PgBouncer's numeric statistics, for the SHOW commands of many routes still to come")]
    Numeric,
    /// `bytea` (OID 17): SHOW FDS' SCRAM keys, which pgmux never shows (always NULL).
    Bytea,
}

impl ColumnType {
    pub const fn oid(self) -> u32 {
        match self {
            ColumnType::Text => 25,
            ColumnType::Int4 => 23,
            ColumnType::Int8 => 20,
            ColumnType::Numeric => 1700,
            ColumnType::Bytea => 17,
        }
    }

    /// `pg_type.typlen`.
    pub const fn typlen(self) -> i16 {
        match self {
            ColumnType::Text | ColumnType::Numeric | ColumnType::Bytea => -1,
            ColumnType::Int4 => 4,
            ColumnType::Int8 => 8,
        }
    }
}

/// One column of a SHOW: its name, type, and what it means (with its unit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnDef {
    pub name: &'static str,
    pub ty: ColumnType,
    pub doc: &'static str,
}

/// A `text` column.
pub const fn text(name: &'static str, doc: &'static str) -> ColumnDef {
    ColumnDef { name, ty: ColumnType::Text, doc }
}

/// An `int8` column.
pub const fn int8(name: &'static str, doc: &'static str) -> ColumnDef {
    ColumnDef { name, ty: ColumnType::Int8, doc }
}

/// An `int4` column.
pub const fn int4(name: &'static str, doc: &'static str) -> ColumnDef {
    ColumnDef { name, ty: ColumnType::Int4, doc }
}

/// A `bytea` column (NULL only: pgmux has no binary value to show).
pub const fn bytea(name: &'static str, doc: &'static str) -> ColumnDef {
    ColumnDef { name, ty: ColumnType::Bytea, doc }
}

/// One value of a row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cell<'a> {
    Null,
    Text(Cow<'a, str>),
    Int(i64),
}

impl<'a> From<&'a str> for Cell<'a> {
    fn from(s: &'a str) -> Self {
        Cell::Text(Cow::Borrowed(s))
    }
}

impl From<String> for Cell<'_> {
    fn from(s: String) -> Self {
        Cell::Text(Cow::Owned(s))
    }
}

impl From<i64> for Cell<'_> {
    fn from(v: i64) -> Self {
        Cell::Int(v)
    }
}

impl From<i32> for Cell<'_> {
    fn from(v: i32) -> Self {
        Cell::Int(v.into())
    }
}

/// Counters past `i64::MAX` (never in practice) are sent as `i64::MAX` rather than wrapping negative.
impl From<u64> for Cell<'_> {
    fn from(v: u64) -> Self {
        Cell::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<usize> for Cell<'_> {
    fn from(v: usize) -> Self {
        Cell::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<u32> for Cell<'_> {
    fn from(v: u32) -> Self {
        Cell::Int(v.into())
    }
}

impl From<u16> for Cell<'_> {
    fn from(v: u16) -> Self {
        Cell::Int(v.into())
    }
}

/// PgBouncer's booleans in text columns (`changeable`, SHOW STATE): `yes` / `no`.
impl From<bool> for Cell<'_> {
    fn from(v: bool) -> Self {
        Cell::Text(Cow::Borrowed(if v { "yes" } else { "no" }))
    }
}

impl<'a, T: Into<Cell<'a>>> From<Option<T>> for Cell<'a> {
    fn from(v: Option<T>) -> Self {
        v.map_or(Cell::Null, Into::into)
    }
}

/// A row that does not fit its columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableError {
    /// The row has `got` cells for `expected` columns.
    Arity { expected: usize, got: usize },
    /// A text value in a numeric column, or an int4 value out of range.
    Type { column: &'static str, ty: ColumnType },
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableError::Arity { expected, got } => write!(f, "a row of {got} values for {expected} columns"),
            TableError::Type { column, ty } => write!(f, "column {column} ({ty:?}) got a value of another type"),
        }
    }
}

impl std::error::Error for TableError {}

/// The rows of one SHOW, ready to encode.
#[derive(Clone, Debug)]
pub struct ResultSet {
    columns: Vec<ColumnDef>,
    /// Each cell in its text form; `None` is NULL.
    rows: Vec<Vec<Option<String>>>,
}

impl ResultSet {
    pub fn new(columns: &[ColumnDef]) -> ResultSet {
        ResultSet { columns: columns.to_vec(), rows: Vec::new() }
    }

    /// Adds a row; its cells must match the columns in number and type.
    pub fn push<'a>(&mut self, cells: impl IntoIterator<Item = Cell<'a>>) -> Result<(), TableError> {
        let cells: Vec<Cell<'a>> = cells.into_iter().collect();
        if cells.len() != self.columns.len() {
            return Err(TableError::Arity { expected: self.columns.len(), got: cells.len() });
        }
        let row =
            cells.into_iter().zip(&self.columns).map(|(cell, col)| text_form(cell, col)).collect::<Result<_, _>>()?;
        self.rows.push(row);
        Ok(())
    }

    #[cfg(test)]
    pub fn columns(&self) -> &[ColumnDef] {
        &self.columns
    }

    #[cfg(test)]
    pub fn rows(&self) -> &[Vec<Option<String>>] {
        &self.rows
    }

    /// RowDescription, the DataRows and CommandComplete `SHOW`.
    pub fn encode(&self, buf: &mut BytesMut) {
        let columns: Vec<Column<'_>> = self
            .columns
            .iter()
            .map(|c| Column { name: c.name, type_oid: c.ty.oid(), type_len: c.ty.typlen() })
            .collect();
        encode::row_description(buf, &columns);
        for row in &self.rows {
            let values: Vec<Option<&[u8]>> = row.iter().map(|v| v.as_deref().map(str::as_bytes)).collect();
            encode::data_row(buf, &values);
        }
        encode::command_complete(buf, "SHOW");
    }
}

fn text_form(cell: Cell<'_>, col: &ColumnDef) -> Result<Option<String>, TableError> {
    let wrong = || TableError::Type { column: col.name, ty: col.ty };
    Ok(match (cell, col.ty) {
        (Cell::Null, _) => None,
        (Cell::Text(s), ColumnType::Text) => Some(s.into_owned()),
        (Cell::Int(v), ColumnType::Int4) => Some(i32::try_from(v).map_err(|_| wrong())?.to_string()),
        (Cell::Int(v), ColumnType::Text | ColumnType::Int8 | ColumnType::Numeric) => Some(v.to_string()),
        (Cell::Text(_), _) | (Cell::Int(_), ColumnType::Bytea) => return Err(wrong()),
    })
}

/// PgBouncer's `SHOW HELP`: a NOTICE listing the commands, then CommandComplete `SHOW`, no rows.
pub fn encode_help(buf: &mut BytesMut) {
    encode::notice(buf, sqlstate::SUCCESSFUL_COMPLETION, HELP);
    encode::command_complete(buf, "SHOW");
}

/// The notice `SET` of a driver's session setting gets; it changes nothing.
pub fn encode_set_ignored(buf: &mut BytesMut) {
    encode::notice(buf, sqlstate::SUCCESSFUL_COMPLETION, "SET ignored");
    encode::command_complete(buf, "SET");
}

/// `SHOW DateStyle` and its kind: one text column named after the setting, one row of PgBouncer's value.
pub fn setting(setting: SessionSetting) -> ResultSet {
    let mut set = ResultSet::new(&[text(setting.name(), "the console's fixed value, as PgBouncer's")]);
    set.rows.push(vec![Some(setting.value().to_owned())]);
    set
}

/// What `SHOW HELP` says.
pub const HELP: &str = "Console usage
\tSHOW HELP|VERSION|CONFIG|DATABASES|USERS|POOLS|CLIENTS|SERVERS|LISTS|STATE
\tSHOW FDS|SOCKETS|ACTIVE_SOCKETS|MEM|DNS_HOSTS|DNS_ZONES|PEERS|PEER_POOLS
\tSHOW STATS|STATS_TOTALS|STATS_AVERAGES|TOTALS
\tSHOW SIZING|PINS|PREPARED|LATENCY
\tSET key = arg
\tRELOAD
\tPAUSE [<db>]
\tRESUME [<db>]
\tRECONNECT [<db>]
\tWAIT_CLOSE [<db>]
\tKILL_CLIENT <id>
\tDISABLE <db>
\tENABLE <db>
\tSHUTDOWN [WAIT_FOR_SERVERS|WAIT_FOR_CLIENTS]";

/// Unix seconds as `YYYY-MM-DD HH:MM:SS UTC`, the form of PgBouncer's time columns that Datadog's check
/// parses.
pub fn timestamp(unix_secs: u64) -> String {
    let days = i64::try_from(unix_secs / 86_400).unwrap_or(0);
    let secs = unix_secs % 86_400;
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm, proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC", secs / 3600, secs % 3600 / 60, secs % 60)
}
