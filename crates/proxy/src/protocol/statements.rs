//! Prepared statements under transaction pooling.
//!
//! Drivers name their statements (`s0`, `S_1`, `__asyncpg_stmt_1__`, `stmtcache_<sha>`), the names collide
//! across clients and outlive transactions, and the next transaction may run on another server. So pgmux
//! keys a statement by what it is — query text and parameter types — and gives it a server-side name of its
//! own (`pgmux_<id>`) in the [`Registry`]. Each client keeps its names → statements ([`ClientStatements`]);
//! each server connection keeps which statements it has prepared, least recently used first out
//! ([`ServerStatements`]). Before a Bind or Describe on a server that lacks the statement, pgmux sends the
//! Parse itself and swallows its reply.
//!
//! The unnamed statement is tracked too: a client's last `Parse('')` is remembered, and replayed when its
//! `Bind('')` lands on a server whose unnamed statement is someone else's (or gone).
//!
//! DDL can change what a statement returns (`ALTER TABLE … ADD COLUMN` under `SELECT *`). PostgreSQL then
//! refuses the old prepared statement with `cached plan must not change result type` until the client
//! prepares it again, but a copy pgmux prepares afresh on another server would quietly return the new
//! columns. So each client name remembers the [`Shape`] its client saw, each server what its copies return,
//! each statement the first shape pgmux saw for it (for clients that saw none themselves), and the router
//! compares them before a client uses a copy.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use bytes::{BufMut, Bytes, BytesMut};
use parking_lot::Mutex;
use pgmux_proto::{ParseError, backend, encode};

/// What a statement returns, as PostgreSQL compares it before it runs a prepared statement again: each
/// column's name, type and type modifier, in order, or no rows at all (NoData). Where a value comes from
/// and the format it is sent in do not count, as they do not for PostgreSQL.
#[derive(Clone, Debug, Eq)]
pub(crate) struct Shape(Bytes);

impl PartialEq for Shape {
    /// Shapes are compared on every Bind of a statement whose shape is known; most share one buffer.
    fn eq(&self, other: &Shape) -> bool {
        (self.0.as_ptr() == other.0.as_ptr() && self.0.len() == other.0.len()) || self.0 == other.0
    }
}

impl Shape {
    /// A statement that returns no rows.
    pub(crate) fn no_data() -> Shape {
        Shape(Bytes::new())
    }

    /// The shape a RowDescription body describes.
    pub(crate) fn of_rows(body: &[u8]) -> Result<Shape, ParseError> {
        let columns = backend::row_description(body)?;
        // The column count first, so that no columns at all differs from NoData.
        let mut b = BytesMut::with_capacity(2 + columns.iter().map(|c| c.name.len() + 9).sum::<usize>());
        b.put_u16(columns.len() as u16);
        for c in &columns {
            b.put_slice(c.name.as_bytes());
            b.put_u8(0);
            b.put_i32(c.type_oid);
            b.put_i32(c.type_modifier);
        }
        Ok(Shape(b.freeze()))
    }
}

/// One statement as the servers know it.
#[derive(Debug)]
pub(crate) struct Statement {
    pub(crate) id: u64,
    /// The server-side name.
    pub(crate) name: String,
    /// A complete Parse message under the server-side name, ready to send.
    pub(crate) parse: Bytes,
    /// Query text and parameter types: what makes two statements the same.
    key: Bytes,
    /// A server said its plan no longer fits (`cached plan must not change result type`), or a copy of it
    /// returned something else than the first: the next use makes a fresh statement instead.
    invalid: AtomicBool,
    /// Whether running it may commit: outside a transaction block, inside one (see `sql::may_commit`),
    /// worked out once rather than at every Bind.
    may_commit: [bool; 2],
    /// The first shape pgmux saw it return, on any server.
    first_seen: OnceLock<Shape>,
}

impl Statement {
    /// The first shape pgmux saw it return, if it has seen one.
    pub(crate) fn shape(&self) -> Option<&Shape> {
        self.first_seen.get()
    }

    /// Notes what a server's copy of it returns. False if that is not what pgmux saw first: the tables
    /// under it changed between the two prepares.
    pub(crate) fn saw(&self, shape: &Shape) -> bool {
        self.first_seen.get_or_init(|| shape.clone()) == shape
    }

    pub(crate) fn is_invalid(&self) -> bool {
        self.invalid.load(Ordering::Relaxed)
    }

