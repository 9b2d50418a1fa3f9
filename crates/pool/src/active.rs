//! A cap on connections *in use* at once, across any number of pools: [`ActiveCap`].
//!
//! [`SharedLimit`](crate::SharedLimit) bounds the connections pools hold open; an idle open connection costs
//! the database little. What overloads a database is work: connections lent to clients at the same
//! moment, each running or holding a transaction. The cap counts those. A caller takes an [`ActivePermit`]
//! before it borrows a connection and the permit rides on the [`Lease`](crate::Lease), so that it is given
//! back when the connection comes back (or is discarded), whichever path that takes.
//!
//! Callers that find the cap full wait in one line, whichever pool they want, and are served first come,
//! first served: a permit given back goes straight to the first caller in line (never to one who only
//! tried later), and a caller may take a permit without waiting only while nobody waits. A caller that
//! leaves the line (its deadline passed, its future was dropped) takes its place out with it, so the line
//! holds only callers still waiting.
//!
//! The limit may change at any time. Raised, callers in line are served at once; lowered, permits out are
//! not taken back, but none is handed on until fewer than the new limit are out. Zero means no cap: every
//! caller in line is served, and [`ActiveCap::is_on`] tells callers they need no permit at all.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// A cap on connections in use at once, shared by the pools under it.
#[derive(Debug)]
pub struct ActiveCap {
    /// Most permits out at once; 0: no cap.
    limit: AtomicUsize,
    state: Mutex<CapState>,
}

#[derive(Debug, Default)]
struct CapState {
    /// Permits out (held by callers, or on their way to one).
    out: usize,
    /// Callers waiting, first come first.
    line: VecDeque<InLine>,
    /// The next caller's place, to find it when it leaves.
    next_place: u64,
}

#[derive(Debug)]
struct InLine {
    place: u64,
    tx: oneshot::Sender<ActivePermit>,
}

/// The right to use one connection under an [`ActiveCap`]. Dropping it gives the right back, to the first
/// caller in line if there is one.
#[derive(Debug)]
pub struct ActivePermit {
    cap: Option<Arc<ActiveCap>>,
}

impl ActivePermit {
    /// A permit that counts for nothing: it was never handed out (a send to a caller that left).
    fn defuse(mut self) {
        self.cap = None;
    }
}

impl Drop for ActivePermit {
    fn drop(&mut self) {
        if let Some(cap) = self.cap.take() {
            cap.give_back();
        }
    }
}

impl ActiveCap {
    /// A cap of `limit` connections in use (0: none).
    pub fn new(limit: usize) -> Arc<ActiveCap> {
        Arc::new(ActiveCap { limit: AtomicUsize::new(limit), state: Mutex::default() })
    }

    /// The limit now (0: no cap).
    #[inline]
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Whether there is a cap: without one, callers take no permit.
    #[inline]
    pub fn is_on(&self) -> bool {
        self.limit() != 0
    }

    /// Permits out now.
    pub fn in_use(&self) -> usize {
        self.state.lock().out
    }

    /// Callers waiting in line now.
    pub fn waiting(&self) -> usize {
        self.state.lock().line.len()
    }

    /// Changes the limit (0: no cap). Callers in line that now fit are served at once.
    pub fn set_limit(self: &Arc<Self>, limit: usize) {
        if self.limit.swap(limit, Ordering::Relaxed) != limit {
            self.serve_line();
        }
    }

    /// A permit, if one is free and nobody waits for one; `None` otherwise.
    pub fn try_take(self: &Arc<Self>) -> Option<ActivePermit> {
        let mut st = self.state.lock();
        self.take_locked(&mut st)
    }

    fn take_locked(self: &Arc<Self>, st: &mut CapState) -> Option<ActivePermit> {
        let limit = self.limit();
        if !st.line.is_empty() || (limit != 0 && st.out >= limit) {
            return None;
        }
        st.out += 1;
        Some(ActivePermit { cap: Some(Arc::clone(self)) })
    }

    /// A permit, waiting in line for one until `deadline`; `None` if the deadline passed first. Dropping the
    /// future leaves the line.
    pub async fn take_until(self: &Arc<Self>, deadline: Instant) -> Option<ActivePermit> {
        let mut place = {
            let mut st = self.state.lock();
            if let Some(permit) = self.take_locked(&mut st) {
                return Some(permit);
            }
            let (tx, rx) = oneshot::channel();
            let place = st.next_place;
            st.next_place += 1;
            st.line.push_back(InLine { place, tx });
            Place { cap: self, place, rx, served: false }
        };
        let permit = match pgmux_timer::timeout_at(deadline, &mut place.rx).await {
            Ok(Ok(permit)) => Some(permit),
            // The sender is only dropped with the cap, which this caller holds: not reached.
            Ok(Err(_)) => None,
            // A permit sent at the same moment is taken rather than handed on.
            Err(_elapsed) => place.rx.try_recv().ok(),
        };
        place.served = permit.is_some();
        permit
    }

    /// A permit came back: it goes to the first caller in line, unless the limit was lowered below what is
    /// out.
    fn give_back(self: &Arc<Self>) {
        loop {
            let next = {
                let mut st = self.state.lock();
                let limit = self.limit();
                let over = limit != 0 && st.out > limit;
                match st.line.pop_front() {
                    Some(next) if !over => next,
                    not_served => {
                        // Over a lowered limit: the permit is not handed on, and whoever was first stays so.
                        if let Some(first) = not_served {
                            st.line.push_front(first);
                        }
                        st.out -= 1;
                        return;
                    }
                }
            };
            // Sent outside the lock: a caller that left hands the permit back, and it goes to the next.
            match next.tx.send(ActivePermit { cap: Some(Arc::clone(self)) }) {
                Ok(()) => return,
                Err(permit) => permit.defuse(),
            }
        }
    }

    /// Hands permits to callers in line while the limit allows.
    fn serve_line(self: &Arc<Self>) {
        loop {
            let next = {
                let mut st = self.state.lock();
                let limit = self.limit();
                if limit != 0 && st.out >= limit {
                    return;
                }
                let Some(next) = st.line.pop_front() else { return };
                st.out += 1;
                next
            };
            if let Err(permit) = next.tx.send(ActivePermit { cap: Some(Arc::clone(self)) }) {
                permit.defuse();
                self.state.lock().out -= 1;
            }
        }
    }
}

/// A caller's place in line; dropping it unserved takes the place out.
struct Place<'a> {
    cap: &'a ActiveCap,
    place: u64,
    rx: oneshot::Receiver<ActivePermit>,
    /// It got its permit: its place was taken out when the permit was sent.
    served: bool,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if self.served {
            return;
        }
        let mut st = self.cap.state.lock();
        // Places join in increasing order and leave without reordering: the line stays sorted.
        if let Ok(at) = st.line.binary_search_by_key(&self.place, |w| w.place) {
            st.line.remove(at);
        }
    }
}
