//! From a new connection to a logged-in session: the opening packets, the limits, authentication, and the
//! parameters the client gets to see (real server values, its own settings in their place).

use crate::observe::Peer;
use std::sync::Arc;

use pgmux_metrics::LoginResult;

use tokio::time::Instant;

use bytes::BytesMut;
use pgmux_proto::encode::{self, ErrorMessage, Severity};
use pgmux_proto::{TxStatus, sqlstate};

use super::meter::Meter;
use super::{ClientSlot, Session, shutting_down, timers};
use crate::client::auth::Authenticator;
use crate::client::cancel::Registration;
use crate::client::shared::Shared;
use crate::client::startup::{self, Opening, OpeningError};
use crate::config::credentials::{Credentials, StaticCredentials};
use crate::config::{PoolMode, ServerAuth};
use crate::net::io::Conn;
use crate::observe::{ClientBook, ClientTicket, NewClient, unix_now};
use crate::ops::console;
use crate::pools::routing::{self, RoutePlan, Routed};
use crate::pools::{PoolId, PoolSetup, ServerPool};
use crate::protocol::failure::ServerFailure;
use crate::protocol::params::{self, ClientParams, Param};
use crate::protocol::router::Router;
use crate::runtime::stop::{Level, Stop};
use crate::server::guard::Blame;
use pgmux_proto::frontend::StartupMessage;

/// Ends a login without a session: tells the client why, if there is anything to tell.
async fn deny(shared: &Shared, mut conn: Conn, denied: OpeningError) -> Option<Session> {
    if let OpeningError::Refused(err) = denied {
        shared.observer().login_denied(&err);
        // "closing because: <reason>" is PgBouncer's wording for the same line: scripts and PgBouncer's own test
        // suite (tests/conformance) look for it. The reason is what the client is told, never a secret.
        tracing::info!(code = %err.code, "client login refused, closing because: {}", err.message);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), conn.send(err.to_bytes())).await;
    }
    None
}

fn timed_out() -> OpeningError {
    OpeningError::Refused(ErrorMessage::fatal(
        sqlstate::PROTOCOL_VIOLATION,
        "client did not log in within client_login_timeout",
    ))
}

/// Runs the start-up of a new connection. Returns the session, or `None` when the connection is done
/// (a cancel request, a refusal, a client that went away).
pub(super) async fn login(
    shared: Arc<Shared>,
    mut conn: Conn,
    stop: Stop,
    id: u64,
    slot: ClientSlot,
    peer: Peer,
) -> Option<Session> {
    let deadline = Instant::now() + shared.config().client_login_timeout;
    let startup = match opening(&shared, &mut conn, deadline).await {
        Ok(Some(startup)) => startup,
        Ok(None) => return None,
        Err(denied) => return deny(&shared, conn, denied).await,
    };
    if console::wanted(&shared, &startup).await {
        // Not one of the tasks shutdown waits for: the console stays open until pgmux exits.
        tokio::spawn(console::serve(shared, conn, startup, stop, id, peer));
        return None;
    }
    let (params, pool) = match admit(&shared, &stop, &mut conn, &startup, slot.count(), deadline).await {
        Ok(admitted) => admitted,
        Err(denied) => return deny(&shared, conn, denied).await,
    };
    let cancel = shared.cancels.register();
    if greet(&shared, pool, &mut conn, &params, &cancel).await.is_err() {
        return None;
    }
    tracing::debug!(user = startup.get("user"), "client logged in");
    let router = Router::new(id, shared.config().max_prepared_statements > 0);
    let meter = Meter::new(enter(&shared, &startup, id, peer));
    Some(Session {
        shared: slot,
        watch: stop.watch(),
        meter,
        client: conn,
        server: None,
        timer: timers::Timer::with_own_idle(params.idle_session_timeout()),
        params,
        router,
        replay: Default::default(),
        reservation: Default::default(),
        cancel,
        line: None,
        closing: false,
        session_mode: shared.pools.get(pool).mode() == PoolMode::Session,
        pool,
    })
}

