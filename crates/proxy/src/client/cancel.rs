//! Cancel requests: each client gets its own key, and a cancel with that key reaches whichever server
//! connection serves the client at that moment, and no other.
//!
//! A cancel travels on a new connection to PostgreSQL and acts when it gets there. If the server connection
//! went back to the pool in between and another client's query were running on it, that query would be
//! cancelled instead. So while a cancel is in flight the client keeps its server connection: the session
//! waits for the forward to finish before releasing it (PostgreSQL closes the cancel connection once it
//! has signalled the backend).
//!
//! A client whose query waits in line for a server connection has nothing on a server to cancel: its cancel
//! is kept here, and the session answers the waiting query itself with the error PostgreSQL would give.

use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::BytesMut;
use parking_lot::{Mutex, MutexGuard};
use pgmux_proto::encode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::runtime::slots::Slots;

/// Longest a forwarded cancel may take in the tests (`cancel_wait_timeout`'s default).
#[cfg(test)]
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// Where a cancel for a server connection goes, and the key it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ServerKey {
    pub(crate) addr: SocketAddr,
    pub(crate) pid: i32,
    pub(crate) secret: i32,
}

/// A client's cancel state: its secret, the server it is linked to now, and cancels on their way there.
/// Kept inline in the registry's slots (no allocation per client: there may be tens of thousands).
#[derive(Debug)]
struct Target {
    secret: [u8; 4],
    /// Tells apart the clients that use one slot in turn.
    generation: u32,
    server: Option<ServerKey>,
    in_flight: u32,
    /// The client's query waits in line for a server connection.
    waiting: bool,
    /// A cancel came while it waited.
    cancelled: bool,
    /// The waiting session's task, woken by such a cancel.
    waker: Option<Waker>,
}

/// Every live client's cancel key. A client's pid is its slot index plus one: unique among live clients,
/// positive (pgjdbc before 42.3.1 rejects a negative pid), and cheap to look up; the random secret is what
/// makes a key unguessable.
#[derive(Debug, Default)]
pub(crate) struct CancelRegistry {
    clients: Mutex<Slots<Target>>,
    generations: std::sync::atomic::AtomicU32,
    /// Signalled whenever a forwarded cancel completes, for sessions waiting to unlink.
    done: Notify,
}

/// A client's registration; dropping it removes the key.
#[derive(Debug)]
pub(crate) struct Registration {
    registry: Arc<CancelRegistry>,
    slot: u32,
    pub(crate) secret: i32,
}

impl Registration {
    /// The pid in the client's key: its slot plus one (worked out, not kept: every idle client has one).
    pub(crate) fn pid(&self) -> i32 {
        pid_of(self.slot)
    }

    fn with<R>(&self, f: impl FnOnce(&mut Target) -> R) -> Option<R> {
        self.registry.lock().get_mut(self.slot).map(f)
    }

    /// The client now uses this server connection.
    pub(crate) fn link(&self, server: ServerKey) {
        self.with(|t| t.server = Some(server));
    }

    /// Unlinks at once if no cancel is in flight.
    pub(crate) fn try_unlink(&self) -> bool {
        self.with(|t| {
            if t.in_flight == 0 {
                t.server = None;
            }
            t.in_flight == 0
        })
        .unwrap_or(true)
    }

    /// The client gives its server connection back; waits first for cancels still on their way to it.
    pub(crate) async fn unlink(&self) {
        wait_for(&self.registry.done, || self.try_unlink()).await;
    }

    /// Forgets the server at once, cancels in flight or not: the connection is gone or being cleaned up.
    pub(crate) fn clear(&self) {
        self.with(|t| t.server = None);
    }

    /// The client's query starts waiting for a server connection: from now a cancel is kept for
    /// [`Registration::cancelled`] rather than ignored.
    pub(crate) fn wait_begin(&self) {
        self.with(|t| {
            t.waiting = true;
            t.cancelled = false;
        });
    }

    /// The wait is over; true if a cancel came during it.
    pub(crate) fn wait_end(&self) -> bool {
        self.with(|t| {
            t.waiting = false;
            t.waker = None;
            std::mem::take(&mut t.cancelled)
        })
        .unwrap_or(false)
    }

