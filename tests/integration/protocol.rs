//! The wire, byte by byte: start-up negotiation, pipelining, Flush-based units, FunctionCall, and what
//! pgmux does with malformed or oversized input.

use std::net::SocketAddr;
use std::time::Duration;

use pgmux_testkit::wire::{cstr, msg};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{self, scalar};

/// A start-up packet with `version` and `params`.
pub fn startup(version: u32, params: &[(&str, &str)]) -> Vec<u8> {
    let mut body = version.to_be_bytes().to_vec();
    for (k, v) in params {
        body.extend(cstr(k));
        body.extend(cstr(v));
    }
    body.push(0);
    let mut v = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    v.extend(body);
    v
}

const V3_0: u32 = 3 << 16;

/// A hand-driven client for a pgmux with `client_auth = "trust"`.
pub struct RawClient {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl RawClient {
    /// Opens a connection without sending anything.
    pub async fn open(addr: SocketAddr) -> RawClient {
        RawClient { stream: TcpStream::connect(addr).await.unwrap(), buf: Vec::new() }
    }

    /// Connects and logs in as the application user; returns after the first ReadyForQuery.
    pub async fn connect(addr: SocketAddr) -> RawClient {
        let mut c = RawClient::open(addr).await;
        c.send(&startup(V3_0, &[("user", "pgmux_app"), ("database", "pgmux")])).await;
        let login = c.until_ready().await;
        assert_eq!(login.first().map(|m| m.0), Some(b'R'), "{login:?}");
        c
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    pub async fn send_query(&mut self, sql: &str) {
        self.send(&msg(b'Q', &cstr(sql))).await;
    }

    /// The next message, or `None` when the connection closes.
    pub async fn next(&mut self) -> Option<(u8, Vec<u8>)> {
        loop {
            if self.buf.len() >= 5 {
                let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
                if self.buf.len() > len {
                    let m: Vec<u8> = self.buf.drain(..=len).collect();
                    return Some((m[0], m[5..].to_vec()));
                }
            }
            // On the heap: a 64 KiB array held across this await would sit in every caller's future.
            self.buf.reserve(65536);
            let n = tokio::time::timeout(Duration::from_secs(10), self.stream.read_buf(&mut self.buf))
                .await
                .expect("pgmux answered within 10 s")
                .unwrap_or(0);
            if n == 0 {
                return None;
            }
        }
    }

    /// Reads one raw byte (the answer to an encryption request).
    pub async fn byte(&mut self) -> u8 {
        let mut b = [0u8; 1];
        self.stream.read_exact(&mut b).await.unwrap();
        b[0]
    }

    /// Messages up to and including the next ReadyForQuery.
    pub async fn until_ready(&mut self) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(m) = self.next().await {
            let done = m.0 == b'Z';
            out.push(m);
            if done {
                return out;
            }
        }
        panic!("connection closed before ReadyForQuery: {out:?}")
    }

    /// Messages until the connection closes.
    pub async fn until_closed(&mut self) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(m) = self.next().await {
            out.push(m);
        }
        out
    }
}

fn tags(msgs: &[(u8, Vec<u8>)]) -> String {
    msgs.iter().map(|m| m.0 as char).collect()
}

/// The SQLSTATE of an ErrorResponse body.
fn sqlstate(body: &[u8]) -> String {
    let mut fields = body.split(|&b| b == 0);
    fields.find(|f| f.first() == Some(&b'C')).map(|f| String::from_utf8_lossy(&f[1..]).into_owned()).unwrap_or_default()
}

