//! The cap on connections in use across pools, paused time: never more lent at once than the cap, whichever
//! pools the clients want; the excess waits and is served in arrival order; a caller that leaves the line
//! takes its place with it; the limit moves both ways.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::*;

/// What a run of clients through two pools under a cap saw.
#[derive(Debug)]
struct Run {
    /// Most connections lent at once, both pools together, seen by a client holding one.
    most_lent: usize,
    /// Clients in the order they got a connection.
    served: Vec<usize>,
    /// Clients that got none before their deadline.
    failed: usize,
}

/// `clients` clients, arriving 1 ms apart and alternating between two pools of 10 connections each, each
/// holding a connection for 50 ms (a long transaction), under a cap of `limit` (0: none); each waits up to
/// 10 s.
async fn run(limit: usize, clients: usize) -> Run {
    let cap = ActiveCap::new(limit);
    let pools = [Pool::new(PoolConfig::new(10, Duration::ZERO)), Pool::new(PoolConfig::new(10, Duration::ZERO))];
    let seen = Arc::new(Mutex::new(Run { most_lent: 0, served: Vec::new(), failed: 0 }));
    let mut tasks = Vec::new();
    for client in 0..clients {
        let (cap, pools, seen) = (Arc::clone(&cap), pools.clone(), Arc::clone(&seen));
        tasks.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(10);
            let permit = if cap.is_on() { cap.take_until(deadline).await.map(Some) } else { Some(None) };
            let Some(permit) = permit else {
                seen.lock().unwrap().failed += 1;
                return;
            };
            let pool = &pools[client % 2];
            let mut lease = match pool.acquire_until(deadline).await {
                Ok(Grant::Idle(lease)) => lease,
                Ok(Grant::Open(slot)) => slot.fill(client as u32),
                Err(_) => {
                    seen.lock().unwrap().failed += 1;
                    return;
                }
            };
            lease.hold(permit);
            {
                let lent: usize = pools.iter().map(|p| p.status()).map(|s| s.size - s.idle - s.opening).sum();
                let mut seen = seen.lock().unwrap();
                seen.served.push(client);
                seen.most_lent = seen.most_lent.max(lent);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(lease);
        }));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(cap.in_use(), 0, "every permit came back");
    assert_eq!(cap.waiting(), 0, "nobody is left in line");
    Arc::into_inner(seen).unwrap().into_inner().unwrap()
}

#[tokio::test(start_paused = true)]
async fn no_more_are_lent_across_pools_than_the_cap_and_the_rest_are_served_in_order() {
    let run = run(3, 12).await;
    assert_eq!(run.failed, 0, "the excess waits, it does not fail");
    assert!(run.most_lent <= 3, "{} lent at once under a cap of 3", run.most_lent);
    assert_eq!(run.most_lent, 3, "the cap is used in full");
    assert_eq!(run.served, (0..12).collect::<Vec<_>>(), "served in arrival order, whichever pool");
}

#[tokio::test(start_paused = true)]
async fn without_a_cap_the_same_clients_hold_more_at_once() {
    // The measure above sees an excess when there is one: the same clients with the cap off.
    let run = run(0, 12).await;
    assert_eq!(run.failed, 0);
    assert!(run.most_lent > 3, "only {} lent at once without a cap", run.most_lent);
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_leaves_the_line_takes_its_place_and_the_next_is_served() {
    let cap = ActiveCap::new(1);
    let held = cap.try_take().expect("a free permit");
    let soon = Instant::now() + Duration::from_millis(10);
    assert!(cap.take_until(soon).await.is_none(), "the deadline passes first");
    assert_eq!(cap.waiting(), 0, "its place went with it");
    // A dropped future leaves too.
    let later = Instant::now() + Duration::from_secs(1);
    drop(tokio::time::timeout(Duration::from_millis(5), cap.take_until(later)).await);
    assert_eq!(cap.waiting(), 0);
    let next = tokio::spawn({
        let cap = Arc::clone(&cap);
        async move { cap.take_until(Instant::now() + Duration::from_secs(1)).await.is_some() }
    });
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(cap.try_take().is_none(), "nobody takes a permit past one who waits");
    drop(held);
    assert!(next.await.unwrap(), "the permit went to the one in line");
    assert_eq!(cap.in_use(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_raised_limit_serves_the_line_and_a_lowered_one_hands_nothing_on_until_under_it() {
    let cap = ActiveCap::new(2);
    let (a, b) = (cap.try_take().unwrap(), cap.try_take().unwrap());
    let waiter = tokio::spawn({
        let cap = Arc::clone(&cap);
        async move { cap.take_until(Instant::now() + Duration::from_secs(1)).await }
    });
    tokio::time::sleep(Duration::from_millis(1)).await;
    cap.set_limit(3);
    let c = waiter.await.unwrap().expect("served when the limit rose");
    assert_eq!(cap.in_use(), 3);
    cap.set_limit(1);
    let waiter = tokio::spawn({
        let cap = Arc::clone(&cap);
        async move { cap.take_until(Instant::now() + Duration::from_secs(1)).await }
    });
    tokio::time::sleep(Duration::from_millis(1)).await;
    drop((a, b));
    assert_eq!((cap.in_use(), cap.waiting()), (1, 1), "still at the lowered limit: nothing handed on");
    drop(c);
    assert!(waiter.await.unwrap().is_some(), "under the limit again: the first in line is served");
    assert_eq!(cap.in_use(), 0);
    // No cap: nobody waits.
    cap.set_limit(0);
    let many: Vec<_> = (0..100).map(|_| cap.try_take().expect("no cap")).collect();
    assert_eq!(cap.in_use(), 100);
    drop(many);
}
