//! The server's half of the router: per server message, what the client sees and what it changes (pins,
//! settings, statements the server lost, what a statement returns), and what to undo when a message failed,
//! was skipped, or its server was lost.

use bytes::{Bytes, BytesMut};
use pgmux_proto::backend::{self, ErrorFields};
use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::{TxStatus, sqlstate};

use super::{Mode, Router, ServerView, ready_for_query};
use crate::protocol::failure::{ServerError, ServerFailure};
use crate::protocol::sql::PinReason;
use crate::protocol::statements::{ClientStatements, Registry, ServerStatements, Statement, Undo};
use crate::protocol::tracker::{Route, TxTracker};

/// Whether an error is PostgreSQL's "the prepared statement's result changed under it" (after DDL).
fn is_stale_plan(f: &ErrorFields<'_>) -> bool {
    f.code == sqlstate::FEATURE_NOT_SUPPORTED && f.message.contains("cached plan must not change result type")
}

impl Router {
    /// Routes one server message other than ParameterStatus (which the session reads itself): whether the
    /// client sees it, and what it changes. It may queue more for the server: a check's answer lets the
    /// client's held Bind go on. An error means the server connection is lost.
    #[inline]
    pub(crate) fn server_message(
        &mut self,
        tag: u8,
        body: &[u8],
        server: &mut ServerView<'_>,
        registry: &Registry,
    ) -> Result<Route, ServerFailure> {
        // The end of a Describe whose answer pgmux wants: what a statement returns.
        let described = match tag {
            b'T' | b'n' => server.tracker.take_completed_note(tag),
            _ => None,
        };
        let mut stale_plan = false;
        let (tracker, statements) = (&mut *server.tracker, &mut *server.statements);
        let route = match tag {
            b'Z' => {
                let status = backend::ready_for_query(body)?;
                let route = tracker
                    .server_ready(status, |note| self.undo(note, Some(&mut *statements), registry, &mut stale_plan))?;
                if tracker.pending() == 0 {
                    // Everything sent was answered: nothing is in flight, the kept Query included.
                    self.commit_in_flight = false;
                    let _ = tracker.take_unread_query();
                }
                route
            }
            b'E' => {
                let f = ErrorFields::parse(body)?;
                if f.is_fatal() {
                    return Err(ServerFailure::Fatal(Box::new(ServerError::from_fields(&f))));
                }
                stale_plan = is_stale_plan(&f);
                tracker
                    .server_message(tag, |note| self.undo(note, Some(&mut *statements), registry, &mut stale_plan))?
            }
            _ => tracker
                .server_message(tag, |note| self.undo(note, Some(&mut *statements), registry, &mut stale_plan))?,
        };
        if tag == b'C'
            && let Ok(command) = backend::command_tag(body)
        {
            self.command_completed(command, server.statements);
        }
        match described {
            Some(note) => self.learn(note, tag, body, route, server, registry),
            None => Ok(route),
        }
    }

    /// Learns from a CommandComplete tag what the statement did to the session.
    fn command_completed(&mut self, tag: &[u8], server: &mut ServerStatements) {
        if let Some(reason) = PinReason::from_tag(tag) {
            self.pin.get_or_insert(reason);
        }
        match tag {
            b"SET" | b"RESET" => self.settings_dirty = true,
            b"DEALLOCATE ALL" => {
                self.names.named.clear();
                server.clear();
            }
            b"DISCARD ALL" => {
                // Every statement, setting, listener, lock and temporary table of the session is gone.
                self.names = ClientStatements::default();
                server.clear();
                self.pin = None;
                self.pin_reported = false;
                self.settings_dirty = true;
            }
            _ => {}
        }
    }

    /// Undoes the bookkeeping of a message that failed or was skipped; the first statement used after
    /// `cached plan must not change result type` is invalidated everywhere.
    fn undo(&mut self, note: Undo, server: Option<&mut ServerStatements>, registry: &Registry, stale_plan: &mut bool) {
        match note {
            Undo::Parse { client_name, on_server } => {
                self.names.named.remove(&client_name);
                if let (Some(id), Some(server)) = (on_server, server) {
                    server.remove(id);
                }
            }
            Undo::Injected(id) => {
                if let Some(server) = server {
                    server.remove(id);
                }
            }
            Undo::Evicted(id) => {
                if let Some(server) = server {
                    server.restore(id);
                }
            }
            Undo::ClientClose(name, named) => {
                self.names.named.insert(name, named);
            }
            Undo::Used(stmt) => invalidate_if_stale(&stmt, server, registry, stale_plan),
            Undo::Described { client_name, stmt } => {
                if let Some(named) = self.names.named.get_mut(&client_name) {
                    named.describing = false;
                }
                invalidate_if_stale(&stmt, server, registry, stale_plan);
            }
            Undo::Check(stmt) => {
                invalidate_if_stale(&stmt, server, registry, stale_plan);
                // The server skips the rest of the unit: so does the client's held Bind.
                if self.check.take().is_some() {
                    self.mode = Mode::DiscardToSync;
                }
            }
        }
    }

