//! A connection from pgmux to PostgreSQL: opening it, logging in, and the few statements pgmux runs on its
//! own account (parameter sync, rollback of an abandoned transaction, liveness checks).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pgmux_proto::auth::{md5, scram};
use pgmux_proto::backend::{self, AuthRequest, ErrorFields};
use pgmux_proto::{Sender, Step, TxStatus, encode};
use tokio::net::TcpStream;

use crate::config::SslMode;
use crate::credentials::LoginInfo;
use crate::io::{Conn, ReadOutcome, Stream};
use crate::params::ServerParams;
use crate::statements::{ServerStatements, Undo};
use crate::tls::ServerTls;
use crate::tracker::TxTracker;

/// Read buffer growth for server sockets: results can be large, so read in big pieces.
pub(crate) const SERVER_READ_CHUNK: usize = 32 * 1024;

/// Why pgmux could not open a server connection. The text names the server and the cause.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    #[error("could not connect to the database at {addr}: {source}")]
    Io { addr: String, source: io::Error },
    #[error("timed out after {}s connecting to the database at {addr}", .after.as_secs_f32())]
    Timeout { addr: String, after: Duration },
    #[error("the database at {addr} refused the login of user \"{user}\": {message} (SQLSTATE {code})")]
    Rejected { addr: String, user: String, code: String, message: String },
    #[error("the database at {addr} asks for {what}, which pgmux does not support")]
    Unsupported { addr: String, what: String },
    #[error("the database at {addr} asks for a password, and pgmux has none to give")]
    NoPassword { addr: String },
    #[error("the database at {addr} broke the protocol during login: {reason}")]
    Protocol { addr: String, reason: String },
    #[error("TLS with the database at {addr} failed: {reason}")]
    Tls { addr: String, reason: String },
    #[error("the database at {addr} does not offer TLS, and sslmode={mode} requires it")]
    NoTls { addr: String, mode: SslMode },
}

impl ConnectError {
    /// The server rejected the user or password (so fresh credentials may help).
    pub(crate) fn is_auth_failure(&self) -> bool {
        matches!(self, ConnectError::Rejected { code, .. } if code == "28P01" || code == "28000")
    }
}

/// A server error reply, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServerError {
    pub(crate) severity: String,
    pub(crate) code: String,
    pub(crate) message: String,
    pub(crate) detail: Option<String>,
    pub(crate) hint: Option<String>,
}

impl ServerError {
    pub(crate) fn from_fields(f: &ErrorFields<'_>) -> Self {
        ServerError {
            severity: f.severity.to_owned(),
            code: f.code.to_owned(),
            message: f.message.to_owned(),
            detail: f.detail.map(str::to_owned),
            hint: f.hint.map(str::to_owned),
        }
    }

    /// The same error for a client, at the given severity.
    pub(crate) fn to_client(&self, severity: encode::Severity) -> encode::ErrorMessage {
        encode::ErrorMessage {
            severity,
            code: self.code.clone().into(),
            message: self.message.clone(),
            detail: self.detail.clone(),
            hint: self.hint.clone(),
        }
    }
}

/// The connection broke while pgmux used it on its own account.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServerFailure {
    #[error("server connection lost: {0}")]
    Io(#[from] io::Error),
    #[error("server closed the connection")]
    Closed,
    #[error("server ended the session: {0}")]
    Fatal(String),
    #[error("server broke the protocol: {0}")]
    Protocol(String),
    #[error("server did not answer within {0:?}")]
    Timeout(Duration),
}

/// An open, logged-in server connection.
#[derive(Debug)]
pub(crate) struct ServerConn {
    pub(crate) id: u64,
    pub(crate) io: Conn,
    /// The address it is connected to, where cancel requests for it go.
    pub(crate) addr: SocketAddr,
    /// Its BackendKeyData.
    pub(crate) key: (i32, i32),
    pub(crate) params: ServerParams,
    pub(crate) statements: ServerStatements,
    /// What the server owes the client it is lent to; empty between loans.
    pub(crate) tracker: TxTracker<Undo>,
    /// Retire it when it is this old (0 = never): `server_lifetime` with jitter.
    pub(crate) lifetime: Duration,
}

