//! sqlx on one connection when the data or the schema moves: a cached plan invalidated by `ALTER TABLE`
//! (S5d) and COPY in and out, including COPYs that fail (S6).

use futures_util::TryStreamExt;
use sqlx::postgres::PgConnection;
use sqlx::{AssertSqlSafe, Connection};

use super::{DRIVER, connect, get, query};
use crate::env::Env;
use crate::load;
use crate::oracle::Oracle;
use crate::report::{Failure, Outcome, ensure};

const COPY_ROWS: usize = 100_000;

/// Runs `sql` with the simple protocol (`sqlx::raw_sql`).
async fn simple(conn: &mut PgConnection, sql: &str) -> Result<(), Failure> {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned())).execute(conn).await.map(|_| ()).map_err(Failure::from)
}

/// Fails unless `result` is a server error with SQLSTATE `code`.
fn expect_code<T>(result: Result<T, sqlx::Error>, code: &str, what: &str) -> Result<(), Failure> {
    match result.map_err(Failure::from) {
        Ok(_) => Err(Failure::check(format!("{what} succeeded; expected SQLSTATE {code}"))),
        Err(f) if f.code.as_deref() == Some(code) => Ok(()),
        Err(f) => Err(f.context(&format!("{what} (expected SQLSTATE {code})"))),
    }
}

/// A transaction that must work after a failure (with SQL this connection has not prepared before).
async fn next_transaction(conn: &mut PgConnection, marker: i32) -> Result<(), Failure> {
    let mut tx = conn.begin().await?;
    let got: i32 = get(&sqlx::query("SELECT $1::int4 + 0").bind(marker).fetch_one(&mut *tx).await?, 0)?;
    tx.commit().await?;
    ensure(got == marker, || format!("the next transaction returned {got}"))
}

/// S5d: a cached statement `SELECT * FROM sqlx_s5d WHERE id = $1` executed, its table altered, executed
/// again: PostgreSQL answers 0A000. sqlx keeps the statement cached, so the application recovers with
/// `clear_cached_statements()`; the query must then see the new column.
pub async fn s5d(env: &Env, oracle: &Oracle) -> Outcome {
    let mut conn = connect(env, &format!("matrix-{DRIVER}")).await?;
    let table = load::table(DRIVER, "s5d");
    let result = s5d_steps(&mut conn, oracle, &table).await;
    let _ = simple(&mut conn, &format!("DROP TABLE IF EXISTS {table}")).await;
    let _ = conn.close().await;
    result
}

async fn s5d_steps(conn: &mut PgConnection, oracle: &Oracle, table: &str) -> Outcome {
    simple(
        conn,
        &format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int); INSERT INTO {table} VALUES (1)"),
    )
    .await?;
    let sql = format!("SELECT * FROM {table} WHERE id = $1");
    let row = query(&sql).bind(1i32).fetch_one(&mut *conn).await?;
    ensure(sqlx::Row::len(&row) == 1, || "the first execution returned the wrong shape".to_owned())?;
    simple(conn, &format!("ALTER TABLE {table} ADD COLUMN extra int DEFAULT 7")).await?;
    expect_code(query(&sql).bind(1i32).fetch_one(&mut *conn).await, "0A000", "executing it after ALTER TABLE")?;
    conn.clear_cached_statements().await?;
    let row =
        query(&sql).bind(1i32).fetch_one(&mut *conn).await.map_err(|e| Failure::from(e).context("re-prepared"))?;
    let extra: Option<i32> = get(&row, 1)?;
    ensure(extra == Some(7), || format!("the re-prepared query returned extra = {extra:?}"))?;
    next_transaction(conn, 55).await?;
    oracle.no_idle_in_transaction().await?;
    Ok("0A000 after ALTER TABLE; after clear_cached_statements the query sees the new column; next txn ok".to_owned())
}

/// S6: 100,000 rows in with `copy_in_raw`, out with `copy_out_raw`, then a COPY IN with a bad row and one
/// aborted with `abort` (CopyFail); the connection must work after both and hold only the first 100,000.
pub async fn s6(env: &Env, oracle: &Oracle) -> Outcome {
    let mut conn = connect(env, &format!("matrix-{DRIVER}")).await?;
    let table = load::table(DRIVER, "s6");
    let result = s6_steps(&mut conn, oracle, &table).await;
    let _ = simple(&mut conn, &format!("DROP TABLE IF EXISTS {table}")).await;
    let _ = conn.close().await;
    result
}

async fn s6_steps(conn: &mut PgConnection, oracle: &Oracle, table: &str) -> Outcome {
    simple(conn, &format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int, v text)")).await?;
    let copy_in = format!("COPY {table} (id, v) FROM STDIN");
    let mut copy = conn.copy_in_raw(&copy_in).await?;
    let rows: Vec<u8> = (1..=COPY_ROWS).flat_map(|i| format!("{i}\trow {i}\n").into_bytes()).collect();
    for chunk in rows.chunks(64 * 1024) {
        copy.send(chunk).await?;
    }
    let copied = copy.finish().await?;
    ensure(copied == COPY_ROWS as u64, || format!("COPY IN reported {copied} rows"))?;

    let lines = {
        let out = conn.copy_out_raw(&format!("COPY (SELECT id, v FROM {table}) TO STDOUT")).await?;
        out.try_fold(0usize, |n, chunk| async move { Ok(n + chunk.iter().filter(|&&b| b == b'\n').count()) }).await?
    };
    ensure(lines == COPY_ROWS, || format!("COPY OUT sent {lines} rows"))?;

    let bad_row = async {
        let mut copy = conn.copy_in_raw(&copy_in).await?;
        copy.send(&b"1\tfine\nnot-a-number\tbad\n"[..]).await?;
        copy.finish().await
    };
    expect_code(bad_row.await, "22P02", "COPY with a bad row")?;
    let mut copy = conn.copy_in_raw(&copy_in).await?;
    copy.send(&b"2\tnever committed\n"[..]).await?;
    copy.abort("matrix: CopyFail on purpose").await.map_err(|e| Failure::from(e).context("CopyFail"))?;

    let count: i64 = get(&query(&format!("SELECT count(*) FROM {table}")).fetch_one(&mut *conn).await?, 0)?;
    ensure(count == COPY_ROWS as i64, || format!("{count} rows after the failed COPYs, expected {COPY_ROWS}"))?;
    oracle.no_idle_in_transaction().await?;
    Ok(format!("{COPY_ROWS} rows in and out; bad row → 22P02, CopyFail → rolled back; connection works after"))
}
