//! Database nodes the pool has stopped trusting, by address. A node seen in the wrong role (a demoted writer,
//! a blue/green switch) is *stale*: nothing more is lent to it, its idle connections close at once and busy
//! ones as they come back. A node that stopped answering (a hung or black-holed server) is *dead*: its busy
//! connections are cut too. A new connection that finds the node in a role that fits clears the mark.
//! A dead node is dead in every pool (one verdict per server node, spread through `Globals`); a stale one
//! only in the pool that saw it, since a role wrong for one pool (a writer's) may be right for another.
//!
//! Every lend and every release asks whether its connection's node is still trusted, so the answer must be
//! cheap: an epoch that changes whenever a mark is added, compared with the epoch each connection was last
//! checked at, and the list (a handful of entries at most) read only when they differ.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, MutexGuard};
use pgmux_metrics::ServerCloseReason;

use crate::server::ServerConn;

/// Why a node is not trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Distrust {
    /// Wrong role: drain it.
    Stale,
    /// Not answering: cut it.
    Dead,
}

/// The marks, and an epoch bumped with each new one.
#[derive(Debug, Default)]
pub(crate) struct Nodes {
    marks: Mutex<Vec<(SocketAddr, Distrust)>>,
    epoch: AtomicU64,
}

impl Nodes {
    fn lock(&self) -> MutexGuard<'_, Vec<(SocketAddr, Distrust)>> {
        self.marks.lock()
    }

    /// Changes whenever a node is marked.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Marks `node`; true if that changed anything (a new mark, or stale turned dead).
    pub(crate) fn mark(&self, node: SocketAddr, why: Distrust) -> bool {
        let mut marks = self.lock();
        match marks.iter_mut().find(|(addr, _)| *addr == node) {
            Some((_, kind)) if *kind == why || *kind == Distrust::Dead => return false,
            Some((_, kind)) => *kind = why,
            None => marks.push((node, why)),
        }
        self.epoch.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// Trusts `node` again (a new connection found it fit); true if it was marked.
    pub(crate) fn clear(&self, node: SocketAddr) -> bool {
        let mut marks = self.lock();
        let before = marks.len();
        marks.retain(|(addr, _)| *addr != node);
        marks.len() != before
    }

    /// The mark on `node`, if any.
    pub(crate) fn verdict(&self, node: SocketAddr) -> Option<Distrust> {
        self.lock().iter().find(|(addr, _)| *addr == node).map(|(_, why)| *why)
    }
}

/// What a pool does with its verdicts.
impl super::ServerPool {
    /// Stops trusting a node: idle connections to it close at once; busy ones close when they come back
    /// (stale) or at once (dead: their sessions are woken to give them up).
    pub(crate) fn distrust(&self, node: std::net::SocketAddr, why: Distrust, reason: &str) {
        if self.mark(node, why, reason) && why == Distrust::Dead {
            self.globals.declared_dead(node);
        }
    }

    /// Another pool declared `node` dead: this one takes the same verdict (its reader instance leaves the
    /// rotation if it connects there, its connections to the node are cut).
    pub(crate) fn heard_dead(&self, node: std::net::SocketAddr) {
        self.mark(node, Distrust::Dead, "another pool's probe declared it dead");
    }

    /// [`distrust`](Self::distrust) in this pool alone; true if the mark is new.
    fn mark(&self, node: std::net::SocketAddr, why: Distrust, reason: &str) -> bool {
        if !self.nodes.mark(node, why) {
            return false;
        }
        tracing::warn!(%node, ?why, reason, database = %self.key.database, "no more server connections to this node");
        // A reader instance declared dead (a probe unanswered for server_probe_timeout) takes no new
        // transaction from now, not from its next topology poll; a good poll brings it back.
        if why == Distrust::Dead && self.is_reader_instance() && self.connects_to(node) {
            tracing::warn!(%node, database = %self.key.database, "reader taken out of the rotation: declared dead by a probe");
            self.set_unreachable(true);
        }
        for conn in self.pool.evict_idle(|conn, _| conn.addr == node) {
            conn.closing(if why == Distrust::Dead { ServerCloseReason::Broken } else { ServerCloseReason::ReadOnly });
            self.retire(conn);
        }
        if why == Distrust::Dead {
            self.globals.stop.poke();
        }
        true
    }

    /// Whether a connection of this pool is open to `node` (a probe may name another pool's node).
    fn connects_to(&self, node: std::net::SocketAddr) -> bool {
        let id = self.id.index();
        self.globals.observer.servers.all().iter().any(|entry| entry.pool == id && entry.addr == node)
    }

    /// Whether a connection's node is still trusted (a cheap check unless some node was marked since the
    /// connection was last checked), and its role still fits.
    pub(crate) fn keeps(&self, conn: &mut ServerConn) -> bool {
        let epoch = self.nodes.epoch();
        if conn.checked_epoch == epoch {
            return true;
        }
        if self.nodes.verdict(conn.addr).is_some() {
            return false;
        }
        conn.checked_epoch = epoch;
        true
    }

    /// Whether transactions on `node` were seen completing since `since`: a lent connection came back, and
    /// every pool connection is on that node (so the one that came back was). A node that completes
    /// transactions is not hung, whatever one connection's probe says; a machine short of CPU can hold a
    /// probe's answer past `server_probe_timeout` while the pool keeps serving. With connections on other
    /// nodes too (a failover under way) the pool cannot tell which node answered, and says no.
    pub(super) fn completing_on(&self, node: std::net::SocketAddr, since: tokio::time::Instant) -> bool {
        self.pool.last_returned().is_some_and(|at| at >= since)
            && self.globals.observer.servers.all().iter().all(|entry| entry.addr == node)
    }

    /// A probe of `node` sent at `asked` got no answer within `server_probe_timeout`: the node is declared
    /// dead, unless transactions on it completed meanwhile (see `completing_on`).
    pub(crate) fn silent(&self, node: std::net::SocketAddr, asked: tokio::time::Instant, reason: &str) {
        if self.completing_on(node, asked) {
            tracing::warn!(%node, reason,
                "a probe got no answer in time, but transactions on that node completed meanwhile: \
                 the node is not declared dead");
            return;
        }
        self.distrust(node, Distrust::Dead, reason);
    }

    /// Whether a connection's node was declared dead: its session gives it up at once.
    pub(crate) fn is_dead(&self, conn: &ServerConn) -> bool {
        conn.checked_epoch != self.nodes.epoch() && self.nodes.verdict(conn.addr) == Some(Distrust::Dead)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_move_the_epoch_and_a_fit_connection_clears_them() {
        let nodes = Nodes::default();
        let a: SocketAddr = "10.0.0.1:5432".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:5432".parse().unwrap();
        let e0 = nodes.epoch();
        assert!(nodes.mark(a, Distrust::Stale));
        assert!(!nodes.mark(a, Distrust::Stale), "marked once");
        assert!(nodes.mark(a, Distrust::Dead), "stale can turn dead");
        assert!(!nodes.mark(a, Distrust::Stale), "dead does not turn back to stale");
        assert_eq!((nodes.verdict(a), nodes.verdict(b)), (Some(Distrust::Dead), None));
        assert!(nodes.epoch() > e0);
        assert!(nodes.clear(a) && !nodes.clear(a));
        assert_eq!(nodes.verdict(a), None);
    }
}
