//! Latency summaries: the handful of figures a report shows, from raw samples.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// p50 / p99 / max of a set of samples, in milliseconds (nearest-rank percentiles; `None` without samples).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub count: usize,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

impl Latency {
    pub fn from_samples(mut samples: Vec<Duration>) -> Latency {
        samples.sort_unstable();
        let ms = |d: &Duration| d.as_secs_f64() * 1e3;
        Latency {
            count: samples.len(),
            p50_ms: percentile(&samples, 0.50).map(ms),
            p99_ms: percentile(&samples, 0.99).map(ms),
            max_ms: samples.last().map(ms),
        }
    }

    /// `"1.2 / 3.4"`, or `"-"` without samples.
    pub fn p50_p99(&self) -> String {
        match (self.p50_ms, self.p99_ms) {
            (Some(p50), Some(p99)) => format!("{p50:.1} / {p99:.1}"),
            _ => "-".to_owned(),
        }
    }
}

/// Nearest-rank percentile of sorted samples: the smallest sample with at least `q` of them at or below it.
fn percentile(sorted: &[Duration], q: f64) -> Option<&Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|&v| Duration::from_millis(v)).collect()
    }

    #[test]
    fn nearest_rank() {
        let l = Latency::from_samples(ms(&[5, 1, 4, 2, 3]));
        assert_eq!((l.count, l.p50_ms, l.p99_ms, l.max_ms), (5, Some(3.0), Some(5.0), Some(5.0)));
        let hundred: Vec<u64> = (1..=100).collect();
        let l = Latency::from_samples(ms(&hundred));
        assert_eq!((l.p50_ms, l.p99_ms), (Some(50.0), Some(99.0)));
        assert_eq!(l.p50_p99(), "50.0 / 99.0");
    }

    #[test]
    fn no_samples() {
        let l = Latency::from_samples(Vec::new());
        assert_eq!(l, Latency::default());
        assert_eq!(l.p50_p99(), "-");
    }
}
