//! The scenarios and their fault injectors: what is done to the nodes, the network or the host name at the
//! fault (time 0), and when the writer became reachable again, so that recovery can be timed from there.
//!
//! Toxiproxy stands in for the network, so some faults are approximations, said here once:
//! - A black hole is Toxiproxy's `timeout` toxic on both directions: nothing passes and nothing is closed.
//!   Toxiproxy's own kernel still accepts connections and acknowledges data and keepalives, so this is a
//!   server that "accepts packets but answers nothing"; TCP keepalive and `TCP_USER_TIMEOUT` on the
//!   pooler's socket cannot see it, only an application-level deadline can.
//! - Loss: Toxiproxy works above TCP and cannot drop a segment; what a lossy link does to a connection is
//!   stall it while TCP retransmits. `lossy` is 100 ms ± 20 ms each way on every connection plus a further
//!   400 ms (a lost segment's retransmission timeout, twice) on 2 % of connections, Toxiproxy drawing its
//!   `toxicity` once per connection.
//! - A node that is down answers through Toxiproxy as an accepted connection closed at once, not a refusal.

use std::time::Duration;

use pgmux_testkit::toxiproxy::{Stream, Toxic, ToxicKind};
use serde::Serialize;

use crate::clock::Clock;
use crate::topology::{PROXY_A_NAME, PROXY_B, PROXY_B_NAME, Topology, admin_sql, block_on};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    TerminateIdle,
    TerminateActive,
    RestartFast,
    RestartImmediate,
    Failover,
    Demote,
    ReadOnly,
    Sigstop,
    BlackHole,
    BlackHoleFailover,
    Latency,
    Reset,
    SlowLink,
    Lossy,
    ClientKill,
    ReaderBlackHole,
}

/// Every scenario of the long form. `reader-black-hole` is the long form's alone: it adds a reader route and
/// clients of its own, and measures the reads, which no goal of the short form judges.
pub const ALL: [Scenario; 16] = [
    Scenario::TerminateIdle,
    Scenario::TerminateActive,
    Scenario::RestartFast,
    Scenario::RestartImmediate,
    Scenario::Failover,
    Scenario::Demote,
    Scenario::ReadOnly,
    Scenario::Sigstop,
    Scenario::BlackHole,
    Scenario::BlackHoleFailover,
    Scenario::Latency,
    Scenario::Reset,
    Scenario::SlowLink,
    Scenario::Lossy,
    Scenario::ClientKill,
    Scenario::ReaderBlackHole,
];

/// The short form's scenarios: what the enforced goals need (idle, in-flight and first-write goals across a
/// termination, a restart and a failover; no write to a demoted writer; the ledger; a killed client's locks)
/// in about two and a half minutes.
pub const QUICK: [Scenario; 6] = [
    Scenario::TerminateIdle,
    Scenario::TerminateActive,
    Scenario::RestartFast,
    Scenario::Failover,
    Scenario::Demote,
    Scenario::ClientKill,
];

impl Scenario {
    pub fn name(self) -> String {
        serde_json::to_value(self).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
    }

    pub fn parse(name: &str) -> Result<Scenario, String> {
        ALL.into_iter().find(|s| s.name() == name).ok_or_else(|| {
            let names: Vec<String> = ALL.iter().map(|s| s.name()).collect();
            format!("unknown scenario {name:?} (one of {})", names.join(", "))
        })
    }

