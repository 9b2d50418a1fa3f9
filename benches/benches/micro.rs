//! Micro-benchmarks of the per-message work on pgmux's data path: framing a result stream, tracking a
//! pipelined extended-protocol exchange, reading a statement's text for session state, and lending pool
//! connections with and without contention.
//!
//! `cargo bench -p pgmux-benches --bench micro`; `-- --quick` for a fast pass.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use pgmux_pool::{Grant, Pool, PoolConfig};
use pgmux_proto::{Framer, Sender, Step, TxStatus};
use pgmux_proxy::clock;
use pgmux_proxy::protocol::sql;
use pgmux_proxy::protocol::tracker::TxTracker;
use pgmux_testkit::wire::msg;

/// A `SELECT` result: RowDescription, `rows` DataRows of three text columns, CommandComplete, ReadyForQuery.
fn result_stream(rows: usize) -> Vec<u8> {
    let mut out = msg(b'T', &[0u8; 70]);
    let mut row = vec![0, 3];
    for col in [&b"12345"[..], b"a fairly ordinary text value", b"2026-11-21 12:00:00+00"] {
        row.extend_from_slice(&(col.len() as i32).to_be_bytes());
        row.extend_from_slice(col);
    }
    let data_row = msg(b'D', &row);
    for _ in 0..rows {
        out.extend_from_slice(&data_row);
    }
    out.extend(msg(b'C', b"SELECT 10000\0"));
    out.extend(msg(b'Z', b"I"));
    out
}

fn framing(c: &mut Criterion) {
    let stream = result_stream(10_000);
    let mut g = c.benchmark_group("frame");
    g.throughput(Throughput::Bytes(stream.len() as u64));
    g.bench_function("split DataRow-heavy stream", |b| {
        b.iter(|| {
            let mut framer = Framer::new(Sender::Backend);
            let mut at = 0;
            let mut messages = 0u32;
            while let Ok(Step::Message { len, .. }) = framer.step(&stream[at..]) {
                at += len;
                messages += 1;
            }
            black_box(messages)
        })
    });
    g.finish();
}

fn tracking(c: &mut Criterion) {
    // 1000 pipelined Parse/Bind/Describe/Execute/Sync units and the server's replies to them.
    const UNITS: u64 = 1000;
    let client = b"PBDES";
    let server = b"12TDCZ";
    let mut g = c.benchmark_group("tracker");
    g.throughput(Throughput::Elements(UNITS * (client.len() + server.len()) as u64));
    g.bench_function("pipelined extended protocol", |b| {
        b.iter(|| {
            let mut t: TxTracker = TxTracker::default();
            for _ in 0..UNITS {
                for &tag in client {
                    if tag == b'D' {
                        t.client_describe(b'S');
                    } else {
                        t.client_message(black_box(tag));
                    }
                }
            }
            for _ in 0..UNITS {
                for &tag in &server[..server.len() - 1] {
                    let _ = t.server_message(black_box(tag), |_| {});
                }
                let _ = t.server_ready(TxStatus::Idle, |_| {});
            }
            black_box(t.may_release())
        })
    });
    g.finish();
}

