//! The client side: the opening packets ([`startup`]), the hba / cert / peer rules ([`access`]),
//! authentication ([`auth`]), cancel keys
//! ([`cancel`]), the counts and caps of clients per database and user ([`caps`]), the databases DISABLEd ([`disabled`]), the memory clients' large messages share ([`memory`]), the Unix-domain socket file
//! ([`unix_socket`]), and what every client's session shares ([`shared`]: the pools, the authenticator,
//! the cancel keys, the statement registry).

pub(crate) mod access;
pub(crate) mod auth;
pub(crate) mod cancel;
pub(crate) mod caps;
pub(crate) mod disabled;
pub(crate) mod lookup;
pub(crate) mod memory;
pub(crate) mod shared;
pub(crate) mod startup;
pub(crate) mod unix_socket;
