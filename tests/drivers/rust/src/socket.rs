//! S16: the Unix socket. Both drivers take a directory for a host, as libpq does (tokio-postgres'
//! `host_path`, sqlx's `socket`), and find `.s.PGSQL.<port>` in it; four clients run 25 transactions each
//! through `MATRIX_SOCKET_DIR`, and the server must have seen the pooler's TCP connection (directly: a Unix
//! client), on at most `MATRIX_POOL_MAX` backends.

use std::collections::BTreeSet;

use sqlx::{Connection, Row};

use crate::env::Env;
use crate::oracle::TpConn;
use crate::report::{Failure, Outcome, ensure};

const CLIENTS: usize = 4;
const TXNS: usize = 25;
const SQL: &str = "SELECT pg_backend_pid(), inet_client_addr() IS NULL";

/// What the server said in each transaction: its backend, and whether the client had no address.
type Seen = Vec<(i32, bool)>;

pub async fn tokio_postgres(env: &Env) -> Outcome {
    let clients = (0..CLIENTS).map(|_| async {
        // A configuration of its own: `tokio_config`'s TCP host would be tried first.
        let mut cfg = tokio_postgres::Config::new();
        cfg.host_path(&env.socket_dir)
            .port(env.port)
            .user(&env.user)
            .password(&env.password)
            .dbname(&env.database)
            .application_name("matrix-tokio-postgres")
            .connect_timeout(env.timeout);
        let mut conn = TpConn::connect(&cfg).await?;
        let mut seen = Seen::new();
        let result = async {
            for _ in 0..TXNS {
                let tx = conn.client.transaction().await?;
                let row = tx.query_one(SQL, &[]).await?;
                seen.push((row.try_get(0)?, row.try_get(1)?));
                tx.commit().await?;
            }
            Ok::<_, Failure>(())
        }
        .await;
        conn.close().await;
        result.map(|()| seen)
    });
    judge(env, futures_util::future::join_all(clients).await)
}

pub async fn sqlx(env: &Env) -> Outcome {
    let clients = (0..CLIENTS).map(|_| async {
        let options = env.sqlx_options("matrix-sqlx").socket(&env.socket_dir);
        let mut conn = sqlx::postgres::PgConnection::connect_with(&options)
            .await
            .map_err(|e| Failure::from(e).context("connect"))?;
        let mut seen = Seen::new();
        let result = async {
            for _ in 0..TXNS {
                let mut tx = conn.begin().await?;
                let row = sqlx::query(SQL).fetch_one(&mut *tx).await?;
                seen.push((row.try_get(0)?, row.try_get(1)?));
                tx.commit().await?;
            }
            Ok::<_, Failure>(())
        }
        .await;
        let _ = conn.close().await;
        result.map(|()| seen)
    });
    judge(env, futures_util::future::join_all(clients).await)
}

fn judge(env: &Env, results: Vec<Result<Seen, Failure>>) -> Outcome {
    let mut pids = BTreeSet::new();
    let mut unix_clients = 0;
    for result in results {
        for (pid, no_address) in result? {
            pids.insert(pid);
            unix_clients += usize::from(no_address);
        }
    }
    let total = CLIENTS * TXNS;
    if env.is_direct() {
        ensure(unix_clients == total, || format!("{} of {total} transactions had a TCP client", total - unix_clients))?;
    } else {
        ensure(unix_clients == 0, || format!("{unix_clients} of {total} transactions ran on a Unix-socket backend"))?;
        let backends = i64::try_from(pids.len()).unwrap_or(i64::MAX);
        ensure(backends <= env.pool_max, || format!("{backends} backends for MATRIX_POOL_MAX={}", env.pool_max))?;
    }
    let client = if env.is_direct() { "a Unix client" } else { "the pooler's TCP connection" };
    Ok(format!(
        "{total} txns through {}/.s.PGSQL.{}, {} backends, each saw {client}",
        env.socket_dir,
        env.port,
        pids.len()
    ))
}
