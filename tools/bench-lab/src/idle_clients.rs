//! W6's clients: thousands of logged-in, idle connections, each of which has been through one whole
//! transaction (`select 1`), so that a pooler holds whatever per-client state a real client leaves behind.
//!
//! A real driver costs far more memory per connection than the pooler under test, so these speak the
//! protocol by hand over a bare tokio `TcpStream`: StartupMessage, read to ReadyForQuery, Query, read to
//! ReadyForQuery, then hold the socket. Only trust authentication is understood (the benchmark's setting).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::timeout;

/// How long one client may take to connect, log in and run its query (waiting for a permit excluded).
const LOGIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Where to connect and as whom.
#[derive(Clone, Debug)]
pub struct IdleClients {
    pub addr: SocketAddr,
    pub user: String,
    pub database: String,
    pub clients: usize,
    /// Most clients connecting at once.
    pub concurrency: usize,
}

/// Logged-in idle connections; dropping them closes them (after [`Held::close`], politely).
#[derive(Debug)]
pub struct Held {
    streams: Vec<TcpStream>,
}

impl IdleClients {
    /// Connect every client. On the first failure the rest are abandoned and the error says how many had
    /// logged in by then.
    pub async fn connect(&self) -> Result<Held, String> {
        let permits = Arc::new(Semaphore::new(self.concurrency.max(1)));
        let startup = startup_message(&self.user, &self.database);
        let mut tasks = JoinSet::new();
        for _ in 0..self.clients {
            let (permits, startup, addr) = (Arc::clone(&permits), startup.clone(), self.addr);
            tasks.spawn(async move {
                let _permit = permits.acquire_owned().await.map_err(|e| e.to_string())?;
                match timeout(LOGIN_TIMEOUT, login_and_query(addr, &startup)).await {
                    Ok(result) => result,
                    Err(_) => Err(format!("no ReadyForQuery within {LOGIN_TIMEOUT:?}")),
                }
            });
        }
        let mut streams = Vec::with_capacity(self.clients);
        while let Some(joined) = tasks.join_next().await {
            match joined.map_err(|e| e.to_string()).and_then(|r| r) {
                Ok(stream) => streams.push(stream),
                Err(e) => {
                    tasks.abort_all();
                    return Err(format!("{e} (after {} of {} clients had logged in)", streams.len(), self.clients));
                }
            }
        }
        Ok(Held { streams })
    }
}

impl Held {
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// Send each a Terminate and close it, as a well-behaved client leaves.
    pub async fn close(mut self) {
        for stream in &mut self.streams {
            let _ = timeout(Duration::from_secs(1), stream.write_all(&[b'X', 0, 0, 0, 4])).await;
        }
    }
}

async fn login_and_query(addr: SocketAddr, startup: &[u8]) -> Result<TcpStream, String> {
    let mut stream = TcpStream::connect(addr).await.map_err(|e| format!("connect to {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    stream.write_all(startup).await.map_err(|e| format!("send startup: {e}"))?;
    let mut buf = Vec::with_capacity(1024);
    read_until_ready(&mut stream, &mut buf).await.map_err(|e| format!("login: {e}"))?;
    stream.write_all(&query_message("select 1")).await.map_err(|e| format!("send query: {e}"))?;
    read_until_ready(&mut stream, &mut buf).await.map_err(|e| format!("select 1: {e}"))?;
    Ok(stream)
}

/// Read server messages until ReadyForQuery. An ErrorResponse, or an authentication request other than
/// AuthenticationOk, is an error.
async fn read_until_ready(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<(), String> {
    loop {
        while let Some((tag, len)) = next_message(buf)? {
            let body = &buf[5..len];
            match tag {
                b'Z' => {
                    buf.drain(..len);
                    return Ok(());
                }
                b'E' => return Err(error_text(body)),
                b'R' if body.get(..4) != Some(&[0, 0, 0, 0]) => {
                    return Err("the server asks for a password; the benchmark expects trust".to_owned());
                }
                _ => {}
            }
            buf.drain(..len);
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the server closed the connection".to_owned());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The tag and total length (tag included) of the first whole message in `buf`, if it is all there.
pub fn next_message(buf: &[u8]) -> Result<Option<(u8, usize)>, String> {
    let Some(header) = buf.get(..5) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if !(4..=1 << 24).contains(&len) {
        return Err(format!("bad message length {len} for tag {:?}", char::from(header[0])));
    }
    Ok((buf.len() > len).then_some((header[0], len + 1)))
}

/// `SQLSTATE: message` from an ErrorResponse body.
pub fn error_text(body: &[u8]) -> String {
    let (mut code, mut message) = ("?????".to_owned(), String::new());
    for field in body.split(|&b| b == 0) {
        match field.split_first() {
            Some((b'C', value)) => code = String::from_utf8_lossy(value).into_owned(),
            Some((b'M', value)) => message = String::from_utf8_lossy(value).into_owned(),
            _ => {}
        }
    }
    format!("{code}: {message}")
}

/// StartupMessage, protocol 3.0.
pub fn startup_message(user: &str, database: &str) -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    for (key, value) in [("user", user), ("database", database)] {
        body.extend_from_slice(key.as_bytes());
        body.push(0);
        body.extend_from_slice(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut message = u32::try_from(body.len() + 4).unwrap_or(u32::MAX).to_be_bytes().to_vec();
    message.extend_from_slice(&body);
    message
}

/// Query (simple protocol).
pub fn query_message(sql: &str) -> Vec<u8> {
    let mut message = vec![b'Q'];
    message.extend_from_slice(&u32::try_from(sql.len() + 5).unwrap_or(u32::MAX).to_be_bytes());
    message.extend_from_slice(sql.as_bytes());
    message.push(0);
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn startup_and_query_bytes() {
        let startup = startup_message("u", "db");
        assert_eq!(startup, b"\0\0\0\x1c\0\x03\0\0user\0u\0database\0db\0\0");
        assert_eq!(query_message("select 1"), b"Q\0\0\0\x0dselect 1\0");
    }

    #[test]
    fn messages_are_split_only_when_whole() {
        let ready = b"Z\0\0\0\x05I";
        assert_eq!(next_message(ready), Ok(Some((b'Z', 6))));
        assert_eq!(next_message(&ready[..5]), Ok(None));
        assert_eq!(next_message(&ready[..3]), Ok(None));
        let mut two = b"R\0\0\0\x08\0\0\0\0".to_vec();
        two.extend_from_slice(ready);
        assert_eq!(next_message(&two), Ok(Some((b'R', 9))));
        assert!(next_message(b"Z\0\0\0\x02").is_err());
    }

    #[test]
    fn error_fields() {
        let body = b"SFATAL\0VFATAL\0C53300\0Msorry, too many clients already\0\0";
        assert_eq!(error_text(body), "53300: sorry, too many clients already");
        assert_eq!(error_text(b"\0"), "?????: ");
    }
}
