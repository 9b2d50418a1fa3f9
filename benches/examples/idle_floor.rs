//! The floor under W6 (idle clients' memory): a server on the same runtime (tokio, one thread) and the same
//! allocator (jemalloc) as pgmux, holding each client in a task of its own that does nothing but wait to
//! read, as an idle pgmux client does. It answers its first read with AuthenticationOk and ReadyForQuery,
//! and every later read with ReadyForQuery, without parsing anything: enough for a W6 driver, which logs in,
//! runs `select 1` and reads until a ReadyForQuery each time (the extra ones stay unread in the socket).
//!
//! What it holds per client is what tokio itself costs per idle socket and task: no session, no buffers,
//! no console entry, no cancel key. docs/benchmarks.md ("W6 and 12 MiB") measures it beside pgmux:
//!
//!   cargo build --release -p pgmux-benches --example idle_floor
//!   PGMUX_LISTEN=127.0.0.1:6433 target/release/examples/idle_floor

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// AuthenticationOk, then ReadyForQuery (idle).
const GREETING: &[u8] = &[b'R', 0, 0, 0, 8, 0, 0, 0, 0, b'Z', 0, 0, 0, 5, b'I'];
const READY: &[u8] = &[b'Z', 0, 0, 0, 5, b'I'];

/// One client: its socket and a 16-byte buffer inside its future, nothing else (with 64 bytes the task
/// is one of jemalloc's size classes larger, 384 bytes instead of 256).
async fn client(mut stream: TcpStream) {
    let mut buf = [0u8; 16];
    let mut reply = GREETING;
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if stream.write_all(reply).await.is_err() {
            return;
        }
        reply = READY;
    }
}

fn main() -> std::io::Result<()> {
    let listen = std::env::var("PGMUX_LISTEN").unwrap_or_else(|_| "127.0.0.1:6433".to_owned());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let listener = TcpListener::bind(&listen).await?;
        loop {
            let (stream, _) = listener.accept().await?;
            tokio::spawn(client(stream));
        }
    })
}
