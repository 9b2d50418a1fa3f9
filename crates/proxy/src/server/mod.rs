//! A connection from pgmux to PostgreSQL: opening it, logging in, and the few statements pgmux runs on its
//! own account (parameter sync, rollback of an abandoned transaction, liveness checks), shielded from the
//! settings of the session on the connection ([`guard`]).

mod connect_error;
pub(crate) mod guard;
mod own;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pgmux_proto::auth::{md5, scram};
use pgmux_proto::backend::{self, AuthRequest, ErrorFields};
use pgmux_proto::{Sender, encode};
use tokio::net::TcpStream;

pub(crate) use connect_error::ConnectError;

use crate::protocol::failure::{ServerError, ServerFailure};

use crate::config::{LoginInfo, NodeRole, Secret, SslMode};
use crate::net::io::{Conn, Stream};
use crate::net::tls::ServerTls;
use crate::observe::ServerTicket;
use crate::protocol::params::ServerParams;
use crate::protocol::statements::{ServerStatements, Undo};
use crate::protocol::tracker::TxTracker;

/// Read buffer growth for server sockets: results can be large, so read in big pieces.
pub(crate) const SERVER_READ_CHUNK: usize = 32 * 1024;

/// Chunks an idle server connection's write queue keeps room for (see `Conn::shrink_if_idle`).
pub(crate) const SERVER_QUEUE_SLOTS: usize = 8;

/// How a server socket behaves: keepalive and TCP_USER_TIMEOUT, so that a server that vanished (a black hole,
/// a host that died) is noticed in seconds rather than the kernel's hours.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SocketOptions {
    /// Idle time, interval and count of keepalive probes; `None` leaves keepalive off.
    pub(crate) keepalive: Option<(Duration, Duration, u32)>,
    /// TCP_USER_TIMEOUT; zero leaves the kernel's default.
    pub(crate) user_timeout: Duration,
}

impl SocketOptions {
    fn apply(&self, stream: &TcpStream) -> std::io::Result<()> {
        let socket = socket2::SockRef::from(stream);
        if let Some((idle, interval, count)) = self.keepalive {
            let keepalive =
                socket2::TcpKeepalive::new().with_time(idle).with_interval(interval).with_retries(count.max(1));
            socket.set_tcp_keepalive(&keepalive)?;
        }
        if !self.user_timeout.is_zero() {
            socket.set_tcp_user_timeout(Some(self.user_timeout))?;
        }
        Ok(())
    }
}

/// What a new server connection is for, and how to open it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectOptions<'a> {
    pub(crate) id: u64,
    /// Longest to connect and log in (`server_connect_timeout`).
    pub(crate) timeout: Duration,
    /// Sent in the start-up packet: a control connection names itself from its first moment.
    pub(crate) application_name: Option<&'a str>,
    pub(crate) socket: SocketOptions,
    /// Learn the node's role even if the server does not report it at login (one query).
    pub(crate) need_role: bool,
    /// Connect to this address instead of resolving the host name (a probe of one node); TLS still checks
    /// the host name.
    pub(crate) to: Option<SocketAddr>,
}

/// An open, logged-in server connection.
#[derive(Debug)]
pub(crate) struct ServerConn {
    pub(crate) id: u64,
    pub(crate) io: Conn,
    /// The address it is connected to, where cancel requests for it go; it names the node.
    pub(crate) addr: SocketAddr,
    /// The local end of its socket (SHOW SERVERS' `local_addr`, `local_port`), read once at connect.
    pub(crate) local: Option<SocketAddr>,
    /// Its BackendKeyData.
    pub(crate) key: (i32, i32),
    pub(crate) params: ServerParams,
    pub(crate) statements: ServerStatements,
    /// What the server owes the client it is lent to; empty between loans.
    pub(crate) tracker: TxTracker<Undo>,
    /// Retired from this moment on (a `clock::now_ns` moment; `u64::MAX`: never): its opening plus its own
    /// `server_lifetime` with jitter. Kept as a moment so that the checks before and after each loan are
    /// integer comparisons, without a clock reading of their own or `Instant` arithmetic.
    pub(crate) retire_at_ns: u64,
    /// When it was last given back after a transaction (a `clock::now_ns` moment; its opening before
    /// that): `server_check_delay` counts from here. A connection that went back another way (a lease
    /// dropped) keeps the earlier moment, which can only make a check come sooner.
    pub(crate) idle_since_ns: u64,
    /// Its entry in the admin console's list of servers (pool connections only).
    pub(crate) ticket: Option<ServerTicket>,
    /// The node's role, as the server reported it (kept up to date from ParameterStatus), if known.
    pub(crate) role: Option<NodeRole>,
    /// The pool's stale-node epoch this connection was last checked against (see `ServerPool`).
    pub(crate) checked_epoch: u64,
    /// While it was lent, something may have shown a new role for its node (`default_transaction_read_only`
    /// reported anew: a client's SET or a reload; `in_hot_standby` turned off; a 25006): it is asked
    /// ([`ask_role`](Self::ask_role)) before it goes back to the pool.
    pub(crate) role_unconfirmed: bool,
}

impl ServerConn {
    /// Connects (with TLS as `tls` says) and logs in as `login` says.
    pub(crate) async fn connect(
        login: &LoginInfo,
        tls: &ServerTls,
        options: ConnectOptions<'_>,
    ) -> Result<Self, ConnectError> {
        let addr = login.address();
        match pgmux_timer::timeout(options.timeout, Self::connect_inner(login, tls, options)).await {
            Ok(result) => result,
            Err(_) => Err(ConnectError::Timeout { addr, after: options.timeout }),
        }
    }