impl ServerConn {
    /// Connects (with TLS as `tls` says) and logs in as `login` says, with `application_name` in the
    /// start-up packet if given (a control connection names itself from its first moment).
    pub(crate) async fn connect(
        login: &LoginInfo,
        tls: &ServerTls,
        id: u64,
        timeout: Duration,
        max_statements: usize,
        application_name: Option<&str>,
    ) -> Result<Self, ConnectError> {
        let addr = login.address();
        let connecting = Self::connect_inner(login, tls, id, max_statements, application_name);
        match tokio::time::timeout(timeout, connecting).await {
            Ok(result) => result,
            Err(_) => Err(ConnectError::Timeout { addr, after: timeout }),
        }
    }

    async fn connect_inner(
        login: &LoginInfo,
        tls: &ServerTls,
        id: u64,
        max_statements: usize,
        application_name: Option<&str>,
    ) -> Result<Self, ConnectError> {
        let addr = login.address();
        let io_err = |source| ConnectError::Io { addr: addr.clone(), source };
        let mut stream = TcpStream::connect((login.host.as_str(), login.port)).await.map_err(io_err)?;
        stream.set_nodelay(true).map_err(io_err)?;
        let peer = stream.peer_addr().map_err(io_err)?;
        let stream = match tls.mode() {
            SslMode::Disable => Stream::Tcp(stream),
            mode => match negotiate_tls(&mut stream).await.map_err(io_err)? {
                true => {
                    let tls_stream = tls
                        .handshake(stream, &login.host)
                        .await
                        .map_err(|e| ConnectError::Tls { addr: addr.clone(), reason: e.to_string() })?;
                    Stream::TlsToServer(Box::new(tls_stream))
                }
                false if mode.plaintext_ok() => Stream::Tcp(stream),
                false => return Err(ConnectError::NoTls { addr, mode }),
            },
        };
        let mut conn = ServerConn {
            id,
            io: Conn::with_stream(stream, Sender::Backend),
            addr: peer,
            key: (0, 0),
            params: ServerParams::default(),
            statements: ServerStatements::new(max_statements),
            tracker: TxTracker::default(),
            lifetime: Duration::ZERO,
        };
        conn.login(login, application_name).await?;
        Ok(conn)
    }

    async fn login(&mut self, login: &LoginInfo, application_name: Option<&str>) -> Result<(), ConnectError> {
        let addr = login.address();
        let protocol = |reason: String| ConnectError::Protocol { addr: addr.clone(), reason };
        let mut buf = BytesMut::new();
        let mut params = vec![("user", login.user.as_str()), ("database", login.dbname.as_str())];
        params.extend(application_name.map(|name| ("application_name", name)));
        encode::startup_message(&mut buf, &params);
        self.io.send(buf.freeze()).await.map_err(|source| ConnectError::Io { addr: addr.clone(), source })?;
        let mut scram: Option<scram::ScramClient> = None;
        loop {
            let (tag, msg) = self.read_message().await.map_err(|e| protocol(e.to_string()))?;
            let body = &msg[5..];
            match tag {
                b'R' => {
                    let req = backend::auth_request(body).map_err(|e| protocol(e.to_string()))?;
                    if let Some(reply) = self.auth_reply(login, req, &mut scram)? {
                        self.io.send(reply).await.map_err(|source| ConnectError::Io { addr: addr.clone(), source })?;
                    }
                }
                b'E' => {
                    let f = ErrorFields::parse(body).map_err(|e| protocol(e.to_string()))?;
                    return Err(ConnectError::Rejected {
                        addr,
                        user: login.user.clone(),
                        code: f.code.to_owned(),
                        message: f.message.to_owned(),
                    });
                }
                b'S' => {
                    let (name, value) = backend::parameter_status(body).map_err(|e| protocol(e.to_string()))?;
                    self.params.report(name, value);
                }
                b'K' => self.key = backend::backend_key_data(body).map_err(|e| protocol(e.to_string()))?,
                b'Z' => return Ok(()),
                // Notices and protocol negotiation carry nothing pgmux needs at login.
                b'N' | b'v' => {}
                other => return Err(protocol(format!("unexpected message {:?}", other as char))),
            }
        }
    }

