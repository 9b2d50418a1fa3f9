//! A fake PostgreSQL for unit tests of the server pool and the session, so that their rules are testable in
//! milliseconds with no real server. It logs anyone in (reporting its role as PostgreSQL 14 and later do,
//! and a cancel key of its own per connection), and speaks the simple and the extended protocol: each
//! statement gets what PostgreSQL would say to its kind (a tag; BEGIN, COMMIT and ROLLBACK move the
//! transaction status, and a failed transaction refuses the rest), unless a test scripted a [`Reply`] for
//! text it contains (rows, an error, a FATAL, a closed socket, a reply held until released or cancelled).
//!
//! It can refuse logins the way a full server does (FATAL 53300, or any other code), pose as a hot standby,
//! hang (take every packet and answer none, as a stopped server does), take its time over logins, stop
//! reading the connections it has, and end them all (a restart). It records what it was sent and the cancel requests it got, and a test
//! can wait for either ([`FakeServer::until`]) without sleeping. No timer runs unless a test asks for slow
//! logins, so paused-time tests stay exact.

mod conn;
mod script;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use pgmux_proto::sqlstate;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::Config;
pub(crate) use script::Reply;
use script::Rule;

/// Everything the fake's connections and its tests share.
#[derive(Debug, Default)]
struct State {
    refuse: bool,
    /// Refuse logins with this SQLSTATE instead of 53300.
    refuse_code: Option<&'static str>,
    standby: bool,
    hung: bool,
    /// Milliseconds each login takes.
    login_delay_ms: u64,
    accepted: usize,
    open: usize,
    queries: usize,
    /// Connections begun so far; each is numbered from 1 in that order.
    begun: usize,
    /// Connections numbered up to this one read nothing more.
    deaf_through: usize,
    /// Connections numbered up to this one are ended by the server (a restart).
    ended_through: usize,
    /// Connections holding a reply, and those among them that a cancel reached.
    holding: BTreeSet<usize>,
    cancelled: BTreeSet<usize>,
    /// How many times held replies were released.
    releases: u64,
    rules: Vec<Rule>,
    /// Every message received after login: the connection's number and the message in short.
    log: Vec<(usize, String)>,
    /// The keys of the cancel requests received, in order.
    cancels: Vec<(i32, i32)>,
}

/// The state, and a signal that it changed (for waits that must not sleep).
#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    changed: watch::Sender<u64>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Reads the state.
    fn read<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&self.lock())
    }

    /// Changes the state, and wakes whoever waits on it.
    fn change<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let r = f(&mut self.lock());
        self.changed.send_modify(|n| *n += 1);
        r
    }

    /// Waits until `cond` holds, looking again at every change.
    async fn until(&self, mut cond: impl FnMut(&State) -> bool) {
        let mut changed = self.changed.subscribe();
        while !self.read(&mut cond) {
            if changed.changed().await.is_err() {
                return;
            }
        }
    }

    /// A cancel request: recorded, and it ends the reply held on the connection with that key, if any.
    fn cancel(&self, pid: i32, secret: i32) {
        self.change(|s| {
            s.cancels.push((pid, secret));
            if let Some(n) = s.holding.iter().copied().find(|n| FakeServer::key(*n) == (pid, secret)) {
                s.cancelled.insert(n);
            }
        });
    }
}

