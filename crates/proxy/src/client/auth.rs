//! Checking who a client is: `trust`, `md5`, `scram-sha-256` or `plain` (the password in clear text, which
//! the session accepts only over a private link: TLS, the Unix socket or loopback). With only `database_url`, clients log in as
//! the user pgmux logs in as, with `client_password` or the URL's password. With named databases, any user
//! pgmux knows ([`UserBook`]: `[[users]]`, the `auth_file`, database_url's user) logs in with its own
//! password, stored in plaintext, as an md5 hash or as a SCRAM verifier; a SCRAM login against a verifier
//! hands back the client's proved key (SCRAM passthrough). Passthrough asks for the password in clear text
//! (`cleartext`), and `auth_query` brings the stored password of a user the book lacks.
//!
//! Under hba, cert and peer, `client::access` has chosen one of those for the connection first.
//!
//! Under md5, scram-sha-256 and plain an unknown user goes through the whole exchange and fails as a wrong
//! password does (28P01), as PostgreSQL's own users do, so that the error says nothing about which names
//! exist; under trust there is nothing to hide, and an unknown user gets 28000.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use pgmux_proto::auth::{md5, plain, scram};
use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::{Step, encode, frontend, sqlstate};

use crate::client::startup::OpeningError;
use crate::config::auth_file::UserBook;
use crate::config::credentials::PoolCredentials;
use crate::config::{ClientAuth, Config, Secret};
use crate::net::io::{Conn, ReadOutcome};
use crate::pools::auth_query::Lookup;

/// What a login is checked against.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Expected<'a> {
    /// pgmux knows no such user.
    Unknown,
    /// A known user and its stored password (plaintext, `md5…`, or a SCRAM verifier), if it has one.
    Known(Option<&'a Secret>),
}

/// What pgmux checks client logins against, and the users it knows, prepared at start-up and on each reload.
#[derive(Debug)]
pub(crate) struct Authenticator {
    method: ClientAuth,
    /// The default pool's password for its one user (client_password, or database_url's).
    password: Option<Secret>,
    /// Every user the named databases may be logged in to as.
    book: UserBook,
    /// Where pools whose route or user asks for IAM or a secret get their logins (the binary's).
    pool_credentials: Option<Arc<dyn PoolCredentials>>,
    /// SCRAM secrets by user, with their HMAC keys hashed in, made at each user's first SCRAM login rather
    /// than at start-up: one derived from a plaintext password costs 4096 hash rounds, and a verifier's keys
    /// hashed in save each later login four SHA-256 blocks. Keyed by user, so two users never share one, and
    /// used only while the user's stored password is the one it was made from (an auth_query lookup may
    /// read a new one). At most [`SCRAM_CACHE_LIMIT`] users; past that, secrets are made per login.
    scram_secrets: Mutex<HashMap<String, CachedSecret>>,
}

/// Most users [`Authenticator`] keeps a SCRAM secret for.
const SCRAM_CACHE_LIMIT: usize = 4096;

/// A user's SCRAM secret and the stored password (plaintext or verifier) it was made from.
#[derive(Debug)]
struct CachedSecret {
    from: Secret,
    keyed: scram::KeyedSecret,
}

impl Authenticator {
    pub(crate) fn new(config: &Config, book: UserBook, pool_credentials: Option<Arc<dyn PoolCredentials>>) -> Self {
        Authenticator {
            method: config.client_auth,
            password: config.client_password().cloned(),
            book,
            pool_credentials,
            scram_secrets: Mutex::default(),
        }
    }

    /// Checks logins against `config` alone (no auth file, no AWS): tests.
    #[cfg(test)]
    pub(crate) fn from_config(config: &Config) -> Self {
        Authenticator::new(config, UserBook::build(config, Vec::new()), None)
    }

    /// How clients prove who they are (the global setting).
    pub(crate) fn method(&self) -> ClientAuth {
        self.method
    }

    /// The users pgmux knows.
    pub(crate) fn book(&self) -> &UserBook {
        &self.book
    }

    /// Where IAM and secret logins of named databases' pools come from, if the binary gave a source.
    pub(crate) fn pool_credentials(&self) -> Option<&Arc<dyn PoolCredentials>> {
        self.pool_credentials.as_ref()
    }