    /// The answer to an authentication request, if it needs one.
    fn auth_reply(
        &self,
        login: &LoginInfo,
        req: AuthRequest<'_>,
        scram: &mut Option<scram::ScramClient>,
    ) -> Result<Option<Bytes>, ConnectError> {
        let addr = login.address();
        let password = || login.password.as_deref().ok_or_else(|| ConnectError::NoPassword { addr: addr.clone() });
        let mut buf = BytesMut::new();
        match req {
            AuthRequest::Ok => return Ok(None),
            AuthRequest::Cleartext => encode::password_message(&mut buf, password()?),
            AuthRequest::Md5 { salt } => {
                encode::password_message(&mut buf, &md5::client_response(&login.user, password()?, salt));
            }
            AuthRequest::Sasl { mechanisms } => {
                if !mechanisms.contains(&scram::MECHANISM) {
                    return Err(ConnectError::Unsupported { addr, what: format!("SASL {}", mechanisms.join(", ")) });
                }
                let client = scram::ScramClient::new(password()?);
                encode::sasl_initial_response(&mut buf, scram::MECHANISM, &client.client_first());
                *scram = Some(client);
            }
            AuthRequest::SaslContinue(data) => {
                let client = scram.as_mut().ok_or_else(|| ConnectError::Protocol {
                    addr: addr.clone(),
                    reason: "SASL continue without a SASL exchange".into(),
                })?;
                let reply = client
                    .server_first(data)
                    .map_err(|e| ConnectError::Protocol { addr: addr.clone(), reason: e.to_string() })?;
                encode::sasl_response(&mut buf, &reply);
            }
            AuthRequest::SaslFinal(data) => {
                let client = scram.as_mut().ok_or_else(|| ConnectError::Protocol {
                    addr: addr.clone(),
                    reason: "SASL final without a SASL exchange".into(),
                })?;
                client.server_final(data).map_err(|e| ConnectError::Protocol { addr, reason: e.to_string() })?;
                return Ok(None);
            }
            AuthRequest::Unsupported(code) => {
                return Err(ConnectError::Unsupported { addr, what: format!("authentication method {code}") });
            }
        }
        Ok(Some(buf.freeze()))
    }

    /// Reads one whole message (header included). Only for phases where no large row can arrive.
    pub(crate) async fn read_message(&mut self) -> Result<(u8, Bytes), ServerFailure> {
        loop {
            match self.io.framer.step(&self.io.rbuf) {
                Ok(Step::Message { tag, len }) => return Ok((tag, self.io.rbuf.split_to(len).freeze())),
                Ok(Step::Stream { .. }) => {
                    return Err(ServerFailure::Protocol("unexpected large row outside a client's query".into()));
                }
                Ok(Step::NeedMore { .. }) => {}
                Err(e) => return Err(ServerFailure::Protocol(e.to_string())),
            }
            if let ReadOutcome::Eof = self.io.read(SERVER_READ_CHUNK).await? {
                return Err(ServerFailure::Closed);
            }
        }
    }

