//! The pool's limit and where it comes from: the plan (the configuration, or the last reading of the
//! database's budget) and, below it, a ceiling set when the database refuses a new connection. The ceiling
//! is probed upward again, one connection per [`PROBE_EVERY`] without a refusal, up to the plan.

use std::sync::Mutex;
use std::time::Duration;

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

    fn lock(&self) -> std::sync::MutexGuard<'_, LimitState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
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
}