async fn trust() -> common::Fixture {
    common::start("client_auth = \"trust\"\npool_max = 1").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encryption_requests_are_refused_with_n_and_the_session_goes_on() {
    let fx = trust().await;
    let mut c = RawClient::open(fx.addr()).await;
    c.send(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30]).await; // GSSENCRequest
    assert_eq!(c.byte().await, b'N');
    c.send(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]).await; // SSLRequest
    assert_eq!(c.byte().await, b'N');
    c.send(&startup(V3_0, &[("user", "pgmux_app"), ("database", "pgmux")])).await;
    let login = c.until_ready().await;
    let key = login.iter().find(|m| m.0 == b'K').expect("BackendKeyData");
    let pid = i32::from_be_bytes([key.1[0], key.1[1], key.1[2], key.1[3]]);
    assert!(pid > 0, "pid {pid} must be positive");
    assert!(login.iter().any(|m| m.0 == b'S' && m.1.starts_with(b"server_version\0")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_protocol_versions_and_options_are_negotiated_down() {
    let fx = trust().await;
    let mut c = RawClient::open(fx.addr()).await;
    c.send(&startup((3 << 16) | 2, &[("user", "pgmux_app"), ("database", "pgmux"), ("_pq_.frob", "1")])).await;
    let first = c.next().await.unwrap();
    assert_eq!(first.0, b'v', "NegotiateProtocolVersion first");
    let mut expected = 0i32.to_be_bytes().to_vec();
    expected.extend(1i32.to_be_bytes());
    expected.extend(cstr("_pq_.frob"));
    assert_eq!(first.1, expected);
    c.until_ready().await;
    c.send_query("select 1").await;
    assert_eq!(tags(&c.until_ready().await), "TDCZ");

    // Older versions are refused (in the old format they read: see
    // `unsupported_protocol_codes_get_the_answer_postgresql_gives`).
    let (_, refused) = answer(fx.addr(), &[startup(2 << 16, &[("user", "pgmux_app")])]).await;
    assert!(refused.starts_with(b"EFATAL:  unsupported frontend protocol 2.0"), "{refused:?}");
}

/// What a server sends after `packets` until it closes the connection: the one-byte answers to every packet
/// but the last (encryption requests), then the rest.
async fn answer(addr: SocketAddr, packets: &[Vec<u8>]) -> (Vec<u8>, Vec<u8>) {
    let mut c = TcpStream::connect(addr).await.unwrap();
    let mut bytes = Vec::new();
    for (i, p) in packets.iter().enumerate() {
        c.write_all(p).await.unwrap();
        if i + 1 < packets.len() {
            bytes.push(c.read_u8().await.unwrap());
        }
    }
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut rest)).await.expect("closed in 10 s").unwrap();
    (bytes, rest)
}

