//! Reader discovery (`readers = "aurora"`): which instances a reader route has, read from the cluster's own
//! topology rather than configured.
//!
//! Every topology poll of the route ([`watch`](super::watch)) reads
//! `aurora_replica_status()` over the poll's connection to the writer (the route's own endpoint), or, if the
//! writer does not answer (it is failing over), over any instance's poll connection: every Aurora instance
//! answers the same rows. The rows name each instance by `server_id` and the writer by its
//! `MASTER_SESSION_ID`; rows not updated for 300 s are left out, as the AWS JDBC wrapper leaves them out.
//! Every other instance is a reader, reached at `<server_id>.<instance_domain>` on the route's port. A reader
//! the set lacks gets a pool (logging in as the route's pool does) and is polled in the same round; one the
//! rows no longer list as a reader — removed, or promoted to writer — leaves the set, and its pool drains.
//! No row, no change: a topology that cannot be read leaves the set as it was.

use std::sync::Arc;
use std::time::Duration;

use super::{Member, PollConns, ReaderSet, TOPOLOGY_NAME};
use crate::config::aurora;
use crate::config::credentials::Credentials;
use crate::pools::routing::RoutePlan;
use crate::pools::{PoolId, PoolSetup, Pools, ServerPool};
use crate::server::ServerConn;

/// The instances of the cluster that are fresh: the writer, the instance asked (NULL timestamp), and readers
/// updated within 300 s. Bounded: Aurora has at most 15 readers.
const TOPOLOGY_SQL: &str = "SELECT server_id, session_id = 'MASTER_SESSION_ID' \
    FROM pg_catalog.aurora_replica_status() \
    WHERE session_id = 'MASTER_SESSION_ID' OR last_update_timestamp IS NULL \
    OR last_update_timestamp >= pg_catalog.now() - interval '300 seconds' LIMIT 65;";

/// Most readers one route takes from the topology (Aurora allows 15).
const MAX_READERS: usize = 64;

/// The logins of a discovered instance's pool, made from its plan.
type MakeCredentials = dyn Fn(&RoutePlan) -> Result<Arc<dyn Credentials>, String> + Send + Sync;

/// How a reader route discovers its instances.
pub(crate) struct Discovery {
    /// The route's plan, which each instance's is made from.
    pub(crate) template: RoutePlan,
    /// Where instance endpoints are: `<server_id>.<domain>`.
    pub(crate) domain: String,
    pub(crate) credentials: Box<MakeCredentials>,
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery").field("route", &self.template.key).field("domain", &self.domain).finish()
    }
}

/// One row of the topology: an instance, and whether it is the writer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Row {
    pub(super) server_id: String,
    pub(super) writer: bool,
}

impl Discovery {
    /// Reads the topology and brings `set`'s members in line with it.
    pub(super) async fn refresh(&self, set: &ReaderSet, pools: &Pools, conns: &mut PollConns, timeout: Duration) {
        match read(set, pools, conns, timeout).await {
            Some(rows) => self.reconcile(set, pools, &rows),
            None => {
                tracing::debug!(route = %set.route, "topology: no instance answered; the readers stay as they were")
            }
        }
    }

    /// The members the rows call for: those already there stay, new ones get a pool, the rest drain.
    fn reconcile(&self, set: &ReaderSet, pools: &Pools, rows: &[Row]) {
        let current = set.members();
        let mut next: Vec<Arc<Member>> = Vec::new();
        for row in rows.iter().filter(|r| !r.writer) {
            if next.len() >= MAX_READERS || next.iter().any(|m| m.name == row.server_id) {
                continue;
            }
            if let Some(member) = current.iter().find(|m| m.name == row.server_id) {
                next.push(Arc::clone(member));
                continue;
            }
            match self.pool_of(pools, &row.server_id) {
                Ok(id) => {
                    tracing::info!(route = %set.route, reader = %row.server_id, "reader found in the topology");
                    next.push(Arc::new(Member::new(id, row.server_id.clone())));
                }
                Err(why) => tracing::debug!(route = %set.route, reader = %row.server_id, %why, "reader not used"),
            }
        }
        let gone: Vec<&Arc<Member>> = current.iter().filter(|m| !next.iter().any(|n| n.id == m.id)).collect();
        for member in &gone {
            tracing::info!(route = %set.route, reader = %member.name,
                "reader left the topology (removed, or now the writer): it takes no new transactions and drains");
            let pool = pools.get(member.id);
            pool.reconnect();
            if let Some(conn) = pool.take_poll_conn() {
                pool.retire(conn);
            }
        }
        if !gone.is_empty() || next.len() != current.len() {
            set.set_members(next);
        }
        // Out of what a transaction may pick from now on: those waiting for one go elsewhere.
        for member in &gone {
            pools.get(member.id).leave_rotation("it left the topology");
        }
    }

