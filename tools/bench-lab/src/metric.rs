//! The rows of the results tables: every figure the driver measures, which workload measures it, in which
//! of the three settings (loopback, Unix socket, network lab), in what unit, and for which targets.

use serde::Serialize;

use crate::results::{Target, thousands};

/// Where a workload runs: the table its rows go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum World {
    /// Everything on one machine over loopback TCP (the reproducible table).
    Loopback,
    /// As loopback, with the clients on the poolers' (and PostgreSQL's) Unix sockets.
    Unix,
    /// The network lab: PostgreSQL behind a delayed link, TLS and SCRAM, clients and poolers on the
    /// application host.
    Network,
}

impl World {
    pub const ALL: [World; 3] = [World::Loopback, World::Unix, World::Network];

    pub fn title(self) -> &'static str {
        match self {
            World::Loopback => "Loopback: everything on one machine, TCP on 127.0.0.1",
            World::Unix => "Unix-domain sockets between the clients and the pooler",
            World::Network => "Network: the database across a delayed link, with TLS and SCRAM",
        }
    }
}

/// How a figure is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    /// Whole numbers with thousands separators (tps, counts).
    Count,
    /// Milliseconds: two decimals below 10, one above.
    Millis,
    /// One decimal (µs, MiB, KiB).
    Tenths,
}

/// What the tables need to know of a row.
struct Info {
    label: &'static str,
    step: &'static str,
    unit: Unit,
    /// A figure of the pooler process itself (none for direct).
    pooler_only: bool,
}

const fn info(label: &'static str, step: &'static str, unit: Unit, pooler_only: bool) -> Info {
    Info { label, step, unit, pooler_only }
}

macro_rules! metrics {
    ($( $name:ident => ($label:literal, $step:literal, $unit:ident, $pooler_only:literal), )*) => {
        /// One row of the results tables.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        pub enum Metric { $( $name, )* }

        impl Metric {
            /// Every row, in table order.
            pub const ALL: &'static [Metric] = &[ $( Metric::$name, )* ];

            fn info(self) -> Info {
                match self { $( Metric::$name => info($label, $step, Unit::$unit, $pooler_only), )* }
            }
        }
    };
}

