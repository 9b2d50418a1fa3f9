//! Shutdown signalling: graceful first (finish transactions, take no new work), then hard (close now).
//!
//! Every session checks for shutdown on every turn of its relay loop, thousands of times a second, so the
//! check must be an atomic load and nothing more. A session registers its task's waker once (again only if
//! the waker changes); raising the level wakes every registered session. Waiting for a level from places
//! that wait anyway (the listener, a client queued for a server) uses an ordinary `Notify`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Waker};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::runtime::slots::Slots;

/// How far shutdown has gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Serving.
    Running = 0,
    /// No new clients; the clients in are served as before, and pgmux stops once the last has left
    /// (`SHUTDOWN WAIT_FOR_CLIENTS`). Sessions act on it as on `Running`.
    Closed = 1,
    /// No new clients or transactions; sessions close when they are between transactions.
    Graceful = 2,
    /// Close everything now.
    Hard = 3,
}

impl Level {
    fn from_u8(v: u8) -> Level {
        match v {
            0 => Level::Running,
            1 => Level::Closed,
            2 => Level::Graceful,
            _ => Level::Hard,
        }
    }
}

/// The shutdown signal of one pooler. Cheap to clone; clones share the signal.
#[derive(Clone, Debug, Default)]
pub struct Stop {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    level: AtomicU8,
    /// Bumped by [`Stop::poke`]: every session looks at its state again (a node was declared dead).
    pokes: AtomicU64,
    /// The waker of every watching session, at the slot its `Watch` holds.
    sessions: Mutex<Slots<Waker>>,
    changed: Notify,
}

impl Stop {
    /// A signal at [`Level::Running`].
    pub fn new() -> Self {
        Stop::default()
    }

    /// Takes no new clients, and stops once the clients in have left (`SHUTDOWN WAIT_FOR_CLIENTS`).
    pub fn close_doors(&self) {
        self.raise(Level::Closed);
    }

    /// Begins a graceful shutdown.
    pub fn begin_graceful(&self) {
        self.raise(Level::Graceful);
    }

    /// Ends everything now.
    pub fn force(&self) {
        self.raise(Level::Hard);
    }

    /// The current level.
    pub fn level(&self) -> Level {
        Level::from_u8(self.inner.level.load(Ordering::Acquire))
    }

    /// Wakes every session without changing the level, so that each looks at its state again (the node of
    /// its server connection may have been declared dead).
    pub(crate) fn poke(&self) {
        self.inner.pokes.fetch_add(1, Ordering::AcqRel);
        self.wake_sessions();
    }

    fn raise(&self, level: Level) {
        let before = self.inner.level.fetch_max(level as u8, Ordering::AcqRel);
        if before >= level as u8 {
            return;
        }
        self.wake_sessions();
        self.inner.changed.notify_waiters();
    }

    fn wake_sessions(&self) {
        let wakers: Vec<Waker> = {
            let sessions = self.inner.sessions.lock();
            sessions.values().cloned().collect()
        };
        // Woken outside the lock: a woken session may run at once and register again.
        for w in wakers {
            w.wake();
        }
    }

    /// Waits until the level is at least `level`.
    pub async fn reached(&self, level: Level) {
        loop {
            let changed = self.inner.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.level() >= level {
                return;
            }
            changed.await;
        }
    }

    /// A per-session watch for the relay loop.
    pub(crate) fn watch(&self) -> Watch {
        Watch {
            stop: self.clone(),
            slot: NO_SLOT,
            waker: None,
            seen: Level::Running,
            pokes: self.inner.pokes.load(Ordering::Acquire),
        }
    }

    /// Ends one session: its watch reads [`Level::Hard`] from now on, and its task is woken.
    pub(crate) fn kill(&self, switch: &KillSwitch) {
        switch.fired.store(true, Ordering::Release);
        let slot = switch.slot.load(Ordering::Acquire);
        let waker = {
            let mut sessions = self.inner.sessions.lock();
            sessions.get_mut(slot).cloned()
        };
        // The slot may belong to another session by now: a spurious wake-up is harmless.
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// A watch's slot before it registers its waker (a `u32` rather than an `Option`: every idle session has
/// one, and the four bytes saved keep its task in a smaller size class).
const NO_SLOT: u32 = u32::MAX;

/// One session's own stop, fired by `KILL_CLIENT`; the session's [`Watch`] reads it on every turn. Kept in
/// the session's entry in the console's list of clients, where `KILL_CLIENT` finds it.
#[derive(Debug)]
pub(crate) struct KillSwitch {
    fired: AtomicBool,
    /// The slot of the session's waker in [`Stop`]'s list, [`NO_SLOT`] until it registers.
    slot: AtomicU32,
}

impl Default for KillSwitch {
    fn default() -> Self {
        KillSwitch { fired: AtomicBool::new(false), slot: AtomicU32::new(NO_SLOT) }
    }
}

impl KillSwitch {
    /// Whether the session was killed.
    pub(crate) fn fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }
}

/// One session's view of the signal; see [`Watch::poll`].
#[derive(Debug)]
pub(crate) struct Watch {
    stop: Stop,
    /// Its waker's slot in [`Stop`]'s list, [`NO_SLOT`] until it registers.
    slot: u32,
    waker: Option<Waker>,
    /// The level when the waker was last registered.
    seen: Level,
    /// Pokes already seen.
    pokes: u64,
}

impl Watch {
    /// The current level, `Hard` too once the session's own `kill` switch fired; until it is `Hard`, makes
    /// sure that raising it further, or firing the switch, wakes this task.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>, kill: &KillSwitch) -> Level {
        let level = self.stop.level();
        if level == Level::Hard || kill.fired() {
            return Level::Hard;
        }
        // Registered again after each new level too, so that no raise is ever missed.
        if self.seen != level || !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            let w = cx.waker().clone();
            let mut sessions = self.stop.inner.sessions.lock();
            if self.slot == NO_SLOT {
                self.slot = sessions.insert(w.clone());
                kill.slot.store(self.slot, Ordering::Release);
            } else {
                sessions.set(self.slot, w.clone());
            }
            drop(sessions);
            if kill.fired() {
                return Level::Hard;
            }
            self.waker = Some(w);
            self.seen = level;
            // A raise between the load above and the insert would have missed this waker.
            return self.stop.level();
        }
        level
    }
}

