//! The topology a scenario runs on, rebuilt for every run so that each starts the same: node A (primary),
//! node B (its streaming standby, made with `pg_basebackup -R`), Toxiproxy in front of each, and the writer
//! host name pointing at A's proxy.
//!
//! ```text
//!   clients ─▶ pooler ─▶ writer.test:5432 ─┬▶ 127.0.20.1 (Toxiproxy) ─▶ 127.0.10.1 node A
//!                                          └▶ 127.0.20.2 (Toxiproxy) ─▶ 127.0.10.2 node B
//!   B streams from A directly (10.1), not through Toxiproxy, so network faults hit client traffic only.
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pgmux_testkit::process::run;
use pgmux_testkit::toxiproxy::{ToxiClient, Toxiproxy};
use pgmux_testkit::{APP_USER, SUPERUSER, give_to_postgres, pg_bin_dir, run_as_postgres};
use tokio_postgres::{NoTls, SimpleQueryMessage};

use crate::hosts::HostsFile;
use crate::node::{Node, PG_PORT};

pub const NODE_A: &str = "127.0.10.1";
pub const NODE_B: &str = "127.0.10.2";
/// Toxiproxy's listen addresses for A and B: what the writer name points at (same length, for the flip).
pub const PROXY_A: &str = "127.0.20.1";
pub const PROXY_B: &str = "127.0.20.2";
pub const PROXY_A_NAME: &str = "node-a";
pub const PROXY_B_NAME: &str = "node-b";

/// The seed cluster (initdb, roles, the `pgmux` database, the ledger), made once per driver run; every
/// topology's node A is a copy of it.
#[derive(Debug)]
pub struct Seed {
    dir: tempfile::TempDir,
}

/// The directory every data directory of this run lives in: tmpfs if there is one.
pub fn scratch_dir(kind: &str) -> Result<tempfile::TempDir, String> {
    let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let dir = tempfile::Builder::new()
        .prefix(&format!("{}{}-{kind}-", crate::NAMING.prefix, std::process::id()))
        .tempdir_in(&base)
        .map_err(|e| format!("cannot create a directory in {}: {e}", base.display()))?;
    give_to_postgres(dir.path()).map_err(|e| format!("chown {}: {e}", dir.path().display()))?;
    Ok(dir)
}

impl Seed {
    pub fn create() -> Result<Seed, String> {
        let dir = scratch_dir("seed")?;
        let pwfile = dir.path().join("pwfile");
        std::fs::write(&pwfile, SUPERUSER.password).map_err(|e| format!("pwfile: {e}"))?;
        give_to_postgres(&pwfile).map_err(|e| format!("chown pwfile: {e}"))?;
        let data = dir.path().join("data");
        let mut initdb = Command::new(pg_bin_dir()?.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-N", "-U", SUPERUSER.user, "--auth=scram-sha-256", "-E", "UTF8", "--locale=C"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .current_dir(dir.path());
        run_as_postgres(&mut initdb);
        run(initdb, "initdb").map_err(|e| e.to_string())?;
        std::fs::write(data.join("pg_hba.conf"), crate::node::pg_hba()).map_err(|e| format!("pg_hba: {e}"))?;
        let mut node = Node::new("seed", NODE_A, dir.path().to_owned());
        node.start()?;
        block_on(setup_sql(&node))?;
        node.stop("fast")?;
        Ok(Seed { dir })
    }
}

async fn setup_sql(node: &Node) -> Result<(), String> {
    let roles = format!(
        "SET password_encryption = 'scram-sha-256';
         CREATE ROLE {app} LOGIN PASSWORD '{pw}';
         GRANT pg_monitor TO {app};",
        app = APP_USER.user,
        pw = APP_USER.password
    );
    let postgres_db = node.admin_conninfo().replace("dbname=pgmux", "dbname=postgres");
    admin_sql(&postgres_db, &roles).await?;
    // CREATE DATABASE cannot run inside the implicit transaction of a multi-statement query.
    admin_sql(&postgres_db, &format!("CREATE DATABASE pgmux OWNER {}", APP_USER.user)).await?;
    let schema = format!(
        "CREATE TABLE ledger (client int NOT NULL, seq int NOT NULL, node text DEFAULT inet_server_addr()::text,
                              at timestamptz DEFAULT clock_timestamp());
         CREATE TABLE locks (id int PRIMARY KEY);
         INSERT INTO locks VALUES (1);
         ALTER TABLE ledger OWNER TO {app};
         ALTER TABLE locks OWNER TO {app};",
        app = APP_USER.user
    );
    admin_sql(&node.admin_conninfo(), &schema).await.map(drop)
}

/// Both nodes of one run, and the knobs the faults turn.
#[derive(Debug)]
pub struct Topology {
    pub a: Node,
    pub b: Node,
    pub hosts: HostsFile,
    pub toxi: ToxiClient,
    // Dropped after the nodes (fields drop in order), so their directories outlive them.
    _dir: tempfile::TempDir,
}

