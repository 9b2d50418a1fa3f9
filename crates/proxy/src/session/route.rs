//! The client messages pgmux looks inside: statement names (rewritten to the server's), statements a server
//! lacks (prepared on the spot), Close and `DEALLOCATE` of a client's own names (answered here), and SQL that
//! creates session state (pins the client to its server) or changes settings (read back before release).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use pgmux_proto::encode::{self, ErrorMessage};
use pgmux_proto::{TxStatus, frontend, sqlstate};

use super::Session;
use super::relay::Verdict;
use crate::server::ServerConn;
use crate::sql::{self, PinReason};
use crate::statements::{ClientStatements, ServerStatements, Statement, Undo, server_name};
use crate::tracker::{Fate, Reply};

/// What a client's own statements and session state add up to.
#[derive(Debug, Default)]
pub(super) struct ClientState {
    pub(super) statements: ClientStatements,
    /// Session state its server holds that no other server has: the link stays until it is gone.
    pub(super) pin: Option<PinReason>,
    /// Whether the pin has been logged and counted.
    pub(super) pin_reported: bool,
    /// A SET, RESET or set_config ran: read the session's settings back before the server leaves.
    pub(super) settings_dirty: bool,
}

impl ClientState {
    fn pin_to(&mut self, reason: PinReason) {
        self.pin.get_or_insert(reason);
    }

    /// Learns from a CommandComplete tag what the statement did to the session.
    pub(super) fn command_completed(&mut self, tag: &str, server: &mut ServerStatements) {
        if let Some(reason) = PinReason::from_tag(tag) {
            self.pin_to(reason);
        }
        match tag {
            "SET" | "RESET" => self.settings_dirty = true,
            "DEALLOCATE ALL" => {
                self.statements.named.clear();
                server.clear();
            }
            "DISCARD ALL" => {
                // Every statement, setting, listener, lock and temporary table of the session is gone.
                self.statements = ClientStatements::default();
                server.clear();
                self.pin = None;
                self.pin_reported = false;
                self.settings_dirty = true;
            }
            _ => {}
        }
    }
}

fn parse_complete() -> Bytes {
    let mut b = BytesMut::with_capacity(5);
    encode::parse_complete(&mut b);
    b.freeze()
}

fn close_complete() -> Bytes {
    let mut b = BytesMut::with_capacity(5);
    encode::close_complete(&mut b);
    b.freeze()
}

fn already_exists(name: &str) -> Bytes {
    ErrorMessage::error("42P05", format!("prepared statement \"{name}\" already exists")).to_bytes()
}

fn protocol_violation(what: &str) -> Bytes {
    ErrorMessage::error(sqlstate::PROTOCOL_VIOLATION, format!("invalid {what} message")).to_bytes()
}

/// `CommandComplete DEALLOCATE` and `ReadyForQuery` with `status`.
fn deallocated(status: TxStatus) -> Bytes {
    let mut b = BytesMut::with_capacity(24);
    encode::command_complete(&mut b, "DEALLOCATE");
    encode::ready_for_query(&mut b, status);
    b.freeze()
}

impl Session {
    /// Whether prepared statements are tracked (`max_prepared_statements > 0`).
    pub(super) fn tracking(&self) -> bool {
        self.shared.config.max_prepared_statements > 0
    }

    fn server_mut(&mut self) -> &mut ServerConn {
        match self.server.as_mut() {
            Some(linked) => linked.conn(),
            None => unreachable!("routed only while a server is linked"),
        }
    }

    /// Notes what a statement's text does to the session.
    fn note_sql(&mut self, sql: &str) {
        let facts = sql::scan(sql);
        if let Some(reason) = facts.pin {
            self.state.pin_to(reason);
        }
        self.state.settings_dirty |= facts.set_config;
    }

    /// Answers, without a server, a message that begins a unit and needs none: a Close or `DEALLOCATE` of
    /// the client's own statement, a Parse that reuses a live name. `None`: it needs a server.
    pub(super) fn answer_without_server(&mut self, tag: u8, msg: &[u8]) -> Option<Verdict> {
        if !self.tracking() {
            return None;
        }
        let body = &msg[5..];
        match tag {
            b'C' => {
                let (kind, name) = frontend::describe_or_close(body).ok()?;
                if kind == b'S' {
                    if name.is_empty() {
                        self.state.statements.unnamed = None;
                    } else {
                        self.state.statements.named.remove(name);
                    }
                }
                // Portals do not outlive transactions: outside one there is nothing to close.
                Some(Verdict::Answer(close_complete()))
            }
            b'P' => {
                let (name, _) = frontend::parse_name(body).ok()?;
                (!name.is_empty() && self.state.statements.named.contains_key(name))
                    .then(|| self.answer_unit(tag, already_exists(name)))
            }
            b'Q' => {
                let name = sql::deallocate_name(frontend::query(body).ok()?)?;
                self.state.statements.named.remove(&name)?;
                Some(Verdict::Answer(deallocated(TxStatus::Idle)))
            }
            _ => None,
        }
    }

