//! Everything a client may send passes through: simple and extended queries, multi-statement and empty
//! queries, portals, COPY in both directions, notices and notifications.

use std::time::Duration;

use bytes::Bytes;
use tokio_postgres::SimpleQueryMessage;
use tokio_postgres::types::Type;

use crate::common::{self, scalar};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_multi_statement_and_empty_queries() {
    let fx = common::start("").await;
    let c = fx.client().await;
    let msgs = c.simple_query("select 1 as a; select 'two' as b; ").await.unwrap();
    let rows: Vec<String> = msgs
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap().to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(rows, vec!["1", "two"]);
    // An empty query gets EmptyQueryResponse and the connection stays usable.
    let empty = c.simple_query("").await.unwrap();
    assert!(empty.iter().all(|m| !matches!(m, SimpleQueryMessage::Row(_))));
    assert_eq!(scalar(&c, "select 42").await, "42");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_protocol_unnamed_statements_with_typed_parameters() {
    let fx = common::start("").await;
    let c = fx.client().await;
    // query_typed: unnamed statement and portal, Parse/Bind/Describe/Execute/Sync in one round trip.
    let row = c
        .query_typed(
            "select $1::int4 + 1, $2::text || '!', $3::bytea, $4::bool, $5::float8 * 2",
            &[
                (&41i32, Type::INT4),
                (&"hi", Type::TEXT),
                (&vec![0u8, 255, 7], Type::BYTEA),
                (&true, Type::BOOL),
                (&1.25f64, Type::FLOAT8),
            ],
        )
        .await
        .unwrap()
        .remove(0);
    assert_eq!(row.get::<_, i32>(0), 42);
    assert_eq!(row.get::<_, String>(1), "hi!");
    assert_eq!(row.get::<_, Vec<u8>>(2), vec![0u8, 255, 7]);
    assert!(row.get::<_, bool>(3));
    assert_eq!(row.get::<_, f64>(4), 2.5);
    let nulls = c.query_typed("select $1::text is null", &[(&None::<String>, Type::TEXT)]).await.unwrap();
    assert!(nulls[0].get::<_, bool>(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_statements_and_portals_inside_a_transaction() {
    let fx = common::start("").await;
    let mut c = fx.client().await;
    let tx = c.transaction().await.unwrap();
    let stmt = tx.prepare("select g from generate_series(1, $1::int4) g").await.unwrap();
    let portal = tx.bind(&stmt, &[&250i32]).await.unwrap();
    let mut seen = 0;
    loop {
        let rows = tx.query_portal(&portal, 100).await.unwrap();
        if rows.is_empty() {
            break;
        }
        for r in rows {
            seen += 1;
            assert_eq!(r.get::<_, i32>(0), seen);
        }
    }
    assert_eq!(seen, 250);
    tx.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_in_and_out_of_a_hundred_thousand_rows() {
    use futures_util::{SinkExt, TryStreamExt};
    let fx = common::start("").await;
    let c = fx.client().await;
    c.batch_execute("create table copied (id int primary key, v text)").await.unwrap();

    let sink = c.copy_in("copy copied from stdin").await.unwrap();
    futures_util::pin_mut!(sink);
    let mut chunk = String::new();
    for i in 1..=100_000 {
        chunk.push_str(&format!("{i}\tvalue {i}\n"));
        if i % 5000 == 0 {
            sink.send(Bytes::from(std::mem::take(&mut chunk))).await.unwrap();
        }
    }
    assert_eq!(sink.finish().await.unwrap(), 100_000);
    assert_eq!(scalar(&c, "select count(*) from copied").await, "100000");

    let stream = c.copy_out("copy (select id, v from copied order by id) to stdout").await.unwrap();
    let chunks: Vec<Bytes> = stream.try_collect().await.unwrap();
    let text: Vec<u8> = chunks.concat();
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 100_000);
    assert_eq!(lines[99_999], b"100000\tvalue 100000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_copy_leaves_the_connection_usable() {
    use futures_util::SinkExt;
    let fx = common::start("pool_max = 1").await;
    let c = fx.client().await;
    c.batch_execute("create table strict_copy (id int)").await.unwrap();
    // A bad row: the server rejects the COPY.
    let sink = c.copy_in("copy strict_copy from stdin").await.unwrap();
    futures_util::pin_mut!(sink);
    sink.send(Bytes::from_static(b"1\nnot a number\n")).await.unwrap();
    let err = sink.finish().await.unwrap_err();
    assert_eq!(common::code(&err), "22P02");
    // The client gives up half way: tokio-postgres sends CopyFail when the sink is dropped.
    {
        let sink = c.copy_in::<_, Bytes>("copy strict_copy from stdin").await.unwrap();
        futures_util::pin_mut!(sink);
        sink.send(Bytes::from_static(b"7\n")).await.unwrap();
    }
    assert_eq!(scalar(&c, "select count(*) from strict_copy").await, "0");
    // The single server connection is clean for another client too.
    let other = fx.client().await;
    assert_eq!(scalar(&other, "select 1").await, "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notices_reach_the_client_that_caused_them() {
    let fx = common::start("client_auth = \"trust\"").await;
    let out = psql(&fx, "DO $$ BEGIN RAISE NOTICE 'hello from %', 'pgmux'; END $$");
    assert!(out.contains("NOTICE:  hello from pgmux"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_pass_through() {
    use futures_util::StreamExt;
    let fx = common::start("").await;
    // A direct listener sees a NOTIFY sent through pgmux.
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", fx.pg.port()).parse().unwrap();
    let mut cfg = tokio_postgres::Config::new();
    cfg.host(addr.ip().to_string()).port(addr.port()).user("postgres").password(pgmux_testkit::SUPERUSER.password);
    cfg.dbname(pgmux_testkit::DATABASE);
    let (listener, mut conn) = cfg.connect(tokio_postgres::NoTls).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
    tokio::spawn(async move {
        while let Some(Ok(m)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = m {
                let _ = tx.send(n.payload().to_owned());
            }
        }
    });
    listener.batch_execute("listen events").await.unwrap();
    let c = fx.client().await;
    c.batch_execute("notify events, 'through pgmux'").await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap();
    assert_eq!(got, "through pgmux");

    // A client listening through pgmux in the same transaction gets its notification too.
    let out = psql(&fx, "begin; listen mine; notify mine, 'self'; commit;");
    assert!(out.contains("Asynchronous notification \"mine\" with payload \"self\""), "{out}");
}

/// Runs psql against pgmux (trust auth) and returns stdout and stderr together.
pub fn psql(fx: &common::Fixture, sql: &str) -> String {
    let out = std::process::Command::new("psql")
        .args(["-X", "-h", "127.0.0.1", "-p", &fx.addr().port().to_string(), "-U", "pgmux_app", "-d", "pgmux"])
        .args(["-v", "ON_ERROR_STOP=1", "-c", sql])
        .env("PGPASSWORD", pgmux_testkit::APP_USER.password)
        .output()
        .expect("run psql");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "psql failed: {text}");
    text
}