    /// The link is dropped to run the transaction again elsewhere (it never ran here): undoes what was asked
    /// of this server, as if the messages had not come yet (a Bind held for a check comes again too).
    pub(crate) fn rewind(&mut self, mut tracker: TxTracker<Undo>, registry: &Registry) {
        self.check = None;
        for note in tracker.abandon() {
            self.undo(note, None, registry, &mut false);
        }
        self.mode = Mode::Normal;
        self.commit_in_flight = false;
    }

    /// The linked server is gone (`failure` says why): undoes what it was asked, forgets the session state it
    /// held, and returns what the client is told in place of the replies it was owed: one error per unit,
    /// 08007 if a commit was in flight (it may have happened), else 08006 (the transaction was rolled back).
    pub(crate) fn server_lost(&mut self, mut tracker: TxTracker<Undo>, failure: &str, registry: &Registry) -> Bytes {
        self.settle_commit(&mut tracker);
        let unknown =
            tracker.pending() > 0 && (self.commit_in_flight || (!self.tracking && tracker.status() == TxStatus::Idle));
        let error = if unknown {
            ErrorMessage::error(
                sqlstate::TRANSACTION_RESOLUTION_UNKNOWN,
                format!("server connection lost while a commit was in flight: {failure}"),
            )
            .with_detail("The transaction may or may not have committed.")
            .with_hint("Check whether its changes are there before retrying. The connection to pgmux is still usable.")
        } else {
            ErrorMessage::error(sqlstate::CONNECTION_FAILURE, format!("server connection lost: {failure}"))
                .with_detail("The current transaction, if any, was rolled back.")
                .with_hint("The connection to pgmux is still usable; retry the transaction.")
        };
        self.unlink_with(tracker, &error.to_bytes(), registry)
    }

    /// `query_timeout` passed: the query was cancelled and its server connection given up. Like
    /// [`server_lost`](Self::server_lost), with PostgreSQL's code for a cancelled statement and a message
    /// that names the setting.
    pub(crate) fn query_timed_out(
        &mut self,
        mut tracker: TxTracker<Undo>,
        after: std::time::Duration,
        registry: &Registry,
    ) -> Bytes {
        self.settle_commit(&mut tracker);
        let detail = if self.commit_in_flight {
            "A commit was in flight: it may have happened before the cancel."
        } else {
            "The current transaction, if any, was rolled back."
        };
        let error = ErrorMessage::error(
            sqlstate::QUERY_CANCELED,
            format!("canceling statement due to query timeout (query_timeout = {}s)", after.as_secs_f32()),
        )
        .with_detail(detail)
        .with_hint("The connection to pgmux is still usable.");
        self.unlink_with(tracker, &error.to_bytes(), registry)
    }

    /// The link is gone: undoes its bookkeeping and answers each unit it owed with `error`.
    fn unlink_with(&mut self, mut tracker: TxTracker<Undo>, error: &Bytes, registry: &Registry) -> Bytes {
        // A check is asked inside the client's unit, which the loss ends.
        let checking = self.check.take().is_some();
        let pending = tracker.pending();
        for note in tracker.abandon() {
            self.undo(note, None, registry, &mut false);
        }
        self.pin = None;
        self.pin_reported = false;
        self.commit_in_flight = false;
        let mut reply = BytesMut::new();
        for _ in 0..pending {
            reply.extend_from_slice(error);
            reply.extend_from_slice(&ready_for_query(TxStatus::Idle));
        }
        if tracker.unit_open() || checking {
            reply.extend_from_slice(error);
            self.mode = Mode::SkipToSync;
        } else if pending == 0 && tracker.status() != TxStatus::Idle {
            self.mode = Mode::LostTransaction;
        }
        reply.freeze()
    }
}

/// The first statement used after `cached plan must not change result type` is invalidated everywhere, and
/// forgotten on the server that said so.
fn invalidate_if_stale(stmt: &Statement, server: Option<&mut ServerStatements>, registry: &Registry, stale: &mut bool) {
    if std::mem::take(stale) {
        tracing::info!(statement = stmt.query(), "plan went stale after DDL; preparing it anew");
        registry.invalidate(stmt);
        if let Some(server) = server {
            server.remove(stmt.id);
        }
    }
}
