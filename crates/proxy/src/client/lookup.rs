//! A user pgmux does not know, looked up with `auth_query` for a login (to a named database, or to the admin
//! console): where the query runs (`auth_dbname`, else the database's own server), as whom, and what the
//! client is told when it cannot run. The query itself is `pools::auth_query`'s.
//!
//! What is wrong with the configuration (an `auth_dbname` that names the console or no entry, a query the
//! server refuses) is the operator's to fix: the client gets SQLSTATE F0000 with PgBouncer's words first
//! ("bouncer config error", which scripts match) and then the problem; the details, which may say things
//! about the server an unauthenticated client has no business knowing, go to the log only.

use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::sqlstate;

use crate::client::auth::Authenticator;
use crate::client::shared::Shared;
use crate::client::startup::OpeningError;
use crate::config::{CONSOLE_DATABASE, ClientAuth, LoginInfo};
use crate::pools::auth_query::{Lookup, LookupError};
use crate::pools::routing::{self, Routed};

/// Who looks a user up, with which query, and where.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Asker<'a> {
    /// The role whose login runs the query (its password from the book).
    pub(crate) auth_user: &'a str,
    pub(crate) query: &'a str,
    /// The entry the query runs on, if one is named.
    pub(crate) auth_dbname: Option<&'a str>,
    /// Where it runs when none is: the server login of the database the client asked for; `None` for the
    /// admin console, which has no server.
    pub(crate) home: Option<&'a LoginInfo>,
}

/// Whether `user`'s password must be read from the server (when there is an `auth_user` to read it): a
/// user pgmux does not know, or (but under trust, which checks no password) one it knows without a
/// password, such as a `[users]` entry that only sets limits. `method`: how this login is checked.
pub(crate) fn needed(auth: &Authenticator, method: ClientAuth, user: &str) -> bool {
    match auth.book().get(user) {
        None => true,
        Some(known) => known.password.is_none() && method != ClientAuth::Trust,
    }
}

/// What the server says of `user`, asked as `asker` says. A refusal is ready for the client.
pub(crate) async fn look_up(
    shared: &Shared,
    auth: &Authenticator,
    asker: Asker<'_>,
    user: &str,
) -> Result<Lookup, OpeningError> {
    let site = site(shared, auth, asker, user)?;
    let password = auth.book().get(asker.auth_user).and_then(|k| k.password.clone());
    let login = LoginInfo { user: asker.auth_user.to_owned(), password, ..site };
    shared.pools.look_up_user(&login, asker.query, user).await.map_err(|e| {
        tracing::warn!(user, error = %e, "auth_query failed");
        OpeningError::Refused(refusal(&e, user))
    })
}

/// What a client whose user could not be looked up is told.
fn refusal(e: &LookupError, user: &str) -> ErrorMessage {
    match e {
        // As PostgreSQL tells a client of a database it lacks (PgBouncer passes the server's error on too).
        LookupError::NoDatabase(error) => ErrorMessage::fatal(sqlstate::INVALID_CATALOG_NAME, error.message.clone()),
        LookupError::Query { .. } => config_error(
            format!("auth_query could not look up user \"{user}\" on the server (pgmux's log has the server's error)"),
            e.hint(),
        ),
        // Said in full: what to use instead on a managed server is the useful part.
        LookupError::NotAllowed { .. } | LookupError::Failed { .. } => ErrorMessage::fatal(
            sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
            format!("pgmux cannot check the password of user \"{user}\": {e}"),
        )
        .with_hint(e.hint()),
    }
}

/// F0000, PgBouncer's words and then the problem.
fn config_error(problem: String, hint: &str) -> ErrorMessage {
    ErrorMessage::fatal(sqlstate::CONFIG_FILE_ERROR, format!("bouncer config error: {problem}")).with_hint(hint)
}

/// Where `auth_query` runs: the server and database of the entry `auth_dbname` names (an entry of that name,
/// else the `*` entry's server with that database, as for a client's database), else `home`.
fn site(shared: &Shared, auth: &Authenticator, asker: Asker<'_>, user: &str) -> Result<LoginInfo, OpeningError> {
    let refused = OpeningError::Refused;
    let name = match (asker.auth_dbname, asker.home) {
        (Some(name), _) => name,
        (None, Some(home)) => return Ok(home.clone()),
        (None, None) => CONSOLE_DATABASE,
    };
    if name == CONSOLE_DATABASE {
        // PgBouncer's line, once per refused login (its test suite counts them).
        tracing::warn!(user, "cannot use the reserved \"{CONSOLE_DATABASE}\" database as an auth_dbname");
        return Err(refused(config_error(
            format!("user \"{user}\" would be looked up in the admin console's own database, which has no users"),
            "set auth_dbname to a [[databases]] entry on the server",
        )));
    }
    if shared.disabled.is(name) {
        return Err(refused(
            ErrorMessage::fatal(
                sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!("authentication database \"{name}\" is disabled"),
            )
            .with_hint("an operator ran DISABLE on pgmux's console; ENABLE lets logins that need it in again"),
        ));
    }
    let config = shared.config();
    match routing::route(&config, auth.book(), name, asker.auth_user) {
        Ok(Routed::Route(found)) => Ok(found.login),
        _ => {
            tracing::warn!(user, auth_dbname = name, "authentication database \"{name}\" is not configured");
            Err(refused(config_error(
                format!("the auth_dbname that user \"{user}\" is looked up in is not configured"),
                "auth_dbname must name a [[databases]] entry",
            )))
        }
    }
}