    /// Sends `messages` (pgmux's own) and reads the replies up to the `expect`-th ReadyForQuery. Rows and
    /// command tags are dropped; ParameterStatus is recorded. Returns the first ordinary error the server
    /// reported, if any, and the final transaction status.
    pub(crate) async fn exchange(
        &mut self,
        messages: Bytes,
        expect: u32,
        timeout: Duration,
    ) -> Result<(Option<ServerError>, TxStatus), ServerFailure> {
        let work = async {
            self.io.send(messages).await?;
            let mut first_error = None;
            let mut left = expect;
            loop {
                let (tag, msg) = self.read_message().await?;
                let body = &msg[5..];
                match tag {
                    b'Z' => {
                        let status =
                            backend::ready_for_query(body).map_err(|e| ServerFailure::Protocol(e.to_string()))?;
                        left -= 1;
                        if left == 0 {
                            return Ok((first_error, status));
                        }
                    }
                    b'E' => {
                        let f = ErrorFields::parse(body).map_err(|e| ServerFailure::Protocol(e.to_string()))?;
                        if f.is_fatal() {
                            return Err(ServerFailure::Fatal(f.message.to_owned()));
                        }
                        first_error.get_or_insert_with(|| ServerError::from_fields(&f));
                    }
                    b'S' => {
                        let (name, value) =
                            backend::parameter_status(body).map_err(|e| ServerFailure::Protocol(e.to_string()))?;
                        self.params.report(name, value);
                    }
                    _ => {}
                }
            }
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(ServerFailure::Timeout(timeout)),
        }
    }

    /// Runs one simple query on pgmux's own account and returns its rows as text (NULL as `None`).
    pub(crate) async fn query_rows(
        &mut self,
        sql: &str,
        timeout: Duration,
    ) -> Result<Vec<Vec<Option<String>>>, ServerFailure> {
        let work = async {
            let mut buf = BytesMut::new();
            encode::query(&mut buf, sql);
            self.io.send(buf.freeze()).await?;
            let mut rows = Vec::new();
            let mut error = None;
            loop {
                let (tag, msg) = self.read_message().await?;
                let body = &msg[5..];
                match tag {
                    b'D' => {
                        let cols = backend::data_row(body).map_err(|e| ServerFailure::Protocol(e.to_string()))?;
                        rows.push(
                            cols.into_iter().map(|c| c.map(|v| String::from_utf8_lossy(v).into_owned())).collect(),
                        );
                    }
                    b'E' => {
                        let f = ErrorFields::parse(body).map_err(|e| ServerFailure::Protocol(e.to_string()))?;
                        error = Some(format!("{} (SQLSTATE {})", f.message, f.code));
                    }
                    b'S' => {
                        let (name, value) =
                            backend::parameter_status(body).map_err(|e| ServerFailure::Protocol(e.to_string()))?;
                        self.params.report(name, value);
                    }
                    b'Z' => {
                        return match error {
                            Some(e) => Err(ServerFailure::Fatal(e)),
                            None => Ok(rows),
                        };
                    }
                    _ => {}
                }
            }
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(ServerFailure::Timeout(timeout)),
        }
    }

    /// Runs one simple query on pgmux's own account.
    pub(crate) async fn simple_query(
        &mut self,
        sql: &str,
        timeout: Duration,
    ) -> Result<(Option<ServerError>, TxStatus), ServerFailure> {
        let mut buf = BytesMut::new();
        encode::query(&mut buf, sql);
        self.exchange(buf.freeze(), 1, timeout).await
    }

    /// Brings a connection that a client left mid-way back to idle: ends a COPY the server still waits on,
    /// closes an open extended-protocol unit, reads and drops every reply still owed, and rolls back an
    /// open transaction. True if the server ends idle and can be lent again.
    pub(crate) async fn drain<N>(&mut self, state: &TxTracker<N>, timeout: Duration) -> bool {
        let work = async {
            let mut buf = BytesMut::new();
            let mut expect = state.pending();
            if state.copy_in() {
                encode::copy_fail(&mut buf, "client disconnected");
            }
            if state.unit_open() {
                encode::sync(&mut buf);
                expect += 1;
            }
            let mut status = state.status();
            if !buf.is_empty() {
                self.io.send(buf.split().freeze()).await?;
            }
            if expect > 0 {
                status = self.skip_until_ready(expect).await?;
            }
            if status != TxStatus::Idle {
                encode::query(&mut buf, "ROLLBACK");
                self.io.send(buf.freeze()).await?;
                status = self.skip_until_ready(1).await?;
            }
            Ok::<_, ServerFailure>(status == TxStatus::Idle)
        };
        matches!(tokio::time::timeout(timeout, work).await, Ok(Ok(true)))
    }

