//! The side-by-side comparison a run prints (and writes as JSON): pgmux next to PostgreSQL directly.

use std::fmt::Write as _;

use serde::Serialize;

use crate::workload::WorkloadReport;

/// The settings of a run and its results through pgmux and directly; a side not run is `None`.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub settings: Settings,
    pub pgmux: Option<WorkloadReport>,
    pub direct: Option<WorkloadReport>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    pub clients: usize,
    pub duration_secs: f64,
    pub think_secs: f64,
    pub pool_max: u32,
    pub postgres_max_connections: u32,
}

const LABEL: usize = 25;

/// One row of the table: its label and how to read the figure from a side's report.
type Row = (&'static str, fn(&WorkloadReport) -> String);
const COLUMN: usize = 14;

impl Comparison {
    /// The table, one line per figure, with a header; ends with a newline.
    pub fn table(&self) -> String {
        let sides = [self.pgmux.as_ref(), self.direct.as_ref()];
        let mut out = String::new();
        let _ = writeln!(out, "{:LABEL$}{:>COLUMN$}{:>COLUMN$}", "", "pgmux", "direct");
        let rows: [Row; 6] = [
            ("invocations", |r| r.invocations.to_string()),
            ("errors", |r| r.errors.to_string()),
            ("peak client connections", |r| r.peak_client_connections.to_string()),
            ("peak server connections", |r| {
                r.peak_server_connections.map_or_else(|| "-".to_owned(), |n| n.to_string())
            }),
            ("connect p50 / p99 (ms)", |r| r.connect.p50_p99()),
            ("query   p50 / p99 (ms)", |r| r.query.p50_p99()),
        ];
        for (label, figure) in rows {
            let [a, b] = sides.map(|side| side.map_or_else(|| "-".to_owned(), figure));
            let _ = writeln!(out, "{label:LABEL$}{a:>COLUMN$}{b:>COLUMN$}");
        }
        out
    }

    /// The first distinct error messages of each side, or an empty string if there were none.
    pub fn error_summary(&self) -> String {
        let mut out = String::new();
        for (name, side) in [("pgmux", &self.pgmux), ("direct", &self.direct)] {
            let Some(report) = side.as_ref().filter(|r| r.errors > 0) else {
                continue;
            };
            let _ = writeln!(out, "\nfirst errors ({name}, {} in all):", report.errors);
            for sample in &report.error_samples {
                let _ = writeln!(out, "  {:>6} x {}", sample.count, sample.message);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Latency;
    use crate::workload::ErrorSample;
    use std::time::Duration;

    fn report(invocations: u64, peak_server: Option<u64>) -> WorkloadReport {
        WorkloadReport {
            invocations,
            errors: 1,
            error_samples: vec![ErrorSample {
                message: "connect: FATAL 53300: sorry, too many clients already".into(),
                count: 1,
            }],
            peak_client_connections: 64,
            peak_server_connections: peak_server,
            connect: Latency::from_samples(vec![Duration::from_micros(1_250), Duration::from_millis(3)]),
            query: Latency::default(),
            elapsed_secs: 30.0,
        }
    }

    #[test]
    fn table_lines_up() {
        let comparison = Comparison {
            settings: Settings {
                clients: 64,
                duration_secs: 30.0,
                think_secs: 5.0,
                pool_max: 20,
                postgres_max_connections: 200,
            },
            pgmux: Some(report(384, Some(2))),
            direct: None,
        };
        let expected = concat!(
            "                                  pgmux        direct\n",
            "invocations                         384             -\n",
            "errors                                1             -\n",
            "peak client connections              64             -\n",
            "peak server connections               2             -\n",
            "connect p50 / p99 (ms)        1.2 / 3.0             -\n",
            "query   p50 / p99 (ms)                -             -\n",
        );
        assert_eq!(comparison.table(), expected);
        assert!(comparison.error_summary().contains("1 x connect: FATAL 53300"));
        let json = serde_json::to_value(&comparison).unwrap();
        assert_eq!(json["pgmux"]["peak_server_connections"], 2);
        assert!(json["direct"].is_null());
    }
}
