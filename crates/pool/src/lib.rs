//! A connection pool that knows nothing of what it pools.
//!
//! The pool does bookkeeping only: which connections are idle, how many exist or are being opened, who is
//! waiting. It never opens or closes a connection itself. [`Pool::acquire`] hands out either an idle
//! connection ([`Grant::Idle`]) or the right to open a new one ([`Grant::Open`], a [`Slot`]); the caller
//! connects, fills the slot and gets a [`Lease`]. Dropping a lease gives the connection back; a lease that
//! is [`discard`](Lease::discard)ed frees its place instead. Waiters are served first come, first served.
//!
//! Growth is lazy when `grow_after` is set: a caller that finds no idle connection waits that long for one
//! to come back before it is allowed to open another, only one connection is opened at a time, and each new
//! one gets `grow_after` to shorten the queue before the next is opened, so a burst of short transactions
//! shares one or two connections instead of opening one each. (With nothing
//! open at all there is nothing to wait for: the first connection is opened at once.)
//!
//! A caller may wait until a deadline ([`Pool::acquire_until`]), or take a place in the line
//! ([`Pool::join_line`]) and poll its [`Ticket`] among its other work, with no future of its own. Deadlines
//! and lazy growth are kept by one timer per pool, not one per waiter (see the `clock` module).
//!
//! The limit can change while the pool runs ([`Pool::set_max_size`]). A connection that comes back while
//! the pool is over its limit is not kept: it goes to the closer given to [`Pool::with_closer`].
//!
//! The pool can be paused ([`Pool::pause`]): nothing is handed out, connections that come back stay idle,
//! and waiters keep their place in line until [`Pool::resume`] serves them in order.
//!
//! Several pools may also share a cap on connections *in use* at once ([`ActiveCap`]): a caller takes a
//! permit before it borrows and [`Lease::hold`]s it, and callers over the cap wait in one line across the
//! pools, first come, first served (see the `active` module).
//!
//! The bookkeeping sits behind a short synchronous mutex that is never held across an `.await`, and a lease
//! returns its connection inline on drop (no task is spawned: inside Lambda a spawned task may only run after
//! the environment thaws).

// Tests may use tokio's timers directly; pgmux's own code takes them from pgmux_timer (crates/clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod active;
mod busy;
mod clock;
mod growth;
mod lease;
mod line;
mod shared;

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

pub use active::{ActiveCap, ActivePermit};
use growth::Freed;
pub use lease::{Grant, Lease, Meta, Slot};
pub use line::{Joined, Ticket};
use shared::Member;
pub use shared::SharedLimit;

/// Sizing of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Most connections open or being opened at once.
    pub max_size: usize,
    /// How long a caller waits for an idle connection before it may open a new one (zero: at once).
    pub grow_after: Duration,
    /// A line of callers that has not emptied for this long, or held somebody for three quarters of each
    /// half of it, is steady load rather than a burst: a new connection will find it still there however
    /// long it takes to open, so from then on growth waits `steady_grow_after` instead of `grow_after`
    /// (zero: no such line; see the `busy` module).
    pub steady_after: Duration,
    /// How long the first caller of a steady line waits before it may open a new connection.
    pub steady_grow_after: Duration,
}

impl PoolConfig {
    /// `max_size` connections, lazy growth after `grow_after`, no distinction for a steady line.
    pub fn new(max_size: usize, grow_after: Duration) -> PoolConfig {
        PoolConfig { max_size, grow_after, steady_after: Duration::ZERO, steady_grow_after: grow_after }
    }
}

/// The pool was closed; no more connections are handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed;

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the pool is closed")
    }
}

impl std::error::Error for Closed {}

/// Why [`Pool::acquire_until`] came back without a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitError {
    /// The pool was closed.
    Closed,
    /// The deadline passed first.
    TimedOut,
    /// The pool's owner sent every waiter away ([`Pool::refuse_waiters`]): opening a connection fails for
    /// a reason that waiting will not fix. The owner knows the reason and tells the caller.
    Refused,
    /// The pool's owner sent every waiter elsewhere ([`Pool::dismiss_waiters`]): this pool will not serve
    /// them now, and another may.
    Dismissed,
}

