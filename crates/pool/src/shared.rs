//! Limits that several pools keep together: a budget of connections all pools share, the connections of
//! one database across its users' pools, those of one user across databases. A pool may be under any
//! number of them ([`Pool::share`](crate::Pool::share)); it opens a connection only when each has room.
//!
//! When a limit has no room left, the pool that wants to grow asks the limit's other pools to give up an
//! idle connection ([`SharedLimit`] keeps them, weakly): a connection sitting idle in a quiet pool is worth
//! less than a client waiting in a busy one. A connection in use is never taken. When room comes back
//! (a connection closed anywhere, a limit raised), the pools that were turned away are rung, and their clock
//! tries again.
//!
//! Room is counted with atomics and pools are only rung, never locked, from here, so a pool may give room
//! back while it holds its own lock. Taking an idle connection from another pool only tries that pool's
//! lock: two pools each short of room never wait for each other.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

/// What a limit needs from a pool under it.
pub(crate) trait Member: Send + Sync {
    /// Room may have come back: a pool that was turned away tries again.
    fn room(&self);
    /// Closes one idle connection (the one idle longest) if the pool can spare it without waiting for its
    /// lock; true if it did. Its place, and its room in every limit, are freed.
    fn give_up_idle(&self) -> bool;
    /// Whether this is the pool at `at` (the asker is not asked).
    fn is(&self, at: *const ()) -> bool;
}

/// A limit on the connections of several pools together.
pub struct SharedLimit {
    limit: AtomicUsize,
    held: AtomicUsize,
    /// Bumped whenever room may have come back; a pool turned away remembers the value it saw.
    generation: AtomicU64,
    /// A pool was turned away since the pools were last rung: a connection that goes idle anywhere under
    /// the limit rings them, since an idle connection can be given up for a waiting pool.
    wanted: AtomicBool,
    members: Mutex<Vec<Weak<dyn Member>>>,
}

impl std::fmt::Debug for SharedLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLimit").field("limit", &self.limit()).field("held", &self.held()).finish()
    }
}

impl SharedLimit {
    /// A limit of `limit` connections, held by nobody yet.
    pub fn new(limit: usize) -> Arc<SharedLimit> {
        Arc::new(SharedLimit {
            limit: AtomicUsize::new(limit),
            held: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            wanted: AtomicBool::new(false),
            members: Mutex::new(Vec::new()),
        })
    }

    /// The limit now.
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Connections its pools hold or are opening now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Changes the limit. Raised, the pools that were turned away try again; lowered, nothing closes by
    /// itself (pools over it grow no more until connections close).
    pub fn set_limit(&self, limit: usize) {
        if self.limit.swap(limit, Ordering::Relaxed) < limit {
            self.ring();
        }
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// Takes room for one connection, if there is any.
    pub(crate) fn try_take(&self) -> bool {
        let limit = self.limit();
        self.held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| (held < limit).then_some(held + 1)).is_ok()
    }

    /// Gives back the room of `n` connections that closed (or were never opened).
    pub(crate) fn give_back(&self, n: usize) {
        if n == 0 {
            return;
        }
        let _ = self.held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| Some(held.saturating_sub(n)));
        self.ring();
    }

    /// Room may have come back: every pool under the limit is rung (each ignores it unless it was turned
    /// away).
    fn ring(&self) {
        self.wanted.store(false, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::Relaxed);
        for member in self.live_members() {
            member.room();
        }
    }

    /// A pool was turned away: it waits for room, or for an idle connection another pool could give up.
    pub(crate) fn turned_away(&self) {
        self.wanted.store(true, Ordering::Relaxed);
    }

    /// Whether a pool turned away waits (one load: asked each time a connection goes idle).
    #[inline]
    pub(crate) fn wanted(&self) -> bool {
        self.wanted.load(Ordering::Relaxed)
    }

    /// A connection went idle under the limit: if a pool was turned away, it is rung to try again (taking
    /// that connection's room, or another idle one's).
    pub(crate) fn idle_now(&self) {
        if self.wanted.swap(false, Ordering::Relaxed) {
            self.ring();
        }
    }

    pub(crate) fn join(&self, member: Weak<dyn Member>) {
        let mut members = self.members.lock();
        members.retain(|m| m.strong_count() > 0);
        members.push(member);
    }

    fn live_members(&self) -> Vec<Arc<dyn Member>> {
        self.members.lock().iter().filter_map(Weak::upgrade).collect()
    }

    /// Has one of its pools close an idle connection, if one can spare it: to bring the pools back under a
    /// limit that was lowered. True if one did.
    pub fn close_one_idle(&self) -> bool {
        self.reclaim(std::ptr::null())
    }

    /// Asks the limit's other pools, in turn, to give up one idle connection; true once one did (its room
    /// is then free).
    pub(crate) fn reclaim(&self, asker: *const ()) -> bool {
        self.live_members().iter().filter(|m| !m.is(asker)).any(|m| m.give_up_idle())
    }
}
