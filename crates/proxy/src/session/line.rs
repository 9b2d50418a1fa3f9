//! Waiting in line for a server connection inside the relay loop itself.
//!
//! pgmux keeps fewer server connections than it has busy clients, so under load most transactions begin
//! in the line: that is the common case, not the exception. A client that finds nothing idle takes a place
//! in the pool's line (a ticket) and goes back to the relay loop, which polls the ticket among its sockets,
//! the shutdown watch and a cancel. When the pool hands over an idle connection that needs nothing more,
//! the unit is linked and routed there, with no future of its own. Whatever else the line hands out (a
//! connection to check with a round trip, one whose settings differ, the right to open one) goes on in the
//! slow path ([`Session::link`](super::Session)) with what it got, until the same deadline.

use std::task::{Context, Poll};

use pgmux_pool::WaitError;
use pgmux_proto::encode::ErrorMessage;
use tokio::time::Instant;

use super::relay::{Event, Waiting};
use super::{End, Session};
use crate::pools::{CheckoutError, Fitness, Resume, ServerGrant, ServerTicket};
use crate::protocol::router::Verdict;

/// A unit's first message waiting in line for a server connection.
pub(super) struct InLine {
    waiting: Waiting,
    /// `query_wait_timeout` after the client joined the line.
    deadline: Instant,
    /// `None` once the line has handed out something the slow path must finish with.
    ticket: Option<ServerTicket>,
}

impl Session {
    /// Takes a place in the line for `waiting`, or hands it back if the slow path must link it (it holds
    /// a connection already, or the line is not open to it).
    pub(super) fn join_line(&mut self, waiting: Waiting) -> Option<Waiting> {
        if waiting.taken.is_some() {
            return Some(waiting);
        }
        // The wait is timed from the query's start, read when its bytes arrived in this turn of the loop.
        let since = Instant::from_std(self.meter.waiting());
        let Some((ticket, deadline)) = self.shared.pools.get(self.pool).join_line(since) else { return Some(waiting) };
        self.cancel.wait_begin();
        self.line = Some(Box::new(InLine { waiting, deadline, ticket: Some(ticket) }));
        None
    }

    /// The unit that left the line for the slow path, if one did.
    pub(super) fn take_slow_link(&mut self) -> Option<Waiting> {
        self.line.take_if(|line| line.ticket.is_none()).map(|line| line.waiting)
    }

    /// Whether a unit waits in line (or is about to go on in the slow path).
    pub(super) fn in_line(&self) -> bool {
        self.line.is_some()
    }

    /// Ready when the line hands something out or the client cancels its query.
    pub(super) fn poll_line(&mut self, cx: &mut Context<'_>) -> Poll<Event> {
        let Some(ticket) = self.line.as_mut().and_then(|line| line.ticket.as_mut()) else { return Poll::Pending };
        if let Poll::Ready(granted) = ticket.poll_grant(cx) {
            return Poll::Ready(Event::Granted(granted));
        }
        self.cancel.poll_cancelled(cx).map(|()| Event::CancelledInLine)
    }

    /// The line handed out a connection, the right to open one, or an error; or the client cancelled.
    /// Links at once when it can; else the unit is left for the slow path ([`take_slow_link`]).
    ///
    /// [`take_slow_link`]: Self::take_slow_link
    pub(super) fn leave_line(&mut self, granted: Option<Result<ServerGrant, WaitError>>) -> Result<(), End> {
        let Some(mut line) = self.line.take() else { return Ok(()) };
        let cancelled = self.cancel.wait_end();
        // A connection that came at the same moment as a cancel goes back unused.
        let Some(granted) = granted.filter(|_| !cancelled) else {
            let err = self.cancelled_while_waiting();
            self.answer_unit(line.waiting.tag, err);
            return Ok(());
        };
        let mut resume = Resume { grant: None, deadline: line.deadline, patient: false };
        match granted {
            // The reader it waited for left the rotation: the transaction picks again, and goes on in the
            // slow path (with the same deadline) wherever the pick sends it.
            Err(WaitError::Dismissed) if self.reader_route => match self.another_reader(&mut 0, &mut None) {
                Some(Ok(next)) => resume = next.unwrap_or(resume),
                Some(Err(none)) => {
                    self.answer_unit(line.waiting.tag, none);
                    return Ok(());
                }
                None => {
                    let err = self.no_server(CheckoutError::LeftRotation)?;
                    self.answer_unit(line.waiting.tag, err);
                    return Ok(());
                }
            },
            Err(e) => {
                let e = match e {
                    WaitError::Closed => CheckoutError::Closed,
                    WaitError::TimedOut => self.shared.pools.get(self.pool).waited_too_long(),
                    WaitError::Refused => self.shared.pools.get(self.pool).refused_in_line(),
                    WaitError::Dismissed => CheckoutError::LeftRotation,
                };
                let err = self.no_server(e)?;
                self.answer_unit(line.waiting.tag, err);
                return Ok(());
            }
            Ok(ServerGrant::Idle(mut lease)) => match self.shared.pools.get(self.pool).quick_check(&mut lease) {
                Fitness::Fit if lease.params.in_sync(&self.params) => {
                    self.meter.got_server();
                    self.linked(lease);
                    let Waiting { tag, msg, piece, .. } = line.waiting;
                    self.route_linked(tag, msg, piece);
                    return Ok(());
                }
                // Its settings differ: the slow path applies the client's, as to any connection.
                Fitness::Fit => line.waiting.taken = Some(lease),
                Fitness::Unfit => self.shared.pools.get(self.pool).retire(lease.discard()),
                Fitness::NeedsRoundTrip => resume.grant = Some(Box::new(ServerGrant::Idle(lease))),
            },
            Ok(open) => resume.grant = Some(Box::new(open)),
        }
        line.waiting.resume = Some(resume);
        line.ticket = None;
        self.line = Some(line);
        Ok(())
    }

    /// Answers the unit `tag` began, which got no server connection, with `err`.
    fn answer_unit(&mut self, tag: u8, err: ErrorMessage) {
        if let Verdict::Answer(reply) = self.router.answer_unit(tag, err.to_bytes()) {
            self.client.out.push(reply);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_place_in_line_is_small() {
        // What a client waiting in line holds beyond an idle one (152 bytes in a debug build); the boxed
        // link future a wait took before was 1.4 KB.
        let size = std::mem::size_of::<super::InLine>();
        assert!(size <= 256, "a place in line is {size} bytes");
    }
}
