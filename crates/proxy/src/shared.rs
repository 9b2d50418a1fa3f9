//! What every client session of one pgmux shares: the configuration, the server pool, what is known about
//! clients' start-up parameters and prepared statements, cancel keys, and how clients log in.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use tokio_util::task::TaskTracker;

use crate::cancel::CancelRegistry;
use crate::client_auth::Authenticator;
use crate::config::Config;
use crate::params::Catalog;
use crate::pool::ServerPool;
use crate::statements::Registry;

/// The TLS acceptor for clients (a wrapper, for `Debug`).
#[derive(Clone)]
pub(crate) struct ClientTls(pub(crate) tokio_rustls::TlsAcceptor);

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientTls")
    }
}

/// State shared by every session of one pgmux.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: Arc<Config>,
    pub(crate) pool: Arc<ServerPool>,
    /// What clients' start-up parameter values turn into on the server.
    pub(crate) catalog: Catalog,
    /// Prepared statements of every client, by content.
    pub(crate) statements: Registry,
    pub(crate) cancels: Arc<CancelRegistry>,
    pub(crate) auth: Authenticator,
    /// TLS offered to clients, when a certificate is configured.
    pub(crate) client_tls: Option<ClientTls>,
    /// Logged-in and logging-in client sessions.
    pub(crate) clients: AtomicUsize,
    /// Every session, and the pool's background work: shutdown waits for them.
    pub(crate) tasks: TaskTracker,
}

impl Shared {
    pub(crate) fn new(
        config: Arc<Config>,
        pool: Arc<ServerPool>,
        tasks: TaskTracker,
        client_tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Self {
        Shared {
            auth: Authenticator::new(&config),
            config,
            pool,
            catalog: Catalog::default(),
            statements: Registry::default(),
            cancels: Arc::new(CancelRegistry::default()),
            client_tls: client_tls.map(ClientTls),
            clients: AtomicUsize::new(0),
            tasks,
        }
    }
}
