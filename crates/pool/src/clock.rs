//! The pool's one timer. Waiters do not arm timers of their own: each records when it started waiting and
//! when it gives up, and a single task per pool wakes at the earliest moment anything is due — a waiter's
//! deadline, or the moment lazy growth lets the first waiter in line open a connection — hands out what is
//! due, and sleeps until the next such moment. A checkout that waits costs a place in the queue and a clock
//! reading, not a timer registered and cancelled.
//!
//! The task is started by the first waiter and parks (no timer) while nobody waits. Whoever makes something
//! due sooner than the task's next wake-up rings its bell; a new waiter behind others never needs to, since
//! nothing of its own comes due before theirs.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::{Grant, Handout, Inner, Slot, State, Waiter};

/// What a tick hands out: each waiter with what it is sent.
type Handouts<C> = Vec<(Waiter<C>, Handout<C>)>;

/// The least time between two wake-ups for deadlines: with many waiters whose deadlines all differ, the task
/// wakes at most this often, and a deadline is kept at most this late.
const DEADLINE_GRAIN: Duration = Duration::from_millis(1);

/// The task's side of the timer: what it has promised to wake up for.
#[derive(Debug, Default)]
pub(crate) struct Clock {
    /// When the task will next wake up by itself; `None` while it is parked (or not started).
    next: Option<Instant>,
    started: bool,
}

impl<C> State<C> {
    /// Something comes due at `at`: true if the clock's task must be woken for it (it would sleep past
    /// it). Marks the task as woken for `at`, so that later callers with later moments do not ring again.
    pub(crate) fn due_at(&mut self, at: Instant) -> bool {
        if self.clock.next.is_some_and(|next| next <= at) {
            return false;
        }
        self.clock.next = Some(at);
        true
    }

    /// When lazy growth will let the first waiter in line open a connection, if nothing changes before
    /// then; `None` if it cannot (no lazy growth, at the limit, paused, or a connection is being opened:
    /// its arrival re-counts, see `Inner::opened`). A steady line (see `PoolConfig::steady_after`) waits
    /// only `steady_grow_after`.
    pub(crate) fn growth_due(&self) -> Option<Instant> {
        if self.closed || self.paused || self.held_back() {
            return None;
        }
        if self.size >= self.config.max_size {
            return self.reserve_due();
        }
        let grow_after = self.config.grow_after;
        if grow_after.is_zero() || self.opening > 0 {
            return None;
        }
        let first = self.waiters.front()?.since;
        let from = self.last_opened.map_or(first, |opened| opened.max(first));
        let due = from + grow_after;
        match self.line_since {
            Some(line) if !self.config.steady_after.is_zero() => {
                // A steady line grows a connection every `steady_grow_after`, however short each wait in it:
                // 20 clients on 11 connections across a network wait a millisecond or two each.
                let steady = if self.busy.steady() { first } else { line + self.config.steady_after };
                let steady =
                    self.last_opened.map_or(steady, |opened| steady.max(opened + self.config.steady_grow_after));
                Some(due.min(steady))
            }
            _ => Some(due),
        }
    }

    /// When the first waiter in line may open a reserve connection (see [`Pool::set_reserve`]): once it has
    /// waited `reserve_after`, while the pool is at its limit and the reserve is not spent.
    ///
    /// [`Pool::set_reserve`]: crate::Pool::set_reserve
    pub(crate) fn reserve_due(&self) -> Option<Instant> {
        if self.reserve == 0 || self.size >= self.config.max_size + self.reserve {
            return None;
        }
        Some(self.waiters.front()?.since + self.reserve_after)
    }

    /// How far above the limit the pool may be at `now`: the reserve while the first waiter has waited for
    /// it, else nothing.
    pub(crate) fn reserve_in_use(&self, now: Instant) -> usize {
        match self.waiters.front() {
            Some(first) if self.reserve > 0 && first.since + self.reserve_after <= now => self.reserve,
            _ => 0,
        }
    }

    /// Hands out everything due at `now`: waiters past their deadline are told so, and the first waiter in
    /// line may open a connection if lazy growth allows. Returns what to send (outside the lock) and when
    /// the task should wake up next (`None`: park until rung).
    fn tick(&mut self, now: Instant, shared: &Arc<Inner<C>>) -> (Handouts<C>, Option<Instant>) {
        let mut out = Vec::new();
        let had_line = !self.waiters.is_empty();
        let window = self.busy_window();
        self.busy.roll(now, self.line_since.filter(|_| had_line), window);
        // Waiters whose future was dropped hold nobody's place.
        self.waiters.retain(|w| !w.tx.is_closed());
        let mut earliest: Option<Instant> = None;
        let mut i = 0;
        while i < self.waiters.len() {
            match self.waiters[i].deadline {
                Some(deadline) if deadline <= now => {
                    // Usually the first in line: removing it moves nothing.
                    if let Some(w) = self.waiters.remove(i) {
                        out.push((w, Handout::TimedOut));
                    }
                }
                deadline => {
                    earliest = earlier(earliest, deadline);
                    i += 1;
                }
            }
        }
        // A shared limit that turned the pool away may have room again: waiters free to open one take it.
        if self.turned_away_at.is_some() {
            let freed = self.grant_free_slots(shared);
            out.extend(freed.slots.into_iter().map(|w| (w, Handout::Grant(Grant::Open(Slot::new(shared))))));
        }
        if self.growth_due().is_some_and(|at| at <= now)
            && self.grow(shared, true)
            && let Some(w) = self.waiters.pop_front()
        {
            out.push((w, Handout::Grant(Grant::Open(Slot::new(shared)))));
        }
        if had_line && self.waiters.is_empty() {
            self.line_emptied(now);
        }
        let deadline = earliest.map(|at| at.max(now + DEADLINE_GRAIN));
        let next = earlier(deadline, self.growth_due());
        self.clock.next = next;
        (out, next)
    }

    /// Starts the clock's task the first time someone waits; true if this call must start it.
    pub(crate) fn start_clock(&mut self) -> bool {
        !std::mem::replace(&mut self.clock.started, true)
    }
}

/// The earlier of two moments, either of which may be missing.
pub(crate) fn earlier(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The clock's task: runs until the pool is closed or gone.
pub(crate) async fn run<C: Send + 'static>(pool: Weak<Inner<C>>, bell: Arc<Notify>) {
    let sleep = pgmux_timer::sleep(Duration::ZERO);
    tokio::pin!(sleep);
    loop {
        let next = {
            let Some(inner) = pool.upgrade() else { return };
            let (out, next, closed) = {
                let mut st = inner.lock();
                let (out, next) = st.tick(Instant::now(), &inner);
                (out, next, st.closed)
            };
            for (waiter, handout) in out {
                // A waiter that left meanwhile hands its grant back; dropping it returns it to the pool.
                let _ = waiter.tx.send(handout);
            }
            if closed {
                return;
            }
            next
        };
        match next {
            Some(at) => {
                sleep.as_mut().reset(at);
                tokio::select! {
                    () = &mut sleep => {}
                    () = bell.notified() => {}
                }
            }
            None => bell.notified().await,
        }
    }
}
