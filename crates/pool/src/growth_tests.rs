//! Lazy growth under paused time: waiting for a return before opening, one connection at a time, bursts,
//! and steady lines (including one that empties now and then).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::tests::{futures_poll, idle, open, pool};
use super::*;

#[tokio::test(start_paused = true)]
async fn lazy_growth_waits_for_a_return_before_opening() {
    let p = pool(10, 5);
    let first = open(&p, 1).await;
    // Returned within the grace period: the waiter reuses it, nothing new is opened.
    let reuse = tokio::spawn({
        let p = p.clone();
        async move { *idle(&p).await }
    });
    tokio::time::sleep(Duration::from_millis(2)).await;
    drop(first);
    assert_eq!(reuse.await.unwrap(), 1);
    assert_eq!(p.status().size, 1);

    // Not returned in time: the waiter may open a second connection after 5 ms.
    let held = idle(&p).await;
    let start = Instant::now();
    let second = open(&p, 2).await;
    assert_eq!(start.elapsed(), Duration::from_millis(5));
    assert_eq!(p.status().size, 2);
    drop((held, second));
}

#[tokio::test(start_paused = true)]
async fn lazy_growth_opens_at_once_when_nothing_is_open() {
    let p = pool(10, 50);
    let start = Instant::now();
    open(&p, 1).await;
    assert_eq!(start.elapsed(), Duration::ZERO);
}

/// A burst of `clients` transactions that each hold a connection for `hold` after a connect that takes
/// `connect`; returns the pool's largest size and the times (from the start) at which connections opened.
async fn burst(p: &Pool<u32>, clients: usize, connect: Duration, hold: Duration) -> (usize, Vec<Duration>) {
    let start = Instant::now();
    let opened = Arc::new(Mutex::new(Vec::new()));
    let peak = Arc::new(Mutex::new(0usize));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (p, opened, peak) = (p.clone(), Arc::clone(&opened), Arc::clone(&peak));
        tasks.push(tokio::spawn(async move {
            let lease = match p.acquire().await.unwrap() {
                Grant::Idle(l) => l,
                Grant::Open(slot) => {
                    opened.lock().unwrap().push(start.elapsed());
                    tokio::time::sleep(connect).await;
                    slot.fill(0)
                }
            };
            let size = p.status().size;
            {
                let mut peak = peak.lock().unwrap();
                *peak = (*peak).max(size);
            }
            tokio::time::sleep(hold).await;
            drop(lease);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let opened = opened.lock().unwrap().clone();
    (*peak.lock().unwrap(), opened)
}

#[tokio::test(start_paused = true)]
async fn a_burst_that_one_connection_can_serve_opens_one() {
    // 64 clients arrive at once; each transaction is over before anyone has waited 5 ms.
    let lazy = pool(64, 5);
    let (peak, opened) = burst(&lazy, 64, Duration::from_millis(1), Duration::ZERO).await;
    assert_eq!((peak, opened.len()), (1, 1), "opened at {opened:?}");
    // Without lazy growth the same burst opens a connection per client.
    let eager = pool(64, 0);
    let (peak, _) = burst(&eager, 64, Duration::from_millis(1), Duration::ZERO).await;
    assert_eq!(peak, 64);
}

#[tokio::test(start_paused = true)]
async fn lazy_growth_opens_one_connection_at_a_time() {
    // 64 transactions of 1 ms each: one connection would need 64 ms, so the pool grows, but only while
    // clients keep waiting, one connection at a time, each new one given 5 ms to serve the queue before the
    // next is opened (3 ms to connect + 5 ms).
    let p = pool(64, 5);
    let (peak, opened) = burst(&p, 64, Duration::from_millis(3), Duration::from_millis(1)).await;
    assert!(peak > 1 && peak < 10, "peak {peak}, opened at {opened:?}");
    for pair in opened.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_millis(8), "opened too close together: {opened:?}");
    }
    assert_eq!(p.status().opening, 0);
}

#[tokio::test(start_paused = true)]
async fn lazy_growth_opens_for_a_line_that_does_not_shrink() {
    // Ten clients that each come back for another 2 ms transaction as soon as one ends: the line stays
    // nine long, however many are served, so the pool grows when the first in line has waited 5 ms.
    let opened = busy_clients(PoolConfig::new(10, Duration::from_millis(5)), 40).await;
    assert!(opened.len() >= 3, "opened at {opened:?}");
    assert_eq!(opened[1], Duration::from_millis(5), "opened at {opened:?}");
}

/// Ten clients that each come back for another 2 ms transaction as soon as one ends, for `run_ms`, on a pool
/// configured so; when each connection was opened.
async fn busy_clients(config: PoolConfig, run_ms: u64) -> Vec<Duration> {
    looping_clients(config, 10, Duration::from_millis(2), Duration::ZERO, run_ms).await
}

/// `clients` clients that each hold a connection for `hold`, pause for `pause` and come back, for `run_ms`;
/// when each connection was opened.
async fn looping_clients(
    config: PoolConfig,
    clients: usize,
    hold: Duration,
    pause: Duration,
    run_ms: u64,
) -> Vec<Duration> {
    let p = Pool::new(config);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            let mut opened = Vec::new();
            while start.elapsed() < Duration::from_millis(run_ms) {
                let lease = match p.acquire().await.unwrap() {
                    Grant::Idle(lease) => lease,
                    Grant::Open(slot) => {
                        opened.push(start.elapsed());
                        slot.fill(0)
                    }
                };
                tokio::time::sleep(hold).await;
                drop(lease);
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
            }
            opened
        }));
    }
    let mut opened = Vec::new();
    for t in tasks {
        opened.extend(t.await.unwrap());
    }
    opened.sort();
    opened
}

