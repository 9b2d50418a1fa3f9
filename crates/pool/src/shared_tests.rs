//! Pools under shared limits, paused time: a pool grows only into room every limit has, takes an idle
//! connection from another pool rather than wait, never one in use, and is woken when room comes back.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::tests::open;

/// A pool whose closer records what it closed.
fn pool_with_closer(max_size: usize, grow_after_ms: u64) -> (Pool<u32>, Arc<Mutex<Vec<u32>>>) {
    let closed = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&closed);
    let pool = Pool::with_closer(PoolConfig::new(max_size, Duration::from_millis(grow_after_ms)), move |c| {
        seen.lock().unwrap().push(c);
    });
    (pool, closed)
}

/// Waits in `p` until `within`; what it was handed.
async fn wait(p: &Pool<u32>, within_ms: u64) -> Result<Grant<u32>, WaitError> {
    p.acquire_until(Instant::now() + Duration::from_millis(within_ms)).await
}

#[tokio::test(start_paused = true)]
async fn a_pool_takes_an_idle_connection_of_another_rather_than_wait() {
    let budget = SharedLimit::new(2);
    let (a, a_closed) = pool_with_closer(10, 0);
    let (b, _) = pool_with_closer(10, 0);
    a.share(vec![Arc::clone(&budget)]);
    b.share(vec![Arc::clone(&budget)]);
    let (a1, a2) = (open(&a, 1).await, open(&a, 2).await);
    assert_eq!(budget.held(), 2);
    drop(a1);
    // a's connection 1 sits idle: b's client gets its room.
    let Ok(Grant::Open(slot)) = wait(&b, 100).await else { panic!("b should open a connection") };
    let b1 = slot.fill(10);
    assert_eq!(*a_closed.lock().unwrap(), vec![1], "the idle one was given up");
    assert_eq!((a.status().size, b.status().size, budget.held()), (1, 1, 2));
    drop((a2, b1));
}

#[tokio::test(start_paused = true)]
async fn a_connection_in_use_is_never_taken() {
    let budget = SharedLimit::new(2);
    let (a, a_closed) = pool_with_closer(10, 0);
    let (b, _) = pool_with_closer(10, 0);
    a.share(vec![Arc::clone(&budget)]);
    b.share(vec![Arc::clone(&budget)]);
    let held = (open(&a, 1).await, open(&a, 2).await);
    assert!(matches!(wait(&b, 100).await, Err(WaitError::TimedOut)), "no room, and nothing idle to take");
    assert!(a_closed.lock().unwrap().is_empty());
    drop(held);
}

/// What [`one_held_one_waiting`] sets up: pool `a`, its one connection lent, what it closed, and `b`'s wait.
type HeldAndWaiting =
    (Pool<u32>, Lease<u32>, Arc<Mutex<Vec<u32>>>, tokio::task::JoinHandle<Result<Grant<u32>, WaitError>>);

