//! The floor under pgmux's instructions per new connection: the least a pooler on tokio does to take a client
//! in, with no pooling logic beyond a stack of logged-in server connections. Same runtime as pgmux's (tokio,
//! one thread, I/O only) and the same allocator (jemalloc). Per client it:
//!
//! - accepts the connection and spawns a task for it;
//! - answers an SSLRequest with `N` and reads the start-up packet, checking nothing in it;
//! - sends the greeting PostgreSQL gave its first server connection (AuthenticationOk, the ParameterStatus
//!   block, BackendKeyData, ReadyForQuery), copied as it was read;
//! - takes a server connection off the stack (logging one in if there is none) and relays bytes both ways
//!   until the client sends Terminate or goes away, then puts the server connection back.
//!
//! No authentication, no parameters matched, no transactions followed, no statements tracked, no metrics, no
//! timers: what is left is tokio's accept, registration, task and socket reads and writes, and the kernel's
//! calls. `benches/scripts/callgrind_per_tx.py --pgmux target/release/examples/floor_login --reconnect`
//! counts it the way it counts pgmux (it reads `PGMUX_LISTEN` and `PGMUX_DATABASE_URL`, as pgmux does; the
//! database must let its user in without a password, as the script's does).
//!
//!   cargo build --release -p pgmux-benches --example floor_login

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Where the server is and as whom to log in.
struct Server {
    addr: String,
    user: String,
    database: String,
}

/// `user`, `host:port` and the database of a `postgres://user@host:port/db?...` URL.
fn server(url: &str) -> Option<Server> {
    let rest = url.strip_prefix("postgres://").or_else(|| url.strip_prefix("postgresql://"))?;
    let (user, rest) = rest.split_once('@')?;
    let (addr, rest) = rest.split_once('/')?;
    let database = rest.split('?').next()?;
    Some(Server { addr: addr.to_string(), user: user.to_string(), database: database.to_string() })
}

/// Logs a server connection in; returns it and what the server sent from AuthenticationOk to ReadyForQuery.
async fn log_in(server: &Server) -> std::io::Result<(TcpStream, Vec<u8>)> {
    let mut conn = TcpStream::connect(&server.addr).await?;
    conn.set_nodelay(true)?;
    let mut body = 196_608_u32.to_be_bytes().to_vec();
    for (k, v) in [("user", &server.user), ("database", &server.database)] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut packet = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    packet.extend_from_slice(&body);
    conn.write_all(&packet).await?;
    let mut greeting = Vec::new();
    loop {
        let mut head = [0u8; 5];
        conn.read_exact(&mut head).await?;
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut rest = vec![0u8; len.saturating_sub(4)];
        conn.read_exact(&mut rest).await?;
        if head[0] == b'E' {
            return Err(std::io::Error::other("the server refused the login"));
        }
        greeting.extend_from_slice(&head);
        greeting.extend_from_slice(&rest);
        if head[0] == b'Z' {
            return Ok((conn, greeting));
        }
    }
}

/// Reads the client's start-up packet (after an SSLRequest, answered `N`). `false` if the client went away.
async fn read_startup(client: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    loop {
        let mut len = [0u8; 4];
        if client.read_exact(&mut len).await.is_err() {
            return Ok(false);
        }
        let len = u32::from_be_bytes(len) as usize;
        if !(8..=10_000).contains(&len) {
            return Ok(false);
        }
        buf.resize(len - 4, 0);
        client.read_exact(buf).await?;
        if buf[..4] == 80_877_103_u32.to_be_bytes() {
            client.write_all(b"N").await?;
            continue;
        }
        return Ok(true);
    }
}

/// One client: greeted with the stored greeting, then relayed to a server connection from the stack.
async fn serve(mut client: TcpStream, server: Arc<Server>, greeting: Arc<Vec<u8>>, idle: Arc<Mutex<Vec<TcpStream>>>) {
    let _ = client.set_nodelay(true);
    let mut buf = Vec::with_capacity(8192);
    if !matches!(read_startup(&mut client, &mut buf).await, Ok(true)) || client.write_all(&greeting).await.is_err() {
        return;
    }
    let taken = idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
    let mut conn = match taken {
        Some(conn) => conn,
        None => match log_in(&server).await {
            Ok((conn, _)) => conn,
            Err(_) => return,
        },
    };
    let mut from_server = Vec::with_capacity(8192);
    loop {
        buf.clear();
        from_server.clear();
        tokio::select! {
            read = client.read_buf(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                // Terminate: the client is done; the server connection goes back, as a pooler's would.
                Ok(_) if buf[0] == b'X' => break,
                Ok(_) => if conn.write_all(&buf).await.is_err() { return },
            },
            read = conn.read_buf(&mut from_server) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => if client.write_all(&from_server).await.is_err() { break },
            },
        }
    }
    idle.lock().unwrap_or_else(|e| e.into_inner()).push(conn);
}

fn main() -> std::io::Result<()> {
    let (Ok(listen), Some(server)) =
        (std::env::var("PGMUX_LISTEN"), std::env::var("PGMUX_DATABASE_URL").ok().as_deref().and_then(server))
    else {
        return Err(std::io::Error::other("set PGMUX_LISTEN and PGMUX_DATABASE_URL (postgres://user@host:port/db)"));
    };
    let server = Arc::new(server);
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
    rt.block_on(async move {
        let (first, greeting) = log_in(&server).await?;
        let greeting = Arc::new(greeting);
        let idle = Arc::new(Mutex::new(vec![first]));
        let listener = TcpListener::bind(&listen).await?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        loop {
            let (client, _) = tokio::select! {
                accepted = listener.accept() => accepted?,
                _ = term.recv() => return Ok(()),
            };
            tokio::spawn(serve(client, Arc::clone(&server), Arc::clone(&greeting), Arc::clone(&idle)));
        }
    })
}
