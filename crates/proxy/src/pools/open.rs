//! Opening server connections for a pool: warm ones up to `min_pool_size`, the control connection, and
//! each pool connection with its own lifetime, its console entry and the server's own parameter values.

use super::*;
use crate::observe::clock::{self, nanos};

impl ServerPool {
    /// Opens connections in the background up to `min_pool_size` (within the limit).
    pub(crate) fn warm(self: &Arc<Self>) {
        let want = self.min_pool_size.unwrap_or(self.config().min_pool_size).min(self.limit.current());
        while self.pool.status().size < want {
            let Some(slot) = self.pool.try_grow() else { return };
            let pool = Arc::clone(self);
            self.globals.tasks.spawn(async move {
                match pool.open().await {
                    Ok(conn) => drop(slot.fill(Box::new(conn))),
                    Err(e) => tracing::debug!(error = %e, "could not open a connection for min_pool_size"),
                }
            });
        }
    }

    /// Opens the control connection (sizing): logged in like a pool connection, named from its first
    /// moment, never lent.
    pub(crate) async fn open_control(&self, application_name: &str) -> Result<ServerConn, CheckoutError> {
        self.connect(0, Some(application_name)).await
    }

    /// Opens a pool connection, with its own jittered `server_lifetime`.
    pub(super) async fn open(&self) -> Result<ServerConn, CheckoutError> {
        let id = self.globals.next_id.fetch_add(1, Ordering::Relaxed);
        let config = self.globals.config.full();
        let started = std::time::Instant::now();
        let opened = match self.connect(id, None).await {
            Ok(conn) => self.connect_query(conn, &config).await,
            Err(e) => Err(e),
        };
        let mut conn = self.globals.observer.opened(opened, started)?;
        let login = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        if self.login_micros.swap(login, Ordering::Relaxed).abs_diff(login) > 1000 {
            self.pool.set_grow_after(grow_after(&config, login), config.pool_grow_after);
        }
        let lifetime = jittered(self.server_lifetime.unwrap_or(config.server_lifetime), self.jitter.hash_one(id));
        let opened = clock::now_ns();
        conn.idle_since_ns = opened;
        conn.retire_at_ns = if lifetime.is_zero() { u64::MAX } else { opened.saturating_add(nanos(lifetime)) };
        let tls = matches!(conn.io.stream, crate::net::io::Stream::TlsToServer(_));
        conn.ticket = Some(self.globals.observer.servers.add(ServerEntry {
            id: conn.id,
            addr: conn.addr,
            local: conn.local,
            pid: conn.key.0,
            connected_unix: unix_now(),
            tls,
            statements: Arc::clone(conn.statements.stats()),
            pool: self.id.index(),
            database: self.key.database.as_str().into(),
        }));
        // Whichever path opened it (a checkout, min_pool_size), a new connection tells what the server's own
        // values are. Without them every link would reset every reported parameter, a round trip each.
        if self.defaults().is_empty() {
            *self.defaults.write() = Arc::new(Defaults::from_reported(&conn.params.reported));
        }
        // PgBouncer's words for the same line (scripts, and its test suite, count them).
        let local = conn.local.map(|a| a.to_string()).unwrap_or_default();
        tracing::info!(server_id = conn.id, addr = %conn.addr, database = %self.key.database, user = %self.key.user,
            "new connection to server (from {local})");
        Ok(conn)
    }

    /// Runs the pool's `connect_query` (its database's, else the global one) on a pool connection that just
    /// logged in. If it fails, the connection is closed and the open counts as failed: waiting clients keep
    /// waiting while pgmux tries again, as after a failed login. Before the pool reads its defaults, so that
    /// what the query sets is what the pool's sessions start from.
    async fn connect_query(&self, mut conn: ServerConn, config: &Config) -> Result<ServerConn, CheckoutError> {
        let sql = self.connect_query.as_deref().unwrap_or(&config.connect_query);
        if sql.is_empty() {
            return Ok(conn);
        }
        let timeout = config.server_connect_timeout;
        // What it set is read back: the connection's starting point, restored for each client that sets
        // none of it (rather than reset to the server's default).
        let ran = match conn.run_plain(sql, timeout).await {
            Ok(()) => conn.session_settings(timeout, false).await,
            Err(failure) => Err(failure),
        };
        match ran {
            Ok(settings) => {
                conn.params.set_baseline(&settings);
                Ok(conn)
            }
            Err(failure) => {
                let addr = conn.addr.to_string();
                tracing::warn!(server_id = conn.id, %addr, database = %self.key.database, user = %self.key.user,
                    error = %failure, "connect_query failed; closing the new server connection");
                self.globals.tasks.spawn(Box::new(conn).terminate());
                Err(ConnectError::ConnectQuery { addr, failure: Box::new(failure) }.into())
            }
        }
    }

    /// Opens and logs in a new server connection, and refuses it if its node's role does not fit
    /// `target_session_attrs`. A login refused for its password is tried once more after the credentials are
    /// refreshed: a rotated secret then takes effect without an error.
    pub(super) async fn connect(&self, id: u64, application_name: Option<&str>) -> Result<ServerConn, CheckoutError> {
        let config = self.globals.config.full();
        let wanted = self.target.unwrap_or(config.target_session_attrs);
        let options = ConnectOptions { need_role: wanted.cares(), ..connect_options(&config, id, application_name) };
        let (credentials, tls) = (self.credentials(), self.server_tls());
        let login = credentials.login().await?;
        let mut conn = match ServerConn::connect(&login, &tls, options).await {
            Err(e) if e.is_auth_failure() && credentials.refresh().await? => {
                tracing::info!(error = %e, "login refused; retrying with refreshed credentials");
                let login = credentials.login().await?;
                ServerConn::connect(&login, &tls, options).await?
            }
            other => other?,
        };
        if let Some(role) = conn.role.filter(|role| wanted.cares() && !wanted.accepts(*role)) {
            self.distrust(conn.addr, Distrust::Stale, "its role does not fit target_session_attrs");
            self.globals.tasks.spawn(Box::new(conn).terminate());
            return Err(ConnectError::WrongRole { addr: login.address(), role, wanted }.into());
        }
        // A node that answers a login, in a role that fits, is trusted again (a hung one that woke up).
        if self.nodes.clear(conn.addr) {
            tracing::info!(node = %conn.addr, role = ?conn.role, "node trusted again");
        }
        conn.checked_epoch = self.nodes.epoch();
        Ok(conn)
    }
}