    /// Ready once a cancel has come for this client since [`Registration::wait_begin`]; until then the
    /// task is woken by one (its own waker, kept with its key: no queue of every waiting client to wake).
    pub(crate) fn poll_cancelled(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.with(|t| {
            if t.cancelled {
                return Poll::Ready(());
            }
            if !t.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                t.waker = Some(cx.waker().clone());
            }
            Poll::Pending
        })
        .unwrap_or(Poll::Pending)
    }
}

fn pid_of(slot: u32) -> i32 {
    i32::try_from(slot).map_or(i32::MAX, |s| s.saturating_add(1))
}

/// Waits on `notify` until `ready()` holds. It registers before each check, so a signal between the check
/// and the wait is not missed.
async fn wait_for(notify: &Notify, mut ready: impl FnMut() -> bool) {
    loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if ready() {
            return;
        }
        notified.await;
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.lock().remove(self.slot);
    }
}

impl CancelRegistry {
    fn lock(&self) -> MutexGuard<'_, Slots<Target>> {
        self.clients.lock()
    }

    /// Gives a new client a unique, positive process id and a random secret.
    pub(crate) fn register(self: &Arc<Self>) -> Registration {
        let secret: i32 = rand::random();
        let generation = self.generations.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let target = Target {
            secret: secret.to_be_bytes(),
            generation,
            server: None,
            in_flight: 0,
            waiting: false,
            cancelled: false,
            waker: None,
        };
        let slot = self.lock().insert(target);
        Registration { registry: Arc::clone(self), slot, secret }
    }

    /// [`cancel_within`](Self::cancel_within) the default `cancel_wait_timeout`.
    #[cfg(test)]
    pub(crate) async fn cancel(&self, pid: i32, secret: &[u8]) {
        self.cancel_within(pid, secret, CANCEL_WAIT).await;
    }

    /// Forwards a client's cancel request to the server that serves it now, or, if its query waits for a
    /// server connection, tells the session to answer it. Unknown keys, wrong secrets and idle clients are
    /// ignored, as PostgreSQL ignores them. The forward is given up after `wait` (`cancel_wait_timeout`;
    /// zero: no limit).
    pub(crate) async fn cancel_within(&self, pid: i32, secret: &[u8], wait: Duration) {
        let Some(slot) = u32::try_from(pid.wrapping_sub(1)).ok() else { return };
        let begun = {
            let mut clients = self.lock();
            match clients.get_mut(slot) {
                None => Err("cancel request for an unknown key"),
                Some(t) if !constant_time_eq(&t.secret, secret) => Err("cancel request with a wrong secret"),
                Some(t) => match t.server {
                    None if t.waiting => {
                        t.cancelled = true;
                        // Woken under the lock: waking only schedules the task.
                        if let Some(waker) = t.waker.take() {
                            waker.wake();
                        }
                        Err("cancel request for a client waiting for a server connection: answered by pgmux")
                    }
                    None => Err("cancel request for a client with no query running"),
                    Some(server) => {
                        t.in_flight += 1;
                        Ok((server, t.generation))
                    }
                },
            }
        };
        let (server, generation) = match begun {
            Ok(b) => b,
            Err(why) => {
                tracing::debug!(pid, why);
                return;
            }
        };
        let forwarded = if wait.is_zero() {
            forward(server).await
        } else {
            match pgmux_timer::timeout(wait, forward(server)).await {
                Ok(forwarded) => forwarded,
                Err(_) => {
                    // PgBouncer's words for it, which its operators' scripts look for.
                    tracing::warn!(pid, server = %server.addr, "closing because: cancel_wait_timeout ({wait:?}): the cancel request was not forwarded in time");
                    Ok(())
                }
            }
        };
        if let Err(e) = forwarded {
            tracing::warn!(pid, server = %server.addr, error = %e, "could not forward a cancel request");
        }
        // The client may have left meanwhile and its slot gone to another: only its own count goes down.
        if let Some(t) = self.lock().get_mut(slot).filter(|t| t.generation == generation) {
            t.in_flight -= 1;
        }
        self.done.notify_waiters();
    }
}

