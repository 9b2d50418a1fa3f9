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
//! server that needs it, and a client's Close or `DEALLOCATE` only drops the client's name. A statement
//! prepared anew for a client that knows what it returns is checked first ([`Mode::Checking`], `check`).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use pgmux_proto::encode::{self, ErrorMessage};
use pgmux_proto::frame::SMALL_MESSAGE_LIMIT;
use pgmux_proto::{TxStatus, frontend, sqlstate};

use crate::protocol::sql::{self, PinReason, SqlFacts};
use crate::protocol::statements::{ClientStatements, Named, Registry, Statement, Undo, server_name};
use crate::protocol::tracker::{Fate, Reply, TxTracker};

mod check;
mod mode;
mod replies;
mod unlinked;
mod view;

use check::{Check, Use};
pub(crate) use mode::{Loss, Mode, Verdict};
pub(crate) use view::ServerView;

/// The largest simple Query whose text is kept to be read only if its server is lost (see
/// `Router::note_run`); larger ones are read when sent.
const KEEP_UNREAD_MAX: usize = 16 * 1024;

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
    /// Whether the client's unnamed statement may commit, outside and inside a transaction block (worked
    /// out at its Parse, not at each Bind).
    unnamed_may_commit: [bool; 2],
    /// What the unnamed statement's text says (pins, `set_config`), kept with it.
    unnamed_facts: SqlFacts,
    /// Binds of the client's named statements not yet added to the pooler's count (SHOW STATS'
    /// bind_count): a plain count here, added once per transaction ([`take_binds`](Self::take_binds)).
    binds: u32,
    /// What [`Mode::Checking`] waits for. Boxed: every byte here is paid by each idle client.
    check: Option<Box<Check>>,
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
            unnamed_may_commit: [true; 2],
            unnamed_facts: SqlFacts::default(),
            binds: 0,
            check: None,
        }
    }

    /// The Binds of named statements counted since the last call, and a fresh count.
    #[inline]
    pub(crate) fn take_binds(&mut self) -> u32 {
        std::mem::take(&mut self.binds)
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

    /// The settings taken by [`take_settings_dirty`](Self::take_settings_dirty) could not be read back yet:
    /// they are asked for again at the next release.
    pub(crate) fn settings_unread(&mut self) {
        self.settings_dirty = true;
    }

    /// The server was lost before the settings the client changed could be read back: its next unit is told.
    pub(crate) fn settings_lost(&mut self) {
        self.mode = Mode::LostSettings;
    }

    /// Whether the router waits for the linked server before it can take the client's next message: the
    /// session hands it none (and reads nothing more from the client) until this is false again.
    pub(crate) fn holding(&self) -> bool {
        self.mode == Mode::Checking
    }

    /// Whether a client message can go to the linked server untouched, without the router: the fast path.
    #[inline]
    pub(crate) fn passes(&self, tag: u8) -> bool {
        self.mode == Mode::Normal && !self.inspects(tag)
    }

    /// Messages the router looks inside (statement names, SQL) rather than passing on unread.
    fn inspects(&self, tag: u8) -> bool {
        match tag {
            // A Close is looked at without tracking too, for its length (see `refuse_long`).
            b'Q' | b'D' | b'C' | b'X' => true,
            b'P' | b'B' => self.tracking,
            _ => false,
        }
    }

    /// A whole client message for the linked server: queued as it is, rewritten, preceded by what the
    /// server lacks, or answered here in its turn.
    pub(crate) fn linked(&mut self, tag: u8, msg: Bytes, server: &mut ServerView<'_>, registry: &Registry) {
        debug_assert_ne!(self.mode, Mode::Checking, "the session hands the router nothing while it holds");
        match self.mode {
            Mode::DiscardToSync | Mode::SkipToSync if tag != b'S' => return,
            Mode::DiscardToSync | Mode::SkipToSync | Mode::LostTransaction | Mode::LostSettings => {
                self.mode = Mode::Normal
            }
            Mode::Normal | Mode::Checking => {}
        }
        match tag {
            b'Q' => self.route_query(msg, server),
            b'D' => self.route_describe(msg, server, registry),
            b'P' if self.tracking => self.route_parse(msg, server, registry),
            b'B' if self.tracking => self.route_bind(msg, server, registry),
            b'C' => self.route_close(msg, server),
            _ => server.forward(tag, msg),
        }
    }

    /// Notes what a statement's text does to the session.
    fn note_sql(&mut self, sql: &[u8]) {
        self.note_facts(sql::scan(sql));
    }

    fn note_facts(&mut self, facts: SqlFacts) {
        if let Some(reason) = facts.pin {
            self.pin.get_or_insert(reason);
        }
        self.settings_dirty |= facts.set_config;
    }

    /// Notes a simple Query about to run. Whether it may commit (see [`sql::may_commit`]) matters only if
    /// the server is lost before it is answered, so its text is kept with the server's tracker and read
    /// then ([`settle_commit`](Self::settle_commit)), or dropped unread once everything sent is answered.
    /// One is kept at a time: the one before it, if still there, is read now.
    /// A large text is read at once: kept, it would hold its memory until the answer rather than until it is
    /// written.
    fn note_run(&mut self, msg: &Bytes, server: &mut ServerView<'_>) {
        let in_transaction = server.tracker.status() != TxStatus::Idle;
        if msg.len() > KEEP_UNREAD_MAX {
            return self.note_may_commit((msg.clone(), in_transaction));
        }
        if let Some(earlier) = server.tracker.keep_unread_query(msg.clone(), in_transaction) {
            self.note_may_commit(earlier);
        }
    }

    fn note_may_commit(&mut self, (msg, in_transaction): (Bytes, bool)) {
        // A Query whose text cannot be read counts as one that may commit, as text `may_commit` cannot follow.
        self.commit_in_flight |= frontend::query(&msg[5..]).map_or(true, |sql| sql::may_commit(sql, in_transaction));
    }

    /// Reads the kept Query's text, if any, into `commit_in_flight`: the server is lost or given up.
    pub(crate) fn settle_commit(&mut self, tracker: &mut TxTracker<Undo>) {
        if let Some(kept) = tracker.take_unread_query() {
            self.note_may_commit(kept);
        }
    }

    fn route_query(&mut self, msg: Bytes, server: &mut ServerView<'_>) {
        let Ok(sql) = frontend::query(&msg[5..]) else { return server.forward(b'Q', msg) };
        self.note_sql(sql);
        self.note_run(&msg, server);
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
        server.statements.client_parse();
        if name.is_empty() {
            // Drivers send the same unnamed Parse transaction after transaction: its text is read once.
            if self.names.unnamed() != Some(&msg) {
                let text = frontend::parse_query_bytes(key).unwrap_or_default();
                self.unnamed_facts = sql::scan(text);
                self.unnamed_may_commit = [sql::may_commit(text, false), sql::may_commit(text, true)];
            }
            self.note_facts(self.unnamed_facts);
            let generation = self.names.parse_unnamed(msg.clone());
            server.statements.unnamed = Some((self.client_id, generation));
            return server.forward(b'P', msg);
        }
        if let Ok(sql) = frontend::parse_query_bytes(key) {
            self.note_sql(sql);
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
        self.names.named.insert(name.clone(), Named::new(Arc::clone(&stmt)));
        if server.statements.has(stmt.id) {
            server.statements.cache_hit();
            // What the copy returns is what the client would see.
            if let (Some(named), Some(shape)) = (self.names.named.get_mut(&name), server.statements.shape(stmt.id)) {
                named.shape = Some(shape.clone());
            }
            let note = Undo::Parse { client_name: name, on_server: None };
            return server.answer(Reply::Parse, parse_complete(), Some(note));
        }
        make_room_for(server, stmt.id, registry.capacity());
        let note = Undo::Parse { client_name: name.clone(), on_server: Some(stmt.id) };
        server.send(stmt.parse.clone(), Reply::Parse, Fate::Forward, Some(note));
        if stmt.shape().is_some() {
            // What this new copy returns is what the client saw, and tells whether the tables changed since
            // pgmux first saw the statement. No waiting: the client's own Parse decides what it gets.
            if let Some(named) = self.names.named.get_mut(&name) {
                named.describing = true;
            }
            let describe = describe_statement(&stmt.name);
            server.send(
                describe,
                Reply::DescribeStatement,
                Fate::Swallow,
                Some(Undo::Described { client_name: name, stmt }),
            );
        }
    }

    /// Prepares `stmt` on the server if it lacks it (the client does not see the ParseComplete).
    fn prepare_on(server: &mut ServerView<'_>, stmt: &Statement, registry: &Registry) {
        if !server.statements.has(stmt.id) {
            make_room_for(server, stmt.id, registry.capacity());
            server.send(stmt.parse.clone(), Reply::Parse, Fate::Swallow, Some(Undo::Injected(stmt.id)));
        }
    }

    /// Replays the client's last `Parse('')` if the server's unnamed statement is not that one.
    fn ensure_unnamed(&mut self, server: &mut ServerView<'_>) {
        let owner = (self.client_id, self.names.unnamed_generation());
        let Some(parse) = self.names.unnamed().cloned() else { return };
        if server.statements.unnamed != Some(owner) {
            server.statements.unnamed = Some(owner);
            server.send(parse, Reply::Parse, Fate::Swallow, None);
        }
    }

    fn route_bind(&mut self, msg: Bytes, server: &mut ServerView<'_>, registry: &Registry) {
        let Ok((_, name, range)) = frontend::bind_names(&msg[5..]) else { return server.forward(b'B', msg) };
        if name.is_empty() {
            self.ensure_unnamed(server);
            let in_transaction = server.tracker.status() != TxStatus::Idle;
            self.commit_in_flight |= self.unnamed_may_commit[usize::from(in_transaction)];
            return server.forward(b'B', msg);
        }
        let name = name.to_owned();
        // A name the client never parsed goes through as it is: the server says it does not exist.
        let Some(found) = self.statement_for_use(&name, server, registry) else { return server.forward(b'B', msg) };
        self.binds = self.binds.wrapping_add(1);
        match found {
            Use::Stale(stmt, _) if server.tracker.status() != TxStatus::Failed => {
                self.refuse_stale(&stmt, Reply::Bind, server);
            }
            // In a failed transaction PostgreSQL refuses the Bind for that (25P02) before it looks at the
            // plan: the server says so.
            Use::Ready(stmt) | Use::Stale(stmt, _) => {
                Self::prepare_on(server, &stmt, registry);
                self.commit_in_flight |= stmt.may_commit(server.tracker.status() != TxStatus::Idle);
                let mut bind = BytesMut::with_capacity(msg.len() + stmt.name.len());
                encode::bind_renamed(&mut bind, &msg[5..], range, &stmt.name);
                server.send(bind.freeze(), Reply::Bind, Fate::Forward, Some(Undo::Used(stmt)));
            }
            Use::Check(stmt, expected) => {
                Self::prepare_on(server, &stmt, registry);
                self.start_check(Some(msg), &stmt, expected, server);
            }
        }
    }

    /// The first piece of a Bind too large to hold whole: `head` holds its header and at least its two
    /// names; the rest follows unread. Renamed like any Bind, with the length it declares adjusted.
    pub(crate) fn linked_bind_head(&mut self, head: Bytes, server: &mut ServerView<'_>, registry: &Registry) {
        debug_assert_ne!(self.mode, Mode::Checking, "the session hands the router nothing while it holds");
        match self.mode {
            Mode::Normal | Mode::Checking => {}
            // Dropped, and so is the rest (it streams only in Normal mode).
            Mode::DiscardToSync | Mode::SkipToSync | Mode::LostTransaction | Mode::LostSettings => return,
        }
        let declared = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        let Ok((_, name, range)) = frontend::bind_names(&head[5..]) else { return server.forward(b'B', head) };
        if !self.tracking || name.is_empty() {
            if self.tracking {
                self.ensure_unnamed(server);
            }
            let in_transaction = server.tracker.status() != TxStatus::Idle;
            self.commit_in_flight |= !self.tracking && !in_transaction
                || self.tracking && self.unnamed_may_commit[usize::from(in_transaction)];
            return server.forward(b'B', head);
        }
        let name = name.to_owned();
        let Some(found) = self.statement_for_use(&name, server, registry) else { return server.forward(b'B', head) };
        self.binds = self.binds.wrapping_add(1);
        let stmt = match found {
            Use::Stale(stmt, _) if server.tracker.status() != TxStatus::Failed => {
                // The rest is dropped with the unit (it streams only in Normal mode).
                return self.refuse_stale(&stmt, Reply::Bind, server);
            }
            // A Bind too large to hold cannot wait for a check: it goes on, and the server judges it by
            // the copy pgmux prepares (docs/architecture.md, step 5).
            Use::Ready(stmt) | Use::Stale(stmt, _) | Use::Check(stmt, _) => stmt,
        };
        Self::prepare_on(server, &stmt, registry);
        self.commit_in_flight |= stmt.may_commit(server.tracker.status() != TxStatus::Idle);
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
            return server.forward_describe(b'P', msg);
        };
        let statement = kind == b'S';
        if self.tracking && statement {
            if name.is_empty() {
                self.ensure_unnamed(server);
            } else if let Some(found) = self.statement_for_use(name, server, registry) {
                return match found {
                    Use::Ready(stmt) => {
                        Self::prepare_on(server, &stmt, registry);
                        let note = Undo::Described { client_name: name.to_owned(), stmt: Arc::clone(&stmt) };
                        server.send(
                            describe_statement(&stmt.name),
                            Reply::DescribeStatement,
                            Fate::Forward,
                            Some(note),
                        );
                    }
                    // The client's own Describe asks the question, and its reply (or PostgreSQL's error) is
                    // the answer.
                    Use::Check(stmt, expected) | Use::Stale(stmt, expected) => {
                        Self::prepare_on(server, &stmt, registry);
                        self.start_check(None, &stmt, expected, server);
                    }
                };
            }
        }
        if self.refuse_long(&msg, if statement { Reply::DescribeStatement } else { Reply::DescribePortal }, server) {
            return;
        }
        server.forward_describe(kind, msg);
    }

    fn route_close(&mut self, msg: Bytes, server: &mut ServerView<'_>) {
        let parsed = frontend::describe_or_close(&msg[5..]).ok().filter(|_| self.tracking);
        let Some((b'S', name)) = parsed else {
            if !self.refuse_long(&msg, Reply::Close, server) {
                server.forward(b'C', msg);
            }
            return;
        };
        if name.is_empty() {
            let generation = self.names.unnamed_generation();
            self.names.close_unnamed();
            if server.statements.unnamed == Some((self.client_id, generation)) {
                server.statements.unnamed = None;
            }
            return server.forward(b'C', msg);
        }
        // Statements are shared: a client's Close only drops its name; the server keeps the statement for
        // others until it is evicted.
        let note = self.names.named.remove(name).map(|named| Undo::ClientClose(name.to_owned(), named));
        server.answer(Reply::Close, close_complete(), note);
    }
}

