//! A place in the line without a future: [`Pool::join_line`] hands out a [`Ticket`] that the caller polls
//! among its other work (a session's relay loop polls it beside its sockets), and [`Pool::acquire_until`]
//! is the same wait as a future.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::{Grant, Handout, Pool, WaitError, Waiter, clock};

/// What [`Pool::join_line`] gives.
#[derive(Debug)]
pub enum Joined<C> {
    /// An idle connection or the right to open one, at once.
    Now(Grant<C>),
    /// A place in the line.
    Line(Ticket<C>),
}

/// A caller's place in the line, from [`Pool::join_line`]. Dropping it leaves the line (a grant sent to a
/// dropped ticket goes to the next in line).
#[derive(Debug)]
pub struct Ticket<C> {
    rx: oneshot::Receiver<Handout<C>>,
}

impl<C> Ticket<C> {
    /// Ready once the pool hands this caller an idle connection or the right to open one, its deadline
    /// passes, or the pool closes; until then the task is woken when one of those happens.
    pub fn poll_grant(&mut self, cx: &mut Context<'_>) -> Poll<Result<Grant<C>, WaitError>> {
        Pin::new(&mut self.rx).poll(cx).map(|handout| match handout {
            Ok(Handout::Grant(grant)) => Ok(grant),
            Ok(Handout::TimedOut) => Err(WaitError::TimedOut),
            Ok(Handout::Refused) => Err(WaitError::Refused),
            Ok(Handout::Dismissed) => Err(WaitError::Dismissed),
            Err(_) => Err(WaitError::Closed),
        })
    }
}

impl<C> Pool<C> {
    /// Sends every caller waiting now away with [`WaitError::Refused`], in the order they came: the owner
    /// found that opening a connection fails for a reason waiting will not fix (the server refused the
    /// login). Callers that come later wait as usual. Returns how many were sent away.
    pub fn refuse_waiters(&self) -> usize {
        self.send_waiters_away(|| Handout::Refused)
    }

    /// Sends every caller waiting now away with [`WaitError::Dismissed`], in the order they came: the owner
    /// will not serve them from this pool now (a reader instance that left the rotation), and another pool
    /// may. Callers that come later wait as usual. Returns how many were sent away.
    pub fn dismiss_waiters(&self) -> usize {
        self.send_waiters_away(|| Handout::Dismissed)
    }

    fn send_waiters_away(&self, handout: impl Fn() -> Handout<C>) -> usize {
        let waiters = {
            let mut st = self.shared.lock();
            let waiters = std::mem::take(&mut st.waiters);
            if !waiters.is_empty() {
                st.line_emptied(Instant::now());
            }
            waiters
        };
        let count = waiters.len();
        for waiter in waiters {
            // A waiter that gave up meanwhile is not told.
            let _ = waiter.tx.send(handout());
        }
        count
    }

    pub(crate) async fn wait(&self, deadline: Option<Instant>) -> Result<Grant<C>, WaitError>
    where
        C: Send + 'static,
    {
        // The ticket is taken out of the match before the await, so that the future does not keep a grant's
        // space for it.
        let mut ticket = match self.join_line(deadline)? {
            Joined::Now(grant) => return Ok(grant),
            Joined::Line(ticket) => ticket,
        };
        std::future::poll_fn(|cx| ticket.poll_grant(cx)).await
    }

    /// [`acquire_until`](Self::acquire_until) without a future: an idle connection or the right to open one
    /// if either is there now, else a place in the line (a [`Ticket`]) for the caller to poll among its other
    /// work. `deadline` is kept by the pool's clock, as for `acquire_until`.
    pub fn join_line(&self, deadline: Option<Instant>) -> Result<Joined<C>, WaitError>
    where
        C: Send + 'static,
    {
        self.join_line_since(Instant::now(), deadline)
    }

    /// [`join_line`](Self::join_line) for a caller that began to wait at `since`, a moment ago (a clock
    /// reading it already had): lazy growth counts from then.
    pub fn join_line_since(&self, since: Instant, deadline: Option<Instant>) -> Result<Joined<C>, WaitError>
    where
        C: Send + 'static,
    {
        let (rx, start, ring) = {
            let mut st = self.shared.lock();
            if let Some(grant) = self.take_now(&mut st).map_err(|_| WaitError::Closed)? {
                return Ok(Joined::Now(grant));
            }
            if deadline.is_some_and(|at| at <= since) {
                return Err(WaitError::TimedOut);
            }
            let (tx, rx) = oneshot::channel();
            // A line whose first waiter has gone (its ticket dropped, not yet swept) counts as empty.
            if st.waiters.front().is_none_or(|w| w.tx.is_closed()) {
                st.line_formed(since);
            }
            st.waiters.push_back(Waiter { tx, since, deadline });
            // Usually false: behind other waiters, nothing of this one's comes due before theirs.
            let ring = clock::earlier(deadline, st.growth_due()).is_some_and(|at| st.due_at(at));
            (rx, st.start_clock(), ring)
        };
        if start {
            tokio::spawn(clock::run(Arc::downgrade(&self.shared), Arc::clone(&self.shared.bell)));
        } else if ring {
            self.shared.bell.notify_one();
        }
        Ok(Joined::Line(Ticket { rx }))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Lease, PoolConfig};

