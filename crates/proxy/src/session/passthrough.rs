//! Logins whose server credentials come from the client itself (see `config::learned` for the rules):
//! SCRAM passthrough keeps the key a client proved, and passthrough takes the client's own password, proved
//! once by the server and checked locally after that.

use pgmux_proto::auth::scram::ScramKeys;
use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::sqlstate;
use tokio::time::Instant;

use crate::client::auth::Authenticator;
use crate::client::shared::Shared;
use crate::client::startup::OpeningError;
use crate::config::learned::LocalCheck;
use crate::net::io::{Conn, Stream};
use crate::observe::Peer;
use crate::pools::PoolId;
use crate::pools::routing::RoutePlan;

/// Whether nobody between the client and pgmux can read a password it sends in clear text: the Unix
/// socket, a loopback address, or TLS.
pub(super) fn is_private(conn: &Conn, peer: &Peer) -> bool {
    match (&conn.stream, peer) {
        (Stream::Unix(_) | Stream::TlsFromClient(_), _) => true,
        (Stream::Tcp(_), Peer::Tcp(addr)) => addr.ip().is_loopback(),
        _ => false,
    }
}

/// SCRAM passthrough: a pool whose user is stored as a SCRAM verifier keeps the key the client just proved,
/// when the client logged in as that very user (a route that forces another user gets nothing from it).
pub(super) fn keep_keys(shared: &Shared, pool: PoolId, client_user: &str, keys: Option<ScramKeys>) {
    let Some(keys) = keys else { return };
    let credentials = shared.pools.get(pool).credentials();
    if let Some(learned) = credentials.learned().filter(|l| l.user() == client_user && !l.wants_passwords()) {
        learned.keep_keys(keys);
    }
}

/// Passthrough: asks for the client's password in clear text (only over a private link), and accepts it if
/// it is the one the pool last proved, or if the server accepts it now. Returns the pool, made once a first
/// password is proved (so that wrong guesses at user names make no pools) by `make_pool`.
pub(super) async fn login(
    shared: &Shared,
    auth: &Authenticator,
    conn: &mut Conn,
    (user, plan): (&str, RoutePlan),
    private: bool,
    make_pool: impl FnOnce(RoutePlan) -> Result<PoolId, ErrorMessage>,
) -> Result<PoolId, OpeningError> {
    let refused = |code: &'static str, message: String| OpeningError::Refused(ErrorMessage::fatal(code, message));
    let database = plan.key.database.clone();
    if !private {
        return Err(OpeningError::Refused(
            ErrorMessage::fatal(
                sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                format!(
                    "database \"{database}\" logs in with the client's own password (auth = passthrough), which \
                     pgmux accepts only over TLS, the Unix socket or a loopback address, never in clear text over \
                     a network"
                ),
            )
            .with_hint("connect with sslmode=require, or through pgmux's Unix socket"),
        ));
    }
    if plan.login.user != user {
        let message = format!(
            "database \"{database}\" logs in as user \"{}\" with the client's own password (auth = passthrough); \
             log in as that user",
            plan.login.user
        );
        return Err(refused(sqlstate::INVALID_AUTHORIZATION_SPECIFICATION, message));
    }
    let failed = || refused(sqlstate::INVALID_PASSWORD, format!("password authentication failed for user \"{user}\""));
    let password = auth.cleartext(conn, user).await?;
    let existing = shared.pools.find(&plan.key);
    if let Some(id) = existing {
        let credentials = shared.pools.get(id).credentials();
        let learned = credentials.learned().filter(|l| l.wants_passwords()).ok_or_else(failed)?;
        match learned.check(password.expose(), Instant::now()) {
            LocalCheck::Match => return Ok(id),
            LocalCheck::Refused => return Err(failed()),
            LocalCheck::AskServer => {}
        }
    }
    let login = crate::config::LoginInfo { password: Some(password.clone()), ..plan.login.clone() };
    match shared.pools.try_login(&login).await {
        Ok(()) => {}
        Err(e) if e.is_auth_failure() => return Err(failed()),
        Err(e) => {
            tracing::warn!(database = %database, user, error = %e, "could not check a passthrough password");
            let message = format!("pgmux could not check the password with the database: {e}");
            return Err(refused(sqlstate::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION, message));
        }
    }
    let id = match existing {
        Some(id) => id,
        None => make_pool(plan).map_err(OpeningError::Refused)?,
    };
    let credentials = shared.pools.get(id).credentials();
    if let Some(learned) = credentials.learned() {
        tracing::info!(database = %database, user, "passthrough password proved by the database");
        learned.proved(password, Instant::now());
    }
    Ok(id)
}
