//! One connection to the fake server: a cancel request, or a login and then messages until Terminate, each
//! answered as [`script`](super::script) decides and written at once.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::BytesMut;
use pgmux_proto::frontend::{self, CANCEL_REQUEST_CODE, SSL_REQUEST_CODE};
use pgmux_proto::{TxStatus, encode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::script::{self, Reply};
use super::{FakeServer, Inner, refusal};

/// Counts a connection as open for as long as it lives.
struct OpenGuard(Arc<Inner>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.change(|s| s.open -= 1);
    }
}

/// Serves one accepted connection until it ends.
pub(super) async fn serve(mut stream: TcpStream, inner: Arc<Inner>) {
    let Some(startup) = read_startup(&mut stream).await else { return };
    if let Some((pid, secret)) = cancel_key(&startup) {
        // Closing the connection tells the sender the cancel was taken, as PostgreSQL does.
        inner.cancel(pid, secret);
        return;
    }
    let n = inner.change(|s| {
        s.open += 1;
        s.begun += 1;
        s.begun
    });
    let _open = OpenGuard(Arc::clone(&inner));
    inner.until(|s| !s.hung).await;
    let delay = inner.read(|s| s.login_delay_ms);
    if delay > 0 {
        pgmux_timer::sleep(std::time::Duration::from_millis(delay)).await;
    }
    if let Some(code) = inner.read(refusal) {
        let _ = stream.write_all(&script::error(code, true)).await;
        return;
    }
    let standby = inner.change(|s| {
        s.accepted += 1;
        s.standby
    });
    if stream.write_all(&greeting(n, standby)).await.is_err() {
        return;
    }
    let conn = Conn { n, stream, inner, status: TxStatus::Idle, statements: HashMap::new(), portals: HashMap::new() };
    conn.run().await;
}

/// The start-up packet's body, after answering any SSLRequest with "no".
async fn read_startup(stream: &mut TcpStream) -> Option<Vec<u8>> {
    loop {
        let len = stream.read_u32().await.ok()?;
        let mut body = vec![0u8; (len as usize).saturating_sub(4)];
        stream.read_exact(&mut body).await.ok()?;
        if body.get(..4) != Some(&SSL_REQUEST_CODE.to_be_bytes()[..]) {
            return Some(body);
        }
        stream.write_all(b"N").await.ok()?;
    }
}

/// The key of a CancelRequest's body; `None` for any other start-up packet.
fn cancel_key(body: &[u8]) -> Option<(i32, i32)> {
    let word = |at: usize| Some(i32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?));
    (word(0)? == CANCEL_REQUEST_CODE).then_some((word(4)?, word(8)?))
}

/// AuthenticationOk, the server's parameters, connection `n`'s key and ReadyForQuery.
fn greeting(n: usize, standby: bool) -> BytesMut {
    let mut out = BytesMut::new();
    encode::auth_ok(&mut out);
    encode::parameter_status(&mut out, "server_version", "15.0 (fake)");
    encode::parameter_status(&mut out, "TimeZone", "UTC");
    encode::parameter_status(&mut out, "in_hot_standby", if standby { "on" } else { "off" });
    encode::parameter_status(&mut out, "default_transaction_read_only", "off");
    let (pid, secret) = FakeServer::key(n);
    encode::backend_key_data(&mut out, pid, secret);
    encode::ready_for_query(&mut out, TxStatus::Idle);
    out
}

/// What became of a statement.
#[derive(PartialEq, Eq)]
enum Ran {
    Done,
    /// It failed: the rest of its Query, or its extended-protocol unit up to Sync, is skipped.
    Failed,
    /// The connection ends here.
    Closed,
    /// The connection ends here with a reset.
    Reset,
    /// The connection ends here with an end of file, then a reset.
    ClosedThenReset,
}

/// A logged-in connection.
struct Conn {
    n: usize,
    stream: TcpStream,
    inner: Arc<Inner>,
    status: TxStatus,
    /// Prepared statements' and portals' SQL, by name.
    statements: HashMap<String, String>,
    portals: HashMap<String, String>,
}

