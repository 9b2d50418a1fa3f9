//! "The last minute" of a histogram without making recording dearer.
//!
//! Recording only ever adds to the since-start [`Histogram`](crate::Histogram). A [`Window`] remembers the
//! histogram's cumulative counts every `step` (when its owner calls [`Window::tick`]: a timer in the
//! sidecar, each invocation in Lambda, and every read) and answers "the last minute" as the current counts
//! minus those remembered about a minute ago. The alternative, a ring of per-interval histograms that
//! recorders rotate, needs a clock read and an epoch check on every record, and a rotation that races with
//! recorders; this costs the data path nothing and the reader a subtraction.
//!
//! Accuracy: the view covers from the newest remembered moment at least `span` old until now, so between
//! `span` and `span + step` (or more if nobody ticked for a while, as in a frozen Lambda environment); the
//! view says how long it covers. Until the process is `span` old it covers everything since start.

use std::collections::VecDeque;
use std::time::Duration;

use parking_lot::Mutex;

use crate::histogram::HistogramSnapshot;

/// A sliding view over one histogram. Times are offsets from any fixed origin (the process start).
#[derive(Debug)]
pub struct Window {
    span: Duration,
    step: Duration,
    /// Remembered cumulative counts, oldest first; at most one older than `span`.
    ring: Mutex<VecDeque<(Duration, HistogramSnapshot)>>,
}

/// What a [`Window`] saw: the values recorded over `covers`, ending now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowView {
    pub snapshot: HistogramSnapshot,
    pub covers: Duration,
}

impl Window {
    /// A window of `span`, remembering counts every `step` (a zero step is taken as one second).
    pub fn new(span: Duration, step: Duration) -> Window {
        Window { span, step: step.max(Duration::from_secs(1)), ring: Mutex::new(VecDeque::new()) }
    }

    /// The last minute, in steps of 5 s.
    pub fn last_minute() -> Window {
        Window::new(Duration::from_secs(60), Duration::from_secs(5))
    }

    /// Remembers `current` (the histogram's cumulative counts at `now`) if the newest remembered counts are
    /// at least a step old, and forgets what is no longer needed.
    pub fn tick(&self, now: Duration, current: &HistogramSnapshot) {
        let mut ring = self.ring.lock();
        if ring.back().is_none_or(|(at, _)| now.saturating_sub(*at) >= self.step) {
            ring.push_back((now, current.clone()));
        }
        // Keep exactly one entry at least `span` old: the baseline of the view.
        while ring.len() > 1 && ring.get(1).is_some_and(|(at, _)| now.saturating_sub(*at) >= self.span) {
            ring.pop_front();
        }
    }

    /// The values recorded over about the last `span`, ending at `now`, where `current` is the histogram's
    /// cumulative counts now. Ticks first, so a reader alone keeps the window going.
    pub fn view(&self, now: Duration, current: &HistogramSnapshot) -> WindowView {
        self.tick(now, current);
        let ring = self.ring.lock();
        // The newest entry at least `span` old, else the oldest (the window is younger than `span`).
        let baseline = ring.iter().rev().find(|(at, _)| now.saturating_sub(*at) >= self.span).or(ring.front());
        match baseline {
            Some((at, older)) if now.saturating_sub(*at) > Duration::ZERO => {
                WindowView { snapshot: current.delta(older), covers: now.saturating_sub(*at) }
            }
            // Nothing older than this very moment: everything so far is the window.
            _ => WindowView { snapshot: current.clone(), covers: now },
        }
    }

    /// How many counts are remembered (bounded by span / step + 2).
    pub fn remembered(&self) -> usize {
        self.ring.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Histogram;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_young_window_covers_everything_since_start() {
        let (h, w) = (Histogram::new(), Window::last_minute());
        h.record(100);
        w.tick(secs(0), &h.snapshot());
        h.record(200);
        let v = w.view(secs(10), &h.snapshot());
        // The tick at 0 s already held the first value; the view is what came after it.
        assert_eq!((v.snapshot.count(), v.covers), (1, secs(10)));
        let fresh = Window::last_minute();
        let v = fresh.view(secs(10), &h.snapshot());
        assert_eq!((v.snapshot.count(), v.covers), (2, secs(10)), "no earlier tick: since start");
    }

    #[test]
    fn old_values_leave_the_window() {
        let (h, w) = (Histogram::new(), Window::last_minute());
        for t in 0..=120 {
            // One value per second: 10 µs in the first minute, 5 ms in the second.
            h.record(if t <= 60 { 10 } else { 5_000 });
            w.tick(secs(t), &h.snapshot());
        }
        let v = w.view(secs(120), &h.snapshot());
        assert_eq!(v.covers, secs(60));
        assert_eq!(v.snapshot.count(), 60, "seconds 61..=120");
        assert_eq!(v.snapshot.count_below(16), 0, "nothing from the first minute");
        assert!(w.remembered() <= 60 / 5 + 2, "{} remembered", w.remembered());
    }

    #[test]
    fn irregular_ticks_widen_the_window_and_say_so() {
        let (h, w) = (Histogram::new(), Window::last_minute());
        w.tick(secs(0), &h.snapshot());
        h.record(5);
        w.tick(secs(50), &h.snapshot());
        h.record(6);
        // A frozen Lambda environment: nobody ticked between 50 s and 200 s.
        let v = w.view(secs(200), &h.snapshot());
        assert_eq!((v.snapshot.count(), v.covers), (1, secs(150)));
    }

    #[test]
    fn ticks_closer_than_a_step_are_not_remembered() {
        let (h, w) = (Histogram::new(), Window::last_minute());
        for ms in (0..5_000).step_by(100) {
            w.tick(Duration::from_millis(ms), &h.snapshot());
        }
        assert_eq!(w.remembered(), 1);
    }
}
