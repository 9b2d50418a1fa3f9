//! One client connection, from its first byte to its last: start-up and login ([`login`]), then the relay
//! loop that lends it a server connection for each transaction ([`relay`], [`link`]).
//!
//! The loop is a single task that drives both sockets at once: it reads whichever side has data, queues
//! whole messages for the other side (untouched, as the same bytes), and writes as the sockets accept. All
//! reads and writes are `poll_*` calls, so waiting on shutdown at the same time never loses a byte.

mod line;
mod link;
mod login;
pub(crate) use login::prewarm;
mod meter;
mod passthrough;
mod pin;
mod relay;
mod replay;
mod timers;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use crate::observe::{Peer, Tally};
use crate::pools::{PoolId, ServerLease};
use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::{FrameError, Framer, Sender, sqlstate};

use crate::client::cancel::Registration;
use crate::client::caps::Hold;
use crate::client::memory::Reservation;
use crate::client::shared::Shared;
use crate::net::io::{Conn, Stream};
use crate::protocol::params::ClientParams;
use crate::protocol::router::Router;
use crate::runtime::stop::{KillSwitch, Level, Stop, Watch};
use crate::server::ServerConn;
use relay::{Event, Then};

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
    /// pgmux closes the session and tells the client why: a timeout (idle_transaction_timeout,
    /// client_idle_timeout), or a pinned client whose server's node is no longer trusted.
    Closed(Box<ErrorMessage>),
}

impl End {
    /// The session closes, and the client is told `err` (boxed: an `End` travels through every await of
    /// the relay loop, whose futures would otherwise carry the message's space).
    fn closed(err: ErrorMessage) -> End {
        End::Closed(Box::new(err))
    }
}

/// A server connection lent to this client. If the session ends without giving it back properly (a panic,
/// the shutdown deadline), dropping it closes the connection instead of returning it dirty to the pool.
#[derive(Debug)]
struct Linked {
    lease: Option<ServerLease>,
    /// The server's write queue's `sent` when the current transaction began: anything past it means some
    /// byte of the transaction reached the server (and a failure may have left work done there).
    sent_before: u64,
    /// When its transaction began, read only while a transaction_timeout is in force.
    began: Option<tokio::time::Instant>,
    /// What SHOW STATS has not been told yet: the link's assignment, and its transaction's queries so far.
    tally: Tally,
}

impl Linked {
    fn new(lease: ServerLease, tally: Tally) -> Self {
        Linked { sent_before: lease.io.out.sent(), lease: Some(lease), began: None, tally }
    }

    /// The server connection, and the tally its queries go in.
    fn conn_and_tally(&mut self) -> (&mut ServerConn, &mut Tally) {
        match &mut self.lease {
            Some(lease) => (lease, &mut self.tally),
            None => unreachable!("a link holds its lease until taken"),
        }
    }

    fn conn(&mut self) -> &mut ServerConn {
        match &mut self.lease {
            Some(lease) => lease,
            None => unreachable!("a link holds its lease until taken"),
        }
    }

    fn take(mut self) -> ServerLease {
        match self.lease.take() {
            Some(lease) => lease,
            None => unreachable!("a link is taken once"),
        }
    }

    /// Whether any byte of the current transaction has been written to the server.
    fn reached_server(&self) -> bool {
        self.lease.as_ref().is_some_and(|lease| lease.io.out.sent() > self.sent_before)
    }

    /// The node the server connection is on.
    fn addr(&self) -> SocketAddr {
        match &self.lease {
            Some(lease) => lease.addr,
            None => unreachable!("a link holds its lease until taken"),
        }
    }

    /// A new transaction begins on the same server (a pinned client).
    fn next_transaction(&mut self) {
        if let Some(lease) = &self.lease {
            self.sent_before = lease.io.out.sent();
        }
    }
}

impl Drop for Linked {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            drop(lease.discard());
        }
    }
}

