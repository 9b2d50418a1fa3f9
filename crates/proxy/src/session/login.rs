//! From a new connection to a logged-in session: the opening packets, the limits, authentication, and the
//! parameters the client gets to see (real server values, its own settings in their place).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::BytesMut;
use pgmux_proto::encode::{self, ErrorMessage, Severity};
use pgmux_proto::{TxStatus, sqlstate};

use super::{ClientSlot, Session, shutting_down};
use crate::io::Conn;
use crate::params::{self, ClientParams, Param};
use crate::server::ServerFailure;
use crate::shared::Shared;
use crate::startup::{self, Opening, OpeningError};
use crate::stop::{Level, Stop};

/// Tells a client why it cannot log in, and closes: there is no session.
async fn refuse(mut conn: Conn, err: ErrorMessage) -> Option<Session> {
    tracing::info!(code = %err.code, message = %err.message, "client login refused");
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), conn.send(err.to_bytes())).await;
    None
}

/// Runs the start-up of a new connection. Returns the session, or `None` when the connection is done
/// (a cancel request, a refusal, a client that went away).
pub(super) async fn login(shared: Arc<Shared>, mut conn: Conn, stop: Stop, id: u64) -> Option<Session> {
    let deadline = tokio::time::Instant::now() + shared.config.client_login_timeout;
    let timed_out =
        || ErrorMessage::fatal(sqlstate::PROTOCOL_VIOLATION, "client did not log in within client_login_timeout");
    let startup = match tokio::time::timeout_at(
        deadline,
        startup::read_opening(&mut conn, shared.client_tls.as_ref().map(|t| &t.0)),
    )
    .await
    {
        Err(_) => return refuse(conn, timed_out()).await,
        Ok(Err(OpeningError::Gone)) => return None,
        Ok(Err(OpeningError::Refused(err))) => return refuse(conn, err).await,
        Ok(Ok(Opening::Cancel { pid, secret })) => {
            shared.cancels.cancel(pid, &secret).await;
            return None;
        }
        Ok(Ok(Opening::Session(msg))) => msg,
    };

    let count = shared.clients.fetch_add(1, Ordering::Relaxed) + 1;
    let slot = ClientSlot(Arc::clone(&shared));
    let cfg = Arc::clone(&shared.config);
    if count > cfg.max_client_conn {
        let err = ErrorMessage::fatal(
            sqlstate::TOO_MANY_CONNECTIONS,
            format!("sorry, too many clients already (max_client_conn = {})", cfg.max_client_conn),
        );
        return refuse(conn, err).await;
    }
    if stop.level() >= Level::Graceful {
        return refuse(conn, shutting_down()).await;
    }
    let Some(user) = startup.get("user").map(str::to_owned) else {
        let err = ErrorMessage::fatal(
            sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
            "no PostgreSQL user name specified in startup packet",
        );
        return refuse(conn, err).await;
    };
    // The user and database pgmux logs in as (with a secret, read when the first client comes).
    let served = match shared.pool.credentials().login().await {
        Ok(login) => login,
        Err(e) => {
            let err = ErrorMessage::fatal(
                sqlstate::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION,
                format!("cannot get database credentials: {e}"),
            );
            return refuse(conn, err).await;
        }
    };
    let database = startup.get("database").filter(|d| !d.is_empty()).unwrap_or(&user).to_owned();
    if database != served.dbname {
        let err =
            ErrorMessage::fatal(sqlstate::INVALID_CATALOG_NAME, format!("database \"{database}\" does not exist"))
                .with_hint(format!("this pgmux serves database \"{}\"", served.dbname));
        return refuse(conn, err).await;
    }
    let raw = match params::from_startup(&startup.params) {
        Ok(raw) => raw,
        Err(err) => return refuse(conn, err).await,
    };
    match tokio::time::timeout_at(deadline, shared.auth.authenticate(&mut conn, &user, &served.user)).await {
        Err(_) => return refuse(conn, timed_out()).await,
        Ok(Err(OpeningError::Gone)) => return None,
        Ok(Err(OpeningError::Refused(err))) => return refuse(conn, err).await,
        Ok(Ok(())) => {}
    }
    let params = match shared.catalog.resolve(&raw).filter(|_| !shared.pool.defaults().is_empty()) {
        Some(known) => known,
        None => {
            let checked = tokio::select! {
                r = check_params(&shared, &raw) => r,
                _ = stop.reached(Level::Hard) => Err(shutting_down()),
            };
            match checked {
                Ok(p) => p,
                Err(err) => return refuse(conn, err).await,
            }
        }
    };

    // AuthenticationOk, the parameters, the key and ReadyForQuery go out in one write, sized up front.
    let cancel = shared.cancels.register();
    let mut buf = BytesMut::with_capacity(1024);
    encode::auth_ok(&mut buf);
    for (name, value) in shared.pool.defaults().for_client(&params) {
        encode::parameter_status(&mut buf, name, value);
    }
    encode::backend_key_data(&mut buf, cancel.pid, cancel.secret);
    encode::ready_for_query(&mut buf, TxStatus::Idle);
    if conn.send(buf.freeze()).await.is_err() {
        return None;
    }
    tracing::debug!(user, "client logged in");
    Some(Session {
        id,
        shared,
        watch: stop.watch(),
        stop,
        client: conn,
        server: None,
        params,
        state: Default::default(),
        cancel,
        skip_until_sync: false,
        discard_until_sync: false,
        lost_transaction: false,
        closing: false,
        _slot: slot,
    })
}

/// Has a server apply start-up values pgmux has not seen before, and learns their canonical form. A value
/// the server rejects fails the login with the server's own error, which names the parameter.
async fn check_params(shared: &Shared, raw: &[Param]) -> Result<ClientParams, ErrorMessage> {
    let mut lease = shared.pool.checkout().await.map_err(|e| {
        let mut err = e.to_client();
        err.severity = Severity::Fatal;
        err
    })?;
    let wanted = params::unchecked(raw);
    let defaults = shared.pool.defaults();
    if let Some(sql) = params::sync_statement(&wanted, &lease.params, &defaults) {
        match lease.simple_query(&sql, shared.config.server_connect_timeout).await {
            Ok(()) => {}
            Err(ServerFailure::Query(err)) => return Err(err.to_client(Severity::Fatal)),
            Err(failure) => {
                tracing::warn!(error = %failure, "server failed while applying start-up parameters");
                shared.pool.retire(lease.discard());
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
