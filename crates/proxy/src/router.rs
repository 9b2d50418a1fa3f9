//! The statement router: per client message, what goes to the server (as it is, renamed, or preceded by a
//! Parse the server lacks), what pgmux answers itself, what the server then owes, and what to undo when a
//! message fails or is skipped. Per server message, what the client sees and what it changes. A pure type
//! driven by messages: the session feeds it bytes and writes what it queued; no sockets, no awaits.
//!
//! The rule that holds the protocol together is that every message queued for the server has exactly one
//! entry in the transaction tracker, and every answer pgmux gives in a server's stead has one too, in its
//! turn. [`ServerView`] is the only way the router reaches the server's queue, and each of its methods
//! writes both at once.
//!
//! Statement names: drivers name statements per connection (`s0`, `S_1`, `__asyncpg_stmt_1__`), names
//! collide across clients and outlive transactions, and the next transaction may land on another server.
//! So a named statement is keyed by what it is ([`Registry`]), prepared under pgmux's own name on each
//! server that needs it, and a client's Close or `DEALLOCATE` only drops the client's name.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use pgmux_proto::backend::{self, ErrorFields};
use pgmux_proto::encode::{self, ErrorMessage};
use pgmux_proto::{TxStatus, frontend, sqlstate};

use crate::io::WriteQueue;
use crate::server::{ServerError, ServerFailure};
use crate::sql::{self, PinReason};
use crate::statements::{ClientStatements, Registry, ServerStatements, Statement, Undo, server_name};
use crate::tracker::{Fate, Reply, Route, TxTracker};

/// What becomes of client messages until the next Sync. Exclusive: one mode at a time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Every message is routed.
    #[default]
    Normal,
    /// pgmux answered an error for a unit while no server was linked: drop messages up to the next Sync,
    /// and answer that Sync here.
    SkipToSync,
    /// pgmux answered an error inside a unit on a linked server: drop messages up to the next Sync, which
    /// goes to the server as usual.
    DiscardToSync,
    /// The server was lost while the client sat idle inside a transaction: its next unit gets the error.
    LostTransaction,
}

/// What to do with a message that begins a unit while no server is linked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Drop it.
    Drop,
    /// Drop it and answer it with these bytes.
    Answer(Bytes),
    /// Get a server and route it there.
    NeedServer,
}

/// The linked server, as the router sees it: what it owes, what it has prepared, and its write queue.
#[derive(Debug)]
pub(crate) struct ServerView<'a> {
    pub(crate) tracker: &'a mut TxTracker<Undo>,
    pub(crate) statements: &'a mut ServerStatements,
    pub(crate) out: &'a mut WriteQueue,
}

impl ServerView<'_> {
    /// Queues a client message as it is; the server owes it the usual reply.
    pub(crate) fn forward(&mut self, tag: u8, msg: Bytes) {
        self.tracker.client_message(tag);
        self.out.push(msg);
    }

    /// Queues a client Describe as it is (its reply depends on what it describes).
    fn forward_describe(&mut self, statement: bool, msg: Bytes) {
        self.tracker.client_describe(statement);
        self.out.push(msg);
    }

    /// Queues a message (the client's, rewritten, or pgmux's own) with the reply the server owes for it.
    fn send(&mut self, msg: Bytes, reply: Reply, fate: Fate, note: Option<Undo>) {
        self.tracker.owe(reply, fate, note);
        self.out.push(msg);
    }

    /// Answers a client message in the server's stead, in its turn: nothing goes to the server.
    fn answer(&mut self, reply: Reply, bytes: Bytes, note: Option<Undo>) {
        self.tracker.owe(reply, Fate::Answer(bytes), note);
    }
}