    /// Runs the exchange for the default pool's `user`, who must be `served` (the user pgmux logs in as).
    /// On success nothing is sent yet: the caller sends AuthenticationOk.
    pub(crate) async fn authenticate(
        &self,
        conn: &mut Conn,
        method: ClientAuth,
        user: &str,
        served: &str,
    ) -> Result<(), OpeningError> {
        let expected = if user == served { Expected::Known(self.password.as_ref()) } else { Expected::Unknown };
        self.check(conn, method, user, expected).await.map(drop)
    }

    /// Runs the exchange for a console user: one the configuration allows (`allowed`) is checked against its
    /// own password if pgmux knows the user, else against the default pool's; anyone else fails as an
    /// unknown user does, telling nothing more.
    pub(crate) async fn authenticate_console(
        &self,
        conn: &mut Conn,
        method: ClientAuth,
        user: &str,
        allowed: bool,
    ) -> Result<(), OpeningError> {
        let expected = match (allowed, self.book.get(user)) {
            (false, _) => Expected::Unknown,
            (true, Some(known)) => Expected::Known(known.password.as_ref()),
            (true, None) => Expected::Known(self.password.as_ref()),
        };
        self.check(conn, method, user, expected).await.map(drop)
    }

    /// Runs the exchange for `user` of a named database, against the book. When the user is stored as a
    /// SCRAM verifier and proved it with SCRAM, returns the keys its proof carried (for SCRAM passthrough).
    pub(crate) async fn authenticate_known(
        &self,
        conn: &mut Conn,
        method: ClientAuth,
        user: &str,
    ) -> Result<Option<scram::ScramKeys>, OpeningError> {
        let expected = match self.book.get(user) {
            Some(known) => Expected::Known(known.password.as_ref()),
            None => Expected::Unknown,
        };
        self.check(conn, method, user, expected).await
    }

    /// Runs the exchange for `user`, a user pgmux does not know, against what `auth_query` read from the
    /// server. No such user fails as a wrong password does (under trust: 28000, no such user); a user
    /// without a password passes trust only.
    pub(crate) async fn authenticate_looked_up(
        &self,
        conn: &mut Conn,
        method: ClientAuth,
        user: &str,
        found: &Lookup,
    ) -> Result<Option<scram::ScramKeys>, OpeningError> {
        let expected = match found {
            Lookup::Found(stored) => Expected::Known(Some(stored)),
            Lookup::NoPassword => Expected::Known(None),
            Lookup::NoSuchUser => Expected::Unknown,
        };
        self.check(conn, method, user, expected).await
    }

    /// Asks the client for its password in clear text (passthrough: the caller has made sure the connection
    /// is private) and returns it, unchecked.
    pub(crate) async fn cleartext(&self, conn: &mut Conn, user: &str) -> Result<Secret, OpeningError> {
        let mut buf = BytesMut::new();
        encode::auth_cleartext(&mut buf);
        conn.send(buf.freeze()).await?;
        let reply = read_password_message(conn).await?;
        let password = frontend::password(&reply[5..]).ok().filter(|p| !p.is_empty()).ok_or_else(|| {
            OpeningError::Refused(ErrorMessage::fatal(
                sqlstate::INVALID_PASSWORD,
                format!("password authentication failed for user \"{user}\""),
            ))
        })?;
        Ok(Secret::new(password))
    }

