//! S4 with tokio-postgres (prepared churn: many clients, few servers) and the S4-style transaction that the
//! background clients of S7 and S8 run.

use std::sync::Arc;

use tokio::task::JoinSet;
use tokio_postgres::Client;
use tokio_postgres::types::Type;

use super::{QueryPath, connect};
use crate::env::Env;
use crate::load::{self, ChurnSql, Progress, Tally};
use crate::oracle::Oracle;
use crate::report::{Failure, Outcome, ensure};

/// S4: `MATRIX_CLIENTS` clients × `MATRIX_TXNS` transactions, each followed by one autocommit query.
pub async fn s4(env: &Arc<Env>, oracle: &Oracle, path: QueryPath, driver: &'static str) -> Outcome {
    let table = load::table(driver, "s4");
    let setup = connect(env, driver).await?;
    setup.client.batch_execute(&load::counter_table_sql(&table)).await?;
    oracle.clear_audit(driver).await?;
    let sampler = oracle.sample_backends();
    let mut clients = JoinSet::new();
    for k in 0..env.clients {
        clients.spawn(churn_client(Arc::clone(env), path, driver, table.clone(), k));
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
        Ok(()) => oracle.check_load(env, driver, &table, max_backends).await,
        Err(failure) => Err(failure),
    };
    let _ = setup.client.batch_execute(&format!("DROP TABLE IF EXISTS {table}")).await;
    setup.close().await;
    verdict
}

async fn churn_client(env: Arc<Env>, path: QueryPath, driver: &str, table: String, k: usize) -> Tally {
    let mut tally = Tally::default();
    let mut conn = match connect(&env, driver).await {
        Ok(conn) => conn,
        Err(failure) => {
            tally.record(Err(failure));
            return tally;
        }
    };
    let sql = ChurnSql::new(driver, &table, k);
    for n in 0..env.txns {
        tally.record(churn_round(&mut conn.client, path, &sql, k, n).await);
    }
    conn.close().await;
    tally
}

/// One S4 transaction and the autocommit query after it (a shared text or the client's own, in turn).
async fn churn_round(client: &mut Client, path: QueryPath, sql: &ChurnSql, k: usize, n: usize) -> Result<(), Failure> {
    let id = ChurnSql::row(k, n);
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    let tx = client.transaction().await?;
    let v: String = path.value(&tx, &sql.select, &[(&id, Type::INT4)]).await?;
    ensure(v == format!("value {id}"), || format!("row {id} read as {v:?}"))?;
    path.query(&tx, &sql.update, &[(&id, Type::INT4)]).await?;
    path.query(&tx, &sql.insert, &[(&sql.audit_client, Type::TEXT), (&n, Type::INT4)]).await?;
    tx.commit().await?;
    match n % 3 {
        0 => {
            let count: i64 = path.value(&*client, &sql.count, &[(&id, Type::INT4)]).await?;
            ensure(count == i64::from(id), || format!("{}: {count}, expected {id}", sql.count))
        }
        1 => {
            let digest: String = path.value(&*client, &sql.digest, &[(&sql.audit_client, Type::TEXT)]).await?;
            ensure(digest.len() == 32, || format!("{}: {digest:?}", sql.digest))
        }
        _ => {
            let own: i32 = path.value(&*client, &sql.own, &[(&n, Type::INT4)]).await?;
            let want = n + i32::try_from(k).unwrap_or(0);
            ensure(own == want, || format!("{}: {own}, expected {want} (another client's statement?)", sql.own))
        }
    }
}

/// A background client of S7 and S8: S4-style transactions (read a row, write an audit row) with the named
/// statements of the default path, inside transactions only, until told to stop.
pub async fn background_txn(env: Arc<Env>, driver: &'static str, i: usize, mut progress: Progress) -> Tally {
    let mut tally = Tally::default();
    let label = format!("{driver}-bg");
    let mut conn = match connect(&env, &label).await {
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
        let round = async {
            let tx = conn.client.transaction().await?;
            let v: String = QueryPath::Named.value(&tx, &sql.select, &[(&id, Type::INT4)]).await?;
            ensure(v == format!("value {id}"), || format!("row {id} read as {v:?}"))?;
            let n = i32::try_from(n).unwrap_or(i32::MAX);
            QueryPath::Named.query(&tx, &sql.insert, &[(&sql.audit_client, Type::TEXT), (&n, Type::INT4)]).await?;
            tx.commit().await.map_err(Failure::from)
        };
        let result = round.await;
        if result.is_ok() {
            progress.tick();
        }
        tally.record(result);
        n += 1;
    }
    conn.close().await;
    tally
}
