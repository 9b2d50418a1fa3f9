//! A server that refuses a pool's password (28P01) refuses the next login too, until somebody changes
//! something. So pgmux does not let every waiting client try again, which would cost the server a failed
//! login per client (and, where failed logins lock an account out, the account): as in PgBouncer, the
//! client whose open failed gets the server's error, every client waiting in the pool's line gets it at
//! once, and for [`HOLD_OFF`] after it the clients that would open a connection next get it too, without
//! another login; the liveness probe does not log in meanwhile. A reload that gives the pool new
//! credentials, and `RECONNECT`, end the hold-off at once.
//!
//! Only a refused password: a role that may not log in (28000: `NOLOGIN`, dropped) costs no failed password
//! attempt to retry, and is often lifted again, so there the usual rule holds (the client waits for an open
//! connection within `query_wait_timeout`, and gets the error at once only when none is open).
//!
//! Clients get 08001 (as for any server login that failed: their own password was right), with the
//! server's words in the message (`password authentication failed for user "…"`): they name the user,
//! never a password.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use pgmux_proto::sqlstate;
use tokio::time::Instant;

use super::{CheckoutError, ServerPool};
use crate::protocol::failure::ServerError;
use crate::server::ConnectError;

/// How long a refused login answers for the pool's next opens (and keeps the liveness probe, which asks
/// once a second, from logging in). Short, so that a password put right on the server is seen soon (a reload
/// or `RECONNECT` makes it at once); long enough that clients which come together, and the probe, cost the
/// server one failed login. PgBouncer's `server_login_retry`, which plays this part there, is 15 s.
pub(crate) const HOLD_OFF: Duration = Duration::from_secs(5);

/// The pool's last refused login, and when it was refused.
#[derive(Debug, Default)]
pub(super) struct LoginRefusal(Mutex<Option<(Instant, Arc<ServerError>)>>);

impl LoginRefusal {
    /// The refusal that still answers for the pool at `now`, if any.
    fn current(&self, now: Instant) -> Option<Arc<ServerError>> {
        let last = self.0.lock();
        last.as_ref().filter(|(at, _)| now.saturating_duration_since(*at) < HOLD_OFF).map(|(_, e)| Arc::clone(e))
    }

    fn remember(&self, at: Instant, error: Arc<ServerError>) {
        *self.0.lock() = Some((at, error));
    }

    /// Forgets the refusal: the pool logs in differently now.
    pub(super) fn forget(&self) {
        *self.0.lock() = None;
    }
}

impl ServerPool {
    /// The error of a login the server refused a moment ago, for a client about to open a connection.
    pub(super) fn refused_lately(&self) -> Option<CheckoutError> {
        self.refusal.current(Instant::now()).map(CheckoutError::LoginRefused)
    }

    /// After an open failed: if the server refused the password, remembers it, sends every client waiting in
    /// the line away with it, and returns the error for the client that opened. `None`: another failure.
    pub(super) fn on_refused_login(&self, e: &ConnectError) -> Option<CheckoutError> {
        let ConnectError::Rejected { error, .. } = e else { return None };
        if error.code != sqlstate::INVALID_PASSWORD {
            return None;
        }
        let error: Arc<ServerError> = Arc::new((**error).clone());
        self.refusal.remember(Instant::now(), Arc::clone(&error));
        // PgBouncer's words for the same line (its test suite counts them), then how many clients waited.
        tracing::warn!(database = %self.key.database, user = %self.key.user, code = %error.code,
            "server login refused, closing because: {}", error.message);
        let waiting = self.pool.refuse_waiters();
        if waiting > 0 {
            tracing::info!(waiting, "clients waiting for this pool are told the server refused its login");
        }
        Some(CheckoutError::LoginRefused(error))
    }

    /// After a probe login failed: a refusal answers for the pool as a client's would (quietly: no client
    /// waits on the probe). True if it was one.
    pub(super) fn probe_refused(&self, e: &ConnectError) -> bool {
        let ConnectError::Rejected { error, .. } = e else { return false };
        let refused = error.code == sqlstate::INVALID_PASSWORD;
        if refused {
            self.refusal.remember(Instant::now(), Arc::new((**error).clone()));
        }
        refused
    }

    /// The error a client sent away from the line by [`on_refused_login`](Self::on_refused_login) gets.
    pub(crate) fn refused_in_line(&self) -> CheckoutError {
        self.refused_lately().unwrap_or_else(|| self.waited_too_long())
    }
}