/// A snapshot of the pool's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// Connections open or being opened.
    pub size: usize,
    /// Of those, idle ones.
    pub idle: usize,
    /// Callers waiting.
    pub waiting: usize,
    /// Of `size`, connections being opened (slots handed out and not yet filled).
    pub opening: usize,
    /// Current limit.
    pub max_size: usize,
    /// Paused: nothing is handed out.
    pub paused: bool,
}

impl Status {
    /// Whether any connection is lent out (open, and neither idle nor still being opened).
    pub fn lent(&self) -> bool {
        self.size > self.idle + self.opening
    }
}

/// A pool of `C`. Cheap to clone; clones share the pool.
#[derive(Debug)]
pub struct Pool<C> {
    shared: Arc<Inner<C>>,
}

impl<C> Clone for Pool<C> {
    fn clone(&self) -> Self {
        Pool { shared: Arc::clone(&self.shared) }
    }
}

/// What the pool does with a connection it will not keep (it came back while the pool was over its limit).
pub type Closer<C> = Box<dyn Fn(C) + Send + Sync>;

pub(crate) struct Inner<C> {
    state: Mutex<State<C>>,
    closer: Option<Closer<C>>,
    /// Wakes the clock's task (see the `clock` module).
    bell: Arc<Notify>,
    /// A shared limit turned the pool away: ring the clock when room comes back (see the `shared` module).
    turned_away: AtomicBool,
}

impl<C> Drop for Inner<C> {
    fn drop(&mut self) {
        // A parked clock finds the pool gone and ends.
        self.bell.notify_one();
    }
}

impl<C: fmt::Debug> fmt::Debug for Inner<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inner").field("state", &self.state).field("closer", &self.closer.is_some()).finish()
    }
}

#[derive(Debug)]
struct State<C> {
    /// Idle connections, most recently returned last: they are lent from the back so that the others age out.
    idle: VecDeque<(C, Meta)>,
    /// Connections open or being opened (leases, slots, idle entries, and grants in flight to waiters).
    size: usize,
    /// Of `size`, slots not yet filled.
    opening: usize,
    /// When a slot was last filled: lazy growth gives each new connection `grow_after` to shorten the queue
    /// before it opens another.
    last_opened: Option<tokio::time::Instant>,
    /// When a lent connection last came back (to a waiter or the idle list).
    last_returned: Option<tokio::time::Instant>,
    /// When the line of waiters last went from empty to not empty.
    line_since: Option<Instant>,
    /// How much of the recent past the line held somebody.
    busy: busy::Busy,
    config: PoolConfig,
    /// Limits this pool shares with others (see the `shared` module).
    limits: Vec<Arc<SharedLimit>>,
    /// The limits' generations when one of them last turned the pool away: no growth until one changes.
    turned_away_at: Option<u64>,
    waiters: VecDeque<Waiter<C>>,
    closed: bool,
    paused: bool,
    clock: clock::Clock,
    /// Connections above `max_size` a caller may open once it has waited `reserve_after` (PgBouncer's
    /// reserve pool); 0: none.
    reserve: usize,
    reserve_after: Duration,
}

#[derive(Debug)]
struct Waiter<C> {
    tx: oneshot::Sender<Handout<C>>,
    /// When it started waiting: lazy growth lets it open a connection `grow_after` later.
    since: Instant,
    /// When it gives up, if ever.
    deadline: Option<Instant>,
}

/// What a waiter is sent.
#[derive(Debug)]
enum Handout<C> {
    Grant(Grant<C>),
    TimedOut,
    Refused,
    Dismissed,
}

impl<C> Pool<C> {
    /// An empty pool. A connection that comes back while the pool is over its limit is kept anyway, until
    /// [`evict_idle`](Self::evict_idle) takes it out.
    pub fn new(config: PoolConfig) -> Self {
        Self::build(config, None)
    }

    /// An empty pool that hands connections it will not keep to `closer`, which must not block (it runs
    /// inside a lease's drop, with no lock held).
    pub fn with_closer(config: PoolConfig, closer: impl Fn(C) + Send + Sync + 'static) -> Self {
        Self::build(config, Some(Box::new(closer)))
    }

