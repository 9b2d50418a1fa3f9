//! A known workload through a pooler, so that the totals a scraper reports can be checked exactly: every
//! simple Query is one query, every transaction (a lone statement, or BEGIN … COMMIT) one transaction.

use std::time::Duration;

use tokio_postgres::NoTls;

/// What [`run`] sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Totals {
    pub transactions: u64,
    pub queries: u64,
    pub clients: u64,
}

/// Lone statements per client.
const SINGLES: u64 = 25;
/// `BEGIN; SELECT; SELECT; COMMIT` blocks per client.
const BLOCKS: u64 = 5;
/// Clients, one after the other.
const CLIENTS: u64 = 2;

/// Runs the workload through 127.0.0.1:`port` as `user` (with `password`, if any) on `database`, with the
/// simple query protocol only (no Parse, so statement caches play no part).
pub fn run(port: u16, user: &str, password: Option<&str>, database: &str) -> Totals {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    rt.block_on(async {
        for _ in 0..CLIENTS {
            let mut cfg = tokio_postgres::Config::new();
            cfg.host("127.0.0.1").port(port).user(user).dbname(database).connect_timeout(Duration::from_secs(10));
            if let Some(p) = password {
                cfg.password(p);
            }
            let (client, conn) = cfg.connect(NoTls).await.unwrap_or_else(|e| panic!("connect to {port}: {e}"));
            let driver = tokio::spawn(conn);
            for i in 0..SINGLES {
                client.simple_query(&format!("select {i}")).await.expect("a lone statement");
            }
            for _ in 0..BLOCKS {
                for q in ["begin", "select 1", "select 2", "commit"] {
                    client.simple_query(q).await.expect("a statement of a block");
                }
            }
            drop(client);
            let _ = driver.await;
        }
    });
    Totals { transactions: CLIENTS * (SINGLES + BLOCKS), queries: CLIENTS * (SINGLES + 4 * BLOCKS), clients: CLIENTS }
}
