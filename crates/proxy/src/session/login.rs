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
use super::passthrough;
use super::{ClientSlot, Session, shutting_down, timers};
use crate::client::access;
use crate::client::auth::Authenticator;
use crate::client::cancel::Registration;
use crate::client::caps::{Caps, Hold};
use crate::client::lookup::{self, Asker};
use crate::client::shared::Shared;
use crate::client::startup::{self, Opening, OpeningError};
use crate::config::credentials::{Credentials, PoolCredentials, StaticCredentials};
use crate::config::learned::LearnedCredentials;
use crate::config::{ClientAuth, PoolMode, Secret, ServerAuth};
use crate::net::io::{Conn, Stream};
use crate::observe::{ClientBook, ClientTicket, NewClient, unix_now};
use crate::ops::console;
use crate::pools::auth_query::Lookup;
use crate::pools::readers::{Discovery, ReaderSet};
use crate::pools::routing::{self, RoutePlan, Routed};
use crate::pools::{PoolId, PoolSetup, ServerPool};
use crate::protocol::failure::ServerFailure;
use crate::protocol::params::{self, ClientParams, Param};
use crate::protocol::router::Router;
use crate::runtime::stop::{Level, Stop};
use crate::server::guard::Blame;
use pgmux_proto::auth::scram::ScramSecret;
use pgmux_proto::frontend::StartupMessage;

/// Ends a login without a session: tells the client why, if there is anything to tell.
async fn deny(shared: &Shared, mut conn: Conn, denied: OpeningError) -> Option<Session> {
    if let OpeningError::Refused(err) = denied {
        shared.observer().login_denied(&err);
        // "closing because: <reason>" is PgBouncer's wording for the same line: scripts and PgBouncer's own test
        // suite (tests/conformance) look for it. The reason is what the client is told, never a secret.
        tracing::info!(code = %err.code, "client login refused, closing because: {}", err.message);
        let _ = pgmux_timer::timeout(std::time::Duration::from_secs(1), conn.send(err.to_bytes())).await;
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
    let private = super::passthrough::is_private(&conn, &peer);
    let to_console = console::wanted(&shared, &startup).await;
    // How this client proves who it is: the global client_auth, or what the hba / cert / peer rules chose.
    let method = {
        let auth = shared.auth();
        match access::decide(&auth, &conn, &peer, &startup, to_console) {
            Ok(chosen) => chosen.unwrap_or(auth.method()),
            Err(denied) => return deny(&shared, conn, denied).await,
        }
    };
    if let Err(denied) = plain_allowed(method, private).and_then(|()| tls_required(&shared, &conn)) {
        return deny(&shared, conn, denied).await;
    }
    if to_console {
        // Not one of the tasks shutdown waits for: the console stays open until pgmux exits.
        tokio::spawn(console::serve(shared, conn, startup, stop, id, peer, method));
        return None;
    }
    let (params, pool, counted) =
        match admit(&shared, &stop, &mut conn, (&startup, method), (slot.count(), private), deadline).await {
            Ok(admitted) => admitted,
            Err(denied) => return deny(&shared, conn, denied).await,
        };
    let cancel = shared.cancels.register();
    if greet(&shared, pool, &mut conn, &params, &cancel).await.is_err() {
        return None;
    }
    tracing::debug!(user = startup.get("user"), "client logged in");
    let router = Router::new(id, shared.config().max_prepared_statements > 0);
    shared.pools.get(pool).stats().login();
    let meter = Meter::new(enter(&shared, &startup, (id, pool), peer));
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
        closing: super::Closing::No,
        session_mode: shared.pools.get(pool).mode() == PoolMode::Session,
        // Only a named database can be a reader route (the default pool's id is 0).
        reader_route: pool != PoolId::default() && shared.pools.get(pool).readers().is_some(),
        route: pool,
        pool,
        counted,
    })
}

