//! Views of client messages: the untagged start-up packets and the authentication replies.

use crate::ParseError;
use crate::cursor::Cursor;
use crate::frame::STARTUP_PACKET_LIMIT;

/// Protocol version 3.0 as sent in a StartupMessage.
pub const PROTOCOL_3_0: i32 = 3 << 16;
/// The code of an SSLRequest.
pub const SSL_REQUEST_CODE: i32 = 80_877_103;
/// The code of a GSSENCRequest.
pub const GSSENC_REQUEST_CODE: i32 = 80_877_104;
/// The code of a CancelRequest.
pub const CANCEL_REQUEST_CODE: i32 = 80_877_102;

/// The first packet a client sends on a new connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartupRequest {
    /// SSLRequest: the client asks for TLS.
    Ssl,
    /// GSSENCRequest: the client asks for GSSAPI encryption.
    GssEnc,
    /// CancelRequest: cancel the query of the session with this key.
    Cancel {
        /// Process id from BackendKeyData.
        pid: i32,
        /// Secret key from BackendKeyData (four bytes in protocol 3.0, longer in 3.2).
        secret: Vec<u8>,
    },
    /// StartupMessage.
    Startup(StartupMessage),
    /// A code that is neither a request above nor protocol 3.x: the protocol version (or request) the
    /// client asked for, as it came. PostgreSQL refuses it before it reads anything after the code.
    Unsupported(u32),
}

/// A StartupMessage: protocol version and parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartupMessage {
    /// Major protocol version (3 for every supported client).
    pub major: u16,
    /// Minor protocol version requested.
    pub minor: u16,
    /// Parameters in the order sent, `_pq_.` options included.
    pub params: Vec<(String, String)>,
}

