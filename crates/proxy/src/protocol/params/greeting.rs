//! The `ParameterStatus` messages a client is sent at login, encoded once and reused. They depend only on
//! the server's defaults and the client's parameter set, both shared values: most clients of one pgmux log
//! in with the same start-up values, and encoding a dozen messages for each login was about a tenth of what
//! a new client connection cost pgmux.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::{Mutex, MutexGuard};
use pgmux_proto::encode;

use super::{ClientParams, Defaults, ParamMap};

/// How many (defaults, parameter set) pairs are kept: enough for a few kinds of client at once.
const KEPT: usize = 4;

/// Recently sent parameter blocks.
#[derive(Debug, Default)]
pub(crate) struct Greetings {
    recent: Mutex<VecDeque<Greeting>>,
}

/// One block and what it was made from. Holding both values keeps them alive, so that a pointer that
/// matches is the same value and not a new one at the same address.
#[derive(Debug)]
struct Greeting {
    defaults: Arc<Defaults>,
    client: Arc<ParamMap>,
    block: Bytes,
}

impl Greetings {
    /// The `ParameterStatus` messages for `client` on a server with `defaults`: its own values in place
    /// of the server's.
    pub(crate) fn parameter_status(&self, defaults: &Arc<Defaults>, client: &ClientParams) -> Bytes {
        let same = |g: &Greeting| Arc::ptr_eq(&g.defaults, defaults) && Arc::ptr_eq(&g.client, &client.values);
        if let Some(g) = self.lock().iter().find(|g| same(g)) {
            return g.block.clone();
        }
        let block = encode(defaults, client);
        let mut recent = self.lock();
        if recent.len() == KEPT {
            recent.pop_front();
        }
        recent.push_back(Greeting {
            defaults: Arc::clone(defaults),
            client: Arc::clone(&client.values),
            block: block.clone(),
        });
        block
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Greeting>> {
        // Only whole entries are ever pushed or popped: a panic elsewhere leaves nothing half-done.
        self.recent.lock()
    }
}

/// Encodes the block: one `ParameterStatus` per server default, the client's own value in its place.
fn encode(defaults: &Defaults, client: &ClientParams) -> Bytes {
    let mut buf = BytesMut::with_capacity(512);
    for (name, value) in defaults.for_client(client) {
        encode::parameter_status(&mut buf, name, value);
    }
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::params::ServerParams;

    fn defaults(zone: &str) -> Arc<Defaults> {
        let mut s = ServerParams::default();
        s.report("TimeZone", zone);
        s.report("application_name", "");
        Arc::new(Defaults::from_reported(&s.reported))
    }

    #[test]
    fn a_block_is_made_once_per_defaults_and_parameter_set() {
        let greetings = Greetings::default();
        let utc = defaults("UTC");
        let plain = ClientParams::default();
        let mut named = ClientParams::default();
        named.report("application_name", "app");

        let first = greetings.parameter_status(&utc, &plain);
        assert_eq!(first, encode(&utc, &plain));
        let again = greetings.parameter_status(&utc, &plain.clone());
        assert_eq!(again.as_ptr(), first.as_ptr(), "the same set on the same defaults reuses the block");

        let own = greetings.parameter_status(&utc, &named);
        assert_eq!(own, encode(&utc, &named), "the client's own value in the server's place");
        assert_ne!(own, first);

        // New defaults (a new server connection reported other values): a new block, with the new values.
        let berlin = defaults("Europe/Berlin");
        let moved = greetings.parameter_status(&berlin, &plain);
        assert_eq!(moved, encode(&berlin, &plain));
        assert_ne!(moved, first);
        // An equal set that is another value is encoded again, and comes out the same.
        let copy = Arc::new((*utc).clone());
        assert_eq!(greetings.parameter_status(&copy, &plain), first);
    }

    #[test]
    fn only_the_most_recent_blocks_are_kept() {
        let greetings = Greetings::default();
        let utc = defaults("UTC");
        let sets: Vec<ClientParams> = (0..KEPT + 2)
            .map(|i| {
                let mut c = ClientParams::default();
                c.report("application_name", &format!("app{i}"));
                c
            })
            .collect();
        let blocks: Vec<Bytes> = sets.iter().map(|c| greetings.parameter_status(&utc, c)).collect();
        assert_eq!(greetings.lock().len(), KEPT);
        let newest = greetings.parameter_status(&utc, &sets[KEPT + 1]);
        assert_eq!(newest.as_ptr(), blocks[KEPT + 1].as_ptr(), "a recent set is still kept");
        let oldest = greetings.parameter_status(&utc, &sets[0]);
        assert_ne!(oldest.as_ptr(), blocks[0].as_ptr(), "the oldest set was let go, and is encoded anew");
        assert_eq!(oldest, encode(&utc, &sets[0]), "an evicted set is encoded again, correctly");
    }
}