/// `client_auth = "plain"` asks for the password in clear text, which pgmux does only where nobody can read
/// it on the way: over TLS, the Unix socket or loopback (PgBouncer asks on any link). Elsewhere the login is
/// refused before any password is asked for.
fn plain_allowed(method: ClientAuth, private: bool) -> Result<(), OpeningError> {
    if private || method != ClientAuth::Plain {
        return Ok(());
    }
    Err(OpeningError::Refused(
        ErrorMessage::fatal(
            sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
            "client_auth = plain accepts passwords in clear text only over TLS, the Unix socket or loopback",
        )
        .with_hint("connect with sslmode=require, or use client_auth = scram-sha-256"),
    ))
}

/// `tls_mode = require` (or verify-ca / verify-full): a client over TCP without TLS is refused, as
/// PostgreSQL refuses one that only a `hostssl` line would let in (28000). The Unix socket needs no TLS.
fn tls_required(shared: &Shared, conn: &Conn) -> Result<(), OpeningError> {
    if !shared.config().requires_client_tls() || !matches!(conn.stream, Stream::Tcp(_)) {
        return Ok(());
    }
    Err(OpeningError::Refused(
        ErrorMessage::fatal(
            sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
            "pgmux accepts clients over TLS only (tls_mode = require): this connection did not ask for TLS",
        )
        .with_hint("connect with sslmode=require, or through pgmux's Unix socket"),
    ))
}

/// Puts a logged-in client in the admin console's list, and counts its login. The list keeps its user only
/// when its pool logs in as another (a forced user): 8 bytes and no allocation for every other client.
fn enter(shared: &Shared, startup: &StartupMessage, (id, pool): (u64, PoolId), peer: Peer) -> ClientTicket {
    let observer = shared.observer();
    let server_user = &shared.pools.get(pool).key().user;
    let user = startup.get("user").filter(|u| !server_user.is_empty() && u != server_user).map(Box::from);
    observer.metrics.client_logins.inc(LoginResult::Accepted);
    ClientBook::add(
        observer,
        NewClient {
            id,
            peer,
            connected_unix: unix_now(),
            application_name: startup.get("application_name").filter(|a| !a.is_empty()).map(Box::from),
            user,
            console: false,
        },
    )
}

/// The opening packets up to the start-up message; `None` for a cancel request, which is served here.
async fn opening(shared: &Shared, conn: &mut Conn, deadline: Instant) -> Result<Option<StartupMessage>, OpeningError> {
    let tls = shared.client_tls();
    let tls = tls.as_ref().map(|t| &t.0);
    match pgmux_timer::timeout_at(deadline, startup::read_opening(conn, tls)).await {
        Err(_) => Err(timed_out()),
        Ok(Err(e)) => Err(e),
        Ok(Ok(Opening::Cancel { pid, secret })) => {
            shared.observer().metrics.cancels.inc();
            shared.cancels.cancel_within(pid, &secret, shared.config().cancel_wait_timeout).await;
            Ok(None)
        }
        Ok(Ok(Opening::Session(msg))) => Ok(Some(msg)),
    }
}