    /// Whether running it may make a durable change, given whether the session is in a transaction block.
    pub(crate) fn may_commit(&self, in_transaction: bool) -> bool {
        self.may_commit[usize::from(in_transaction)]
    }

    /// The query text, for logs and inspection.
    pub(crate) fn query(&self) -> &str {
        pgmux_proto::frontend::parse_query(&self.key).unwrap_or_default()
    }
}

/// The server-side name of statement `id`.
pub(crate) fn server_name(id: u64) -> String {
    format!("pgmux_{id}")
}

/// Every statement some client has a name for, by content.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    by_key: Mutex<HashMap<Bytes, Weak<Statement>>>,
    next_id: AtomicU64,
    /// `max_prepared_statements` now: how many statements each server connection keeps. Read when a
    /// statement is prepared on a server (not per transaction), so that `SET` and `RELOAD` apply to the
    /// connections already open, as PgBouncer's do.
    capacity: AtomicUsize,
}

impl Registry {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Registry { capacity: AtomicUsize::new(capacity), ..Registry::default() }
    }

    /// How many statements a server connection keeps now.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Puts a new `max_prepared_statements` in force, for open server connections too.
    pub(crate) fn set_capacity(&self, capacity: usize) {
        self.capacity.store(capacity, Ordering::Relaxed);
    }

    /// The statement for a Parse body's `key` (query and types), made if new.
    pub(crate) fn intern(&self, key: &[u8]) -> Arc<Statement> {
        let mut map = self.by_key.lock();
        if let Some(stmt) = map.get(key).and_then(Weak::upgrade) {
            return stmt;
        }
        // Statements no client names any more are dropped from the index now and then.
        if map.len() >= 1024 && map.len().is_power_of_two() {
            map.retain(|_, w| w.strong_count() > 0);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let name = server_name(id);
        let mut parse = BytesMut::with_capacity(key.len() + name.len() + 6);
        encode::parse_with_name(&mut parse, &name, key);
        let key = Bytes::copy_from_slice(key);
        let text = pgmux_proto::frontend::parse_query_bytes(&key).unwrap_or_default();
        let may_commit = [crate::protocol::sql::may_commit(text, false), crate::protocol::sql::may_commit(text, true)];
        let stmt = Arc::new(Statement {
            id,
            name,
            parse: parse.freeze(),
            key: key.clone(),
            invalid: AtomicBool::new(false),
            may_commit,
            first_seen: OnceLock::new(),
        });
        map.insert(key, Arc::downgrade(&stmt));
        stmt
    }

    /// Marks a statement's plan stale everywhere: its next use re-prepares it under a new name.
    pub(crate) fn invalidate(&self, stmt: &Statement) {
        stmt.invalid.store(true, Ordering::Relaxed);
        let mut map = self.by_key.lock();
        if map.get(&stmt.key).is_some_and(|w| std::ptr::eq(w.as_ptr(), stmt)) {
            map.remove(&stmt.key);
        }
    }

    /// The replacement of an invalidated statement.
    pub(crate) fn renew(&self, stmt: &Statement) -> Arc<Statement> {
        self.intern(&stmt.key)
    }
}

/// One client's statement names.
#[derive(Debug, Default)]
pub(crate) struct ClientStatements {
    pub(crate) named: Names,
    /// Boxed on its first `Parse('')` and kept: as with `named`, an idle client pays for every byte here.
    unnamed: Option<Box<Unnamed>>,
}

#[derive(Debug, Default)]
struct Unnamed {
    /// The client's last `Parse('')`, to replay where its `Bind('')` lands.
    parse: Option<Bytes>,
    /// Bumped on every `Parse('')`.
    generation: u64,
}

impl ClientStatements {
    /// The client's last `Parse('')`, unless it closed it since.
    pub(crate) fn unnamed(&self) -> Option<&Bytes> {
        self.unnamed.as_ref()?.parse.as_ref()
    }

    /// Which of the client's `Parse('')` messages the last one was (0: none yet).
    pub(crate) fn unnamed_generation(&self) -> u64 {
        self.unnamed.as_ref().map_or(0, |u| u.generation)
    }

    /// A new `Parse('')`; returns its generation.
    pub(crate) fn parse_unnamed(&mut self, parse: Bytes) -> u64 {
        let unnamed = self.unnamed.get_or_insert_with(Box::default);
        unnamed.generation += 1;
        unnamed.parse = Some(parse);
        unnamed.generation
    }

