//! PgBouncer's `auth_user` / `auth_query`: the password (or md5 hash, or SCRAM verifier) of a user pgmux does
//! not know, read from the server through a login as `auth_user`. Each lookup is one short connection, for
//! one user, whose answer serves that one login: nothing is cached between users (the odyssey#1618 trap) or
//! between logins.
//!
//! PostgreSQL keeps passwords in `pg_authid`, which only superusers may read; PgBouncer's advice is a
//! superuser-owned `SECURITY DEFINER` function that `auth_user` may execute. Amazon RDS and Aurora let no
//! role read it, not even `rds_superuser`, so there the lookup fails with `insufficient_privilege` and the
//! client is told what to use instead.

use pgmux_proto::sqlstate;

use super::Pools;
use crate::config::{LoginInfo, Secret};
use crate::protocol::failure::{ServerError, ServerFailure};
use crate::server::ConnectError;

/// The `application_name` of auth_query connections.
const AUTH_QUERY_NAME: &str = "pgmux-auth-query";

/// What the server says of a user.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Its password as the server stores it.
    Found(Secret),
    /// The user exists but has no password (or one that expired, if the query says so): `trust` lets it in,
    /// every other method fails it as a wrong password.
    NoPassword,
    /// No such user.
    NoSuchUser,
}

/// Why a user could not be looked up. The messages name the cause and what to do; no secret is in them.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LookupError {
    /// `auth_user` may not read passwords: the managed-database case.
    #[error(
        "auth_user \"{auth_user}\" may not read passwords on the server ({reason}); on Amazon RDS and Aurora no \
         role can read pg_authid"
    )]
    NotAllowed { auth_user: String, reason: String },
    /// The server refused the query itself (a table that is not there, a syntax error): the configuration's
    /// fault.
    #[error("auth_query, run as \"{auth_user}\", failed on the server: {reason}")]
    Query { auth_user: String, reason: String },
    /// The server has no database of that name: the client is told as PostgreSQL would tell it.
    #[error("server login failed: {} {}", .0.severity, .0.message)]
    NoDatabase(Box<ServerError>),
    /// Anything else: the login as auth_user failed, the server is away.
    #[error("looking up the user with auth_query as \"{auth_user}\" failed: {reason}")]
    Failed { auth_user: String, reason: String },
}

impl LookupError {
    /// What a client that cannot be checked should use instead, for the hint of its error.
    pub(crate) fn hint(&self) -> &'static str {
        match self {
            LookupError::NotAllowed { .. } => {
                "use auth = \"passthrough\" (the client's own password, checked by the server), the user's \
                 password or SCRAM verifier in auth_file or [[users]], or auth = \"iam\"; see \
                 docs/authentication.md"
            }
            LookupError::Query { .. } => "fix auth_query (pgmux's log has the server's error)",
            LookupError::NoDatabase(_) => "connect to a database that exists on the server",
            LookupError::Failed { .. } => "check auth_user's password in auth_file or [[users]], and auth_query",
        }
    }
}

/// `query` with `$1` replaced by `user` as a quoted SQL literal (in the `E''` form when it holds a
/// backslash, so that the result means the same whatever `standard_conforming_strings` says).
pub(crate) fn statement(query: &str, user: &str) -> String {
    let quoted = user.replace('\'', "''");
    let literal =
        if quoted.contains('\\') { format!("E'{}'", quoted.replace('\\', "\\\\")) } else { format!("'{quoted}'") };
    query.replace("$1", &literal)
}

/// `text` (a server's error about the query) with every stored password form in it blanked: a query that
/// casts or compares the password column gets it quoted back in the server's error, and that error goes
/// to the log. SCRAM verifiers and md5 hashes have shapes to find; a plaintext password has none, which
/// is one more reason to keep plaintext out of the server (PostgreSQL stores none since version 10).
pub(crate) fn scrub(text: &str) -> String {
    const HIDDEN: &str = "<a stored password, not logged>";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if rest.starts_with("SCRAM-SHA-256$") {
            // A verifier has no space or quote in it: it ends at the first one.
            let end = rest.find(|c: char| c.is_whitespace() || c == '"' || c == '\'').unwrap_or(rest.len());
            out.push_str(HIDDEN);
            rest = &rest[end..];
        } else if rest.starts_with("md5")
            && rest.len() >= 35
            && rest.as_bytes()[3..35].iter().all(u8::is_ascii_hexdigit)
            && !rest.as_bytes().get(35).is_some_and(u8::is_ascii_hexdigit)
        {
            out.push_str(HIDDEN);
            rest = &rest[35..];
        } else {
            let step = rest.chars().next().map_or(1, char::len_utf8);
            out.push_str(&rest[..step]);
            rest = &rest[step..];
        }
    }
    out
}

