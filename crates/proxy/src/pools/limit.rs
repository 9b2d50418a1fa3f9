//! The pool's limit and where it comes from: the plan (the configuration, or the last reading of the
//! database's budget) and, below it, a ceiling set when the database refuses a new connection. The ceiling
//! is probed upward again, one connection per [`PROBE_EVERY`] without a refusal, up to the plan.

use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::Instant;

/// How often a lowered ceiling is raised by one while no refusal comes.
pub(crate) const PROBE_EVERY: Duration = Duration::from_secs(1);

/// The limit in force and its two sources.
#[derive(Debug)]
pub(crate) struct Limit {
    inner: Mutex<LimitState>,
}

#[derive(Debug)]
struct LimitState {
    /// From the last reading (or the configuration).
    planned: usize,
    /// Lowered after a refusal, raised by probing; `None` when there is none.
    ceiling: Option<usize>,
    /// When the ceiling last moved.
    moved: Instant,
}

impl LimitState {
    fn in_force(&self) -> usize {
        self.ceiling.map_or(self.planned, |c| c.min(self.planned))
    }
}

impl Limit {
    pub(crate) fn new(planned: usize) -> Limit {
        Limit { inner: Mutex::new(LimitState { planned, ceiling: None, moved: Instant::now() }) }
    }

    fn lock(&self) -> MutexGuard<'_, LimitState> {
        self.inner.lock()
    }

    /// The limit in force.
    pub(crate) fn current(&self) -> usize {
        self.lock().in_force()
    }

    /// Sets the planned limit; returns the limit in force.
    pub(crate) fn plan(&self, planned: usize) -> usize {
        let mut st = self.lock();
        st.planned = planned;
        if st.ceiling.is_some_and(|c| c >= planned) {
            st.ceiling = None;
        }
        st.in_force()
    }

    /// The server refused a connection while pgmux held `held`: no more than that for now (at least 1).
    pub(crate) fn refused(&self, held: usize) -> usize {
        let mut st = self.lock();
        st.ceiling = Some(held.max(1).min(st.ceiling.unwrap_or(usize::MAX)));
        st.moved = Instant::now();
        st.in_force()
    }

    /// Raises a ceiling that has held for [`PROBE_EVERY`] by one; `Some(limit)` if the limit changed.
    pub(crate) fn probe(&self) -> Option<usize> {
        let mut st = self.lock();
        let ceiling = st.ceiling?;
        if st.moved.elapsed() < PROBE_EVERY {
            return None;
        }
        st.moved = Instant::now();
        if ceiling + 1 >= st.planned {
            st.ceiling = None;
            return Some(st.planned);
        }
        st.ceiling = Some(ceiling + 1);
        Some(ceiling + 1)
    }
}

/// When the database's budget was last read (by sizing), and a way for a pool about to grow to ask for a
/// fresh reading first: connections another application opened since then must not be squeezed out.
#[derive(Debug, Default)]
pub(crate) struct BudgetClock {
    read_at: Mutex<Option<Instant>>,
    wanted: Notify,
    read: Notify,
}

impl BudgetClock {
    /// A reading was just taken.
    pub(crate) fn read_now(&self) {
        *self.read_at.lock() = Some(Instant::now());
        self.read.notify_waiters();
    }

    /// A reading was tried and failed (the control connection lost, say, in a failover): whoever waits for
    /// one goes on at once with the limit as it is, rather than for the rest of its wait.
    pub(crate) fn read_failed(&self) {
        self.read.notify_waiters();
    }

    /// Resolves when someone asks for a fresh reading.
    pub(crate) async fn wanted(&self) {
        self.wanted.notified().await;
    }

    /// If there was a reading and it is older than `age`, asks for a new one and waits for it, at most `wait`,
    /// and no longer than an attempt that failed. True if a fresh reading came.
    pub(crate) async fn refresh_if_older(&self, age: Duration, wait: Duration) -> bool {
        let before = *self.read_at.lock();
        if before.is_none_or(|at| at.elapsed() < age) {
            return false;
        }
        let read = self.read.notified();
        tokio::pin!(read);
        read.as_mut().enable();
        self.wanted.notify_one();
        pgmux_timer::timeout(wait, read).await.is_ok() && *self.read_at.lock() != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_refusal_lowers_the_limit_and_probing_raises_it_back() {
        let limits = Limit::new(10);
        assert_eq!(limits.refused(4), 4);
        assert_eq!(limits.current(), 4);
        assert_eq!(limits.probe(), None, "too soon");
        tokio::time::advance(PROBE_EVERY).await;
        assert_eq!(limits.probe(), Some(5));
        // Another refusal at 5 brings it back down; holding nothing still leaves 1.
        assert_eq!(limits.refused(0), 1);
        // A new plan below the ceiling clears it.
        assert_eq!(limits.plan(1), 1);
        assert_eq!(limits.probe(), None);
        limits.plan(3);
        limits.refused(2);
        for _ in 0..3 {
            tokio::time::advance(PROBE_EVERY).await;
            limits.probe();
        }
        assert_eq!(limits.current(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_reading_is_refreshed_on_request_and_a_missing_one_is_not_waited_for() {
        let clock = std::sync::Arc::new(BudgetClock::default());
        let (age, wait) = (Duration::from_secs(1), Duration::from_secs(1));
        assert!(!clock.refresh_if_older(age, wait).await, "no sizing yet: nothing to wait for");
        clock.read_now();
        assert!(!clock.refresh_if_older(age, wait).await, "fresh enough");
        tokio::time::advance(Duration::from_secs(2)).await;
        let reader = tokio::spawn({
            let clock = std::sync::Arc::clone(&clock);
            async move {
                clock.wanted().await;
                clock.read_now();
            }
        });
        assert!(clock.refresh_if_older(age, wait).await, "asked, and the reading came");
        reader.await.unwrap();
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!clock.refresh_if_older(age, wait).await, "nobody reads: gives up after `wait`");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_reading_lets_the_waiter_go_at_once_and_is_not_called_fresh() {
        let clock = std::sync::Arc::new(BudgetClock::default());
        clock.read_now();
        tokio::time::advance(Duration::from_secs(2)).await;
        let failing = tokio::spawn({
            let clock = std::sync::Arc::clone(&clock);
            async move {
                clock.wanted().await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                clock.read_failed();
            }
        });
        let asked = tokio::time::Instant::now();
        let fresh = clock.refresh_if_older(Duration::ZERO, Duration::from_secs(1)).await;
        assert!(!fresh, "a failed attempt is no reading");
        assert_eq!(asked.elapsed(), Duration::from_millis(50), "waited past the failed attempt");
        failing.await.unwrap();
    }
}
