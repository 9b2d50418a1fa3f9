//! Keeping a server connection from one transaction to the next: why a client keeps it (session state
//! pinned to it, or `pool_mode = session`), whether it may go on keeping it when its node is demoted, and
//! what it is told when the connection is lost with the state on it.

use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::sqlstate;

use super::{End, Session};
use crate::observe::Tally;
use crate::protocol::sql::PinReason;

/// What a pinned client is told when its server connection is gone: the session state that pinned it
/// (`reason`) went with it and cannot be rebuilt elsewhere, so the client is disconnected rather than left
/// to wait for notifications that will never come or to trust a lock it no longer holds.
pub(super) fn pin_lost(reason: Keep) -> End {
    End::closed(
        ErrorMessage::fatal(
            sqlstate::CONNECTION_FAILURE,
            format!(
                "terminating connection: its server connection was lost, and with it the session state that \
                 pinned this client to it ({reason})"
            ),
        )
        .with_hint("connect again and set up that state again"),
    )
}

/// Why a client keeps its server connection from one transaction to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Keep {
    /// Session state that cannot move to another connection (LISTEN, a lock, a temporary table, ...).
    Pin(PinReason),
    /// Its pool hands out connections per session (`pool_mode = session`).
    Session,
}

impl std::fmt::Display for Keep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Keep::Pin(reason) => reason.fmt(f),
            Keep::Session => f.write_str("pool_mode = session"),
        }
    }
}

impl Session {
    /// Whether, and why, the client keeps its server between transactions.
    #[inline]
    pub(super) fn held(&self) -> Option<Keep> {
        match self.router.pin() {
            Some(reason) => Some(Keep::Pin(reason)),
            None if self.session_mode => Some(Keep::Session),
            None => None,
        }
    }

    /// A pinned client may go on with its server only while the node is trusted and its role fits: its
    /// session state (`reason`) cannot move to another node, so it is told and disconnected instead.
    pub(super) fn still_trusted(&mut self, reason: Keep) -> Result<(), End> {
        let Some(linked) = self.server.as_mut() else { return Ok(()) };
        let server = linked.conn();
        if self.shared.pools.get(self.pool).keeps(server) && self.shared.pools.get(self.pool).fits(server.role) {
            return Ok(());
        }
        let node = server.addr;
        tracing::warn!(%node, %reason, "a pinned client's node is no longer trusted; closing the client");
        Err(End::closed(ErrorMessage::fatal(
            sqlstate::CONNECTION_FAILURE,
            format!(
                "terminating connection: the database node it is pinned to ({reason}) was demoted or stopped \
                 answering, and its session state cannot move to another node"
            ),
        )))
    }

    /// The transaction is counted as done; the pin that keeps the server, if any (reported the first time).
    pub(super) fn transaction_over(&mut self) -> Option<Keep> {
        let (received, sent, binds) = (self.client.received, self.client.out.sent(), self.router.take_binds());
        let ended = self.meter.transaction_done(received, sent, binds);
        let stats = self.shared.pools.get(self.route).stats();
        match self.server.as_deref_mut() {
            Some(linked) => stats.add(&std::mem::take(&mut linked.tally), &ended),
            None => stats.add(&Tally::default(), &ended),
        }
        let keep = self.held()?;
        if let Some(reason) = self.router.pin_to_report() {
            self.meter.pinned(reason);
            tracing::info!(%reason, "client pinned to its server connection until it disconnects");
        }
        Some(keep)
    }

    /// A pinned client keeps its server for its next transaction, if the server's node is still trusted.
    pub(super) fn stay_pinned(&mut self, reason: Keep) -> Result<(), End> {
        let Some(linked) = self.server.as_mut() else { return Ok(()) };
        linked.next_transaction();
        self.still_trusted(reason)
    }
}
