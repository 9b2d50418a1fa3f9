//! pgmux between hostile peers. Clients send damaged start-up packets and damaged or out-of-order protocol
//! streams to a pgmux in front of a real PostgreSQL; then a fake server answers pgmux's own queries and its
//! clients' with damaged replies, garbage, or a closed socket. Whatever comes, pgmux must not panic (a
//! panic hook counts them, in this test binary of its own), must go on serving, and must leave no server
//! connection inside a transaction. The generator is seeded, so a failure names the round to replay.

use pgmux_testkit::fixture as common;
use pgmux_testkit::wire::{Rng, cstr, msg};

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pgmux_proxy::{Config, Listener};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

static PANICS: AtomicUsize = AtomicUsize::new(0);
/// While set, the fake server lies; cleared, it answers as PostgreSQL would.
static LYING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Counts every panic in this process (pgmux runs in it) and still prints it.
fn count_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        previous(info);
    }));
}

fn startup(params: &[(&str, &str)]) -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    for (k, v) in params {
        body.extend(cstr(k));
        body.extend(cstr(v));
    }
    body.push(0);
    let mut out = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    out.extend(body);
    out
}

/// Damages `bytes` a little: a byte changed, the end cut, a length rewritten, or junk appended.
fn damage(rng: &mut Rng, mut bytes: Vec<u8>) -> Vec<u8> {
    match rng.below(5) {
        0 if !bytes.is_empty() => {
            let i = rng.below(bytes.len());
            bytes[i] = rng.next_u64() as u8;
        }
        1 => bytes.truncate(rng.below(bytes.len() + 1)),
        2 if bytes.len() >= 5 => {
            let len = [0u32, 3, 4, 5, 0x7fff_ffff, 0x0100_0000, bytes.len() as u32 + 7][rng.below(7)];
            bytes[1..5].copy_from_slice(&len.to_be_bytes());
        }
        3 => bytes.extend((0..rng.below(12)).map(|_| rng.next_u64() as u8)),
        _ => bytes = (0..rng.below(24)).map(|_| rng.next_u64() as u8).collect(),
    }
    bytes
}

/// Messages a client may send, valid on their own, in any order.
fn client_message(rng: &mut Rng) -> Vec<u8> {
    let parse = |name: &str, sql: &str| {
        let mut b = cstr(name);
        b.extend(cstr(sql));
        b.extend([0, 0]);
        msg(b'P', &b)
    };
    let bind = |stmt: &str| {
        let mut b = cstr("");
        b.extend(cstr(stmt));
        b.extend([0, 0, 0, 0, 0, 0]);
        msg(b'B', &b)
    };
    match rng.below(22) {
        0 => msg(b'Q', &cstr("select 1")),
        1 => msg(b'Q', &cstr("begin")),
        2 => msg(b'Q', &cstr("commit")),
        3 => msg(b'Q', &cstr("rollback")),
        4 => msg(b'Q', &cstr("select 1/0")),
        5 => msg(b'Q', &cstr("set statement_timeout = '7s'")),
        6 => msg(b'Q', &cstr("copy (select 1) to stdout")),
        7 => msg(b'Q', &cstr("create temp table fz(x int); copy fz from stdin")),
        8 => msg(b'Q', &cstr("")),
        9 => parse("", "select 2"),
        10 => parse("fz1", "select 3"),
        11 => bind(""),
        12 => bind("fz1"),
        13 => msg(b'D', &cstr("Sfz1")),
        14 => msg(b'E', &[0, 0, 0, 0, 0]),
        15 => msg(b'S', b""),
        16 => msg(b'H', b""),
        17 => msg(b'C', &cstr("Sfz1")),
        18 => msg(b'd', b"1\n"),
        19 => msg(b'c', b""),
        20 => msg(b'f', &cstr("stop")),
        _ => msg(b'F', &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]),
    }
}

/// Reads whatever comes until `quiet` passes without a byte, the connection closes, or `limit` passes.
async fn drain(stream: &mut TcpStream, quiet: Duration, limit: Duration) {
    let mut buf = vec![0u8; 16384];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let wait = quiet.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
        match tokio::time::timeout(wait, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return,
        }
    }
}