fn pool(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let mut g = c.benchmark_group("pool");
    g.bench_function("checkout and return, uncontended", |b| {
        let pool = Pool::new(PoolConfig::new(4, Duration::ZERO));
        if let Ok(Some(Grant::Open(slot))) = pool.try_acquire() {
            drop(slot.fill(0u32));
        }
        b.iter(|| match pool.try_acquire() {
            Ok(Some(Grant::Idle(lease))) => drop(black_box(lease)),
            _ => unreachable!("one idle connection is always there"),
        })
    });
    g.throughput(Throughput::Elements(64 * 10));
    g.bench_function("64 waiters, 4 connections, 10 checkouts each", |b| {
        b.iter_batched(
            || Pool::new(PoolConfig::new(4, Duration::ZERO)),
            |pool| {
                rt.block_on(async {
                    let mut tasks = tokio::task::JoinSet::new();
                    for _ in 0..64 {
                        let pool = pool.clone();
                        tasks.spawn(async move {
                            for _ in 0..10 {
                                match pool.acquire().await {
                                    Ok(Grant::Idle(lease)) => {
                                        tokio::task::yield_now().await;
                                        drop(lease);
                                    }
                                    Ok(Grant::Open(slot)) => {
                                        let lease = slot.fill(0u32);
                                        tokio::task::yield_now().await;
                                        drop(lease);
                                    }
                                    Err(_) => unreachable!("the pool stays open"),
                                }
                            }
                        });
                    }
                    while tasks.join_next().await.is_some() {}
                })
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn statement_scan(c: &mut Criterion) {
    // What every simple Query's text goes through: pgbench's `-S` statement, a longer ordinary one, and
    // one that pins (the keyword found near its end).
    let texts: [(&str, &str); 3] = [
        ("pgbench -S", "SELECT abalance FROM pgbench_accounts WHERE aid = 48213;"),
        (
            "a join",
            "SELECT o.id, o.created_at, c.name, sum(l.amount) FROM orders o JOIN customers c ON c.id = \
             o.customer_id JOIN lines l ON l.order_id = o.id WHERE o.created_at > now() - interval '1 day' \
             GROUP BY o.id, o.created_at, c.name ORDER BY o.created_at DESC LIMIT 50",
        ),
        ("an advisory lock", "SELECT id FROM jobs WHERE state = 'ready' AND pg_advisory_lock(id) IS NOT NULL"),
    ];
    let mut g = c.benchmark_group("sql scan");
    for (name, text) in texts {
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_function(name, |b| b.iter(|| black_box(sql::scan(black_box(text)))));
    }
    g.finish();
}

fn meter_clock(c: &mut Criterion) {
    // What a session's meter does per recorded duration: read the clock, and take the microseconds since
    // an earlier reading. The `Instant` way is what it did before issue 32's third session.
    let mut g = c.benchmark_group("meter clock");
    let earlier = std::time::Instant::now();
    g.bench_function("Instant: read, subtract, microseconds", |b| {
        b.iter(|| {
            let d = std::time::Instant::now().saturating_duration_since(black_box(earlier));
            black_box(d.as_secs().saturating_mul(1_000_000).saturating_add(u64::from(d.subsec_micros())))
        })
    });
    let earlier = clock::now_ns();
    g.bench_function("nanoseconds: read, subtract, microseconds", |b| {
        b.iter(|| black_box(clock::micros(black_box(earlier), clock::now_ns())))
    });
    let (a, b) = (std::time::Instant::now(), std::time::Instant::now());
    g.bench_function("Instant: subtract, microseconds (no read)", |bench| {
        bench.iter(|| {
            let d = black_box(b).saturating_duration_since(black_box(a));
            black_box(d.as_secs().saturating_mul(1_000_000).saturating_add(u64::from(d.subsec_micros())))
        })
    });
    let (a, b) = (clock::now_ns(), clock::now_ns());
    g.bench_function("nanoseconds: subtract, microseconds (no read)", |bench| {
        bench.iter(|| black_box(clock::micros(black_box(a), black_box(b))))
    });
    // The time checks before an idle connection is lent (ServerPool::quick_check needs a live server
    // connection, so its clock part is measured alone): lifetime and server_check_delay.
    let (created, idle_since) = (tokio::time::Instant::now(), tokio::time::Instant::now());
    let (lifetime, delay) = (Duration::from_secs(3600), Duration::from_secs(30));
    g.bench_function("lend check, Instant: read, two subtractions", |b| {
        b.iter(|| {
            let now = tokio::time::Instant::now();
            let old = now.saturating_duration_since(black_box(created)) >= lifetime;
            black_box(old || now.saturating_duration_since(black_box(idle_since)) < delay)
        })
    });
    let now = clock::now_ns();
    let (retire_at, idle_since) = (now + clock::nanos(lifetime), now);
    g.bench_function("lend check, nanoseconds: read, two comparisons", |b| {
        b.iter(|| {
            let now = clock::now_ns();
            black_box(now >= black_box(retire_at) || now.saturating_sub(black_box(idle_since)) < clock::nanos(delay))
        })
    });
    g.finish();
}

fn live_settings(c: &mut Criterion) {
    // The two settings each transaction reads (server_check_delay at the checkout, target_session_attrs
    // at the release): a guarded load of the configuration in force, and the atomics kept beside it.
    let config = pgmux_proxy::Config::from_toml_str("database_url = \"postgres://app:pw@db.example:5432/app\"")
        .expect("a valid configuration");
    let live = pgmux_proxy::config::LiveConfig::new(std::sync::Arc::new(config));
    let mut g = c.benchmark_group("live settings");
    g.bench_function("guarded load: server_check_delay, target_session_attrs", |b| {
        b.iter(|| {
            let delay = live.load().server_check_delay;
            black_box((delay, live.load().target_session_attrs))
        })
    });
    g.bench_function("relaxed atomics: the same two", |b| {
        b.iter(|| black_box((live.check_delay_ns(), live.target_session_attrs())))
    });
    g.finish();
}

fn socket_write(c: &mut Criterion) {
    // What a flush of one chunk costs on a plain socket: through tokio's `poll_write` (its readiness and
    // the task's budget first), as pgmux wrote before issue 32's ninth session, and straight to the socket,
    // as it writes now while the socket has room. A thread drains the peer, so writes rarely find it full.
    use std::io::Read as _;
    use std::os::fd::AsFd as _;
    use tokio::io::AsyncWrite as _;
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().expect("a runtime");
    let _entered = rt.enter();
    let (ours, peer) = std::os::unix::net::UnixStream::pair().expect("a socket pair");
    ours.set_nonblocking(true).expect("non-blocking");
    let mut ours = tokio::net::UnixStream::from_std(ours).expect("registered with tokio");
    std::thread::spawn(move || {
        let (mut peer, mut buf) = (peer, vec![0u8; 1 << 16]);
        while matches!(peer.read(&mut buf), Ok(n) if n > 0) {}
    });
    let chunk = [7u8; 64];
    let mut g = c.benchmark_group("socket write");
    g.bench_function("64 bytes through tokio's poll_write", |b| {
        b.iter_custom(|n| {
            rt.block_on(async {
                let start = std::time::Instant::now();
                for _ in 0..n {
                    let written = std::future::poll_fn(|cx| std::pin::Pin::new(&mut ours).poll_write(cx, &chunk));
                    black_box(written.await.expect("a write"));
                }
                start.elapsed()
            })
        })
    });
    g.bench_function("64 bytes straight to the socket", |b| {
        b.iter_custom(|n| {
            rt.block_on(async {
                let start = std::time::Instant::now();
                for _ in 0..n {
                    loop {
                        match rustix::net::send(ours.as_fd(), black_box(&chunk), rustix::net::SendFlags::NOSIGNAL) {
                            Err(rustix::io::Errno::AGAIN) => ours.writable().await.expect("room"),
                            written => {
                                black_box(written.expect("a write"));
                                break;
                            }
                        }
                    }
                }
                start.elapsed()
            })
        })
    });
    g.finish();
}

criterion_group!(benches, framing, tracking, statement_scan, meter_clock, live_settings, pool, socket_write);
criterion_main!(benches);
