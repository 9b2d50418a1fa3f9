//! Read-only views of the few server messages pgmux has to look inside.
//!
//! Each function takes a message *body* (the bytes after the five-byte header) and returns borrowed fields.
//! Anything malformed yields `None` or a [`ParseError`]: a bad server is reported, never trusted.

use crate::ParseError;
use crate::cursor::Cursor;

/// The transaction status carried by `ReadyForQuery`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxStatus {
    /// `I`: not in a transaction block.
    Idle,
    /// `T`: in a transaction block.
    InTransaction,
    /// `E`: in a failed transaction block.
    Failed,
}

impl TxStatus {
    /// The status byte as sent on the wire.
    pub fn byte(self) -> u8 {
        match self {
            TxStatus::Idle => b'I',
            TxStatus::InTransaction => b'T',
            TxStatus::Failed => b'E',
        }
    }

    /// Parses a status byte.
    pub fn from_byte(b: u8) -> Option<Self> {
        match b {
            b'I' => Some(TxStatus::Idle),
            b'T' => Some(TxStatus::InTransaction),
            b'E' => Some(TxStatus::Failed),
            _ => None,
        }
    }
}

/// The status of a `ReadyForQuery` body.
pub fn ready_for_query(body: &[u8]) -> Result<TxStatus, ParseError> {
    match body {
        [b] => TxStatus::from_byte(*b).ok_or(ParseError::new("ReadyForQuery", "unknown status")),
        _ => Err(ParseError::new("ReadyForQuery", "body is not one byte")),
    }
}

/// The fields of an `ErrorResponse` or `NoticeResponse` that pgmux uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorFields<'a> {
    /// `V` (non-localised) severity, or `S` when `V` is absent.
    pub severity: &'a str,
    /// `C`: the SQLSTATE.
    pub code: &'a str,
    /// `M`: the primary message.
    pub message: &'a str,
    /// `D`: detail, if any.
    pub detail: Option<&'a str>,
    /// `H`: hint, if any.
    pub hint: Option<&'a str>,
}

impl<'a> ErrorFields<'a> {
    /// Parses an `ErrorResponse` / `NoticeResponse` body.
    pub fn parse(body: &'a [u8]) -> Result<Self, ParseError> {
        const WHAT: &str = "ErrorResponse";
        let mut c = Cursor::new(body, WHAT);
        let mut out = ErrorFields::default();
        let mut localized_severity = "";
        loop {
            let kind = c.u8()?;
            if kind == 0 {
                break;
            }
            let value = c.cstr()?;
            match kind {
                b'S' => localized_severity = value,
                b'V' => out.severity = value,
                b'C' => out.code = value,
                b'M' => out.message = value,
                b'D' => out.detail = Some(value),
                b'H' => out.hint = Some(value),
                _ => {}
            }
        }
        if out.severity.is_empty() {
            out.severity = localized_severity;
        }
        Ok(out)
    }

    /// FATAL and PANIC errors end the server session.
    pub fn is_fatal(&self) -> bool {
        matches!(self.severity, "FATAL" | "PANIC")
    }
}

/// A `ParameterStatus` body: name and value.
pub fn parameter_status(body: &[u8]) -> Result<(&str, &str), ParseError> {
    let mut c = Cursor::new(body, "ParameterStatus");
    let name = c.cstr()?;
    let value = c.cstr()?;
    c.finish()?;
    Ok((name, value))
}

/// A `BackendKeyData` body: process id and secret key (protocol 3.0 keys are four bytes).
pub fn backend_key_data(body: &[u8]) -> Result<(i32, i32), ParseError> {
    let mut c = Cursor::new(body, "BackendKeyData");
    let pid = c.i32()?;
    let secret = c.i32()?;
    c.finish()?;
    Ok((pid, secret))
}

/// What an `Authentication*` message asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthRequest<'a> {
    /// `AuthenticationOk`.
    Ok,
    /// `AuthenticationCleartextPassword`.
    Cleartext,
    /// `AuthenticationMD5Password` with its salt.
    Md5 {
        /// Four random bytes.
        salt: [u8; 4],
    },
    /// `AuthenticationSASL` with the offered mechanisms.
    Sasl {
        /// Mechanism names, e.g. `SCRAM-SHA-256`.
        mechanisms: Vec<&'a str>,
    },
    /// `AuthenticationSASLContinue` with server data.
    SaslContinue(&'a [u8]),
    /// `AuthenticationSASLFinal` with server data.
    SaslFinal(&'a [u8]),
    /// Any other method (Kerberos, GSS, SSPI), by its code.
    Unsupported(i32),
}

/// Parses an `Authentication*` body.
pub fn auth_request(body: &[u8]) -> Result<AuthRequest<'_>, ParseError> {
    let mut c = Cursor::new(body, "Authentication");
    let code = c.i32()?;
    let req = match code {
        0 => AuthRequest::Ok,
        3 => AuthRequest::Cleartext,
        5 => {
            let s = c.bytes(4)?;
            AuthRequest::Md5 { salt: [s[0], s[1], s[2], s[3]] }
        }
        10 => {
            let mut mechanisms = Vec::new();
            loop {
                let m = c.cstr()?;
                if m.is_empty() {
                    break;
                }
                mechanisms.push(m);
            }
            AuthRequest::Sasl { mechanisms }
        }
        11 => AuthRequest::SaslContinue(c.rest()),
        12 => AuthRequest::SaslFinal(c.rest()),
        other => AuthRequest::Unsupported(other),
    };
    Ok(req)
}

/// The columns of a `DataRow` body: `None` for NULL.
pub fn data_row(body: &[u8]) -> Result<Vec<Option<&[u8]>>, ParseError> {
    let mut c = Cursor::new(body, "DataRow");
    let n = c.i16()?;
    let mut out = Vec::with_capacity(n.max(0) as usize);
    for _ in 0..n {
        let len = c.i32()?;
        out.push(if len < 0 { None } else { Some(c.bytes(len as usize)?) });
    }
    c.finish()?;
    Ok(out)
}

