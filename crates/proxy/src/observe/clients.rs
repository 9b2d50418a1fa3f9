//! Every client connection as the admin console sees it: who it is, what it is doing, which server it holds,
//! whether it is pinned. A session writes its own entry with relaxed stores (a plain move on x86, no lock,
//! no read-modify-write); the console and `/metrics` read every entry when asked. Adding and removing an
//! entry takes the book's lock once per connection, never per transaction.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering::Relaxed};

use parking_lot::{Mutex, MutexGuard};
use pgmux_metrics::{ClientState, Label};

use super::Observer;
use crate::protocol::sql::PinReason;
use crate::runtime::stop::KillSwitch;

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
    /// Unix seconds when it connected (32 bits, as `pinned_unix`: enough until 2106, and with the boxed
    /// `user` they keep the entry in jemalloc's 128-byte class, which every idle client pays).
    connected_unix: u32,
    pub(crate) application_name: Option<Box<str>>,
    /// The user it logged in as, when it is not the user its pool logs in as (console users, and clients of
    /// a database with a forced user).
    #[expect(clippy::box_collection, reason = "a thin pointer: 8 bytes in every client's entry, not 16")]
    user: Option<Box<String>>,
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
    pinned_unix: AtomicU32,
    /// The index of its pool in the registry (0: the default pool, until login has chosen another).
    pool: AtomicU16,
    /// `KILL_CLIENT`'s switch for this session.
    pub(crate) kill: KillSwitch,
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
            connected_unix: unix32(c.connected_unix),
            application_name: c.application_name,
            user: c.user.map(|u| Box::new(u.into())),
            console: c.console,
            state: AtomicU8::new(ClientState::Idle as u8),
            server: AtomicU64::new(0),
            wait_since_us: AtomicU64::new(0),
            request_us: AtomicU64::new(0),
            pin: AtomicU8::new(0),
            pinned_unix: AtomicU32::new(0),
            pool: AtomicU16::new(0),
            kill: KillSwitch::default(),
        }
    }

    /// Unix seconds when it connected.
    pub(crate) fn connected_unix(&self) -> u64 {
        u64::from(self.connected_unix)
    }

    /// The user it logged in as, when it is not the user its pool logs in as.
    pub(crate) fn user(&self) -> Option<&str> {
        self.user.as_deref().map(String::as_str)
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

    /// Its pool is the one at `index` in the registry.
    pub(crate) fn set_pool(&self, index: u16) {
        self.pool.store(index, Relaxed);
    }

    /// The index of its pool in the registry.
    pub(crate) fn pool(&self) -> u16 {
        self.pool.load(Relaxed)
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
        self.pinned_unix.store(unix32(unix), Relaxed);
        self.pin.store(reason as u8 + 1, Relaxed);
    }

    pub(crate) fn unpinned(&self) {
        self.pin.store(0, Relaxed);
    }

    /// Why it is pinned, and since when (Unix seconds).
    pub(crate) fn pin(&self) -> Option<(PinReason, u64)> {
        let p = self.pin.load(Relaxed);
        let reason = PinReason::ALL.get((p as usize).checked_sub(1)?)?;
        Some((*reason, u64::from(self.pinned_unix.load(Relaxed))))
    }
}

/// Unix seconds in 32 bits (saturating, in 2106).
fn unix32(unix: u64) -> u32 {
    u32::try_from(unix).unwrap_or(u32::MAX)
}

/// Every live client connection, by id.
#[derive(Debug, Default)]
pub(crate) struct ClientBook {
    entries: Mutex<BTreeMap<u64, Arc<ClientEntry>>>,
}

impl ClientBook {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<ClientEntry>>> {
        self.entries.lock()
    }

    /// Adds a client; the ticket removes it when dropped.
    pub(crate) fn add(observer: &Arc<Observer>, client: NewClient) -> ClientTicket {
        let entry = Arc::new(ClientEntry::new(client));
        observer.clients.lock().insert(entry.id, Arc::clone(&entry));
        ClientTicket { entry, observer: Arc::clone(observer) }
    }

    /// Every entry, in id order.
    pub(crate) fn all(&self) -> Vec<Arc<ClientEntry>> {
        self.lock().values().cloned().collect()
    }

    pub(crate) fn get(&self, id: u64) -> Option<Arc<ClientEntry>> {
        self.lock().get(&id).cloned()
    }
}

/// A client's place in the [`ClientBook`], for as long as the connection lives, and its handle on the
/// observer the book belongs to.
#[derive(Debug)]
pub(crate) struct ClientTicket {
    entry: Arc<ClientEntry>,
    observer: Arc<Observer>,
}

impl ClientTicket {
    pub(crate) fn observer(&self) -> &Arc<Observer> {
        &self.observer
    }
}

impl std::ops::Deref for ClientTicket {
    type Target = ClientEntry;
    fn deref(&self) -> &ClientEntry {
        &self.entry
    }
}

impl Drop for ClientTicket {
    fn drop(&mut self) {
        self.observer.clients.lock().remove(&self.entry.id);
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
        let observer = Arc::new(Observer::default());
        let book = &observer.clients;
        let a = ClientBook::add(&observer, client(1));
        let b = ClientBook::add(&observer, client(2));
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

    #[test]
    fn an_entry_with_its_counts_fits_the_128_byte_size_class() {
        // Every idle client keeps one behind an `Arc` (16 bytes of counts): at 112 bytes or less that is
        // jemalloc's 128-byte class, at 113 its 160-byte one.
        let size = std::mem::size_of::<ClientEntry>();
        assert!(size <= 112, "a client's entry is {size} bytes");
    }
}