/// One hostile client: a start-up packet (damaged in a fifth of rounds), then a few messages, some damaged,
/// then gone, at any point.
async fn hostile_client(addr: SocketAddr, round: u64) {
    let mut rng = Rng::new(round);
    let Ok(mut stream) = TcpStream::connect(addr).await else { return };
    let mut login = startup(&[("user", "pgmux_app"), ("database", "pgmux")]);
    if rng.chance(20) {
        login = damage(&mut rng, login);
    }
    if stream.write_all(&login).await.is_err() {
        return;
    }
    drain(&mut stream, Duration::from_millis(50), Duration::from_secs(2)).await;
    for _ in 0..rng.below(8) + 1 {
        let mut m = client_message(&mut rng);
        if rng.chance(15) {
            m = damage(&mut rng, m);
        }
        if stream.write_all(&m).await.is_err() {
            return;
        }
        if rng.chance(50) {
            drain(&mut stream, Duration::from_millis(20), Duration::from_secs(2)).await;
        }
    }
    if rng.chance(70) {
        drain(&mut stream, Duration::from_millis(50), Duration::from_secs(3)).await;
    }
}

async fn start_pgmux(database_url: &str, extra: &str) -> pgmux_proxy::ListenerHandle {
    let _ = tracing_subscriber::fmt()
        // Warnings are what hostile peers earn; only errors are shown unless PGMUX_TEST_LOG says otherwise.
        .with_env_filter(std::env::var("PGMUX_TEST_LOG").unwrap_or_else(|_| "error".into()))
        .with_test_writer()
        .try_init();
    let text = format!(
        "listen = \"127.0.0.1:0\"\ndatabase_url = {database_url:?}\nclient_auth = \"trust\"\npool_max = 2\n\
         max_connections_percent = 0\nquery_wait_timeout = \"3s\"\nserver_connect_timeout = \"2s\"\n{extra}"
    );
    Listener::start(Config::from_toml_str(&text).expect("config")).await.expect("start pgmux")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clients_and_a_hostile_server_cause_no_panic() {
    count_panics();
    let started = std::time::Instant::now();
    clients_against_postgres().await;
    println!("hostile clients: {:.1} s", started.elapsed().as_secs_f64());
    let started = std::time::Instant::now();
    server_that_lies().await;
    println!("lying server: {:.1} s", started.elapsed().as_secs_f64());
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "pgmux panicked (the messages are above)");
}

/// 400 hostile clients, 8 at a time, against pgmux in front of PostgreSQL.
async fn clients_against_postgres() {
    let pg = tokio::task::spawn_blocking(|| pgmux_testkit::PgServer::start_with(&Default::default()))
        .await
        .expect("start PostgreSQL");
    let proxy = start_pgmux(&pg.url(&pgmux_testkit::APP_USER), "").await;
    let addr = proxy.addr;
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..8 {
        let next = Arc::clone(&next);
        workers.push(tokio::spawn(async move {
            loop {
                let round = next.fetch_add(1, Ordering::SeqCst);
                if round >= 400 {
                    return;
                }
                // A round takes well under a second; its reads are bounded, so only a pgmux that kept
                // talking for a minute could make it this slow.
                let finished = tokio::time::timeout(Duration::from_secs(60), hostile_client(addr, round as u64)).await;
                assert!(finished.is_ok(), "round {round}: a client's exchange did not end within 60 s");
            }
        }));
    }
    for w in workers {
        w.await.expect("a hostile client worker");
    }
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "pgmux panicked under hostile clients");

    // Still serving, outside any transaction, and every server connection came back clean.
    let c = common::connect(addr, &pgmux_testkit::APP_USER, |_| {}).await.expect("connect after the storm");
    assert_eq!(common::scalar(&c, "select now() = statement_timestamp()").await, "t");
    let oracle = common::direct(&pg).await;
    let clean = common::eventually(Duration::from_secs(10), || async {
        let stuck: i64 = oracle
            .query_one(
                "select count(*) from pg_stat_activity where usename = 'pgmux_app' and state like 'idle in transaction%'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        stuck == 0
    })
    .await;
    assert!(clean, "a server connection was left idle in transaction");
    // A backend pgmux has just closed may take a moment to leave pg_stat_activity.
    let within_pool =
        common::eventually(Duration::from_secs(10), || async { common::pgmux_backends(&oracle).await <= 2 }).await;
    assert!(within_pool, "more server connections than pool_max");
    proxy.shutdown().await;
}