/// Everything between the start-up message and AuthenticationOk: room for one more client, a user, the
/// right database, the password, and parameters a server accepts. Returns the client's parameters and the
/// pool of its route, and the client counted under its database and user. `count` is how many clients there
/// are; `private`, whether the link is one a password may cross in clear text.
async fn admit(
    shared: &Shared,
    stop: &Stop,
    conn: &mut Conn,
    (startup, method): (&StartupMessage, ClientAuth),
    (count, private): (usize, bool),
    deadline: Instant,
) -> Result<(ClientParams, PoolId, Hold), OpeningError> {
    let refused = OpeningError::Refused;
    let max_client_conn = shared.config().max_client_conn;
    if count > max_client_conn {
        let message = format!("sorry, too many clients already (max_client_conn = {max_client_conn})");
        return Err(refused(ErrorMessage::fatal(sqlstate::TOO_MANY_CONNECTIONS, message)));
    }
    if stop.level() >= Level::Closed {
        return Err(refused(shutting_down()));
    }
    let Some(user) = startup.get("user") else {
        let message = "no PostgreSQL user name specified in startup packet";
        return Err(refused(ErrorMessage::fatal(sqlstate::INVALID_AUTHORIZATION_SPECIFICATION, message)));
    };
    let database = startup.get("database").filter(|d| !d.is_empty()).unwrap_or(user);
    let auth = shared.auth();
    let routed = routing::route(&shared.config(), auth.book(), database, user).map_err(|unknown| {
        refused(no_such_database(database, format!("this pgmux serves the databases {}", quoted_list(&unknown.names))))
    })?;
    if shared.disabled.is(database) {
        return Err(refused(disabled(database)));
    }
    let raw = {
        let config = shared.config();
        let rules = params::StartupRules::new(&config.ignore_startup_parameters, &config.track_extra_parameters);
        params::from_startup(&startup.params, &rules).map_err(refused)?
    };
    let id = match routed {
        Routed::Default => default_login(shared, (&auth, method), conn, (user, database), deadline).await?,
        Routed::Route(plan) => route_login(shared, (&auth, method), conn, (user, plan), private, deadline).await?,
    };
    let caps = Caps::of(&shared.config(), auth.book(), database, user);
    let counted = shared.counts.enter(database, user, caps, false).map_err(refused)?;
    // Looked up once here: the relay loop reads them through `counted`, never by name.
    counted.timeouts().store(&crate::client::caps::own_timeouts(auth.book(), user));
    let pool = shared.pools.get(id);
    if let Some(known) = shared.catalog.resolve(&raw).filter(|_| !pool.defaults().is_empty()) {
        return Ok((known, id, counted));
    }
    // Boxed: a server checks a client's parameters only the first time their values are seen, and the
    // check's 1.3 KB would otherwise be in every login's future.
    tokio::select! {
        r = Box::pin(check_params(shared, pool, &raw)) => r.map(|params| (params, id, counted)).map_err(refused),
        _ = stop.reached(Level::Hard) => Err(refused(shutting_down())),
    }
}

/// 55000, as PostgreSQL refuses a database that does not allow connections; PgBouncer's words.
fn disabled(database: &str) -> ErrorMessage {
    let message = format!("database \"{database}\" is disabled");
    ErrorMessage::fatal(sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE, message)
        .with_hint("an operator ran DISABLE on pgmux's console; ENABLE lets new clients in again")
}

/// 3D000, with the names a client may use in `hint`.
fn no_such_database(database: &str, hint: String) -> ErrorMessage {
    ErrorMessage::fatal(sqlstate::INVALID_CATALOG_NAME, format!("no such database: {database}")).with_hint(hint)
}

/// Login to the default pool (only `database_url`): the client must name its database and be its user.
async fn default_login(
    shared: &Shared,
    (auth, method): (&Authenticator, ClientAuth),
    conn: &mut Conn,
    (user, database): (&str, &str),
    deadline: Instant,
) -> Result<PoolId, OpeningError> {
    // The user and database pgmux logs in as (with a secret, read when the first client comes), read in
    // place when they are the configuration's own.
    let credentials = shared.pools.first().credentials();
    let fetched;
    let served = match credentials.fixed() {
        Some(fixed) => fixed,
        None => {
            fetched = credentials.login().await.map_err(|e| {
                let message = format!("cannot get database credentials: {e}");
                let error = ErrorMessage::fatal(sqlstate::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION, message);
                OpeningError::Refused(error)
            })?;
            &fetched
        }
    };
    if database != served.dbname {
        let hint = format!("this pgmux serves the database \"{}\"", served.dbname);
        return Err(OpeningError::Refused(no_such_database(database, hint)));
    }
    pgmux_timer::timeout_at(deadline, auth.authenticate(conn, method, user, &served.user))
        .await
        .map_err(|_| timed_out())??;
    Ok(PoolId::default())
}

