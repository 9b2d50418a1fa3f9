//! The pieces the demo (`pgmux-demo`) and the benchmark driver (`pgmux-bench`) share: the Lambda-style
//! [`workload`], the pgmux child process ([`pooler`]), latency summaries ([`stats`]) and the demo's
//! side-by-side [`report`]; and the driver's own parts: PgBouncer ([`pgbouncer`]) and pgbench ([`pgbench`])
//! as children ([`child`]), the throwaway world they run in ([`lab`]), the workloads W1–W7 ([`suite`], with
//! [`idle_clients`] and [`startup`]), what is measured from `/proc` ([`os`]), the figures ([`results`]) and
//! docs/benchmarks.md ([`markdown`]).
//!
//! Build in release mode for meaningful figures: the demo's clients derive SCRAM keys (4096 rounds of
//! PBKDF2) on every connect, which is slow in a debug build; and the poolers under test should be optimised.

pub mod args;
pub mod child;
pub mod idle_clients;
pub mod interrupt;
pub mod lab;
pub mod logs;
pub mod machine;
pub mod markdown;
pub mod os;
pub mod pgbench;
pub mod pgbouncer;
pub mod plan;
pub mod pooler;
pub mod report;
pub mod results;
pub mod startup;
pub mod stats;
pub mod suite;
pub mod workload;

pub use pooler::{PgmuxProcess, PgmuxSettings};
pub use report::Comparison;
pub use stats::Latency;
pub use workload::{Progress, ServerMonitor, Workload, WorkloadReport};