/// Answers a start-up packet with a login that works, then each Query or Sync with a plausible reply,
/// damaged in some, replaced by garbage or a hang-up in others.
async fn lying_server(mut stream: TcpStream, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 8192];
    // The start-up packet (or an SSLRequest first, refused with 'N').
    loop {
        let Ok(n) = stream.read(&mut chunk).await else { return };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() >= 8 && buf[4..8] == [4, 210, 22, 47] {
            buf.drain(..8);
            if stream.write_all(b"N").await.is_err() {
                return;
            }
            continue;
        }
        if buf.len() >= 4 && buf.len() >= u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize {
            break;
        }
    }
    let mut login = msg(b'R', &[0, 0, 0, 0]);
    for (k, v) in [("server_version", "15.18"), ("client_encoding", "UTF8"), ("DateStyle", "ISO, MDY")] {
        let mut b = cstr(k);
        b.extend(cstr(v));
        login.extend(msg(b'S', &b));
    }
    login.extend(msg(b'K', &[0, 0, 0, 42, 0, 0, 0, 7]));
    login.extend(msg(b'Z', b"I"));
    if LYING.load(Ordering::SeqCst) && rng.chance(10) {
        login = damage(&mut rng, login);
    }
    if stream.write_all(&login).await.is_err() {
        return;
    }
    buf.clear();
    // Replies to the extended messages since the last Sync.
    let mut unit = Vec::new();
    loop {
        let Ok(n) = stream.read(&mut chunk).await else { return };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        // Answer every whole Query, and every extended unit at its Sync, the way PostgreSQL would.
        let mut reply = Vec::new();
        while buf.len() >= 5 {
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize + 1;
            if buf.len() < len {
                break;
            }
            let tag = buf[0];
            let kind = buf.get(5).copied().unwrap_or(0);
            buf.drain(..len);
            let row_description =
                msg(b'T', &[0, 1, b'x', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 25, 255, 255, 255, 255, 255, 255, 0, 0]);
            let lying = LYING.load(Ordering::SeqCst);
            let status = if !lying || rng.chance(80) { b"I" } else { [b"T", b"E"][rng.below(2)] };
            let mut answer = match tag {
                b'X' => return,
                b'Q' => {
                    let mut a = row_description;
                    a.extend(msg(b'D', &[0, 1, 0, 0, 0, 1, b'1']));
                    a.extend(msg(b'C', &cstr("SELECT 1")));
                    a.extend(msg(b'Z', status));
                    a
                }
                b'P' => {
                    unit.extend(msg(b'1', b""));
                    continue;
                }
                b'B' => {
                    unit.extend(msg(b'2', b""));
                    continue;
                }
                b'D' => {
                    if kind == b'S' {
                        unit.extend(msg(b't', &[0, 0]));
                    }
                    unit.extend(row_description);
                    continue;
                }
                b'E' => {
                    unit.extend(msg(b'D', &[0, 1, 0, 0, 0, 1, b'1']));
                    unit.extend(msg(b'C', &cstr("SELECT 1")));
                    continue;
                }
                b'C' => {
                    unit.extend(msg(b'3', b""));
                    continue;
                }
                b'S' => {
                    let mut a = std::mem::take(&mut unit);
                    a.extend(msg(b'Z', status));
                    a
                }
                _ => continue,
            };
            match if lying { rng.below(24) } else { 99 } {
                0 => return,
                1 | 2 => answer = damage(&mut rng, answer),
                3 => answer.extend(msg(b'A', &[0, 0, 0, 1, b'c', 0, b'p', 0])),
                4 => answer.extend(msg(b'N', &cstr("SWARNING"))),
                _ => {}
            }
            reply.extend(answer);
        }
        if !reply.is_empty() && stream.write_all(&reply).await.is_err() {
            return;
        }
    }
}

