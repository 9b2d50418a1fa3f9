//! pgmux's timers, kept off the threads that relay.
//!
//! tokio's time driver works on every park of the runtime that owns it: it locks its wheel, reads the clock
//! and, whenever any timer is in the wheel, scans the wheel's levels for the next deadline before the wait
//! and again after it. A pooler parks twice per transaction (once for the server's answer, once for the
//! client's next query), and pgmux always has a timer pending (the liveness probe, the sizing tick, the
//! console's polls), so the relay paid for the wheel on every transaction: about 1,000 instructions of a
//! simple one, counted (docs/benchmarks.md, "The time driver off the relay's thread").
//!
//! So the pgmux binary builds its relay runtime without a time driver, starts one thread here whose only
//! work is tokio's timer wheel, and marks each relay thread with [`route_here`]. A timer made through this
//! crate on a marked thread lives in that thread's wheel; its expiry wakes the task that waits on it, on
//! whichever runtime that task runs, as any cross-thread wake does. Timers are rare events (a deadline set,
//! a probe's round); the relay's parks then cost what an I/O-only runtime's do.
//!
//! The periodic loops (the sizing tick, the liveness rounds, maintenance, the metrics listener) tick on one
//! beat ([`beat`]), so that an idle pgmux wakes once per beat, together; on a marked thread a beat is a
//! `timerfd` in that runtime's own epoll, and the timer thread sleeps while nothing else is pending.
//!
//! On a thread that is not marked (every test, the `check` command, a runtime built elsewhere) each function
//! is tokio's own on the current runtime, paused clocks included. Code in pgmux's crates reaches tokio's
//! timers only through here: `crates/clippy.toml` forbids the direct calls outside tests.

#![allow(clippy::disallowed_methods)]

use std::cell::Cell;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::io;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::runtime::{EnterGuard, Handle};
use tokio::task::Unconstrained;
use tokio::time::{Instant, Interval, Sleep};

/// The timer thread's runtime, once started.
static TIMERS: OnceLock<Handle> = OnceLock::new();

thread_local! {
    /// Whether timers made on this thread belong to the timer thread.
    static ROUTED: Cell<bool> = const { Cell::new(false) };
}

/// Starts the timer thread (once per process; later calls do nothing).
fn start() -> io::Result<()> {
    if TIMERS.get().is_some() {
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
    let handle = runtime.handle().clone();
    if TIMERS.set(handle).is_err() {
        return Ok(()); // Another caller started it first; this runtime is dropped unused.
    }
    std::thread::Builder::new()
        .name("pgmux-timers".into())
        .spawn(move || runtime.block_on(std::future::pending::<()>()))?;
    Ok(())
}

/// Marks the calling thread: timers made on it from now on live on the timer thread. Starts that thread if
/// need be; an error leaves the thread unmarked (its timers stay on its own runtime).
pub fn route_here() -> io::Result<()> {
    start()?;
    ROUTED.with(|routed| routed.set(true));
    Ok(())
}

/// The timer thread's context, entered for the making of one timer, if this thread is marked.
#[inline]
fn enter() -> Option<EnterGuard<'static>> {
    if !ROUTED.with(Cell::get) {
        return None;
    }
    TIMERS.get().map(Handle::enter)
}

/// [`tokio::time::sleep`].
// Always inlined: a future moved through a call that is not would be copied (a login's is over a kilobyte).
#[inline(always)]
#[track_caller]
pub fn sleep(duration: Duration) -> Sleep {
    let _timers = enter();
    tokio::time::sleep(duration)
}

/// [`tokio::time::sleep_until`].
#[inline(always)]
#[track_caller]
pub fn sleep_until(deadline: Instant) -> Sleep {
    let _timers = enter();
    tokio::time::sleep_until(deadline)
}

/// [`tokio::time::timeout`]: `future`, unless `duration` passes first.
#[inline(always)]
#[track_caller]
pub fn timeout<F: IntoFuture>(duration: Duration, future: F) -> Timeout<F::IntoFuture> {
    // The sleep is made first and the future moved once, into place: tokio's own `timeout`, called inside
    // the timer thread's context, would build the pair while that context is entered and then move the whole
    // of it (a login's future is over a kilobyte) past the context's exit.
    Timeout { sleep: tokio::task::unconstrained(sleep(duration)), future: future.into_future() }
}

