//! The admin console: the virtual database `pgbouncer` (and `pgmux`, unless the database pgmux serves is
//! itself named `pgmux`, which then wins) on pgmux's own listener. A session of its own, apart from the
//! relay loop: the usual client authentication, then simple queries, each parsed ([`lexer`], [`grammar`],
//! into a [`command::Command`]) and answered from what pgmux knows about itself ([`show`]; the lists of
//! connections in [`sockets`], SHOW CONFIG in [`settings`]; columns from [`columns`], encoded by [`table`])
//! or acted on ([`control`]). The parsing and encoding touch no socket.
//!
//! Who may enter: users in `admin_users` (every command; by default the user pgmux logs in as) and in
//! `stats_users` (SHOW but FDS, as in PgBouncer). Anyone else fails authentication the way a wrong password
//! does. Console sessions are not among the tasks a graceful shutdown waits for, and the listener keeps
//! accepting them until pgmux exits, so the console answers while pgmux drains.

mod census;
pub(crate) mod columns;
pub(crate) mod command;
mod control;
pub(crate) mod grammar;
mod lexer;
mod routes;
mod settings;
mod show;
mod sockets;
pub(crate) mod table;
#[cfg(test)]
mod tests;

use crate::observe::Peer;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use pgmux_proto::encode::{self, ErrorMessage};
use pgmux_proto::frontend::StartupMessage;
use pgmux_proto::{Step, TxStatus, sqlstate};
use tokio::time::Instant;

use crate::client::caps::{Caps, Hold};
use crate::client::lookup::{self, Asker};
use crate::client::shared::Shared;
use crate::client::startup::OpeningError;
use crate::config::{ClientAuth, Config, LoginInfo};
use crate::net::io::{Conn, ReadOutcome};
use crate::observe::{ClientBook, ClientTicket, NewClient, unix_now};
use crate::runtime::stop::{Level, Stop};
use command::{Access, Command};

/// The console's own database name.
pub(crate) const DATABASE: &str = "pgbouncer";
/// Its other name, unless pgmux serves a database of that name.
const ALIAS: &str = "pgmux";
/// Most console sessions at once.
const MAX_CONSOLES: usize = 32;

/// Whether a start-up asks for the console rather than the database pgmux serves.
pub(crate) async fn wanted(shared: &Shared, startup: &StartupMessage) -> bool {
    let Some(user) = startup.get("user") else { return false };
    let database = startup.get("database").filter(|d| !d.is_empty()).unwrap_or(user);
    match database {
        DATABASE => true,
        ALIAS => shared.pools.first().credentials().login().await.is_ok_and(|served| served.dbname != ALIAS),
        _ => false,
    }
}

/// The rights `user` has on the console, if any.
fn access_of(config: &Config, user: &str, served_user: &str) -> Option<Access> {
    let admin = if config.admin_users.is_empty() { user == served_user } else { config.admin_users.contains(user) };
    if admin {
        Some(Access::Admin)
    } else if config.stats_users.contains(user) {
        Some(Access::Stats)
    } else {
        None
    }
}

/// One console session.
struct Console {
    shared: Arc<Shared>,
    conn: Conn,
    stop: Stop,
    access: Access,
    /// The database and user pgmux serves.
    served: LoginInfo,
    /// Its entry in SHOW CLIENTS.
    seen: ClientTicket,
    /// Counts it under `pgbouncer` and its user while it lives.
    _counted: Hold,
}

/// Counts a console session for as long as it lives.
struct ConsoleSlot(Arc<Shared>);

