//! tokio-postgres when things go wrong: a failed named Parse (S5b), a cached plan invalidated by DDL (S5d),
//! and a cancelled query while other clients work (S8).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::NoTls;

use super::{DRIVER, QueryPath, churn, connect};
use crate::env::Env;
use crate::load::{self, Background};
use crate::oracle::{Oracle, TpConn};
use crate::report::{Failure, Outcome, ensure};

/// Fails unless `result` is a server error with SQLSTATE `code`.
fn expect_code<T>(result: Result<T, tokio_postgres::Error>, code: &str, what: &str) -> Result<(), Failure> {
    match result {
        Ok(_) => Err(Failure::check(format!("{what} succeeded; expected SQLSTATE {code}"))),
        Err(e) => {
            let failure = Failure::from(e);
            if failure.code.as_deref() == Some(code) {
                Ok(())
            } else {
                Err(failure.context(&format!("{what} (expected SQLSTATE {code})")))
            }
        }
    }
}

/// A transaction that must work after a failure.
async fn next_transaction(conn: &mut TpConn) -> Result<(), Failure> {
    let tx = conn.client.transaction().await?;
    let one: i32 = QueryPath::Named.value(&tx, "SELECT 1", &[]).await?;
    ensure(one == 1, || format!("SELECT 1 returned {one}"))?;
    tx.commit().await.map_err(|e| Failure::from(e).context("the next transaction"))
}

/// S5b: a named statement whose Parse fails (syntax error), then a named statement with good SQL, outside a
/// transaction. tokio-postgres never reuses a name (`s<n>` counts up per process), so the good Parse gets the
/// next name; the scenario shows that a failed named Parse leaves nothing behind.
pub async fn s5b(env: &Env, oracle: &Oracle) -> Outcome {
    let mut conn = connect(env, DRIVER).await?;
    let result = s5b_steps(&mut conn, oracle).await;
    conn.close().await;
    result
}

async fn s5b_steps(conn: &mut TpConn, oracle: &Oracle) -> Outcome {
    expect_code(conn.client.prepare("SELEC $1::int4 AS broken").await, "42601", "Parse of bad SQL")?;
    let good = conn.client.prepare("SELECT $1::int4 + 1").await?;
    let value: i32 = conn.client.query_one(&good, &[&41i32]).await?.try_get(0)?;
    ensure(value == 42, || format!("the good statement returned {value}"))?;
    drop(good);
    next_transaction(conn).await?;
    oracle.no_idle_in_transaction().await?;
    Ok("named Parse failed with 42601; the next named statement parsed and ran; next txn ok".to_owned())
}

/// S5d: a prepared `SELECT *` executed, its table altered, executed again: PostgreSQL answers 0A000
/// (`cached plan must not change result type`); preparing the query again must work.
pub async fn s5d(env: &Env, oracle: &Oracle) -> Outcome {
    let mut conn = connect(env, DRIVER).await?;
    let table = load::table(DRIVER, "s5d");
    let result = s5d_steps(&mut conn, oracle, &table).await;
    let _ = conn.client.batch_execute(&format!("DROP TABLE IF EXISTS {table}")).await;
    conn.close().await;
    result
}

async fn s5d_steps(conn: &mut TpConn, oracle: &Oracle, table: &str) -> Outcome {
    conn.client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int); INSERT INTO {table} VALUES (1)"
        ))
        .await?;
    let sql = format!("SELECT * FROM {table} WHERE id = $1");
    let statement = conn.client.prepare(&sql).await?;
    let rows = conn.client.query(&statement, &[&1i32]).await?;
    ensure(rows.len() == 1 && rows[0].len() == 1, || "the first execution returned the wrong shape".to_owned())?;
    conn.client.batch_execute(&format!("ALTER TABLE {table} ADD COLUMN extra int DEFAULT 7")).await?;
    expect_code(conn.client.query(&statement, &[&1i32]).await, "0A000", "executing it after ALTER TABLE")?;
    drop(statement);
    let rows = conn.client.query(&sql, &[&1i32]).await.map_err(|e| Failure::from(e).context("re-prepared"))?;
    let extra: Option<i32> = rows.first().map(|r| r.try_get(1)).transpose()?;
    ensure(extra == Some(7), || format!("the re-prepared query returned extra = {extra:?}"))?;
    next_transaction(conn).await?;
    oracle.no_idle_in_transaction().await?;
    Ok("0A000 after ALTER TABLE; re-prepared query sees the new column; next txn ok".to_owned())
}

/// S8: `SELECT pg_sleep(30)` in a transaction, cancelled after 200 ms with `CancelToken::cancel_query`
/// while background clients work.
pub async fn s8(env: &Arc<Env>, oracle: &Oracle) -> Outcome {
    let background = Background::start(load::background_clients(env.clients), |i, progress| {
        churn::background_txn(Arc::clone(env), DRIVER, i, progress)
    });
    background.warmed_up().await;
    let before = background.done();
    let mut conn = connect(env, DRIVER).await?;
    let cancelled = cancel_sleep(&mut conn).await;
    let during = background.done() - before;
    let others = background.finish().await;
    let after = next_transaction(&mut conn).await;
    conn.close().await;
    oracle.clear_audit(&format!("{DRIVER}-bg")).await?;
    let latency = cancelled?;
    after?;
    ensure(!others.codes.iter().any(|c| c == "57014"), || "a background client saw 57014".to_owned())?;
    others.clean("background transactions")?;
    oracle.no_idle_in_transaction().await?;
    Ok(format!(
        "57014 {} ms after cancel_query; {during} background txns meanwhile, none cancelled; next txn ok",
        latency.as_millis()
    ))
}

/// Runs the sleep, cancels it after 200 ms, and returns how long the cancel took to land.
async fn cancel_sleep(conn: &mut TpConn) -> Result<Duration, Failure> {
    let token = conn.client.cancel_token();
    let tx = conn.client.transaction().await?;
    let sleep = async {
        let result = tx.query("SELECT pg_sleep(30)", &[]).await;
        (result, Instant::now())
    };
    let cancel = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let at = Instant::now();
        token.cancel_query(NoTls).await.map(|()| at)
    };
    let ((result, ended), cancel) = tokio::join!(sleep, cancel);
    let cancelled_at = cancel.map_err(|e| Failure::from(e).context("cancel_query"))?;
    expect_code(result, "57014", "SELECT pg_sleep(30)")?;
    let latency = ended.saturating_duration_since(cancelled_at);
    ensure(latency <= Duration::from_secs(2), || format!("57014 came {} ms after the cancel", latency.as_millis()))?;
    tx.rollback().await?;
    Ok(latency)
}
