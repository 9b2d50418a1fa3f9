//! S17: two routes of one pooler, each logged in as another user, used by one driver at once (issue 30).
//! Connection A goes to `MATRIX_ROUTE_A` as `MATRIX_ROUTE_A_USER`, B to `MATRIX_ROUTE_B` as
//! `MATRIX_ROUTE_B_USER`, both on `MATRIX_ROUTES_PGPORT`. Each prepares the same text with
//! `Client::prepare` (named from tokio-postgres' process-wide counter, so the two names differ), and uses
//! it in 20 rounds of interleaved transactions: each route's pool must have its own statement ready.

use crate::env::Env;
use crate::oracle::TpConn;
use crate::report::{Failure, Outcome, ensure};

const ROUNDS: i32 = 20;
const SQL: &str = "SELECT current_user::text, $1::int + 1";

/// One route: where its connection goes and as whom.
struct Route {
    name: &'static str,
    database: String,
    user: String,
    password: String,
}

fn var(key: &str, default: &str) -> String {
    std::env::var(key).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_owned())
}

pub async fn tokio_postgres(env: &Env) -> Outcome {
    let port: u16 = var("MATRIX_ROUTES_PGPORT", &env.port.to_string())
        .parse()
        .map_err(|e| Failure::check(format!("MATRIX_ROUTES_PGPORT: {e}")))?;
    let routes = [
        Route {
            name: "A",
            database: var("MATRIX_ROUTE_A", &env.database),
            user: var("MATRIX_ROUTE_A_USER", "pgmux_plain"),
            password: var("MATRIX_ROUTE_A_PASSWORD", ""),
        },
        Route {
            name: "B",
            database: var("MATRIX_ROUTE_B", &env.database),
            user: var("MATRIX_ROUTE_B_USER", "pgmux_md5"),
            password: var("MATRIX_ROUTE_B_PASSWORD", ""),
        },
    ];
    let mut conns = Vec::new();
    for route in &routes {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host(&env.host)
            .port(port)
            .user(&route.user)
            .password(&route.password)
            .dbname(&route.database)
            .application_name("matrix-tokio-postgres")
            .connect_timeout(env.timeout);
        match TpConn::connect(&cfg).await {
            Ok(conn) => conns.push(conn),
            Err(e) => {
                for conn in conns {
                    conn.close().await;
                }
                return Err(e.context(&format!("route {} ({} as {})", route.name, route.database, route.user)));
            }
        }
    }
    let result = interleave(&routes, &conns).await;
    for conn in conns {
        conn.close().await;
    }
    result?;
    Ok(format!(
        "{ROUNDS} interleaved txns each: {} as {}, {} as {}, one statement text on both",
        routes[0].database, routes[0].user, routes[1].database, routes[1].user
    ))
}

async fn interleave(routes: &[Route], conns: &[TpConn]) -> Result<(), Failure> {
    let mut statements = Vec::new();
    for conn in conns {
        statements.push(conn.client.prepare(SQL).await?);
    }
    for i in 0..ROUNDS {
        for conn in conns {
            conn.client.batch_execute("BEGIN").await?;
        }
        for ((route, conn), statement) in routes.iter().zip(conns).zip(&statements) {
            let row = conn.client.query_one(statement, &[&i]).await?;
            let (who, n): (String, i32) = (row.try_get(0)?, row.try_get(1)?);
            ensure(who == route.user && n == i + 1, || {
                format!("route {} round {i}: got ({who}, {n}), want ({}, {})", route.name, route.user, i + 1)
            })?;
        }
        for conn in conns.iter().rev() {
            conn.client.batch_execute("COMMIT").await?;
        }
    }
    Ok(())
}
