//! How a pool grows and shrinks: whether a caller may open a connection now, taking and giving back room
//! in the shared limits, and handing places to waiters when room comes (the clock, in `clock`, decides when
//! lazy growth and the reserve come due).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::shared::Member;
use crate::{Inner, Pool, State, Waiter};

impl<C> Pool<C> {
    /// Whether one more connection fits now beside the pool's own: below its limit and every limit it
    /// shares, with nobody waiting and no reserve in use. For connections opened outside the pool that must
    /// stay within its limits (the liveness probe's own): the pool does not count them, so it may grow to its
    /// limit beside one afterwards, and the caller asks again to give it up.
    pub fn has_room(&self) -> bool {
        let st = self.shared.lock();
        !st.closed
            && !st.paused
            && st.waiters.is_empty()
            && st.size < st.config.max_size
            && st.limits.iter().all(|l| l.held() < l.limit())
    }
}

impl<C> State<C> {
    /// The busy measure's window: half of `steady_after` (zero: not measured).
    pub(crate) fn busy_window(&self) -> Duration {
        self.config.steady_after / 2
    }

    /// The line formed at `at`.
    pub(crate) fn line_formed(&mut self, at: Instant) {
        self.busy.formed(at, self.busy_window());
        self.line_since = Some(at);
    }

    /// The last waiter in line was served (or left) at `at`.
    pub(crate) fn line_emptied(&mut self, at: Instant) {
        if let Some(line) = self.line_since {
            self.busy.emptied(line, at, self.busy_window());
        }
    }

    /// Whether a caller may open a connection without waiting: below the limit, and either growth is not
    /// lazy or nothing is open (so there is nothing to wait for).
    pub(crate) fn may_open_now(&self) -> bool {
        !self.closed
            && !self.paused
            && self.size < self.config.max_size
            && (self.config.grow_after.is_zero() || self.size == 0)
    }

    /// Counts a new place, if every shared limit has room for it (`reclaim`: asking the limits' other pools
    /// to give up an idle connection for it); false if one has none.
    pub(crate) fn grow(&mut self, inner: &Inner<C>, reclaim: bool) -> bool {
        if !self.limits.is_empty() && !self.take_room(inner, reclaim) {
            return false;
        }
        self.size += 1;
        self.opening += 1;
        true
    }

    /// Takes room in every shared limit, or in none: false, and the pool waits for one to change.
    fn take_room(&mut self, inner: &Inner<C>, reclaim: bool) -> bool {
        let me = inner as *const Inner<C> as *const ();
        for (i, limit) in self.limits.iter().enumerate() {
            let took = limit.try_take() || (reclaim && limit.reclaim(me) && limit.try_take());
            if !took {
                limit.turned_away();
                self.limits[..i].iter().for_each(|taken| taken.give_back(1));
                self.turned_away_at = Some(self.generations());
                inner.turned_away.store(true, Ordering::Relaxed);
                return false;
            }
        }
        self.turned_away_at = None;
        inner.turned_away.store(false, Ordering::Relaxed);
        true
    }

    /// The shared limits' generations, summed: a change means room may have come back somewhere.
    fn generations(&self) -> u64 {
        self.limits.iter().map(|l| l.generation()).fold(0, u64::wrapping_add)
    }

    /// Whether a shared limit turned the pool away and nothing changed since: growing would be refused.
    pub(crate) fn held_back(&self) -> bool {
        self.turned_away_at.is_some_and(|at| at == self.generations())
    }

    /// `n` places are gone: their room in the shared limits is free.
    pub(crate) fn shrink(&mut self, n: usize) {
        self.size -= n;
        for limit in &self.limits {
            limit.give_back(n);
        }
    }

    /// Reserves a place for each waiter that may open a connection now (see `may_open_now`), and sees
    /// whether lazy growth now comes due sooner than the clock will wake.
    pub(crate) fn grant_free_slots(&mut self, inner: &Inner<C>) -> Freed<C> {
        let mut slots = Vec::new();
        while self.may_open_now() && !self.waiters.is_empty() && !self.held_back() && self.grow(inner, true) {
            let Some(w) = self.waiters.pop_front() else { break };
            slots.push(w);
        }
        if !slots.is_empty() && self.waiters.is_empty() {
            self.line_emptied(Instant::now());
        }
        let ring = self.growth_due().is_some_and(|at| self.due_at(at));
        Freed { slots, ring }
    }
}

/// What a change that freed places or raised the limit hands on: waiters that may open a connection now,
/// and whether the clock must wake (lazy growth came due sooner).
pub(crate) struct Freed<C> {
    pub(crate) slots: Vec<Waiter<C>>,
    pub(crate) ring: bool,
}

/// A pool as its shared limits see it: rung when room may have come back, asked to give up an idle
/// connection for another pool.
impl<C: Send + 'static> Member for Inner<C> {
    fn room(&self) {
        if self.turned_away.load(Ordering::Relaxed) {
            self.bell.notify_one();
        }
    }

    fn give_up_idle(&self) -> bool {
        let Some(closer) = &self.closer else { return false };
        let conn = {
            let Some(mut st) = self.state.try_lock() else { return false };
            if st.closed {
                return false;
            }
            let Some((conn, _)) = st.idle.pop_front() else { return false };
            st.shrink(1);
            conn
        };
        closer(conn);
        true
    }

    fn is(&self, at: *const ()) -> bool {
        std::ptr::eq(self as *const Self as *const (), at)
    }
}