impl Conn {
    async fn run(mut self) {
        // After an error in an extended-protocol unit, everything up to its Sync is skipped.
        let mut skipping = false;
        loop {
            let n = self.n;
            let (tag, body) = tokio::select! {
                biased;
                () = self.inner.until(|s| s.ended_through >= n) => return self.end().await,
                () = self.inner.until(|s| s.deaf_through >= n) => std::future::pending().await,
                read = read_message(&mut self.stream) => match read {
                    Some(message) => message,
                    None => return,
                },
            };
            self.inner.change(|s| s.log.push((n, describe(tag, &body))));
            if tag == b'X' {
                return;
            }
            self.inner.until(|s| !s.hung).await;
            let mut out = BytesMut::new();
            let ran = match tag {
                b'S' => {
                    skipping = false;
                    self.inner.change(|s| s.queries += 1);
                    encode::ready_for_query(&mut out, self.status);
                    Ran::Done
                }
                _ if skipping => continue,
                b'Q' => self.query(&body, &mut out).await,
                _ => self.extended(tag, &body, &mut out).await,
            };
            skipping |= ran == Ran::Failed;
            if self.stream.write_all(&out).await.is_err() || ran == Ran::Closed {
                return;
            }
            if ran == Ran::ClosedThenReset {
                let _ = self.stream.shutdown().await;
            }
            if matches!(ran, Ran::Reset | Ran::ClosedThenReset) {
                // Closing with linger 0 resets the connection, as unread bytes would.
                let _ = socket2::SockRef::from(&self.stream).set_linger(Some(std::time::Duration::ZERO));
                return;
            }
        }
    }

    /// Ends the connection on the server's initiative (see [`FakeServer::terminate_all`]).
    async fn end(mut self) {
        let _ = self.stream.write_all(&script::error("57P01", true)).await;
    }

    /// A simple Query: each statement in turn, up to the first that fails, then ReadyForQuery.
    async fn query(&mut self, body: &[u8], out: &mut BytesMut) -> Ran {
        self.inner.change(|s| s.queries += 1);
        let sql = String::from_utf8_lossy(frontend::query(body).unwrap_or_default()).into_owned();
        let statements = script::statements(&sql);
        if statements.is_empty() {
            encode::empty_query_response(out);
        }
        for statement in statements {
            match self.statement(statement, out, true).await {
                Ran::Done => {}
                Ran::Failed => break,
                ended @ (Ran::Closed | Ran::Reset | Ran::ClosedThenReset) => return ended,
            }
        }
        encode::ready_for_query(out, self.status);
        Ran::Done
    }

    /// A message of the extended protocol (Sync aside).
    async fn extended(&mut self, tag: u8, body: &[u8], out: &mut BytesMut) -> Ran {
        match tag {
            b'P' => {
                if let Ok((name, rest)) = frontend::parse_name(body) {
                    let sql = frontend::parse_query(rest).unwrap_or_default().to_owned();
                    self.statements.insert(name.to_owned(), sql);
                }
                encode::parse_complete(out);
            }
            b'B' => {
                if let Ok((portal, statement, _)) = frontend::bind_names(body) {
                    let sql = self.statements.get(statement).cloned().unwrap_or_default();
                    self.portals.insert(portal.to_owned(), sql);
                }
                out.extend_from_slice(&[b'2', 0, 0, 0, 4]);
            }
            b'D' => self.describe(body, out),
            b'E' => {
                let portal = body.split(|b| *b == 0).next().unwrap_or_default();
                let sql = self.portals.get(&*String::from_utf8_lossy(portal)).cloned().unwrap_or_default();
                return self.statement(&sql, out, false).await;
            }
            b'C' => encode::close_complete(out),
            _ => {}
        }
        Ran::Done
    }

