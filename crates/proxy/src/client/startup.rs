//! The first packets of a client connection: encryption requests (TLS when a certificate is configured,
//! `N` otherwise; GSSAPI always `N`), cancel requests, protocol version negotiation, and the start-up
//! message.

use bytes::BytesMut;
use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::frontend::{GSSENC_REQUEST_CODE, SSL_REQUEST_CODE, StartupMessage, StartupRequest, split_startup};
use pgmux_proto::{encode, sqlstate};

use tokio_rustls::TlsAcceptor;

use crate::net::io::{Conn, ReadOutcome, Stream};

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
    /// Nothing (more) to tell the client: it went away, its socket failed, or it was told already.
    Gone,
    /// The client sent something unusable; tell it this, then close.
    Refused(ErrorMessage),
}

impl From<std::io::Error> for OpeningError {
    fn from(_: std::io::Error) -> Self {
        OpeningError::Gone
    }
}

/// Reads packets until a start-up message or a cancel request arrives, answering encryption requests and
/// protocol versions newer than 3.0 (with NegotiateProtocolVersion).
///
/// Encryption requests follow PostgreSQL's rules: one SSLRequest, and one GSSENCRequest (refused here, as
/// pgmux has no GSSAPI) that may come before or after it; once TLS is on, neither again. A request that
/// comes when it may not is refused as PostgreSQL refuses it, as an unsupported protocol code.
pub(crate) async fn read_opening(conn: &mut Conn, tls: Option<&TlsAcceptor>) -> Result<Opening, OpeningError> {
    let (mut ssl_done, mut gss_done) = (false, false);
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
            StartupRequest::Ssl if !ssl_done => {
                refuse_data_after_request(conn)?;
                ssl_done = true;
                match tls {
                    Some(acceptor) if matches!(conn.stream, Stream::Tcp(_)) => {
                        conn.send(bytes::Bytes::from_static(b"S")).await?;
                        let tcp = conn.take_tcp().ok_or(OpeningError::Gone)?;
                        // Boxed: the handshake's state is about 1 KB, which every client's opening would
                        // otherwise carry (and copy as it is built), TLS or not.
                        let tls_stream = Box::pin(acceptor.accept(tcp)).await.map_err(|e| {
                            tracing::info!(error = %e, "client TLS handshake failed");
                            OpeningError::Gone
                        })?;
                        conn.stream = Stream::TlsFromClient(Box::new(tls_stream));
                        gss_done = true;
                    }
                    // PostgreSQL lets a client refused TLS ask for GSSAPI next.
                    _ => {
                        conn.send(bytes::Bytes::from_static(b"N")).await?;
                        gss_done = false;
                    }
                }
            }
            StartupRequest::GssEnc if !gss_done => {
                refuse_data_after_request(conn)?;
                conn.send(bytes::Bytes::from_static(b"N")).await?;
                // And a client refused GSSAPI may ask for TLS next.
                (gss_done, ssl_done) = (true, false);
            }
            StartupRequest::Ssl => return Err(unsupported(conn, SSL_REQUEST_CODE as u32).await),
            StartupRequest::GssEnc => return Err(unsupported(conn, GSSENC_REQUEST_CODE as u32).await),
            StartupRequest::Unsupported(code) => return Err(unsupported(conn, code).await),
            StartupRequest::Cancel { pid, secret } => return Ok(Opening::Cancel { pid, secret }),
            StartupRequest::Startup(msg) => {
                negotiate(conn, &msg);
                return Ok(Opening::Session(msg));
            }
        }
    }
}

/// Bytes after an encryption request would be a TLS handshake sent blind, or injected: refused.
fn refuse_data_after_request(conn: &Conn) -> Result<(), OpeningError> {
    if conn.rbuf.is_empty() {
        return Ok(());
    }
    Err(OpeningError::Refused(ErrorMessage::fatal(
        sqlstate::PROTOCOL_VIOLATION,
        "received unencrypted data after an encryption request",
    )))
}

/// Refuses a start-up packet whose code pgmux does not speak with PostgreSQL's own answer, written here
/// because a client that asked for protocol 1 or 2 gets it in the old format.
async fn unsupported(conn: &mut Conn, code: u32) -> OpeningError {
    tracing::info!(code = sqlstate::FEATURE_NOT_SUPPORTED, message = %encode::unsupported_protocol_text(code),
        "client login refused");
    let mut buf = BytesMut::new();
    encode::unsupported_protocol(&mut buf, code);
    let _ = pgmux_timer::timeout(std::time::Duration::from_secs(1), conn.send(buf.freeze())).await;
    // Told already: nothing more to send.
    OpeningError::Gone
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