/// Login to a named database's pool: the client's password checked as its route says (passthrough, a user
/// looked up with auth_query, or one pgmux knows), then the pool found or made.
async fn route_login(
    shared: &Shared,
    (auth, method): (&Authenticator, ClientAuth),
    conn: &mut Conn,
    (user, plan): (&str, Box<RoutePlan>),
    private: bool,
    deadline: Instant,
) -> Result<PoolId, OpeningError> {
    let refused = OpeningError::Refused;
    if plan.auth == ServerAuth::Passthrough {
        let make_pool = |plan| route_pool(shared, auth, plan, None);
        // Boxed, as the auth_query lookup below: each is some 4 KB of state, and every client's login future
        // would otherwise be that much larger (copied whole into its box) for logins that take neither path.
        let login = Box::pin(passthrough::login(shared, auth, conn, (user, *plan), private, make_pool));
        return pgmux_timer::timeout_at(deadline, login).await.map_err(|_| timed_out())?;
    }
    if let Some(auth_user) = plan.auth_user.as_deref().filter(|_| lookup::needed(auth, method, user)) {
        let asker = Asker {
            auth_user,
            query: &plan.auth_query,
            auth_dbname: plan.auth_dbname.as_deref(),
            home: Some(&plan.login),
        };
        let found = Box::pin(lookup::look_up(shared, auth, asker, user)).await?;
        let check = auth.authenticate_looked_up(conn, method, user, &found);
        let keys = pgmux_timer::timeout_at(deadline, check).await.map_err(|_| timed_out())??;
        // The server login of the client's own user's pool uses what was read, if the route has nothing.
        let stored = match found {
            Lookup::Found(stored) => Some(stored),
            Lookup::NoPassword | Lookup::NoSuchUser => None,
        };
        // A verifier serves only with the keys the client proved (SCRAM passthrough); under trust none came,
        // so the server gets no password and says whether it wants one.
        let usable = |s: &Secret| keys.is_some() || ScramSecret::parse_verifier(s.expose()).is_none();
        let server_password = stored.filter(|s| plan.login.user == user && plan.login.password.is_none() && usable(s));
        let id = route_pool(shared, auth, *plan, server_password).map_err(refused)?;
        passthrough::keep_keys(shared, id, user, keys);
        return Ok(id);
    }
    let keys = pgmux_timer::timeout_at(deadline, auth.authenticate_known(conn, method, user))
        .await
        .map_err(|_| timed_out())??;
    let id = route_pool(shared, auth, *plan, None).map_err(refused)?;
    passthrough::keep_keys(shared, id, user, keys);
    Ok(id)
}

/// Makes the pool of every database with a forced server user and a `min_pool_size`, and warms it: as in
/// PgBouncer, such a pool keeps its connections open before any client comes (at start-up, and every second
/// after: a reload may add one). A database without a forced user has one pool per client user, made at its
/// first client. Cheap when the pools exist: a lookup each.
pub(crate) fn prewarm(shared: &Shared) {
    let config = shared.config();
    let auth = shared.auth();
    for spec in config.databases.iter().filter(|s| s.name != "*") {
        let Some(user) = spec.user.as_deref() else { continue };
        if spec.min_pool_size.unwrap_or(config.min_pool_size) == 0 {
            continue;
        }
        let Ok(Routed::Route(plan)) = routing::route(&config, auth.book(), &spec.name, user) else { continue };
        match route_pool(shared, &auth, *plan, None) {
            Ok(id) => shared.pools.get(id).warm(),
            Err(e) => tracing::warn!(database = %spec.name, error = %e.message, "cannot keep min_pool_size open"),
        }
    }
}

