//! The metrics of each reader instance of a reader route, labelled by the route (`database`) and the
//! instance (`instance`: its `server_id`, or `host:port` for a listed one). Their label values come from
//! the configuration and the cluster's topology, not from enums, so they are written from samples the
//! caller gathers when a reader asks ([`encode_readers`]) rather than kept in [`Metrics`](crate::Metrics).

use crate::expo::{Desc, Encoder, Labels, Unit};

/// One reader instance's figures now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReaderSample {
    /// The reader route clients name.
    pub database: String,
    /// Its `server_id`, or `host:port`.
    pub instance: String,
    /// Transactions sent to it since it joined the route.
    pub transactions: u64,
    /// In the rotation: its last polls were good.
    pub in_rotation: bool,
    /// Its last lag reading, in seconds.
    pub lag_seconds: f64,
}

const TRANSACTIONS: Desc = Desc::new(
    "pgmux_reader_transactions",
    "Transactions a reader route sent to each of its reader instances.",
    Unit::None,
);
const IN_ROTATION: Desc = Desc::new(
    "pgmux_reader_in_rotation",
    "1 while a reader instance takes new transactions (its topology polls are good), else 0.",
    Unit::None,
);
const LAG: Desc = Desc::new(
    "pgmux_reader_lag_seconds",
    "A reader instance's replication lag at its last topology poll (Aurora's replica_lag_in_msec; 0 where the server does not say).",
    Unit::Seconds,
);

/// Every per-reader family's description.
pub const READER_DESCS: &[Desc] = &[TRANSACTIONS, IN_ROTATION, LAG];

/// Writes the per-reader families; nothing when there is no reader.
pub fn encode_readers(e: &mut Encoder, readers: &[ReaderSample]) {
    if readers.is_empty() {
        return;
    }
    let labels: Vec<[(&str, &str); 2]> =
        readers.iter().map(|r| [("database", r.database.as_str()), ("instance", r.instance.as_str())]).collect();
    let with = |value: &dyn Fn(&ReaderSample) -> i64| -> Vec<(Labels<'_>, i64)> {
        labels.iter().zip(readers).map(|(l, r)| (&l[..], value(r))).collect()
    };
    let counts: Vec<(Labels<'_>, u64)> = labels.iter().zip(readers).map(|(l, r)| (&l[..], r.transactions)).collect();
    e.counter_samples(&TRANSACTIONS, &counts);
    e.gauge_samples(&IN_ROTATION, &with(&|r| i64::from(r.in_rotation)));
    let lags: Vec<(Labels<'_>, f64)> = labels.iter().zip(readers).map(|(l, r)| (&l[..], r.lag_seconds)).collect();
    e.gauge_float_samples(&LAG, &lags);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expo::Format;

    #[test]
    fn each_reader_is_a_sample_named_by_route_and_instance() {
        for d in READER_DESCS {
            assert_eq!(d.check(), Ok(()));
        }
        let sample = |instance: &str, transactions, in_rotation| ReaderSample {
            database: "app_ro".into(),
            instance: instance.into(),
            transactions,
            in_rotation,
            lag_seconds: 0.25,
        };
        let mut e = Encoder::new(Format::Prometheus);
        encode_readers(&mut e, &[sample("reader-1", 7, true), sample("reader-2", 0, false)]);
        let text = e.finish();
        assert!(text.contains("pgmux_reader_transactions_total{database=\"app_ro\",instance=\"reader-1\"} 7\n"));
        assert!(text.contains("pgmux_reader_in_rotation{database=\"app_ro\",instance=\"reader-2\"} 0\n"));
        assert!(text.contains("pgmux_reader_lag_seconds{database=\"app_ro\",instance=\"reader-1\"} 0.25\n"));
        let mut e = Encoder::new(Format::Prometheus);
        encode_readers(&mut e, &[]);
        assert_eq!(e.finish(), "");
    }
}
