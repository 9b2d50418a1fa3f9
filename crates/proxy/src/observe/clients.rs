//! Every client connection as the admin console sees it: who it is, what it is doing, which server it holds,
//! whether it is pinned. A session writes its own entry with relaxed stores (a plain move on x86, no lock,
//! no read-modify-write); the console and `/metrics` read every entry when asked. Adding and removing an
//! entry takes the book's lock once per connection, never per transaction.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use pgmux_metrics::{ClientState, Label};

use crate::sql::PinReason;
use crate::stop::KillSwitch;

/// Where a client connected from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    Tcp(SocketAddr),
    /// The Unix socket, shown as PgBouncer shows it: address `unix`, pgmux's own port.
    Unix {
        port: u16,
    },
}

impl Peer {
    /// `SHOW CLIENTS`' `addr`.
    pub(crate) fn addr(&self) -> String {
        match self {
            Peer::Tcp(addr) => addr.ip().to_string(),
            Peer::Unix { .. } => "unix".to_owned(),
        }
    }

    /// `SHOW CLIENTS`' `port`.
    pub(crate) fn port(&self) -> u16 {
        match self {
            Peer::Tcp(addr) => addr.port(),
            Peer::Unix { port } => *port,
        }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Tcp(addr) => addr.fmt(f),
            Peer::Unix { port } => write!(f, "unix:{port}"),
        }
    }
}

/// One client connection.
#[derive(Debug)]
pub(crate) struct ClientEntry {
    /// The session's id: `SHOW CLIENTS`' `id`, what `KILL_CLIENT` takes.
    pub(crate) id: u64,
    pub(crate) peer: Peer,
    /// Unix seconds when it connected.
    pub(crate) connected_unix: u64,
    pub(crate) application_name: Option<Box<str>>,
    /// The user it logged in as, when it is not the user pgmux serves (console users).
    pub(crate) user: Option<Box<str>>,
    /// An admin console session rather than a pooled client.
    pub(crate) console: bool,
    state: AtomicU8,
    /// The server connection it holds (0: none).
    server: AtomicU64,
    /// When it began to wait for a server connection, µs since the observer started (0: not waiting).
    wait_since_us: AtomicU64,
    /// When its last transaction began, µs since the observer started.
    request_us: AtomicU64,
    /// `PinReason` index + 1 (0: not pinned).
    pin: AtomicU8,
    pinned_unix: AtomicU64,
    pub(crate) kill: Arc<KillSwitch>,
}

/// What a new entry is made of.
#[derive(Debug)]
pub(crate) struct NewClient {
    pub(crate) id: u64,
    pub(crate) peer: Peer,
    pub(crate) connected_unix: u64,
    pub(crate) application_name: Option<Box<str>>,
    pub(crate) user: Option<Box<str>>,
    pub(crate) console: bool,
}

impl ClientEntry {
    fn new(c: NewClient) -> ClientEntry {
        ClientEntry {
            id: c.id,
            peer: c.peer,
            connected_unix: c.connected_unix,
            application_name: c.application_name,
            user: c.user,
            console: c.console,
            state: AtomicU8::new(ClientState::Idle as u8),
            server: AtomicU64::new(0),
            wait_since_us: AtomicU64::new(0),
            request_us: AtomicU64::new(0),
            pin: AtomicU8::new(0),
            pinned_unix: AtomicU64::new(0),
            kill: Arc::default(),
        }
    }

    pub(crate) fn state(&self) -> ClientState {
        ClientState::ALL.get(self.state.load(Relaxed) as usize).copied().unwrap_or(ClientState::Idle)
    }

    /// Began to wait for a server connection at `now_us`.
    #[inline]
    pub(crate) fn waiting(&self, now_us: u64) {
        self.wait_since_us.store(now_us.max(1), Relaxed);
        self.state.store(ClientState::Waiting as u8, Relaxed);
    }

    /// Got server connection `server` for a transaction that began at `request_us`.
    #[inline]
    pub(crate) fn linked(&self, server: u64, request_us: u64) {
        self.server.store(server, Relaxed);
        self.request_us.store(request_us, Relaxed);
        self.wait_since_us.store(0, Relaxed);
        self.state.store(ClientState::Active as u8, Relaxed);
    }

