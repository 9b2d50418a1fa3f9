//! Builders for the messages pgmux writes itself: its own errors, authentication, start-up and control
//! messages. Each appends one whole message to a `BytesMut`, so several can be batched into one write.

use std::borrow::Cow;

use bytes::{BufMut, BytesMut};

use crate::backend::TxStatus;

/// Writes a tagged message: the tag, a length patched in at the end, and what `body` puts.
fn message(buf: &mut BytesMut, tag: u8, body: impl FnOnce(&mut BytesMut)) {
    buf.put_u8(tag);
    untagged(buf, body);
}

/// Writes a message without a tag (start-up packets): a length patched in at the end, then the body.
fn untagged(buf: &mut BytesMut, body: impl FnOnce(&mut BytesMut)) {
    let at = buf.len();
    buf.put_u32(0);
    body(buf);
    let len = (buf.len() - at) as u32;
    buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

fn cstr(buf: &mut BytesMut, s: &str) {
    // A NUL inside a string would end it early; PostgreSQL strings cannot hold one, so it is left out. No
    // string of its own: every login writes a dozen short parameters this way.
    let bytes = s.as_bytes();
    if bytes.contains(&0) {
        bytes.split(|b| *b == 0).for_each(|piece| buf.put_slice(piece));
    } else {
        buf.put_slice(bytes);
    }
    buf.put_u8(0);
}

/// The severity of an error pgmux reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The statement failed; the session goes on.
    Error,
    /// The session ends after this message.
    Fatal,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "ERROR",
            Severity::Fatal => "FATAL",
        }
    }
}

/// An `ErrorResponse` written by pgmux, with an optional detail and hint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorMessage {
    /// ERROR or FATAL.
    pub severity: Severity,
    /// SQLSTATE.
    pub code: Cow<'static, str>,
    /// Primary message.
    pub message: String,
    /// Optional detail.
    pub detail: Option<String>,
    /// Optional hint.
    pub hint: Option<String>,
}

impl ErrorMessage {
    /// An ERROR with a code and a message.
    pub fn error(code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        ErrorMessage { severity: Severity::Error, code: code.into(), message: message.into(), detail: None, hint: None }
    }

    /// A FATAL error with a code and a message.
    pub fn fatal(code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        ErrorMessage { severity: Severity::Fatal, ..Self::error(code, message) }
    }

    /// Adds a hint.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Adds a detail.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// The message as bytes, ready to queue.
    pub fn to_bytes(&self) -> bytes::Bytes {
        let mut buf = BytesMut::new();
        self.encode(&mut buf);
        buf.freeze()
    }

    /// Appends the `ErrorResponse`.
    pub fn encode(&self, buf: &mut BytesMut) {
        message(buf, b'E', |b| {
            let sev = self.severity.as_str();
            b.put_u8(b'S');
            cstr(b, sev);
            b.put_u8(b'V');
            cstr(b, sev);
            b.put_u8(b'C');
            cstr(b, &self.code);
            b.put_u8(b'M');
            cstr(b, &self.message);
            if let Some(d) = &self.detail {
                b.put_u8(b'D');
                cstr(b, d);
            }
            if let Some(h) = &self.hint {
                b.put_u8(b'H');
                cstr(b, h);
            }
            b.put_u8(0);
        });
    }
}

/// `ReadyForQuery`.
pub fn ready_for_query(buf: &mut BytesMut, status: TxStatus) {
    message(buf, b'Z', |b| b.put_u8(status.byte()));
}

/// `AuthenticationOk`.
pub fn auth_ok(buf: &mut BytesMut) {
    message(buf, b'R', |b| b.put_i32(0));
}

/// `AuthenticationCleartextPassword`.
pub fn auth_cleartext(buf: &mut BytesMut) {
    message(buf, b'R', |b| b.put_i32(3));
}

/// `AuthenticationMD5Password`.
pub fn auth_md5(buf: &mut BytesMut, salt: [u8; 4]) {
    message(buf, b'R', |b| {
        b.put_i32(5);
        b.put_slice(&salt);
    });
}

/// `AuthenticationSASL` offering the given mechanisms.
pub fn auth_sasl(buf: &mut BytesMut, mechanisms: &[&str]) {
    message(buf, b'R', |b| {
        b.put_i32(10);
        for m in mechanisms {
            cstr(b, m);
        }
        b.put_u8(0);
    });
}

/// `AuthenticationSASLContinue`.
pub fn auth_sasl_continue(buf: &mut BytesMut, data: &[u8]) {
    message(buf, b'R', |b| {
        b.put_i32(11);
        b.put_slice(data);
    });
}