    /// Sends one inspected message to the linked server: as it is, rewritten, preceded by what the server
    /// lacks, or answered here in its turn.
    pub(super) fn route_linked(&mut self, tag: u8, msg: Bytes) {
        let tracking = self.tracking();
        match tag {
            b'Q' => self.route_query(msg),
            b'D' => self.route_describe(msg, tracking),
            b'P' if tracking => self.route_parse(msg),
            b'B' if tracking => self.route_bind(msg),
            b'C' if tracking => self.route_close(msg),
            _ => self.forward(tag, msg),
        }
    }

    fn forward(&mut self, tag: u8, msg: Bytes) {
        self.server_mut().tracker.client_message(tag);
        self.server_mut().io.out.push(msg);
    }

    /// pgmux answers a message the client sent, in its turn, instead of the server.
    fn answer_in_turn(&mut self, reply: Reply, bytes: Bytes, note: Option<Undo>) {
        self.server_mut().tracker.owe(reply, Fate::Answer(bytes), note);
    }

    fn route_query(&mut self, msg: Bytes) {
        let Ok(sql) = frontend::query(&msg[5..]) else { return self.forward(b'Q', msg) };
        self.note_sql(sql);
        if self.tracking()
            && self.server_mut().tracker.nothing_owed()
            && let Some(name) = sql::deallocate_name(sql)
            && self.state.statements.named.remove(&name).is_some()
        {
            let status = self.server_mut().tracker.status();
            return self.answer_in_turn(Reply::Query, deallocated(status), None);
        }
        // A simple Query destroys the server's unnamed statement.
        self.server_mut().statements.unnamed = None;
        self.forward(b'Q', msg);
    }

    fn route_parse(&mut self, msg: Bytes) {
        let Ok((name, key)) = frontend::parse_name(&msg[5..]) else {
            return self.answer_in_turn(Reply::Parse, protocol_violation("Parse"), None);
        };
        if let Ok(sql) = frontend::parse_query(key) {
            self.note_sql(sql);
        }
        if name.is_empty() {
            let statements = &mut self.state.statements;
            statements.unnamed_generation += 1;
            statements.unnamed = Some(msg.clone());
            let owner = (self.id, statements.unnamed_generation);
            self.server_mut().statements.unnamed = Some(owner);
            return self.forward(b'P', msg);
        }
        if self.state.statements.named.contains_key(name) {
            // PostgreSQL's own answer to a live name; the server skips nothing, so pgmux drops the rest of
            // the unit itself.
            self.answer_in_turn(Reply::Parse, already_exists(name), None);
            self.discard_until_sync = true;
            return;
        }
        let name = name.to_owned();
        let stmt = self.shared.statements.intern(key);
        self.state.statements.named.insert(name.clone(), Arc::clone(&stmt));
        if self.server_mut().statements.has(stmt.id) {
            let note = Undo::Parse { client_name: name, on_server: None };
            return self.answer_in_turn(Reply::Parse, parse_complete(), Some(note));
        }
        self.make_room_for(stmt.id);
        self.server_mut().tracker.owe(
            Reply::Parse,
            Fate::Forward,
            Some(Undo::Parse { client_name: name, on_server: Some(stmt.id) }),
        );
        self.server_mut().io.out.push(stmt.parse.clone());
    }

    /// Records `id` as prepared on the server, closing the least recently used statement if that makes too
    /// many (the CloseComplete is swallowed).
    fn make_room_for(&mut self, id: u64) {
        if let Some(evicted) = self.server_mut().statements.add(id) {
            let mut close = BytesMut::with_capacity(32);
            encode::describe_or_close(&mut close, b'C', b'S', &server_name(evicted));
            self.server_mut().tracker.owe(Reply::Close, Fate::Swallow, Some(Undo::Evicted(evicted)));
            self.server_mut().io.out.push(close.freeze());
        }
    }