    /// Gave its server connection back (or got none).
    #[inline]
    pub(crate) fn unlinked(&self) {
        self.server.store(0, Relaxed);
        self.wait_since_us.store(0, Relaxed);
        self.state.store(ClientState::Idle as u8, Relaxed);
    }

    pub(crate) fn server(&self) -> u64 {
        self.server.load(Relaxed)
    }

    pub(crate) fn wait_since_us(&self) -> Option<u64> {
        Some(self.wait_since_us.load(Relaxed)).filter(|w| *w > 0)
    }

    pub(crate) fn request_us(&self) -> u64 {
        self.request_us.load(Relaxed)
    }

    /// Became pinned at `unix` seconds.
    pub(crate) fn pinned(&self, reason: PinReason, unix: u64) {
        self.pinned_unix.store(unix, Relaxed);
        self.pin.store(reason as u8 + 1, Relaxed);
    }

    pub(crate) fn unpinned(&self) {
        self.pin.store(0, Relaxed);
    }

    /// Why it is pinned, and since when (Unix seconds).
    pub(crate) fn pin(&self) -> Option<(PinReason, u64)> {
        let p = self.pin.load(Relaxed);
        let reason = PinReason::ALL.get((p as usize).checked_sub(1)?)?;
        Some((*reason, self.pinned_unix.load(Relaxed)))
    }
}

/// Every live client connection, by id.
#[derive(Debug, Default)]
pub(crate) struct ClientBook {
    entries: Mutex<BTreeMap<u64, Arc<ClientEntry>>>,
}

impl ClientBook {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<ClientEntry>>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a client; the ticket removes it when dropped.
    pub(crate) fn add(self: &Arc<Self>, client: NewClient) -> ClientTicket {
        let entry = Arc::new(ClientEntry::new(client));
        self.lock().insert(entry.id, Arc::clone(&entry));
        ClientTicket { entry, book: Arc::clone(self) }
    }

    /// Every entry, in id order.
    pub(crate) fn all(&self) -> Vec<Arc<ClientEntry>> {
        self.lock().values().cloned().collect()
    }

    pub(crate) fn get(&self, id: u64) -> Option<Arc<ClientEntry>> {
        self.lock().get(&id).cloned()
    }
}

/// A client's place in the [`ClientBook`], for as long as the connection lives.
#[derive(Debug)]
pub(crate) struct ClientTicket {
    entry: Arc<ClientEntry>,
    book: Arc<ClientBook>,
}

impl std::ops::Deref for ClientTicket {
    type Target = ClientEntry;
    fn deref(&self) -> &ClientEntry {
        &self.entry
    }
}

impl Drop for ClientTicket {
    fn drop(&mut self) {
        self.book.lock().remove(&self.entry.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(id: u64) -> NewClient {
        NewClient {
            id,
            peer: Peer::Tcp("127.0.0.1:5000".parse().unwrap_or_else(|_| unreachable!())),
            connected_unix: 1,
            application_name: None,
            user: None,
            console: false,
        }
    }

    #[test]
    fn an_entry_follows_its_session_and_leaves_with_it() {
        let book = Arc::new(ClientBook::default());
        let a = book.add(client(1));
        let b = book.add(client(2));
        a.waiting(10);
        assert_eq!((a.state(), a.wait_since_us()), (ClientState::Waiting, Some(10)));
        a.linked(7, 10);
        assert_eq!((a.state(), a.server(), a.wait_since_us()), (ClientState::Active, 7, None));
        a.pinned(PinReason::Listen, 99);
        assert_eq!(a.pin(), Some((PinReason::Listen, 99)));
        a.unlinked();
        assert_eq!((a.state(), a.server()), (ClientState::Idle, 0));
        assert_eq!(book.all().iter().map(|e| e.id).collect::<Vec<_>>(), vec![1, 2]);
        drop(b);
        assert!(book.get(2).is_none() && book.get(1).is_some());
    }
}
