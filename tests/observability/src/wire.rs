//! A console session on the bare protocol, for comparing PgBouncer's console with pgmux's column by column:
//! tokio-postgres and psql give a RowDescription's names but not its type OIDs, and the types are part of
//! what a script reads. Trust logins only (both consoles under test let their users in without a password);
//! blocking I/O with a timeout, one simple query at a time.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// What a console answered to one query.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Answer {
    /// The RowDescription: each column's name and type OID.
    pub columns: Vec<(String, u32)>,
    /// The DataRows, NULL as `None`.
    pub rows: Vec<Vec<Option<String>>>,
    /// The CommandComplete tag.
    pub tag: Option<String>,
    /// An ErrorResponse: its SQLSTATE and message.
    pub error: Option<(String, String)>,
}

impl Answer {
    /// The column names.
    pub fn names(&self) -> Vec<&str> {
        self.columns.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The type OID of column `name`.
    pub fn type_of(&self, name: &str) -> Option<u32> {
        self.columns.iter().find(|(n, _)| n == name).map(|(_, t)| *t)
    }

    /// The values of column `name`, one per row.
    pub fn column(&self, name: &str) -> Vec<Option<&str>> {
        let Some(i) = self.columns.iter().position(|(n, _)| n == name) else { return Vec::new() };
        self.rows.iter().map(|r| r.get(i).and_then(|v| v.as_deref())).collect()
    }
}

/// A logged-in console session.
#[derive(Debug)]
pub struct Session {
    stream: TcpStream,
}

impl Session {
    /// Logs in to database `pgbouncer` on 127.0.0.1:`port` as `user`, without a password.
    pub fn login(port: u16, user: &str) -> io::Result<Session> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut session = Session { stream };
        let mut body = 196_608i32.to_be_bytes().to_vec();
        for (k, v) in [("user", user), ("database", "pgbouncer")] {
            body.extend_from_slice(k.as_bytes());
            body.push(0);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut packet = i32::try_from(body.len() + 4).unwrap_or(i32::MAX).to_be_bytes().to_vec();
        packet.extend_from_slice(&body);
        session.stream.write_all(&packet)?;
        loop {
            let (tag, body) = session.message()?;
            match tag {
                b'R' if body.get(..4) == Some(&[0, 0, 0, 0]) => {}
                b'R' => return Err(other(format!("{user} was asked for a password (auth code {:?})", &body[..4]))),
                b'E' => return Err(other(format!("login refused: {:?}", error_fields(&body)))),
                b'Z' => return Ok(session),
                _ => {}
            }
        }
    }

    /// Runs one simple query and reads everything up to ReadyForQuery.
    pub fn query(&mut self, sql: &str) -> io::Result<Answer> {
        let mut body = sql.as_bytes().to_vec();
        body.push(0);
        let mut packet = vec![b'Q'];
        packet.extend_from_slice(&i32::try_from(body.len() + 4).unwrap_or(i32::MAX).to_be_bytes());
        packet.extend_from_slice(&body);
        self.stream.write_all(&packet)?;
        let mut answer = Answer::default();
        loop {
            let (tag, body) = self.message()?;
            let mut r = Reader(&body);
            match tag {
                b'T' => {
                    for _ in 0..r.i16()? {
                        let name = r.cstr()?;
                        let (_table, _attnum, oid) = (r.i32()?, r.i16()?, r.i32()?);
                        let (_len, _typmod, _format) = (r.i16()?, r.i32()?, r.i16()?);
                        answer.columns.push((name, u32::try_from(oid).unwrap_or(0)));
                    }
                }
                b'D' => {
                    let mut row = Vec::new();
                    for _ in 0..r.i16()? {
                        let len = r.i32()?;
                        row.push(if len < 0 { None } else { Some(r.text(len as usize)?) });
                    }
                    answer.rows.push(row);
                }
                b'C' => answer.tag = Some(r.cstr()?),
                b'E' => answer.error = Some(error_fields(&body)),
                b'Z' => return Ok(answer),
                _ => {}
            }
        }
    }

    /// The next message: its tag and body.
    fn message(&mut self) -> io::Result<(u8, Vec<u8>)> {
        let mut head = [0u8; 5];
        self.stream.read_exact(&mut head)?;
        let len = i32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        let len = usize::try_from(len).ok().filter(|l| (4..1 << 24).contains(l)).ok_or_else(|| other("bad length"))?;
        let mut body = vec![0; len - 4];
        self.stream.read_exact(&mut body)?;
        Ok((head[0], body))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.stream.write_all(&[b'X', 0, 0, 0, 4]);
    }
}

/// An ErrorResponse's SQLSTATE and message.
fn error_fields(body: &[u8]) -> (String, String) {
    let (mut code, mut message) = (String::new(), String::new());
    for field in body.split(|b| *b == 0).filter(|f| !f.is_empty()) {
        let value = String::from_utf8_lossy(&field[1..]).into_owned();
        match field[0] {
            b'C' => code = value,
            b'M' => message = value,
            _ => {}
        }
    }
    (code, message)
}

fn other(why: impl Into<String>) -> io::Error {
    io::Error::other(why.into())
}

/// Reads a message body front to back.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> io::Result<&[u8]> {
        if self.0.len() < n {
            return Err(other("message ends early"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn i16(&mut self) -> io::Result<i16> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> io::Result<i32> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn text(&mut self, n: usize) -> io::Result<String> {
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }

    fn cstr(&mut self) -> io::Result<String> {
        let end = self.0.iter().position(|b| *b == 0).ok_or_else(|| other("a string without its NUL"))?;
        let s = self.text(end)?;
        self.take(1)?;
        Ok(s)
    }
}
