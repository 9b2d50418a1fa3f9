//! The RAII handles a caller holds: a [`Lease`] on a connection and a [`Slot`] to open one. Both give their
//! place back on drop, so no path (an error, a timeout, a cancelled future) can leak pool capacity.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use tokio::time::Instant;

use crate::Inner;
use crate::active::ActivePermit;

/// Facts about a pooled connection that eviction policies look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// When the connection was put into the pool.
    pub created: Instant,
    /// When it was last returned (equal to `created` before its first use).
    pub idle_since: Instant,
    /// How many times it has been lent.
    pub lends: u64,
}

/// What [`Pool::acquire`](crate::Pool::acquire) hands out.
#[derive(Debug)]
pub enum Grant<C> {
    /// An idle connection, ready (as far as the pool knows) to use.
    Idle(Lease<C>),
    /// The right to open a new connection.
    Open(Slot<C>),
}

/// A connection on loan. Dropping it returns the connection to the pool.
#[derive(Debug)]
pub struct Lease<C> {
    conn: Option<(C, Meta)>,
    pool: Arc<Inner<C>>,
    /// Its place under an [`ActiveCap`](crate::ActiveCap), if it is under one: dropped after the connection
    /// went back, so that the caller it goes to finds the connection idle.
    permit: Option<ActivePermit>,
}

impl<C> Lease<C> {
    pub(crate) fn new(pool: &Arc<Inner<C>>, conn: C, mut meta: Meta) -> Self {
        meta.lends += 1;
        Lease { conn: Some((conn, meta)), pool: Arc::clone(pool), permit: None }
    }

    /// The connection's pool facts.
    pub fn meta(&self) -> &Meta {
        match &self.conn {
            Some((_, meta)) => meta,
            None => unreachable!("a lease holds its connection until it is consumed"),
        }
    }

    /// Puts the lease under an [`ActiveCap`](crate::ActiveCap): `permit` is given back when the connection
    /// is.
    #[inline]
    pub fn hold(&mut self, permit: Option<ActivePermit>) {
        if permit.is_some() {
            self.permit = permit;
        }
    }

    /// Whether the lease counts under an [`ActiveCap`](crate::ActiveCap).
    pub fn holds_permit(&self) -> bool {
        self.permit.is_some()
    }

    /// Takes the connection out of the pool for good (it is broken, or being closed). Its place is freed.
    pub fn discard(mut self) -> C {
        let (conn, _) = self.take();
        self.pool.forget();
        conn
    }

    /// Returns the connection, idle since `at`: a clock reading the caller already had (its last use),
    /// where dropping the lease reads the clock.
    pub fn give_back_at(mut self, at: Instant) {
        let (conn, mut meta) = self.take();
        meta.idle_since = at;
        self.pool.release(conn, meta);
    }

    pub(crate) fn into_parts(mut self) -> (C, Meta) {
        // Undo the count made by `new`, since this lease was never handed out.
        let (conn, mut meta) = self.take();
        meta.lends -= 1;
        (conn, meta)
    }

    fn take(&mut self) -> (C, Meta) {
        match self.conn.take() {
            Some(pair) => pair,
            None => unreachable!("a lease is consumed once"),
        }
    }
}

impl<C> Deref for Lease<C> {
    type Target = C;
    fn deref(&self) -> &C {
        match &self.conn {
            Some((conn, _)) => conn,
            None => unreachable!("a lease holds its connection until it is consumed"),
        }
    }
}

impl<C> DerefMut for Lease<C> {
    fn deref_mut(&mut self) -> &mut C {
        match &mut self.conn {
            Some((conn, _)) => conn,
            None => unreachable!("a lease holds its connection until it is consumed"),
        }
    }
}

impl<C> Drop for Lease<C> {
    fn drop(&mut self) {
        if let Some((conn, mut meta)) = self.conn.take() {
            meta.idle_since = Instant::now();
            self.pool.release(conn, meta);
        }
    }
}

/// The right to open one connection. Fill it with the opened connection, or drop it to give the place back.
#[derive(Debug)]
pub struct Slot<C> {
    pool: Option<Arc<Inner<C>>>,
}

impl<C> Slot<C> {
    pub(crate) fn new(pool: &Arc<Inner<C>>) -> Self {
        Slot { pool: Some(Arc::clone(pool)) }
    }

    /// Puts the newly opened connection under a lease.
    pub fn fill(mut self, conn: C) -> Lease<C> {
        let pool = match self.pool.take() {
            Some(pool) => pool,
            None => unreachable!("a slot is filled once"),
        };
        pool.opened();
        let now = Instant::now();
        Lease::new(&pool, conn, Meta { created: now, idle_since: now, lends: 0 })
    }
}

impl<C> Drop for Slot<C> {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.forget_slot();
        }
    }
}