/// `AuthenticationSASLFinal`.
pub fn auth_sasl_final(buf: &mut BytesMut, data: &[u8]) {
    message(buf, b'R', |b| {
        b.put_i32(12);
        b.put_slice(data);
    });
}

/// `ParameterStatus`.
pub fn parameter_status(buf: &mut BytesMut, name: &str, value: &str) {
    message(buf, b'S', |b| {
        cstr(b, name);
        cstr(b, value);
    });
}

/// `BackendKeyData` with a protocol 3.0 key.
pub fn backend_key_data(buf: &mut BytesMut, pid: i32, secret: i32) {
    message(buf, b'K', |b| {
        b.put_i32(pid);
        b.put_i32(secret);
    });
}

/// `NegotiateProtocolVersion`: the newest minor version pgmux speaks and the options it did not recognise.
pub fn negotiate_protocol_version(buf: &mut BytesMut, newest_minor: i32, unrecognized: &[&str]) {
    message(buf, b'v', |b| {
        b.put_i32(newest_minor);
        b.put_i32(unrecognized.len() as i32);
        for o in unrecognized {
            cstr(b, o);
        }
    });
}

/// PostgreSQL's words for a start-up packet whose code it does not speak: a protocol version other than 3.x,
/// or an encryption request it already answered.
pub fn unsupported_protocol_text(code: u32) -> String {
    format!("unsupported frontend protocol {}.{}: server supports 3.0 to 3.0", code >> 16, code & 0xffff)
}

/// PostgreSQL's refusal of such a packet, FATAL 0A000, in the format the client asked for: a client that
/// named protocol 1 or 2 (any code below 3.0 but 0) gets the old format it can read (the tag, then
/// `FATAL:  <text>\n` NUL-terminated, without a length word); every other one gets an ErrorResponse.
pub fn unsupported_protocol(buf: &mut BytesMut, code: u32) {
    let text = unsupported_protocol_text(code);
    if code >> 16 >= 3 || code == 0 {
        ErrorMessage::fatal(crate::sqlstate::FEATURE_NOT_SUPPORTED, text).encode(buf);
    } else {
        buf.put_u8(b'E');
        cstr(buf, &format!("FATAL:  {text}\n"));
    }
}

/// `ParseComplete`.
pub fn parse_complete(buf: &mut BytesMut) {
    message(buf, b'1', |_| {});
}

/// `CloseComplete`.
pub fn close_complete(buf: &mut BytesMut) {
    message(buf, b'3', |_| {});
}

/// `CommandComplete` with a tag.
pub fn command_complete(buf: &mut BytesMut, tag: &str) {
    message(buf, b'C', |b| cstr(b, tag));
}

/// One column of a `RowDescription` that pgmux writes itself: always text format, no table behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column<'a> {
    pub name: &'a str,
    /// The type's OID (25 text, 20 int8, 23 int4, 1700 numeric, ...).
    pub type_oid: u32,
    /// The type's length as `pg_type.typlen` says (-1 for variable length).
    pub type_len: i16,
}

