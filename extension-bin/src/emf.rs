//! pgmux's metrics as CloudWatch Embedded Metric Format lines on stdout, inside Lambda: Lambda sends an
//! extension's stdout to the function's log group, and CloudWatch turns each EMF line into metrics (no
//! agent, no extra permission).
//!
//! Every flush sends what happened since the previous one (gauges as they are now), so a flush that comes
//! late loses nothing: on classic Lambda, where the environment is frozen between invocations and a timer
//! may not run for minutes, the last flush at SHUTDOWN carries everything since. Its gauges are those of the
//! moment SHUTDOWN came, before the drain closed every connection. On Managed Instances, never frozen, a
//! timer flushes every `metrics_interval`.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pgmux_metrics::{DEFAULT_MAX_LATENCY_VALUES, Snapshot, cloudwatch_lines};
use pgmux_proxy::Admin;

/// Flushes of one process: what was sent last, and where to.
#[derive(Debug)]
pub struct Emf {
    admin: Admin,
    function_name: String,
    previous: Snapshot,
}

impl Emf {
    /// For the function Lambda names in `AWS_LAMBDA_FUNCTION_NAME`.
    pub fn new(admin: Admin) -> Emf {
        let function_name = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| "unknown".to_owned());
        Emf { admin, function_name, previous: Snapshot::default() }
    }

    /// Prints the lines of everything since the previous flush.
    pub fn flush(&mut self) {
        self.flush_snapshot(self.admin.metrics());
    }

    /// [`flush`](Self::flush), with the gauges as they were in `gauges` (before a drain): counters and
    /// latencies up to now.
    pub fn flush_with_gauges_of(&mut self, gauges: &Snapshot) {
        self.flush_snapshot(self.admin.metrics().with_gauges_of(gauges));
    }

    fn flush_snapshot(&mut self, now: Snapshot) {
        let config = self.admin.config();
        if !config.metrics_emf {
            return;
        }
        let timestamp_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let lines = cloudwatch_lines(
            &now,
            &self.previous,
            &config.metrics_namespace,
            &self.function_name,
            timestamp_ms,
            DEFAULT_MAX_LATENCY_VALUES,
        );
        match lines {
            Ok(lines) => {
                // One write per line under one lock: lines never interleave with each other.
                let mut out = std::io::stdout().lock();
                for line in lines {
                    let _ = out.write_all(line.as_bytes()).and_then(|()| out.write_all(b"\n"));
                }
                let _ = out.flush();
                self.previous = now;
            }
            Err(e) => tracing::warn!(error = %e, "could not write the CloudWatch metrics"),
        }
    }

    /// The pause between timed flushes (`None`: at SHUTDOWN only).
    pub fn interval(&self) -> Option<Duration> {
        Some(self.admin.config().metrics_interval).filter(|d| !d.is_zero())
    }
}