    /// `Close('')`, or the server lost it.
    pub(crate) fn close_unnamed(&mut self) {
        if let Some(unnamed) = &mut self.unnamed {
            unnamed.parse = None;
        }
    }
}

/// What a client's statement name stands for.
#[derive(Clone, Debug)]
pub(crate) struct Named {
    pub(crate) stmt: Arc<Statement>,
    /// What the client saw it return: its own Describe, pgmux's right after the client's Parse, or what the
    /// copy its Parse found on the server returns.
    pub(crate) shape: Option<Shape>,
    /// The client's Parse went to the server and pgmux described the copy it made: until that answer, the
    /// client expects whatever that copy returns, as it would from its own Parse.
    pub(crate) describing: bool,
}

impl Named {
    pub(crate) fn new(stmt: Arc<Statement>) -> Self {
        Named { stmt, shape: None, describing: false }
    }

    /// What the client expects the statement to return: what it saw, else the first shape pgmux saw for the
    /// statement. `None` if nobody has seen it yet, or while the copy its own Parse made is being described.
    pub(crate) fn expected(&self) -> Option<&Shape> {
        if self.describing {
            return self.shape.as_ref();
        }
        self.shape.as_ref().or_else(|| self.stmt.shape())
    }

    /// Notes what the client saw the statement return, the first time (sharing the statement's buffer when
    /// it is the same).
    pub(crate) fn saw(&mut self, shape: Shape) {
        self.describing = false;
        if self.shape.is_none() {
            self.shape = Some(self.stmt.shape().filter(|first| **first == shape).cloned().unwrap_or(shape));
        }
    }
}

/// A client's statement names. Empty until its first named Parse, and then boxed: most clients never name
/// a statement, and every byte here is paid by each idle client.
#[derive(Debug, Default)]
#[allow(clippy::box_collection, reason = "the box is what keeps an unused map to one pointer")]
pub(crate) struct Names(Option<Box<HashMap<String, Named>>>);

impl Names {
    pub(crate) fn get(&self, name: &str) -> Option<&Named> {
        self.0.as_ref()?.get(name)
    }

    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut Named> {
        self.0.as_mut()?.get_mut(name)
    }

    pub(crate) fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub(crate) fn insert(&mut self, name: String, named: Named) -> Option<Named> {
        self.0.get_or_insert_default().insert(name, named)
    }

    pub(crate) fn remove(&mut self, name: &str) -> Option<Named> {
        self.0.as_mut()?.remove(name)
    }

    /// Forgets every name and gives the map's memory back.
    pub(crate) fn clear(&mut self) {
        self.0 = None;
    }
}

/// One statement as one server connection has it.
#[derive(Debug)]
struct Copy {
    /// When it was last used (a tick of `clock`).
    used: u64,
    /// What it returns, once a Describe of it said. A copy is planned when it is prepared, so this holds
    /// until the server refuses it (`cached plan must not change result type`).
    shape: Option<Shape>,
}

/// What one server connection has prepared.
#[derive(Debug)]
pub(crate) struct ServerStatements {
    /// Statement id → its copy on this server.
    prepared: HashMap<u64, Copy>,
    clock: u64,
    /// Whose unnamed statement the server holds: (client session id, that client's generation).
    pub(crate) unnamed: Option<(u64, u64)>,
    /// Counts for `SHOW PREPARED` and the statement metrics, readable while the connection is lent.
    stats: Arc<StatementStats>,
}

/// What happened to one server connection's statements, in relaxed atomics: the session that holds the
/// connection writes them, the admin console and `/metrics` read them.
#[derive(Debug, Default)]
pub(crate) struct StatementStats {
    /// Statements prepared on it now.
    pub(crate) prepared: AtomicU64,
    /// Binds, Describes and client Parses that found their statement already prepared.
    pub(crate) hits: AtomicU64,
    /// Parses pgmux sent (first use on this server, or after an eviction).
    pub(crate) parses: AtomicU64,
    /// Statements closed to stay within max_prepared_statements.
    pub(crate) evictions: AtomicU64,
    /// Named and unnamed Parse messages from clients routed to it.
    pub(crate) client_parses: AtomicU64,
    /// Of those, named ones that needed no Parse on the server.
    pub(crate) cache_hits: AtomicU64,
}

impl ServerStatements {
    pub(crate) fn new() -> Self {
        ServerStatements { prepared: HashMap::new(), clock: 0, unnamed: None, stats: Arc::default() }
    }