impl Watch {
    /// The current level, without registering for the next raise.
    pub(crate) fn level(&self) -> Level {
        self.stop.level()
    }

    /// Whether the session was poked since the last call (one atomic load; the waker is the one `poll`
    /// registered).
    pub(crate) fn poked(&mut self) -> bool {
        let pokes = self.stop.inner.pokes.load(Ordering::Acquire);
        pokes != std::mem::replace(&mut self.pokes, pokes)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if self.slot != NO_SLOT {
            self.stop.inner.sessions.lock().remove(self.slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::task::Poll;

    use super::*;

    #[tokio::test]
    async fn a_watching_task_is_woken_by_each_level() {
        let stop = Stop::new();
        let mut watch = stop.watch();
        let task = tokio::spawn(async move {
            let mut seen = Vec::new();
            for want in [Level::Graceful, Level::Hard] {
                let level = poll_fn(|cx| match watch.poll(cx, &KillSwitch::default()) {
                    l if l >= want => Poll::Ready(l),
                    _ => Poll::Pending,
                })
                .await;
                seen.push(level);
                // Like the relay loop after graceful: poll again at the level already seen, and sleep.
                let again = poll_fn(|cx| Poll::Ready(watch.poll(cx, &KillSwitch::default()))).await;
                assert_eq!(again, level);
            }
            seen
        });
        tokio::task::yield_now().await;
        stop.begin_graceful();
        tokio::task::yield_now().await;
        stop.force();
        assert_eq!(task.await.unwrap(), vec![Level::Graceful, Level::Hard]);
    }

    #[tokio::test]
    async fn reached_returns_at_once_when_already_there() {
        let stop = Stop::new();
        stop.force();
        stop.reached(Level::Graceful).await;
        assert_eq!(stop.level(), Level::Hard);
        stop.begin_graceful();
        assert_eq!(stop.level(), Level::Hard, "levels only go up");
    }

    #[tokio::test]
    async fn closed_doors_come_before_a_graceful_shutdown_and_are_reached_by_one() {
        let stop = Stop::new();
        stop.close_doors();
        assert_eq!(stop.level(), Level::Closed);
        assert!(Level::Running < Level::Closed && Level::Closed < Level::Graceful);
        stop.reached(Level::Closed).await;
        stop.begin_graceful();
        assert_eq!(stop.level(), Level::Graceful);
        stop.close_doors();
        assert_eq!(stop.level(), Level::Graceful, "levels only go up");
        let direct = Stop::new();
        direct.begin_graceful();
        direct.reached(Level::Closed).await;
    }

    #[tokio::test]
    async fn a_poke_wakes_a_watching_task_without_changing_the_level() {
        let stop = Stop::new();
        let mut watch = stop.watch();
        let task = tokio::spawn(async move {
            poll_fn(|cx| {
                let level = watch.poll(cx, &KillSwitch::default());
                if watch.poked() { Poll::Ready(level) } else { Poll::Pending }
            })
            .await
        });
        tokio::task::yield_now().await;
        stop.poke();
        assert_eq!(task.await.unwrap(), Level::Running);
    }

    #[tokio::test]
    async fn a_kill_switch_ends_one_session_and_no_other() {
        let stop = Stop::new();
        let kill = Arc::new(KillSwitch::default());
        let mut killed = stop.watch();
        let mut other = stop.watch();
        let task = tokio::spawn({
            let kill = Arc::clone(&kill);
            async move {
                poll_fn(|cx| match killed.poll(cx, &kill) {
                    Level::Hard => Poll::Ready(kill.fired()),
                    _ => Poll::Pending,
                })
                .await
            }
        });
        tokio::task::yield_now().await;
        stop.kill(&kill);
        assert!(task.await.unwrap(), "woken, and it knows it was killed");
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(other.poll(&mut cx, &KillSwitch::default()), Level::Running);
        assert_eq!(stop.level(), Level::Running);
    }

    #[test]
    fn a_dropped_watch_leaves_no_waker_behind() {
        let stop = Stop::new();
        let mut watch = stop.watch();
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(watch.poll(&mut cx, &KillSwitch::default()), Level::Running);
        assert_eq!(stop.inner.sessions.lock().len(), 1);
        drop(watch);
        assert_eq!(stop.inner.sessions.lock().len(), 0);
    }
}