    fn build(config: PoolConfig, closer: Option<Closer<C>>) -> Self {
        let state = State {
            idle: VecDeque::new(),
            size: 0,
            opening: 0,
            last_opened: None,
            line_since: None,
            busy: busy::Busy::default(),
            last_returned: None,
            config,
            limits: Vec::new(),
            turned_away_at: None,
            waiters: VecDeque::new(),
            closed: false,
            paused: false,
            clock: clock::Clock::default(),
            reserve: 0,
            reserve_after: Duration::ZERO,
        };
        Pool {
            shared: Arc::new(Inner {
                state: Mutex::new(state),
                closer,
                bell: Arc::default(),
                turned_away: AtomicBool::new(false),
            }),
        }
    }

    /// Puts the pool under `limits` it shares with other pools: from now on it opens a connection only when
    /// each has room, and may give up an idle connection when another pool under one of them needs it.
    pub fn share(&self, limits: Vec<Arc<SharedLimit>>)
    where
        C: Send + 'static,
    {
        let member: std::sync::Weak<dyn Member> = Arc::downgrade(&self.shared) as std::sync::Weak<Inner<C>>;
        for limit in &limits {
            limit.join(member.clone());
        }
        self.shared.lock().limits = limits;
    }

    /// The smallest of the limits it shares, if it shares any: with its own maximum, the most it can hold.
    pub fn shared_limit(&self) -> Option<usize> {
        self.shared.lock().limits.iter().map(|l| l.limit()).min()
    }

    /// An idle connection or the right to open one, if either is available right now without waiting
    /// (and without jumping the queue); `None` otherwise.
    pub fn try_acquire(&self) -> Result<Option<Grant<C>>, Closed> {
        let mut st = self.shared.lock();
        self.take_now(&mut st)
    }

    fn take_now(&self, st: &mut State<C>) -> Result<Option<Grant<C>>, Closed> {
        if st.closed {
            return Err(Closed);
        }
        if !st.waiters.is_empty() || st.paused {
            return Ok(None);
        }
        if let Some((conn, meta)) = st.idle.pop_back() {
            return Ok(Some(Grant::Idle(Lease::new(&self.shared, conn, meta))));
        }
        // With nothing open there is nothing to wait for: open at once, lazy growth or not.
        if st.may_open_now() && st.grow(&self.shared, true) {
            return Ok(Some(Grant::Open(Slot::new(&self.shared))));
        }
        Ok(None)
    }

    /// The right to open one more connection, if the pool is below its limit and nobody is waiting; for
    /// keeping a minimum of connections warm. Ignores lazy growth.
    pub fn try_grow(&self) -> Option<Slot<C>> {
        let mut st = self.shared.lock();
        if st.closed || st.paused || !st.waiters.is_empty() || st.size >= st.config.max_size {
            return None;
        }
        // Warming up takes no idle connection from another pool.
        st.grow(&self.shared, false).then(|| Slot::new(&self.shared))
    }

    /// Waits for an idle connection or the right to open one, in arrival order, for as long as it takes.
    /// Dropping the future leaves the queue cleanly.
    pub async fn acquire(&self) -> Result<Grant<C>, Closed>
    where
        C: Send + 'static,
    {
        self.wait(None).await.map_err(|_| Closed)
    }

    /// Waits for an idle connection or the right to open one, in arrival order, until `deadline`. No timer
    /// is armed for the wait: the pool's clock keeps every waiter's deadline. Dropping the future leaves
    /// the queue cleanly.
    pub async fn acquire_until(&self, deadline: Instant) -> Result<Grant<C>, WaitError>
    where
        C: Send + 'static,
    {
        self.wait(Some(deadline)).await
    }

    /// Counters at this moment.
    pub fn status(&self) -> Status {
        let st = self.shared.lock();
        Status {
            size: st.size,
            idle: st.idle.len(),
            waiting: st.waiters.len(),
            opening: st.opening,
            max_size: st.config.max_size,
            paused: st.paused,
        }
    }

    /// Stops handing out connections: callers wait in line (within their own timeouts), connections that
    /// come back stay idle. Connections already lent are not touched.
    pub fn pause(&self) {
        self.shared.lock().paused = true;
    }

