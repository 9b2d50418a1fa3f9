//! Cancel requests: each client gets its own key, and a cancel with that key reaches whichever server
//! connection serves the client at that moment, and no other.
//!
//! A cancel travels on a new connection to PostgreSQL and acts when it gets there. If the server connection
//! went back to the pool in between and another client's query were running on it, that query would be
//! cancelled instead. So while a cancel is in flight the client keeps its server connection: the session
//! waits for the forward to finish before releasing it (PostgreSQL closes the cancel connection once it
//! has signalled the backend).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use pgmux_proto::encode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// Longest a forwarded cancel may take (PgBouncer's `cancel_wait_timeout` default).
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// Where a cancel for a server connection goes, and the key it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ServerKey {
    pub(crate) addr: SocketAddr,
    pub(crate) pid: i32,
    pub(crate) secret: i32,
}

/// A client's cancel state: the server it is linked to now, and cancels being forwarded to it.
#[derive(Debug)]
pub(crate) struct CancelTarget {
    secret: [u8; 4],
    state: Mutex<TargetState>,
    done: Notify,
}

#[derive(Debug, Default)]
struct TargetState {
    server: Option<ServerKey>,
    in_flight: u32,
}

impl CancelTarget {
    fn lock(&self) -> std::sync::MutexGuard<'_, TargetState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The client now uses this server connection.
    pub(crate) fn link(&self, server: ServerKey) {
        self.lock().server = Some(server);
    }

    /// The client gives its server connection back; waits first for cancels still on their way to it.
    pub(crate) async fn unlink(&self) {
        // Almost always nothing is in flight: no waiter is registered for that case.
        if self.try_unlink() {
            return;
        }
        loop {
            let notified = self.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.try_unlink() {
                return;
            }
            notified.await;
        }
    }

    /// Unlinks at once if no cancel is in flight.
    pub(crate) fn try_unlink(&self) -> bool {
        let mut st = self.lock();
        if st.in_flight == 0 {
            st.server = None;
        }
        st.in_flight == 0
    }

    /// Forgets the server at once, cancels in flight or not: the connection is gone or being cleaned up.
    pub(crate) fn clear(&self) {
        self.lock().server = None;
    }

    /// Starts a forward: the server to cancel, now, if any.
    fn begin(&self) -> Option<ServerKey> {
        let mut st = self.lock();
        let server = st.server?;
        st.in_flight += 1;
        Some(server)
    }

    fn end(&self) {
        self.lock().in_flight -= 1;
        self.done.notify_waiters();
    }
}

/// Every live client's cancel key.
#[derive(Debug, Default)]
pub(crate) struct CancelRegistry {
    clients: Mutex<HashMap<i32, Arc<CancelTarget>>>,
}

/// A client's registration; dropping it removes the key.
#[derive(Debug)]
pub(crate) struct Registration {
    registry: Arc<CancelRegistry>,
    pub(crate) pid: i32,
    pub(crate) secret: i32,
    pub(crate) target: Arc<CancelTarget>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.pid);
    }
}

impl CancelRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Arc<CancelTarget>>> {
        self.clients.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives a new client a unique, positive process id and a random secret.
    pub(crate) fn register(self: &Arc<Self>) -> Registration {
        let secret: i32 = rand::random();
        let target =
            Arc::new(CancelTarget { secret: secret.to_be_bytes(), state: Mutex::default(), done: Notify::new() });
        let mut clients = self.lock();
        let pid = loop {
            // Positive: some drivers (pgjdbc before 42.3.1) reject a negative pid.
            let pid = rand::random_range(1..i32::MAX);
            if !clients.contains_key(&pid) {
                break pid;
            }
        };
        clients.insert(pid, Arc::clone(&target));
        Registration { registry: Arc::clone(self), pid, secret, target }
    }

    /// Forwards a client's cancel request to the server that serves it now. Unknown keys, wrong secrets
    /// and idle clients are ignored, as PostgreSQL ignores them.
    pub(crate) async fn cancel(&self, pid: i32, secret: &[u8]) {
        let Some(target) = self.lock().get(&pid).cloned() else {
            tracing::debug!(pid, "cancel request for an unknown key");
            return;
        };
        if !constant_time_eq(&target.secret, secret) {
            tracing::debug!(pid, "cancel request with a wrong secret");
            return;
        }
        let Some(server) = target.begin() else {
            tracing::debug!(pid, "cancel request for a client with no query running");
            return;
        };
        if let Err(e) = tokio::time::timeout(CANCEL_WAIT, forward(server))
            .await
            .unwrap_or_else(|_| Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "cancel forward timed out")))
        {
            tracing::warn!(pid, server = %server.addr, error = %e, "could not forward a cancel request");
        }
        target.end();
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

    #[tokio::test]
    async fn keys_are_positive_unique_and_removed_on_drop() {
        let reg = Arc::new(CancelRegistry::default());
        let a = reg.register();
        let b = reg.register();
        assert!(a.pid > 0 && b.pid > 0 && a.pid != b.pid);
        assert_eq!(reg.lock().len(), 2);
        drop(a);
        assert_eq!(reg.lock().len(), 1);
    }

    #[tokio::test]
    async fn unlink_waits_for_a_cancel_in_flight() {
        let reg = Arc::new(CancelRegistry::default());
        let r = reg.register();
        let key = ServerKey { addr: "127.0.0.1:1".parse().unwrap(), pid: 5, secret: 6 };
        r.target.link(key);
        assert_eq!(r.target.begin(), Some(key));
        let target = Arc::clone(&r.target);
        let unlinked = tokio::spawn(async move { target.unlink().await });
        tokio::task::yield_now().await;
        assert!(!unlinked.is_finished(), "the server must stay linked while its cancel is on the way");
        r.target.end();
        unlinked.await.unwrap();
        assert_eq!(r.target.begin(), None, "after unlinking there is nothing to cancel");
    }

    #[tokio::test]
    async fn a_wrong_secret_cancels_nothing() {
        let reg = Arc::new(CancelRegistry::default());
        let r = reg.register();
        // Nothing listens on the key's address: a forward attempt would log a warning but not hang.
        r.target.link(ServerKey { addr: "127.0.0.1:9".parse().unwrap(), pid: 1, secret: 1 });
        let wrong = (r.secret ^ 1).to_be_bytes();
        reg.cancel(r.pid, &wrong).await;
        assert_eq!(r.target.lock().in_flight, 0);
    }
}