/// Puts a logged-in client in the admin console's list, and counts its login.
fn enter(shared: &Shared, startup: &StartupMessage, id: u64, peer: Peer) -> ClientTicket {
    let observer = shared.observer();
    observer.metrics.client_logins.inc(LoginResult::Accepted);
    ClientBook::add(
        observer,
        NewClient {
            id,
            peer,
            connected_unix: unix_now(),
            application_name: startup.get("application_name").filter(|a| !a.is_empty()).map(Box::from),
            user: None,
            console: false,
        },
    )
}

/// The opening packets up to the start-up message; `None` for a cancel request, which is served here.
async fn opening(shared: &Shared, conn: &mut Conn, deadline: Instant) -> Result<Option<StartupMessage>, OpeningError> {
    let tls = shared.client_tls();
    let tls = tls.as_ref().map(|t| &t.0);
    match tokio::time::timeout_at(deadline, startup::read_opening(conn, tls)).await {
        Err(_) => Err(timed_out()),
        Ok(Err(e)) => Err(e),
        Ok(Ok(Opening::Cancel { pid, secret })) => {
            shared.observer().metrics.cancels.inc();
            shared.cancels.cancel(pid, &secret).await;
            Ok(None)
        }
        Ok(Ok(Opening::Session(msg))) => Ok(Some(msg)),
    }
}

/// Everything between the start-up message and AuthenticationOk: room for one more client, a user, the
/// right database, the password, and parameters a server accepts. Returns the client's parameters and the
/// pool of its route.
async fn admit(
    shared: &Shared,
    stop: &Stop,
    conn: &mut Conn,
    startup: &StartupMessage,
    count: usize,
    deadline: Instant,
) -> Result<(ClientParams, PoolId), OpeningError> {
    let refused = OpeningError::Refused;
    let max_client_conn = shared.config().max_client_conn;
    if count > max_client_conn {
        let message = format!("sorry, too many clients already (max_client_conn = {max_client_conn})");
        return Err(refused(ErrorMessage::fatal(sqlstate::TOO_MANY_CONNECTIONS, message)));
    }
    if stop.level() >= Level::Graceful {
        return Err(refused(shutting_down()));
    }
    let Some(user) = startup.get("user") else {
        let message = "no PostgreSQL user name specified in startup packet";
        return Err(refused(ErrorMessage::fatal(sqlstate::INVALID_AUTHORIZATION_SPECIFICATION, message)));
    };
    let database = startup.get("database").filter(|d| !d.is_empty()).unwrap_or(user);
    let auth = shared.auth();
    let routed = routing::route(&shared.config(), auth.book(), database, user).map_err(|unknown| {
        let err = ErrorMessage::fatal(sqlstate::INVALID_CATALOG_NAME, format!("no such database: {database}"))
            .with_hint(format!("this pgmux serves the databases {}", quoted_list(&unknown.names)));
        refused(err)
    })?;
    let raw = params::from_startup(&startup.params).map_err(refused)?;
    let id = match routed {
        Routed::Default => {
            // The user and database pgmux logs in as (with a secret, read when the first client comes).
            let served = shared.pools.first().credentials().login().await.map_err(|e| {
                let message = format!("cannot get database credentials: {e}");
                refused(ErrorMessage::fatal(sqlstate::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION, message))
            })?;
            if database != served.dbname {
                let err = ErrorMessage::fatal(sqlstate::INVALID_CATALOG_NAME, format!("no such database: {database}"))
                    .with_hint(format!("this pgmux serves the database \"{}\"", served.dbname));
                return Err(refused(err));
            }
            match tokio::time::timeout_at(deadline, auth.authenticate(conn, user, &served.user)).await {
                Err(_) => return Err(timed_out()),
                Ok(result) => result?,
            }
            PoolId::default()
        }
        Routed::Route(plan) => {
            match tokio::time::timeout_at(deadline, auth.authenticate_known(conn, user)).await {
                Err(_) => return Err(timed_out()),
                Ok(result) => result?,
            }
            pool_of(shared, &auth, *plan).map_err(refused)?
        }
    };
    let pool = shared.pools.get(id);
    if let Some(known) = shared.catalog.resolve(&raw).filter(|_| !pool.defaults().is_empty()) {
        return Ok((known, id));
    }
    tokio::select! {
        r = check_params(shared, pool, &raw) => r.map(|params| (params, id)).map_err(refused),
        _ = stop.reached(Level::Hard) => Err(refused(shutting_down())),
    }
}

