//! The first packets of a client connection: encryption requests (TLS when a certificate is configured,
//! `N` otherwise; GSSAPI always `N`), cancel requests, protocol version negotiation, and the start-up
//! message.

use bytes::BytesMut;
use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::frontend::{StartupMessage, StartupRequest, split_startup};
use pgmux_proto::{encode, sqlstate};

use tokio_rustls::TlsAcceptor;

use crate::io::{Conn, ReadOutcome, Stream};

/// How a client opened its connection.
#[derive(Debug)]
pub(crate) enum Opening {
    /// A cancel request for some session; the connection carries nothing else.
    Cancel { pid: i32, secret: Vec<u8> },
    /// A session start-up.
    Session(StartupMessage),
}

/// Why the opening failed.
#[derive(Debug)]
pub(crate) enum OpeningError {
    /// The client went away or the socket failed; nothing to tell it.
    Gone,
    /// The client sent something unusable; tell it this, then close.
    Refused(ErrorMessage),
}

impl From<std::io::Error> for OpeningError {
    fn from(_: std::io::Error) -> Self {
        OpeningError::Gone
    }
}

/// Encryption requests a client may send before its start-up message (libpq tries GSS, then TLS).
const MAX_ENCRYPTION_REQUESTS: usize = 2;

/// Reads packets until a start-up message or a cancel request arrives, answering encryption requests and
/// protocol versions newer than 3.0 (with NegotiateProtocolVersion).
pub(crate) async fn read_opening(conn: &mut Conn, tls: Option<&TlsAcceptor>) -> Result<Opening, OpeningError> {
    let mut requests = 0;
    loop {
        let parsed = split_startup(&conn.rbuf)
            .map_err(|e| OpeningError::Refused(ErrorMessage::fatal(sqlstate::PROTOCOL_VIOLATION, e.to_string())))?;
        let Some((request, used)) = parsed else {
            if let ReadOutcome::Eof = conn.read_compact().await? {
                return Err(OpeningError::Gone);
            }
            continue;
        };
        let _ = conn.rbuf.split_to(used);
        match request {
            request @ (StartupRequest::Ssl | StartupRequest::GssEnc) => {
                requests += 1;
                if requests > MAX_ENCRYPTION_REQUESTS {
                    return Err(OpeningError::Refused(ErrorMessage::fatal(
                        sqlstate::PROTOCOL_VIOLATION,
                        "too many encryption requests",
                    )));
                }
                if !conn.rbuf.is_empty() {
                    // Bytes after an encryption request would be a TLS handshake sent blind: refuse.
                    return Err(OpeningError::Refused(ErrorMessage::fatal(
                        sqlstate::PROTOCOL_VIOLATION,
                        "received unencrypted data after an encryption request",
                    )));
                }
                match (request, tls) {
                    (StartupRequest::Ssl, Some(acceptor)) if matches!(conn.stream, Stream::Tcp(_)) => {
                        conn.send(bytes::Bytes::from_static(b"S")).await?;
                        let tcp = conn.take_tcp().ok_or(OpeningError::Gone)?;
                        let tls_stream = acceptor.accept(tcp).await.map_err(|e| {
                            tracing::info!(error = %e, "client TLS handshake failed");
                            OpeningError::Gone
                        })?;
                        conn.stream = Stream::TlsFromClient(Box::new(tls_stream));
                    }
                    _ => conn.send(bytes::Bytes::from_static(b"N")).await?,
                }
            }
            StartupRequest::Cancel { pid, secret } => return Ok(Opening::Cancel { pid, secret }),
            StartupRequest::Startup(msg) => {
                if msg.major != 3 {
                    // Versions 1 and 2 existed; anything else is not a start-up packet at all.
                    let code = if matches!(msg.major, 1 | 2) {
                        sqlstate::FEATURE_NOT_SUPPORTED
                    } else {
                        sqlstate::PROTOCOL_VIOLATION
                    };
                    return Err(OpeningError::Refused(ErrorMessage::fatal(
                        code,
                        format!(
                            "unsupported frontend protocol {}.{}: server supports 3.0 to 3.0",
                            msg.major, msg.minor
                        ),
                    )));
                }
                negotiate(conn, &msg);
                return Ok(Opening::Session(msg));
            }
        }
    }
}

/// Tells a client that asked for a newer minor version or for `_pq_.` options what pgmux speaks: 3.0 and
/// none of those options. The client then carries on with 3.0.
fn negotiate(conn: &mut Conn, msg: &StartupMessage) {
    let unrecognized: Vec<&str> =
        msg.params.iter().map(|(k, _)| k.as_str()).filter(|k| k.starts_with("_pq_.")).collect();
    if msg.minor == 0 && unrecognized.is_empty() {
        return;
    }
    let mut buf = BytesMut::new();
    encode::negotiate_protocol_version(&mut buf, 0, &unrecognized);
    // Queued: it goes out with the first authentication message.
    conn.out.push(buf.freeze());
}
