//! A connection from pgmux to PostgreSQL: opening it, logging in, and the few statements pgmux runs on its
//! own account (parameter sync, rollback of an abandoned transaction, liveness checks).

mod failure;
mod own;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pgmux_proto::auth::{md5, scram};
use pgmux_proto::backend::{self, AuthRequest, ErrorFields};
use pgmux_proto::{Sender, encode};
use tokio::net::TcpStream;

pub(crate) use failure::{ConnectError, ServerError, ServerFailure};

use crate::config::{LoginInfo, Secret, SslMode};
use crate::io::{Conn, Stream};
use crate::params::ServerParams;
use crate::statements::{ServerStatements, Undo};
use crate::tls::ServerTls;
use crate::tracker::TxTracker;

/// Read buffer growth for server sockets: results can be large, so read in big pieces.
pub(crate) const SERVER_READ_CHUNK: usize = 32 * 1024;

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
    /// Its entry in the admin console's list of servers (pool connections only).
    pub(crate) ticket: Option<crate::observe::ServerTicket>,
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
            ticket: None,
        };
        conn.login(login, application_name).await?;
        Ok(conn)
    }

    /// Sends the start-up packet and answers authentication requests until the server is ready.
    async fn login(&mut self, login: &LoginInfo, application_name: Option<&str>) -> Result<(), ConnectError> {
        let addr = login.address();
        let mut buf = BytesMut::new();
        let mut params = vec![("user", login.user.as_str()), ("database", login.dbname.as_str())];
        params.extend(application_name.map(|name| ("application_name", name)));
        encode::startup_message(&mut buf, &params);
        self.io.send(buf.freeze()).await.map_err(|source| ConnectError::Io { addr: addr.clone(), source })?;
        let mut scram: Option<scram::ScramClient> = None;
        loop {
            let (tag, msg) =
                self.read_message().await.map_err(|failure| ConnectError::Protocol { addr: addr.clone(), failure })?;
            if self.login_message(login, tag, &msg[5..], &mut scram).await? {
                return Ok(());
            }
        }
    }

    /// Acts on one message of the login phase; true when it was the final ReadyForQuery.
    async fn login_message(
        &mut self,
        login: &LoginInfo,
        tag: u8,
        body: &[u8],
        scram: &mut Option<scram::ScramClient>,
    ) -> Result<bool, ConnectError> {
        let protocol = |failure: ServerFailure| ConnectError::Protocol { addr: login.address(), failure };
        match tag {
            b'R' => {
                let req = backend::auth_request(body).map_err(|e| protocol(e.into()))?;
                if let Some(reply) = self.auth_reply(login, req, scram)? {
                    self.io.send(reply).await.map_err(|source| ConnectError::Io { addr: login.address(), source })?;
                }
            }
            b'E' => {
                let f = ErrorFields::parse(body).map_err(|e| protocol(e.into()))?;
                let error = Box::new(ServerError::from_fields(&f));
                return Err(ConnectError::Rejected { addr: login.address(), user: login.user.clone(), error });
            }
            b'S' => {
                let (name, value) = backend::parameter_status(body).map_err(|e| protocol(e.into()))?;
                self.params.report(name, value);
            }
            b'K' => self.key = backend::backend_key_data(body).map_err(|e| protocol(e.into()))?,
            b'Z' => return Ok(true),
            // Notices and protocol negotiation carry nothing pgmux needs at login.
            b'N' | b'v' => {}
            other => return Err(protocol(ServerFailure::Unexpected(crate::tracker::Unexpected(other)))),
        }
        Ok(false)
    }

    /// The answer to an authentication request, if it needs one.
    fn auth_reply(
        &self,
        login: &LoginInfo,
        req: AuthRequest<'_>,
        scram: &mut Option<scram::ScramClient>,
    ) -> Result<Option<Bytes>, ConnectError> {
        let addr = login.address();
        let password = || {
            login.password.as_ref().map(Secret::expose).ok_or_else(|| ConnectError::NoPassword { addr: addr.clone() })
        };
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
                let client = scram.as_mut().ok_or_else(|| ConnectError::Scram { addr: addr.clone(), error: None })?;
                let reply = client
                    .server_first(data)
                    .map_err(|e| ConnectError::Scram { addr: addr.clone(), error: Some(e) })?;
                encode::sasl_response(&mut buf, &reply);
            }
            AuthRequest::SaslFinal(data) => {
                let client = scram.as_mut().ok_or_else(|| ConnectError::Scram { addr: addr.clone(), error: None })?;
                client.server_final(data).map_err(|e| ConnectError::Scram { addr, error: Some(e) })?;
                return Ok(None);
            }
            AuthRequest::Unsupported(code) => {
                return Err(ConnectError::Unsupported { addr, what: format!("authentication method {code}") });
            }
        }
        Ok(Some(buf.freeze()))
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