    /// Reads and drops everything up to the `count`-th ReadyForQuery, large rows included; returns its status.
    async fn skip_until_ready(&mut self, mut count: u32) -> Result<TxStatus, ServerFailure> {
        loop {
            match self.io.framer.step(&self.io.rbuf) {
                Ok(Step::Message { tag, len }) => {
                    let msg = self.io.rbuf.split_to(len);
                    let body = &msg[5..];
                    if tag == b'E' && ErrorFields::parse(body).is_ok_and(|f| f.is_fatal()) {
                        return Err(ServerFailure::Closed);
                    }
                    if tag == b'Z' {
                        count -= 1;
                        if count == 0 {
                            return backend::ready_for_query(body).map_err(|e| ServerFailure::Protocol(e.to_string()));
                        }
                    }
                    continue;
                }
                Ok(Step::Stream { take, .. }) => {
                    let _ = self.io.rbuf.split_to(take);
                    continue;
                }
                Ok(Step::NeedMore { .. }) => {}
                Err(e) => return Err(ServerFailure::Protocol(e.to_string())),
            }
            if let ReadOutcome::Eof = self.io.read(SERVER_READ_CHUNK).await? {
                return Err(ServerFailure::Closed);
            }
        }
    }

    /// True if the connection, idle in the pool, can be lent: nothing unread, no close seen.
    pub(crate) fn looks_alive(&mut self) -> bool {
        self.io.rbuf.is_empty() && !self.io.framer.mid_message() && !self.io.idle_peer_spoke()
    }

    /// Says goodbye politely and closes.
    pub(crate) async fn terminate(mut self: Box<Self>) {
        let mut buf = BytesMut::new();
        encode::terminate(&mut buf);
        let _ = tokio::time::timeout(Duration::from_secs(1), self.io.send(buf.freeze())).await;
    }
}

/// Sends an SSLRequest and reads the one-byte answer: true for `S` (go ahead with TLS), false for `N`.
async fn negotiate_tls(stream: &mut TcpStream) -> std::io::Result<bool> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut request = Vec::with_capacity(8);
    request.extend_from_slice(&8u32.to_be_bytes());
    request.extend_from_slice(&pgmux_proto::frontend::SSL_REQUEST_CODE.to_be_bytes());
    stream.write_all(&request).await?;
    let mut answer = [0u8; 1];
    stream.read_exact(&mut answer).await?;
    match answer[0] {
        b'S' => Ok(true),
        b'N' => Ok(false),
        other => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("unexpected answer {:?} to an SSLRequest", other as char),
        )),
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Logs in to a fake server that accepts anyone, and returns the start-up packet it received.
    async fn startup_packet(application_name: Option<&str>) -> Vec<u8> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let len = stream.read_u32().await.unwrap() as usize;
            let mut packet = vec![0u8; len - 4];
            stream.read_exact(&mut packet).await.unwrap();
            let mut reply = BytesMut::new();
            reply.extend_from_slice(&[b'R', 0, 0, 0, 8, 0, 0, 0, 0]);
            encode::ready_for_query(&mut reply, pgmux_proto::TxStatus::Idle);
            stream.write_all(&reply).await.unwrap();
            packet
        });
        let login =
            LoginInfo { host: "127.0.0.1".into(), port, user: "app".into(), password: None, dbname: "db".into() };
        let tls = ServerTls::new(SslMode::Disable, Vec::new()).unwrap();
        ServerConn::connect(&login, &tls, 0, Duration::from_secs(5), 0, application_name).await.unwrap();
        server.await.unwrap()
    }

    #[tokio::test]
    async fn a_control_connection_names_itself_in_its_startup_packet() {
        let named = startup_packet(Some("pgmux abc open=0 limit=2 cap=2")).await;
        let text = String::from_utf8_lossy(&named);
        assert!(text.contains("application_name\0pgmux abc open=0 limit=2 cap=2\0"), "{text:?}");
        let pool = startup_packet(None).await;
        assert!(!String::from_utf8_lossy(&pool).contains("application_name"), "pool connections take the client's");
    }
}
