//! One client connection, from its first byte to its last: start-up and login ([`login`]), then the relay
//! loop that lends it a server connection for each transaction ([`relay`], [`link`]).
//!
//! The loop is a single task that drives both sockets at once: it reads whichever side has data, queues
//! whole messages for the other side (untouched, as the same bytes), and writes as the sockets accept. All
//! reads and writes are `poll_*` calls, so waiting on shutdown at the same time never loses a byte.

mod link;
mod login;
mod relay;
mod route;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;

use crate::pool::ServerLease;
use bytes::{Bytes, BytesMut};
use pgmux_proto::encode::{self, ErrorMessage};
use pgmux_proto::{FrameError, Sender, TxStatus, sqlstate};
use tokio::net::TcpStream;
use tracing::Instrument;

use crate::cancel::Registration;
use crate::io::Conn;
use crate::params::ClientParams;
use crate::server::ServerConn;
use crate::shared::Shared;
use crate::stop::{Level, Stop, Watch};
use relay::Event;

/// Why a session ended.
#[derive(Debug)]
enum End {
    /// The client closed its connection, sent Terminate, or its socket failed.
    ClientGone,
    /// The client broke the protocol.
    Protocol(FrameError),
    /// The server stream broke in the middle of a message: the client's stream cannot be repaired.
    Unrecoverable,
    /// pgmux is shutting down and the client was told so.
    Shutdown,
}

/// A server connection lent to this client. If the session ends without giving it back properly (a panic,
/// the shutdown deadline), dropping it closes the connection instead of returning it dirty to the pool.
#[derive(Debug)]
struct Linked(Option<ServerLease>);

impl Linked {
    fn conn(&mut self) -> &mut ServerConn {
        match &mut self.0 {
            Some(lease) => lease,
            None => unreachable!("a link holds its lease until taken"),
        }
    }

    fn take(mut self) -> ServerLease {
        match self.0.take() {
            Some(lease) => lease,
            None => unreachable!("a link is taken once"),
        }
    }
}

impl Drop for Linked {
    fn drop(&mut self) {
        if let Some(lease) = self.0.take() {
            drop(lease.discard());
        }
    }
}

/// A logged-in client.
struct Session {
    /// Unique for the life of the process (unlike the cancel pid, which is reused).
    id: u64,
    shared: Arc<Shared>,
    stop: Stop,
    watch: Watch,
    client: Conn,
    server: Option<Linked>,
    params: ClientParams,
    state: route::ClientState,
    cancel: Registration,
    /// After an error pgmux reported for a unit with no server linked: drop messages up to the next Sync
    /// and answer that Sync here.
    skip_until_sync: bool,
    /// After an error pgmux answered inside a linked unit: drop messages up to the next Sync, which goes to
    /// the server.
    discard_until_sync: bool,
    /// The server was lost while the client sat idle in a transaction; its next unit gets the error.
    lost_transaction: bool,
    /// Shutdown has begun: close as soon as no server is linked.
    closing: bool,
    _slot: ClientSlot,
}

/// Serves one accepted client connection until it ends.
///
/// The task this future becomes is most of what an idle client costs, so it is built to hold no more than
/// the session and its relay loop: login is boxed (and freed once done), and the accepted socket's
/// arguments go into that box rather than staying in the future as an async fn's parameters would.
pub(crate) fn serve(
    shared: Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    client_id: u64,
    stop: Stop,
) -> impl Future<Output = ()> + Send {
    let span = tracing::info_span!("client", client_id, %peer);
    let _ = stream.set_nodelay(true);
    let conn = Conn::new(stream, Sender::Frontend);
    live(Box::pin(login::login(shared, conn, stop, client_id))).instrument(span)
}

/// Logs in, relays, cleans up.
async fn live(login: Pin<Box<impl Future<Output = Option<Session>>>>) {
    let Some(mut session) = login.await else {
        return;
    };
    let end = session.run().await;
    Box::pin(session.finish(end)).await;
}

/// Counts a client session in `Shared::clients` for as long as it lives.
struct ClientSlot(Arc<Shared>);

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.0.clients.fetch_sub(1, Ordering::Relaxed);
    }
}

fn ready_for_query(status: TxStatus) -> Bytes {
    let mut buf = BytesMut::new();
    encode::ready_for_query(&mut buf, status);
    buf.freeze()
}

fn shutting_down() -> ErrorMessage {
    ErrorMessage::fatal(sqlstate::ADMIN_SHUTDOWN, "pgmux is shutting down")
}

impl Session {
    /// The relay loop: returns when the session is over.
    async fn run(&mut self) -> End {
        loop {
            if let Err(end) = self.relay_client().await {
                return end;
            }
            if self.server.is_none() {
                if self.closing {
                    self.client.out.push(shutting_down().to_bytes());
                    return End::Shutdown;
                }
                self.client.shrink_if_idle(0);
            }
            let event = std::future::poll_fn(|cx| match self.watch.poll(cx) {
                Level::Hard => Poll::Ready(None),
                Level::Graceful if !self.closing => {
                    self.closing = true;
                    Poll::Ready(Some(Event::Wake))
                }
                _ => self.poll_io(cx).map(Some),
            })
            .await;
            let Some(event) = event else {
                self.client.out.push(shutting_down().to_bytes());
                return End::Shutdown;
            };
            if let Err(end) = self.handle(event).await {
                return end;
            }
        }
    }

    /// Cleans up after the loop: tells the client why if it can, and leaves no server connection dirty.
    async fn finish(mut self, end: End) {
        match &end {
            End::Protocol(e) => {
                tracing::warn!(error = %e, "client broke the protocol; closing it");
                self.client.out.push(ErrorMessage::fatal(sqlstate::PROTOCOL_VIOLATION, e.to_string()).to_bytes());
            }
            End::Unrecoverable => tracing::warn!("server connection broke mid-message; closing the client"),
            End::ClientGone | End::Shutdown => tracing::debug!(?end, "session over"),
        }
        if let Some(linked) = self.server.take() {
            self.abandon(linked).await;
        }
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), self.client.out.flush(&mut self.client.stream))
            .await;
    }
}