/// A logged-in client.
struct Session {
    /// Shutdown and the admin's kill switch, as this session sees them.
    watch: Watch,
    client: Conn,
    /// Boxed: an idle client holds no server, and should not carry a link's space.
    server: Option<Box<Linked>>,
    params: ClientParams,
    /// Its statements, session state and mode: what each message means.
    router: Router,
    /// The current transaction's messages, while it could still run again on another server.
    replay: replay::Replay,
    /// query_timeout, idle_transaction_timeout, client_idle_timeout, the client's idle_session_timeout.
    timer: timers::Timer,
    /// What it holds of `max_client_buffers` while a large message arrives.
    reservation: Reservation,
    cancel: Registration,
    /// Its clocks and counters, and its entry in the admin console's list of clients.
    meter: meter::Meter,
    /// A unit waiting in line for a server connection (boxed: most of the time there is none).
    line: Option<Box<line::InLine>>,
    /// Close as soon as the client is between transactions, and why.
    closing: Closing,
    /// The pool of its route, in the registry.
    pool: PoolId,
    /// Its pool is in session mode: it keeps its server connection until it leaves.
    session_mode: bool,
    /// Its route is a reader route: each transaction picks its pool among the instances of `route`'s set.
    reader_route: bool,
    /// The pool of its route (the writer's, for a reader route, which `pool` is not always).
    route: PoolId,
    /// Counts it under its database and user (SHOW DATABASES, SHOW USERS, the client caps) while it lives;
    /// its user's own timeouts.
    counted: Hold,
    /// What the sessions share; while it lives, the client counts toward max_client_conn. Last, so that it
    /// is dropped last: the client stops counting once everything else it held is gone.
    shared: ClientSlot,
}

/// Serves one accepted client connection until it ends.
///
/// The task this future becomes is most of what an idle client costs, so it is built to hold no more than
/// the session and its relay loop: login is boxed (and freed once done), and the accepted socket's
/// arguments go into that box rather than staying in the future as an async fn's parameters would.
pub(crate) fn serve(
    shared: Arc<Shared>,
    stream: Stream,
    peer: Peer,
    client_id: u64,
    stop: Stop,
) -> impl Future<Output = ()> + Send {
    let span = tracing::info_span!("client", client_id, %peer);
    let mut conn = Conn::with_stream(stream, Sender::Frontend);
    conn.framer = Framer::with_limit(Sender::Frontend, shared.config().max_client_message);
    // Counted from the first byte, so that max_client_conn also bounds clients that never finish logging in.
    let slot = ClientSlot::new(&shared);
    InSpan {
        span: (!span.is_disabled()).then(|| Box::new(span)),
        inner: live(Box::pin(login::login(shared, conn, stop, client_id, slot, peer))),
    }
}

pin_project_lite::pin_project! {
    /// A future run inside its span, as `tracing::Instrument` does, but 8 bytes in every client's task
    /// rather than 40: at the usual log levels the span is off, and then there is nothing to keep.
    struct InSpan<F> {
        span: Option<Box<tracing::Span>>,
        #[pin]
        inner: F,
    }
}

impl<F: Future> Future for InSpan<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = this.span.as_deref().map(tracing::Span::enter);
        this.inner.poll(cx)
    }
}

/// Logs in, relays, cleans up.
async fn live(login: Pin<Box<impl Future<Output = Option<Session>>>>) {
    let Some(mut session) = login.await else {
        return;
    };
    // The console lists the client under its route's pool from here on (login chose it).
    session.meter.seen.set_pool(session.pool.index());
    let end = session.run().await;
    Box::pin(session.finish(end)).await;
}

/// A client connection's handle on what the sessions share, counting it in `Shared::clients` for as long as
/// it lives.
struct ClientSlot(Arc<Shared>);

impl std::ops::Deref for ClientSlot {
    type Target = Arc<Shared>;

    fn deref(&self) -> &Arc<Shared> {
        &self.0
    }
}

