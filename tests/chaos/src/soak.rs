//! The soak: connect-per-transaction load through the target for a set time (30 minutes in the long form),
//! with the target's resident memory read from `/proc` after a warm-up and at the end, to show whether it
//! stays flat (issue 13: start vs end within 10 %).

use std::time::Duration;

use serde::Serialize;
use tokio::time::{Instant, timeout};
use tokio_postgres::NoTls;

use crate::runner::client_config;
use crate::target::Target;

/// Clients, each connecting, writing once and disconnecting in a loop.
const WORKERS: u32 = 8;
/// Memory at the start is read after this much load, when pools and buffers have grown to their size.
const WARMUP: Duration = Duration::from_secs(10);
/// Keep at most this many samples (one a minute, plus start and end).
const MAX_SAMPLES: usize = 1000;

#[derive(Clone, Debug, Default, Serialize)]
pub struct SoakResult {
    pub target: String,
    pub seconds: u64,
    pub transactions: u64,
    pub errors: u64,
    pub rss_start_kib: Option<u64>,
    pub rss_end_kib: Option<u64>,
    /// (seconds since the start, KiB) once a minute.
    pub rss_samples: Vec<(u64, Option<u64>)>,
}

/// Run the soak for `duration` against a running target.
pub async fn soak(target: &Target, duration: Duration) -> SoakResult {
    let started = Instant::now();
    let end = started + duration.max(WARMUP + Duration::from_secs(1));
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        workers.push(tokio::spawn(worker_loop(worker, end)));
    }
    let mut result = SoakResult { target: target.kind.name().to_owned(), ..SoakResult::default() };
    tokio::time::sleep_until(started + WARMUP).await;
    result.rss_start_kib = target.rss_kib();
    result.rss_samples.push((WARMUP.as_secs(), result.rss_start_kib));
    let mut next = started + WARMUP + Duration::from_secs(60);
    while next < end && result.rss_samples.len() < MAX_SAMPLES && !crate::isolate::stop_requested() {
        tokio::time::sleep_until(next).await;
        result.rss_samples.push((started.elapsed().as_secs(), target.rss_kib()));
        next += Duration::from_secs(60);
    }
    for worker in workers {
        if let Ok((done, failed)) = worker.await {
            result.transactions += done;
            result.errors += failed;
        }
    }
    result.rss_end_kib = target.rss_kib();
    result.seconds = started.elapsed().as_secs();
    result.rss_samples.push((result.seconds, result.rss_end_kib));
    result
}

/// Connect, insert, disconnect, until `end` (or an interrupt); (transactions, errors).
async fn worker_loop(worker: u32, end: Instant) -> (u64, u64) {
    let config = client_config();
    let (mut done, mut failed) = (0u64, 0u64);
    let mut seq = 0u64;
    while Instant::now() < end && !crate::isolate::stop_requested() {
        seq += 1;
        let sql = format!("INSERT INTO ledger (client, seq) VALUES ({}, {})", 1_000_000 + worker, seq % 1_000_000_000);
        let once = async {
            let (client, connection) = config.connect(NoTls).await?;
            let task = tokio::spawn(connection);
            let result = client.simple_query(&sql).await.map(drop);
            drop(client);
            let _ = task.await;
            result
        };
        match timeout(Duration::from_secs(10), once).await {
            Ok(Ok(())) => done += 1,
            _ => {
                failed += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    (done, failed)
}
