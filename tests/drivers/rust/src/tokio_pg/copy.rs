//! tokio-postgres moving many rows: COPY in and out (S6) and a million rows read through a portal in a
//! transaction while other clients work (S7).

use std::pin::pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::{SinkExt, TryStreamExt};

use super::{DRIVER, QueryPath, churn, connect};
use crate::env::Env;
use crate::load::{self, Background};
use crate::oracle::{Oracle, TpConn};
use crate::report::{Failure, Outcome, ensure};

const COPY_ROWS: usize = 100_000;
const BIG_ROWS: u64 = 1_000_000;

/// S6: 100,000 rows in with `copy_in`, out with `copy_out`, then a COPY IN with a bad row and one the
/// driver aborts (CopyFail, sent when the sink is dropped unfinished); the connection must work after both.
pub async fn s6(env: &Env, oracle: &Oracle) -> Outcome {
    let mut conn = connect(env, DRIVER).await?;
    let table = load::table(DRIVER, "s6");
    let result = s6_steps(&mut conn, oracle, &table).await;
    let _ = conn.client.batch_execute(&format!("DROP TABLE IF EXISTS {table}")).await;
    conn.close().await;
    result
}

async fn s6_steps(conn: &mut TpConn, oracle: &Oracle, table: &str) -> Outcome {
    conn.client.batch_execute(&format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int, v text)")).await?;
    let copy_in = format!("COPY {table} (id, v) FROM STDIN");
    let sink = conn.client.copy_in(&copy_in).await.map_err(|e| Failure::from(e).context("copy_in"))?;
    let mut sink = pin!(sink);
    for chunk in copy_rows().chunks(10_000) {
        sink.send(Bytes::from(chunk.concat())).await?;
    }
    let copied = sink.as_mut().finish().await?;
    ensure(copied == COPY_ROWS as u64, || format!("COPY IN reported {copied} rows"))?;

    let out = conn.client.copy_out(&format!("COPY (SELECT id, v FROM {table}) TO STDOUT")).await?;
    let lines = out.try_fold(0usize, |n, chunk| async move { Ok(n + chunk.iter().filter(|&&b| b == b'\n').count()) });
    let lines = lines.await.map_err(|e| Failure::from(e).context("copy_out"))?;
    ensure(lines == COPY_ROWS, || format!("COPY OUT sent {lines} rows"))?;

    let bad_row = async {
        let sink = conn.client.copy_in(&copy_in).await?;
        let mut sink = pin!(sink);
        sink.send(Bytes::from_static(b"1\tfine\nnot-a-number\tbad\n")).await?;
        sink.as_mut().finish().await
    };
    expect_invalid_text(bad_row.await)?;
    {
        let sink = conn.client.copy_in(&copy_in).await?;
        let mut sink = pin!(sink);
        sink.send(Bytes::from_static(b"2\tnever committed\n")).await?;
        // Dropped unfinished: tokio-postgres sends CopyFail.
    }
    let tx = conn.client.transaction().await?;
    let count: i64 = QueryPath::Named.value(&tx, &format!("SELECT count(*) FROM {table}"), &[]).await?;
    tx.commit().await?;
    ensure(count == COPY_ROWS as i64, || format!("{count} rows after the failed COPYs, expected {COPY_ROWS}"))?;
    oracle.no_idle_in_transaction().await?;
    Ok(format!("{COPY_ROWS} rows in and out; bad row → 22P02, CopyFail → rolled back; connection works after"))
}

fn copy_rows() -> Vec<Vec<u8>> {
    (1..=COPY_ROWS).map(|i| format!("{i}\trow {i}\n").into_bytes()).collect()
}

fn expect_invalid_text(result: Result<u64, tokio_postgres::Error>) -> Result<(), Failure> {
    match result {
        Ok(n) => Err(Failure::check(format!("a COPY with a bad row stored {n} rows"))),
        Err(e) => {
            let failure = Failure::from(e);
            match failure.code.as_deref() {
                Some("22P02") => Ok(()),
                _ => Err(failure.context("COPY with a bad row (expected 22P02)")),
            }
        }
    }
}

/// S7: `big`'s million rows through a portal, 1000 rows per Execute, inside a transaction, while background
/// clients run S4-style transactions on the other servers.
pub async fn s7(env: &Arc<Env>, oracle: &Oracle) -> Outcome {
    let background = Background::start(load::background_clients(env.clients), |i, progress| {
        churn::background_txn(Arc::clone(env), DRIVER, i, progress)
    });
    background.warmed_up().await;
    let mut conn = connect(env, DRIVER).await?;
    let before = background.done();
    let streamed = stream_big(&mut conn).await;
    let during = background.done() - before;
    let others = background.finish().await;
    conn.close().await;
    oracle.clear_audit(&format!("{DRIVER}-bg")).await?;
    let (rows, sum) = streamed?;
    ensure(rows == BIG_ROWS, || format!("{rows} rows streamed, expected {BIG_ROWS}"))?;
    ensure(sum == 500_000_500_000, || format!("the ids add up to {sum}"))?;
    others.clean("background transactions")?;
    ensure(during > 0, || "the background clients finished no transaction while the rows streamed".to_owned())?;
    Ok(format!("{rows} rows through a portal, 1000 per Execute, in a txn; {during} background txns meanwhile"))
}

async fn stream_big(conn: &mut TpConn) -> Result<(u64, i64), Failure> {
    let tx = conn.client.transaction().await?;
    let portal = tx.bind("SELECT id, v FROM big", &[]).await?;
    let (mut rows, mut sum) = (0u64, 0i64);
    loop {
        let batch = tx.query_portal(&portal, 1000).await?;
        if batch.is_empty() {
            break;
        }
        for row in batch {
            let id: i32 = row.try_get(0)?;
            rows += 1;
            sum += i64::from(id);
        }
    }
    tx.commit().await?;
    Ok((rows, sum))
}
