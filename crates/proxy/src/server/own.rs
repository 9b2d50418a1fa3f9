//! What pgmux says to a server on its own account, outside any client's conversation: reading the login
//! phase, the statements it runs itself (parameter sync, reading settings back, the sizing query, each
//! shielded by [`guard`](super::guard)), liveness checks, bringing a
//! connection a client abandoned back to idle, and saying goodbye.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pgmux_proto::backend::{self, ErrorFields};
use pgmux_proto::{ParseError, Step, TxStatus, encode};

use super::{SERVER_READ_CHUNK, ServerConn, guard};
use crate::net::io::ReadOutcome;
use crate::protocol::failure::{ServerError, ServerFailure};
use crate::protocol::params::Param;
use crate::protocol::tracker::TxTracker;

/// Rows of a result, every value as text (NULL as `None`).
pub(crate) type Rows = Vec<Vec<Option<String>>>;

/// `work`, or [`ServerFailure::Timeout`] if it takes longer than `timeout`.
async fn within<T>(
    timeout: Duration,
    work: impl std::future::Future<Output = Result<T, ServerFailure>>,
) -> Result<T, ServerFailure> {
    pgmux_timer::timeout(timeout, work).await.unwrap_or(Err(ServerFailure::Timeout(timeout)))
}

impl ServerConn {
    /// Reads one whole message (header included). Only for phases where no large row can arrive.
    pub(crate) async fn read_message(&mut self) -> Result<(u8, Bytes), ServerFailure> {
        loop {
            match self.io.framer.step(&self.io.rbuf)? {
                Step::Message { tag, len } => return Ok((tag, self.io.rbuf.split_to(len).freeze())),
                Step::Stream { tag, .. } => return Err(crate::protocol::tracker::Unexpected(tag).into()),
                Step::NeedMore { .. } => {}
            }
            if let ReadOutcome::Eof = self.io.read(SERVER_READ_CHUNK).await? {
                return Err(ServerFailure::Closed);
            }
        }
    }

    /// Sends `messages` (pgmux's own) and reads the replies up to the `expect`-th ReadyForQuery. Rows go to
    /// `rows` if given, else are dropped; ParameterStatus is recorded. Returns the first ordinary error the
    /// server reported, if any, and the final transaction status; FATAL ends it with an error.
    async fn converse(
        &mut self,
        messages: Bytes,
        expect: u32,
        mut rows: Option<&mut Rows>,
    ) -> Result<(Option<ServerError>, TxStatus), ServerFailure> {
        self.io.send(messages).await?;
        let mut first_error = None;
        let mut left = expect;
        loop {
            let (tag, msg) = self.read_message().await?;
            let body = &msg[5..];
            match tag {
                b'Z' => {
                    let status = backend::ready_for_query(body)?;
                    left -= 1;
                    if left == 0 {
                        return Ok((first_error, status));
                    }
                }
                b'E' => {
                    let fields = ErrorFields::parse(body)?;
                    let error = ServerError::from_fields(&fields);
                    if fields.is_fatal() {
                        return Err(ServerFailure::Fatal(Box::new(error)));
                    }
                    first_error.get_or_insert(error);
                }
                b'S' => {
                    let (name, value) = backend::parameter_status(body)?;
                    self.params.report(name, value);
                }
                b'D' => {
                    if let Some(rows) = rows.as_deref_mut() {
                        let values = backend::data_row(body)?;
                        rows.push(
                            values.into_iter().map(|v| v.map(|v| String::from_utf8_lossy(v).into_owned())).collect(),
                        );
                    }
                }
                _ => {}
            }
        }
    }

    /// Runs `sql`, one of pgmux's own statements built by [`guard`](super::guard) (a transaction of its own,
    /// shielded from the session's settings), and returns its rows, every result's in order. It runs again,
    /// up to [`guard::ATTEMPTS`] times in all, while it fails for a passing reason (a session timeout that
    /// fired before the guard took hold). An error reply that remains is a [`ServerFailure::Query`], after
    /// which the connection is as it was and may be lent; a server left inside a transaction is not.
    pub(crate) async fn run_own(&mut self, sql: &str, timeout: Duration) -> Result<Rows, ServerFailure> {
        let mut attempt = 1;
        loop {
            let mut buf = BytesMut::with_capacity(sql.len() + 6);
            encode::query(&mut buf, sql);
            let mut rows = Vec::new();
            let (error, status) = within(timeout, self.converse(buf.freeze(), 1, Some(&mut rows))).await?;
            // An error skips the rest of the Query, COMMIT included: the transaction is rolled back here.
            if status != TxStatus::Idle {
                let mut buf = BytesMut::with_capacity(14);
                encode::query(&mut buf, "ROLLBACK");
                match within(timeout, self.converse(buf.freeze(), 1, None)).await? {
                    (_, TxStatus::Idle) => {}
                    (_, still) => return Err(ServerFailure::NotIdle(still)),
                }
            }
            match error {
                // Left in a transaction with no error: what it did was rolled back, not committed.
                None if status != TxStatus::Idle => return Err(ServerFailure::NotIdle(status)),
                None => return Ok(rows),
                Some(error) => {
                    if attempt < guard::ATTEMPTS && guard::Blame::of(&error.code) == guard::Blame::Passing {
                        tracing::debug!(server_id = self.id, %error, attempt, "pgmux's own statement failed; again");
                        attempt += 1;
                        continue;
                    }
                    return Err(ServerFailure::Query(Box::new(error)));
                }
            }
        }
    }