/// The pool of a named database's plan (its writer's, for a reader route), made the first time a client
/// needs it; for a reader route, the pools of its instances too, and the set that picks among them.
fn route_pool(
    shared: &Shared,
    auth: &Authenticator,
    plan: RoutePlan,
    looked_up: Option<Secret>,
) -> Result<PoolId, ErrorMessage> {
    let instances: Vec<RoutePlan> = plan.readers.iter().map(|(host, port)| plan.instance(host, *port)).collect();
    let (route, fallback, template) = (plan.key.database.clone(), plan.reader_fallback, plan.clone());
    let source = auth.pool_credentials();
    let writer = pool_of(shared, plan, |plan| credentials_for(plan, looked_up.clone(), source))?;
    if (instances.is_empty() && template.instance_domain.is_none()) || shared.pools.readers_of(writer).is_some() {
        return Ok(writer);
    }
    // The instances log in as the writer does; what a client proves through the writer's pool (a SCRAM key,
    // a passthrough password) serves them too.
    let writer_credentials = shared.pools.get(writer).credentials();
    // readers = "aurora": the instances' pools are made as the topology lists them, logging in the same way.
    let discovery = template.instance_domain.clone().map(|domain| {
        let (source, looked_up, writer_credentials) =
            (source.cloned(), looked_up.clone(), Arc::clone(&writer_credentials));
        let credentials = move |plan: &RoutePlan| {
            instance_credentials(plan, looked_up.clone(), source.as_ref(), &*writer_credentials)
        };
        Discovery { template, domain, credentials: Box::new(credentials) }
    });
    let mut members = Vec::with_capacity(instances.len());
    for instance in instances {
        let name = format!("{}:{}", instance.login.host, instance.login.port);
        let make = |plan: &RoutePlan| instance_credentials(plan, looked_up.clone(), source, &*writer_credentials);
        members.push((pool_of(shared, instance, make)?, name));
    }
    shared.pools.add_readers(ReaderSet::new(route, writer, members, fallback, discovery));
    Ok(writer)
}

/// The pool of a named database's plan, made the first time a client needs it, logging in with what
/// `credentials` makes of the plan.
fn pool_of(
    shared: &Shared,
    plan: RoutePlan,
    credentials: impl FnOnce(&RoutePlan) -> Result<Arc<dyn Credentials>, String>,
) -> Result<PoolId, ErrorMessage> {
    let unable = |message: String| ErrorMessage::fatal(sqlstate::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION, message);
    if let Some(id) = shared.pools.find(&plan.key) {
        return Ok(id);
    }
    let credentials = credentials(&plan).map_err(unable)?;
    let setup = PoolSetup { plan, credentials };
    shared.pools.pool_for(setup).map_err(|e| ErrorMessage::fatal(sqlstate::TOO_MANY_CONNECTIONS, e.to_string()))
}

/// The logins of a reader instance's pool: its writer's learned ones, shared, when the writer learns them from
/// its clients; else made as any pool's are.
fn instance_credentials(
    plan: &RoutePlan,
    looked_up: Option<Secret>,
    source: Option<&Arc<dyn PoolCredentials>>,
    writer: &dyn Credentials,
) -> Result<Arc<dyn Credentials>, String> {
    match writer.learned() {
        Some(learned) => Ok(Arc::new(learned.sharing_with(plan.login.clone()))),
        None => credentials_for(plan, looked_up, source),
    }
}

/// Where the logins of `plan`'s pool come from. `source`: the binary's, for IAM and secrets.
fn credentials_for(
    plan: &RoutePlan,
    looked_up: Option<Secret>,
    source: Option<&Arc<dyn PoolCredentials>>,
) -> Result<Arc<dyn Credentials>, String> {
    let mut login = plan.login.clone();
    if looked_up.is_some() {
        login.password = looked_up;
    }
    let verifier = login.password.as_ref().and_then(|p| ScramSecret::parse_verifier(p.expose()));
    Ok(match plan.auth {
        // A password known only as a SCRAM verifier: SCRAM passthrough, with the keys clients prove.
        ServerAuth::Password => match verifier {
            Some(verifier) => Arc::new(LearnedCredentials::scram_passthrough(login, verifier)),
            None => Arc::new(StaticCredentials::new(login)),
        },
        ServerAuth::Passthrough => Arc::new(LearnedCredentials::passthrough(plan.login.clone())),
        ServerAuth::Iam | ServerAuth::Secret => {
            let Some(source) = source else {
                return Err(format!(
                    "database \"{}\" as user \"{}\" logs in with {}, which only the AWS build of pgmux provides",
                    plan.key.database, plan.key.user, plan.auth
                ));
            };
            source.for_pool(&plan.login, plan.auth, plan.secret_arn.as_deref()).map_err(|e| e.to_string())?
        }
    })
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
