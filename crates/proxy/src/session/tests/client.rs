//! A client for the session's tests: writes frontend messages built by hand, reads whole backend messages,
//! and never waits longer than [`WAIT`](super::WAIT) for anything.

use bytes::{Buf, Bytes, BytesMut};
use pgmux_proto::backend::{self, ErrorFields};
use pgmux_proto::encode;
use pgmux_testkit::wire::{cstr, msg};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use super::WAIT;

/// One backend message.
#[derive(Debug)]
pub(super) struct Msg {
    pub(super) tag: u8,
    pub(super) body: Bytes,
}

impl Msg {
    /// The SQLSTATE of an ErrorResponse.
    pub(super) fn code(&self) -> String {
        assert_eq!(self.tag, b'E', "not an error: {self:?}");
        ErrorFields::parse(&self.body).expect("an error's fields").code.to_owned()
    }

    /// The message of an ErrorResponse.
    pub(super) fn message(&self) -> String {
        ErrorFields::parse(&self.body).expect("an error's fields").message.to_owned()
    }

    /// The first value of a DataRow, as text.
    pub(super) fn value(&self) -> String {
        let values = backend::data_row(&self.body).expect("a row");
        String::from_utf8_lossy(values[0].expect("not NULL")).into_owned()
    }
}

/// The tags of `msgs` as one string, `"TDCZ"`: what a reply was, at a glance.
pub(super) fn tags(msgs: &[Msg]) -> String {
    msgs.iter().map(|m| m.tag as char).collect()
}

/// The transaction status of the last ReadyForQuery in `msgs`.
pub(super) fn status(msgs: &[Msg]) -> u8 {
    let ready = msgs.iter().rev().find(|m| m.tag == b'Z').expect("a ReadyForQuery");
    ready.body[0]
}

/// The SQLSTATEs of the errors in `msgs`.
pub(super) fn codes(msgs: &[Msg]) -> Vec<String> {
    msgs.iter().filter(|m| m.tag == b'E').map(Msg::code).collect()
}

/// Parse of `sql` as statement `name`, with no parameter types.
pub(super) fn parse(name: &str, sql: &str) -> Vec<u8> {
    let mut body = cstr(name);
    body.extend(cstr(sql));
    body.extend(0i16.to_be_bytes());
    msg(b'P', &body)
}

/// Bind of statement `name` to the unnamed portal, no parameters, text results.
pub(super) fn bind(name: &str) -> Vec<u8> {
    let mut body = cstr("");
    body.extend(cstr(name));
    body.extend([0, 0, 0, 0, 0, 0]);
    msg(b'B', &body)
}

/// Describe of the unnamed portal.
pub(super) fn describe_portal() -> Vec<u8> {
    msg(b'D', b"P\0")
}

/// Execute of the unnamed portal, every row.
pub(super) fn execute() -> Vec<u8> {
    msg(b'E', &[0, 0, 0, 0, 0])
}

pub(super) fn sync() -> Vec<u8> {
    msg(b'S', b"")
}

/// A client connection to a session.
pub(super) struct Client {
    stream: TcpStream,
    rbuf: BytesMut,
    /// The cancel key pgmux gave it at login.
    pub(super) key: (i32, i32),
    /// Everything it was sent at login.
    pub(super) greeting: Vec<Msg>,
    session: JoinHandle<()>,
}

impl Client {
    pub(super) fn new(stream: TcpStream, session: JoinHandle<()>) -> Client {
        Client { stream, rbuf: BytesMut::new(), key: (0, 0), greeting: Vec::new(), session }
    }

    pub(super) async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("the session takes the client's bytes");
    }

    pub(super) async fn startup(&mut self, params: &[(&str, &str)]) {
        let mut buf = BytesMut::new();
        encode::startup_message(&mut buf, params);
        self.send(&buf).await;
    }

    pub(super) async fn send_cancel(&mut self, (pid, secret): (i32, i32)) {
        let mut buf = BytesMut::new();
        encode::cancel_request(&mut buf, pid, secret);
        self.send(&buf).await;
    }

    pub(super) async fn send_query(&mut self, sql: &str) {
        let mut buf = BytesMut::new();
        encode::query(&mut buf, sql);
        self.send(&buf).await;
    }

    /// Sends `sql` as a simple Query and reads its reply up to ReadyForQuery.
    pub(super) async fn query(&mut self, sql: &str) -> Vec<Msg> {
        self.send_query(sql).await;
        self.until_ready().await
    }

    /// The next whole message; `None` once the session has closed the connection.
    pub(super) async fn recv(&mut self) -> Option<Msg> {
        loop {
            if self.rbuf.len() >= 5 {
                let len = u32::from_be_bytes([self.rbuf[1], self.rbuf[2], self.rbuf[3], self.rbuf[4]]) as usize;
                if self.rbuf.len() > len {
                    let tag = self.rbuf.get_u8();
                    let body = self.rbuf.split_to(len).split_off(4).freeze();
                    return Some(Msg { tag, body });
                }
            }
            let read = tokio::time::timeout(WAIT, self.stream.read_buf(&mut self.rbuf)).await;
            match read.unwrap_or_else(|_| panic!("nothing from the session in {WAIT:?}; holding {:?}", self.rbuf)) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    /// Messages up to and with the next ReadyForQuery (and the cancel key, if one comes).
    pub(super) async fn until_ready(&mut self) -> Vec<Msg> {
        let mut got = Vec::new();
        loop {
            let Some(m) = self.recv().await else { panic!("the session closed the client after {}", tags(&got)) };
            if m.tag == b'K' {
                let key = backend::backend_key_data(&m.body).expect("a key");
                self.key = key;
            }
            let ready = m.tag == b'Z';
            got.push(m);
            if ready {
                return got;
            }
        }
    }

    /// Everything the session still sends before it closes the connection.
    pub(super) async fn closed(&mut self) -> Vec<Msg> {
        let mut got = Vec::new();
        while let Some(m) = self.recv().await {
            got.push(m);
        }
        got
    }

    /// Sends Terminate, and waits until the session is over.
    pub(super) async fn terminate(mut self) {
        let mut buf = BytesMut::new();
        encode::terminate(&mut buf);
        self.send(&buf).await;
        self.session_over().await;
    }

    /// Closes the socket without a word (a client that crashed, or a Lambda frozen for good), and waits
    /// until the session is over.
    pub(super) async fn vanish(self) {
        let Client { stream, session, .. } = self;
        drop(stream);
        tokio::time::timeout(WAIT, session).await.expect("the session ends").expect("without a panic");
    }

    /// Waits until the session is over.
    pub(super) async fn session_over(self) {
        tokio::time::timeout(WAIT, self.session).await.expect("the session ends").expect("without a panic");
    }
}
