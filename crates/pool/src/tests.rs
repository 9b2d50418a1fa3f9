//! Pool behaviour under paused time: ordering, limits, lazy growth, cancellation and eviction.

use std::time::Duration;

use tokio::time::Instant;

use super::*;

fn pool(max_size: usize, grow_after_ms: u64) -> Pool<u32> {
    Pool::new(PoolConfig::new(max_size, Duration::from_millis(grow_after_ms)))
}

async fn open(p: &Pool<u32>, id: u32) -> Lease<u32> {
    match p.acquire().await.unwrap() {
        Grant::Open(slot) => slot.fill(id),
        Grant::Idle(l) => panic!("expected a slot, got idle connection {}", *l),
    }
}

async fn idle(p: &Pool<u32>) -> Lease<u32> {
    match p.acquire().await.unwrap() {
        Grant::Idle(l) => l,
        Grant::Open(_) => panic!("expected an idle connection, got a slot"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_returned_connection_is_lent_again() {
    let p = pool(2, 0);
    let l = open(&p, 1).await;
    assert_eq!(l.meta().lends, 1);
    drop(l);
    assert_eq!(p.status(), Status { size: 1, idle: 1, waiting: 0, opening: 0, max_size: 2, paused: false });
    let l = idle(&p).await;
    assert_eq!((*l, l.meta().lends), (1, 2));
}

#[tokio::test(start_paused = true)]
async fn try_acquire_never_waits_and_never_jumps_the_queue() {
    let p = pool(1, 0);
    let Some(Grant::Open(slot)) = p.try_acquire().unwrap() else { panic!("expected a slot") };
    let held = slot.fill(1);
    assert!(p.try_acquire().unwrap().is_none(), "at the limit");
    let waiter = tokio::spawn({
        let p = p.clone();
        async move { *idle(&p).await }
    });
    tokio::task::yield_now().await;
    drop(held);
    assert_eq!(waiter.await.unwrap(), 1, "the queued waiter got it, not a later try_acquire");
    let l = match p.try_acquire().unwrap() {
        Some(Grant::Idle(l)) => l,
        _ => panic!("expected the idle connection"),
    };
    drop(l);
    p.close();
    assert!(matches!(p.try_acquire(), Err(Closed)));
}

#[tokio::test(start_paused = true)]
async fn the_most_recently_returned_connection_is_lent_first() {
    let p = pool(2, 0);
    let a = open(&p, 1).await;
    let b = open(&p, 2).await;
    drop(a);
    drop(b);
    assert_eq!(*idle(&p).await, 2);
}

#[tokio::test(start_paused = true)]
async fn waiters_are_served_in_arrival_order_at_the_limit() {
    let p = pool(1, 0);
    let held = open(&p, 7).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for who in 0..3 {
        let p = p.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let l = idle(&p).await;
            tx.send(who).unwrap();
            tokio::time::sleep(Duration::from_millis(1)).await;
            drop(l);
        });
        // Let each task queue before the next one starts.
        tokio::task::yield_now().await;
    }
    assert_eq!(p.status().waiting, 3);
    drop(held);
    let order: Vec<i32> = vec![rx.recv().await.unwrap(), rx.recv().await.unwrap(), rx.recv().await.unwrap()];
    assert_eq!(order, vec![0, 1, 2]);
    assert_eq!(p.status().size, 1);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_gives_up_loses_nothing() {
    let p = pool(1, 0);
    let held = open(&p, 1).await;
    let gave_up = tokio::time::timeout(Duration::from_millis(10), p.acquire()).await;
    assert!(gave_up.is_err());
    assert_eq!(p.status().waiting, 1, "the dead waiter is only found on release");
    drop(held);
    assert_eq!(p.status(), Status { size: 1, idle: 1, waiting: 0, opening: 0, max_size: 1, paused: false });
}

#[tokio::test(start_paused = true)]
async fn a_grant_sent_to_a_waiter_that_then_vanishes_comes_back() {
    let p = pool(1, 0);
    let held = open(&p, 1).await;
    let mut pending = Box::pin(p.acquire());
    assert!(futures_poll(&mut pending).is_none());
    drop(held); // the lease is sent into the waiter's channel
    drop(pending); // and the waiter disappears before reading it
    assert_eq!(p.status(), Status { size: 1, idle: 1, waiting: 0, opening: 0, max_size: 1, paused: false });
}

fn futures_poll<F: std::future::Future + Unpin>(f: &mut F) -> Option<F::Output> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    match std::pin::Pin::new(f).poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

#[tokio::test(start_paused = true)]
async fn discarding_a_broken_connection_lets_a_waiter_open_another() {
    let p = pool(1, 0);
    let held = open(&p, 1).await;
    let waiter = tokio::spawn({
        let p = p.clone();
        async move { matches!(p.acquire().await, Ok(Grant::Open(_))) }
    });
    tokio::task::yield_now().await;
    assert_eq!(held.discard(), 1);
    assert!(waiter.await.unwrap());
    assert_eq!(p.status().size, 0, "the waiter's slot was dropped unfilled");
}

#[tokio::test(start_paused = true)]
async fn an_unfilled_slot_gives_its_place_back() {
    let p = pool(1, 0);
    let Grant::Open(slot) = p.acquire().await.unwrap() else { panic!() };
    assert_eq!(p.status().size, 1);
    drop(slot);
    assert_eq!(p.status().size, 0);
    open(&p, 2).await;
}

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

#[tokio::test(start_paused = true)]
async fn raising_the_limit_wakes_waiters_to_open() {
    let p = pool(1, 0);
    let _held = open(&p, 1).await;
    let waiter = tokio::spawn({
        let p = p.clone();
        async move { matches!(p.acquire().await, Ok(Grant::Open(_))) }
    });
    tokio::task::yield_now().await;
    p.set_max_size(2);
    assert!(waiter.await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn eviction_takes_expired_and_excess_idle_connections() {
    let p = pool(3, 0);
    let a = open(&p, 1).await;
    let b = open(&p, 2).await;
    let c = open(&p, 3).await;
    drop(a);
    tokio::time::advance(Duration::from_secs(10)).await;
    drop(b);
    drop(c);
    let old = p.evict_idle(|_, m| m.idle_since.elapsed() >= Duration::from_secs(5));
    assert_eq!(old, vec![1]);
    p.set_max_size(1);
    let excess = p.evict_idle(|_, _| false);
    assert_eq!(excess, vec![2], "the oldest idle one goes first");
    assert_eq!(p.status(), Status { size: 1, idle: 1, waiting: 0, opening: 0, max_size: 1, paused: false });
}

#[tokio::test(start_paused = true)]
async fn closing_fails_waiters_and_collects_returns() {
    let p = pool(1, 0);
    let held = open(&p, 1).await;
    let waiter = tokio::spawn({
        let p = p.clone();
        async move { p.acquire().await.err() }
    });
    tokio::task::yield_now().await;
    p.close();
    assert_eq!(waiter.await.unwrap(), Some(Closed));
    assert!(matches!(p.acquire().await, Err(Closed)));
    drop(held);
    assert_eq!(p.drain_idle(), vec![1]);
    assert_eq!(p.status().size, 0);
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
async fn a_connection_returned_above_the_limit_goes_to_the_closer() {
    let closed = Arc::new(Mutex::new(Vec::new()));
    let p = Pool::with_closer(PoolConfig::new(3, Duration::ZERO), {
        let closed = Arc::clone(&closed);
        move |c| closed.lock().unwrap().push(c)
    });
    let a = open(&p, 1).await;
    let b = open(&p, 2).await;
    p.set_max_size(1);
    drop(a);
    assert_eq!(*closed.lock().unwrap(), vec![1]);
    drop(b);
    assert_eq!(*closed.lock().unwrap(), vec![1], "at the limit, kept");
    assert_eq!(p.status(), Status { size: 1, idle: 1, waiting: 0, opening: 0, max_size: 1, paused: false });
}

#[tokio::test(start_paused = true)]
async fn try_grow_keeps_to_the_limit_and_the_queue() {
    let p = pool(2, 50);
    let a = p.try_grow().expect("below the limit").fill(1);
    let b = p.try_grow().expect("below the limit, lazy growth or not").fill(2);
    assert!(p.try_grow().is_none(), "at the limit");
    drop((a, b));
    p.set_max_size(3);
    let held: Vec<_> = vec![idle(&p).await, idle(&p).await];
    let waiter = tokio::spawn({
        let p = p.clone();
        async move { p.acquire().await.is_ok() }
    });
    tokio::task::yield_now().await;
    assert!(p.try_grow().is_none(), "a client is waiting: it goes first");
    drop(held);
    assert!(waiter.await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_paused_pool_lends_nothing_and_serves_its_waiters_in_order_on_resume() {
    let p = pool(2, 0);
    let busy = open(&p, 1).await;
    p.pause();
    assert!(matches!(p.try_acquire(), Ok(None)), "paused: not even the right to open a second");
    assert!(p.try_grow().is_none());
    let first = tokio::spawn({
        let p = p.clone();
        async move { *idle(&p).await }
    });
    tokio::task::yield_now().await;
    let second = tokio::spawn({
        let p = p.clone();
        async move { matches!(p.acquire().await, Ok(Grant::Open(_))) }
    });
    tokio::task::yield_now().await;
    drop(busy);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(p.status(), Status { size: 1, idle: 1, waiting: 2, opening: 0, max_size: 2, paused: true });
    assert!(!first.is_finished() && !second.is_finished(), "a returned connection stays idle while paused");
    p.resume();
    assert_eq!(first.await.unwrap(), 1, "the first in line gets the idle connection");
    assert!(second.await.unwrap(), "the second may open one, the pool being below its limit");
}

#[tokio::test(start_paused = true)]
async fn an_idle_connection_can_be_taken_out_of_turn_for_a_check_and_returns_are_dated() {
    let p = pool(2, 0);
    assert_eq!(p.last_returned(), None);
    let (one, two) = (open(&p, 1).await, open(&p, 2).await);
    drop(two);
    let returned = p.last_returned().expect("a return is dated");
    let waiter = tokio::spawn({
        let p = p.clone();
        async move { *idle(&p).await }
    });
    assert_eq!(waiter.await.unwrap(), 2);
    // A client waits in line; connection 1 is idle: the check takes it anyway.
    let _busy = idle(&p).await;
    let waiter = tokio::spawn({
        let p = p.clone();
        async move { *idle(&p).await }
    });
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(one);
    assert!(p.last_returned().is_some_and(|t| t > returned), "dated at its return");
    assert_eq!(waiter.await.unwrap(), 1, "a return goes to the waiter first");
    drop(p.take_idle(|_| true));
    assert_eq!(p.status().idle, 1, "the waiter's lease came back when its task ended");
    assert!(p.take_idle(|c| *c == 9).is_none(), "only the one it picks");
    let checked = p.take_idle(|c| *c == 1).expect("taken");
    let third = tokio::spawn({
        let p = p.clone();
        async move { *idle(&p).await }
    });
    tokio::task::yield_now().await;
    assert_eq!(p.status().waiting, 1);
    drop(checked);
    assert_eq!(third.await.unwrap(), 1, "given back, to the client in line");
}

#[tokio::test(start_paused = true)]
async fn a_waiter_is_told_when_its_deadline_passes_and_leaves_the_queue() {
    let p = pool(1, 0);
    let held = open(&p, 1).await;
    let start = Instant::now();
    let waited = p.acquire_until(start + Duration::from_millis(30)).await;
    assert!(matches!(waited, Err(WaitError::TimedOut)), "{waited:?}");
    let late = start.elapsed() - Duration::from_millis(30);
    assert!(late <= Duration::from_millis(1), "told {late:?} after its deadline");
    assert_eq!(p.status().waiting, 0, "the clock took it out of the line");
    drop(held);
    assert_eq!(p.status(), Status { size: 1, idle: 1, waiting: 0, opening: 0, max_size: 1, paused: false });
}

#[tokio::test(start_paused = true)]
async fn each_waiter_keeps_its_own_deadline_even_out_of_order() {
    let p = pool(1, 0);
    let _held = open(&p, 1).await;
    let start = Instant::now();
    // Three waiters in line, the last with the earliest deadline (a shorter query_wait_timeout after a
    // reload, or a client that waited before).
    let waiters: Vec<_> = [50u64, 20, 10]
        .into_iter()
        .map(|ms| {
            let p = p.clone();
            tokio::spawn(async move {
                let outcome = p.acquire_until(start + Duration::from_millis(ms)).await;
                assert!(matches!(outcome, Err(WaitError::TimedOut)), "{outcome:?}");
                start.elapsed().as_millis()
            })
        })
        .collect();
    let mut told = Vec::new();
    for waiter in waiters {
        told.push(waiter.await.unwrap());
    }
    assert_eq!(told, [50, 20, 10]);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_already_passed_is_answered_at_once_but_a_free_connection_still_wins() {
    let p = pool(1, 0);
    let past = Instant::now();
    tokio::time::advance(Duration::from_millis(1)).await;
    let held = match p.acquire_until(past).await {
        Ok(Grant::Open(slot)) => slot.fill(1),
        other => panic!("a free place is granted whatever the deadline: {other:?}"),
    };
    assert!(matches!(p.acquire_until(past).await, Err(WaitError::TimedOut)));
    assert_eq!(p.status().waiting, 0);
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
async fn a_connection_given_back_at_a_moment_is_idle_since_then() {
    let p = pool(1, 0);
    let l = open(&p, 3).await;
    let used = Instant::now();
    tokio::time::advance(Duration::from_secs(5)).await;
    l.give_back_at(used);
    assert_eq!(p.status().idle, 1);
    assert_eq!(idle(&p).await.meta().idle_since, used, "idle since its last use, not since it came back");
}
