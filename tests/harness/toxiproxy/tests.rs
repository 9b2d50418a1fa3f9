//! Toxiproxy really does what the fault tests rely on: it builds, proxies, delays, black-holes, resets and
//! refuses, checked against a local echo server.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use super::api::{json_string_field, parse_response};
use super::{Stream, Toxic, ToxicKind, Toxiproxy};

/// An echo server on a free port of 127.0.0.1, one thread per connection, for the life of the test process.
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an echo server");
    let addr = listener.local_addr().expect("echo server address");
    thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 || conn.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connect through Toxiproxy");
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("read timeout");
    stream.set_nodelay(true).expect("nodelay");
    stream
}

/// One ping through `stream`; the time it took.
fn round_trip(stream: &mut TcpStream) -> std::io::Result<Duration> {
    let started = Instant::now();
    stream.write_all(b"ping")?;
    let mut buf = [0u8; 4];
    stream.read_exact(&mut buf)?;
    assert_eq!(&buf, b"ping");
    Ok(started.elapsed())
}

fn start() -> (Toxiproxy, SocketAddr) {
    let toxiproxy = Toxiproxy::start().unwrap_or_else(|e| panic!("Toxiproxy: {e}"));
    let upstream = echo_server();
    let listen = toxiproxy
        .client()
        .create_proxy("echo", "127.0.0.1:0", &upstream.to_string())
        .unwrap_or_else(|e| panic!("create a proxy: {e}\n{}", toxiproxy.log_tail()));
    assert_ne!(listen.port(), 0);
    (toxiproxy, listen)
}

#[test]
fn latency_toxic_delays_every_round_trip() {
    let (toxiproxy, listen) = start();
    let api = toxiproxy.client();
    let mut stream = connect(listen);
    round_trip(&mut stream).expect("a round trip without toxics");

    api.add_toxic("echo", &Toxic::latency("slow", 20, 0)).expect("add a latency toxic");
    let mut delayed = connect(listen);
    for _ in 0..5 {
        let took = round_trip(&mut delayed).expect("a round trip through the latency toxic");
        assert!(took >= Duration::from_millis(20), "a 20 ms latency toxic let a round trip through in {took:?}");
    }
    // Upstream and downstream add up: 20 ms each way.
    api.add_toxic("echo", &Toxic::latency("slow-up", 20, 0).on(Stream::Upstream)).expect("upstream latency");
    let mut both = connect(listen);
    let took = round_trip(&mut both).expect("a round trip with latency both ways");
    assert!(took >= Duration::from_millis(40), "20 ms each way took {took:?}");
    api.remove_toxic("echo", "slow").expect("remove a toxic");
    api.remove_toxic("echo", "slow-up").expect("remove a toxic");
    assert!(api.remove_toxic("echo", "slow").is_err(), "removing a toxic twice must fail");
}

#[test]
fn timeout_toxic_black_holes_until_removed() {
    let (toxiproxy, listen) = start();
    let api = toxiproxy.client();
    api.add_toxic("echo", &Toxic::black_hole("hole")).expect("add a timeout toxic");
    let mut stream = connect(listen);
    stream.set_read_timeout(Some(Duration::from_millis(500))).expect("read timeout");
    let err = round_trip(&mut stream).expect_err("nothing may come back through a black hole");
    assert!(matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut), "{err}");

    api.remove_toxic("echo", "hole").expect("remove the black hole");
    round_trip(&mut connect(listen)).expect("a new connection works once the black hole is gone");
}

#[test]
fn reset_peer_resets_and_a_disabled_proxy_refuses() {
    let (toxiproxy, listen) = start();
    let api = toxiproxy.client();
    api.add_toxic("echo", &Toxic::new("rst", ToxicKind::ResetPeer { timeout_ms: 0 }).on(Stream::Upstream))
        .expect("add a reset_peer toxic");
    let mut stream = connect(listen);
    match round_trip(&mut stream) {
        Err(e) => assert!(
            matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::UnexpectedEof | ErrorKind::BrokenPipe),
            "{e}"
        ),
        Ok(took) => panic!("a reset_peer toxic let a round trip through in {took:?}"),
    }
    api.reset().expect("reset");
    round_trip(&mut connect(listen)).expect("a round trip after reset");

    api.set_enabled("echo", false).expect("disable");
    let refused = TcpStream::connect_timeout(&listen, Duration::from_secs(2));
    assert!(refused.is_err(), "a disabled proxy accepted a connection");
    api.set_enabled("echo", true).expect("enable");
    round_trip(&mut connect(listen)).expect("a round trip once enabled again");

    api.delete_proxy("echo").expect("delete");
    assert!(api.delete_proxy("echo").is_err(), "deleting a proxy twice must fail");
}

#[test]
fn bad_names_are_refused_before_sending() {
    let api = super::ToxiClient::new("127.0.0.1:9".parse().expect("addr"));
    for name in ["", "a/b", "a\"b", "x y"] {
        let err = api.delete_proxy(name).expect_err("a bad name must be refused");
        assert!(err.to_string().contains("refused to send"), "{err}");
    }
    let err = api.add_toxic("ok", &Toxic::latency("t", 1, 0).with_toxicity(1.5)).expect_err("toxicity > 1");
    assert!(err.to_string().contains("toxicity"), "{err}");
}

#[test]
fn responses_parse() {
    let (status, body) = parse_response(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}").expect("plain");
    assert_eq!((status, body.as_str()), (201, "{}"));
    let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
    assert_eq!(parse_response(chunked).expect("chunked").1, "abcde");
    assert!(parse_response(b"garbage").is_err());
    let proxy = r#"{"name":"a","listen":"127.0.0.1:4242","upstream":"127.0.0.1:5432","enabled":true}"#;
    assert_eq!(json_string_field(proxy, "listen").as_deref(), Some("127.0.0.1:4242"));
    assert_eq!(json_string_field(proxy, "missing"), None);
}