/// [`tokio::time::timeout_at`]: `future`, unless `deadline` passes first.
#[inline(always)]
#[track_caller]
pub fn timeout_at<F: IntoFuture>(deadline: Instant, future: F) -> Timeout<F::IntoFuture> {
    Timeout { sleep: tokio::task::unconstrained(sleep_until(deadline)), future: future.into_future() }
}

pin_project_lite::pin_project! {
    /// A future with a deadline (see [`timeout`]). The future is polled first, so one that is ready as the
    /// deadline passes still counts; the deadline is checked outside tokio's task budget (as tokio's own
    /// timeout does), so a future that spends the budget on every poll is still cut off.
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Timeout<F> {
        #[pin]
        future: F,
        #[pin]
        sleep: Unconstrained<Sleep>,
    }
}

impl<F> fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeout").finish_non_exhaustive()
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(out) = this.future.poll(cx) {
            return Poll::Ready(Ok(out));
        }
        this.sleep.poll(cx).map(|()| Err(Elapsed))
    }
}

/// A [`Timeout`]'s deadline passed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

impl From<Elapsed> for io::Error {
    fn from(_: Elapsed) -> io::Error {
        io::ErrorKind::TimedOut.into()
    }
}

/// [`tokio::time::interval`].
#[inline(always)]
#[track_caller]
pub fn interval(period: Duration) -> Interval {
    let _timers = enter();
    tokio::time::interval(period)
}

/// The moment every [`beat`] counts its ticks from: the first beat's making.
static EPOCH: OnceLock<Instant> = OnceLock::new();

/// A periodic tick on the process's beat: the first tick at once, as [`interval`]'s; every later one at a
/// multiple of `period` from a moment the whole process shares, and a missed one skipped (the next comes on
/// the beat again). Periodic loops whose periods divide one another (the sizing tick, the liveness rounds,
/// maintenance, the metrics listener's look at its address) so wake the process together, once, rather
/// than each at its own phase.
///
/// On a marked thread a beat is a `timerfd` in the relay runtime's own epoll, so that it wakes that thread
/// directly, once per beat: in the timer thread's wheel, a tick a quarter of a second away woke the timer
/// thread twice (once to move it to the wheel's finest level, once at the deadline) and then the relay.
#[track_caller]
pub fn beat(period: Duration) -> Beat {
    let now = Instant::now();
    let last = last_beat(*EPOCH.get_or_init(|| now), now, period);
    if ROUTED.with(Cell::get)
        && let Ok(fd) = fd_beat::FdBeat::new(period, last + period - now)
    {
        return Beat(Ticks::Fd { fd, first: true });
    }
    Beat(Ticks::Wheel(wheel_beat(last, period)))
}