/// The pool of a named database's plan, made the first time a client needs it.
fn pool_of(shared: &Shared, auth: &Authenticator, plan: RoutePlan) -> Result<PoolId, ErrorMessage> {
    let unable = |message: String| ErrorMessage::fatal(sqlstate::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION, message);
    if let Some(id) = shared.pools.find(&plan.key) {
        return Ok(id);
    }
    let credentials: Arc<dyn Credentials> = match plan.auth {
        ServerAuth::Password => Arc::new(StaticCredentials::new(plan.login.clone())),
        ServerAuth::Passthrough => {
            return Err(unable(format!(
                "database \"{}\" logs in as the client (auth = passthrough), which this pgmux cannot do",
                plan.key.database
            )));
        }
        ServerAuth::Iam | ServerAuth::Secret => {
            let Some(source) = auth.pool_credentials() else {
                return Err(unable(format!(
                    "database \"{}\" as user \"{}\" logs in with {}, which only the AWS build of pgmux provides",
                    plan.key.database, plan.key.user, plan.auth
                )));
            };
            source.for_pool(&plan.login, plan.auth, plan.secret_arn.as_deref()).map_err(|e| unable(e.to_string()))?
        }
    };
    let setup = PoolSetup { plan, credentials };
    shared.pools.pool_for(setup).map_err(|e| ErrorMessage::fatal(sqlstate::TOO_MANY_CONNECTIONS, e.to_string()))
}

/// `"a", "b" and "c"`.
fn quoted_list(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    match quoted.split_last() {
        None => "(none)".to_owned(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// AuthenticationOk, the parameters, the cancel key and ReadyForQuery, in one write sized up front.
async fn greet(
    shared: &Shared,
    pool: PoolId,
    conn: &mut Conn,
    params: &ClientParams,
    cancel: &Registration,
) -> std::io::Result<()> {
    let status = shared.greetings.parameter_status(&shared.pools.get(pool).defaults(), params);
    let mut buf = BytesMut::with_capacity(status.len() + 64);
    encode::auth_ok(&mut buf);
    buf.extend_from_slice(&status);
    encode::backend_key_data(&mut buf, cancel.pid(), cancel.secret);
    encode::ready_for_query(&mut buf, TxStatus::Idle);
    conn.send(buf.freeze()).await
}

/// Has a server apply start-up values pgmux has not seen before, and learns their canonical form. A value
/// the server rejects fails the login with the server's own error, which names the parameter.
async fn check_params(shared: &Shared, pool: &ServerPool, raw: &[Param]) -> Result<ClientParams, ErrorMessage> {
    let mut lease = pool.checkout().await.map_err(|e| {
        let mut err = e.to_client();
        err.severity = Severity::Fatal;
        err
    })?;
    let wanted = params::unchecked(raw);
    let defaults = pool.defaults();
    if let Some(sql) = params::sync_statement(&wanted, &lease.params, &defaults) {
        match lease.run_guarded(&sql, shared.config().server_connect_timeout).await {
            Ok(_) => {}
            Err(ServerFailure::Query(err)) if Blame::of(&err.code) == Blame::Refused => {
                return Err(err.to_client(Severity::Fatal));
            }
            // Cancelled each time by a timeout the connection's last session set: the connection is as it was.
            Err(ServerFailure::Query(err)) => {
                return Err(ErrorMessage::fatal(
                    sqlstate::CONNECTION_FAILURE,
                    format!("pgmux could not check the start-up parameters on a server connection: {err}"),
                )
                .with_hint("connect again"));
            }
            Err(failure) => {
                tracing::warn!(error = %failure, "server failed while applying start-up parameters");
                pool.retire(lease.discard());
                return Err(ErrorMessage::fatal(
                    sqlstate::CONNECTION_FAILURE,
                    "server connection failed while applying start-up parameters",
                ));
            }
        }
    }
    let learned = shared.catalog.learn(raw, &lease.params);
    params::synced(&learned, &mut lease.params);
    Ok(learned)
}