    pub fn describe(self) -> &'static str {
        match self {
            Scenario::TerminateIdle => "pg_terminate_backend of every idle pooled backend on A",
            Scenario::TerminateActive => "pg_terminate_backend of every active / idle-in-transaction backend on A",
            Scenario::RestartFast => "pg_ctl restart -m fast of A",
            Scenario::RestartImmediate => "pg_ctl restart -m immediate of A (crash recovery)",
            Scenario::Failover => "A stopped (-m fast), B promoted, the writer name flipped to B; A left down",
            Scenario::Demote => {
                "A stopped, B promoted, A back as a standby of B, the name flipped ≥ 2 s after the fault"
            }
            Scenario::ReadOnly => {
                "A read-only (default_transaction_read_only, sessions terminated), B promoted, name flipped ≥ 2 s after; A stays up"
            }
            Scenario::Sigstop => "A's processes SIGSTOPped for the hold time, then SIGCONT",
            Scenario::BlackHole => "A's proxy black-holed (timeout toxic) for the hold time",
            Scenario::BlackHoleFailover => "A's proxy black-holed for good, B promoted and the name flipped 1 s later",
            Scenario::Latency => "50 ms each way on A's proxy for the hold time",
            Scenario::Reset => "every connection to A reset (reset_peer) for 0.5 s",
            Scenario::SlowLink => "A's proxy at 16 KB/s server to client, +10 ms client to server, for the hold time",
            Scenario::Lossy => "100 ms ± 20 ms each way, +400 ms stalls on 2 % of connections, for the hold time",
            Scenario::ClientKill => "a client holding a row lock mid-query is killed (its socket closed)",
            Scenario::ReaderBlackHole => {
                "B's proxy black-holed for the hold time while reader clients read through a route whose reader is B"
            }
        }
    }

    /// The node that is the writer when the scenario ends (where the ledger is checked).
    pub fn final_writer_is_b(self) -> bool {
        matches!(self, Scenario::Failover | Scenario::Demote | Scenario::ReadOnly | Scenario::BlackHoleFailover)
    }

    /// Whether A ends up up but not writable (its connections are watched until none is left).
    pub fn demotes_a(self) -> bool {
        matches!(self, Scenario::Demote | Scenario::ReadOnly)
    }

    /// Whether reader clients read through a reader route on B (B is the reader, the writer is the fallback).
    pub fn reads(self) -> bool {
        self == Scenario::ReaderBlackHole
    }

    /// Whether the server hangs rather than fails (detection time is measured).
    pub fn hangs(self) -> bool {
        matches!(self, Scenario::Sigstop | Scenario::BlackHole | Scenario::BlackHoleFailover)
    }
}

/// Scenario timings the driver chooses.
#[derive(Clone, Debug, Serialize)]
pub struct FaultTiming {
    /// How long hangs, black holes and network toxics last.
    pub hold_ms: u64,
    /// Failover scenarios: time from the fault to the flip of the writer name.
    pub flip_delay_ms: u64,
}

/// When things happened (ms relative to the fault) and what went wrong doing them.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FaultEvents {
    pub fault_ms: f64,
    /// From when a writer could be reached under the name again (restart done, name flipped, hang healed).
    pub writer_reachable_ms: Option<f64>,
    /// The writer name moved.
    pub flip_ms: Option<f64>,
    /// A's new role (standby, or read-only) became visible to new connections.
    pub role_visible_ms: Option<f64>,
    /// A hang or toxic was lifted.
    pub healed_ms: Option<f64>,
    pub notes: Vec<String>,
    pub error: Option<String>,
}

/// Inject `scenario`'s fault at time 0 on this (non-async) thread; returns when it is fully done.
pub fn inject(scenario: Scenario, topo: &mut Topology, timing: &FaultTiming, clock: Clock) -> FaultEvents {
    let mut events = FaultEvents::default();
    clock.sleep_until_blocking(0.0);
    events.fault_ms = clock.now_ms();
    if let Err(e) = run_fault(scenario, topo, timing, clock, &mut events) {
        events.error = Some(e);
    }
    events
}

