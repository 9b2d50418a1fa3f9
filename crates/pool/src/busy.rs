//! How much of the recent past the line of waiters held somebody: the pool's measure of steady load.
//!
//! A line that never empties is steady load, but so is one that empties for a moment every few
//! milliseconds: 20 clients without pause on 11 connections across a network leave it empty now and then,
//! yet keep it most of the time, second after second. A burst of invocations keeps a line for a hundred
//! milliseconds or so and then leaves it empty for seconds. So time is cut into windows of half the pool's
//! `steady_after`, and the line counts as steady while each of the last two whole windows held somebody
//! for at least three quarters of its length.
//!
//! The bookkeeping runs when the line forms or empties, with clock readings the pool already has (a
//! waiter's arrival, a lease's return); it takes no reading and arms no timer of its own.

use std::time::Duration;

use tokio::time::Instant;

/// The last two windows: both must have been busy.
const LAST_TWO: u8 = 0b11;

#[derive(Debug, Default)]
pub(crate) struct Busy {
    /// When the current window began; `None` until the line first forms.
    start: Option<Instant>,
    /// How long the line held somebody in the current window, up to when it last emptied.
    held: Duration,
    /// One bit per whole window, the latest in bit 0: whether the line held somebody for at least three
    /// quarters of it.
    windows: u8,
}

impl Busy {
    /// Whether each of the last two whole windows was busy, as of the last update.
    pub(crate) fn steady(&self) -> bool {
        self.windows & LAST_TWO == LAST_TWO
    }

    /// The line formed at `at` (it was empty until then).
    pub(crate) fn formed(&mut self, at: Instant, window: Duration) {
        self.roll(at, None, window);
    }

    /// The line, formed at `line`, emptied at `at`.
    pub(crate) fn emptied(&mut self, line: Instant, at: Instant, window: Duration) {
        self.roll(at, Some(line), window);
        if let Some(start) = self.start {
            self.held += at.saturating_duration_since(line.max(start));
        }
    }

    /// Brings the windows up to `now`. `line` is when the line that has held somebody since formed, if it
    /// still does.
    pub(crate) fn roll(&mut self, now: Instant, line: Option<Instant>, window: Duration) {
        if window.is_zero() {
            return;
        }
        let Some(start) = self.start else {
            self.start = Some(now);
            return;
        };
        let end = start + window;
        if now < end {
            return;
        }
        // The window that was current: what it held before the line formed, and the line's part of it.
        self.push(self.held + covered(line, start, end), window);
        self.held = Duration::ZERO;
        // Whole windows since then held only the open line, if any; only the last two count.
        let since = now.duration_since(end);
        let whole = u32::try_from(since.as_nanos() / window.as_nanos()).unwrap_or(u32::MAX);
        for k in whole.saturating_sub(2)..whole {
            let from = end + window * k;
            self.push(covered(line, from, from + window), window);
        }
        self.start = Some(end + window.saturating_mul(whole));
    }

    fn push(&mut self, held: Duration, window: Duration) {
        let busy = held.saturating_mul(4) >= window.saturating_mul(3);
        self.windows = (self.windows << 1) | u8::from(busy);
    }
}

/// How much of `[from, to)` a line formed at `line` (still open) covered.
fn covered(line: Option<Instant>, from: Instant, to: Instant) -> Duration {
    line.map_or(Duration::ZERO, |line| to.saturating_duration_since(line.max(from)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_millis(250);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A line that forms every `every` ms from `t0`, `times` times, and is held `held` ms each time.
    fn hold(b: &mut Busy, t0: Instant, times: u64, every: u64, held: u64) {
        for i in 0..times {
            let at = t0 + ms(every * i);
            b.formed(at, W);
            b.emptied(at, at + ms(held), W);
        }
    }

    #[test]
    fn a_line_held_most_of_two_windows_is_steady_and_a_burst_is_not() {
        let t0 = Instant::now();
        let mut b = Busy::default();
        // A line held 9 ms of every 10 for 600 ms.
        hold(&mut b, t0, 60, 10, 9);
        b.roll(t0 + ms(600), None, W);
        assert!(b.steady(), "90 % of two windows");

        // Then quiet for a second: not steady any more.
        b.roll(t0 + ms(1_600), None, W);
        assert!(!b.steady());

        // A burst of 150 ms, then quiet.
        let at = t0 + ms(2_000);
        b.formed(at, W);
        b.emptied(at, at + ms(150), W);
        b.roll(at + ms(1_000), None, W);
        assert!(!b.steady(), "a burst is not steady load");
    }

    #[test]
    fn a_line_held_half_the_time_is_not_steady() {
        let t0 = Instant::now();
        let mut b = Busy::default();
        hold(&mut b, t0, 100, 10, 5);
        assert!(!b.steady());
    }

    #[test]
    fn a_line_still_open_counts_for_the_windows_it_spans() {
        let t0 = Instant::now();
        let mut b = Busy::default();
        b.formed(t0, W);
        // Nothing happened for three windows and more while the line stayed.
        b.roll(t0 + ms(900), Some(t0), W);
        assert!(b.steady());
        // A line that formed late in the last window does not make it busy.
        let mut b = Busy::default();
        b.formed(t0, W);
        b.emptied(t0, t0 + ms(1), W);
        b.roll(t0 + ms(700), Some(t0 + ms(600)), W);
        assert!(!b.steady());
    }
}
