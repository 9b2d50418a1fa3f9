//! Client messages while no server is linked: what a mode left over from an earlier unit does with them,
//! and what pgmux answers itself (a Sync, a Close or `DEALLOCATE` of the client's own statement, a Parse
//! over a live name) rather than take a server connection from the pool for nothing.

use bytes::{Bytes, BytesMut};
use pgmux_proto::{TxStatus, frontend};

use super::{Loss, Mode, Router, Verdict, already_exists, close_complete, deallocated, ready_for_query};
use crate::protocol::sql;

impl Router {
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
            Mode::LostTransaction | Mode::LostSettings if !matches!(tag, b'd' | b'c' | b'f') => {
                let loss = Loss::of(self.mode);
                self.mode = Mode::Normal;
                if let Some(loss) = loss {
                    return self.answer_unit(tag, loss.error());
                }
            }
            // A check needs a linked server, and losing it ends the check.
            Mode::LostTransaction | Mode::LostSettings | Mode::Normal | Mode::Checking => {}
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
                        self.names.close_unnamed();
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
                if !sql::starts_deallocate(body) {
                    return None;
                }
                let name = sql::deallocate_name(frontend::query(body).ok()?)?;
                self.names.named.remove(&name)?;
                Some(Verdict::Answer(deallocated(TxStatus::Idle)))
            }
            _ => None,
        }
    }
}