/// An ErrorResponse's fields by their code, or the whole answer if it is not one.
fn fields(answer: &[u8]) -> Vec<(u8, String)> {
    if answer.len() < 5 || answer[0] != b'E' || answer[1] != 0 {
        return vec![(b'?', String::from_utf8_lossy(answer).into_owned())];
    }
    answer[5..]
        .split(|&b| b == 0)
        .filter(|f| !f.is_empty())
        .map(|f| (f[0], String::from_utf8_lossy(&f[1..]).into_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_protocol_codes_get_the_answer_postgresql_gives() {
    let fx = trust().await;
    let real: SocketAddr = format!("{}:{}", fx.pg.host(), fx.pg.port()).parse().unwrap();
    let ssl_request = vec![0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    let mut cases: Vec<Vec<Vec<u8>>> = [0, 5, 1 << 16, 2 << 16, (2 << 16) | 5, 4 << 16, (1234 << 16) | 5681, u32::MAX]
        .into_iter()
        .map(|code| vec![startup(code, &[("user", "pgmux_app")])])
        .collect();
    // What follows an unknown code is never read: it need not parse.
    cases.push(vec![b"\x00\x00\x00\x10GARBAGEGARBAGE!".to_vec()]);
    // A second SSLRequest after the first was refused is an unknown code too (1234.5679).
    cases.push(vec![ssl_request.clone(), ssl_request]);
    for packets in &cases {
        let (their_bytes, theirs) = answer(real, packets).await;
        let (our_bytes, ours) = answer(fx.addr(), packets).await;
        assert_eq!(our_bytes, their_bytes, "SSLRequests answered alike");
        if theirs.starts_with(b"EFATAL:  ") {
            // The old format a client of protocol 1 or 2 reads: the same bytes.
            assert_eq!(String::from_utf8_lossy(&ours), String::from_utf8_lossy(&theirs));
        } else {
            // The same fields, less the source file, line and routine PostgreSQL names.
            let theirs: Vec<_> = fields(&theirs).into_iter().filter(|(code, _)| !b"FLR".contains(code)).collect();
            assert_eq!(fields(&ours), theirs);
            assert!(theirs.contains(&(b'C', "0A000".into())), "{theirs:?}");
        }
    }
    // GSSAPI cannot be compared (PostgreSQL offers it): a second GSSENCRequest after pgmux refused the first
    // is refused as PostgreSQL refuses any request it already answered.
    let gss = vec![0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30];
    let mut c = RawClient::open(fx.addr()).await;
    c.send(&gss).await;
    assert_eq!(c.byte().await, b'N');
    c.send(&gss).await;
    let got = c.until_closed().await;
    assert_eq!(sqlstate(&got[0].1), "0A000");
    assert!(String::from_utf8_lossy(&got[0].1).contains("unsupported frontend protocol 1234.5680"), "{got:?}");
    // pgmux goes on serving.
    let mut c = RawClient::connect(fx.addr()).await;
    c.send_query("select 1").await;
    assert_eq!(tags(&c.until_ready().await), "TDCZ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_oversized_input_get_08p01_and_pgmux_keeps_serving() {
    let fx = trust().await;
    // A start-up packet that does not parse.
    let mut c = RawClient::open(fx.addr()).await;
    c.send(&[&16u32.to_be_bytes()[..], &V3_0.to_be_bytes(), b"GARBAGE!"].concat()).await;
    let got = c.until_closed().await;
    assert_eq!(tags(&got), "E");
    assert_eq!(sqlstate(&got[0].1), "08P01");
    // A start-up length of 2 GiB.
    let mut c = RawClient::open(fx.addr()).await;
    c.send(b"\x7f\xff\xff\xff").await;
    assert_eq!(sqlstate(&c.until_closed().await[0].1), "08P01");
    // After login: a Sync claiming 1 MB, then an unknown message type.
    for bad in [&b"S\x00\x10\x00\x00"[..], b"Z\x00\x00\x00\x05I", b"Q\x00\x00\x00\x02"] {
        let mut c = RawClient::connect(fx.addr()).await;
        c.send(bad).await;
        let got = c.until_closed().await;
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(sqlstate(&got[0].1), "08P01");
    }
    // Half a message, then the client goes away mid-transaction.
    let mut c = RawClient::connect(fx.addr()).await;
    c.send_query("begin").await;
    c.until_ready().await;
    c.send(b"Q\x00\x00\x01\x00select").await;
    drop(c);
    // Still serving, and the single server connection came back clean.
    let ok = fx.client().await;
    assert_eq!(scalar(&ok, "select 'alive'").await, "alive");
    assert_eq!(scalar(&ok, "select now() = statement_timestamp()").await, "t", "not inside a transaction");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_queries_and_extended_units_are_answered_in_order() {
    let fx = trust().await;
    let mut c = RawClient::connect(fx.addr()).await;
    let mut batch = Vec::new();
    for i in 1..=3 {
        batch.extend(msg(b'Q', &cstr(&format!("select {i}"))));
    }
    c.send(&batch).await;
    for i in 1..=3 {
        let got = c.until_ready().await;
        assert_eq!(tags(&got), "TDCZ");
        assert_eq!(&got[1].1[6..], i.to_string().as_bytes());
    }
    // Three extended-protocol units with the unnamed statement, pipelined.
    let mut batch = Vec::new();
    for i in 1..=3 {
        batch.extend(msg(b'P', &[cstr(""), cstr(&format!("select {i}0")), vec![0, 0]].concat()));
        batch.extend(msg(b'B', &[cstr(""), cstr(""), vec![0, 0, 0, 0, 0, 0]].concat()));
        batch.extend(msg(b'E', &[cstr(""), vec![0, 0, 0, 0]].concat()));
        batch.extend(msg(b'S', &[]));
    }
    c.send(&batch).await;
    for i in 1..=3 {
        let got = c.until_ready().await;
        assert_eq!(tags(&got), "12DCZ");
        assert_eq!(&got[2].1[6..], format!("{i}0").as_bytes());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_based_prepare_keeps_its_server_across_round_trips() {
    let fx = trust().await;
    // Another client keeps the single server connection busy whenever it is free.
    let addr = fx.addr();
    let noise = tokio::spawn(async move {
        let c = common::connect(addr, &pgmux_testkit::APP_USER, |_| {}).await.unwrap();
        loop {
            if c.simple_query("select 1").await.is_err() {
                return;
            }
        }
    });
    let mut c = RawClient::connect(fx.addr()).await;
    for round in 0..50 {
        // asyncpg's shape: Parse + Describe + Flush, wait, then Bind + Execute + Sync.
        let sql = format!("select {round}::int4 + $1::int4");
        let mut first = msg(b'P', &[cstr(""), cstr(&sql), vec![0, 0]].concat());
        first.extend(msg(b'D', &[vec![b'S'], cstr("")].concat()));
        first.extend(msg(b'H', &[]));
        c.send(&first).await;
        assert_eq!(c.next().await.unwrap().0, b'1');
        assert_eq!(c.next().await.unwrap().0, b't');
        assert_eq!(c.next().await.unwrap().0, b'T');
        tokio::time::sleep(Duration::from_millis(2)).await;
        let mut second = msg(b'B', &[cstr(""), cstr(""), vec![0, 0, 0, 1, 0, 0, 0, 1, b'1', 0, 0]].concat());
        second.extend(msg(b'E', &[cstr(""), vec![0, 0, 0, 0]].concat()));
        second.extend(msg(b'S', &[]));
        c.send(&second).await;
        let got = c.until_ready().await;
        assert_eq!(tags(&got), "2DCZ", "round {round}: {got:?}");
        assert_eq!(&got[1].1[6..], (round + 1).to_string().as_bytes());
    }
    noise.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_call_empty_query_and_lone_sync() {
    let fx = trust().await;
    let direct = common::direct(&fx.pg).await;
    let oid: u32 = direct.query_one("select 'int4pl'::regproc::oid", &[]).await.unwrap().get(0);
    let mut c = RawClient::connect(fx.addr()).await;
    // FunctionCall int4pl(40, 2) with binary arguments and a binary result.
    let mut body = oid.to_be_bytes().to_vec();
    body.extend([0, 1, 0, 1]); // one argument format: binary
    body.extend([0, 2]); // two arguments
    for v in [40i32, 2] {
        body.extend(4i32.to_be_bytes());
        body.extend(v.to_be_bytes());
    }
    body.extend([0, 1]); // result format: binary
    c.send(&msg(b'F', &body)).await;
    let got = c.until_ready().await;
    assert_eq!(tags(&got), "VZ");
    assert_eq!(got[0].1, [0, 0, 0, 4, 0, 0, 0, 42]);
    c.send_query("").await;
    assert_eq!(tags(&c.until_ready().await), "IZ");
    c.send(&msg(b'S', &[])).await;
    assert_eq!(tags(&c.until_ready().await), "Z");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_ends_the_session_cleanly() {
    let fx = trust().await;
    let mut c = RawClient::connect(fx.addr()).await;
    c.send_query("begin").await;
    c.until_ready().await;
    c.send(&msg(b'X', &[])).await;
    assert!(c.until_closed().await.is_empty());
    let ok = fx.client().await;
    assert_eq!(scalar(&ok, "select now() = statement_timestamp()").await, "t", "the transaction was rolled back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_name_over_postgresqls_describe_limit_is_renamed_and_a_portal_name_refused() {
    let fx = trust().await;
    let mut c = RawClient::connect(fx.addr()).await;
    c.send_query("select pg_backend_pid()").await;
    let pid = c.until_ready().await[1].1[6..].to_vec();
    // 16 KiB: a Describe or Close naming it is over PostgreSQL's 10,000-byte limit for those messages.
    let name = "a".repeat(16 * 1024);
    let mut unit = msg(b'P', &[cstr(&name), cstr("select $1::text"), vec![0, 0]].concat());
    unit.extend(msg(b'D', &[vec![b'S'], cstr(&name)].concat()));
    unit.extend(msg(
        b'B',
        &[cstr(""), cstr(&name), vec![0, 0, 0, 1, 0, 0, 0, 3], b"abc".to_vec(), vec![0, 0]].concat(),
    ));
    unit.extend(msg(b'E', &[cstr(""), vec![0, 0, 0, 0]].concat()));
    unit.extend(msg(b'C', &[vec![b'S'], cstr(&name)].concat()));
    unit.extend(msg(b'S', &[]));
    c.send(&unit).await;
    let got = c.until_ready().await;
    assert_eq!(tags(&got), "1tT2DC3Z", "{got:?}");
    assert_eq!(&got[4].1[6..], b"abc");
    // A portal keeps its name towards the server, where PostgreSQL would end the connection over it: pgmux
    // refuses it in its turn instead, and the session (and its server) go on.
    let mut unit = msg(b'D', &[vec![b'P'], cstr(&name)].concat());
    unit.extend(msg(b'S', &[]));
    c.send(&unit).await;
    let got = c.until_ready().await;
    assert_eq!(tags(&got), "EZ", "{got:?}");
    assert_eq!(sqlstate(&got[0].1), "54000");
    c.send_query("select pg_backend_pid()").await;
    let got = c.until_ready().await;
    assert_eq!(tags(&got), "TDCZ", "{got:?}");
    assert_eq!(got[1].1[6..], pid[..], "the server connection survived");
}
