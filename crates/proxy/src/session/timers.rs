//! PgBouncer's per-client timeouts, with its names: `query_timeout` (a query that runs too long is cancelled
//! and its client told, naming the setting), `idle_transaction_timeout` (a client idle inside a transaction
//! while holding a server connection is closed and the transaction rolled back) and `client_idle_timeout` (a
//! client idle between transactions is closed), `transaction_timeout` (a client whose transaction has been
//! open too long, running or idle, is closed and the transaction rolled back); and the client's own
//! `idle_session_timeout`, which pgmux keeps for the client since no server connection keeps it between
//! transactions. A user's entry may set its own value of each of PgBouncer's four; the session reads them
//! through its client counter (looked up at login, put in force again on reload). One timer per session,
//! armed only while one of them applies and is set: with all off (the default) the relay loop never touches
//! a timer.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::{TxStatus, sqlstate};
use tokio::time::{Instant, Sleep};

use super::{End, Session};
use crate::client::cancel::{self, ServerKey};
use crate::config::user_timeouts::TimeoutKey;

/// Which timeout a session's timer stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Deadline {
    /// A query is running (the server owes replies).
    Query,
    /// The client sits inside a transaction, holding a server, sending nothing.
    IdleInTransaction,
    /// The client sits between transactions.
    ClientIdle,
    /// The client sits between transactions longer than its own `idle_session_timeout`.
    SessionIdle,
    /// The client's transaction has been open longer than `transaction_timeout`.
    Transaction,
}