    /// Hands out connections again: idle ones to the waiters first in line, then the right to open new ones
    /// up to the limit.
    pub fn resume(&self) {
        let (handed, slots) = {
            let mut st = self.shared.lock();
            st.paused = false;
            let mut handed = Vec::new();
            while !st.waiters.is_empty() && !st.idle.is_empty() {
                if let (Some(w), Some(item)) = (st.waiters.pop_front(), st.idle.pop_back()) {
                    handed.push((w, item));
                }
            }
            if !handed.is_empty() && st.waiters.is_empty() {
                st.line_emptied(Instant::now());
            }
            (handed, st.grant_free_slots(&self.shared))
        };
        for (waiter, (conn, meta)) in handed {
            // A waiter that left meanwhile hands the lease back; dropping it returns the connection.
            let _ = waiter.tx.send(Handout::Grant(Grant::Idle(Lease::new(&self.shared, conn, meta))));
        }
        Inner::deliver_slots(&self.shared, slots);
    }

    /// How long a caller waits for an idle connection before it may open a new one, now.
    pub fn grow_after(&self) -> Duration {
        self.shared.lock().config.grow_after
    }

    /// Changes how long a caller waits for an idle connection before it may open a new one: `grow_after`,
    /// or `steady_grow_after` in a steady line (see [`PoolConfig::steady_after`]).
    pub fn set_grow_after(&self, grow_after: Duration, steady_grow_after: Duration) {
        let slots = {
            let mut st = self.shared.lock();
            st.config.grow_after = grow_after;
            st.config.steady_grow_after = steady_grow_after;
            st.grant_free_slots(&self.shared)
        };
        Inner::deliver_slots(&self.shared, slots);
    }

    /// Changes the limit. Growing lets waiters open connections (at once without lazy growth, else as lazy
    /// growth allows); shrinking closes nothing by itself: connections that come back above the limit go to
    /// the closer, and [`evict_idle`](Self::evict_idle) takes out idle ones above it.
    pub fn set_max_size(&self, max_size: usize) {
        let slots = {
            let mut st = self.shared.lock();
            st.config.max_size = max_size;
            st.grant_free_slots(&self.shared)
        };
        Inner::deliver_slots(&self.shared, slots);
    }

    /// Sets the reserve: `size` connections above the limit that a caller may open once it has waited
    /// `after` with none free (0: no reserve). A reserve connection is closed when it comes back with nobody
    /// waiting that long, and an idle one above the limit is evicted: the pool shrinks back to its limit.
    pub fn set_reserve(&self, size: usize, after: Duration) {
        let mut st = self.shared.lock();
        st.reserve = size;
        st.reserve_after = after;
        if let Some(at) = st.growth_due()
            && st.due_at(at)
        {
            drop(st);
            self.shared.bell.notify_one();
        }
    }

    /// Removes idle connections for which `expired` says yes, and the oldest idle ones while the pool is
    /// over its limit, and returns them for the caller to close.
    pub fn evict_idle(&self, mut expired: impl FnMut(&C, &Meta) -> bool) -> Vec<C> {
        let (out, slots) = {
            let mut st = self.shared.lock();
            let mut out = Vec::new();
            let mut keep = VecDeque::with_capacity(st.idle.len());
            while let Some((conn, meta)) = st.idle.pop_front() {
                let excess = st.size - out.len() > st.config.max_size;
                if excess || expired(&conn, &meta) {
                    out.push(conn);
                } else {
                    keep.push_back((conn, meta));
                }
            }
            st.idle = keep;
            st.shrink(out.len());
            (out, st.grant_free_slots(&self.shared))
        };
        Inner::deliver_slots(&self.shared, slots);
        out
    }

    /// An idle connection that `wanted` picks, taken out of turn (waiters or a pause notwithstanding): for
    /// a check that gives it straight back, such as a liveness probe. Dropping the lease returns it.
    pub fn take_idle(&self, mut wanted: impl FnMut(&C) -> bool) -> Option<Lease<C>> {
        let mut st = self.shared.lock();
        if st.closed {
            return None;
        }
        let at = st.idle.iter().rposition(|(conn, _)| wanted(conn))?;
        let (conn, meta) = st.idle.remove(at)?;
        Some(Lease::new(&self.shared, conn, meta))
    }

    /// When a lent connection last came back, if one ever did: a pool whose connections are all lent and
    /// none came back for a while may be waiting on a server that stopped answering.
    pub fn last_returned(&self) -> Option<tokio::time::Instant> {
        self.shared.lock().last_returned
    }

