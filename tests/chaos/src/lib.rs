//! The chaos suite of issue 13: a primary and a streaming standby in a network namespace of their own, a host
//! name that moves between them, faults (restarts, failover, demotion, terminated backends, hangs, and
//! network faults through Toxiproxy), a workload of idle, busy and in-flight clients with a ledger of
//! acknowledged writes, and a report per scenario for pgmux and PgBouncer 1.18 under the same faults.
//!
//! Two forms: the `pgmux-chaos` binary (`make chaos`: every scenario, N runs, the soak; writes
//! `docs/resilience.md`'s generated section), and `cargo test -p pgmux-chaos` (`make test`: a few
//! scenarios, asserting the goals in [`goals::GOALS`] marked enforced).

pub mod clock;
pub mod driver;
pub mod faults;
pub mod goals;
pub mod hosts;
pub mod isolate;
pub mod node;
pub mod publish;
pub mod reads;
pub mod report;
pub mod runner;
pub mod soak;
pub mod target;
pub mod topology;
pub mod workload;

/// Every namespace, `/etc/netns` directory and scratch directory of a run is `pgmux-chaos-<pid of the outer
/// process>…`, so that concurrent runs do not collide and a run can sweep what a killed one left.
pub const NAMING: pgmux_testkit::netns::Naming =
    pgmux_testkit::netns::Naming { prefix: "pgmux-chaos-", suffix: "", veth: None };