    /// The pool of the instance `server_id`: made the first time, found again after.
    fn pool_of(&self, pools: &Pools, server_id: &str) -> Result<PoolId, String> {
        let endpoint = aurora::instance_host(server_id, &self.domain)
            .ok_or_else(|| "its server_id cannot be a host name".to_owned())?;
        let (host, port) = pools
            .locate(&endpoint, self.template.login.port)
            .ok_or_else(|| format!("where {endpoint} is, is not known yet"))?;
        let plan = self.template.discovered(server_id, &host, port);
        if let Some(id) = pools.find(&plan.key) {
            return Ok(id);
        }
        let credentials = (self.credentials)(&plan)?;
        pools.pool_for(PoolSetup { plan, credentials }).map_err(|e| e.to_string())
    }
}

/// The topology as the writer tells it, else as the first instance that answers tells it.
async fn read(set: &ReaderSet, pools: &Pools, conns: &mut PollConns, timeout: Duration) -> Option<Vec<Row>> {
    if let Some(rows) = ask(pools.get(set.writer), &mut conns.writer, timeout).await {
        return Some(rows);
    }
    for member in set.members().iter() {
        let pool = pools.get(member.id);
        let mut conn = pool.take_poll_conn();
        let rows = ask(pool, &mut conn, timeout).await;
        if let Some(conn) = conn {
            pool.put_poll_conn(conn);
        }
        if rows.is_some() {
            return rows;
        }
    }
    None
}

/// The rows over `conn` (opened if needed); `None` if it fails or says nothing within `timeout`, and then
/// the connection is closed.
async fn ask(pool: &ServerPool, conn: &mut Option<Box<ServerConn>>, timeout: Duration) -> Option<Vec<Row>> {
    let answer = pgmux_timer::timeout(timeout, async {
        if conn.is_none() {
            let opened = pool.open_control(TOPOLOGY_NAME).await;
            let opened = opened.inspect_err(|e| tracing::debug!(error = %e, "topology: cannot connect")).ok()?;
            *conn = Some(Box::new(opened));
        }
        let rows = conn.as_mut()?.run_guarded(TOPOLOGY_SQL, timeout).await;
        rows.inspect_err(|e| tracing::debug!(error = %e, "topology: cannot read aurora_replica_status()")).ok()
    })
    .await;
    let rows = answer.ok().flatten();
    let parsed = rows.as_deref().map(parse);
    if parsed.is_none()
        && let Some(c) = conn.take()
    {
        pool.retire(c);
    }
    parsed
}

/// Rows as text: `server_id`, and `t` for the writer. Rows without a `server_id` are skipped.
fn parse(rows: &[Vec<Option<String>>]) -> Vec<Row> {
    rows.iter()
        .filter_map(|row| {
            let server_id = row.first()?.as_deref()?.to_owned();
            let writer = row.get(1).and_then(|v| v.as_deref()) == Some("t");
            Some(Row { server_id, writer })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_read_as_instances_and_the_writer() {
        let text = |v: &str| Some(v.to_owned());
        let rows = vec![
            vec![text("writer-1"), text("t")],
            vec![text("reader-1"), text("f")],
            vec![None, text("f")],
            vec![text("reader-2"), None],
        ];
        let want = |id: &str, writer| Row { server_id: id.to_owned(), writer };
        assert_eq!(parse(&rows), vec![want("writer-1", true), want("reader-1", false), want("reader-2", false)]);
    }
}
