//! The session at socket level: `session::serve` driven end to end by a client speaking the wire protocol,
//! in front of the fake server (no real PostgreSQL). One file per subject; here the rig they share: the
//! pool and what the sessions share, built around a fake server, and a port clients come in by.

mod cancel;
mod client;
mod failure;
mod footprint;
mod login;
mod pin;
mod shutdown;
mod timers;
mod transaction;
mod vanish;

use std::sync::Arc;
use std::time::Duration;

use pgmux_pool::Status;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::task::TaskTracker;

use super::serve;
use crate::client::shared::Shared;
use crate::config::SslMode;
use crate::config::credentials::StaticCredentials;
use crate::net::io::Stream;
use crate::net::tls::ServerTls;
use crate::observe::Peer;
use crate::pools::{Pools, ServerPool};
use crate::runtime::stop::Stop;
use crate::testing::FakeServer;
use client::{Client, tags};

/// Longest any step of a test may take before it counts as hung.
const WAIT: Duration = Duration::from_secs(5);

/// No sizing from the database (no control connection), and a connection opened as soon as one is
/// wanted: the fake's counts then say exactly what each test did.
const FIXED: &str = "max_connections_percent = 0\npool_grow_after = \"0s\"";

/// Sessions in front of a fake server.
struct Rig {
    fake: FakeServer,
    shared: Arc<Shared>,
    stop: Stop,
    listener: TcpListener,
    next_id: u64,
}

impl Rig {
    /// A pool of at most `pool_max` connections, `extra` TOML on top.
    async fn new(pool_max: usize, extra: &str) -> Rig {
        let fake = FakeServer::start().await;
        let config = fake.config(&format!("{FIXED}\npool_max = {pool_max}\n{extra}"));
        let credentials = Arc::new(StaticCredentials::from_config(&config));
        let tls = ServerTls::new(SslMode::Disable, Vec::new()).expect("plaintext needs no CA");
        let stop = Stop::new();
        let auth = crate::client::auth::Authenticator::from_config(&config);
        let pools = Pools::new(Arc::new(config), credentials, tls, TaskTracker::new(), stop.clone());
        let shared = Arc::new(Shared::new(pools, TaskTracker::new(), None, auth));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        Rig { fake, shared, stop, listener, next_id: 1 }
    }

    /// A client connected, with a session serving it; nothing sent yet.
    async fn connect(&mut self) -> Client {
        let addr = self.listener.local_addr().expect("bound");
        let stream = TcpStream::connect(addr).await.expect("connect to the session");
        let (accepted, peer) = self.listener.accept().await.expect("accept");
        self.next_id += 1;
        let session =
            serve(Arc::clone(&self.shared), Stream::Tcp(accepted), Peer::Tcp(peer), self.next_id, self.stop.clone());
        Client::new(stream, tokio::spawn(session))
    }

    /// The size of a session's future, as a client's task holds it (built, never run).
    async fn serve_size(&self) -> usize {
        let stream = TcpStream::connect(self.listener.local_addr().expect("bound")).await.expect("connect");
        let (accepted, peer) = self.listener.accept().await.expect("accept");
        let session = serve(Arc::clone(&self.shared), Stream::Tcp(accepted), Peer::Tcp(peer), 1, self.stop.clone());
        drop(stream);
        std::mem::size_of_val(&session)
    }

    /// A client logged in as the fake's user to its database, past the first ReadyForQuery.
    async fn login(&mut self) -> Client {
        self.login_with(&[]).await
    }

    /// A client logged in with start-up parameters `extra` besides user and database.
    async fn login_with(&mut self, extra: &[(&str, &str)]) -> Client {
        let mut client = self.connect().await;
        let mut params = vec![("user", "app"), ("database", "db")];
        params.extend_from_slice(extra);
        client.startup(&params).await;
        let greeting = client.until_ready().await;
        assert_eq!(greeting.first().map(|m| m.tag), Some(b'R'), "logged in: {}", tags(&greeting));
        client.greeting = greeting;
        client
    }

    /// Sends a CancelRequest with `key` on a connection of its own, as a driver does, and waits until
    /// pgmux has dealt with it (it closes that connection once the cancel has landed).
    async fn cancel(&mut self, key: (i32, i32)) {
        let mut canceller = self.connect().await;
        canceller.send_cancel(key).await;
        assert!(canceller.closed().await.is_empty(), "a cancel request gets no reply");
    }

    /// Waits up to [`WAIT`] until the pool's counts show `what`.
    async fn pool_until(&self, what: &str, cond: impl Fn(Status) -> bool) {
        let deadline = std::time::Instant::now() + WAIT;
        while !cond(self.pool()) {
            assert!(std::time::Instant::now() < deadline, "the pool never showed that {what}: {:?}", self.pool());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Breaks the idle connection at pgmux's end, unseen: its socket can no longer send, and nothing
    /// about it changes until pgmux tries.
    fn break_idle_connection(&self) {
        let lease = self.server_pool().try_checkout().expect("an idle connection");
        let Stream::Tcp(socket) = &lease.io.stream else { panic!("a plain TCP connection") };
        socket2::SockRef::from(socket).shutdown(std::net::Shutdown::Write).expect("shut its sending side");
    }

    /// The pool's counts now.
    fn pool(&self) -> Status {
        self.server_pool().status()
    }

    /// The one pool the sessions use.
    fn server_pool(&self) -> &ServerPool {
        self.shared.pools.first()
    }
}

/// Moves the clock `by` at once: timers due meanwhile fire, and no real time passes. The clock is frozen
/// only for the jump, so the sockets around it run in real time.
async fn jump(by: Duration) {
    tokio::time::pause();
    tokio::time::advance(by).await;
    tokio::time::resume();
}