/// A fake server on a loopback port, until dropped.
#[derive(Debug)]
pub(crate) struct FakeServer {
    addr: SocketAddr,
    inner: Arc<Inner>,
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
        let inner = Arc::new(Inner { state: Mutex::default(), changed: watch::Sender::new(0) });
        let shared = Arc::clone(&inner);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(conn::serve(stream, Arc::clone(&shared)));
            }
        });
        FakeServer { addr, inner, task }
    }

    /// A configuration for pgmux in front of it: trust everywhere, `extra` TOML appended.
    pub(crate) fn config(&self, extra: &str) -> Config {
        let text = format!(
            "database_url = \"postgres://app@{}/db?sslmode=disable\"\nclient_auth = \"trust\"\n{extra}\n",
            self.addr
        );
        Config::from_toml_str(&text).expect("test configuration")
    }

    /// The cancel key the fake gives its connection number `n` (numbered from 1 in the order they began).
    pub(crate) fn key(n: usize) -> (i32, i32) {
        let n = i32::try_from(n).unwrap_or(i32::MAX);
        (1000 + n, n.wrapping_mul(7919))
    }

    /// From now on, refuse (or accept again) every login with FATAL 53300.
    pub(crate) fn refuse_logins(&self, refuse: bool) {
        self.inner.change(|s| s.refuse = refuse);
    }

    /// From now on, refuse every login with FATAL `code` (a fix-needing error such as 3D000, say).
    pub(crate) fn refuse_logins_with(&self, code: &'static str) {
        self.inner.change(|s| {
            s.refuse_code = Some(code);
            s.refuse = true;
        });
    }

    /// From now on, report itself as a hot standby at login.
    pub(crate) fn be_standby(&self, standby: bool) {
        self.inner.change(|s| s.standby = standby);
    }

    /// From now on, take `ms` milliseconds over each login (a database across a network, with TLS).
    pub(crate) fn slow_logins(&self, ms: usize) {
        self.inner.change(|s| s.login_delay_ms = ms as u64);
    }

    /// From now on, answer nothing (or answer again): logins and queries wait until it is resumed.
    pub(crate) fn hang(&self, hung: bool) {
        self.inner.change(|s| s.hung = hung);
    }

    /// Answers statements whose text contains `pattern` with `reply`, from now on (the first rule added
    /// that matches wins).
    pub(crate) fn on(&self, pattern: &'static str, reply: Reply) {
        self.inner.change(|s| s.rules.push(Rule { pattern, reply, left: None }));
    }

    /// Answers the next statement whose text contains `pattern` with `reply`, and later ones as before.
    pub(crate) fn on_once(&self, pattern: &'static str, reply: Reply) {
        self.inner.change(|s| s.rules.push(Rule { pattern, reply, left: Some(1) }));
    }

    /// Lets every reply held now go.
    pub(crate) fn release(&self) {
        self.inner.change(|s| s.releases += 1);
    }

    /// The connections open now read nothing more, ever: whatever their peer sends or closes goes unseen.
    pub(crate) fn deafen(&self) {
        self.inner.change(|s| s.deaf_through = s.begun);
    }

    /// Ends every connection open now as PostgreSQL does when it shuts down or an administrator
    /// terminates a backend: FATAL 57P01, then the socket closes, whatever the connection was doing.
    pub(crate) fn terminate_all(&self) {
        self.inner.change(|s| s.ended_through = s.begun);
    }

    /// Connections open now.
    pub(crate) fn open(&self) -> usize {
        self.inner.read(|s| s.open)
    }

    /// Logins accepted so far.
    pub(crate) fn accepted(&self) -> usize {
        self.inner.read(|s| s.accepted)
    }

    /// Simple queries and Syncs answered so far.
    pub(crate) fn queries(&self) -> usize {
        self.inner.read(|s| s.queries)
    }

    /// Every message received after login, as (connection number, the message in short: `Q <sql>`,
    /// `P <sql>` for a Parse, else its tag: `B`, `D`, `E`, `S`, `X`…).
    pub(crate) fn log(&self) -> Vec<(usize, String)> {
        self.inner.read(|s| s.log.clone())
    }

    /// The SQL of every Query and Parse received, with its connection's number.
    pub(crate) fn sql(&self) -> Vec<(usize, String)> {
        let log = self.log();
        let text = |m: &str| m.strip_prefix("Q ").or_else(|| m.strip_prefix("P ")).map(str::to_owned);
        log.into_iter().filter_map(|(n, m)| text(&m).map(|sql| (n, sql))).collect()
    }

    /// The connections that received a Query or Parse whose text contains `pattern`.
    pub(crate) fn ran(&self, pattern: &str) -> Vec<usize> {
        self.sql().into_iter().filter(|(_, sql)| sql.contains(pattern)).map(|(n, _)| n).collect()
    }

    /// The keys of the cancel requests received, in order.
    pub(crate) fn cancels(&self) -> Vec<(i32, i32)> {
        self.inner.read(|s| s.cancels.clone())
    }

    /// Connections holding a reply now.
    pub(crate) fn holding(&self) -> usize {
        self.inner.read(|s| s.holding.len())
    }

    /// Waits up to five seconds for `cond` to hold, looking again whenever the fake's state changes; panics
    /// naming `what` if it does not.
    pub(crate) async fn until(&self, what: &str, mut cond: impl FnMut(&FakeServer) -> bool) {
        let mut changed = self.inner.changed.subscribe();
        let wait = async {
            while !cond(self) {
                let _ = changed.changed().await;
            }
        };
        if pgmux_timer::timeout(Duration::from_secs(5), wait).await.is_err() {
            panic!("the fake server never saw {what}; it got {:?}", self.log());
        }
    }
}

/// The SQLSTATE a refused login gets.
fn refusal(state: &State) -> Option<&'static str> {
    state.refuse.then(|| state.refuse_code.unwrap_or(sqlstate::TOO_MANY_CONNECTIONS))
}
