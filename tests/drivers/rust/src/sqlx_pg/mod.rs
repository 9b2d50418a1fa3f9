//! sqlx 0.9 (postgres) at its defaults (drivers.md §3.10). A query with arguments is prepared as a
//! persistent named statement `sqlx_s_<n>` (Parse+Describe+Sync), cached per connection, then executed
//! (Bind+Execute+Close portal+Sync): two Sync units, and the name outlives the transaction. The
//! `sqlx-unnamed` variant (`.persistent(false)`) uses the unnamed statement, still across two Sync units.

mod churn;
mod copy;

use std::sync::Arc;

use sqlx::postgres::{PgArguments, PgConnection, PgPoolOptions, PgRow};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Connection, Postgres, Row};

use crate::env::Env;
use crate::load::Tally;
use crate::oracle::Oracle;
use crate::report::{Failure, Outcome, Report, ensure};
use crate::values::Sample;

const DRIVER: &str = "sqlx";
const UNNAMED: &str = "sqlx-unnamed";

/// Every scenario of both variants, in order.
pub async fn run(env: &Arc<Env>, oracle: &Oracle, report: &mut Report) {
    report.scenario(DRIVER, "S1", s1(env)).await;
    report.scenario(DRIVER, "S3", s3(env)).await;
    report.scenario(DRIVER, "S4", churn::s4(env, oracle)).await;
    report.scenario(DRIVER, "S5d", copy::s5d(env, oracle)).await;
    report.scenario(DRIVER, "S6", copy::s6(env, oracle)).await;
    report.scenario(DRIVER, "S7", churn::s7(env, oracle)).await;
    report.scenario(DRIVER, "S8", churn::s8(env, oracle)).await;
    report.scenario(DRIVER, "S13", s13(env)).await;
    report.scenario(UNNAMED, "S14", s14(env)).await;
}

/// `sqlx::query` for SQL built at run time (sqlx 0.9 takes only `&'static str` without the assertion).
fn query(sql: &str) -> Query<'static, Postgres, PgArguments> {
    sqlx::query(AssertSqlSafe(sql.to_owned()))
}

/// Connects as the application user with `application_name` `app`.
async fn connect(env: &Env, app: &str) -> Result<PgConnection, Failure> {
    PgConnection::connect_with(&env.sqlx_options(app)).await.map_err(|e| Failure::from(e).context("connect"))
}

/// One column of a row.
fn get<T>(row: &PgRow, index: usize) -> Result<T, Failure>
where
    T: for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
{
    row.try_get(index).map_err(Failure::from)
}

/// S1: the client and four others (other application names, `extra_float_digits` 3) each run 100
/// transactions on the shared servers; the client must keep its application_name and sqlx's start-up
/// parameters (`extra_float_digits` 2, DateStyle `ISO, MDY`, TimeZone `UTC`), and have seen
/// server_version ≥ 12.
async fn s1(env: &Env) -> Outcome {
    let mut conns = Vec::new();
    for i in 0..5 {
        let (app, digits) =
            if i == 0 { (format!("matrix-{DRIVER}"), 2) } else { (format!("matrix-{DRIVER}-other{i}"), 3) };
        let options = env.sqlx_options(&app);
        let options = if i == 0 { options } else { options.extra_float_digits(3) };
        let conn = PgConnection::connect_with(&options).await.map_err(|e| Failure::from(e).context("connect"))?;
        conns.push((app, digits, conn));
    }
    let version = conns[0].2.server_version_num().unwrap_or(0);
    // Each client closes its connection as soon as it is done: after a failure sqlx only queues the
    // ROLLBACK, and a client idle in a transaction would keep one of the pooler's servers from the others.
    let checks = conns.into_iter().map(|(app, digits, mut conn)| async move {
        let result = s1_client(&app, digits, &mut conn).await;
        let _ = conn.close().await;
        result
    });
    let results = futures_util::future::join_all(checks).await;
    results.into_iter().collect::<Result<Vec<()>, Failure>>()?;
    ensure(version >= 120_000, || format!("the driver saw server_version_num {version}"))?;
    Ok(format!(
        "server_version_num {version}; application_name and extra_float_digits kept over 100 txns by each of \
         5 clients; DateStyle ISO, MDY; TimeZone UTC"
    ))
}

async fn s1_client(app: &str, digits: i32, conn: &mut PgConnection) -> Result<(), Failure> {
    for n in 0..100 {
        let mut tx = conn.begin().await?;
        let seen: String = sqlx::query_scalar("SHOW application_name").fetch_one(&mut *tx).await?;
        ensure(seen == app, || format!("transaction {n} of {app} saw application_name {seen:?}"))?;
        let float: String = sqlx::query_scalar("SHOW extra_float_digits").fetch_one(&mut *tx).await?;
        ensure(float == digits.to_string(), || format!("transaction {n} of {app} saw extra_float_digits {float}"))?;
        if n == 99 {
            let date_style: String = sqlx::query_scalar("SHOW DateStyle").fetch_one(&mut *tx).await?;
            let zone: String = sqlx::query_scalar("SHOW TimeZone").fetch_one(&mut *tx).await?;
            ensure(date_style == "ISO, MDY" && zone == "UTC", || {
                format!("{app} saw DateStyle {date_style:?}, TimeZone {zone:?}")
            })?;
        }
        tx.commit().await?;
    }
    Ok(())
}

