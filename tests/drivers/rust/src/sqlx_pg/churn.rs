//! sqlx under load: S4 (prepared churn through a `PgPool`), and the scenarios that run beside background
//! clients: S7 (a million rows streamed in a transaction) and S8 (a statement timeout, since sqlx sends no
//! CancelRequest).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection};

use super::{DRIVER, connect, get, query};
use crate::env::Env;
use crate::load::{self, Background, ChurnSql, Progress, Tally};
use crate::oracle::Oracle;
use crate::report::{Failure, Outcome, ensure};

/// S4: `MATRIX_CLIENTS` tasks × `MATRIX_TXNS` transactions on a pool of `MATRIX_CLIENTS` connections
/// (`PgPoolOptions::max_connections`), each transaction followed by one autocommit query on the pool.
pub async fn s4(env: &Arc<Env>, oracle: &Oracle) -> Outcome {
    let table = load::table(DRIVER, "s4");
    let pool = PgPoolOptions::new()
        .max_connections(u32::try_from(env.clients).unwrap_or(50))
        .connect_with(env.sqlx_options(&format!("matrix-{DRIVER}")))
        .await
        .map_err(|e| Failure::from(e).context("pool"))?;
    sqlx::raw_sql(AssertSqlSafe(load::counter_table_sql(&table))).execute(&pool).await?;
    oracle.clear_audit(DRIVER).await?;
    let sampler = oracle.sample_backends();
    let mut clients = tokio::task::JoinSet::new();
    for k in 0..env.clients {
        let (pool, sql, txns) = (pool.clone(), ChurnSql::new(DRIVER, &table, k), env.txns);
        clients.spawn(async move {
            let mut tally = Tally::default();
            for n in 0..txns {
                tally.record(churn_round(&pool, &sql, k, n).await);
            }
            tally
        });
    }
    let mut tally = Tally::default();
    while let Some(done) = clients.join_next().await {
        match done {
            Ok(client) => tally.merge(client),
            Err(e) => tally.record(Err(Failure::check(format!("client task: {e}")))),
        }
    }
    let max_backends = sampler.stop().await;
    let verdict = match tally.clean("transactions") {
        Ok(()) => oracle.check_load(env, DRIVER, &table, max_backends).await,
        Err(failure) => Err(failure),
    };
    let _ = sqlx::raw_sql(AssertSqlSafe(format!("DROP TABLE IF EXISTS {table}"))).execute(&pool).await;
    pool.close().await;
    verdict
}

async fn churn_round(pool: &PgPool, sql: &ChurnSql, k: usize, n: usize) -> Result<(), Failure> {
    let id = ChurnSql::row(k, n);
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    let mut tx = pool.begin().await?;
    let v: String = get(&query(&sql.select).bind(id).fetch_one(&mut *tx).await?, 0)?;
    ensure(v == format!("value {id}"), || format!("row {id} read as {v:?}"))?;
    query(&sql.update).bind(id).execute(&mut *tx).await?;
    query(&sql.insert).bind(&sql.audit_client).bind(n).execute(&mut *tx).await?;
    tx.commit().await?;
    match n % 3 {
        0 => {
            let count: i64 = get(&query(&sql.count).bind(id).fetch_one(pool).await?, 0)?;
            ensure(count == i64::from(id), || format!("{}: {count}, expected {id}", sql.count))
        }
        1 => {
            let digest: String = get(&query(&sql.digest).bind(&sql.audit_client).fetch_one(pool).await?, 0)?;
            ensure(digest.len() == 32, || format!("{}: {digest:?}", sql.digest))
        }
        _ => {
            let own: i32 = get(&query(&sql.own).bind(n).fetch_one(pool).await?, 0)?;
            let want = n + i32::try_from(k).unwrap_or(0);
            ensure(own == want, || format!("{}: {own}, expected {want} (another client's statement?)", sql.own))
        }
    }
}

/// A background client of S7 and S8: S4-style transactions (read a row, write an audit row) until told to
/// stop. Its statements are `persistent(false)`, so they live inside their transaction: S7 and S8 measure
/// streaming and timeouts beside working clients, not the named-statement behaviour S4 reports on.
async fn background_txn(env: Arc<Env>, i: usize, mut progress: Progress) -> Tally {
    let mut tally = Tally::default();
    let label = format!("{DRIVER}-bg");
    let mut conn = match connect(&env, &format!("matrix-{label}")).await {
        Ok(conn) => conn,
        Err(failure) => {
            tally.record(Err(failure));
            return tally;
        }
    };
    let sql = ChurnSql::new(&label, "unused", i);
    let mut n = 0;
    while progress.running() {
        let id = ChurnSql::row(i, n);
        let n32 = i32::try_from(n).unwrap_or(i32::MAX);
        let round = async {
            let mut tx = conn.begin().await?;
            let v: String = get(&query(&sql.select).bind(id).persistent(false).fetch_one(&mut *tx).await?, 0)?;
            ensure(v == format!("value {id}"), || format!("row {id} read as {v:?}"))?;
            query(&sql.insert).bind(&sql.audit_client).bind(n32).persistent(false).execute(&mut *tx).await?;
            tx.commit().await.map_err(Failure::from)
        };
        let result = round.await;
        if result.is_ok() {
            progress.tick();
        }
        tally.record(result);
        n += 1;
    }
    let _ = conn.close().await;
    tally
}

