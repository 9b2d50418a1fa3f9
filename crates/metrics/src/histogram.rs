//! A latency histogram in microseconds, cheap enough for every transaction: recording is a bucket index
//! from bit arithmetic and two relaxed `fetch_add`s (the bucket and the sum; the count is the sum of the
//! buckets, so it needs no atomic of its own).
//!
//! Buckets are log-linear: values below 16 µs each have their own bucket, and every power of two above is
//! cut into 8 equal buckets (three bits below the leading one). A bucket is therefore never wider than 1/8
//! of its lower bound, which bounds the error of any percentile read from it (see
//! [`HistogramSnapshot::quantile`]). Values of 2^36 µs (19 hours) and more share the last bucket. Every
//! power of two is a bucket boundary, so the Prometheus exposition can use powers of two as `le` bounds
//! ([`PROMETHEUS_BOUNDS_US`]) and its cumulative counts are exact.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Bits of a value below its leading one that pick the bucket within a power of two.
const SUB_BITS: u32 = 3;
/// Buckets per power of two.
const SUB: u64 = 1 << SUB_BITS;
/// Values at or above this share the last bucket.
pub const MAX_TRACKED_US: u64 = 1 << 36;
/// Number of buckets, the last one being `[MAX_TRACKED_US, ∞)`.
pub const BUCKETS: usize = bucket_index(MAX_TRACKED_US) + 1;

/// The `le` bounds of the Prometheus exposition, in microseconds: powers of two from 16 µs to 2^32 µs
/// (71 minutes), 29 bounds plus `+Inf`. Each is a bucket boundary.
pub const PROMETHEUS_BOUNDS_US: [u64; 29] = {
    let mut bounds = [0u64; 29];
    let mut i = 0;
    while i < bounds.len() {
        bounds[i] = 1 << (i + 4);
        i += 1;
    }
    bounds
};

/// The bucket of a value in microseconds. For `v < 16` it is `v`; above, `(p - 3) * 8 + (v >> (p - 3))`
/// where `p` is the position of the leading one, so that the three bits after it choose among 8 buckets.
#[inline]
pub const fn bucket_index(us: u64) -> usize {
    let v = if us < MAX_TRACKED_US { us } else { MAX_TRACKED_US };
    // `| SUB` makes every value below 16 fall in the first "power of two", whose buckets have width 1.
    let shift = (63 - (v | SUB).leading_zeros()) - SUB_BITS;
    ((shift as u64) * SUB + (v >> shift)) as usize
}

/// The smallest value of a bucket, and its width (values `lower ..= lower + width - 1` fall in it). The last
/// bucket, which holds everything from [`MAX_TRACKED_US`] on, reports width 1: its values read as its bound.
pub const fn bucket_bounds(index: usize) -> (u64, u64) {
    let i = index as u64;
    if i < 2 * SUB {
        return (i, 1);
    }
    if index >= BUCKETS - 1 {
        return (MAX_TRACKED_US, 1);
    }
    let shift = i / SUB - 1;
    ((SUB + i % SUB) << shift, 1 << shift)
}

/// Latencies in microseconds since the process started.
#[derive(Debug)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    sum_us: AtomicU64,
}

impl Histogram {
    pub const fn new() -> Histogram {
        Histogram { buckets: [const { AtomicU64::new(0) }; BUCKETS], sum_us: AtomicU64::new(0) }
    }

    /// Records one latency in microseconds.
    #[inline]
    pub fn record(&self, us: u64) {
        self.buckets[bucket_index(us)].fetch_add(1, Relaxed);
        self.sum_us.fetch_add(us, Relaxed);
    }

    /// Records one latency, rounded down to a microsecond.
    #[inline]
    pub fn record_duration(&self, d: Duration) {
        self.record(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    }

    /// The counts so far. Taken bucket by bucket while others record, so a record that happens during the
    /// copy may be in the buckets and not yet in the sum (or the reverse): each bucket is exact, the sum is
    /// off by at most the records in flight.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: self.buckets.iter().map(|b| b.load(Relaxed)).collect(),
            sum_us: self.sum_us.load(Relaxed),
        }
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

/// The counts of a [`Histogram`] at one moment, or the difference of two such moments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistogramSnapshot {
    counts: Vec<u64>,
    sum_us: u64,
}

