//! Before any password: `client_auth = hba`, `cert` or `peer` decide, from how the client came, how it
//! proves who it is. Under `hba` the first line of `auth_hba_file` that covers the login picks the method
//! (no line: refused, 28000, as PostgreSQL refuses); `cert` and `peer` are proved here, against the client's
//! certificate (its common name) or the OS user at the other end of the Unix socket, directly or through an
//! ident map. What is left is a password exchange ([`ClientAuth::Md5`], ...) or none ([`ClientAuth::Trust`]),
//! which the authenticator then runs as it would for that global setting.
//!
//! One exception, as PgBouncer makes it: the admin console over the Unix socket from the OS user pgmux runs
//! as skips the rules (that user owns pgmux already), so that rules cannot lock the operator out.

use std::os::unix::fs::MetadataExt;

use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::frontend::StartupMessage;
use pgmux_proto::sqlstate;

use crate::client::auth::Authenticator;
use crate::client::startup::OpeningError;
use crate::config::ClientAuth;
use crate::config::hba::{Attempt, MapVerdict, Method};
use crate::net::io::{Conn, Stream};
use crate::observe::Peer;

/// The password exchange (or none) the login still needs, when the global setting does not say it alone;
/// `None` under trust, md5, scram-sha-256 and plain.
pub(crate) fn decide(
    auth: &Authenticator,
    conn: &Conn,
    peer: &Peer,
    startup: &StartupMessage,
    console: bool,
) -> Result<Option<ClientAuth>, OpeningError> {
    let global = auth.method();
    if !matches!(global, ClientAuth::Hba | ClientAuth::Cert | ClientAuth::Peer) {
        return Ok(None);
    }
    let user = startup.get("user").unwrap_or_default();
    let database = startup.get("database").filter(|d| !d.is_empty()).unwrap_or(user);
    if console && peer_uid(conn).is_some_and(|uid| Some(uid) == own_uid()) {
        return Ok(Some(ClientAuth::Trust));
    }
    let (address, tls) = match (&conn.stream, peer) {
        (Stream::Unix(_), _) => (None, false),
        (Stream::TlsFromClient(_), Peer::Tcp(addr)) => (Some(addr.ip()), true),
        (_, Peer::Tcp(addr)) => (Some(addr.ip()), false),
        (_, Peer::Unix { .. }) => (None, false),
    };
    let attempt = Attempt { address, tls, database, user };
    let (method, map) = match global {
        ClientAuth::Cert => (Method::Cert, None),
        ClientAuth::Peer => (Method::Peer, None),
        _ => {
            let rules = auth.book().access().ok_or_else(|| refused("client_auth = hba has no rules loaded"))?;
            let Some(rule) = rules.find(&attempt) else {
                return Err(refused(format!("no pg_hba.conf entry for {}", described(&attempt))));
            };
            tracing::debug!(line = rule.line, file = %rules.file.display(), "hba line decides the login");
            (rule.method, rule.map.as_deref())
        }
    };
    let proved = |system: &str, how: &str| proved_as(auth, system, user, map, how);
    match method {
        Method::Trust => Ok(Some(ClientAuth::Trust)),
        Method::Password => Ok(Some(ClientAuth::Plain)),
        Method::Md5 => Ok(Some(ClientAuth::Md5)),
        Method::ScramSha256 => Ok(Some(ClientAuth::ScramSha256)),
        Method::Reject => Err(refused(format!("pg_hba.conf rejects connection for {}", described(&attempt)))),
        Method::Cert => {
            let name = certificate_name(conn).ok_or_else(|| {
                refused(format!(
                    "certificate authentication failed for user \"{user}\": the client presented no certificate \
                     (connect with TLS and sslcert / sslkey signed by a CA in tls_client_ca)"
                ))
            })?;
            proved(&name, "certificate").map(|()| Some(ClientAuth::Trust))
        }
        Method::Peer => {
            let Stream::Unix(_) = conn.stream else {
                return Err(refused(format!(
                    "peer authentication failed for user \"{user}\": peer works over the Unix socket only"
                )));
            };
            let name = peer_uid(conn).and_then(os_user_name).ok_or_else(|| {
                refused(format!("peer authentication failed for user \"{user}\": the peer's OS user is unknown"))
            })?;
            proved(&name, "peer").map(|()| Some(ClientAuth::Trust))
        }
    }
}

/// Whether the name the client proved (`system`: its certificate's common name, its OS user) may log in as
/// `user`: the same name without a map, or a line of the map.
fn proved_as(auth: &Authenticator, system: &str, user: &str, map: Option<&str>, how: &str) -> Result<(), OpeningError> {
    let Some(map) = map else {
        if system == user {
            return Ok(());
        }
        return Err(refused(format!(
            "{how} authentication failed for user \"{user}\": provided user name ({user}) and authenticated user \
             name ({system}) do not match"
        )));
    };
    let verdict = auth.book().access().map_or(MapVerdict::NoSuchMap, |rules| rules.map_allows(map, system, user));
    match verdict {
        MapVerdict::Allowed => Ok(()),
        MapVerdict::NoMatch => Err(refused(format!(
            "{how} authentication failed for user \"{user}\": no match in usermap \"{map}\" for user \"{user}\" \
             authenticated as \"{system}\""
        ))),
        MapVerdict::NoSuchMap => Err(refused(format!(
            "{how} authentication failed for user \"{user}\": usermap \"{map}\" is not in auth_ident_file"
        ))),
    }
}

fn refused(message: impl Into<String>) -> OpeningError {
    OpeningError::Refused(ErrorMessage::fatal(sqlstate::INVALID_AUTHORIZATION_SPECIFICATION, message.into()))
}

/// PostgreSQL's words for a login in its refusals.
fn described(attempt: &Attempt<'_>) -> String {
    let host = attempt.address.map_or_else(|| "[local]".to_owned(), |a| a.to_string());
    let encryption = if attempt.tls { "SSL encryption" } else { "no encryption" };
    format!("host \"{host}\", user \"{}\", database \"{}\", {encryption}", attempt.user, attempt.database)
}

/// The common name of the certificate a TLS client presented (rustls checked it against tls_client_ca).
fn certificate_name(conn: &Conn) -> Option<String> {
    let Stream::TlsFromClient(tls) = &conn.stream else { return None };
    let first = tls.get_ref().1.peer_certificates()?.first()?;
    crate::net::der::common_name(first.as_ref())
}

/// The uid of the process at the other end of the Unix socket.
fn peer_uid(conn: &Conn) -> Option<u32> {
    match &conn.stream {
        Stream::Unix(unix) => unix.peer_cred().ok().map(|cred| cred.uid()),
        _ => None,
    }
}

/// The uid pgmux runs as (the owner of its own /proc entry: no unsafe call needed).
fn own_uid() -> Option<u32> {
    std::fs::metadata("/proc/self").ok().map(|m| m.uid())
}

/// The name of OS user `uid`, from /etc/passwd (local users: pgmux does not ask NSS).
fn os_user_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    user_of(&passwd, uid)
}

/// The name of `uid` in a passwd file's text.
fn user_of(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id = fields.nth(1)?.parse::<u32>().ok()?;
        (id == uid && !name.is_empty()).then(|| name.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::user_of;

    #[test]
    fn passwd_lines() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n# no\npostgres:x:104:110::/var/lib/postgresql:/bin/bash\n";
        assert_eq!(user_of(passwd, 104).as_deref(), Some("postgres"));
        assert_eq!(user_of(passwd, 0).as_deref(), Some("root"));
        assert_eq!(user_of(passwd, 7), None);
    }
}