metrics! {
    ReconnectTps => ("W1 reconnect per transaction, `-S -C` (tps)", "W1", Count, false),
    SimpleTps => ("W2 select-only, `-M simple` (tps)", "W2", Count, false),
    ExtendedTps => ("W3 select-only, `-M extended` (tps)", "W3", Count, false),
    PreparedTps => ("W4 select-only, `-M prepared` (tps)", "W4", Count, false),
    BurstServerPeak => ("W5 Lambda burst: peak server connections", "W5", Count, false),
    BurstQueryP50 => ("W5 Lambda burst: query p50 (ms)", "W5", Millis, false),
    BurstQueryP99 => ("W5 Lambda burst: query p99 (ms)", "W5", Millis, false),
    BurstErrors => ("W5 Lambda burst: failed invocations", "W5", Count, false),
    BurstCpu => ("W5 Lambda burst: pooler CPU per 1,000 invocations (ms)", "W5", Tenths, true),
    IdleRssBefore => ("W6 RSS before the clients (MiB)", "W6", Tenths, true),
    IdleRssWith => ("W6 RSS with the idle clients (MiB)", "W6", Tenths, true),
    IdlePerClient => ("W6 memory per idle client (KiB)", "W6", Tenths, true),
    IdleCpu => ("W6 pooler CPU per second with the idle clients (µs)", "W6", Count, true),
    StartupMs => ("W7 start-up to first accepted connection (ms)", "W7", Millis, true),
    CpuSimple => ("CPU per transaction in W2 (µs)", "W2", Tenths, true),
    CpuExtended => ("CPU per transaction in W3 (µs)", "W3", Tenths, true),
    MachineCpuSimple => ("whole machine's CPU per transaction in W2 (µs)", "W2", Tenths, false),
    MachineCpuExtended => ("whole machine's CPU per transaction in W3 (µs)", "W3", Tenths, false),
    ServersSimple => ("server connections held at the end of W2", "W2", Count, true),
    EagerSimpleTps => ("W2 with pgmux's pool grown at once, `pool_grow_after = 0` (tps)", "W2g", Count, true),
    EagerCpuSimple => ("CPU per transaction in W2, pool grown at once (µs)", "W2g", Tenths, true),
    EagerServersSimple => ("server connections held at the end of W2, pool grown at once", "W2g", Count, true),
    EagerExtendedTps => ("W3 with pgmux's pool grown at once (tps)", "W3g", Count, true),
    EagerCpuExtended => ("CPU per transaction in W3, pool grown at once (µs)", "W3g", Tenths, true),
    UnixSimpleTps => ("W2 over Unix sockets, `-M simple` (tps)", "W2u", Count, false),
    UnixExtendedTps => ("W3 over Unix sockets, `-M extended` (tps)", "W3u", Count, false),
    UnixCpuSimple => ("CPU per transaction in W2 over Unix sockets (µs)", "W2u", Tenths, true),
    UnixCpuExtended => ("CPU per transaction in W3 over Unix sockets (µs)", "W3u", Tenths, true),
    UnixMachineCpuSimple => ("whole machine's CPU per transaction in W2 over Unix sockets (µs)", "W2u", Tenths, false),
    UnixMachineCpuExtended =>
        ("whole machine's CPU per transaction in W3 over Unix sockets (µs)", "W3u", Tenths, false),
    UnixEagerSimpleTps => ("W2 over Unix sockets with pgmux's pool grown at once (tps)", "W2gu", Count, true),
    UnixEagerCpuSimple => ("CPU per transaction in W2 over Unix sockets, pool grown at once (µs)", "W2gu", Tenths, true),
    UnixEagerExtendedTps => ("W3 over Unix sockets with pgmux's pool grown at once (tps)", "W3gu", Count, true),
    UnixEagerCpuExtended =>
        ("CPU per transaction in W3 over Unix sockets, pool grown at once (µs)", "W3gu", Tenths, true),
    NetReconnectTps => ("W1 reconnect per transaction, `-S -C` (tps)", "W1n", Count, false),
    NetReconnectLatency => ("W1 latency per transaction, connect included (ms)", "W1n", Millis, false),
    NetReconnectCpu => ("W1 pooler CPU per transaction (µs)", "W1n", Tenths, true),
    NetSimpleTps => ("W2 select-only, `-M simple` (tps)", "W2n", Count, false),
    NetSimpleLatency => ("W2 latency per transaction (ms)", "W2n", Millis, false),
    NetSimpleCpu => ("W2 pooler CPU per transaction (µs)", "W2n", Tenths, true),
    NetServersSimple => ("server connections held at the end of W2", "W2n", Count, true),
    NetExtendedTps => ("W3 select-only, `-M extended` (tps)", "W3n", Count, false),
    NetExtendedLatency => ("W3 latency per transaction (ms)", "W3n", Millis, false),
    NetExtendedCpu => ("W3 pooler CPU per transaction (µs)", "W3n", Tenths, true),
    NetUnixSimpleTps => ("W2 over the pooler's Unix socket, `-M simple` (tps)", "W2un", Count, true),
    NetUnixSimpleLatency => ("W2 over the pooler's Unix socket: latency per transaction (ms)", "W2un", Millis, true),
    NetUnixSimpleCpu => ("W2 over the pooler's Unix socket: pooler CPU per transaction (µs)", "W2un", Tenths, true),
    NetUnixExtendedTps => ("W3 over the pooler's Unix socket, `-M extended` (tps)", "W3un", Count, true),
    NetUnixExtendedLatency =>
        ("W3 over the pooler's Unix socket: latency per transaction (ms)", "W3un", Millis, true),
    NetUnixExtendedCpu =>
        ("W3 over the pooler's Unix socket: pooler CPU per transaction (µs)", "W3un", Tenths, true),
    NetFewTps => ("W2 with as many clients as the pool's connections, `-M simple` (tps)", "W2fn", Count, false),
    NetFewLatency => ("W2 with as many clients as the pool's connections: latency per transaction (ms)", "W2fn", Millis, false),
    NetFewServers => ("server connections held at the end of W2 with as many clients as connections", "W2fn", Count, true),
    NetBurstServerPeak => ("W5 Lambda burst: peak server connections", "W5n", Count, false),
    NetBurstQueryP50 => ("W5 Lambda burst: query p50 (ms)", "W5n", Millis, false),
    NetBurstQueryP99 => ("W5 Lambda burst: query p99 (ms)", "W5n", Millis, false),
    NetBurstErrors => ("W5 Lambda burst: failed invocations", "W5n", Count, false),
    NetBurstCpu => ("W5 Lambda burst: pooler CPU per 1,000 invocations (ms)", "W5n", Tenths, true),
    ConnectP50 => ("W8 connect, `select 1`, disconnect: p50 (ms)", "W8", Millis, false),
    ConnectP99 => ("W8 connect, `select 1`, disconnect: p99 (ms)", "W8", Millis, false),
    ConnectLoginP50 => ("W8 of which connect and log in: p50 (ms)", "W8", Millis, false),
    FleetServerPeak => ("W9 fleet: peak server connections of the application role", "W9", Count, false),
    FleetErrors => ("W9 fleet: failed transactions and connects", "W9", Count, false),
    FleetTps => ("W9 fleet: transactions per second", "W9", Count, false),
    FleetOthersRefused =>
        ("W9 fleet: another application's new connections refused (one tried every 100 ms)", "W9", Count, false),
}