/// tokio-postgres clients through pgmux to a server that lies: any outcome but a panic. A server that stops
/// answering mid-reply looks like a slow query, so a client gives up after 2 s and goes away, as an
/// application's timeout would; pgmux must then clean up after it.
async fn server_that_lies() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the fake server");
    let port = listener.local_addr().expect("address").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let server = tokio::spawn({
        let accepted = Arc::clone(&accepted);
        async move {
            while let Ok((stream, _)) = listener.accept().await {
                let seed = accepted.fetch_add(1, Ordering::SeqCst) as u64;
                tokio::spawn(lying_server(stream, 10_000 + seed));
            }
        }
    });
    let url = format!("postgres://pgmux_app:pw@127.0.0.1:{port}/pgmux?sslmode=disable");
    let proxy = start_pgmux(&url, "server_check_delay = \"0s\"").await;
    let addr = proxy.addr;
    // Queries answered, queries that failed, rounds given up.
    let outcomes = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0)]);
    let mut clients = Vec::new();
    for k in 0..6u64 {
        let outcomes = Arc::clone(&outcomes);
        clients.push(tokio::spawn(async move {
            for round in 0..15u64 {
                let mut rng = Rng::new(k * 1000 + round);
                let attempt = async {
                    let mut cfg = tokio_postgres::Config::new();
                    cfg.host("127.0.0.1").port(addr.port()).user("pgmux_app").dbname("pgmux");
                    let Ok((client, conn)) = cfg.connect(tokio_postgres::NoTls).await else {
                        outcomes[1].fetch_add(1, Ordering::SeqCst);
                        return;
                    };
                    // The connection is driven inside this future (not spawned), so that giving up drops
                    // it and closes the socket.
                    let queries = async {
                        for _ in 0..rng.below(5) + 1 {
                            let result = match rng.below(3) {
                                0 => client.simple_query("select 1").await.map(|_| ()),
                                1 => client.query("select 1", &[]).await.map(|_| ()),
                                _ => client.batch_execute("begin; select 1").await,
                            };
                            outcomes[usize::from(result.is_err())].fetch_add(1, Ordering::SeqCst);
                        }
                        drop(client);
                    };
                    let _ = tokio::join!(conn, queries);
                };
                if tokio::time::timeout(Duration::from_secs(2), attempt).await.is_err() {
                    outcomes[2].fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    for c in clients {
        c.await.expect("a client of the lying server");
    }
    let [ok, failed, gave_up] = outcomes.as_ref().each_ref().map(|n| n.load(Ordering::SeqCst));
    println!("lying server: {ok} queries answered, {failed} failed, {gave_up} rounds given up");
    assert!(ok > 0, "no query got through the fake server: the test exercises nothing");
    assert!(accepted.load(Ordering::SeqCst) > 0, "pgmux never reached the fake server");
    // Once the server behaves, pgmux serves again: no server connection was lost for good to a client
    // that left (the ones being cleaned up take at most a few seconds).
    LYING.store(false, Ordering::SeqCst);
    let recovered = common::eventually(Duration::from_secs(20), || async {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host("127.0.0.1").port(addr.port()).user("pgmux_app").dbname("pgmux");
        let attempt = async {
            let (client, conn) = cfg.connect(tokio_postgres::NoTls).await?;
            let (_, rows) = tokio::join!(conn, async move { client.simple_query("select 1").await });
            rows
        };
        matches!(tokio::time::timeout(Duration::from_secs(5), attempt).await, Ok(Ok(_)))
    })
    .await;
    assert!(recovered, "pgmux did not serve queries again once the server behaved");
    proxy.shutdown().await;
    server.abort();
}
