//! Prepared statements across DDL. After `ALTER TABLE` changes what a prepared `SELECT *` returns,
//! PostgreSQL answers each client's next use of it with `cached plan must not change result type` (0A000)
//! until the client prepares it again, which drivers do on that error. A copy pgmux prepares afresh on
//! another server would instead plan against the new table: the client's Bind, whose result formats count
//! the old columns, would fail with 08P01 (which drivers do not recognise), or quietly return rows of a
//! shape the driver does not expect.
//!
//! So each client name remembers the shape its client saw, and each server what its copies return. Before
//! a client uses a copy pgmux prepares anew (or one nobody described yet), the router describes it and holds
//! the client's Bind until the answer ([`Mode::Checking`]). The same shape: the Bind goes on. Another: the
//! client gets PostgreSQL's own error in the Bind's turn, and pgmux makes the server fail the transaction
//! and skip the rest of the unit, as PostgreSQL would have, so that nothing of the statement runs. A copy
//! already known to differ is refused at once. The cost is one round trip, once per statement and server,
//! and only for clients that know what their statement returns (they described it, or someone did).

use std::sync::Arc;

use bytes::Bytes;
use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::sqlstate;

use super::{Mode, Router, ServerView, describe_statement};
use crate::protocol::failure::ServerFailure;
use crate::protocol::statements::{Registry, Shape, Statement, Undo};
use crate::protocol::tracker::{Fate, Reply, Route};

/// What [`Mode::Checking`] waits for.
#[derive(Debug)]
pub(super) struct Check {
    /// The client's Bind, held until the answer; `None` when the client's own Describe asks the question.
    held: Option<Bytes>,
    /// What the client expects the statement to return.
    expected: Shape,
}

/// What a client's use (Bind or Describe) of one of its statement names needs on the linked server.
pub(super) enum Use {
    /// Nothing to check: the server's copy returns what the client expects, or nobody knows what the client
    /// expects. It may still have to be prepared there.
    Ready(Arc<Statement>),
    /// The server's copy must be described first, with the client's message held: the server lacks it (so
    /// pgmux prepares it anew), or nobody asked yet what that copy returns.
    Check(Arc<Statement>, Shape),
    /// The server's copy returns other columns than the client expects.
    Stale(Arc<Statement>, Shape),
}

/// PostgreSQL's error for a prepared statement whose result changed under it.
fn stale_plan() -> Bytes {
    ErrorMessage::error(sqlstate::FEATURE_NOT_SUPPORTED, "cached plan must not change result type").to_bytes()
}

impl Router {
    /// The statement a client name stands for (renewed if it was invalidated), and what its use needs.
    /// `None`: the client has no such name.
    pub(super) fn statement_for_use(
        &mut self,
        client_name: &str,
        server: &mut ServerView<'_>,
        registry: &Registry,
    ) -> Option<Use> {
        let named = self.names.named.get_mut(client_name)?;
        if named.stmt.is_invalid() {
            // The client still expects what it saw of the old statement.
            named.shape = named.expected().cloned();
            named.stmt = registry.renew(&named.stmt);
        }
        let stmt = Arc::clone(&named.stmt);
        let Some(expected) = named.expected() else { return Some(Use::Ready(stmt)) };
        // Marked used (and counted) by whoever prepares or uses it next.
        Some(match server.statements.copy_shape(stmt.id) {
            Some(Some(copy)) if copy == expected => Use::Ready(stmt),
            Some(Some(_)) => Use::Stale(stmt, expected.clone()),
            // The server lacks it (pgmux prepares it anew), or nobody described its copy.
            None | Some(None) => Use::Check(stmt, expected.clone()),
        })
    }

    /// Describes `stmt` on the server and holds the client until the answer. `held` is the client's Bind;
    /// without one, the client's own Describe is the question and sees the answer.
    pub(super) fn start_check(
        &mut self,
        held: Option<Bytes>,
        stmt: &Arc<Statement>,
        expected: Shape,
        server: &mut ServerView<'_>,
    ) {
        let fate = if held.is_some() { Fate::Swallow } else { Fate::Forward };
        let note = Undo::Check(Arc::clone(stmt));
        server.send(describe_statement(&stmt.name), Reply::DescribeStatement, fate, Some(note));
        server.flush();
        self.check = Some(Box::new(Check { held, expected }));
        self.mode = Mode::Checking;
    }

    /// Answers the client's use of a statement whose result changed with PostgreSQL's error, in the turn of
    /// `reply`, and has the server fail the rest of the unit as PostgreSQL would.
    pub(super) fn refuse_stale(&mut self, stmt: &Statement, reply: Reply, server: &mut ServerView<'_>) {
        tracing::info!(
            statement = stmt.query(),
            "a prepared statement returns other columns than when the client prepared it; refused as PostgreSQL would"
        );
        server.answer(reply, stale_plan(), None);
        server.fail();
        self.mode = Mode::DiscardToSync;
    }

    /// The end of a Describe pgmux wanted the answer to: what `stmt` returns on this server. Returns what
    /// becomes of the message.
    pub(super) fn learn(
        &mut self,
        note: Undo,
        tag: u8,
        body: &[u8],
        route: Route,
        server: &mut ServerView<'_>,
        registry: &Registry,
    ) -> Result<Route, ServerFailure> {
        let shape = if tag == b'T' { Shape::of_rows(body)? } else { Shape::no_data() };
        Ok(match note {
            Undo::Described { client_name, stmt } => {
                self.saw(&stmt, &shape, server, registry);
                if let Some(named) = self.names.named.get_mut(&client_name)
                    && Arc::ptr_eq(&named.stmt, &stmt)
                {
                    named.saw(shape);
                }
                route
            }
            Undo::Check(stmt) => self.finish_check(&stmt, shape, route, server, registry),
            // Other notes matter only if their message fails.
            _ => route,
        })
    }

    /// Notes what the server's copy of `stmt` returns. If that is not what pgmux first saw it return, the
    /// tables under it changed (DDL) between the two prepares: the statement is made anew for whoever
    /// prepares its text next, so that nobody's Parse is answered from a copy that went stale. Unless the
    /// client is pinned: then its statements may name its own objects (a temporary table), which other
    /// sessions see otherwise, and each copy stands for itself.
    fn saw(&self, stmt: &Statement, shape: &Shape, server: &mut ServerView<'_>, registry: &Registry) {
        server.statements.set_shape(stmt.id, shape.clone());
        if !stmt.saw(shape) && self.pin.is_none() {
            tracing::info!(statement = stmt.query(), "a prepared statement returns other columns than before (DDL)");
            registry.invalidate(stmt);
        }
    }

    /// The check's answer: the held Bind goes on, or the client is refused.
    fn finish_check(
        &mut self,
        stmt: &Statement,
        shape: Shape,
        route: Route,
        server: &mut ServerView<'_>,
        registry: &Registry,
    ) -> Route {
        let Some(check) = self.check.take() else { return route };
        self.mode = Mode::Normal;
        self.saw(stmt, &shape, server, registry);
        if shape == check.expected {
            if let Some(bind) = check.held {
                // Routed as if it came now; it may need another check if the statement was just renewed.
                self.route_bind(bind, server, registry);
            }
            return route;
        }
        let reply = if check.held.is_some() { Reply::Bind } else { Reply::DescribeStatement };
        self.refuse_stale(stmt, reply, server);
        // A client's Describe must not see the new columns.
        Route::Swallow
    }
}
