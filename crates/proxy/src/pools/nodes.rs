//! Database nodes the pool has stopped trusting, by address. A node seen in the wrong role (a demoted writer,
//! a blue/green switch) is *stale*: nothing more is lent to it, its idle connections close at once and busy
//! ones as they come back. A node that stopped answering (a hung or black-holed server) is *dead*: its busy
//! connections are cut too. A new connection that finds the node in a role that fits clears the mark.
//!
//! Every lend and every release asks whether its connection's node is still trusted, so the answer must be
//! cheap: an epoch that changes whenever a mark is added, compared with the epoch each connection was last
//! checked at, and the list (a handful of entries at most) read only when they differ.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, MutexGuard};

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
