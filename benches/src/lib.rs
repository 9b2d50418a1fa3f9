//! The pieces the demo (`pgmux-demo`) and the benchmark driver share: the Lambda-style [`workload`], the
//! pgmux child process ([`pooler`]), latency summaries ([`stats`]) and the side-by-side [`report`].
//!
//! Build in release mode for meaningful figures: the clients' own SCRAM key derivation (4096 rounds of
//! PBKDF2) is part of every connect, and is slow in a debug build.

pub mod pooler;
pub mod report;
pub mod stats;
pub mod workload;

pub use pooler::{PgmuxProcess, PgmuxSettings};
pub use report::Comparison;
pub use stats::Latency;
pub use workload::{Progress, ServerMonitor, Workload, WorkloadReport};
