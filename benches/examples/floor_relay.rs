//! The floor under pgmux's instructions per transaction: a relay on the same runtime (tokio, one thread, I/O
//! and no time driver, as pgmux's relay runs) with no pooling logic at all. Each client gets its own
//! PostgreSQL connection and one task that copies bytes both ways (`tokio::io::copy_bidirectional`): no
//! framing, no routing, no clocks, no metrics.
//!
//! It takes the `--config FILE` that `benches/scripts/instructions-per-tx.sh` passes to pgmux and reads
//! only `listen` and the host and port of `database_url` from it, so the script counts it the same way:
//!
//!   cargo build --release -p pgmux-benches --example floor_relay
//!   benches/scripts/instructions-per-tx.sh target/release/examples/floor_relay target/release/pgmux
//!
//! Without `--config` it reads `PGMUX_LISTEN` and `PGMUX_DATABASE_URL`, as `benches/scripts/callgrind_per_tx.py`
//! sets them, so that script counts it too (`--pgmux target/release/examples/floor_relay`); with `--reconnect`,
//! that is the floor under a new connection (docs/benchmarks.md).
//!
//! `FLOOR_TIMERS=wheel` gives its runtime tokio's time driver with an empty wheel, and `FLOOR_TIMERS=tick`
//! one timer always pending (a 1 s interval), which is what pgmux's relay paid for before its timers moved to
//! a thread of their own (docs/benchmarks.md, "The time driver off the relay's thread").

use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// The value of `key = "value"` in a TOML file's top level (enough for the script's file).
fn setting(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
    })
}

/// `host:port` of a `postgres://user@host:port/db?...` URL.
fn upstream(url: &str) -> Option<String> {
    let rest = url.split_once('@')?.1;
    Some(rest.split(['/', '?']).next()?.to_string())
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (listen, url) = match args.iter().position(|a| a == "--config") {
        Some(i) if i + 1 < args.len() => {
            let text = std::fs::read_to_string(&args[i + 1])?;
            (setting(&text, "listen"), setting(&text, "database_url"))
        }
        // As `benches/scripts/callgrind_per_tx.py` starts pgmux: its two settings from the environment.
        _ => (std::env::var("PGMUX_LISTEN").ok(), std::env::var("PGMUX_DATABASE_URL").ok()),
    };
    let (Some(listen), Some(url)) = (listen, url) else {
        return Err(std::io::Error::other(
            "usage: floor_relay --config FILE (with listen and database_url), or PGMUX_LISTEN and PGMUX_DATABASE_URL set",
        ));
    };
    let Some(server) = upstream(&url) else {
        return Err(std::io::Error::other("database_url has no host:port"));
    };
    let timers = std::env::var("FLOOR_TIMERS").unwrap_or_default();
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_io();
    if timers == "wheel" || timers == "tick" {
        builder.enable_time();
    }
    let rt = builder.build()?;
    rt.block_on(async move {
        let listener = TcpListener::bind(&listen).await?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        if timers == "tick" {
            tokio::spawn(async {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                }
            });
        }
        loop {
            let (mut client, _) = tokio::select! {
                accepted = listener.accept() => accepted?,
                _ = term.recv() => return Ok(()),
            };
            let server = server.clone();
            tokio::spawn(async move {
                let _ = client.set_nodelay(true);
                let Ok(mut conn) = TcpStream::connect(&server).await else { return };
                let _ = conn.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut client, &mut conn).await;
            });
        }
    })
}
