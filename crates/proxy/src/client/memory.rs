//! The memory pgmux lends clients for messages it must hold whole while they arrive (a Query, a Parse, a
//! FunctionCall larger than the usual read buffer). One such message may be up to `max_client_message`; a
//! few thousand clients each sending one slowly would otherwise be that many times as much. Past the usual
//! buffer, every byte a client's read buffer holds is counted against `max_client_buffers`, shared by all
//! clients: a client whose message does not fit is told (53200) and disconnected, and the memory comes back
//! when its message has moved on (or the client is gone).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes lent out now, across clients.
#[derive(Debug, Default)]
pub(crate) struct MessageMemory {
    lent: AtomicUsize,
}

impl MessageMemory {
    /// Lends `bytes` more if the total stays within `limit`.
    fn lend(&self, bytes: usize, limit: usize) -> bool {
        self.lent
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |lent| {
                lent.checked_add(bytes).filter(|total| *total <= limit)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: usize) {
        self.lent.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Bytes lent out now (SHOW MEM).
    pub(crate) fn lent(&self) -> usize {
        self.lent.load(Ordering::Acquire)
    }
}

/// What one client holds of the [`MessageMemory`]; given back when dropped. Boxed: 8 bytes in every
/// client's session, which holds nothing almost all the time.
#[derive(Debug, Default)]
pub(crate) struct Reservation {
    held: Option<Box<(Arc<MessageMemory>, usize)>>,
}

impl Reservation {
    /// Makes the reservation cover `bytes` (it only grows here); false if the memory is not there.
    pub(crate) fn cover(&mut self, memory: &Arc<MessageMemory>, bytes: usize, limit: usize) -> bool {
        let have = self.held.as_ref().map_or(0, |held| held.1);
        if bytes <= have {
            return true;
        }
        if !memory.lend(bytes - have, limit) {
            return false;
        }
        match &mut self.held {
            Some(held) => held.1 = bytes,
            None => self.held = Some(Box::new((Arc::clone(memory), bytes))),
        }
        true
    }

    /// Whether anything is held.
    #[inline]
    pub(crate) fn holds(&self) -> bool {
        self.held.is_some()
    }

    /// Gives everything back.
    pub(crate) fn release(&mut self) {
        if let Some(held) = self.held.take() {
            held.0.give_back(held.1);
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_share_one_limit_and_give_back_what_they_held() {
        let memory = Arc::new(MessageMemory::default());
        let (mut a, mut b) = (Reservation::default(), Reservation::default());
        assert!(a.cover(&memory, 600, 1000));
        assert!(a.cover(&memory, 700, 1000), "growing takes only the difference");
        assert!(a.cover(&memory, 100, 1000), "a smaller size is already covered");
        assert!(!b.cover(&memory, 400, 1000), "700 + 400 is over the limit");
        assert!(!b.holds() && memory.lent() == 700);
        assert!(b.cover(&memory, 300, 1000));
        a.release();
        assert_eq!(memory.lent(), 300);
        drop(b);
        assert_eq!(memory.lent(), 0, "dropped: given back");
        assert!(a.cover(&memory, 1000, 1000) && !a.cover(&memory, 1001, 1000));
    }
}
