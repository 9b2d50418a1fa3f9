//! Checking who a client is: `trust`, `md5` or `scram-sha-256`. Clients log in as the database user pgmux
//! logs in as (from `database_url`, or from the secret), with `client_password` or database_url's password.
//! Wrong users and wrong passwords fail the same way, as PostgreSQL's do, so the error says nothing about
//! which user names exist.

use bytes::{Bytes, BytesMut};
use pgmux_proto::auth::{md5, scram};
use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::{Step, encode, frontend, sqlstate};

use crate::client::startup::OpeningError;
use crate::config::{ClientAuth, Config, Secret};
use crate::net::io::{Conn, ReadOutcome};

/// What pgmux checks client logins against, prepared once at start-up.
#[derive(Debug)]
pub(crate) struct Authenticator {
    method: ClientAuth,
    password: Option<Secret>,
    /// Derived at the first SCRAM login rather than at start-up: it costs 4096 hash rounds.
    scram_secret: std::sync::OnceLock<scram::ScramSecret>,
}

impl Authenticator {
    pub(crate) fn new(config: &Config) -> Self {
        Authenticator {
            method: config.client_auth,
            password: config.client_password().cloned(),
            scram_secret: std::sync::OnceLock::new(),
        }
    }

    /// Runs the exchange for `user`, who must be `served` (the user pgmux logs in as). On success nothing
    /// is sent yet: the caller sends AuthenticationOk.
    pub(crate) async fn authenticate(&self, conn: &mut Conn, user: &str, served: &str) -> Result<(), OpeningError> {
        let failed = || {
            OpeningError::Refused(ErrorMessage::fatal(
                sqlstate::INVALID_PASSWORD,
                format!("password authentication failed for user \"{user}\""),
            ))
        };
        let known = user == served;
        match self.method {
            ClientAuth::Trust if known => Ok(()),
            ClientAuth::Trust => Err(OpeningError::Refused(ErrorMessage::fatal(
                sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                format!("role \"{user}\" does not exist"),
            ))),
            ClientAuth::Md5 => {
                let mut salt = [0u8; 4];
                rand::fill(&mut salt);
                let mut buf = BytesMut::new();
                encode::auth_md5(&mut buf, salt);
                conn.send(buf.freeze()).await?;
                let reply = read_password_message(conn).await?;
                let answer = frontend::password(&reply[5..]).map_err(|_| failed())?;
                let password = self.password.as_ref().map(Secret::expose).unwrap_or_default();
                if known && md5::verify(user, password, salt, answer) { Ok(()) } else { Err(failed()) }
            }
            ClientAuth::ScramSha256 => {
                // An unknown user still gets a full exchange, against a secret nobody knows.
                let secret = match (&self.password, known) {
                    (Some(pw), true) => self
                        .scram_secret
                        .get_or_init(|| scram::ScramSecret::generate(pw.expose(), scram::DEFAULT_ITERATIONS))
                        .clone(),
                    _ => scram::ScramSecret::generate(&random_password(), scram::DEFAULT_ITERATIONS),
                };
                self.scram(conn, secret).await.map_err(|e| match e {
                    ScramOutcome::Gone => OpeningError::Gone,
                    ScramOutcome::Protocol(m) => OpeningError::Refused(m),
                    ScramOutcome::Failed => failed(),
                })
            }
        }
    }

    async fn scram(&self, conn: &mut Conn, secret: scram::ScramSecret) -> Result<(), ScramOutcome> {
        let mut server = scram::ScramServer::new(secret);
        let mut buf = BytesMut::new();
        encode::auth_sasl(&mut buf, &[scram::MECHANISM]);
        conn.send(buf.split().freeze()).await.map_err(|_| ScramOutcome::Gone)?;

        let initial = read_password_message(conn).await.map_err(ScramOutcome::from)?;
        let (mechanism, data) = frontend::sasl_initial_response(&initial[5..])
            .map_err(|e| ScramOutcome::Protocol(ErrorMessage::fatal(sqlstate::PROTOCOL_VIOLATION, e.to_string())))?;
        if mechanism != scram::MECHANISM {
            return Err(ScramOutcome::Protocol(ErrorMessage::fatal(
                sqlstate::PROTOCOL_VIOLATION,
                format!("client selected an invalid SASL authentication mechanism: {mechanism}"),
            )));
        }
        let first = server.client_first(data).map_err(scram_error)?;
        encode::auth_sasl_continue(&mut buf, &first);
        conn.send(buf.split().freeze()).await.map_err(|_| ScramOutcome::Gone)?;

        let fin = read_password_message(conn).await.map_err(ScramOutcome::from)?;
        let last = server.client_final(&fin[5..]).map_err(scram_error)?;
        encode::auth_sasl_final(&mut buf, &last);
        conn.out.push(buf.split().freeze());
        Ok(())
    }
}

enum ScramOutcome {
    Gone,
    Protocol(ErrorMessage),
    Failed,
}

impl From<OpeningError> for ScramOutcome {
    fn from(e: OpeningError) -> Self {
        match e {
            OpeningError::Gone => ScramOutcome::Gone,
            OpeningError::Refused(m) => ScramOutcome::Protocol(m),
        }
    }
}

fn scram_error(e: scram::ScramError) -> ScramOutcome {
    match e {
        scram::ScramError::InvalidProof => ScramOutcome::Failed,
        other => ScramOutcome::Protocol(ErrorMessage::fatal(sqlstate::PROTOCOL_VIOLATION, other.to_string())),
    }
}

fn random_password() -> String {
    let mut raw = [0u8; 24];
    rand::fill(&mut raw);
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads the client's next message, which must be a password / SASL message (`p`).
async fn read_password_message(conn: &mut Conn) -> Result<Bytes, OpeningError> {
    loop {
        match conn.framer.step(&conn.rbuf) {
            Ok(Step::Message { tag: b'p', len }) => return Ok(conn.rbuf.split_to(len).freeze()),
            // A client that gives up (Terminate) or sends anything else instead of a password is done.
            Ok(Step::Message { tag: b'X', .. }) => return Err(OpeningError::Gone),
            Ok(Step::Message { tag, .. }) | Ok(Step::Stream { tag, .. }) => {
                return Err(OpeningError::Refused(ErrorMessage::fatal(
                    sqlstate::PROTOCOL_VIOLATION,
                    format!("expected a password message, got message type {:?}", tag as char),
                )));
            }
            Ok(Step::NeedMore { .. }) => {}
            Err(e) => {
                return Err(OpeningError::Refused(ErrorMessage::fatal(sqlstate::PROTOCOL_VIOLATION, e.to_string())));
            }
        }
        if let ReadOutcome::Eof = conn.read_compact().await? {
            return Err(OpeningError::Gone);
        }
    }
}