fn run_fault(
    scenario: Scenario,
    topo: &mut Topology,
    timing: &FaultTiming,
    clock: Clock,
    ev: &mut FaultEvents,
) -> Result<(), String> {
    match scenario {
        Scenario::TerminateIdle | Scenario::TerminateActive => {
            let states = if scenario == Scenario::TerminateIdle { "'idle'" } else { "'active', 'idle in transaction'" };
            let n = terminate(topo, states)?;
            ev.notes.push(format!("{n} backends terminated"));
            ev.writer_reachable_ms = Some(ev.fault_ms);
        }
        Scenario::RestartFast | Scenario::RestartImmediate => {
            let mode = if scenario == Scenario::RestartFast { "fast" } else { "immediate" };
            topo.a.restart(mode)?;
            ev.writer_reachable_ms = Some(clock.now_ms());
        }
        Scenario::Failover | Scenario::Demote | Scenario::ReadOnly | Scenario::BlackHoleFailover => {
            move_writer(scenario, topo, timing, clock, ev)?;
        }
        Scenario::Sigstop | Scenario::BlackHole => hang(scenario, topo, timing, clock, ev)?,
        Scenario::Latency | Scenario::SlowLink | Scenario::Lossy | Scenario::Reset => {
            network(scenario, topo, timing, clock, ev)?;
        }
        Scenario::ClientKill => {
            // The workload kills its lock holder at time 0; nothing happens to the servers.
            ev.writer_reachable_ms = Some(ev.fault_ms);
        }
        Scenario::ReaderBlackHole => {
            // The writer is untouched; the reader goes silent for the hold time, then comes back.
            ev.writer_reachable_ms = Some(ev.fault_ms);
            black_hole_on(topo, PROXY_B_NAME)?;
            clock.sleep_until_blocking(timing.hold_ms as f64);
            remove_on(topo, PROXY_B_NAME, &["hole-up", "hole-down"])?;
            ev.healed_ms = Some(clock.now_ms());
        }
    }
    Ok(())
}

/// The writer moves to B: failover, demotion, a read-only switch, or a hard fence.
fn move_writer(
    scenario: Scenario,
    topo: &mut Topology,
    timing: &FaultTiming,
    clock: Clock,
    ev: &mut FaultEvents,
) -> Result<(), String> {
    match scenario {
        Scenario::Failover => {
            topo.a.stop("fast")?;
            topo.b.promote()?;
            flip(topo, timing, clock, ev)
        }
        Scenario::Demote => {
            topo.a.stop("fast")?;
            topo.b.promote()?;
            topo.a.make_standby_of(&topo.b)?;
            topo.a.start()?;
            ev.role_visible_ms = Some(clock.now_ms());
            flip(topo, &at_least(timing, 2000), clock, ev)
        }
        Scenario::ReadOnly => {
            // Two queries: ALTER SYSTEM refuses the implicit transaction of a multi-statement one.
            let conninfo = topo.a.admin_conninfo();
            block_on(admin_sql(&conninfo, "ALTER SYSTEM SET default_transaction_read_only = on"))?;
            block_on(admin_sql(&conninfo, "SELECT pg_reload_conf()"))?;
            let n = terminate(topo, "'idle', 'active', 'idle in transaction'")?;
            ev.role_visible_ms = Some(clock.now_ms());
            ev.notes.push(format!("{n} backends terminated on A"));
            block_on(topo.wait_caught_up())?;
            topo.b.promote()?;
            flip(topo, &at_least(timing, 2000), clock, ev)
        }
        _ => {
            black_hole(topo)?;
            block_on(topo.wait_caught_up())?;
            clock.sleep_until_blocking(1000.0);
            topo.b.promote()?;
            flip(topo, &at_least(timing, 1000), clock, ev)
        }
    }
}

/// A hangs for the hold time: every process stopped, or its proxy black-holed.
fn hang(
    scenario: Scenario,
    topo: &Topology,
    timing: &FaultTiming,
    clock: Clock,
    ev: &mut FaultEvents,
) -> Result<(), String> {
    if scenario == Scenario::Sigstop {
        let n = topo.a.signal_all(libc::SIGSTOP);
        ev.notes.push(format!("{n} processes stopped"));
        clock.sleep_until_blocking(timing.hold_ms as f64);
        topo.a.signal_all(libc::SIGCONT);
    } else {
        black_hole(topo)?;
        clock.sleep_until_blocking(timing.hold_ms as f64);
        remove(topo, &["hole-up", "hole-down"])?;
    }
    ev.healed_ms = Some(clock.now_ms());
    ev.writer_reachable_ms = ev.healed_ms;
    Ok(())
}