    /// The counts of this connection's statements.
    pub(crate) fn stats(&self) -> &Arc<StatementStats> {
        &self.stats
    }

    /// Notes a client Parse routed here.
    pub(crate) fn client_parse(&self) {
        self.stats.client_parses.fetch_add(1, Ordering::Relaxed);
    }

    /// Notes a client Parse that needed no Parse on the server.
    pub(crate) fn cache_hit(&self) {
        self.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
    }

    fn publish_len(&self) {
        self.stats.prepared.store(self.prepared.len() as u64, Ordering::Relaxed);
    }

    /// Whether the server has statement `id`; marks it used.
    pub(crate) fn has(&mut self, id: u64) -> bool {
        self.clock += 1;
        match self.prepared.get_mut(&id) {
            Some(copy) => {
                copy.used = self.clock;
                self.stats.hits.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// What the server's copy of statement `id` returns, if it has one and a Describe said.
    pub(crate) fn shape(&self, id: u64) -> Option<&Shape> {
        self.prepared.get(&id)?.shape.as_ref()
    }

    /// Whether the server has statement `id` (without marking it used), and what its copy returns if
    /// anyone described it.
    pub(crate) fn copy_shape(&self, id: u64) -> Option<Option<&Shape>> {
        self.prepared.get(&id).map(|copy| copy.shape.as_ref())
    }

    /// Notes what the server's copy of statement `id` returns.
    pub(crate) fn set_shape(&mut self, id: u64, shape: Shape) {
        if let Some(copy) = self.prepared.get_mut(&id) {
            copy.shape = Some(shape);
        }
    }

    /// Records statement `id` as prepared (then [`evict_over`](Self::evict_over) keeps the count in bounds).
    pub(crate) fn add(&mut self, id: u64) {
        self.clock += 1;
        self.prepared.insert(id, Copy { used: self.clock, shape: None });
        self.stats.parses.fetch_add(1, Ordering::Relaxed);
        self.publish_len();
    }

    /// While more than `capacity` are prepared (`max_prepared_statements` now, which may have been lowered
    /// since), the least recently used one other than `keep`, forgotten here: the caller closes it.
    pub(crate) fn evict_over(&mut self, capacity: usize, keep: u64) -> Option<u64> {
        if self.prepared.len() <= capacity {
            return None;
        }
        let (&oldest, _) = self.prepared.iter().filter(|(k, _)| **k != keep).min_by_key(|(_, copy)| copy.used)?;
        self.prepared.remove(&oldest);
        self.stats.evictions.fetch_add(1, Ordering::Relaxed);
        self.publish_len();
        Some(oldest)
    }

    /// Puts back a statement whose eviction Close did not run.
    pub(crate) fn restore(&mut self, id: u64) {
        self.clock += 1;
        self.prepared.insert(id, Copy { used: self.clock, shape: None });
        self.publish_len();
    }

    pub(crate) fn remove(&mut self, id: u64) {
        self.prepared.remove(&id);
        self.publish_len();
    }

    /// The server lost every prepared statement (`DEALLOCATE ALL`, `DISCARD ALL`).
    pub(crate) fn clear(&mut self) {
        self.prepared.clear();
        self.unnamed = None;
        self.publish_len();
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.prepared.len()
    }
}

/// What to undo when a message fails or the server skips it (the tracker hands these back).
#[derive(Debug)]
pub(crate) enum Undo {
    /// A Parse registered this client name (and, if forwarded, put the statement on the server).
    Parse { client_name: String, on_server: Option<u64> },
    /// pgmux's own Parse put the statement on the server.
    Injected(u64),
    /// pgmux's own Close of an evicted statement: if it did not run, the statement is still there.
    Evicted(u64),
    /// A client Close pgmux answered: the name comes back.
    ClientClose(String, Named),
    /// A Bind used this statement (kept to invalidate it on `cached plan must not change result type`).
    Used(Arc<Statement>),
    /// A Describe of the statement a client name stands for: the client's own, or pgmux's after the
    /// client's Parse. Its reply is what the client saw; if it fails, it is undone as [`Undo::Used`].
    Described { client_name: String, stmt: Arc<Statement> },
    /// The Describe the router waits on before it lets a client use a statement prepared anew (see
    /// `router::Mode::Checking`); if it fails, the check is over, and it is undone as [`Undo::Used`].
    Check(Arc<Statement>),
}

#[cfg(test)]
mod tests;