impl Metric {
    pub fn label(self) -> &'static str {
        self.info().label
    }

    /// The workload that measures it (the CPU rows come from the W2 and W3 runs of their setting).
    pub fn step(self) -> &'static str {
        self.info().step
    }

    /// The table it belongs to: by its workload's suffix (`u` Unix sockets, `n` and W8/W9 the network, so
    /// `un` is the network lab's clients on the pooler's Unix socket).
    pub fn world(self) -> World {
        world_of(self.step())
    }

    /// Whether the figure exists for `target` (a process of its own to measure, for the pooler-only rows).
    pub fn applies_to(self, target: Target) -> bool {
        !(self.info().pooler_only && target == Target::Direct)
    }

    /// Whether a failure is an expected result: named prepared statements across transactions through a
    /// transaction pooler that does not track them (PgBouncer 1.18).
    pub fn may_fail(self, target: Target) -> bool {
        self == Metric::PreparedTps && target != Target::Direct
    }

    /// Higher is better (a throughput) rather than lower (everything else).
    pub fn higher_is_better(self) -> bool {
        self.label().ends_with("(tps)") || self == Metric::FleetTps
    }

    /// A figure as the table shows it.
    pub fn format(self, value: f64) -> String {
        match self.info().unit {
            Unit::Count => thousands(value.round() as u64),
            Unit::Tenths => format!("{value:.1}"),
            Unit::Millis if value < 10.0 => format!("{value:.2}"),
            Unit::Millis => format!("{value:.1}"),
        }
    }
}

/// The setting a workload runs in, from its name.
pub fn world_of(step: &str) -> World {
    if step.ends_with('u') {
        World::Unix
    } else if step.ends_with('n') || step == "W8" || step == "W9" {
        World::Network
    } else {
        World::Loopback
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_know_their_step_world_and_unit() {
        assert_eq!(Metric::ALL.len(), 65);
        assert_eq!(Metric::ALL[0], Metric::ReconnectTps);
        assert_eq!((Metric::CpuSimple.step(), Metric::CpuSimple.world()), ("W2", World::Loopback));
        assert_eq!((Metric::UnixCpuExtended.step(), Metric::UnixCpuExtended.world()), ("W3u", World::Unix));
        assert_eq!(Metric::NetSimpleLatency.world(), World::Network);
        assert_eq!((Metric::NetUnixSimpleCpu.step(), Metric::NetUnixSimpleCpu.world()), ("W2un", World::Network));
        assert!(!Metric::NetUnixExtendedTps.applies_to(Target::Direct));
        assert_eq!(
            (Metric::EagerCpuSimple.world(), Metric::UnixEagerCpuExtended.world()),
            (World::Loopback, World::Unix)
        );
        assert!(
            !Metric::EagerSimpleTps.applies_to(Target::Direct) && Metric::EagerSimpleTps.applies_to(Target::PgBouncer)
        );
        assert_eq!((Metric::FleetErrors.world(), Metric::ConnectP99.world()), (World::Network, World::Network));
        assert!(!Metric::NetSimpleCpu.applies_to(Target::Direct) && Metric::FleetTps.applies_to(Target::Direct));
        assert!(!Metric::BurstCpu.applies_to(Target::Direct) && Metric::BurstCpu.applies_to(Target::PgBouncer));
        assert_eq!((Metric::NetBurstCpu.step(), Metric::NetBurstCpu.world()), ("W5n", World::Network));
        assert!(Metric::NetSimpleTps.higher_is_better() && Metric::FleetTps.higher_is_better());
        assert!(!Metric::ConnectP50.higher_is_better() && !Metric::FleetOthersRefused.higher_is_better());
        assert_eq!(Metric::BurstQueryP99.format(0.3123), "0.31");
        assert_eq!(Metric::BurstQueryP99.format(12.345), "12.3");
        assert_eq!(Metric::FleetTps.format(12345.6), "12,346");
        assert_eq!(Metric::IdlePerClient.format(1.26), "1.3");
    }
}