/// One client's statements, session state and mode.
#[derive(Debug)]
pub(crate) struct Router {
    /// The client session, unique for the life of the process: whose unnamed statement a server holds.
    client_id: u64,
    /// Whether named statements are tracked (`max_prepared_statements > 0`).
    tracking: bool,
    mode: Mode,
    names: ClientStatements,
    /// Session state its server holds that no other server has: the link stays until it is gone.
    pin: Option<PinReason>,
    /// Whether the pin has been reported.
    pin_reported: bool,
    /// A SET, RESET or set_config ran: read the session's settings back before the server leaves.
    settings_dirty: bool,
    /// A COMMIT, or a write outside a transaction block, was sent and its unit has not ended: if the server
    /// is lost now, whether it committed is unknown (08007, not 08006).
    commit_in_flight: bool,
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

pub(crate) fn ready_for_query(status: TxStatus) -> Bytes {
    let mut b = BytesMut::with_capacity(6);
    encode::ready_for_query(&mut b, status);
    b.freeze()
}

fn already_exists(name: &str) -> Bytes {
    let message = format!("prepared statement \"{name}\" already exists");
    ErrorMessage::error(sqlstate::DUPLICATE_PREPARED_STATEMENT, message).to_bytes()
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

/// Whether an error is PostgreSQL's "the prepared statement's result changed under it" (after DDL).
fn is_stale_plan(f: &ErrorFields<'_>) -> bool {
    f.code == sqlstate::FEATURE_NOT_SUPPORTED && f.message.contains("cached plan must not change result type")
}

impl Router {
    pub(crate) fn new(client_id: u64, tracking: bool) -> Self {
        Router {
            client_id,
            tracking,
            mode: Mode::Normal,
            names: ClientStatements::default(),
            pin: None,
            pin_reported: false,
            settings_dirty: false,
            commit_in_flight: false,
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// Why the client is pinned to its server, if it is.
    pub(crate) fn pin(&self) -> Option<PinReason> {
        self.pin
    }

    /// The pin's reason the first time it is asked after the client became pinned: to log it once.
    pub(crate) fn pin_to_report(&mut self) -> Option<PinReason> {
        let reason = self.pin?;
        (!std::mem::replace(&mut self.pin_reported, true)).then_some(reason)
    }

    /// Whether the client changed settings since the last call (and clears it).
    pub(crate) fn take_settings_dirty(&mut self) -> bool {
        std::mem::take(&mut self.settings_dirty)
    }

    /// Whether the client changed settings that were not read back yet.
    pub(crate) fn settings_dirty(&self) -> bool {
        self.settings_dirty
    }

    /// Whether a client message can go to the linked server untouched, without the router: the fast path.
    #[inline]
    pub(crate) fn passes(&self, tag: u8) -> bool {
        self.mode == Mode::Normal && !self.inspects(tag)
    }

    /// Messages the router looks inside (statement names, SQL) rather than passing on unread.
    fn inspects(&self, tag: u8) -> bool {
        match tag {
            b'Q' | b'D' | b'X' => true,
            b'P' | b'B' | b'C' => self.tracking,
            _ => false,
        }
    }

    /// A whole client message while no server is linked: dropped, answered here, or routed once a server is
    /// linked.
    pub(crate) fn unlinked(&mut self, tag: u8, msg: &[u8]) -> Verdict {
        match self.mode {
            Mode::SkipToSync if tag == b'S' => {
                self.mode = Mode::Normal;
                return Verdict::Answer(ready_for_query(TxStatus::Idle));
            }
            Mode::SkipToSync => return Verdict::Drop,
            Mode::DiscardToSync if tag != b'S' => return Verdict::Drop,
            Mode::DiscardToSync => self.mode = Mode::Normal,
            Mode::LostTransaction if !matches!(tag, b'd' | b'c' | b'f') => {
                self.mode = Mode::Normal;
                let err = ErrorMessage::error(
                    sqlstate::CONNECTION_FAILURE,
                    "the server connection was lost while this client was in a transaction; \
                     the transaction was rolled back",
                )
                .to_bytes();
                return self.answer_unit(tag, err);
            }
            Mode::LostTransaction | Mode::Normal => {}
        }
        match tag {
            // COPY messages after a COPY that already failed: PostgreSQL ignores them too.
            b'd' | b'c' | b'f' => Verdict::Drop,
            // A Sync with nothing before it, a Flush with nothing to flush: no server needed.
            b'S' => Verdict::Answer(ready_for_query(TxStatus::Idle)),
            b'H' => Verdict::Drop,
            _ => self.answer_without_server(tag, msg).unwrap_or(Verdict::NeedServer),
        }
    }

    /// Answers the unit that `tag` begins with `error`: a Query, FunctionCall or Sync gets its
    /// ReadyForQuery at once; an extended-protocol unit gets it at its Sync.
    pub(crate) fn answer_unit(&mut self, tag: u8, error: Bytes) -> Verdict {
        match tag {
            b'Q' | b'F' | b'S' => {
                let mut reply = BytesMut::from(&error[..]);
                reply.extend_from_slice(&ready_for_query(TxStatus::Idle));
                Verdict::Answer(reply.freeze())
            }
            _ => {
                self.mode = Mode::SkipToSync;
                Verdict::Answer(error)
            }
        }
    }

    /// Answers, without a server, a message that begins a unit and needs none: a Close or `DEALLOCATE` of
    /// the client's own statement, a Parse that reuses a live name. `None`: it needs a server.
    fn answer_without_server(&mut self, tag: u8, msg: &[u8]) -> Option<Verdict> {
        if !self.tracking {
            return None;
        }
        let body = msg.get(5..)?;
        match tag {
            b'C' => {
                let (kind, name) = frontend::describe_or_close(body).ok()?;
                if kind == b'S' {
                    if name.is_empty() {
                        self.names.unnamed = None;
                    } else {
                        self.names.named.remove(name);
                    }
                }
                // Portals do not outlive transactions: outside one there is nothing to close.
                Some(Verdict::Answer(close_complete()))
            }
            b'P' => {
                let (name, _) = frontend::parse_name(body).ok()?;
                (!name.is_empty() && self.names.named.contains_key(name))
                    .then(|| self.answer_unit(tag, already_exists(name)))
            }
            b'Q' => {
                let name = sql::deallocate_name(frontend::query(body).ok()?)?;
                self.names.named.remove(&name)?;
                Some(Verdict::Answer(deallocated(TxStatus::Idle)))
            }
            _ => None,
        }
    }

    /// A whole client message for the linked server: queued as it is, rewritten, preceded by what the
    /// server lacks, or answered here in its turn.
    pub(crate) fn linked(&mut self, tag: u8, msg: Bytes, server: &mut ServerView<'_>, registry: &Registry) {
        match self.mode {
            Mode::DiscardToSync | Mode::SkipToSync if tag != b'S' => return,
            Mode::DiscardToSync | Mode::SkipToSync | Mode::LostTransaction => self.mode = Mode::Normal,
            Mode::Normal => {}
        }
        match tag {
            b'Q' => self.route_query(msg, server),
            b'D' => self.route_describe(msg, server, registry),
            b'P' if self.tracking => self.route_parse(msg, server, registry),
            b'B' if self.tracking => self.route_bind(msg, server, registry),
            b'C' if self.tracking => self.route_close(msg, server),
            _ => server.forward(tag, msg),
        }
    }

    /// Notes what a statement's text does to the session.
    fn note_sql(&mut self, sql: &str) {
        let facts = sql::scan(sql);
        if let Some(reason) = facts.pin {
            self.pin.get_or_insert(reason);
        }
        self.settings_dirty |= facts.set_config;
    }

    /// Notes a statement about to run: whether it may commit (see [`sql::may_commit`]).
    fn note_run(&mut self, sql: &str, server: &ServerView<'_>) {
        self.commit_in_flight |= sql::may_commit(sql, server.tracker.status() != TxStatus::Idle);
    }

    fn route_query(&mut self, msg: Bytes, server: &mut ServerView<'_>) {
        let Ok(sql) = frontend::query(&msg[5..]) else { return server.forward(b'Q', msg) };
        self.note_sql(sql);
        self.note_run(sql, server);
        if self.tracking
            && server.tracker.nothing_owed()
            && let Some(name) = sql::deallocate_name(sql)
            && self.names.named.remove(&name).is_some()
        {
            let status = server.tracker.status();
            return server.answer(Reply::Query, deallocated(status), None);
        }
        // A simple Query destroys the server's unnamed statement.
        server.statements.unnamed = None;
        server.forward(b'Q', msg);
    }

    fn route_parse(&mut self, msg: Bytes, server: &mut ServerView<'_>, registry: &Registry) {
        let Ok((name, key)) = frontend::parse_name(&msg[5..]) else {
            return server.answer(Reply::Parse, protocol_violation("Parse"), None);
        };
        if let Ok(sql) = frontend::parse_query(key) {
            self.note_sql(sql);
        }
        if name.is_empty() {
            self.names.unnamed_generation += 1;
            self.names.unnamed = Some(msg.clone());
            server.statements.unnamed = Some((self.client_id, self.names.unnamed_generation));
            return server.forward(b'P', msg);
        }
        if self.names.named.contains_key(name) {
            // PostgreSQL's own answer to a live name; the server skips nothing, so pgmux drops the rest of
            // the unit itself.
            server.answer(Reply::Parse, already_exists(name), None);
            self.mode = Mode::DiscardToSync;
            return;
        }
        let name = name.to_owned();
        let stmt = registry.intern(key);
        self.names.named.insert(name.clone(), Arc::clone(&stmt));
        if server.statements.has(stmt.id) {
            let note = Undo::Parse { client_name: name, on_server: None };
            return server.answer(Reply::Parse, parse_complete(), Some(note));
        }
        make_room_for(server, stmt.id);
        let note = Undo::Parse { client_name: name, on_server: Some(stmt.id) };
        server.send(stmt.parse.clone(), Reply::Parse, Fate::Forward, Some(note));
    }

    /// The statement a client name stands for, renewed if its plan went stale, and prepared on this server
    /// if it lacks it.
    fn prepared(
        &mut self,
        client_name: &str,
        server: &mut ServerView<'_>,
        registry: &Registry,
    ) -> Option<Arc<Statement>> {
        let mut stmt = Arc::clone(self.names.named.get(client_name)?);
        if stmt.is_invalid() {
            stmt = registry.renew(&stmt);
            self.names.named.insert(client_name.to_owned(), Arc::clone(&stmt));
        }
        if !server.statements.has(stmt.id) {
            make_room_for(server, stmt.id);
            server.send(stmt.parse.clone(), Reply::Parse, Fate::Swallow, Some(Undo::Injected(stmt.id)));
        }
        Some(stmt)
    }

    /// Replays the client's last `Parse('')` if the server's unnamed statement is not that one.
    fn ensure_unnamed(&mut self, server: &mut ServerView<'_>) {
        let owner = (self.client_id, self.names.unnamed_generation);
        let Some(parse) = self.names.unnamed.clone() else { return };
        if server.statements.unnamed != Some(owner) {
            server.statements.unnamed = Some(owner);
            server.send(parse, Reply::Parse, Fate::Swallow, None);
        }
    }

    fn route_bind(&mut self, msg: Bytes, server: &mut ServerView<'_>, registry: &Registry) {
        let Ok((_, name, range)) = frontend::bind_names(&msg[5..]) else { return server.forward(b'B', msg) };
        if name.is_empty() {
            self.ensure_unnamed(server);
            let unnamed = self.names.unnamed.clone();
            match unnamed.as_deref().and_then(|parse| frontend::parse_name(&parse[5..]).ok()) {
                Some((_, key)) => self.note_run(frontend::parse_query(key).unwrap_or_default(), server),
                // A statement pgmux never saw parsed: it may write.
                None => self.commit_in_flight |= server.tracker.status() == TxStatus::Idle,
            }
            return server.forward(b'B', msg);
        }
        let name = name.to_owned();
        // A name the client never parsed goes through as it is: the server says it does not exist.
        let Some(stmt) = self.prepared(&name, server, registry) else { return server.forward(b'B', msg) };
        self.note_run(stmt.query(), server);
        let mut bind = BytesMut::with_capacity(msg.len() + stmt.name.len());
        encode::bind_renamed(&mut bind, &msg[5..], range, &stmt.name);
        server.send(bind.freeze(), Reply::Bind, Fate::Forward, Some(Undo::Used(stmt)));
    }

    /// The first piece of a Bind too large to hold whole: `head` holds its header and at least its two
    /// names; the rest follows unread. Renamed like any Bind, with the length it declares adjusted.
    pub(crate) fn linked_bind_head(&mut self, head: Bytes, server: &mut ServerView<'_>, registry: &Registry) {
        match self.mode {
            Mode::Normal => {}
            // Dropped, and so is the rest (it streams only in Normal mode).
            Mode::DiscardToSync | Mode::SkipToSync | Mode::LostTransaction => return,
        }
        let declared = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        let Ok((_, name, range)) = frontend::bind_names(&head[5..]) else { return server.forward(b'B', head) };
        if !self.tracking || name.is_empty() {
            if self.tracking {
                self.ensure_unnamed(server);
            }
            self.commit_in_flight |= server.tracker.status() == TxStatus::Idle;
            return server.forward(b'B', head);
        }
        let name = name.to_owned();
        let Some(stmt) = self.prepared(&name, server, registry) else { return server.forward(b'B', head) };
        self.note_run(stmt.query(), server);
        let renamed_len = declared as usize - range.len() + stmt.name.len() + 1;
        let mut renamed = BytesMut::with_capacity(head.len() + stmt.name.len());
        renamed.extend_from_slice(b"B");
        renamed.extend_from_slice(&u32::try_from(renamed_len).unwrap_or(u32::MAX).to_be_bytes());
        renamed.extend_from_slice(&head[5..5 + range.start]);
        renamed.extend_from_slice(stmt.name.as_bytes());
        renamed.extend_from_slice(&[0]);
        renamed.extend_from_slice(&head[5 + range.end..]);
        server.send(renamed.freeze(), Reply::Bind, Fate::Forward, Some(Undo::Used(stmt)));
    }

    fn route_describe(&mut self, msg: Bytes, server: &mut ServerView<'_>, registry: &Registry) {
        let Ok((kind, name)) = frontend::describe_or_close(&msg[5..]) else {
            return server.forward_describe(false, msg);
        };
        let statement = kind == b'S';
        if self.tracking && statement {
            if name.is_empty() {
                self.ensure_unnamed(server);
            } else if let Some(stmt) = self.prepared(name, server, registry) {
                let mut describe = BytesMut::with_capacity(stmt.name.len() + 7);
                encode::describe_or_close(&mut describe, b'D', b'S', &stmt.name);
                return server.send(describe.freeze(), Reply::DescribeStatement, Fate::Forward, Some(Undo::Used(stmt)));
            }
        }
        server.forward_describe(statement, msg);
    }

    fn route_close(&mut self, msg: Bytes, server: &mut ServerView<'_>) {
        let Ok((kind, name)) = frontend::describe_or_close(&msg[5..]) else { return server.forward(b'C', msg) };
        if kind != b'S' {
            return server.forward(b'C', msg);
        }
        if name.is_empty() {
            self.names.unnamed = None;
            if server.statements.unnamed == Some((self.client_id, self.names.unnamed_generation)) {
                server.statements.unnamed = None;
            }
            return server.forward(b'C', msg);
        }
        // Statements are shared: a client's Close only drops its name; the server keeps the statement for
        // others until it is evicted.
        let note = self.names.named.remove(name).map(|stmt| Undo::ClientClose(name.to_owned(), stmt));
        server.answer(Reply::Close, close_complete(), note);
    }

    /// Routes one server message other than ParameterStatus (which the session reads itself): whether the
    /// client sees it, and what it changes. An error means the server connection is lost.
    #[inline]
    pub(crate) fn server_message(
        &mut self,
        tag: u8,
        body: &[u8],
        tracker: &mut TxTracker<Undo>,
        statements: &mut ServerStatements,
        registry: &Registry,
    ) -> Result<Route, ServerFailure> {
        let mut stale_plan = false;
        let route = match tag {
            b'Z' => {
                let status = backend::ready_for_query(body)?;
                let route = tracker
                    .server_ready(status, |note| self.undo(note, Some(&mut *statements), registry, &mut stale_plan))?;
                self.commit_in_flight &= tracker.pending() > 0;
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
            self.command_completed(command, statements);
        }
        Ok(route)
    }

    /// Learns from a CommandComplete tag what the statement did to the session.
    fn command_completed(&mut self, tag: &str, server: &mut ServerStatements) {
        if let Some(reason) = PinReason::from_tag(tag) {
            self.pin.get_or_insert(reason);
        }
        match tag {
            "SET" | "RESET" => self.settings_dirty = true,
            "DEALLOCATE ALL" => {
                self.names.named.clear();
                server.clear();
            }
            "DISCARD ALL" => {
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
            Undo::ClientClose(name, stmt) => {
                self.names.named.insert(name, stmt);
            }
            Undo::Used(stmt) => {
                if std::mem::take(stale_plan) {
                    tracing::info!(statement = stmt.query(), "plan went stale after DDL; re-preparing it");
                    registry.invalidate(&stmt);
                    if let Some(server) = server {
                        server.remove(stmt.id);
                    }
                }
            }
        }
    }

    /// The link is dropped to run the transaction again elsewhere (it never ran here): undoes what was asked
    /// of this server, as if the messages had not come yet.
    pub(crate) fn rewind(&mut self, mut tracker: TxTracker<Undo>, registry: &Registry) {
        for note in tracker.abandon() {
            self.undo(note, None, registry, &mut false);
        }
        self.mode = Mode::Normal;
        self.commit_in_flight = false;
    }

    /// The linked server is gone (`failure` says why): undoes what it was asked, forgets the session state it
    /// held, and returns what the client is told in place of the replies it was owed: one error per unit,
    /// 08007 if a commit was in flight (it may have happened), else 08006 (the transaction was rolled back).
    pub(crate) fn server_lost(&mut self, tracker: TxTracker<Undo>, failure: &str, registry: &Registry) -> Bytes {
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
        tracker: TxTracker<Undo>,
        after: std::time::Duration,
        registry: &Registry,
    ) -> Bytes {
        let detail = if self.commit_in_flight {
            "A commit was in flight: it may have happened before the cancel."
        } else {
            "The current transaction, if any, was rolled back."
        };
        let error = ErrorMessage::error(
            sqlstate::QUERY_CANCELED,
            format!("canceling statement due to query_timeout ({}s)", after.as_secs_f32()),
        )
        .with_detail(detail)
        .with_hint("The connection to pgmux is still usable.");
        self.unlink_with(tracker, &error.to_bytes(), registry)
    }

    /// The link is gone: undoes its bookkeeping and answers each unit it owed with `error`.
    fn unlink_with(&mut self, mut tracker: TxTracker<Undo>, error: &Bytes, registry: &Registry) -> Bytes {
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
        if tracker.unit_open() {
            reply.extend_from_slice(error);
            self.mode = Mode::SkipToSync;
        } else if pending == 0 && tracker.status() != TxStatus::Idle {
            self.mode = Mode::LostTransaction;
        }
        reply.freeze()
    }
}

/// Records `id` as prepared on the server, closing the least recently used statement if that makes too many
/// (the CloseComplete is swallowed).
fn make_room_for(server: &mut ServerView<'_>, id: u64) {
    if let Some(evicted) = server.statements.add(id) {
        let mut close = BytesMut::with_capacity(32);
        encode::describe_or_close(&mut close, b'C', b'S', &server_name(evicted));
        server.send(close.freeze(), Reply::Close, Fate::Swallow, Some(Undo::Evicted(evicted)));
    }
}

#[cfg(test)]
mod tests;