/// A beat in the timer thread's wheel (or the current runtime's, on a thread that is not marked), its first
/// tick at `start`.
fn wheel_beat(start: Instant, period: Duration) -> Interval {
    let _timers = enter();
    let mut tick = tokio::time::interval_at(start, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tick
}

/// A periodic tick on the process's beat; see [`beat`].
#[derive(Debug)]
pub struct Beat(Ticks);

#[derive(Debug)]
enum Ticks {
    /// A `timerfd` in the relay runtime's epoll; `first`: its first tick (at once) is still to come.
    Fd { fd: fd_beat::FdBeat, first: bool },
    /// An interval in a time driver's wheel.
    Wheel(Interval),
}

impl Beat {
    /// The next tick: when it was due (a tick missed by more than a period comes once, due when the first
    /// of those missed was).
    pub async fn tick(&mut self) -> Instant {
        loop {
            match &mut self.0 {
                Ticks::Wheel(interval) => return interval.tick().await,
                Ticks::Fd { first, .. } if *first => {
                    *first = false;
                    return Instant::now();
                }
                Ticks::Fd { fd, .. } => match fd.tick().await {
                    Ok(due) => return due,
                    // A timerfd that cannot be read (never seen): the wheel from here on.
                    Err(_) => {
                        let period = fd.period;
                        self.0 = Ticks::Wheel(wheel_beat(Instant::now() + period, period));
                    }
                },
            }
        }
    }
}

/// A beat as a `timerfd` on the current runtime's epoll.
mod fd_beat {
    use std::io;
    use std::os::fd::OwnedFd;
    use std::time::Duration;

    use rustix::time::{Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec};
    use tokio::io::Interest;
    use tokio::io::unix::AsyncFd;
    use tokio::time::Instant;

    #[derive(Debug)]
    pub(super) struct FdBeat {
        fd: AsyncFd<OwnedFd>,
        pub(super) period: Duration,
    }

    fn timespec(d: Duration) -> io::Result<Timespec> {
        Timespec::try_from(d).map_err(|_| io::ErrorKind::InvalidInput.into())
    }

    impl FdBeat {
        /// A timerfd that first expires `first` from now, then every `period`, registered with the current
        /// runtime's I/O driver (an error without one).
        pub(super) fn new(period: Duration, first: Duration) -> io::Result<FdBeat> {
            if period.is_zero() {
                return Err(io::ErrorKind::InvalidInput.into());
            }
            let fd = rustix::time::timerfd_create(
                TimerfdClockId::Monotonic,
                TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
            )?;
            // A zero it_value would disarm the timer: the first expiry is at least a nanosecond away.
            let spec =
                Itimerspec { it_interval: timespec(period)?, it_value: timespec(first.max(Duration::from_nanos(1)))? };
            rustix::time::timerfd_settime(&fd, TimerfdTimerFlags::empty(), &spec)?;
            // The safe constructor is deprecated because a descriptor it does not own could be closed while
            // registered; this one is owned by the AsyncFd itself.
            #[allow(deprecated)]
            let fd = AsyncFd::with_interest(fd, Interest::READABLE)?;
            Ok(FdBeat { fd, period })
        }

        /// Waits for the next expiry; when it was due (the first of several missed ones).
        pub(super) async fn tick(&self) -> io::Result<Instant> {
            loop {
                let mut ready = self.fd.readable().await?;
                let read = ready.try_io(|fd| {
                    let mut count = [0u8; 8];
                    match rustix::io::read(fd.get_ref(), &mut count)? {
                        8 => Ok(u64::from_ne_bytes(count)),
                        _ => Err(io::ErrorKind::UnexpectedEof.into()),
                    }
                });
                match read {
                    Ok(Ok(expirations)) => {
                        // The read took every expiry: nothing is left until the next, whose edge tokio
                        // keeps if it came meanwhile (readiness is cleared only as of this guard's event).
                        ready.clear_ready();
                        let missed = u32::try_from(expirations.saturating_sub(1)).unwrap_or(u32::MAX);
                        let now = Instant::now();
                        return Ok(self
                            .period
                            .checked_mul(missed)
                            .and_then(|back| now.checked_sub(back))
                            .unwrap_or(now));
                    }
                    Ok(Err(e)) => return Err(e),
                    Err(_would_block) => continue,
                }
            }
        }
    }
}

/// The latest multiple of `period` from `epoch` at or before `now` (`epoch` may be later than `now`: a
/// paused clock of another runtime, in tests).
fn last_beat(epoch: Instant, now: Instant, period: Duration) -> Instant {
    let period = period.as_nanos().max(1);
    let since = if now >= epoch {
        (now - epoch).as_nanos() % period
    } else {
        (period - (epoch - now).as_nanos() % period) % period
    };
    // `since` is below `period`, a Duration's nanoseconds: it fits.
    now.checked_sub(Duration::from_nanos(since as u64)).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beats_fall_on_multiples_of_their_period_from_one_moment() {
        let epoch = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(last_beat(epoch, epoch + ms(1_100), ms(250)), epoch + ms(1_000));
        assert_eq!(last_beat(epoch, epoch + ms(1_000), ms(250)), epoch + ms(1_000));
        assert_eq!(last_beat(epoch, epoch + ms(1_999), ms(1_000)), epoch + ms(1_000));
        // An epoch ahead of the clock: the beat is still on a multiple from it.
        let late = epoch + ms(10_100);
        assert_eq!(last_beat(late, epoch + ms(5_000), ms(250)), epoch + ms(4_850));
        assert_eq!(last_beat(late, epoch + ms(100), ms(1_000)), epoch + ms(100));
    }

    #[test]
    fn a_beat_on_a_marked_thread_ticks_from_the_relay_s_own_epoll_and_owns_up_to_missed_ticks() {
        let runtime = relay_runtime();
        runtime.block_on(async {
            let period = Duration::from_millis(20);
            let mut tick = beat(period);
            assert!(matches!(tick.0, Ticks::Fd { .. }), "a timerfd, not the timer thread's wheel");
            assert!(tick.tick().await <= Instant::now(), "the first tick at once");
            tick.tick().await;
            // The thread does not run for four periods (a freeze, a stop): the next tick comes at once, due
            // when the first missed one was.
            std::thread::sleep(period * 4);
            let due = tick.tick().await;
            assert!(due.elapsed() >= period * 2, "{:?} since the due tick", due.elapsed());
        });
    }

    #[test]
    fn two_beats_made_apart_tick_together() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        runtime.block_on(async {
            let quarter_ms = Duration::from_millis(250);
            let mut quarter = beat(quarter_ms);
            let on_the_beat = quarter.tick().await;
            sleep(Duration::from_millis(310)).await;
            let mut second = beat(Duration::from_secs(1));
            // The first tick is at once, as an interval's; every later one falls on a quarter's tick.
            assert!(second.tick().await <= Instant::now());
            for _ in 0..3 {
                let (a, b) = tokio::join!(second.tick(), async {
                    let mut ticks = Vec::new();
                    for _ in 0..4 {
                        ticks.push(quarter.tick().await);
                    }
                    ticks
                });
                assert_eq!((a - on_the_beat).as_nanos() % quarter_ms.as_nanos(), 0, "{a:?} off {on_the_beat:?}");
                assert!(b.contains(&a), "{a:?} not among {b:?}");
            }
        });
    }

    /// A runtime with I/O but no time driver, its thread marked: the relay's, as the binary builds it.
    fn relay_runtime() -> tokio::runtime::Runtime {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
        route_here().unwrap();
        runtime
    }

    #[test]
    fn timers_made_on_a_marked_thread_fire_on_a_runtime_without_a_time_driver() {
        let runtime = relay_runtime();
        let result = runtime.block_on(async {
            let started = Instant::now();
            sleep(Duration::from_millis(20)).await;
            assert!(started.elapsed() >= Duration::from_millis(20));
            sleep_until(Instant::now() + Duration::from_millis(5)).await;
            let late = timeout(Duration::from_millis(10), std::future::pending::<()>()).await;
            assert!(late.is_err(), "a future that never ends times out");
            let on_time = timeout_at(Instant::now() + Duration::from_secs(5), async { 7 }).await;
            assert_eq!(on_time.unwrap(), 7);
            let mut tick = interval(Duration::from_millis(5));
            tick.tick().await;
            tick.tick().await;
            // A timer reset from the relay's thread stays in the timer thread's wheel.
            let mut reset = Box::pin(sleep(Duration::from_secs(3600)));
            reset.as_mut().reset(Instant::now() + Duration::from_millis(5));
            reset.await;
            "done"
        });
        assert_eq!(result, "done");
        assert!(ROUTED.with(Cell::get) && TIMERS.get().is_some());
    }

    #[test]
    fn a_thread_that_is_not_marked_keeps_its_own_runtime_s_timers() {
        // Tests run each on a thread of their own: this one is never marked, so a paused clock on its runtime
        // governs these timers (an hour passes at once), as tokio's own would be.
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build();
        let runtime = runtime.unwrap();
        runtime.block_on(async {
            assert!(!ROUTED.with(Cell::get));
            sleep(Duration::from_secs(3600)).await;
            assert!(timeout(Duration::from_secs(60), std::future::pending::<()>()).await.is_err());
        });
    }

    #[test]
    fn a_future_that_spends_its_task_budget_on_every_poll_is_still_cut_off() {
        // Each poll of the inner future spends the task's whole budget and wakes the task again: the
        // deadline is checked outside that budget (with it inside, this test never ends).
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let spent = runtime.block_on(async {
            let spender = async {
                loop {
                    tokio::task::consume_budget().await;
                }
            };
            timeout(Duration::from_millis(20), spender).await
        });
        assert_eq!(spent, Err(Elapsed));
        assert_eq!(Elapsed.to_string(), "deadline has elapsed");
        assert_eq!(io::Error::from(Elapsed).kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn a_future_ready_when_its_deadline_passes_still_counts() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        runtime.block_on(async {
            let deadline = Instant::now() + Duration::from_secs(1);
            // Both are ready on the same poll: the future's answer wins.
            let both = timeout_at(deadline, sleep_until(deadline)).await;
            assert_eq!(both, Ok(()));
        });
    }
}
