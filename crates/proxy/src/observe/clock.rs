//! The meter's clock: moments as integer nanoseconds on the monotonic clock, so that a duration is one
//! subtraction and a division by a constant. An `Instant` keeps seconds and nanoseconds apart, and each
//! `Instant - Instant` borrows between them and builds a `Duration`, which is then taken apart again into
//! the microseconds a histogram records: about 60 instructions, four times per transaction.
//!
//! The recorded microseconds are those of before: a duration is cut to whole microseconds after the
//! subtraction, as `Duration` was (moments cut to microseconds first would be off by one now and then, and
//! below 16 µs every microsecond is a histogram bucket of its own). A `u64` of nanoseconds lasts 584 years.
//!
//! It is the clock `std::time::Instant` reads on Linux (`CLOCK_MONOTONIC`), so a moment can be turned into an
//! `Instant` for the pool, which keeps its times as `Instant`s, from one pair of readings taken together at
//! the start ([`Anchor`]). Not tokio's paused clock: like the `std::time::Instant`s the meter read before,
//! these moments ignore `tokio::time::pause`.

use std::time::{Duration, Instant};

use rustix::time::{ClockId, clock_gettime};

/// Nanoseconds since some fixed moment (the machine's boot on Linux), now.
#[inline]
pub fn now_ns() -> u64 {
    let t = clock_gettime(ClockId::Monotonic);
    // A monotonic clock is never negative.
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(t.tv_nsec).unwrap_or(0);
    secs.wrapping_mul(1_000_000_000).wrapping_add(nanos)
}

/// Whole microseconds from moment `earlier` to moment `later` (zero if `later` is not later): what a
/// histogram records.
#[inline]
pub fn micros(earlier: u64, later: u64) -> u64 {
    later.saturating_sub(earlier) / 1_000
}

/// `d` in nanoseconds, the most a `u64` holds for anything longer (584 years).
#[inline]
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// One `Instant` and the [`now_ns`] read beside it: the bridge from integer moments to `Instant`s.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Anchor {
    at: Instant,
    ns: u64,
}

impl Anchor {
    /// Both clocks read now, the `Instant` right after the nanoseconds: an `Instant` made from a moment is
    /// late by at most the time between two clock reads.
    pub(crate) fn now() -> Anchor {
        let ns = now_ns();
        Anchor { at: Instant::now(), ns }
    }

    /// The nanoseconds of this anchor's moment.
    pub(crate) fn ns(&self) -> u64 {
        self.ns
    }

    /// The `Instant` of moment `ns` (a [`now_ns`] reading); a moment before the anchor is the anchor.
    #[inline]
    pub(crate) fn instant_at(&self, ns: u64) -> Instant {
        self.at + Duration::from_nanos(ns.saturating_sub(self.ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::micros_between;

    #[test]
    fn the_nanosecond_clock_is_the_instant_clock() {
        // Both clocks read CLOCK_MONOTONIC in nanoseconds, so a span read on one clock inside a span read on
        // the other is never longer: no slack is needed, however the machine schedules the reads.
        for _ in 0..20 {
            let outer = now_ns();
            let inner = Instant::now();
            spin();
            let inner = inner.elapsed();
            let outer = now_ns() - outer;
            assert!(Duration::from_nanos(outer) >= inner, "{outer} ns around {inner:?}");
            let outer = Instant::now();
            let inner = now_ns();
            spin();
            let inner = now_ns() - inner;
            let outer = outer.elapsed();
            assert!(Duration::from_nanos(inner) <= outer, "{inner} ns inside {outer:?}");
        }
    }

    /// Some work between two clock reads: a few microseconds at least, so that a clock in another unit or
    /// of coarser grain shows.
    fn spin() {
        let mut x = 1u64;
        for i in 0..20_000 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
        }
    }

    #[test]
    fn durations_are_the_microseconds_instants_give() {
        // The same two moments as Instants and as nanoseconds record the same microseconds, at and around
        // every power of ten and of two (the histograms' bucket edges) and from any sub-microsecond phase.
        let anchor = Anchor::now();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for shift in 0..40 {
            for base in [1u64 << shift, 10u64.pow(shift % 13)] {
                for delta in [0, 1, 999, 1_000, 1_001] {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let start = anchor.ns() + seed % 2_000_000_000;
                    let len = (base * 1_000).saturating_add(delta) - 500;
                    let (a, b) = (anchor.instant_at(start), anchor.instant_at(start + len));
                    assert_eq!(micros(start, start + len), micros_between(a, b), "{len} ns from {start}");
                }
            }
        }
        assert_eq!(micros(5_000, 1_000), 0, "a moment before is no time");
    }

    #[test]
    fn the_clock_never_goes_back() {
        let mut last = now_ns();
        for _ in 0..1_000 {
            let now = now_ns();
            assert!(now >= last);
            last = now;
        }
        let anchor = Anchor::now();
        assert_eq!(anchor.instant_at(anchor.ns().saturating_sub(5)), anchor.instant_at(anchor.ns()));
    }
}