fn start_background(env: &Arc<Env>) -> Background {
    Background::start(load::background_clients(env.clients), |i, progress| background_txn(Arc::clone(env), i, progress))
}

/// S7: `big`'s million rows streamed with `fetch` inside a transaction while background clients work.
pub async fn s7(env: &Arc<Env>, oracle: &Oracle) -> Outcome {
    let background = start_background(env);
    background.warmed_up().await;
    let before = background.done();
    let streamed = async {
        let mut conn = connect(env, &format!("matrix-{DRIVER}")).await?;
        let mut tx = conn.begin().await?;
        let (mut rows, mut sum) = (0u64, 0i64);
        {
            let mut stream = sqlx::query("SELECT id, v FROM big WHERE id > $1").bind(0i32).fetch(&mut *tx);
            while let Some(row) = stream.try_next().await? {
                let id: i32 = get(&row, 0)?;
                rows += 1;
                sum += i64::from(id);
            }
        }
        tx.commit().await?;
        let _ = conn.close().await;
        Ok::<_, Failure>((rows, sum))
    }
    .await;
    let during = background.done() - before;
    let others = background.finish().await;
    oracle.clear_audit(&format!("{DRIVER}-bg")).await?;
    let (rows, sum) = streamed?;
    ensure(rows == 1_000_000, || format!("{rows} rows streamed, expected 1000000"))?;
    ensure(sum == 500_000_500_000, || format!("the ids add up to {sum}"))?;
    others.clean("background transactions")?;
    ensure(during > 0, || "the background clients finished no transaction while the rows streamed".to_owned())?;
    Ok(format!("{rows} rows streamed with fetch in a txn; {during} background txns meanwhile"))
}

/// S8: sqlx sends no CancelRequest, so the query is stopped by the server: `SET LOCAL statement_timeout =
/// '200ms'` then `SELECT pg_sleep(30)` in a transaction, while background clients work. 57014 must come
/// within 2 s, no background client may see it, and the next transaction must work without the timeout.
pub async fn s8(env: &Arc<Env>, oracle: &Oracle) -> Outcome {
    let background = start_background(env);
    background.warmed_up().await;
    let before = background.done();
    let mut conn = connect(env, &format!("matrix-{DRIVER}")).await?;
    let timed_out = async {
        let mut tx = conn.begin().await?;
        let baseline: String = get(&sqlx::raw_sql("SHOW statement_timeout").fetch_one(&mut *tx).await?, 0)?;
        sqlx::raw_sql("SET LOCAL statement_timeout = '200ms'").execute(&mut *tx).await?;
        let started = Instant::now();
        let slept = sqlx::query("SELECT pg_sleep($1)").bind(30.0f64).execute(&mut *tx).await;
        let elapsed = started.elapsed();
        match slept.map_err(Failure::from) {
            Ok(_) => return Err(Failure::check("pg_sleep(30) finished despite statement_timeout")),
            Err(f) if f.code.as_deref() == Some("57014") => {}
            Err(f) => return Err(f.context("pg_sleep(30) (expected SQLSTATE 57014)")),
        }
        ensure(elapsed <= Duration::from_secs(2), || format!("57014 came after {} ms", elapsed.as_millis()))?;
        tx.rollback().await?;
        Ok::<_, Failure>((elapsed, baseline))
    }
    .await;
    let during = background.done() - before;
    let others = background.finish().await;
    let baseline = timed_out.as_ref().map(|(_, b)| b.clone()).unwrap_or_else(|_| "0".to_owned());
    let after = async {
        let mut tx = conn.begin().await?;
        let timeout: String = sqlx::query_scalar("SHOW statement_timeout").fetch_one(&mut *tx).await?;
        tx.commit().await?;
        ensure(timeout == baseline, || format!("statement_timeout is {timeout:?} in the next transaction"))
    }
    .await;
    let _ = conn.close().await;
    oracle.clear_audit(&format!("{DRIVER}-bg")).await?;
    let (elapsed, baseline) = timed_out?;
    after.map_err(|f| f.context("the next transaction"))?;
    ensure(!others.codes.iter().any(|c| c == "57014"), || "a background client saw 57014".to_owned())?;
    others.clean("background transactions")?;
    oracle.no_idle_in_transaction().await?;
    Ok(format!(
        "57014 after {} ms (SET LOCAL statement_timeout 200ms); {during} background txns meanwhile, none \
         cancelled; next txn ok, statement_timeout back to {baseline}",
        elapsed.as_millis()
    ))
}