    #[tokio::test(start_paused = true)]
    async fn a_ticket_is_served_in_its_turn_and_a_dropped_one_passes_its_turn_on() {
        let p: Pool<u32> = Pool::new(PoolConfig::new(1, Duration::ZERO));
        let Ok(Some(Grant::Open(slot))) = p.try_acquire() else { panic!("an empty pool grants a slot") };
        let held: Lease<u32> = slot.fill(5);
        let deadline = Some(Instant::now() + Duration::from_secs(1));
        let Joined::Line(dropped) = p.join_line(deadline).unwrap() else { panic!("at the limit: a place in line") };
        let Joined::Line(mut kept) = p.join_line(deadline).unwrap() else { panic!("at the limit: a place in line") };
        assert_eq!(p.status().waiting, 2);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(kept.poll_grant(&mut cx).is_pending());
        drop(dropped);
        drop(held);
        let held = match kept.poll_grant(&mut cx) {
            Poll::Ready(Ok(Grant::Idle(l))) => l,
            other => panic!("expected the returned connection, got {other:?}"),
        };
        assert_eq!(*held, 5);
        let Joined::Line(mut late) = p.join_line(deadline).unwrap() else { panic!("at the limit: a place in line") };
        pgmux_timer::sleep(Duration::from_secs(2)).await;
        assert!(matches!(late.poll_grant(&mut cx), Poll::Ready(Err(WaitError::TimedOut))));
        drop(held);
        let Ok(Joined::Now(Grant::Idle(_))) = p.join_line(None) else { panic!("an idle connection at once") };
    }

    #[tokio::test(start_paused = true)]
    async fn refused_waiters_are_told_at_once_and_later_callers_wait_as_usual() {
        let p: Pool<u32> = Pool::new(PoolConfig::new(1, Duration::ZERO));
        let Ok(Some(Grant::Open(slot))) = p.try_acquire() else { panic!("an empty pool grants a slot") };
        let held: Lease<u32> = slot.fill(5);
        let deadline = Some(Instant::now() + Duration::from_secs(60));
        let mut line = Vec::new();
        for _ in 0..3 {
            let Joined::Line(t) = p.join_line(deadline).unwrap() else { panic!("at the limit: a place in line") };
            line.push(t);
        }
        assert_eq!(p.refuse_waiters(), 3);
        assert_eq!(p.status().waiting, 0);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        for t in &mut line {
            assert!(matches!(t.poll_grant(&mut cx), Poll::Ready(Err(WaitError::Refused))));
        }
        // Nobody waits now: nothing to send away, and the next caller gets the connection that comes back.
        assert_eq!(p.refuse_waiters(), 0);
        let Joined::Line(mut next) = p.join_line(deadline).unwrap() else { panic!("at the limit: a place in line") };
        drop(held);
        assert!(matches!(next.poll_grant(&mut cx), Poll::Ready(Ok(Grant::Idle(_)))));
    }

    #[tokio::test(start_paused = true)]
    async fn dismissed_waiters_are_told_at_once_and_the_connection_goes_to_the_next_caller() {
        let p: Pool<u32> = Pool::new(PoolConfig::new(1, Duration::ZERO));
        let Ok(Some(Grant::Open(slot))) = p.try_acquire() else { panic!("an empty pool grants a slot") };
        let held: Lease<u32> = slot.fill(5);
        let deadline = Instant::now() + Duration::from_secs(60);
        let Joined::Line(mut ticket) = p.join_line(Some(deadline)).unwrap() else {
            panic!("at the limit: a place in line")
        };
        let waiting = tokio::spawn({
            let p = p.clone();
            async move { p.acquire_until(deadline).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        assert_eq!(p.status().waiting, 2);
        assert_eq!(p.dismiss_waiters(), 2);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(matches!(ticket.poll_grant(&mut cx), Poll::Ready(Err(WaitError::Dismissed))));
        assert_eq!(waiting.await.unwrap(), Err(WaitError::Dismissed));
        // The connection that comes back stays for whoever asks next.
        drop(held);
        let Ok(Joined::Now(Grant::Idle(_))) = p.join_line(Some(deadline)) else { panic!("an idle connection at once") };
    }
}
