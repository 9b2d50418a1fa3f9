//! A fake PostgreSQL for unit tests of the server pool: it logs anyone in (reporting its role as PostgreSQL
//! 14 and later do), answers every simple query with an empty result and every Sync, counts its connections, and can refuse
//! logins the way a full server does (FATAL 53300, or any other code), pose as a hot standby, or hang (take
//! every packet and answer none, as a stopped server does).
//! The real server is for the integration tests; this one makes the pool's rules testable in milliseconds.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::BytesMut;
use pgmux_proto::encode::{self, ErrorMessage};
use pgmux_proto::{TxStatus, sqlstate};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::config::Config;

#[derive(Debug, Default)]
struct Counters {
    refuse: AtomicBool,
    /// Refuse logins with this SQLSTATE instead of 53300 (0: 53300).
    refuse_code: std::sync::Mutex<Option<&'static str>>,
    standby: AtomicBool,
    hung: AtomicBool,
    /// Milliseconds each login takes.
    login_delay_ms: AtomicUsize,
    accepted: AtomicUsize,
    open: AtomicUsize,
    queries: AtomicUsize,
}

/// A fake server on a loopback port, until dropped.
#[derive(Debug)]
pub(crate) struct FakeServer {
    addr: SocketAddr,
    counters: Arc<Counters>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeServer {
    pub(crate) async fn start() -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let addr = listener.local_addr().expect("bound address");
        let counters = Arc::new(Counters::default());
        let shared = Arc::clone(&counters);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&shared)));
            }
        });
        FakeServer { addr, counters, task }
    }

    /// A configuration for pgmux in front of it: trust everywhere, `extra` TOML appended.
    pub(crate) fn config(&self, extra: &str) -> Config {
        let text = format!(
            "database_url = \"postgres://app@{}/db?sslmode=disable\"\nclient_auth = \"trust\"\n{extra}\n",
            self.addr
        );
        Config::from_toml_str(&text).expect("test configuration")
    }

    /// From now on, refuse (or accept again) every login with FATAL 53300.
    pub(crate) fn refuse_logins(&self, refuse: bool) {
        self.counters.refuse.store(refuse, Ordering::SeqCst);
    }

    /// From now on, refuse every login with FATAL `code` (a fix-needing error such as 3D000, say).
    pub(crate) fn refuse_logins_with(&self, code: &'static str) {
        *self.counters.refuse_code.lock().unwrap_or_else(|e| e.into_inner()) = Some(code);
        self.refuse_logins(true);
    }

    /// From now on, report itself as a hot standby at login.
    pub(crate) fn be_standby(&self, standby: bool) {
        self.counters.standby.store(standby, Ordering::SeqCst);
    }

    /// From now on, take `ms` milliseconds over each login (a database across a network, with TLS).
    pub(crate) fn slow_logins(&self, ms: usize) {
        self.counters.login_delay_ms.store(ms, Ordering::SeqCst);
    }

    /// From now on, answer nothing (or answer again): logins and queries wait until it is resumed.
    pub(crate) fn hang(&self, hung: bool) {
        self.counters.hung.store(hung, Ordering::SeqCst);
    }

    /// Connections open now.
    pub(crate) fn open(&self) -> usize {
        self.counters.open.load(Ordering::SeqCst)
    }

    /// Logins accepted so far.
    pub(crate) fn accepted(&self) -> usize {
        self.counters.accepted.load(Ordering::SeqCst)
    }

    /// Simple queries and Syncs answered so far.
    pub(crate) fn queries(&self) -> usize {
        self.counters.queries.load(Ordering::SeqCst)
    }
}

/// Counts a connection as open for as long as it lives.
struct OpenGuard(Arc<Counters>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn serve(mut stream: TcpStream, counters: Arc<Counters>) {
    counters.open.fetch_add(1, Ordering::SeqCst);
    let _guard = OpenGuard(Arc::clone(&counters));
    let Ok(len) = stream.read_u32().await else { return };
    let mut startup = vec![0u8; (len as usize).saturating_sub(4)];
    if stream.read_exact(&mut startup).await.is_err() {
        return;
    }
    hold_while_hung(&counters).await;
    let delay = counters.login_delay_ms.load(Ordering::SeqCst) as u64;
    if delay > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
    }
    let mut out = BytesMut::new();
    if counters.refuse.load(Ordering::SeqCst) {
        let code =
            counters.refuse_code.lock().unwrap_or_else(|e| e.into_inner()).unwrap_or(sqlstate::TOO_MANY_CONNECTIONS);
        let refusal = ErrorMessage::fatal(code, "refused by the fake server");
        out.extend_from_slice(&refusal.to_bytes());
        let _ = stream.write_all(&out).await;
        return;
    }
    counters.accepted.fetch_add(1, Ordering::SeqCst);
    encode::auth_ok(&mut out);
    encode::parameter_status(&mut out, "server_version", "15.0 (fake)");
    encode::parameter_status(&mut out, "TimeZone", "UTC");
    let standby = if counters.standby.load(Ordering::SeqCst) { "on" } else { "off" };
    encode::parameter_status(&mut out, "in_hot_standby", standby);
    encode::parameter_status(&mut out, "default_transaction_read_only", "off");
    encode::backend_key_data(&mut out, 4242, 7);
    encode::ready_for_query(&mut out, TxStatus::Idle);
    if stream.write_all(&out).await.is_err() {
        return;
    }
    loop {
        let Ok(tag) = stream.read_u8().await else { return };
        let Ok(len) = stream.read_u32().await else { return };
        let mut body = vec![0u8; (len as usize).saturating_sub(4)];
        if stream.read_exact(&mut body).await.is_err() || tag == b'X' {
            return;
        }
        // A Sync (pgmux's liveness check) is answered like a query, and counted with them.
        if tag == b'Q' || tag == b'S' {
            hold_while_hung(&counters).await;
            counters.queries.fetch_add(1, Ordering::SeqCst);
            let mut reply = BytesMut::new();
            if tag == b'Q' {
                reply.extend_from_slice(&[b'I', 0, 0, 0, 4]);
            }
            encode::ready_for_query(&mut reply, TxStatus::Idle);
            if stream.write_all(&reply).await.is_err() {
                return;
            }
        }
    }
}

/// Waits for as long as the server is told to hang.
async fn hold_while_hung(counters: &Counters) {
    while counters.hung.load(Ordering::SeqCst) {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}
