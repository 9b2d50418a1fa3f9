//! tokio-postgres 0.7 at its defaults (drivers.md §3.9). `Client::query(&str)` prepares a named statement
//! `s<n>` (Parse+Describe+Sync), executes it (Bind+Execute+Sync) and closes it when the `Statement` drops:
//! three Sync units per call, so a pooler must carry the name across them. The `tokio-postgres-typed`
//! variant uses `query_typed`, the unnamed statement in one Sync unit.

mod churn;
mod copy;
mod faults;

use std::sync::Arc;

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{GenericClient, Row};

use crate::env::Env;
use crate::oracle::{Oracle, TpConn};
use crate::report::{Failure, Outcome, Report, ensure};
use crate::values::Sample;

const DRIVER: &str = "tokio-postgres";
const TYPED: &str = "tokio-postgres-typed";

/// Every scenario of both variants, in order.
pub async fn run(env: &Arc<Env>, oracle: &Oracle, report: &mut Report) {
    report.scenario(DRIVER, "S1", s1(env)).await;
    report.scenario(DRIVER, "S3", s3(env, QueryPath::Named)).await;
    report.scenario(DRIVER, "S4", churn::s4(env, oracle, QueryPath::Named, DRIVER)).await;
    report.scenario(DRIVER, "S5b", faults::s5b(env, oracle)).await;
    report.scenario(DRIVER, "S5d", faults::s5d(env, oracle)).await;
    report.scenario(DRIVER, "S6", copy::s6(env, oracle)).await;
    report.scenario(DRIVER, "S7", copy::s7(env, oracle)).await;
    report.scenario(DRIVER, "S8", faults::s8(env, oracle)).await;
    report.scenario(DRIVER, "S13", crate::s13::tokio_postgres()).await;
    report.scenario(TYPED, "S3", s3(env, QueryPath::Typed)).await;
    report.scenario(TYPED, "S4", churn::s4(env, oracle, QueryPath::Typed, TYPED)).await;
}

/// How a variant sends a parameterised query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryPath {
    /// `query(&str, params)`: a named statement per call (the default).
    Named,
    /// `query_typed(&str, params with types)`: the unnamed statement, one round trip.
    Typed,
}

impl QueryPath {
    pub async fn query(
        self,
        client: &impl GenericClient,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, Failure> {
        let rows = match self {
            QueryPath::Named => {
                let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
                client.query(sql, &values).await
            }
            QueryPath::Typed => client.query_typed(sql, params).await,
        };
        rows.map_err(Failure::from)
    }

    /// The single value of a one-row, one-column result.
    pub async fn value<T: for<'a> tokio_postgres::types::FromSql<'a>>(
        self,
        client: &impl GenericClient,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<T, Failure> {
        let rows = self.query(client, sql, params).await?;
        ensure(rows.len() == 1, || format!("{sql}: {} rows, expected 1", rows.len()))?;
        rows[0].try_get(0).map_err(Failure::from)
    }
}

/// Connects as the application user with `application_name` `matrix-<driver>`.
pub async fn connect(env: &Env, driver: &str) -> Result<TpConn, Failure> {
    TpConn::connect(&env.tokio_config(&format!("matrix-{driver}"))).await
}

/// S1: the client and four others with other application names each run 100 transactions on the shared
/// servers; every `SHOW application_name` must be the client's own. The driver must have seen
/// `server_version` ≥ 12 at login, and its own start-up parameter `client_encoding=UTF8` must hold.
async fn s1(env: &Env) -> Outcome {
    let mut clients = Vec::new();
    for i in 0..5 {
        let app = if i == 0 { format!("matrix-{DRIVER}") } else { format!("matrix-{DRIVER}-other{i}") };
        let conn = TpConn::connect(&env.tokio_config(&app)).await?;
        clients.push((app, conn));
    }
    let version = clients[0].1.server_version.clone().unwrap_or_default();
    let major: u32 = version.split(|c: char| !c.is_ascii_digit()).next().and_then(|m| m.parse().ok()).unwrap_or(0);
    let checks = clients.into_iter().map(|(app, mut conn)| async move {
        let result = s1_client(&app, &mut conn).await;
        conn.close().await;
        result
    });
    let results = futures_util::future::join_all(checks).await;
    results.into_iter().collect::<Result<Vec<()>, Failure>>()?;
    ensure(major >= 12, || format!("the driver saw server_version {version:?}"))?;
    Ok(format!(
        "server_version {version}; application_name kept over 100 txns by each of 5 clients; client_encoding UTF8"
    ))
}

async fn s1_client(app: &str, conn: &mut TpConn) -> Result<(), Failure> {
    for n in 0..100 {
        let tx = conn.client.transaction().await?;
        let seen: String = QueryPath::Named.value(&tx, "SHOW application_name", &[]).await?;
        ensure(seen == app, || format!("transaction {n} of {app} saw application_name {seen:?}"))?;
        if n == 99 {
            let encoding: String = QueryPath::Named.value(&tx, "SHOW client_encoding", &[]).await?;
            ensure(encoding == "UTF8", || format!("{app} saw client_encoding {encoding:?}"))?;
        }
        tx.commit().await?;
    }
    Ok(())
}

/// S3: ten types through the variant's query path, outside a transaction, must come back equal.
async fn s3(env: &Env, path: QueryPath) -> Outcome {
    let driver = if path == QueryPath::Named { DRIVER } else { TYPED };
    let conn = connect(env, driver).await?;
    let result = s3_round_trip(&conn, path).await;
    conn.close().await;
    result
}

async fn s3_round_trip(conn: &TpConn, path: QueryPath) -> Outcome {
    let s = Sample::new();
    let params: [(&(dyn ToSql + Sync), Type); 10] = [
        (&s.int4, Type::INT4),
        (&s.int8, Type::INT8),
        (&s.numeric, Type::NUMERIC),
        (&s.text, Type::TEXT),
        (&s.bytea, Type::BYTEA),
        (&s.boolean, Type::BOOL),
        (&s.timestamptz, Type::TIMESTAMPTZ),
        (&s.uuid, Type::UUID),
        (&s.jsonb, Type::JSONB),
        (&s.int_array, Type::INT4_ARRAY),
    ];
    let rows = path.query(&conn.client, Sample::SQL, &params).await?;
    ensure(rows.len() == 1, || format!("{} rows, expected 1", rows.len()))?;
    let row = &rows[0];
    let back = Sample {
        int4: row.try_get(0)?,
        int8: row.try_get(1)?,
        numeric: row.try_get(2)?,
        text: row.try_get(3)?,
        bytea: row.try_get(4)?,
        boolean: row.try_get(5)?,
        timestamptz: row.try_get(6)?,
        uuid: row.try_get(7)?,
        jsonb: row.try_get(8)?,
        int_array: row.try_get(9)?,
    };
    s.compare(&back)?;
    Ok(format!("10 types round-trip equal ({})", Sample::TYPES))
}