/// `RowDescription`: table OID 0, attribute 0, type modifier -1 and text format for every column.
pub fn row_description(buf: &mut BytesMut, columns: &[Column<'_>]) {
    message(buf, b'T', |b| {
        b.put_i16(i16::try_from(columns.len()).unwrap_or(i16::MAX));
        for c in columns.iter().take(i16::MAX as usize) {
            cstr(b, c.name);
            b.put_u32(0);
            b.put_i16(0);
            b.put_u32(c.type_oid);
            b.put_i16(c.type_len);
            b.put_i32(-1);
            b.put_i16(0);
        }
    });
}

/// `DataRow` of text values; `None` is NULL.
pub fn data_row(buf: &mut BytesMut, values: &[Option<&[u8]>]) {
    message(buf, b'D', |b| {
        b.put_i16(i16::try_from(values.len()).unwrap_or(i16::MAX));
        for v in values.iter().take(i16::MAX as usize) {
            match v {
                Some(v) => {
                    b.put_i32(i32::try_from(v.len()).unwrap_or(i32::MAX));
                    b.put_slice(&v[..v.len().min(i32::MAX as usize)]);
                }
                None => b.put_i32(-1),
            }
        }
    });
}

/// `NoticeResponse` with severity NOTICE, a SQLSTATE and a message.
pub fn notice(buf: &mut BytesMut, code: &str, text: &str) {
    message(buf, b'N', |b| {
        for (field, value) in [(b'S', "NOTICE"), (b'V', "NOTICE"), (b'C', code), (b'M', text)] {
            b.put_u8(field);
            cstr(b, value);
        }
        b.put_u8(0);
    });
}

/// `EmptyQueryResponse`, the answer to a Query holding no statement.
pub fn empty_query_response(buf: &mut BytesMut) {
    message(buf, b'I', |_| {});
}

/// `Parse` of a statement with a name and the rest of a client's Parse body (query, parameter types).
pub fn parse_with_name(buf: &mut BytesMut, name: &str, rest: &[u8]) {
    message(buf, b'P', |b| {
        cstr(b, name);
        b.put_slice(rest);
    });
}

/// A client's `Bind` body with its statement name replaced: `body[range]` is the old name and its NUL.
pub fn bind_renamed(buf: &mut BytesMut, body: &[u8], range: std::ops::Range<usize>, name: &str) {
    message(buf, b'B', |b| {
        b.put_slice(&body[..range.start]);
        cstr(b, name);
        b.put_slice(&body[range.end..]);
    });
}

/// `Describe` or `Close` of a statement (`kind` S) or portal (`kind` P).
pub fn describe_or_close(buf: &mut BytesMut, tag: u8, kind: u8, name: &str) {
    message(buf, tag, |b| {
        b.put_u8(kind);
        cstr(b, name);
    });
}

/// A simple `Query`.
pub fn query(buf: &mut BytesMut, sql: &str) {
    message(buf, b'Q', |b| cstr(b, sql));
}

/// `Sync`.
pub fn sync(buf: &mut BytesMut) {
    message(buf, b'S', |_| {});
}

/// `CopyFail` with a reason.
pub fn copy_fail(buf: &mut BytesMut, reason: &str) {
    message(buf, b'f', |b| cstr(b, reason));
}

/// `Terminate`.
pub fn terminate(buf: &mut BytesMut) {
    message(buf, b'X', |_| {});
}

/// `StartupMessage` for protocol 3.0.
pub fn startup_message(buf: &mut BytesMut, params: &[(&str, &str)]) {
    untagged(buf, |b| {
        b.put_i32(crate::frontend::PROTOCOL_3_0);
        for (k, v) in params {
            cstr(b, k);
            cstr(b, v);
        }
        b.put_u8(0);
    });
}

/// `CancelRequest` with a protocol 3.0 key.
pub fn cancel_request(buf: &mut BytesMut, pid: i32, secret: i32) {
    untagged(buf, |b| {
        b.put_i32(crate::frontend::CANCEL_REQUEST_CODE);
        b.put_i32(pid);
        b.put_i32(secret);
    });
}

/// `PasswordMessage` carrying a cleartext or `md5…` password.
pub fn password_message(buf: &mut BytesMut, password: &str) {
    message(buf, b'p', |b| cstr(b, password));
}

/// `SASLInitialResponse`.
pub fn sasl_initial_response(buf: &mut BytesMut, mechanism: &str, data: &[u8]) {
    message(buf, b'p', |b| {
        cstr(b, mechanism);
        b.put_i32(data.len() as i32);
        b.put_slice(data);
    });
}

/// `SASLResponse`.
pub fn sasl_response(buf: &mut BytesMut, data: &[u8]) {
    message(buf, b'p', |b| b.put_slice(data));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(f: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
        let mut b = BytesMut::new();
        f(&mut b);
        b.to_vec()
    }

    #[test]
    fn golden_control_messages() {
        assert_eq!(bytes(|b| ready_for_query(b, TxStatus::Idle)), b"Z\0\0\0\x05I");
        assert_eq!(bytes(sync), b"S\0\0\0\x04");
        assert_eq!(bytes(terminate), b"X\0\0\0\x04");
        assert_eq!(bytes(auth_ok), b"R\0\0\0\x08\0\0\0\0");
        assert_eq!(bytes(|b| query(b, "select 1")), b"Q\0\0\0\x0dselect 1\0");
        assert_eq!(bytes(|b| backend_key_data(b, 1, 2)), b"K\0\0\0\x0c\0\0\0\x01\0\0\0\x02");
        assert_eq!(bytes(|b| parameter_status(b, "a", "b")), b"S\0\0\0\x08a\0b\0", "name and value are NUL-terminated");
        assert_eq!(
            bytes(|b| parameter_status(b, "a\0x", "\0b\0\0c")),
            b"S\0\0\0\x0aax\0bc\0",
            "a NUL inside a string is left out, wherever it is"
        );
    }

    #[test]
    fn golden_unsupported_protocol_in_the_format_the_client_asked_for() {
        // The bytes PostgreSQL 15 sends, without the source file, line and routine fields it adds.
        assert_eq!(
            bytes(|b| unsupported_protocol(b, 4 << 16)),
            b"E\0\0\0\x59SFATAL\0VFATAL\0C0A000\0Munsupported frontend protocol 4.0: server supports 3.0 to 3.0\0\0"
                .to_vec()
        );
        assert_eq!(
            bytes(|b| unsupported_protocol(b, (1234 << 16) | 5679)),
            b"E\0\0\0\x5fSFATAL\0VFATAL\0C0A000\0Munsupported frontend protocol 1234.5679: server supports 3.0 to 3.0\0\0"
                .to_vec()
        );
        assert_eq!(
            bytes(|b| unsupported_protocol(b, 2 << 16)),
            b"EFATAL:  unsupported frontend protocol 2.0: server supports 3.0 to 3.0\n\0".to_vec()
        );
        assert_eq!(
            bytes(|b| unsupported_protocol(b, 5)),
            b"EFATAL:  unsupported frontend protocol 0.5: server supports 3.0 to 3.0\n\0".to_vec()
        );
        assert_eq!(bytes(|b| unsupported_protocol(b, 0))[..5], *b"E\0\0\0\x59", "0.0 gets the new format");
    }

    #[test]
    fn golden_startup_and_cancel() {
        assert_eq!(bytes(|b| startup_message(b, &[("user", "u")])), b"\0\0\0\x10\0\x03\0\0user\0u\0\0".to_vec());
        assert_eq!(bytes(|b| cancel_request(b, 5, 6)), b"\0\0\0\x10\x04\xd2\x16\x2e\0\0\0\x05\0\0\0\x06".to_vec());
    }

    #[test]
    fn golden_error_response_round_trips_through_the_parser() {
        let msg = ErrorMessage::error("53300", "no server").with_hint("raise pool_max");
        let raw = bytes(|b| msg.encode(b));
        assert_eq!(raw, b"E\0\0\0\x35SERROR\0VERROR\0C53300\0Mno server\0Hraise pool_max\0\0".to_vec());
        let parsed = crate::backend::ErrorFields::parse(&raw[5..]).unwrap();
        assert_eq!((parsed.severity, parsed.code, parsed.message), ("ERROR", "53300", "no server"));
        assert_eq!(parsed.hint, Some("raise pool_max"));
    }

    #[test]
    fn negotiate_protocol_version_lists_options() {
        assert_eq!(
            bytes(|b| negotiate_protocol_version(b, 0, &["_pq_.x"])),
            b"v\0\0\0\x13\0\0\0\0\0\0\0\x01_pq_.x\0".to_vec()
        );
    }

    #[test]
    fn golden_extended_protocol_rewrites() {
        assert_eq!(bytes(parse_complete), b"1\0\0\0\x04");
        assert_eq!(bytes(close_complete), b"3\0\0\0\x04");
        assert_eq!(bytes(|b| command_complete(b, "SET")), b"C\0\0\0\x08SET\0");
        assert_eq!(bytes(|b| parse_with_name(b, "x", b"q\0\0\0")), b"P\0\0\0\x0ax\0q\0\0\0".to_vec());
        // Bind "p" of "stmt" with no parameters, renamed to "s".
        let body = b"p\0stmt\0\0\0\0\0\0\0";
        assert_eq!(bytes(|b| bind_renamed(b, body, 2..7, "s")), b"B\0\0\0\x0ep\0s\0\0\0\0\0\0\0".to_vec());
        assert_eq!(bytes(|b| describe_or_close(b, b'D', b'S', "s")), b"D\0\0\0\x07Ss\0".to_vec());
    }

    #[test]
    fn golden_result_set_messages() {
        let cols = [Column { name: "a", type_oid: 25, type_len: -1 }, Column { name: "n", type_oid: 20, type_len: 8 }];
        assert_eq!(
            bytes(|b| row_description(b, &cols)),
            b"T\0\0\0\x2e\0\x02\
              a\0\0\0\0\0\0\0\0\0\0\x19\xff\xff\xff\xff\xff\xff\0\0\
              n\0\0\0\0\0\0\0\0\0\0\x14\0\x08\xff\xff\xff\xff\0\0"
                .to_vec()
        );
        assert_eq!(
            bytes(|b| data_row(b, &[Some(b"xy"), None, Some(b"")])),
            b"D\0\0\0\x14\0\x03\0\0\0\x02xy\xff\xff\xff\xff\0\0\0\0".to_vec()
        );
        assert_eq!(bytes(empty_query_response), b"I\0\0\0\x04");
        assert_eq!(bytes(|b| notice(b, "00000", "hi")), b"N\0\0\0\x20SNOTICE\0VNOTICE\0C00000\0Mhi\0\0".to_vec());
    }

    #[test]
    fn embedded_nul_cannot_end_a_string_early() {
        let raw = bytes(|b| query(b, "a\0b"));
        assert_eq!(raw, b"Q\0\0\0\x07ab\0");
    }
}
