//! Pool behaviour under paused time: ordering, limits, lazy growth, cancellation and eviction.

use std::time::Duration;

use tokio::time::Instant;

use super::*;

pub(crate) fn pool(max_size: usize, grow_after_ms: u64) -> Pool<u32> {
    Pool::new(PoolConfig::new(max_size, Duration::from_millis(grow_after_ms)))
}

pub(crate) async fn open(p: &Pool<u32>, id: u32) -> Lease<u32> {
    match p.acquire().await.unwrap() {
        Grant::Open(slot) => slot.fill(id),
        Grant::Idle(l) => panic!("expected a slot, got idle connection {}", *l),
    }
}

pub(crate) async fn idle(p: &Pool<u32>) -> Lease<u32> {
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

pub(crate) fn futures_poll<F: std::future::Future + Unpin>(f: &mut F) -> Option<F::Output> {
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

#[tokio::test(start_paused = true)]
async fn a_connection_returned_above_the_limit_goes_to_the_closer() {
    let closed = Arc::new(Mutex::new(Vec::new()));
    let p = Pool::with_closer(PoolConfig::new(3, Duration::ZERO), {
        let closed = Arc::clone(&closed);
        move |c| closed.lock().push(c)
    });
    let a = open(&p, 1).await;
    let b = open(&p, 2).await;
    p.set_max_size(1);
    drop(a);
    assert_eq!(*closed.lock(), vec![1]);
    drop(b);
    assert_eq!(*closed.lock(), vec![1], "at the limit, kept");
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
async fn room_beside_the_pool_is_below_its_limit_with_nobody_waiting() {
    let p = pool(2, 0);
    assert!(p.has_room());
    let a = open(&p, 1).await;
    assert!(p.has_room(), "one of two open");
    let b = open(&p, 2).await;
    assert!(!p.has_room(), "at the limit");
    drop(b);
    assert!(!p.has_room(), "an idle connection counts too");
    drop(a);
    p.pause();
    assert!(!p.has_room(), "paused");
    p.resume();
    // Lazy growth: a second client waits below the limit; it goes first.
    let p = pool(3, 1000);
    let a = open(&p, 1).await;
    let waiter = tokio::spawn({
        let p = p.clone();
        async move { p.acquire().await.is_ok() }
    });
    tokio::task::yield_now().await;
    assert_eq!(p.status().waiting, 1);
    assert!(!p.has_room(), "a client is waiting");
    drop(a);
    assert!(waiter.await.unwrap());
    assert!(p.has_room());
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
async fn a_connection_given_back_at_a_moment_is_idle_since_then() {
    let p = pool(1, 0);
    let l = open(&p, 3).await;
    let used = Instant::now();
    tokio::time::advance(Duration::from_secs(5)).await;
    l.give_back_at(used);
    assert_eq!(p.status().idle, 1);
    assert_eq!(idle(&p).await.meta().idle_since, used, "idle since its last use, not since it came back");
}