impl Router {
    /// Refuses a Describe or Close that would go to the server as it is while over PostgreSQL's limit for
    /// it: the framer takes them at the client's limit because a statement's long name is replaced by
    /// pgmux's own, but a portal's name (or a statement's, with tracking off) is not, and PostgreSQL would end
    /// the server connection over it. The client gets an error in the message's turn and the rest of its
    /// unit is skipped, as for any failed message.
    fn refuse_long(&mut self, msg: &Bytes, reply: Reply, server: &mut ServerView<'_>) -> bool {
        let len = msg.len() - 1;
        if len <= SMALL_MESSAGE_LIMIT {
            return false;
        }
        let what = if msg[0] == b'D' { "Describe" } else { "Close" };
        let error = ErrorMessage::error(
            sqlstate::PROGRAM_LIMIT_EXCEEDED,
            format!(
                "{what} message of {len} bytes is over PostgreSQL's limit of {SMALL_MESSAGE_LIMIT} for it, and \
                 pgmux would pass its name to the server unchanged"
            ),
        )
        .with_hint("use a shorter portal or statement name");
        server.answer(reply, error.to_bytes(), None);
        server.fail();
        self.mode = Mode::DiscardToSync;
        true
    }
}

fn describe_statement(name: &str) -> Bytes {
    let mut describe = BytesMut::with_capacity(name.len() + 7);
    encode::describe_or_close(&mut describe, b'D', b'S', name);
    describe.freeze()
}

/// Records `id` as prepared on the server, closing the least recently used statements while there are more
/// than `capacity` (their CloseCompletes are swallowed).
fn make_room_for(server: &mut ServerView<'_>, id: u64, capacity: usize) {
    server.statements.add(id);
    while let Some(evicted) = server.statements.evict_over(capacity, id) {
        let mut close = BytesMut::with_capacity(32);
        encode::describe_or_close(&mut close, b'C', b'S', &server_name(evicted));
        server.send(close.freeze(), Reply::Close, Fate::Swallow, Some(Undo::Evicted(evicted)));
    }
}

#[cfg(test)]
mod tests;