/// S3: ten types bound as arguments (the default path: a persistent named statement), outside a
/// transaction, must come back equal.
async fn s3(env: &Env) -> Outcome {
    let mut conn = connect(env, &format!("matrix-{DRIVER}")).await?;
    let s = Sample::new();
    let row = sqlx::query(Sample::SQL)
        .bind(s.int4)
        .bind(s.int8)
        .bind(s.numeric)
        .bind(&s.text)
        .bind(&s.bytea)
        .bind(s.boolean)
        .bind(s.timestamptz)
        .bind(s.uuid)
        .bind(&s.jsonb)
        .bind(&s.int_array)
        .fetch_one(&mut conn)
        .await;
    let _ = conn.close().await;
    let row = row?;
    let back = Sample {
        int4: get(&row, 0)?,
        int8: get(&row, 1)?,
        numeric: get(&row, 2)?,
        text: get(&row, 3)?,
        bytea: get(&row, 4)?,
        boolean: get(&row, 5)?,
        timestamptz: get(&row, 6)?,
        uuid: get(&row, 7)?,
        jsonb: get(&row, 8)?,
        int_array: get(&row, 9)?,
    };
    s.compare(&back)?;
    Ok(format!("10 types round-trip equal ({})", Sample::TYPES))
}

/// S13: two connections each prepare their own SQL first (both named `sqlx_s_1`: sqlx counts per
/// connection) and then the same SQL (both `sqlx_s_2`), and execute both `MATRIX_TXNS` times outside a
/// transaction, at the same time.
async fn s13(env: &Env) -> Outcome {
    let offsets = [1000, 2000];
    let runs = offsets.map(|offset| async move {
        let mut conn = connect(env, &format!("matrix-{DRIVER}-s13-{offset}")).await?;
        let mut tally = Tally::default();
        for i in 0..i32::try_from(env.txns).unwrap_or(i32::MAX) {
            let round = async {
                let own = format!("SELECT $1::int4 + {offset}");
                let mine: i32 = get(&query(&own).bind(i).fetch_one(&mut conn).await?, 0)?;
                ensure(mine == i + offset, || format!("{own} returned {mine} (another connection's statement?)"))?;
                let tripled: i32 = get(&sqlx::query("SELECT $1::int4 * 3").bind(i).fetch_one(&mut conn).await?, 0)?;
                ensure(tripled == 3 * i, || format!("SELECT $1::int4 * 3 returned {tripled}"))
            };
            tally.record(round.await);
        }
        let _ = conn.close().await;
        tally.clean("execution pairs").map_err(|f| f.context(&format!("connection {offset}")))
    });
    let [a, b] = runs;
    let (a, b) = tokio::join!(a, b);
    a?;
    b?;
    Ok(format!(
        "2 connections: sqlx_s_1 (own SQL) and sqlx_s_2 (shared SQL) right {} times each outside a transaction",
        env.txns
    ))
}

/// S14: `MATRIX_CLIENTS` clients on a pool each run `MATRIX_TXNS` queries of their own SQL with
/// `.persistent(false)`: Parse of the unnamed statement + Sync, then Bind + Execute + Sync, outside a
/// transaction. Each result must be the client's own.
async fn s14(env: &Env) -> Outcome {
    let pool = PgPoolOptions::new()
        .max_connections(u32::try_from(env.clients).unwrap_or(50))
        .connect_with(env.sqlx_options(&format!("matrix-{UNNAMED}")))
        .await
        .map_err(|e| Failure::from(e).context("pool"))?;
    let clients = (0..env.clients).map(|k| {
        let pool = pool.clone();
        async move {
            let mut tally = Tally::default();
            let k32 = i32::try_from(k).unwrap_or(0);
            let own = format!("SELECT $1::int4 + {k}");
            for i in 0..i32::try_from(env.txns).unwrap_or(i32::MAX) {
                let round = async {
                    let row = query(&own).bind(i).persistent(false).fetch_one(&pool).await?;
                    let got: i32 = get(&row, 0)?;
                    ensure(got == i + k32, || format!("{own} with {i} returned {got} (another client's SQL?)"))
                };
                tally.record(round.await);
            }
            tally
        }
    });
    let mut tally = Tally::default();
    for client in futures_util::future::join_all(clients).await {
        tally.merge(client);
    }
    pool.close().await;
    tally.clean("queries")?;
    Ok(format!("{} unnamed-statement queries by {} clients, every result the client's own", tally.ok, env.clients))
}