/// [`busy_clients`] for `run_ms` on a pool that waits 50 ms before growing (a login's time) and treats a line
/// that has not emptied for `steady_after_ms` as steady.
async fn steady_line(steady_after_ms: u64, run_ms: u64) -> Vec<Duration> {
    let config = PoolConfig {
        steady_after: Duration::from_millis(steady_after_ms),
        steady_grow_after: Duration::from_millis(5),
        ..PoolConfig::new(10, Duration::from_millis(50))
    };
    busy_clients(config, run_ms).await
}

#[tokio::test(start_paused = true)]
async fn a_steady_line_grows_without_waiting_a_login_s_time() {
    // On one connection the first in line waits 18 ms at most, less than the 50 ms a login takes, so lazy
    // growth alone never opens a second connection however long the load lasts.
    let opened = steady_line(0, 400).await;
    assert_eq!(opened.len(), 1, "without the steady line: opened at {opened:?}");
    // The line has not emptied for 100 ms: it will be there when a new connection arrives.
    let opened = steady_line(100, 400).await;
    assert!(opened.len() >= 3, "opened at {opened:?}");
    assert!(opened[1] >= Duration::from_millis(100), "grew before the line was steady: {opened:?}");
    assert!(opened[1] <= Duration::from_millis(110), "the steady line waited too long: {opened:?}");
}

/// Two clients that each hold a connection 9 ms, then pause 1 ms, on a pool that waits 50 ms (a login's
/// time) before growing and calls a line steady after 100 ms: the line empties for a moment every 9 ms, so
/// it never goes 100 ms without emptying, but it holds somebody nearly nine tenths of the time.
async fn a_line_that_empties_now_and_then(steady_after_ms: u64, run_ms: u64) -> Vec<Duration> {
    let config = PoolConfig {
        steady_after: Duration::from_millis(steady_after_ms),
        steady_grow_after: Duration::from_millis(5),
        ..PoolConfig::new(10, Duration::from_millis(50))
    };
    looping_clients(config, 2, Duration::from_millis(9), Duration::from_millis(1), run_ms).await
}

#[tokio::test(start_paused = true)]
async fn a_line_held_most_of_the_time_is_steady_though_it_empties_now_and_then() {
    let opened = a_line_that_empties_now_and_then(0, 400).await;
    assert_eq!(opened.len(), 1, "without the steady line: opened at {opened:?}");
    let opened = a_line_that_empties_now_and_then(100, 400).await;
    assert_eq!(opened.len(), 2, "the second client gets its own connection: opened at {opened:?}");
    assert!(opened[1] >= Duration::from_millis(100), "grew before two windows had passed: {opened:?}");
    assert!(opened[1] <= Duration::from_millis(120), "the steady line waited too long: {opened:?}");
}