/// The answer of the query's rows: the second column of the first row; no row, no such user.
fn answer(rows: Vec<Vec<Option<String>>>) -> Lookup {
    let Some(row) = rows.into_iter().next() else { return Lookup::NoSuchUser };
    match row.into_iter().nth(1).flatten() {
        Some(password) if !password.is_empty() => Lookup::Found(Secret::new(password)),
        _ => Lookup::NoPassword,
    }
}

impl Pools {
    /// Looks `user` up with `query`, logged in as `auth` (the route's server and database, auth_user and its
    /// password).
    pub(crate) async fn look_up_user(&self, auth: &LoginInfo, query: &str, user: &str) -> Result<Lookup, LookupError> {
        let failed = |reason: String| LookupError::Failed { auth_user: auth.user.clone(), reason };
        let mut conn = self.connect_once(auth, AUTH_QUERY_NAME).await.map_err(|e| match e {
            ConnectError::Rejected { error, .. } if error.code == sqlstate::INVALID_CATALOG_NAME => {
                LookupError::NoDatabase(error)
            }
            e => failed(e.to_string()),
        })?;
        let timeout = self.live_config().full().server_connect_timeout;
        let result = conn.run_own(&statement(query, user), timeout).await;
        self.close_once(conn);
        match result {
            Ok(rows) => Ok(answer(rows)),
            Err(ServerFailure::Query(error)) if error.code == sqlstate::INSUFFICIENT_PRIVILEGE => {
                Err(LookupError::NotAllowed { auth_user: auth.user.clone(), reason: scrub(&error.message) })
            }
            Err(ServerFailure::Query(error)) => {
                Err(LookupError::Query { auth_user: auth.user.clone(), reason: scrub(&error.to_string()) })
            }
            Err(other) => Err(failed(scrub(&other.to_string()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_goes_in_as_a_literal_whatever_it_holds() {
        let q = "SELECT usename, passwd FROM pg_shadow WHERE usename=$1";
        assert_eq!(statement(q, "ann"), "SELECT usename, passwd FROM pg_shadow WHERE usename='ann'");
        assert_eq!(statement(q, "o'brien"), "SELECT usename, passwd FROM pg_shadow WHERE usename='o''brien'");
        assert_eq!(statement(q, "a\\'; drop"), "SELECT usename, passwd FROM pg_shadow WHERE usename=E'a\\\\''; drop'");
    }

    #[test]
    fn the_second_column_of_the_first_row_is_the_password_and_no_row_is_no_user() {
        let row = |p: Option<&str>| vec![Some("ann".to_owned()), p.map(str::to_owned)];
        assert_eq!(answer(vec![row(Some("md5abc"))]), Lookup::Found(Secret::new("md5abc")));
        assert_eq!(answer(vec![row(None)]), Lookup::NoPassword);
        assert_eq!(answer(vec![row(Some(""))]), Lookup::NoPassword);
        assert_eq!(answer(Vec::new()), Lookup::NoSuchUser);
    }

    #[test]
    fn stored_passwords_quoted_back_in_a_servers_error_are_blanked() {
        let verifier = "SCRAM-SHA-256$4096:c2FsdA==$AAAA+/=:BBBB=";
        let hash = "md5a3556571e93b0d20722ba62be61e8c2d";
        let error = format!("invalid input syntax for type integer: \"{verifier}\" or {hash}, not md5abc é");
        let scrubbed = scrub(&error);
        assert!(!scrubbed.contains("AAAA") && !scrubbed.contains("a3556571"), "{scrubbed}");
        assert_eq!(
            scrubbed,
            "invalid input syntax for type integer: \"<a stored password, not logged>\" or <a stored password, not \
             logged>, not md5abc é"
        );
        assert_eq!(scrub("relation \"not_pg_shadow\" does not exist"), "relation \"not_pg_shadow\" does not exist");
    }

    #[test]
    fn refusals_on_managed_servers_say_what_to_use_instead() {
        let e = LookupError::NotAllowed { auth_user: "pgb".into(), reason: "permission denied".into() };
        assert!(e.to_string().contains("no role can read pg_authid"), "{e}");
        assert!(e.hint().contains("passthrough") && e.hint().contains("iam"), "{}", e.hint());
    }
}