    /// The statement a client name stands for, renewed if its plan went stale, and prepared on this server
    /// if it lacks it.
    fn prepared(&mut self, client_name: &str) -> Option<Arc<Statement>> {
        let mut stmt = Arc::clone(self.state.statements.named.get(client_name)?);
        if stmt.is_invalid() {
            stmt = self.shared.statements.renew(&stmt);
            self.state.statements.named.insert(client_name.to_owned(), Arc::clone(&stmt));
        }
        if !self.server_mut().statements.has(stmt.id) {
            self.make_room_for(stmt.id);
            self.server_mut().tracker.owe(Reply::Parse, Fate::Swallow, Some(Undo::Injected(stmt.id)));
            self.server_mut().io.out.push(stmt.parse.clone());
        }
        Some(stmt)
    }

    /// Replays the client's last `Parse('')` if the server's unnamed statement is not that one.
    fn ensure_unnamed(&mut self) {
        let owner = (self.id, self.state.statements.unnamed_generation);
        let Some(parse) = self.state.statements.unnamed.clone() else { return };
        if self.server_mut().statements.unnamed != Some(owner) {
            self.server_mut().tracker.owe(Reply::Parse, Fate::Swallow, None);
            let server = self.server_mut();
            server.statements.unnamed = Some(owner);
            server.io.out.push(parse);
        }
    }

    fn route_bind(&mut self, msg: Bytes) {
        let body = &msg[5..];
        let Ok((_, name, range)) = frontend::bind_names(body) else { return self.forward(b'B', msg) };
        if name.is_empty() {
            self.ensure_unnamed();
            return self.forward(b'B', msg);
        }
        let name = name.to_owned();
        // A name the client never parsed goes through as it is: the server says it does not exist.
        let Some(stmt) = self.prepared(&name) else { return self.forward(b'B', msg) };
        let mut bind = BytesMut::with_capacity(msg.len() + stmt.name.len());
        encode::bind_renamed(&mut bind, &msg[5..], range, &stmt.name);
        self.server_mut().tracker.owe(Reply::Bind, Fate::Forward, Some(Undo::Used(Arc::clone(&stmt))));
        self.server_mut().io.out.push(bind.freeze());
    }

    fn route_describe(&mut self, msg: Bytes, tracking: bool) {
        let Ok((kind, name)) = frontend::describe_or_close(&msg[5..]) else {
            self.server_mut().tracker.client_describe(false);
            return self.server_mut().io.out.push(msg);
        };
        let statement = kind == b'S';
        if tracking && statement {
            if name.is_empty() {
                self.ensure_unnamed();
            } else if let Some(stmt) = self.prepared(name) {
                let mut describe = BytesMut::with_capacity(stmt.name.len() + 7);
                encode::describe_or_close(&mut describe, b'D', b'S', &stmt.name);
                self.server_mut().tracker.owe(Reply::DescribeStatement, Fate::Forward, Some(Undo::Used(stmt)));
                return self.server_mut().io.out.push(describe.freeze());
            }
        }
        self.server_mut().tracker.client_describe(statement);
        self.server_mut().io.out.push(msg);
    }

    fn route_close(&mut self, msg: Bytes) {
        let Ok((kind, name)) = frontend::describe_or_close(&msg[5..]) else { return self.forward(b'C', msg) };
        if kind != b'S' {
            return self.forward(b'C', msg);
        }
        if name.is_empty() {
            self.state.statements.unnamed = None;
            let owner = (self.id, self.state.statements.unnamed_generation);
            let server = self.server_mut();
            if server.statements.unnamed == Some(owner) {
                server.statements.unnamed = None;
            }
            return self.forward(b'C', msg);
        }
        // Statements are shared: a client's Close only drops its name; the server keeps the statement for
        // others until it is evicted.
        let note = self.state.statements.named.remove(name).map(|stmt| Undo::ClientClose(name.to_owned(), stmt));
        self.answer_in_turn(Reply::Close, close_complete(), note);
    }

    /// Undoes the bookkeeping of messages that failed or were skipped; on `cached plan must not change result
    /// type`, invalidates the failing statement everywhere.
    pub(super) fn undo_all(&mut self, notes: Vec<Undo>, stale_plan: bool) {
        let mut stale_plan = stale_plan;
        for note in notes {
            let server = self.server.as_mut().map(|l| &mut l.conn().statements);
            match note {
                Undo::Parse { client_name, on_server } => {
                    self.state.statements.named.remove(&client_name);
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
                Undo::ClientClose(name, stmt) => {
                    self.state.statements.named.insert(name, stmt);
                }
                Undo::Used(stmt) => {
                    if std::mem::take(&mut stale_plan) {
                        tracing::info!(statement = stmt.query(), "plan went stale after DDL; re-preparing it");
                        self.shared.statements.invalidate(&stmt);
                        if let Some(server) = server {
                            server.remove(stmt.id);
                        }
                    }
                }
            }
        }
    }
}