impl Topology {
    /// Copy the seed into A, start it, base-backup B from it, start B and wait until it streams; reset every
    /// toxic and point the writer name at A.
    pub fn build(seed: &Seed, hosts: &HostsFile, toxi: ToxiClient) -> Result<Topology, String> {
        let dir = scratch_dir("topology")?;
        for node in ["a", "b"] {
            let path = dir.path().join(node);
            std::fs::create_dir(&path).map_err(|e| format!("mkdir: {e}"))?;
            give_to_postgres(&path).map_err(|e| format!("chown: {e}"))?;
        }
        let mut copy = Command::new("cp");
        copy.arg("-a").arg(seed.dir.path().join("data")).arg(dir.path().join("a").join("data"));
        run(copy, "cp -a of the seed cluster").map_err(|e| e.to_string())?;
        let mut a = Node::new("A", NODE_A, dir.path().join("a"));
        a.start()?;
        let mut backup = Command::new(pg_bin_dir()?.join("pg_basebackup"));
        backup
            .args(["-h", NODE_A, "-p", &PG_PORT.to_string(), "-U", SUPERUSER.user, "-D"])
            .arg(dir.path().join("b").join("data"))
            .args(["-R", "-X", "stream", "-c", "fast", "-w"])
            .env("PGPASSWORD", SUPERUSER.password)
            .current_dir(dir.path().join("b"));
        run_as_postgres(&mut backup);
        run(backup, "pg_basebackup").map_err(|e| e.to_string())?;
        let mut b = Node::new("B", NODE_B, dir.path().join("b"));
        b.start()?;
        let topology = Topology { a, b, hosts: hosts.clone(), toxi, _dir: dir };
        block_on(topology.wait_streaming())?;
        toxi.reset()?;
        hosts.point_at(PROXY_A)?;
        Ok(topology)
    }

    async fn wait_streaming(&self) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let sql = "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'";
            if admin_value(&self.a.admin_conninfo(), sql).await.is_ok_and(|n| n.as_deref() == Some("1")) {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!("node B does not stream from A:\n{}", self.b.log_tail(20)));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Wait until B has replayed everything A has written (before promoting B while A is still up).
    pub async fn wait_caught_up(&self) -> Result<(), String> {
        let target =
            admin_value(&self.a.admin_conninfo(), "SELECT pg_current_wal_lsn()::text").await?.ok_or("no LSN on A")?;
        let sql = format!("SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn");
        let started = Instant::now();
        while admin_value(&self.b.admin_conninfo(), &sql).await?.as_deref() != Some("t") {
            if started.elapsed() > Duration::from_secs(30) {
                return Err("node B did not catch up with A within 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

/// Start Toxiproxy and its two proxies (they live for the whole driver run; toxics are reset per topology).
pub fn start_toxiproxy() -> Result<Toxiproxy, String> {
    let toxiproxy = Toxiproxy::start()?;
    let api = toxiproxy.client();
    let port = PG_PORT.to_string();
    api.create_proxy(PROXY_A_NAME, &format!("{PROXY_A}:{port}"), &format!("{NODE_A}:{port}"))?;
    api.create_proxy(PROXY_B_NAME, &format!("{PROXY_B}:{port}"), &format!("{NODE_B}:{port}"))?;
    Ok(toxiproxy)
}

/// Run SQL as the superuser on a node directly (never through a pooler or Toxiproxy); the messages back.
pub async fn admin_sql(conninfo: &str, sql: &str) -> Result<Vec<SimpleQueryMessage>, String> {
    let connect = tokio_postgres::connect(conninfo, NoTls);
    let (client, connection) = tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .map_err(|_| "admin connection timed out".to_owned())?
        .map_err(|e| format!("admin connection: {e}"))?;
    let task = tokio::spawn(connection);
    let result = tokio::time::timeout(Duration::from_secs(30), client.simple_query(sql)).await;
    task.abort();
    result.map_err(|_| format!("admin query timed out: {sql}"))?.map_err(|e| format!("{sql}: {}", describe(&e)))
}

/// An error with the server's message when there is one (tokio-postgres displays only "db error").
pub fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} {}: {}", db.severity(), db.code().code(), db.message()),
        None => e.to_string(),
    }
}

/// The first column of the first row.
pub async fn admin_value(conninfo: &str, sql: &str) -> Result<Option<String>, String> {
    Ok(admin_sql(conninfo, sql)
        .await?
        .into_iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(row.get(0).map(str::to_owned)),
            _ => None,
        })
        .flatten())
}

/// Run a future to completion on a small runtime of this thread's own (for the blocking parts of the
/// driver: setup, and the fault injector's thread).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(future),
        Err(e) => panic!("pgmux-chaos: cannot build a runtime: {e}"),
    }
}