/// Sends a CancelRequest to the server and waits until it closes the connection, which it does once it has
/// signalled the backend.
pub(crate) async fn forward(server: ServerKey) -> std::io::Result<()> {
    let mut stream = TcpStream::connect(server.addr).await?;
    let mut buf = BytesMut::new();
    encode::cancel_request(&mut buf, server.pid, server.secret);
    stream.write_all(&buf).await?;
    let mut sink = [0u8; 64];
    while stream.read(&mut sink).await? > 0 {}
    Ok(())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(port: u16) -> ServerKey {
        ServerKey { addr: SocketAddr::from(([127, 0, 0, 1], port)), pid: 4242, secret: 7 }
    }

    #[tokio::test]
    async fn keys_are_positive_unique_and_removed_on_drop() {
        let reg = Arc::new(CancelRegistry::default());
        let a = reg.register();
        let b = reg.register();
        assert!(a.pid() > 0 && b.pid() > 0 && a.pid() != b.pid());
        assert_eq!(reg.lock().len(), 2);
        let a_pid = a.pid();
        drop(a);
        assert_eq!(reg.lock().len(), 1);
        assert_eq!(reg.register().pid(), a_pid, "a freed pid is reused");
    }

    #[tokio::test]
    async fn a_cancel_reaches_the_linked_server_with_its_key_and_holds_the_link_until_done() {
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let reg = Arc::new(CancelRegistry::default());
        let r = Arc::new(reg.register());
        r.link(key(server.local_addr().unwrap().port()));

        let forward = tokio::spawn({
            let (reg, pid, secret) = (Arc::clone(&reg), r.pid(), r.secret.to_be_bytes());
            async move { reg.cancel(pid, &secret).await }
        });
        let (mut conn, _) = server.accept().await.unwrap();
        let mut got = [0u8; 16];
        conn.read_exact(&mut got).await.unwrap();
        let mut expected = BytesMut::new();
        encode::cancel_request(&mut expected, 4242, 7);
        assert_eq!(&got[..], &expected[..], "the server's own key, not the client's");

        // While the cancel is on its way, the client cannot give its server back.
        assert!(!r.try_unlink());
        let unlinked = tokio::spawn({
            let r = Arc::clone(&r);
            async move { r.unlink().await }
        });
        tokio::task::yield_now().await;
        assert!(!unlinked.is_finished());
        drop(conn); // the server closes once it has signalled its backend
        forward.await.unwrap();
        unlinked.await.unwrap();
        assert!(r.try_unlink());
    }

    #[tokio::test]
    async fn wrong_keys_and_idle_clients_reach_no_server() {
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let reg = Arc::new(CancelRegistry::default());
        let r = reg.register();
        let idle = reg.register();
        r.link(key(server.local_addr().unwrap().port()));
        reg.cancel(r.pid(), &(r.secret ^ 1).to_be_bytes()).await;
        reg.cancel(r.pid() + 1000, &r.secret.to_be_bytes()).await;
        reg.cancel(0, &r.secret.to_be_bytes()).await;
        reg.cancel(idle.pid(), &idle.secret.to_be_bytes()).await;
        let nothing = pgmux_timer::timeout(Duration::from_millis(200), server.accept()).await;
        assert!(nothing.is_err(), "a wrong key must not reach the server");
    }

    #[tokio::test]
    async fn a_cancel_for_a_waiting_client_is_kept_for_it_and_only_while_it_waits() {
        let reg = Arc::new(CancelRegistry::default());
        let r = Arc::new(reg.register());
        let other = reg.register();
        other.wait_begin();

        // Idle: ignored, and not remembered for a later wait.
        reg.cancel(r.pid(), &r.secret.to_be_bytes()).await;
        r.wait_begin();
        assert!(!r.wait_end());

        r.wait_begin();
        let heard = tokio::spawn({
            let r = Arc::clone(&r);
            async move { std::future::poll_fn(|cx| r.poll_cancelled(cx)).await }
        });
        tokio::task::yield_now().await;
        assert!(!heard.is_finished());
        reg.cancel(r.pid(), &(r.secret ^ 1).to_be_bytes()).await;
        tokio::task::yield_now().await;
        assert!(!heard.is_finished(), "a wrong secret cancels nothing");
        reg.cancel(r.pid(), &r.secret.to_be_bytes()).await;
        pgmux_timer::timeout(Duration::from_secs(5), heard).await.expect("the waiting session hears it").unwrap();
        assert!(r.wait_end());
        assert!(!other.wait_end(), "another waiting client's query is not cancelled");
    }
}