/// Two pools under a limit of one: `a` holds the one connection, `b` waits for it (spawned); what `a` closed
/// is recorded. Returns once `b` is seen waiting.
async fn one_held_one_waiting() -> HeldAndWaiting {
    let limit = SharedLimit::new(1);
    let (a, a_closed) = pool_with_closer(10, 0);
    let (b, _) = pool_with_closer(10, 0);
    a.share(vec![Arc::clone(&limit)]);
    b.share(vec![Arc::clone(&limit)]);
    let a1 = open(&a, 1).await;
    let waiter = tokio::spawn(async move { wait(&b, 1_000).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished(), "b waits while a's one connection is in use");
    (a, a1, a_closed, waiter)
}

#[tokio::test(start_paused = true)]
async fn a_pool_turned_away_is_woken_when_room_comes_back() {
    let (_a, a1, _, waiter) = one_held_one_waiting().await;
    let _ = a1.discard();
    let grant = tokio::time::timeout(Duration::from_millis(10), waiter).await.expect("woken at once").unwrap();
    assert!(matches!(grant, Ok(Grant::Open(_))), "{grant:?}");
}

#[tokio::test(start_paused = true)]
async fn a_pool_turned_away_takes_the_room_of_a_connection_that_goes_idle_elsewhere() {
    // PgBouncer's test_max_db_connections: every connection of a database was in use when a new user's pool
    // asked; one coming back idle in another pool (not closed) must serve the waiting pool.
    let (_a, a1, a_closed, waiter) = one_held_one_waiting().await;
    drop(a1);
    let grant = tokio::time::timeout(Duration::from_millis(10), waiter).await.expect("woken at once").unwrap();
    assert!(matches!(grant, Ok(Grant::Open(_))), "{grant:?}");
    assert_eq!(*a_closed.lock().unwrap(), vec![1], "a's idle connection was given up for it");
}

#[tokio::test(start_paused = true)]
async fn a_raised_limit_lets_lazy_growth_go_on() {
    let budget = SharedLimit::new(1);
    let (a, _) = pool_with_closer(10, 5);
    a.share(vec![Arc::clone(&budget)]);
    let a1 = open(&a, 1).await;
    let waiter = tokio::spawn({
        let a = a.clone();
        async move { wait(&a, 1_000).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished(), "lazy growth came due, but the budget had no room");
    budget.set_limit(2);
    let grant = tokio::time::timeout(Duration::from_millis(10), waiter).await.expect("woken at once").unwrap();
    assert!(matches!(grant, Ok(Grant::Open(_))), "{grant:?}");
    drop(a1);
}

#[tokio::test(start_paused = true)]
async fn warming_up_takes_nothing_from_another_pool() {
    let budget = SharedLimit::new(1);
    let (a, a_closed) = pool_with_closer(10, 0);
    let (b, _) = pool_with_closer(10, 0);
    a.share(vec![Arc::clone(&budget)]);
    b.share(vec![Arc::clone(&budget)]);
    drop(open(&a, 1).await);
    assert!(b.try_grow().is_none(), "min_pool_size does not evict a's idle connection");
    assert!(a_closed.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn room_is_taken_in_every_limit_or_in_none() {
    let budget = SharedLimit::new(10);
    let user = SharedLimit::new(1);
    let (a, _) = pool_with_closer(10, 0);
    a.share(vec![Arc::clone(&budget), Arc::clone(&user)]);
    let a1 = open(&a, 1).await;
    assert!(matches!(wait(&a, 50).await, Err(WaitError::TimedOut)), "the user's limit holds");
    assert_eq!((budget.held(), user.held()), (1, 1), "the budget's room taken for the refused one came back");
    let _ = a1.discard();
    assert_eq!((budget.held(), user.held()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn every_place_freed_gives_its_room_back() {
    let budget = SharedLimit::new(3);
    let (a, _) = pool_with_closer(3, 0);
    a.share(vec![Arc::clone(&budget)]);
    let (l1, l2) = (open(&a, 1).await, open(&a, 2).await);
    let slot = match a.try_acquire().unwrap() {
        Some(Grant::Open(slot)) => slot,
        other => panic!("{other:?}"),
    };
    assert_eq!(budget.held(), 3);
    drop(slot);
    assert_eq!(budget.held(), 2, "an unfilled slot");
    let _ = l1.discard();
    assert_eq!(budget.held(), 1, "a discarded lease");
    drop(l2);
    a.set_max_size(0);
    assert_eq!(a.evict_idle(|_, _| false), vec![2]);
    assert_eq!(budget.held(), 0, "an evicted idle connection");
}

#[tokio::test(start_paused = true)]
async fn room_beside_a_pool_needs_room_in_every_limit_it_shares() {
    let budget = SharedLimit::new(2);
    let (a, _) = pool_with_closer(10, 0);
    let (b, _) = pool_with_closer(10, 0);
    a.share(vec![Arc::clone(&budget)]);
    b.share(vec![Arc::clone(&budget)]);
    let a1 = open(&a, 1).await;
    assert!(a.has_room() && b.has_room());
    let b1 = open(&b, 2).await;
    assert!(!a.has_room() && !b.has_room(), "the budget is spent, each pool far below its own limit");
    drop((a1, b1));
}