    async fn connect_inner(
        login: &LoginInfo,
        tls: &ServerTls,
        options: ConnectOptions<'_>,
    ) -> Result<Self, ConnectError> {
        let addr = login.address();
        let io_err = |source| ConnectError::Io { addr: addr.clone(), source };
        // Resolved anew for every connection: a host name that moved (a failover) is followed at once.
        let mut stream = match options.to {
            Some(node) => TcpStream::connect(node).await,
            None => TcpStream::connect((login.host.as_str(), login.port)).await,
        }
        .map_err(io_err)?;
        stream.set_nodelay(true).map_err(io_err)?;
        options.socket.apply(&stream).map_err(io_err)?;
        let peer = stream.peer_addr().map_err(io_err)?;
        let local = stream.local_addr().ok();
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
            id: options.id,
            io: Conn::with_stream(stream, Sender::Backend),
            addr: peer,
            local,
            key: (0, 0),
            params: ServerParams::default(),
            statements: ServerStatements::new(),
            tracker: TxTracker::default(),
            retire_at_ns: u64::MAX,
            idle_since_ns: 0,
            ticket: None,
            role: None,
            checked_epoch: 0,
            role_unconfirmed: false,
        };
        conn.login(login, options.application_name).await?;
        conn.role = conn.reported_role();
        if conn.role.is_none() && options.need_role {
            conn.role =
                Some(conn.ask_role(options.timeout).await.map_err(|failure| ConnectError::Protocol { addr, failure })?);
        }
        Ok(conn)
    }

    /// Says why this connection is about to close, for `pgmux_server_connections_closed_total`.
    pub(crate) fn closing(&self, reason: pgmux_metrics::ServerCloseReason) {
        if let Some(ticket) = &self.ticket {
            ticket.closing(reason);
        }
    }

    /// The role the server reported at login or since (`in_hot_standby`, `default_transaction_read_only`).
    pub(crate) fn reported_role(&self) -> Option<NodeRole> {
        let value = |name: &str| self.params.reported.get(name).map(|p| p.value.as_str());
        NodeRole::from_settings(value("in_hot_standby"), value("default_transaction_read_only"))
    }

    /// Asks the server for its node's role: at login when it does not report `in_hot_standby` (before
    /// PostgreSQL 14), and when something a client did while linked may have shown a new role. The value of
    /// `default_transaction_read_only` a RESET would restore is the node's (or the role's), whatever the
    /// session set.
    pub(crate) async fn ask_role(&mut self, timeout: Duration) -> Result<NodeRole, ServerFailure> {
        const ASK: &str = "SELECT pg_catalog.pg_is_in_recovery(), reset_val FROM pg_catalog.pg_settings \
                           WHERE name = 'default_transaction_read_only';";
        let rows = self.run_own(&guard::guarded(ASK, self.major_version()), timeout).await?;
        let row = rows.first().map(Vec::as_slice).unwrap_or_default();
        Ok(match row {
            [Some(recovery), _] if recovery == "t" => NodeRole::Standby,
            [_, Some(read_only)] if read_only == "on" => NodeRole::ReadOnly,
            _ => NodeRole::ReadWrite,
        })
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
            other => return Err(protocol(ServerFailure::Unexpected(crate::protocol::tracker::Unexpected(other)))),
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
        // A password from an auth file may be stored as an md5 hash (which answers md5) or a SCRAM verifier
        // (which answers nothing by itself: SCRAM passthrough brings a client's proved key instead).
        let plaintext = |what: &'static str| {
            let password = password()?;
            let stored = match password {
                p if md5::is_stored_hash(p) => "an md5 hash",
                p if p.starts_with("SCRAM-SHA-256$") => "a SCRAM verifier",
                p => return Ok(p),
            };
            Err(ConnectError::StoredPassword { addr: addr.clone(), user: login.user.clone(), what, stored })
        };
        let mut buf = BytesMut::new();
        match req {
            AuthRequest::Ok => return Ok(None),
            AuthRequest::Cleartext => encode::password_message(&mut buf, plaintext("a cleartext password")?),
            AuthRequest::Md5 { salt } => {
                let response = match password()? {
                    stored if md5::is_stored_hash(stored) => md5::response_from_stored(stored, salt),
                    _ => md5::client_response(&login.user, plaintext("md5")?, salt),
                };
                encode::password_message(&mut buf, &response);
            }
            AuthRequest::Sasl { mechanisms } => {
                if !mechanisms.contains(&scram::MECHANISM) {
                    return Err(ConnectError::Unsupported { addr, what: format!("SASL {}", mechanisms.join(", ")) });
                }
                // SCRAM passthrough: the key a client proved answers for it, no password needed.
                let client = match &login.scram_keys {
                    Some(keys) => scram::ScramClient::with_keys(keys.clone()),
                    None => scram::ScramClient::new(plaintext("scram-sha-256")?),
                };
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
        let login = LoginInfo {
            host: "127.0.0.1".into(),
            port,
            user: "app".into(),
            password: None,
            dbname: "db".into(),
            scram_keys: None,
        };
        let tls = ServerTls::new(SslMode::Disable, Vec::new()).unwrap();
        let options = ConnectOptions {
            id: 0,
            timeout: Duration::from_secs(5),
            application_name,
            socket: SocketOptions::default(),
            need_role: false,
            to: None,
        };
        ServerConn::connect(&login, &tls, options).await.unwrap();
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