impl ClientSlot {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.clients.fetch_add(1, Ordering::Relaxed);
        ClientSlot(Arc::clone(shared))
    }

    /// Client connections now, this one included.
    fn count(&self) -> usize {
        self.0.clients.load(Ordering::Relaxed)
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.0.clients.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a client whose session stopped is told: pgmux shuts down, or an admin killed it (`kill` fired).
fn goodbye(kill: &KillSwitch) -> ErrorMessage {
    if kill.fired() {
        ErrorMessage::fatal(sqlstate::ADMIN_SHUTDOWN, "terminating connection due to administrator command")
            .with_detail("An admin ran KILL or KILL_CLIENT on the pgmux console.")
    } else {
        shutting_down()
    }
}

fn shutting_down() -> ErrorMessage {
    ErrorMessage::fatal(sqlstate::ADMIN_SHUTDOWN, "pgmux is shutting down")
}

/// Why a session closes once its client is between transactions (see `Session::closing`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Closing {
    No,
    /// pgmux shuts down.
    Shutdown,
    /// The server connection it keeps was marked by RECONNECT (or a reload, or KILL) and
    /// `server_fast_close` is on: PgBouncer closes such a client rather than wait for it to leave.
    ServerChanged,
}

/// What a client closed by `server_fast_close` is told (PgBouncer's words, which its users' scripts know).
fn server_changed() -> ErrorMessage {
    ErrorMessage::fatal(sqlstate::ADMIN_SHUTDOWN, "database configuration changed")
        .with_detail("Its server connection was to be replaced, and server_fast_close is on.")
}

impl Session {
    /// What the client is told when its session is stopped: pgmux shuts down, or an admin killed it.
    fn goodbye(&self) -> ErrorMessage {
        goodbye(&self.meter.seen.kill)
    }
}

impl Session {
    /// The relay loop: returns when the session is over.
    async fn run(&mut self) -> End {
        // The shutdown watch was polled earlier in the task's current poll (see `next_event`).
        let mut watched = false;
        loop {
            // Each value is taken out of its `match` before an await, so that the future does not keep it.
            loop {
                let waiting = match self.take_slow_link() {
                    Some(waiting) => waiting,
                    // Waiting in line: the client's next messages wait their turn.
                    None if self.in_line() => break,
                    None => match self.relay_client() {
                        Ok(Some(waiting)) => match self.join_line(waiting) {
                            Some(waiting) => waiting,
                            None => break,
                        },
                        Ok(None) => break,
                        Err(end) => return end,
                    },
                };
                // The slow path: a connection to open, to check with a round trip or to bring to the
                // client's settings (a wait in line is polled below, with the sockets). Boxed: linking is a
                // large future, and an idle session should not carry its space. The box is made first and
                // the future built in it: `Box::pin` built it on the stack and copied its 1.4 KB in.
                let linking = Box::into_pin(Box::write(Box::new_uninit(), self.link_waiting(waiting)));
                watched = false;
                if let Err(end) = linking.await {
                    return end;
                }
            }
            if self.reservation.holds() {
                self.give_back_message_memory();
            }
            // Shutdown closes a client between transactions, a pinned one too (its server is closed, not lent);
            // so does server_fast_close, for a client that keeps a server connection RECONNECT marked.
            if self.closing != Closing::No && self.between_transactions() {
                if self.closing == Closing::ServerChanged {
                    return End::closed(server_changed());
                }
                self.client.out.push(shutting_down().to_bytes());
                return End::Shutdown;
            }
            if self.server.is_none() && !self.in_line() {
                self.client.shrink_if_idle(0, 0);
                self.timer.release();
            }
            let deadline = self.deadline();
            self.timer.set(deadline);
            // In a block of its own: the event is gone before the release's await below.
            let then = {
                let Some(event) = self.next_event(watched).await else {
                    self.client.out.push(self.goodbye().to_bytes());
                    return End::Shutdown;
                };
                watched = true;
                match self.handle(event) {
                    Ok(then) => then,
                    Err(end) => return end,
                }
            };
            if let Then::Release = then {
                let released = match self.release_at_once() {
                    Ok(released) => released,
                    Err(end) => return end,
                };
                // Boxed: the steps that wait are rare, and an idle session should not carry their space.
                if !released {
                    watched = false;
                    if let Err(end) = Box::pin(self.release()).await {
                        return end;
                    }
                }
            }
        }
    }