    /// ParameterDescription (for a statement) and RowDescription, or NoData when no rows are scripted.
    fn describe(&self, body: &[u8], out: &mut BytesMut) {
        let Ok((kind, name)) = frontend::describe_or_close(body) else { return };
        let sql = if kind == b'S' { self.statements.get(name) } else { self.portals.get(name) };
        let sql = sql.cloned().unwrap_or_default();
        if kind == b'S' {
            out.extend_from_slice(&[b't', 0, 0, 0, 6, 0, 0]);
        }
        let columns = self.inner.read(|s| {
            s.rules.iter().find(|r| sql.contains(r.pattern)).and_then(|r| match &r.reply {
                Reply::Rows(rows) => Some(rows.first().map_or(0, Vec::len)),
                _ => None,
            })
        });
        if let Some(columns) = columns {
            script::row_description(out, columns);
        } else {
            out.extend_from_slice(&[b'n', 0, 0, 0, 4]);
        }
    }

    /// One statement: its scripted reply (waited for, if held) or what PostgreSQL would say. `simple`: in
    /// a simple Query, whose rows come with their description.
    async fn statement(&mut self, sql: &str, out: &mut BytesMut, simple: bool) -> Ran {
        let (mut reply, mut after) = script::unscripted(sql, self.status);
        if let Some(scripted) = self.inner.change(|s| script::scripted(&mut s.rules, sql)) {
            reply = scripted;
            while let Reply::Hold(inner) = reply {
                reply = self.hold(*inner, out).await;
            }
            after = script::status_after(&reply, self.status);
        }
        self.status = after;
        match reply {
            Reply::Rows(rows) => {
                if simple {
                    script::row_description(out, rows.first().map_or(0, Vec::len));
                }
                script::rows(out, &rows);
            }
            Reply::Tag(tag) => encode::command_complete(out, tag),
            Reply::Error(code) => {
                out.extend_from_slice(&script::error(code, false));
                return Ran::Failed;
            }
            Reply::Fatal(code) => {
                out.extend_from_slice(&script::error(code, true));
                return Ran::Closed;
            }
            Reply::Close => return Ran::Closed,
            Reply::FatalUnread(code) => {
                out.extend_from_slice(&script::error(code, true));
                return Ran::Reset;
            }
            Reply::FatalClosedFirst(code) => {
                out.extend_from_slice(&script::error(code, true));
                return Ran::ClosedThenReset;
            }
            Reply::CutRow => {
                if simple {
                    script::row_description(out, 1);
                }
                script::cut_row(out);
                return Ran::Closed;
            }
            Reply::Hold(_) => unreachable!("held replies are waited for above"),
        }
        Ran::Done
    }

    /// Sends what is ready, then holds `inner` until a release; a cancel ends it with 57014 instead, and
    /// [`terminate_all`](FakeServer::terminate_all) with FATAL 57P01.
    async fn hold(&mut self, inner: Reply, out: &mut BytesMut) -> Reply {
        let _ = self.stream.write_all(&out.split()).await;
        let n = self.n;
        let since = self.inner.change(|s| {
            s.holding.insert(n);
            s.releases
        });
        self.inner.until(|s| s.releases > since || s.cancelled.contains(&n) || s.ended_through >= n).await;
        self.inner.change(|s| {
            s.holding.remove(&n);
            match (s.ended_through >= n, s.cancelled.remove(&n)) {
                (true, _) => Reply::Fatal("57P01"),
                (_, true) => Reply::Error("57014"),
                _ => inner,
            }
        })
    }
}

/// One whole message: its tag and body; `None` once the peer is gone.
async fn read_message(stream: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let tag = stream.read_u8().await.ok()?;
    let len = stream.read_u32().await.ok()?;
    let mut body = vec![0u8; (len as usize).saturating_sub(4)];
    stream.read_exact(&mut body).await.ok()?;
    Some((tag, body))
}

/// A message in short, for the log: `Q <sql>`, `P <sql>`, or its tag.
fn describe(tag: u8, body: &[u8]) -> String {
    let text = match tag {
        b'Q' => frontend::query(body).ok().map(|sql| String::from_utf8_lossy(sql).into_owned()),
        b'P' => {
            frontend::parse_name(body).ok().and_then(|(_, rest)| frontend::parse_query(rest).ok()).map(str::to_owned)
        }
        _ => None,
    };
    match text {
        Some(sql) => format!("{} {sql}", tag as char),
        None => (tag as char).to_string(),
    }
}
