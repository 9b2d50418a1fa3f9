//! Questions asked of PostgreSQL itself, past the pooler, as the superuser: how many backends the application
//! user has, whether one is left idle in a transaction, what the load scenarios wrote. Also the tokio-postgres
//! connection wrapper that every tokio-postgres client of the suite uses, so that each one is closed with a
//! Terminate rather than dropped with the process.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_postgres::{Client, NoTls};

use crate::env::Env;
use crate::report::{Failure, ensure};

/// A tokio-postgres client and the task that drives its connection.
#[derive(Debug)]
pub struct TpConn {
    pub client: Client,
    /// `server_version` as the driver saw it in ParameterStatus at login.
    pub server_version: Option<String>,
    task: JoinHandle<()>,
}

impl TpConn {
    pub async fn connect(cfg: &tokio_postgres::Config) -> Result<TpConn, Failure> {
        let (client, connection) = cfg.connect(NoTls).await.map_err(|e| Failure::from(e).context("connect"))?;
        let server_version = connection.parameter("server_version").map(str::to_owned);
        let task = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(TpConn { client, server_version, task })
    }

    /// Drops the client, which makes the connection send Terminate, and waits (briefly) for it to finish.
    pub async fn close(self) {
        drop(self.client);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }
}

/// A superuser connection straight to PostgreSQL.
#[derive(Debug, Clone)]
pub struct Oracle {
    client: Arc<Client>,
    app_user: String,
    direct: bool,
}

impl Oracle {
    pub async fn connect(env: &Env) -> Result<(Oracle, JoinHandle<()>), Failure> {
        let conn = TpConn::connect(&env.oracle_config()).await.map_err(|e| e.context("oracle (DIRECT_PGPORT)"))?;
        let oracle = Oracle { client: Arc::new(conn.client), app_user: env.user.clone(), direct: env.is_direct() };
        Ok((oracle, conn.task))
    }

    pub async fn count(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<i64, Failure> {
        let row = self.client.query_one(sql, params).await.map_err(|e| Failure::from(e).context("oracle"))?;
        row.try_get(0).map_err(|e| Failure::from(e).context("oracle"))
    }

    /// Client backends of the application user right now: the pool's, not pgmux's liveness probe connection
    /// (`pgmux-probe`, opened beside a full pool that went a second without a connection coming back).
    pub async fn backends(&self) -> Result<i64, Failure> {
        self.count(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND backend_type = 'client backend' \
             AND application_name IS DISTINCT FROM 'pgmux-probe'",
            &[&self.app_user],
        )
        .await
    }

    /// Fails if a backend of the application user is idle in a transaction (or in an aborted one). A pooler
    /// may hold a server a moment after its client is done, so this looks a few times over half a second.
    pub async fn no_idle_in_transaction(&self) -> Result<(), Failure> {
        let mut found = 0;
        for _ in 0..10 {
            found = self
                .count(
                    "SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND state LIKE 'idle in transaction%'",
                    &[&self.app_user],
                )
                .await?;
            if found == 0 {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(Failure::check(format!("{found} backend(s) left idle in transaction")))
    }

    /// Samples [`Oracle::backends`] every 20 ms until the sampler is stopped; `None` when the suite runs
    /// straight against PostgreSQL, where every client has a backend of its own and there is no limit.
    pub fn sample_backends(&self) -> BackendSampler {
        let max = Arc::new(AtomicI64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let task = (!self.direct).then(|| {
            let (oracle, max, stop) = (self.clone(), Arc::clone(&max), Arc::clone(&stop));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(n) = oracle.backends().await {
                        max.fetch_max(n, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        });
        BackendSampler { max, stop, task }
    }

    /// Removes the audit rows of an earlier run of `driver`'s load scenario.
    pub async fn clear_audit(&self, driver: &str) -> Result<(), Failure> {
        self.client
            .execute("DELETE FROM audit WHERE client LIKE $1", &[&audit_pattern(driver)])
            .await
            .map(|_| ())
            .map_err(|e| Failure::from(e).context("oracle"))
    }

    /// Checks what the load scenario S4 wrote: one audit row per transaction, every update counted, more than
    /// one backend used, and (through a pooler) never more backends than `pool_max`.
    pub async fn check_load(
        &self,
        env: &Env,
        driver: &str,
        counter_table: &str,
        max_backends: Option<i64>,
    ) -> Result<String, Failure> {
        let want = i64::try_from(env.clients * env.txns).unwrap_or(i64::MAX);
        let pattern = audit_pattern(driver);
        let rows = self.count("SELECT count(*) FROM audit WHERE client LIKE $1", &[&pattern]).await?;
        let distinct =
            self.count("SELECT count(DISTINCT (client, n)) FROM audit WHERE client LIKE $1", &[&pattern]).await?;
        let pids = self.count("SELECT count(DISTINCT pid) FROM audit WHERE client LIKE $1", &[&pattern]).await?;
        let updates = self.count(&format!("SELECT coalesce(sum(n), 0)::int8 FROM {counter_table}"), &[]).await?;
        ensure(rows == want && distinct == want, || format!("{rows} audit rows ({distinct} distinct) of {want}"))?;
        ensure(updates == want, || format!("{updates} updates counted of {want}"))?;
        ensure(pids >= 2, || format!("the audit rows name {pids} backend pid(s); expected at least 2"))?;
        match max_backends {
            Some(max) => {
                ensure(max <= env.pool_max, || {
                    format!("{max} backends of {} at once; MATRIX_POOL_MAX is {}", env.user, env.pool_max)
                })?;
                Ok(format!("{want} txns, {max} backends, {pids} pids"))
            }
            None => Ok(format!(
                "{want} txns, {pids} pids; backend limit not checked: PGPORT is PostgreSQL itself (DIRECT_PGPORT)"
            )),
        }
    }
}

/// The `LIKE` pattern of `driver`'s audit rows (`<driver>:<client>`; the colon keeps `sqlx` from matching
/// `sqlx-unnamed`).
fn audit_pattern(driver: &str) -> String {
    format!("{driver}:%")
}

/// The most backends seen while it ran.
#[derive(Debug)]
pub struct BackendSampler {
    max: Arc<AtomicI64>,
    stop: Arc<AtomicBool>,
    task: Option<JoinHandle<()>>,
}

impl BackendSampler {
    pub async fn stop(mut self) -> Option<i64> {
        self.stop.store(true, Ordering::Relaxed);
        let task = self.task.take()?;
        let _ = task.await;
        Some(self.max.load(Ordering::Relaxed))
    }
}

impl Drop for BackendSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