    /// Stops lending: waiters get [`Closed`], later `acquire`s fail. Connections still leased come back
    /// to the idle list when their leases drop, for [`drain_idle`](Self::drain_idle) to collect.
    pub fn close(&self) {
        let waiters = {
            let mut st = self.shared.lock();
            st.closed = true;
            std::mem::take(&mut st.waiters)
        };
        // Dropping the senders wakes every waiter with an error; the clock's task ends.
        drop(waiters);
        self.shared.bell.notify_one();
    }

    /// Takes every idle connection out of the pool for the caller to close.
    pub fn drain_idle(&self) -> Vec<C> {
        self.evict_idle(|_, _| true)
    }
}

impl<C> Inner<C> {
    fn lock(&self) -> MutexGuard<'_, State<C>> {
        // Not poisoned by a panic while held (parking_lot): that leaves plain counters behind; keep serving.
        self.state.lock()
    }

    /// Puts a connection back: to the closer if the pool is over its limit, else to the first live waiter,
    /// else onto the idle list.
    pub(crate) fn release(self: &Arc<Self>, conn: C, meta: Meta) {
        let mut item = (conn, meta);
        loop {
            let waiter = {
                let mut st = self.lock();
                st.last_returned = Some(item.1.idle_since);
                if let Some(closer) = &self.closer
                    && !st.closed
                    && st.size > st.config.max_size + st.reserve_in_use(item.1.idle_since)
                {
                    st.shrink(1);
                    drop(st);
                    closer(item.0);
                    return;
                }
                let next = if st.paused { None } else { st.waiters.pop_front() };
                match next {
                    Some(w) => {
                        if st.waiters.is_empty() {
                            st.line_emptied(item.1.idle_since);
                        }
                        w
                    }
                    None => {
                        st.idle.push_back(item);
                        // A pool under a shared limit may be waiting for this connection's room.
                        if st.limits.iter().any(|l| l.wanted()) {
                            let wanted: Vec<Arc<SharedLimit>> =
                                st.limits.iter().filter(|l| l.wanted()).cloned().collect();
                            drop(st);
                            wanted.iter().for_each(|l| l.idle_now());
                        }
                        return;
                    }
                }
            };
            // Sent outside the lock: a failed send hands the lease back, and dropping a lease locks.
            let lease = Lease::new(self, item.0, item.1);
            match waiter.tx.send(Handout::Grant(Grant::Idle(lease))) {
                Ok(()) => return,
                Err(Handout::Grant(Grant::Idle(lease))) => item = lease.into_parts(),
                Err(_) => unreachable!("sent an idle grant"),
            }
        }
    }

    /// Frees the place of a connection that was discarded, and lets a waiter open one.
    pub(crate) fn forget(self: &Arc<Self>) {
        self.free_place(false);
    }

    /// Frees the place of a slot that was dropped unfilled.
    pub(crate) fn forget_slot(self: &Arc<Self>) {
        self.free_place(true);
    }

    fn free_place(self: &Arc<Self>, was_opening: bool) {
        let slots = {
            let mut st = self.lock();
            st.shrink(1);
            if was_opening {
                st.opening -= 1;
            }
            st.grant_free_slots(self)
        };
        Self::deliver_slots(self, slots);
    }

    /// A slot was filled: its connection is no longer being opened, and lazy growth counts from now.
    pub(crate) fn opened(&self) {
        let ring = {
            let mut st = self.lock();
            st.opening -= 1;
            st.last_opened = Some(tokio::time::Instant::now());
            st.growth_due().is_some_and(|at| st.due_at(at))
        };
        if ring {
            self.bell.notify_one();
        }
    }

    /// Sends each waiter given a place its slot, and wakes the clock if something came due sooner.
    fn deliver_slots(self: &Arc<Self>, Freed { mut slots, ring }: Freed<C>) {
        for w in slots.drain(..) {
            // If the waiter is gone the slot comes back as an error and its drop frees the place again.
            let _ = w.tx.send(Handout::Grant(Grant::Open(Slot::new(self))));
        }
        if ring {
            self.bell.notify_one();
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod growth_tests;

#[cfg(test)]
mod shared_tests;

#[cfg(test)]
mod active_tests;
