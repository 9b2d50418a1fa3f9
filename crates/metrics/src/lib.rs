//! pgmux's metrics: the primitives the data path records into, and the formats operators read them in.
//!
//! Recording is lock-free and allocation-free: [`Counter`] and [`Gauge`] are one relaxed atomic,
//! [`CounterFamily`] / [`GaugeFamily`] index an array with an enum ([`label_enum!`]), and [`Histogram`]
//! records a latency with a bucket index computed from bits and two relaxed `fetch_add`s. Everything else
//! (snapshots, percentiles, the last-minute [`Window`], Prometheus / OpenMetrics text, CloudWatch EMF lines)
//! works on snapshots, off the data path. No I/O here: callers serve the text and print the lines.

mod catalog;
mod cloudwatch;
mod emf;
mod expo;
mod family;
mod histogram;
mod readers;
mod scalar;
mod window;

pub use catalog::{
    ClientState, DESCS, Latency, LatencyRow, LoginResult, Metrics, PinReason, ReaderFallbackOutcome, ReloadResult,
    ServerCloseReason, ServerState, Snapshot, TooManyCause, encode_all, render, value_of,
};
pub use cloudwatch::{DEFAULT_MAX_LATENCY_VALUES, RDS_PROXY_NAMES, cloudwatch_lines, cloudwatch_metrics};
pub use emf::{
    EmfError, EmfMetric, EmfTarget, EmfUnit, EmfValue, MAX_DIMENSIONS, MAX_METRICS_PER_DOCUMENT,
    MAX_VALUES_PER_DOCUMENT, MAX_VALUES_PER_METRIC, emf_lines,
};
pub use expo::{Desc, Encoder, Format, Labels, NameError, NameRule, Unit};
pub use family::{CounterFamily, GaugeFamily, Label};
pub use histogram::{
    BUCKETS, Histogram, HistogramSnapshot, MAX_TRACKED_US, PROMETHEUS_BOUNDS_US, bucket_bounds, bucket_index,
};
pub use readers::{READER_DESCS, ReaderSample, encode_readers};
pub use scalar::{Counter, Gauge};
pub use window::{Window, WindowView};