/// A bad network in front of A: resets for half a second, or latency / a slow link / loss for the hold time.
fn network(
    scenario: Scenario,
    topo: &Topology,
    timing: &FaultTiming,
    clock: Clock,
    ev: &mut FaultEvents,
) -> Result<(), String> {
    if scenario == Scenario::Reset {
        let rst = Toxic::new("rst", ToxicKind::ResetPeer { timeout_ms: 0 }).on(Stream::Upstream);
        topo.toxi.add_toxic(PROXY_A_NAME, &rst)?;
        std::thread::sleep(Duration::from_millis(500));
        remove(topo, &["rst"])?;
        ev.healed_ms = Some(clock.now_ms());
        ev.writer_reachable_ms = ev.healed_ms;
        return Ok(());
    }
    let names = network_toxics(scenario, topo)?;
    ev.writer_reachable_ms = Some(ev.fault_ms);
    clock.sleep_until_blocking(timing.hold_ms as f64);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    remove(topo, &names)?;
    ev.healed_ms = Some(clock.now_ms());
    Ok(())
}

/// `timing` with a flip delay of at least `ms`: a demoted node must be visible under the old name a while.
fn at_least(timing: &FaultTiming, ms: u64) -> FaultTiming {
    FaultTiming { flip_delay_ms: timing.flip_delay_ms.max(ms), ..timing.clone() }
}

/// Wait for the flip delay, then point the writer name at B.
fn flip(topo: &Topology, timing: &FaultTiming, clock: Clock, ev: &mut FaultEvents) -> Result<(), String> {
    clock.sleep_until_blocking(timing.flip_delay_ms as f64);
    topo.hosts.point_at(PROXY_B)?;
    let now = clock.now_ms();
    ev.flip_ms = Some(now);
    ev.writer_reachable_ms = Some(now);
    Ok(())
}

/// Terminate the app role's backends on A in the given states; how many.
fn terminate(topo: &Topology, states: &str) -> Result<usize, String> {
    let sql = format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE usename = '{}' AND state IN ({states}) AND pid <> pg_backend_pid()",
        pgmux_testkit::APP_USER.user
    );
    let rows = block_on(admin_sql(&topo.a.admin_conninfo(), &sql))?;
    Ok(rows.iter().filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_))).count())
}

fn black_hole(topo: &Topology) -> Result<(), String> {
    black_hole_on(topo, PROXY_A_NAME)
}

fn black_hole_on(topo: &Topology, proxy: &str) -> Result<(), String> {
    topo.toxi.add_toxic(proxy, &Toxic::black_hole("hole-up").on(Stream::Upstream))?;
    topo.toxi.add_toxic(proxy, &Toxic::black_hole("hole-down").on(Stream::Downstream))?;
    Ok(())
}

fn network_toxics(scenario: Scenario, topo: &Topology) -> Result<Vec<String>, String> {
    let toxics = match scenario {
        Scenario::Latency => vec![
            Toxic::latency("lat-up", 50, 0).on(Stream::Upstream),
            Toxic::latency("lat-down", 50, 0).on(Stream::Downstream),
        ],
        Scenario::SlowLink => vec![
            Toxic::new("slow-down", ToxicKind::Bandwidth { rate_kb: 16 }).on(Stream::Downstream),
            Toxic::latency("slow-up", 10, 0).on(Stream::Upstream),
        ],
        _ => vec![
            Toxic::latency("wan-up", 100, 20).on(Stream::Upstream),
            Toxic::latency("wan-down", 100, 20).on(Stream::Downstream),
            Toxic::latency("stall-up", 400, 0).on(Stream::Upstream).with_toxicity(0.02),
            Toxic::latency("stall-down", 400, 0).on(Stream::Downstream).with_toxicity(0.02),
        ],
    };
    for toxic in &toxics {
        topo.toxi.add_toxic(PROXY_A_NAME, toxic)?;
    }
    Ok(toxics.into_iter().map(|t| t.name).collect())
}

fn remove(topo: &Topology, names: &[&str]) -> Result<(), String> {
    remove_on(topo, PROXY_A_NAME, names)
}

fn remove_on(topo: &Topology, proxy: &str, names: &[&str]) -> Result<(), String> {
    for name in names {
        topo.toxi.remove_toxic(proxy, name)?;
    }
    Ok(())
}
