//! The pieces the demo (`pgmux-demo`) and the benchmark driver (`pgmux-bench`) share: the Lambda-style
//! [`workload`], the pgmux child process ([`pooler`]), latency summaries ([`stats`]), where clients connect
//! ([`endpoint`]) and the demo's side-by-side [`report`]; and the driver's own parts: PgBouncer
//! ([`pgbouncer`]) and pgbench ([`pgbench`]) as children (through `pgmux_testkit::process`), both poolers of
//! a setting ([`poolers`]), the throwaway world they run in ([`lab`]) and the network lab beside it
//! ([`netlab`]: an application host in a namespace of its own ([`app_host`], on `pgmux_testkit::netns`),
//! certificates ([`pki`]), TLS for the driver's own clients ([`pgtls`]), and those clients as jobs ([`jobs`])
//! for `pgmux-bench-client`); the workloads ([`suite`], [`suite_net`], with [`idle_clients`] and
//! [`startup`]), what is measured from `/proc` (`pgmux_testkit::procfs`), the figures ([`metric`], [`results`]) and
//! docs/benchmarks.md ([`markdown`]).
//!
//! Build in release mode for meaningful figures: the demo's clients derive SCRAM keys (4096 rounds of
//! PBKDF2) on every connect, which is slow in a debug build; and the poolers under test should be optimised.

pub mod app_host;
pub mod args;
pub mod endpoint;
pub mod idle_clients;
pub mod interrupt;
pub mod jobs;
pub mod lab;
pub mod logs;
pub mod machine;
pub mod markdown;
pub mod metric;
pub mod netlab;
pub mod pgbench;
pub mod pgbouncer;
pub mod pgtls;
pub mod pki;
pub mod plan;
pub mod pooler;
pub mod poolers;
pub mod report;
pub mod results;
pub mod startup;
pub mod stats;
pub mod suite;
pub mod suite_net;
pub mod workload;

pub use pooler::{PgmuxProcess, PgmuxSettings};
pub use report::Comparison;
pub use stats::Latency;
pub use workload::{Progress, ServerMonitor, Workload, WorkloadReport};