    /// `method`: the global setting, or what the hba / cert / peer rules chose for this login.
    async fn check(
        &self,
        conn: &mut Conn,
        method: ClientAuth,
        user: &str,
        expected: Expected<'_>,
    ) -> Result<Option<scram::ScramKeys>, OpeningError> {
        let failed = || {
            OpeningError::Refused(ErrorMessage::fatal(
                sqlstate::INVALID_PASSWORD,
                format!("password authentication failed for user \"{user}\""),
            ))
        };
        let stored = match expected {
            Expected::Known(stored) => stored.map(Secret::expose),
            Expected::Unknown => None,
        };
        match method {
            // Nothing chose an exchange for this login (client::access runs before): refuse rather than guess.
            ClientAuth::Hba | ClientAuth::Cert | ClientAuth::Peer => Err(OpeningError::Refused(ErrorMessage::fatal(
                sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                "no authentication method was decided for this login",
            ))),
            ClientAuth::Trust => match expected {
                Expected::Known(_) => Ok(None),
                Expected::Unknown => Err(OpeningError::Refused(ErrorMessage::fatal(
                    sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                    format!("\"trust\" authentication failed: no such user \"{user}\""),
                ))),
            },
            ClientAuth::Plain => {
                let password = self.cleartext(conn, user).await?;
                match stored {
                    Some(stored) if plain::verify(user, stored, password.expose()) => {
                        // A verifier's keys, as a SCRAM login would have proved them (SCRAM passthrough).
                        let keys = scram::ScramSecret::parse_verifier(stored)
                            .map(|verifier| scram::ScramKeys::from_password(password.expose(), &verifier));
                        Ok(keys)
                    }
                    _ => Err(failed()),
                }
            }
            // A user stored as a SCRAM verifier cannot be checked by md5: PostgreSQL runs SCRAM then, and so do we.
            ClientAuth::Md5 if !stored.is_some_and(is_verifier) => {
                let mut salt = [0u8; 4];
                rand::fill(&mut salt);
                let mut buf = BytesMut::new();
                encode::auth_md5(&mut buf, salt);
                conn.send(buf.freeze()).await?;
                let reply = read_password_message(conn).await?;
                let answer = frontend::password(&reply[5..]).map_err(|_| failed())?;
                let ok = match stored {
                    Some(hash) if md5::is_stored_hash(hash) => md5::verify_stored(hash, salt, answer),
                    Some(password) => md5::verify(user, password, salt, answer),
                    None => false,
                };
                if ok { Ok(None) } else { Err(failed()) }
            }
            ClientAuth::Md5 | ClientAuth::ScramSha256 => {
                // An unknown user (or one whose password SCRAM cannot use) still gets a full exchange,
                // against a secret nobody knows.
                let secret = self
                    .scram_secret(user, stored)
                    .unwrap_or_else(|| scram::KeyedSecret::new(scram::ScramSecret::unmatchable()));
                let keys = self.scram(conn, secret).await.map_err(|e| match e {
                    ScramOutcome::Gone => OpeningError::Gone,
                    ScramOutcome::Protocol(m) => OpeningError::Refused(m),
                    ScramOutcome::Failed => failed(),
                })?;
                // Keys of a verifier the server may hold too; those of a verifier pgmux derived are no use.
                Ok(keys.filter(|_| stored.is_some_and(is_verifier)))
            }
        }
    }

    /// The SCRAM secret `user` is checked against: its verifier, or one derived from its plaintext password,
    /// cached per user; `None` for an md5 hash or no password, which SCRAM cannot check.
    fn scram_secret(&self, user: &str, stored: Option<&str>) -> Option<scram::KeyedSecret> {
        let stored = stored?;
        if let Some(cached) = self.scram_secrets.lock().get(user).filter(|c| c.from.expose() == stored) {
            return Some(cached.keyed.clone());
        }
        let secret = if is_verifier(stored) {
            scram::ScramSecret::parse_verifier(stored)?
        } else if md5::is_stored_hash(stored) {
            tracing::warn!(user, "this user's password is stored as an md5 hash, which scram-sha-256 cannot check");
            return None;
        } else {
            scram::ScramSecret::generate(stored, scram::DEFAULT_ITERATIONS)
        };
        let keyed = scram::KeyedSecret::new(secret);
        let mut cache = self.scram_secrets.lock();
        if cache.len() < SCRAM_CACHE_LIMIT || cache.contains_key(user) {
            cache.insert(user.to_owned(), CachedSecret { from: Secret::new(stored), keyed: keyed.clone() });
        }
        Some(keyed)
    }

    async fn scram(
        &self,
        conn: &mut Conn,
        secret: scram::KeyedSecret,
    ) -> Result<Option<scram::ScramKeys>, ScramOutcome> {
        let mut server = scram::ScramServer::keyed(secret);
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
        Ok(server.proved_keys())
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

fn is_verifier(stored: &str) -> bool {
    stored.starts_with("SCRAM-SHA-256$")
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