impl Default for HistogramSnapshot {
    fn default() -> Self {
        HistogramSnapshot { counts: vec![0; BUCKETS], sum_us: 0 }
    }
}

impl HistogramSnapshot {
    /// A snapshot holding `values`, for tests and for folding samples taken elsewhere.
    pub fn from_values(values: impl IntoIterator<Item = u64>) -> Self {
        let mut snap = HistogramSnapshot::default();
        for v in values {
            snap.counts[bucket_index(v)] += 1;
            snap.sum_us = snap.sum_us.saturating_add(v);
        }
        snap
    }

    /// Number of recorded values.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Sum of the recorded values, in microseconds.
    pub fn sum_us(&self) -> u64 {
        self.sum_us
    }

    /// Count in each bucket, indexed like [`bucket_index`].
    pub fn buckets(&self) -> &[u64] {
        &self.counts
    }

    /// What was recorded after `older` was taken (both from the same histogram).
    pub fn delta(&self, older: &HistogramSnapshot) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: self.counts.iter().zip(&older.counts).map(|(a, b)| a.saturating_sub(*b)).collect(),
            sum_us: self.sum_us.saturating_sub(older.sum_us),
        }
    }

    /// Adds another snapshot's counts to this one (several histograms seen as one).
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        self.counts.iter_mut().zip(&other.counts).for_each(|(a, b)| *a += b);
        self.sum_us = self.sum_us.saturating_add(other.sum_us);
    }

    /// Mean in microseconds, or `None` when nothing was recorded.
    pub fn mean_us(&self) -> Option<f64> {
        let n = self.count();
        (n > 0).then(|| self.sum_us as f64 / n as f64)
    }

    /// Number of recorded values below `bound_us`. A latency is recorded truncated to whole microseconds, so
    /// these are the latencies of at most `bound_us`: Prometheus' `le`. `bound_us` should be a bucket
    /// boundary (every power of two is); otherwise the count stops at the boundary below it.
    pub fn count_below(&self, bound_us: u64) -> u64 {
        self.counts[..bucket_index(bound_us).min(BUCKETS)].iter().sum()
    }

    /// The `q` quantile (0 < q <= 1) in microseconds, or `None` when nothing was recorded.
    ///
    /// Error bound: the estimate lies in the same bucket as the exact sample quantile (the value of rank
    /// `ceil(q * n)`), interpolated linearly between the bucket's smallest and largest integer. Values below
    /// 16 µs are exact; above, a bucket's width is at most 1/8 of its lower bound, so the estimate is within
    /// 12.5 % of the exact quantile (strictly less). Values past 2^36 µs read as 2^36.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).clamp(1, n);
        Some(self.values_at_ranks(n, std::iter::once(rank)).next().unwrap_or(0.0))
    }

    /// At most `max` values whose distribution is this histogram's: every value (as its estimate) when
    /// there are at most `max`, else the values at `max` evenly spaced ranks. For CloudWatch, which computes
    /// percentiles from raw values only.
    pub fn representative_values(&self, max: usize) -> Vec<f64> {
        let n = self.count();
        let m = (n as usize).min(max) as u64;
        if m == 0 {
            return Vec::new();
        }
        // Rank of the j-th value: the middle of the j-th of m equal slices of 1..=n.
        let ranks = (0..m).map(move |j| (((2 * j + 1) * n) / (2 * m) + 1).min(n));
        self.values_at_ranks(n, ranks).collect()
    }

    /// The estimate at each rank (1-based, non-decreasing), walking the buckets once.
    fn values_at_ranks(&self, n: u64, ranks: impl Iterator<Item = u64>) -> impl Iterator<Item = f64> {
        let mut bucket = 0usize;
        let mut below = 0u64; // values in buckets before `bucket`
        ranks.map(move |rank| {
            let rank = rank.clamp(1, n);
            while bucket + 1 < BUCKETS && below + self.counts[bucket] < rank {
                below += self.counts[bucket];
                bucket += 1;
            }
            let (lower, width) = bucket_bounds(bucket);
            let in_bucket = self.counts[bucket].max(1);
            let k = (rank - below).clamp(1, in_bucket);
            // The k-th of `in_bucket` values spread evenly over the bucket's integers.
            lower as f64 + (width - 1) as f64 * ((k as f64 - 0.5) / in_bucket as f64)
        })
    }
}

#[cfg(test)]
#[path = "histogram_tests.rs"]
mod tests;