impl StartupMessage {
    /// The value of a parameter, if the client sent it.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.params.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// Why a start-up packet was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StartupError {
    /// Length outside 8..=10000.
    #[error("invalid length of startup packet: {0}")]
    BadLength(u32),
    /// The body does not parse.
    #[error(transparent)]
    Malformed(#[from] ParseError),
}

/// Splits the first start-up packet off `buf`. Returns the request and the bytes it took, or `None` if the
/// packet is not complete yet.
pub fn split_startup(buf: &[u8]) -> Result<Option<(StartupRequest, usize)>, StartupError> {
    let Some(len_bytes) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
    if !(8..=STARTUP_PACKET_LIMIT as u32).contains(&len) {
        return Err(StartupError::BadLength(len));
    }
    let len = len as usize;
    let Some(packet) = buf.get(4..len) else {
        return Ok(None);
    };
    Ok(Some((parse_startup(packet)?, len)))
}

fn parse_startup(packet: &[u8]) -> Result<StartupRequest, ParseError> {
    const WHAT: &str = "startup packet";
    let mut c = Cursor::new(packet, WHAT);
    let code = c.i32()?;
    match code {
        SSL_REQUEST_CODE => {
            c.finish()?;
            Ok(StartupRequest::Ssl)
        }
        GSSENC_REQUEST_CODE => {
            c.finish()?;
            Ok(StartupRequest::GssEnc)
        }
        CANCEL_REQUEST_CODE => {
            let pid = c.i32()?;
            let secret = c.rest().to_vec();
            if secret.len() < 4 || secret.len() > 256 {
                return Err(ParseError::new(WHAT, "cancel key has a bad length"));
            }
            Ok(StartupRequest::Cancel { pid, secret })
        }
        version if version >> 16 != 3 => Ok(StartupRequest::Unsupported(version as u32)),
        version => {
            let major = (version >> 16) as u16;
            let minor = (version & 0xffff) as u16;
            let mut params = Vec::new();
            loop {
                let key = c.cstr()?;
                if key.is_empty() {
                    break;
                }
                let value = c.cstr()?;
                params.push((key.to_owned(), value.to_owned()));
            }
            c.finish()?;
            Ok(StartupRequest::Startup(StartupMessage { major, minor, params }))
        }
    }
}

/// A SASLInitialResponse body: mechanism and the client-first message.
pub fn sasl_initial_response(body: &[u8]) -> Result<(&str, &[u8]), ParseError> {
    let mut c = Cursor::new(body, "SASLInitialResponse");
    let mechanism = c.cstr()?;
    let len = c.i32()?;
    let data = if len < 0 { &[][..] } else { c.bytes(len as usize)? };
    c.finish()?;
    Ok((mechanism, data))
}

/// A PasswordMessage body: the password (cleartext or `md5…`) without its terminator.
pub fn password(body: &[u8]) -> Result<&str, ParseError> {
    let mut c = Cursor::new(body, "PasswordMessage");
    let pw = c.cstr()?;
    c.finish()?;
    Ok(pw)
}

/// The statement or portal name at the front of a Describe or Close body, with its kind byte.
pub fn describe_or_close(body: &[u8]) -> Result<(u8, &str), ParseError> {
    let mut c = Cursor::new(body, "Describe/Close");
    let kind = c.u8()?;
    let name = c.cstr()?;
    c.finish()?;
    Ok((kind, name))
}

/// A Parse body: the statement name, and the rest (query text and parameter types), which is what makes
/// two statements the same.
pub fn parse_name(body: &[u8]) -> Result<(&str, &[u8]), ParseError> {
    let mut c = Cursor::new(body, "Parse");
    let name = c.cstr()?;
    let rest = c.rest();
    // The rest must hold a terminated query and a parameter count.
    let mut check = Cursor::new(rest, "Parse");
    check.cstr_bytes()?;
    check.bytes(2)?;
    Ok((name, rest))
}

/// The query text of a Parse body's rest (see [`parse_name`]).
pub fn parse_query(rest: &[u8]) -> Result<&str, ParseError> {
    Cursor::new(rest, "Parse").cstr()
}

/// A Bind body: portal name, statement name, and the byte offset where the statement name starts and ends.
pub fn bind_names(body: &[u8]) -> Result<(&str, &str, std::ops::Range<usize>), ParseError> {
    let mut c = Cursor::new(body, "Bind");
    let portal = c.cstr()?;
    let start = portal.len() + 1;
    let statement = c.cstr()?;
    Ok((portal, statement, start..start + statement.len() + 1))
}

/// A Query body's SQL text as bytes, not checked to be UTF-8 (the server checks it against the client's
/// encoding): for reading what a statement does, on every simple Query.
pub fn query(body: &[u8]) -> Result<&[u8], ParseError> {
    let mut c = Cursor::new(body, "Query");
    let sql = c.cstr_bytes()?;
    c.finish()?;
    Ok(sql)
}

/// [`parse_query`] as bytes, not checked to be UTF-8.
pub fn parse_query_bytes(rest: &[u8]) -> Result<&[u8], ParseError> {
    Cursor::new(rest, "Parse").cstr_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(code: i32, rest: &[u8]) -> Vec<u8> {
        let mut v = ((rest.len() + 8) as u32).to_be_bytes().to_vec();
        v.extend_from_slice(&code.to_be_bytes());
        v.extend_from_slice(rest);
        v
    }

    #[test]
    fn startup_message_golden_bytes() {
        let bytes = packet(PROTOCOL_3_0, b"user\0app\0database\0db\0application_name\0psql\0\0");
        let (req, used) = split_startup(&bytes).unwrap().unwrap();
        assert_eq!(used, bytes.len());
        let StartupRequest::Startup(msg) = req else { panic!("not a startup message") };
        assert_eq!((msg.major, msg.minor), (3, 0));
        assert_eq!(msg.get("user"), Some("app"));
        assert_eq!(msg.get("application_name"), Some("psql"));
        assert_eq!(msg.get("options"), None);
    }

    #[test]
    fn ssl_gss_and_cancel_requests() {
        assert_eq!(split_startup(&packet(SSL_REQUEST_CODE, b"")).unwrap().unwrap().0, StartupRequest::Ssl);
        assert_eq!(split_startup(&packet(GSSENC_REQUEST_CODE, b"")).unwrap().unwrap().0, StartupRequest::GssEnc);
        let mut key = 77i32.to_be_bytes().to_vec();
        key.extend_from_slice(&[1, 2, 3, 4]);
        assert_eq!(
            split_startup(&packet(CANCEL_REQUEST_CODE, &key)).unwrap().unwrap().0,
            StartupRequest::Cancel { pid: 77, secret: vec![1, 2, 3, 4] }
        );
    }

    #[test]
    fn partial_and_bad_packets() {
        let bytes = packet(PROTOCOL_3_0, b"user\0app\0\0");
        assert_eq!(split_startup(&bytes[..3]).unwrap(), None);
        assert_eq!(split_startup(&bytes[..10]).unwrap(), None);
        assert_eq!(split_startup(&[0, 0, 0, 4]), Err(StartupError::BadLength(4)));
        assert_eq!(split_startup(&[0x7f, 0, 0, 0]), Err(StartupError::BadLength(0x7f00_0000)));
        // A parameter without its terminator.
        assert!(split_startup(&packet(PROTOCOL_3_0, b"user\0app")).is_err());
        // Trailing bytes after an SSLRequest.
        assert!(split_startup(&packet(SSL_REQUEST_CODE, b"x")).is_err());
    }

    #[test]
    fn other_protocol_codes_are_unsupported_whatever_follows_them() {
        // Read before the parameters, as PostgreSQL does: what follows an unknown code need not parse.
        for code in [0, 2 << 16, (2 << 16) | 5, 4 << 16, 0x4741_5242, -1, (1234 << 16) | 5681] {
            let got = split_startup(&packet(code, b"no terminator")).unwrap().unwrap();
            assert_eq!(got.0, StartupRequest::Unsupported(code as u32), "{code:#x}");
        }
        let newer = split_startup(&packet(PROTOCOL_3_0 | 2, b"user\0app\0\0")).unwrap().unwrap().0;
        assert!(matches!(newer, StartupRequest::Startup(StartupMessage { major: 3, minor: 2, .. })));
    }

    #[test]
    fn extended_protocol_names() {
        let (name, rest) = parse_name(b"s1\0select $1\0\0\x01\0\0\0\x17").unwrap();
        assert_eq!(name, "s1");
        assert_eq!(rest, b"select $1\0\0\x01\0\0\0\x17");
        assert_eq!(parse_query(rest).unwrap(), "select $1");
        assert!(parse_name(b"s1\0select").is_err());
        assert!(parse_name(b"s1\0select\0").is_err(), "the parameter count is missing");
        let (portal, stmt, range) = bind_names(b"p\0stmt\0\0\0").unwrap();
        assert_eq!((portal, stmt, range), ("p", "stmt", 2..7));
        assert!(bind_names(b"p\0stmt").is_err());
    }

    #[test]
    fn auth_replies() {
        let mut body = b"SCRAM-SHA-256\0".to_vec();
        body.extend_from_slice(&5i32.to_be_bytes());
        body.extend_from_slice(b"n,,n=");
        assert_eq!(sasl_initial_response(&body).unwrap(), ("SCRAM-SHA-256", &b"n,,n="[..]));
        assert!(sasl_initial_response(&body[..body.len() - 1]).is_err());
        assert_eq!(password(b"md5abc\0").unwrap(), "md5abc");
        assert_eq!(query(b"select 1\0").unwrap(), b"select 1");
        assert!(query(b"select 1\0trailing").is_err());
        assert_eq!(describe_or_close(b"Ss1\0").unwrap(), (b'S', "s1"));
    }
}