impl Drop for ConsoleSlot {
    fn drop(&mut self) {
        self.0.consoles.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves a console connection from its start-up message to its end.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    mut conn: Conn,
    startup: StartupMessage,
    stop: Stop,
    id: u64,
    peer: Peer,
    method: ClientAuth,
) {
    let _slot = ConsoleSlot(Arc::clone(&shared));
    let console = match admit(&shared, &mut conn, (&startup, method), &stop).await {
        Ok((access, served, user, counted)) => {
            let seen = ClientBook::add(
                shared.observer(),
                NewClient {
                    id,
                    peer,
                    connected_unix: unix_now(),
                    application_name: startup.get("application_name").filter(|a| !a.is_empty()).map(Box::from),
                    user: Some(user.into()),
                    console: true,
                },
            );
            Console { shared, conn, stop, access, served, seen, _counted: counted }
        }
        Err(OpeningError::Refused(err)) => {
            shared.observer().login_denied(&err);
            tracing::info!(code = %err.code, message = %err.message, "admin console login refused");
            let _ = pgmux_timer::timeout(std::time::Duration::from_secs(1), conn.send(err.to_bytes())).await;
            return;
        }
        Err(OpeningError::Gone) => return,
    };
    tracing::info!(user = startup.get("user"), access = ?console.access, "admin console session");
    console.run().await;
}

/// Room, user, rights and password; then the greeting. Returns the rights, the served login, the user and
/// the session counted under the console's database and the user.
async fn admit(
    shared: &Shared,
    conn: &mut Conn,
    (startup, method): (&StartupMessage, ClientAuth),
    stop: &Stop,
) -> Result<(Access, LoginInfo, String, Hold), OpeningError> {
    let refused = |code, message: String| OpeningError::Refused(ErrorMessage::fatal(code, message));
    if shared.consoles.fetch_add(1, Ordering::Relaxed) >= MAX_CONSOLES {
        return Err(refused(
            sqlstate::TOO_MANY_CONNECTIONS,
            format!("too many admin console sessions ({MAX_CONSOLES})"),
        ));
    }
    if stop.level() == Level::Hard {
        return Err(OpeningError::Refused(shutting_down()));
    }
    let Some(user) = startup.get("user") else {
        return Err(refused(
            sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
            "no user name in the startup packet".into(),
        ));
    };
    let served = shared.pools.first().credentials().login().await.map_err(|e| {
        refused(sqlstate::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION, format!("cannot get database credentials: {e}"))
    })?;
    let (access, deadline) = {
        let config = shared.config();
        (access_of(&config, user, &served.user), Instant::now() + config.client_login_timeout)
    };
    // A user without rights fails the password check like a wrong password, telling nothing more.
    match pgmux_timer::timeout_at(deadline, check_password(shared, conn, (user, method), access.is_some())).await {
        Err(_) => return Err(refused(sqlstate::PROTOCOL_VIOLATION, "client did not log in in time".into())),
        Ok(result) => result?,
    }
    let Some(access) = access else {
        return Err(refused(sqlstate::INVALID_AUTHORIZATION_SPECIFICATION, format!("user \"{user}\" is not allowed")));
    };
    // Counted as PgBouncer counts its console: under its database and the user; admins are never refused.
    let caps = Caps::of_console(&shared.config(), shared.auth().book(), user);
    let counted = shared.counts.enter(DATABASE, user, caps, access == Access::Admin).map_err(OpeningError::Refused)?;
    conn.send(greeting()).await.map_err(|_| OpeningError::Gone)?;
    Ok((access, served, user.to_owned(), counted))
}

/// Checks a console user's password against the book; an allowed user the book has no password for is
/// looked up with the global `auth_query` when there is an `auth_user` (as PgBouncer looks up its console
/// and stats users), in the global `auth_dbname`: the console has no server of its own to run it on.
async fn check_password(
    shared: &Shared,
    conn: &mut Conn,
    (user, method): (&str, ClientAuth),
    allowed: bool,
) -> Result<(), OpeningError> {
    let auth = shared.auth();
    let (auth_user, query, auth_dbname) = {
        let config = shared.config();
        (config.auth_user.clone(), config.auth_query.clone(), config.auth_dbname.clone())
    };
    if allowed && !auth_user.is_empty() && method != ClientAuth::Trust && lookup::needed(&auth, method, user) {
        let auth_dbname = (!auth_dbname.is_empty()).then_some(auth_dbname.as_str());
        let asker = Asker { auth_user: &auth_user, query: &query, auth_dbname, home: None };
        let found = lookup::look_up(shared, &auth, asker, user).await?;
        return auth.authenticate_looked_up(conn, method, user, &found).await.map(drop);
    }
    auth.authenticate_console(conn, method, user, allowed).await
}

/// AuthenticationOk, PgBouncer's parameters (psycopg wants a DateStyle starting with ISO), a key that
/// cancels nothing, ReadyForQuery.
fn greeting() -> Bytes {
    let mut buf = BytesMut::with_capacity(512);
    encode::auth_ok(&mut buf);
    let version = format!("{}/pgmux", env!("CARGO_PKG_VERSION"));
    for (name, value) in [
        ("server_version", version.as_str()),
        ("client_encoding", "UTF8"),
        ("server_encoding", "UTF8"),
        ("DateStyle", "ISO"),
        ("TimeZone", "GMT"),
        ("standard_conforming_strings", "on"),
        ("integer_datetimes", "on"),
        ("is_superuser", "on"),
        // What PostgreSQL 14 and later report of a primary: a pooler or a driver that checks the role of what
        // it logged in to (libpq's target_session_attrs, pgmux itself when a route points at a console) reads
        // it here instead of asking with a query the console does not parse.
        ("in_hot_standby", "off"),
        ("default_transaction_read_only", "off"),
    ] {
        encode::parameter_status(&mut buf, name, value);
    }
    encode::backend_key_data(&mut buf, 0, rand::random());
    encode::ready_for_query(&mut buf, TxStatus::Idle);
    buf.freeze()
}

/// What the next message did to the session.
enum Next {
    Message(u8, Bytes),
    End,
}

impl Console {
    async fn run(mut self) {
        // After an extended-protocol message: everything up to the next Sync is dropped.
        let mut skipping = false;
        loop {
            let (tag, msg) = match self.next().await {
                Next::Message(tag, msg) => (tag, msg),
                Next::End => return,
            };
            let mut out = BytesMut::new();
            match tag {
                b'X' => return,
                b'Q' if !skipping => {
                    // PgBouncer counts each console command as a transaction and a query of its database.
                    self.shared.observer().databases.console.command();
                    self.query(&msg[5..], &mut out).await;
                    encode::ready_for_query(&mut out, TxStatus::Idle);
                }
                b'S' => {
                    skipping = false;
                    encode::ready_for_query(&mut out, TxStatus::Idle);
                }
                _ if skipping => {}
                b'F' => {
                    unsupported_protocol().encode(&mut out);
                    encode::ready_for_query(&mut out, TxStatus::Idle);
                }
                _ => {
                    unsupported_protocol().encode(&mut out);
                    skipping = true;
                }
            }
            if !out.is_empty() && self.conn.send(out.freeze()).await.is_err() {
                return;
            }
        }
    }

