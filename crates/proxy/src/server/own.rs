//! What pgmux says to a server on its own account, outside any client's conversation: reading the login
//! phase, the statements it runs itself (parameter sync, liveness checks, the sizing query), bringing a
//! connection a client abandoned back to idle, and saying goodbye.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pgmux_proto::backend::{self, ErrorFields};
use pgmux_proto::{Step, TxStatus, encode};

use super::{SERVER_READ_CHUNK, ServerConn, ServerError, ServerFailure};
use crate::io::ReadOutcome;
use crate::tracker::TxTracker;

/// Rows of a result, every value as text (NULL as `None`).
pub(crate) type Rows = Vec<Vec<Option<String>>>;

/// `work`, or [`ServerFailure::Timeout`] if it takes longer than `timeout`.
async fn within<T>(
    timeout: Duration,
    work: impl std::future::Future<Output = Result<T, ServerFailure>>,
) -> Result<T, ServerFailure> {
    tokio::time::timeout(timeout, work).await.unwrap_or(Err(ServerFailure::Timeout(timeout)))
}

impl ServerConn {
    /// Reads one whole message (header included). Only for phases where no large row can arrive.
    pub(crate) async fn read_message(&mut self) -> Result<(u8, Bytes), ServerFailure> {
        loop {
            match self.io.framer.step(&self.io.rbuf)? {
                Step::Message { tag, len } => return Ok((tag, self.io.rbuf.split_to(len).freeze())),
                Step::Stream { tag, .. } => return Err(crate::tracker::Unexpected(tag).into()),
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

    /// [`converse`](Self::converse) within `timeout`, rows dropped.
    pub(crate) async fn exchange(
        &mut self,
        messages: Bytes,
        expect: u32,
        timeout: Duration,
    ) -> Result<(Option<ServerError>, TxStatus), ServerFailure> {
        within(timeout, self.converse(messages, expect, None)).await
    }

    /// Runs one simple query on pgmux's own account and returns its rows; an error reply is a
    /// [`ServerFailure::Query`].
    pub(crate) async fn query_rows(&mut self, sql: &str, timeout: Duration) -> Result<Rows, ServerFailure> {
        let mut buf = BytesMut::new();
        encode::query(&mut buf, sql);
        let mut rows = Vec::new();
        match within(timeout, self.converse(buf.freeze(), 1, Some(&mut rows))).await? {
            (Some(error), _) => Err(ServerFailure::Query(Box::new(error))),
            (None, _) => Ok(rows),
        }
    }

    /// Runs one simple query on pgmux's own account, outside any transaction. An error reply is a
    /// [`ServerFailure::Query`] (the connection stays usable); a server left inside a transaction is not.
    pub(crate) async fn simple_query(&mut self, sql: &str, timeout: Duration) -> Result<(), ServerFailure> {
        let mut buf = BytesMut::new();
        encode::query(&mut buf, sql);
        match self.exchange(buf.freeze(), 1, timeout).await? {
            (_, status @ (TxStatus::InTransaction | TxStatus::Failed)) => Err(ServerFailure::NotIdle(status)),
            (Some(error), TxStatus::Idle) => Err(ServerFailure::Query(Box::new(error))),
            (None, TxStatus::Idle) => Ok(()),
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
        let _ = tokio::time::timeout(Duration::from_secs(1), self.io.send(buf.freeze())).await;
    }
}