/// One column of a `RowDescription`, as PostgreSQL compares result types (the table and column number it
/// came from, its type's length and the format code are left out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResultColumn<'a> {
    /// The column's name.
    pub name: &'a str,
    /// The OID of its type.
    pub type_oid: i32,
    /// Its type modifier (`-1` for none).
    pub type_modifier: i32,
}

/// The columns of a `RowDescription` body, in order.
pub fn row_description(body: &[u8]) -> Result<Vec<ResultColumn<'_>>, ParseError> {
    let mut c = Cursor::new(body, "RowDescription");
    let n = c.i16()?;
    let mut out = Vec::with_capacity(n.clamp(0, 1600) as usize);
    for _ in 0..n {
        let name = c.cstr()?;
        let _table_and_column = c.bytes(6)?;
        let type_oid = c.i32()?;
        let _type_length = c.i16()?;
        let type_modifier = c.i32()?;
        let _format = c.i16()?;
        out.push(ResultColumn { name, type_oid, type_modifier });
    }
    c.finish()?;
    Ok(out)
}

/// The command tag of a `CommandComplete` body, without its terminator, as bytes: it is read after every
/// statement, only ever compared with ASCII tags, and a tag that is not UTF-8 matches none of them. The
/// body is the tag and its NUL, so the tag is everything before the last byte, found without a search; a
/// body with a NUL inside (no server sends one) keeps it in the tag, which then matches no tag.
pub fn command_tag(body: &[u8]) -> Result<&[u8], ParseError> {
    match body.split_last() {
        Some((0, tag)) => Ok(tag),
        _ => Err(ParseError::new("CommandComplete", "string is not terminated")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_description_keeps_what_result_types_are_compared_on() {
        // Two columns: a int4 from table 16384 column 1 in text, b varchar(10) (typmod 14) in binary.
        let body = b"\0\x02a\0\0\0\x40\0\0\x01\0\0\0\x17\0\x04\xff\xff\xff\xff\0\0\
b\0\0\0\0\0\0\0\0\0\x04\x13\xff\xff\0\0\0\x0e\0\x01";
        let columns = row_description(body).unwrap();
        assert_eq!(
            columns,
            [
                ResultColumn { name: "a", type_oid: 23, type_modifier: -1 },
                ResultColumn { name: "b", type_oid: 1043, type_modifier: 14 },
            ]
        );
        assert!(row_description(&body[..body.len() - 1]).is_err(), "truncated");
        assert!(row_description(b"\0\0\0").is_err(), "trailing bytes");
        assert_eq!(row_description(b"\0\0").unwrap(), [], "no columns");
    }

    #[test]
    fn error_fields_prefer_the_non_localised_severity() {
        let body = b"SFEHLER\0VERROR\0C42601\0Msyntax error\0Hcheck it\0\0";
        let e = ErrorFields::parse(body).unwrap();
        assert_eq!(e.severity, "ERROR");
        assert_eq!(e.code, "42601");
        assert_eq!(e.message, "syntax error");
        assert_eq!(e.hint, Some("check it"));
        assert!(!e.is_fatal());
        let fatal = ErrorFields::parse(b"SFATAL\0C57P01\0Mterminating\0\0").unwrap();
        assert!(fatal.is_fatal());
    }

    #[test]
    fn truncated_bodies_are_errors_not_panics() {
        assert!(ErrorFields::parse(b"SERROR").is_err());
        assert!(parameter_status(b"a\0").is_err());
        assert!(backend_key_data(b"\0\0\0\x01").is_err());
        assert!(auth_request(b"\0\0\0\x05ab").is_err());
        assert!(ready_for_query(b"").is_err());
        assert!(ready_for_query(b"X").is_err());
    }

    #[test]
    fn auth_requests_are_recognised() {
        assert_eq!(auth_request(&0i32.to_be_bytes()).unwrap(), AuthRequest::Ok);
        let mut md5 = 5i32.to_be_bytes().to_vec();
        md5.extend_from_slice(b"salt");
        assert_eq!(auth_request(&md5).unwrap(), AuthRequest::Md5 { salt: *b"salt" });
        let mut sasl = 10i32.to_be_bytes().to_vec();
        sasl.extend_from_slice(b"SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0");
        assert_eq!(
            auth_request(&sasl).unwrap(),
            AuthRequest::Sasl { mechanisms: vec!["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"] }
        );
    }

    #[test]
    fn data_rows() {
        assert_eq!(data_row(b"\0\x02\0\0\0\x02ab\xff\xff\xff\xff").unwrap(), vec![Some(&b"ab"[..]), None]);
        assert!(data_row(b"\0\x01\0\0\0\x05ab").is_err());
    }

    #[test]
    fn parameter_status_and_key_data() {
        assert_eq!(parameter_status(b"server_version\x0015.4\0").unwrap(), ("server_version", "15.4"));
        let mut key = 42i32.to_be_bytes().to_vec();
        key.extend_from_slice(&(-7i32).to_be_bytes());
        assert_eq!(backend_key_data(&key).unwrap(), (42, -7));
        assert_eq!(ready_for_query(b"T").unwrap(), TxStatus::InTransaction);
        assert_eq!(command_tag(b"DISCARD ALL\0").unwrap(), b"DISCARD ALL");
        assert!(command_tag(b"SELECT 1").is_err() && command_tag(b"").is_err(), "a tag must be terminated");
        assert_ne!(command_tag(b"SET\0junk\0").unwrap(), b"SET", "a NUL inside is kept: no tag matches");
    }
}
