//! What every client session of one pgmux shares: the pools (and through them the configuration), what is known about
//! clients' start-up parameters and prepared statements, cancel keys, and how clients log in.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, OnceLock};

use arc_swap::Guard;
use parking_lot::RwLock;
use tokio_util::task::TaskTracker;

use crate::client::auth::Authenticator;
use crate::client::cancel::CancelRegistry;
use crate::client::caps::ClientCounts;
use crate::client::disabled::Disabled;
use crate::client::memory::MessageMemory;
use crate::config::Config;
use crate::config::source::ConfigSource;
use crate::observe::Observer;
use crate::pools::Pools;
use crate::protocol::params::{Catalog, Greetings};
use crate::protocol::statements::Registry;

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
    /// The registry of pools, and what they share.
    pub(crate) pools: Pools,
    /// What clients' start-up parameter values turn into on the server.
    pub(crate) catalog: Catalog,
    /// The parameter messages recent logins were sent, to send again.
    pub(crate) greetings: Greetings,
    /// Prepared statements of every client, by content.
    pub(crate) statements: Registry,
    pub(crate) cancels: Arc<CancelRegistry>,
    /// How clients log in, and the TLS offered to them; a reload replaces both (for new logins).
    auth: RwLock<Arc<Authenticator>>,
    client_tls: RwLock<Option<ClientTls>>,
    /// Logged-in and logging-in client sessions.
    pub(crate) clients: AtomicUsize,
    /// Admin console sessions now.
    pub(crate) consoles: AtomicUsize,
    /// Logged-in clients by database and by user, and the caps on them.
    pub(crate) counts: ClientCounts,
    /// The databases the console DISABLEd: their new clients are refused.
    pub(crate) disabled: Disabled,
    /// What clients' large messages may hold while they arrive (`max_client_buffers`).
    pub(crate) message_memory: Arc<MessageMemory>,
    /// Every session, and the pool's background work: shutdown waits for them.
    pub(crate) tasks: TaskTracker,
    /// Where `RELOAD` and `SIGHUP` read the configuration from (set by the binary).
    pub(crate) source: OnceLock<Arc<dyn ConfigSource>>,
}

impl Shared {
    pub(crate) fn new(
        pools: Pools,
        tasks: TaskTracker,
        client_tls: Option<tokio_rustls::TlsAcceptor>,
        auth: Authenticator,
    ) -> Self {
        let statements = Registry::with_capacity(pools.live_config().load().max_prepared_statements);
        Shared {
            auth: RwLock::new(Arc::new(auth)),
            pools,
            catalog: Catalog::default(),
            greetings: Greetings::default(),
            statements,
            cancels: Arc::new(CancelRegistry::default()),
            client_tls: RwLock::new(client_tls.map(ClientTls)),
            clients: AtomicUsize::new(0),
            consoles: AtomicUsize::new(0),
            counts: ClientCounts::default(),
            disabled: Disabled::default(),
            message_memory: Arc::default(),
            tasks,
            source: OnceLock::new(),
        }
    }

    /// The configuration in force. A guard: hold it briefly.
    #[inline]
    pub(crate) fn config(&self) -> Guard<Arc<Config>> {
        self.pools.config()
    }

    /// Metrics and the lists of clients and servers.
    #[inline]
    pub(crate) fn observer(&self) -> &Arc<Observer> {
        self.pools.observer()
    }

    pub(crate) fn auth(&self) -> Arc<Authenticator> {
        Arc::clone(&self.auth.read())
    }

    pub(crate) fn client_tls(&self) -> Option<ClientTls> {
        self.client_tls.read().clone()
    }

    /// New logins are checked this way.
    pub(crate) fn replace_auth(&self, auth: Authenticator) {
        *self.auth.write() = Arc::new(auth);
    }

    /// New logins are offered this TLS.
    pub(crate) fn replace_client_tls(&self, client_tls: Option<tokio_rustls::TlsAcceptor>) {
        *self.client_tls.write() = client_tls.map(ClientTls);
    }
}