    /// The next whole message, reading as needed; `End` when the client left, broke the protocol or pgmux
    /// is stopping now.
    async fn next(&mut self) -> Next {
        loop {
            match self.conn.framer.step(&self.conn.rbuf) {
                Ok(Step::Message { tag, len }) => return Next::Message(tag, self.conn.rbuf.split_to(len).freeze()),
                Ok(Step::NeedMore { .. }) => {}
                Ok(Step::Stream { .. }) | Err(_) => {
                    let err =
                        ErrorMessage::fatal(sqlstate::PROTOCOL_VIOLATION, "invalid message for the admin console");
                    let _ = self.conn.send(err.to_bytes()).await;
                    return Next::End;
                }
            }
            let read = tokio::select! {
                r = self.conn.read_compact() => r,
                _ = self.stop.reached(Level::Hard) => {
                    let _ = self.conn.send(shutting_down().to_bytes()).await;
                    return Next::End;
                }
                _ = killed(&self.seen) => return Next::End,
            };
            if !matches!(read, Ok(ReadOutcome::Data)) {
                return Next::End;
            }
        }
    }

    /// Runs one simple query; writes its results or its error to `out` (ReadyForQuery is the caller's).
    async fn query(&mut self, body: &[u8], out: &mut BytesMut) {
        let command = match grammar::parse_query_body(body) {
            Ok(command) => command,
            Err(e) => return e.to_error_message().encode(out),
        };
        if let Some(denied) = command.check_access(self.access) {
            return denied.to_error_message().encode(out);
        }
        tracing::debug!(?command, "admin console command");
        let result = match &command {
            Command::Show(item) => show::run(self, *item).await,
            Command::Empty => {
                encode::empty_query_response(out);
                return;
            }
            Command::SetIgnored(_) => {
                table::encode_set_ignored(out);
                return;
            }
            other => control::run(self, other).await,
        };
        match result {
            Ok(Reply::Rows(set)) => set.encode(out),
            Ok(Reply::Raw(bytes)) => out.extend_from_slice(&bytes),
            Ok(Reply::Done) => encode::command_complete(out, &command.tag().unwrap_or_default()),
            Err(e) => e.encode(out),
        }
    }
}

/// Resolves once the session's own kill switch fires (`KILL_CLIENT` of a console session).
async fn killed(seen: &ClientTicket) {
    while !seen.kill.fired() {
        pgmux_timer::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// What a command answers.
enum Reply {
    /// A result set (RowDescription, DataRows, CommandComplete `SHOW`).
    Rows(table::ResultSet),
    /// Bytes written as they are (SHOW HELP's notice, a setting).
    Raw(BytesMut),
    /// CommandComplete with the command's tag.
    Done,
}

/// What a console session is told when pgmux stops under it.
fn shutting_down() -> ErrorMessage {
    ErrorMessage::fatal(sqlstate::ADMIN_SHUTDOWN, "pgmux is shutting down")
}

fn unsupported_protocol() -> ErrorMessage {
    ErrorMessage::error(sqlstate::FEATURE_NOT_SUPPORTED, "extended query protocol not supported by admin console")
        .with_hint("use the simple query protocol (psql, or your driver's simple or text mode)")
}