    /// Runs `body`, statements of pgmux's own each ending in `;`, shielded from the session's settings (see
    /// [`guard::guarded`]), as [`run_own`](Self::run_own) does.
    pub(crate) async fn run_guarded(&mut self, body: &str, timeout: Duration) -> Result<Rows, ServerFailure> {
        self.run_own(&guard::guarded(body, self.major_version()), timeout).await
    }

    /// The settings the session on this connection has set, each as it would be set elsewhere (see
    /// [`guard::read_back`]); `end_idle_timeout` also takes its `idle_session_timeout` off.
    pub(crate) async fn session_settings(
        &mut self,
        timeout: Duration,
        end_idle_timeout: bool,
    ) -> Result<Vec<Param>, ServerFailure> {
        let major = self.major_version();
        let rows = self.run_own(&guard::read_back(major, end_idle_timeout), timeout).await?;
        guard::ReadBack::parse(&rows, major).ok_or(ServerFailure::Parse(ParseError {
            what: "DataRow",
            reason: "the settings read back are not the columns pgmux asked for",
        }))
    }

    /// The server's major version, as it reported it at login (0 if it did not).
    pub(crate) fn major_version(&self) -> u32 {
        self.params.reported.get("server_version").map_or(0, |p| guard::major_version(&p.value))
    }

    /// Checks that the server still answers, with a Sync: it starts no statement, so no timeout or other
    /// setting of the session on the connection can make it fail. An idle server answers ReadyForQuery.
    pub(crate) async fn ping(&mut self, timeout: Duration) -> Result<(), ServerFailure> {
        let mut buf = BytesMut::with_capacity(5);
        encode::sync(&mut buf);
        match within(timeout, self.converse(buf.freeze(), 1, None)).await? {
            (None, TxStatus::Idle) => Ok(()),
            (Some(error), _) => Err(ServerFailure::Query(Box::new(error))),
            (None, status) => Err(ServerFailure::NotIdle(status)),
        }
    }

    /// Runs `sql` as the operator wrote it (`connect_query`, `server_check_query`): one simple Query, once,
    /// unshielded. Ok if every statement in it succeeded and the server is idle after it; an empty `sql` is
    /// a round trip that runs no statement.
    pub(crate) async fn run_plain(&mut self, sql: &str, timeout: Duration) -> Result<(), ServerFailure> {
        let mut buf = BytesMut::with_capacity(sql.len() + 6);
        encode::query(&mut buf, sql);
        match within(timeout, self.converse(buf.freeze(), 1, None)).await? {
            (None, TxStatus::Idle) => Ok(()),
            (Some(error), _) => Err(ServerFailure::Query(Box::new(error))),
            (None, status) => Err(ServerFailure::NotIdle(status)),
        }
    }

    /// Brings a connection that a client left mid-way back to idle: ends a COPY the server still waits on,
    /// closes an open extended-protocol unit, reads and drops every reply still owed, and rolls back an
    /// open transaction. True if the server ends idle and can be lent again.
    pub(crate) async fn drain<N>(&mut self, state: &TxTracker<N>, timeout: Duration) -> bool {
        let work = async {
            let mut buf = BytesMut::new();
            let mut expect = state.pending();
            if state.copy_in() {
                encode::copy_fail(&mut buf, "client disconnected");
            }
            if state.unit_open() {
                encode::sync(&mut buf);
                expect += 1;
            }
            let mut status = state.status();
            if !buf.is_empty() {
                self.io.send(buf.split().freeze()).await?;
            }
            if expect > 0 {
                status = self.skip_until_ready(expect).await?;
            }
            if status != TxStatus::Idle {
                encode::query(&mut buf, "ROLLBACK");
                self.io.send(buf.freeze()).await?;
                status = self.skip_until_ready(1).await?;
            }
            Ok(status == TxStatus::Idle)
        };
        matches!(within(timeout, work).await, Ok(true))
    }

    /// Reads and drops everything up to the `count`-th ReadyForQuery, large rows included; returns its status.
    async fn skip_until_ready(&mut self, mut count: u32) -> Result<TxStatus, ServerFailure> {
        loop {
            match self.io.framer.step(&self.io.rbuf)? {
                Step::Message { tag, len } => {
                    let msg = self.io.rbuf.split_to(len);
                    let body = &msg[5..];
                    if tag == b'E' {
                        let fields = ErrorFields::parse(body)?;
                        if fields.is_fatal() {
                            return Err(ServerFailure::Fatal(Box::new(ServerError::from_fields(&fields))));
                        }
                    }
                    if tag == b'Z' {
                        count -= 1;
                        if count == 0 {
                            return Ok(backend::ready_for_query(body)?);
                        }
                    }
                    continue;
                }
                Step::Stream { take, .. } => {
                    let _ = self.io.rbuf.split_to(take);
                    continue;
                }
                Step::NeedMore { .. } => {}
            }
            if let ReadOutcome::Eof = self.io.read(SERVER_READ_CHUNK).await? {
                return Err(ServerFailure::Closed);
            }
        }
    }

    /// True if the connection, idle in the pool, can be lent: nothing unread, no close seen.
    pub(crate) fn looks_alive(&mut self) -> bool {
        self.io.rbuf.is_empty() && !self.io.framer.mid_message() && !self.io.idle_peer_spoke()
    }

    /// Says goodbye politely and closes.
    pub(crate) async fn terminate(mut self: Box<Self>) {
        let mut buf = BytesMut::new();
        encode::terminate(&mut buf);
        let _ = pgmux_timer::timeout(Duration::from_secs(1), self.io.send(buf.freeze())).await;
    }
}
