//! What every task of the pooler runs by: the shutdown levels and the wake-ups they raise ([`stop`]), and
//! the reusable slots that keep one small entry per live client ([`slots`]). The lowest layer but
//! configuration: it knows nothing of PostgreSQL.

pub(crate) mod slots;
pub mod stop;
