//! Operating pgmux: the admin console ([`console`], PgBouncer's commands and columns), `/metrics` and
//! `/healthz` ([`metrics_http`]), and putting a new configuration in force ([`reload`]). Above the pools
//! and the client side, which they read and steer; below the session, which hands a console start-up here.

pub(crate) mod console;
pub(crate) mod metrics_http;
pub(crate) mod reload;