/// The session's one timer.
#[derive(Debug, Default)]
pub(super) struct Timer {
    armed: Option<Deadline>,
    /// The client's own `idle_session_timeout` in milliseconds (0: none). Kept here, where it fills what
    /// would be padding: every byte of a session is paid by each idle client.
    own_idle_ms: u32,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Timer {
    pub(super) fn with_own_idle(own_idle: Option<Duration>) -> Timer {
        let mut timer = Timer::default();
        timer.set_own_idle(own_idle);
        timer
    }

    /// The client's own `idle_session_timeout` (PostgreSQL's is at most `i32::MAX` ms).
    pub(super) fn set_own_idle(&mut self, own_idle: Option<Duration>) {
        self.own_idle_ms = own_idle.map_or(0, |d| u32::try_from(d.as_millis()).unwrap_or(u32::MAX));
    }

    /// The client's own `idle_session_timeout`, if it set one.
    #[inline]
    fn own_idle(&self) -> Option<Duration> {
        (self.own_idle_ms > 0).then(|| Duration::from_millis(u64::from(self.own_idle_ms)))
    }

    /// Arms the timer for `want` (from now) unless it already stands for it; `None` disarms it.
    pub(super) fn set(&mut self, want: Option<(Deadline, Duration)>) {
        match want {
            Some((kind, _)) if self.armed == Some(kind) => {}
            _ => self.restart(want),
        }
    }

    /// Arms the timer for `want` from now, whatever it stood for (the client did something).
    pub(super) fn restart(&mut self, want: Option<(Deadline, Duration)>) {
        let Some((kind, after)) = want else {
            self.armed = None;
            return;
        };
        let at = Instant::now() + after;
        match &mut self.sleep {
            Some(sleep) => sleep.as_mut().reset(at),
            None => self.sleep = Some(Box::pin(pgmux_timer::sleep_until(at))),
        }
        self.armed = Some(kind);
    }

    /// Whichever of `base` and `transaction` (time left until the transaction's deadline) comes first;
    /// `base` counts from when the timer was armed for it, if it is.
    fn first(&self, base: Option<(Deadline, Duration)>, transaction: Duration) -> (Deadline, Duration) {
        let left = |(kind, after): (Deadline, Duration)| match (&self.sleep, self.armed == Some(kind)) {
            (Some(sleep), true) => sleep.deadline().saturating_duration_since(Instant::now()),
            _ => after,
        };
        match base {
            Some(base) if left(base) <= transaction => base,
            _ => (Deadline::Transaction, transaction),
        }
    }

    /// Ready with the deadline that passed.
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Deadline> {
        let (Some(kind), Some(sleep)) = (self.armed, self.sleep.as_mut()) else { return Poll::Pending };
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.armed = None;
                Poll::Ready(kind)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// Lets go of the timer's memory (an idle client with no timeout keeps none).
    pub(super) fn release(&mut self) {
        if self.armed.is_none() {
            self.sleep = None;
        }
    }
}

impl Session {
    /// The timeout that applies now, if it is set.
    pub(super) fn deadline(&mut self) -> Option<(Deadline, Duration)> {
        // A client waiting in line is bounded by query_wait_timeout alone. (Called on every turn of the
        // relay loop: the usual case, nothing set, is a compare and a load.)
        if (self.timer.own_idle_ms == 0 && !self.shared.pools.live_config().session_timers()) || self.in_line() {
            return None;
        }
        let own_idle = self.timer.own_idle();
        let config = self.shared.config();
        let own = self.counted.timeouts();
        let Some(linked) = self.server.as_mut() else {
            let client_idle = own.or(TimeoutKey::ClientIdle, config.client_idle_timeout);
            let (kind, after) = match own_idle {
                Some(own) if client_idle.is_zero() || own < client_idle => (Deadline::SessionIdle, own),
                _ => (Deadline::ClientIdle, client_idle),
            };
            return (!after.is_zero()).then_some((kind, after));
        };
        let tracker = &linked.conn().tracker;
        let (running, in_transaction) = (tracker.pending() > 0, tracker.status() != TxStatus::Idle);
        let base = if running {
            Some((Deadline::Query, own.or(TimeoutKey::Query, config.query_timeout)))
        } else if in_transaction {
            Some((Deadline::IdleInTransaction, own.or(TimeoutKey::IdleTransaction, config.idle_transaction_timeout)))
        } else {
            own_idle.map(|own| (Deadline::SessionIdle, own))
        };
        let base = base.filter(|(_, after)| !after.is_zero());
        let transaction = own.or(TimeoutKey::Transaction, config.transaction_timeout);
        if !(running || in_transaction) || transaction.is_zero() {
            // Between transactions (a pinned or session-mode client): the next one counts from its start.
            linked.began = None;
            return base;
        }
        let now = Instant::now();
        let ends = *linked.began.get_or_insert(now) + transaction;
        // At least a millisecond: a deadline already past fires at once rather than never.
        let left = ends.saturating_duration_since(now).max(Duration::from_millis(1));
        Some(self.timer.first(base, left))
    }

    /// A timeout passed.
    pub(super) fn timed_out(&mut self, kind: Deadline) -> Result<(), End> {
        let config = self.shared.config();
        let own = self.counted.timeouts();
        match kind {
            Deadline::Query => {
                let after = own.or(TimeoutKey::Query, config.query_timeout);
                let pin = self.held();
                let Some(mut linked) = self.server.take() else { return Ok(()) };
                self.add_tally(&mut linked.tally, &Default::default());
                let mut lease = linked.take();
                let key = ServerKey { addr: lease.addr, pid: lease.key.0, secret: lease.key.1 };
                // The server stops the query; the connection is not lent again (the cancel may land late).
                tokio::spawn(async move {
                    let _ = pgmux_timer::timeout(Duration::from_secs(5), cancel::forward(key)).await;
                });
                let tracker = std::mem::take(&mut lease.tracker);
                self.shared.pools.get(self.pool).retire(lease.discard());
                self.cancel.clear();
                self.replay.finish();
                tracing::info!(?after, "query timeout: the query was cancelled (query_timeout)");
                let reply = self.router.query_timed_out(tracker, after, &self.shared.statements);
                self.client.out.push(reply);
                // The connection is not lent again, and a pinned client's state goes with it.
                match pin {
                    Some(reason) => Err(super::pin::pin_lost(reason)),
                    None => Ok(()),
                }
            }
            Deadline::IdleInTransaction => Err(End::closed(ErrorMessage::fatal(
                sqlstate::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
                format!(
                    "terminating connection due to idle_transaction_timeout ({}s): the transaction was rolled back",
                    own.or(TimeoutKey::IdleTransaction, config.idle_transaction_timeout).as_secs_f32()
                ),
            ))),
            // PostgreSQL 17's own code and words for its transaction_timeout, with the setting named.
            Deadline::Transaction => Err(End::closed(ErrorMessage::fatal(
                sqlstate::TRANSACTION_TIMEOUT,
                format!(
                    "terminating connection due to transaction timeout (transaction_timeout = {}s): the \
                     transaction was rolled back",
                    own.or(TimeoutKey::Transaction, config.transaction_timeout).as_secs_f32()
                ),
            ))),
            // PostgreSQL's own words: the client set the timeout, and expects its server's answer.
            Deadline::SessionIdle => Err(End::closed(ErrorMessage::fatal(
                sqlstate::IDLE_SESSION_TIMEOUT,
                "terminating connection due to idle-session timeout",
            ))),
            Deadline::ClientIdle => Err(End::closed(ErrorMessage::fatal(
                sqlstate::IDLE_SESSION_TIMEOUT,
                format!(
                    "closing a connection idle longer than client_idle_timeout ({}s)",
                    own.or(TimeoutKey::ClientIdle, config.client_idle_timeout).as_secs_f32()
                ),
            ))),
        }
    }
}