#[tokio::test(start_paused = true)]
async fn bursts_shorter_than_the_steady_time_share_one_connection() {
    // Ten clients at once every 300 ms, each holding a connection 6 ms: 60 ms of line on one connection,
    // more than a window (50 ms) but less than the steady time (100 ms).
    let config = PoolConfig {
        steady_after: Duration::from_millis(100),
        steady_grow_after: Duration::from_millis(5),
        ..PoolConfig::new(10, Duration::from_millis(80))
    };
    let p: Pool<u32> = Pool::new(config);
    let mut opened = 0;
    for _ in 0..5 {
        let (_, times) = burst(&p, 10, Duration::from_millis(1), Duration::from_millis(6)).await;
        opened += times.len();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(opened, 1, "a burst is not steady load");
}

#[tokio::test(start_paused = true)]
async fn a_slow_connect_holds_back_further_growth() {
    let p = pool(10, 5);
    let held = open(&p, 1).await;
    let grower = tokio::spawn({
        let p = p.clone();
        async move {
            let Grant::Open(slot) = p.acquire().await.unwrap() else { panic!("expected a slot") };
            tokio::time::sleep(Duration::from_millis(52)).await;
            slot.fill(2)
        }
    });
    let waiter = tokio::spawn({
        let p = p.clone();
        async move { *idle(&p).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The second waiter has waited 50 ms, yet nothing more is opened while the first connect runs.
    assert_eq!(p.status(), Status { size: 2, idle: 0, waiting: 1, opening: 1, max_size: 10, paused: false });
    let second = grower.await.unwrap();
    drop(second);
    assert_eq!(waiter.await.unwrap(), 2, "the waiter got the new connection when it was returned");
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_left_does_not_hold_back_lazy_growth_for_the_next() {
    let p = pool(2, 5);
    let _held = open(&p, 1).await;
    let mut gone = Box::pin(p.acquire());
    assert!(futures_poll(&mut gone).is_none());
    drop(gone);
    let start = Instant::now();
    let second = open(&p, 2).await;
    assert_eq!(start.elapsed(), Duration::from_millis(5), "the next in line opened after grow_after");
    assert_eq!(p.status().waiting, 0);
    drop(second);
}

#[tokio::test(start_paused = true)]
async fn lazy_growth_resumes_when_a_connection_being_opened_arrives() {
    let p = pool(3, 5);
    let _first = open(&p, 1).await;
    let opener = tokio::spawn({
        let p = p.clone();
        async move {
            let Grant::Open(slot) = p.acquire().await.unwrap() else { panic!("expected a slot") };
            // A slow login: 40 ms. Nothing else opens meanwhile.
            tokio::time::sleep(Duration::from_millis(40)).await;
            slot.fill(2)
        }
    });
    tokio::task::yield_now().await;
    let start = Instant::now();
    let third = tokio::spawn({
        let p = p.clone();
        async move { open(&p, 3).await }
    });
    let second = opener.await.unwrap();
    let third = third.await.unwrap();
    // The second connection arrived at 5 + 40 ms; the third waiter may open grow_after after that.
    assert_eq!(start.elapsed(), Duration::from_millis(50));
    assert_eq!(p.status().size, 3);
    drop((second, third));
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_waited_reserve_after_opens_a_reserve_connection_which_closes_when_it_comes_back() {
    let closed = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&closed);
    let p = Pool::with_closer(PoolConfig::new(1, Duration::ZERO), move |c: u32| seen.lock().unwrap().push(c));
    p.set_reserve(1, Duration::from_millis(100));
    let first = open(&p, 1).await;
    let start = Instant::now();
    let reserve = open(&p, 2).await;
    assert_eq!(start.elapsed(), Duration::from_millis(100), "opened once it had waited reserve_after");
    assert_eq!(p.status().size, 2);
    // The reserve is spent: a third caller waits for a return, and gets none in 300 ms.
    let third = p.acquire_until(Instant::now() + Duration::from_millis(300)).await;
    assert!(matches!(third, Err(WaitError::TimedOut)), "{third:?}");
    // Back with nobody waiting: above the limit, so closed; the pool is at its limit again.
    drop(reserve);
    assert_eq!((closed.lock().unwrap().clone(), p.status().size), (vec![2], 1));
    drop(first);
    assert_eq!(p.status().size, 1, "the one within the limit stays");
}
