//! Bucket arithmetic and percentile estimation against distributions whose exact quantiles are known.

use super::*;

/// The exact sample quantile: the value of rank `ceil(q * n)` in sorted order.
fn exact(sorted: &[u64], q: f64) -> u64 {
    let n = sorted.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    sorted[rank - 1]
}

/// Checks p50, p90, p99, p99.9 of `values` against the bound the docs promise.
fn check_quantiles(name: &str, mut values: Vec<u64>) {
    let snap = HistogramSnapshot::from_values(values.iter().copied());
    values.sort_unstable();
    for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
        let want = exact(&values, q);
        let got = snap.quantile(q).unwrap();
        if want < 16 {
            assert_eq!(got, want as f64, "{name} q={q}: values below 16 µs are exact");
        } else {
            let err = (got - want as f64).abs() / want as f64;
            assert!(err < 0.125, "{name} q={q}: estimate {got} vs exact {want}, error {err:.4}");
        }
    }
}

/// A deterministic pseudo-random sequence (xorshift64*), so the test needs no crate and never flakes.
fn rng(seed: u64) -> impl FnMut() -> f64 {
    let mut s = seed;
    move || {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[test]
fn small_values_have_a_bucket_each() {
    for v in 0..16 {
        assert_eq!(bucket_index(v), v as usize);
        assert_eq!(bucket_bounds(v as usize), (v, 1));
    }
}

#[test]
fn every_value_falls_inside_its_bucket() {
    let mut probe: Vec<u64> = (0..5000).collect();
    probe.extend((4..40).flat_map(|p| [(1u64 << p) - 1, 1 << p, (1 << p) + 1, 3 << (p - 1)]));
    for v in probe {
        let i = bucket_index(v);
        let (lower, width) = bucket_bounds(i);
        if v < MAX_TRACKED_US {
            assert!(lower <= v && v < lower + width, "{v} in bucket {i} = [{lower}, +{width})");
            assert!(width == 1 || width * 8 <= lower, "bucket {i} wider than 1/8 of its bound");
        } else {
            assert_eq!(i, BUCKETS - 1);
        }
    }
}

#[test]
fn buckets_tile_the_range_without_gaps() {
    for i in 1..BUCKETS - 1 {
        let (prev_lower, prev_width) = bucket_bounds(i - 1);
        assert_eq!(bucket_bounds(i).0, prev_lower + prev_width, "bucket {i} starts where {} ends", i - 1);
    }
    assert_eq!(BUCKETS, 273);
    assert_eq!(bucket_bounds(BUCKETS - 1).0, MAX_TRACKED_US);
}

#[test]
fn prometheus_bounds_are_bucket_boundaries() {
    for b in PROMETHEUS_BOUNDS_US {
        assert_eq!(bucket_bounds(bucket_index(b)).0, b, "{b} µs starts a bucket");
    }
    assert_eq!((PROMETHEUS_BOUNDS_US[0], PROMETHEUS_BOUNDS_US[28]), (16, 1 << 32));
}

#[test]
fn count_below_a_power_of_two_is_exact() {
    let snap = HistogramSnapshot::from_values([1, 15, 16, 17, 31, 32, 1000, 1023, 1024, 1025]);
    assert_eq!(snap.count_below(16), 2);
    assert_eq!(snap.count_below(32), 5);
    assert_eq!(snap.count_below(1024), 8);
    assert_eq!(snap.count_below(1 << 32), 10);
}

#[test]
fn recording_counts_and_sums() {
    let h = Histogram::new();
    h.record(3);
    h.record(1_000);
    h.record_duration(Duration::from_millis(2));
    h.record(u64::MAX / 2);
    let s = h.snapshot();
    assert_eq!(s.count(), 4);
    assert_eq!(s.sum_us(), 3 + 1_000 + 2_000 + u64::MAX / 2);
    assert_eq!(s.buckets()[BUCKETS - 1], 1, "a huge value lands in the last bucket");
    assert_eq!(s.quantile(1.0), Some(MAX_TRACKED_US as f64));
}

#[test]
fn empty_has_no_quantile_and_no_mean() {
    let s = HistogramSnapshot::default();
    assert_eq!(s.quantile(0.5), None);
    assert_eq!(s.mean_us(), None);
    assert!(s.representative_values(100).is_empty());
}

#[test]
fn a_constant_distribution_reads_back_within_the_bound() {
    check_quantiles("constant 7", vec![7; 1000]);
    check_quantiles("constant 5000", vec![5000; 1000]);
}

#[test]
fn uniform_distribution() {
    check_quantiles("uniform 1..=100000", (1..=100_000).collect());
    let mut r = rng(1);
    check_quantiles("uniform random 0..10ms", (0..50_000).map(|_| (r() * 10_000.0) as u64).collect());
}

#[test]
fn exponential_distribution() {
    // Mean 500 µs, like query times on a quiet database.
    let mut r = rng(2);
    check_quantiles("exponential", (0..100_000).map(|_| (-500.0 * (1.0 - r()).ln()) as u64).collect());
}

#[test]
fn log_normal_distribution_with_a_long_tail() {
    // Box-Muller; median e^7 ≈ 1.1 ms, sigma 1.5: the tail reaches seconds.
    let mut r = rng(3);
    let values = (0..100_000)
        .map(|_| {
            let z = (-2.0 * (1.0 - r()).ln()).sqrt() * (2.0 * std::f64::consts::PI * r()).cos();
            (7.0 + 1.5 * z).exp() as u64
        })
        .collect();
    check_quantiles("log-normal", values);
}

#[test]
fn bimodal_distribution() {
    // 95 % fast (around 80 µs), 5 % slow (around 40 ms): p99 must land in the slow mode.
    let mut r = rng(4);
    let values: Vec<u64> = (0..100_000)
        .map(|_| if r() < 0.95 { 60 + (r() * 40.0) as u64 } else { 30_000 + (r() * 20_000.0) as u64 })
        .collect();
    check_quantiles("bimodal", values.clone());
    let snap = HistogramSnapshot::from_values(values);
    assert!(snap.quantile(0.99).unwrap() > 25_000.0);
    assert!(snap.quantile(0.5).unwrap() < 110.0);
}

#[test]
fn delta_keeps_only_what_came_after() {
    let h = Histogram::new();
    (0..100).for_each(|_| h.record(10));
    let before = h.snapshot();
    (0..50).for_each(|_| h.record(5_000));
    let d = h.snapshot().delta(&before);
    assert_eq!(d.count(), 50);
    assert_eq!(d.sum_us(), 250_000);
    let p50 = d.quantile(0.5).unwrap();
    assert!((4_375.0..5_625.0).contains(&p50), "{p50}");
}

#[test]
fn merge_adds_counts() {
    let mut a = HistogramSnapshot::from_values([1, 2, 3]);
    a.merge(&HistogramSnapshot::from_values([100]));
    assert_eq!((a.count(), a.sum_us()), (4, 106));
}

#[test]
fn representative_values_keep_every_value_when_few() {
    let snap = HistogramSnapshot::from_values([3, 3, 9, 200]);
    let v = snap.representative_values(100);
    assert_eq!(v.len(), 4);
    assert_eq!(&v[..3], &[3.0, 3.0, 9.0]);
    assert!((200.0 * 0.875..200.0 * 1.125).contains(&v[3]));
}

#[test]
fn representative_values_sample_evenly_when_many() {
    let values: Vec<u64> = (1..=10_000).collect();
    let snap = HistogramSnapshot::from_values(values.iter().copied());
    let v = snap.representative_values(100);
    assert_eq!(v.len(), 100);
    assert!(v.windows(2).all(|w| w[0] <= w[1]), "non-decreasing");
    // The median of the sample is the median of the data, within the bucket bound.
    let median = (v[49] + v[50]) / 2.0;
    assert!((median - 5_000.0).abs() / 5_000.0 < 0.125, "{median}");
    assert!(v[0] < 150.0 && v[99] > 9_000.0, "{} .. {}", v[0], v[99]);
}