    /// The next thing to act on: shutdown (`None`: at once), a timeout, or a socket event.
    ///
    /// `watched`: the shutdown watch was polled earlier in the task's current poll, and the first poll here
    /// skips it (two of the four turns a transaction takes). It holds this task's waker, so a raise, a kill
    /// or a poke since then has woken the task, and the next poll, which looks at the watch, sees it.
    fn next_event(&mut self, mut watched: bool) -> impl Future<Output = Option<Event>> + '_ {
        std::future::poll_fn(move |cx| {
            if !std::mem::take(&mut watched) {
                match self.watch.poll(cx, &self.meter.seen.kill) {
                    Level::Hard => return Poll::Ready(None),
                    Level::Graceful if self.closing != Closing::Shutdown => {
                        self.closing = Closing::Shutdown;
                        return Poll::Ready(Some(Event::Wake));
                    }
                    _ if self.watch.poked() => return Poll::Ready(Some(Event::Wake)),
                    _ => {}
                }
            }
            match self.timer.poll(cx) {
                Poll::Ready(kind) => Poll::Ready(Some(Event::Timeout(kind))),
                Poll::Pending => match self.poll_line(cx) {
                    Poll::Ready(event) => Poll::Ready(Some(event)),
                    Poll::Pending => self.poll_io(cx).map(Some),
                },
            }
        })
    }

    /// Whether the client is between transactions: holding no server and not waiting for one, or holding
    /// one (pinned) with nothing owed and no unit open.
    fn between_transactions(&mut self) -> bool {
        match self.server.as_mut() {
            None => !self.in_line(),
            Some(linked) => linked.conn().tracker.may_release(),
        }
    }

    /// Cleans up after the loop: tells the client why if it can, and leaves no server connection dirty.
    async fn finish(mut self, end: End) {
        match &end {
            End::Protocol(e) => {
                tracing::warn!(error = %e, "client broke the protocol; closing it");
                let err = match e {
                    // A data-carrying message over max_client_message; a control message that claims to be
                    // large is just broken (08P01, as PostgreSQL says).
                    FrameError::TooLong { tag: b'Q' | b'P' | b'B' | b'F' | b'd', .. } => {
                        ErrorMessage::fatal(sqlstate::PROGRAM_LIMIT_EXCEEDED, format!("{e} (max_client_message)"))
                            .with_hint("raise max_client_message, or send the data in smaller pieces (COPY, batches)")
                    }
                    _ => ErrorMessage::fatal(sqlstate::PROTOCOL_VIOLATION, e.to_string()),
                };
                self.client.out.push(err.to_bytes());
            }
            End::Unrecoverable => tracing::warn!("server connection broke mid-message; closing the client"),
            End::Closed(err) => {
                tracing::info!("closing because: {}", err.message);
                self.client.out.push(err.to_bytes());
            }
            // PgBouncer's words for it, which its operators' scripts look for.
            End::Shutdown => tracing::info!("closing because: server shutting down"),
            End::ClientGone => tracing::debug!(?end, "session over"),
        }
        let mut tally = Tally::default();
        if let Some(mut linked) = self.server.take() {
            tally = std::mem::take(&mut linked.tally);
            self.abandon(linked).await;
        }
        let (received, sent) = self.meter.publish_bytes(self.client.received, self.client.out.sent());
        self.add_tally(&mut tally, &crate::observe::Ended { received, sent, ..Default::default() });
        let _ = pgmux_timer::timeout(std::time::Duration::from_secs(1), self.client.out.flush(&mut self.client.stream))
            .await;
    }
}

#[cfg(test)]
mod tests;
