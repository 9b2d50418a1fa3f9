//! The reader scenario's figures: how soon reads leave a reader that goes silent (its proxy black-holed),
//! how long reads were held or failed meanwhile, and how soon they come back to it once it answers again.
//! Before the fault every read runs on the reader (the standby, B); where a pooler has somewhere else to
//! send a read (pgmux: the writer, `reader_fallback`'s default), the reads that follow run there.

use serde::Serialize;

use crate::report::Summary;
use crate::runner::ScenarioRun;
use crate::topology::NODE_B;
use crate::workload::{OpKind, Outcome, READER_ROUTE};

/// A read that took longer than this (or failed) was held up by the fault.
const STALLED_MS: f64 = 1000.0;

/// Whether `node`, as a read reports it (`inet_server_addr()::text`, `127.0.10.2/32`), is the reader.
fn is_reader(node: &str) -> bool {
    node.split('/').next() == Some(NODE_B)
}

/// One run's reads (times in ms from the fault; over several runs, the worst).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReadFigures {
    pub reads: u64,
    /// Reads the fault met that failed (an error, a closed connection, a timeout): in flight at the fault, or
    /// begun before the heal.
    pub failed: u64,
    /// From the fault to the end of the first read, begun after it, answered by another node; None: none was.
    pub elsewhere_ms: Option<f64>,
    /// From the fault to the end of the last read, begun before the heal, that failed or took over a second;
    /// 0: none did.
    pub last_stalled_ms: f64,
    /// From the heal to the start of the first read, begun after it, answered by the reader again; None: none
    /// within the run.
    pub back_ms: Option<f64>,
}

/// The figures of a run's reads, if it had any.
pub fn of_run(run: &ScenarioRun) -> Option<ReadFigures> {
    let fault = run.events.fault_ms;
    let healed = run.events.healed_ms.unwrap_or(f64::INFINITY);
    let reads: Vec<_> = run.record.ops.iter().filter(|op| op.kind == OpKind::Read).collect();
    if reads.is_empty() {
        return None;
    }
    let ok = |op: &&&crate::workload::Op| op.outcome == Outcome::Ok;
    let on_reader = |op: &&&crate::workload::Op| op.node.as_deref().is_some_and(is_reader);
    let met = |op: &&&crate::workload::Op| op.end_ms >= fault && op.start_ms < healed;
    let mut f = ReadFigures { reads: reads.len() as u64, ..ReadFigures::default() };
    f.failed = reads.iter().filter(met).filter(|op| !ok(op)).count() as u64;
    f.elsewhere_ms = reads
        .iter()
        .filter(|op| op.start_ms >= fault && ok(op) && !on_reader(op))
        .map(|op| op.end_ms - fault)
        .reduce(f64::min);
    f.last_stalled_ms = reads
        .iter()
        .filter(met)
        .filter(|op| !ok(op) || op.end_ms - op.start_ms > STALLED_MS)
        .map(|op| op.end_ms - fault)
        .fold(0.0, f64::max);
    if healed.is_finite() {
        f.back_ms = reads
            .iter()
            .filter(|op| op.start_ms >= healed && ok(op) && on_reader(op))
            .map(|op| op.start_ms - healed)
            .reduce(f64::min);
    }
    Some(f)
}

/// The worst of several runs' figures (None wins: it never happened in some run).
pub fn worst(runs: &[ReadFigures]) -> Option<ReadFigures> {
    let first = runs.first()?.clone();
    Some(runs.iter().skip(1).fold(first, |w, r| ReadFigures {
        reads: w.reads + r.reads,
        failed: w.failed + r.failed,
        elsewhere_ms: w.elsewhere_ms.zip(r.elsewhere_ms).map(|(a, b)| a.max(b)),
        last_stalled_ms: w.last_stalled_ms.max(r.last_stalled_ms),
        back_ms: w.back_ms.zip(r.back_ms).map(|(a, b)| a.max(b)),
    }))
}

/// The reader scenario's table (empty when no summary has reads): one row per target.
pub fn table(summaries: &[Summary]) -> String {
    let rows: Vec<(&Summary, &ReadFigures)> = summaries
        .iter()
        .filter(|s| s.route.as_deref().is_none_or(|r| r == READER_ROUTE))
        .filter_map(|s| s.reads.as_ref().map(|f| (s, f)))
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let secs = |ms: f64| format!("{:.2} s", ms / 1000.0);
    let mut out = String::from(
        "\nReads through a reader route whose reader (B) is black-holed for the hold time (`reader-black-hole`):\n\n\
         | target | reads | failed (met by the fault) | first read elsewhere after the fault | reads held or failed until \
         | back on the reader after the heal |\n|---|---|---|---|---|---|\n",
    );
    for (s, f) in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            s.target.name(),
            f.reads,
            f.failed,
            f.elsewhere_ms.map_or("never".to_owned(), secs),
            secs(f.last_stalled_ms),
            f.back_ms.map_or("not within the run".to_owned(), secs),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::{FaultEvents, Scenario};
    use crate::runner::LedgerCheck;
    use crate::target::TargetKind;
    use crate::workload::{Op, Record, Role};

    fn read(start_ms: f64, end_ms: f64, outcome: Outcome, node: Option<&str>) -> Op {
        Op {
            client: 1,
            route: READER_ROUTE.into(),
            role: Role::Reader,
            seq: 1,
            kind: OpKind::Read,
            start_ms,
            end_ms,
            outcome,
            closed: false,
            node: node.map(|n| format!("{n}/32")),
            in_recovery: node.map(|n| n == NODE_B),
        }
    }

    fn run(ops: Vec<Op>) -> ScenarioRun {
        ScenarioRun {
            scenario: Scenario::ReaderBlackHole,
            target: TargetKind::Pgmux,
            run: 1,
            events: FaultEvents { fault_ms: 0.0, healed_ms: Some(10_000.0), ..FaultEvents::default() },
            record: Record { ops, disconnects: Vec::new(), acked: Vec::new() },
            lock: None,
            demoted_samples: Vec::new(),
            ledger: LedgerCheck::default(),
            ledger_by_route: Vec::new(),
            target_exit: None,
            error: None,
        }
    }

    #[test]
    fn reads_leave_the_silent_reader_and_come_back_after_the_heal() {
        let writer = Some(crate::topology::NODE_A);
        let ops = vec![
            read(-50.0, -49.0, Outcome::Ok, Some(NODE_B)),
            // In flight at the fault: an error once the reader is declared dead.
            read(
                -1.0,
                2500.0,
                Outcome::Sql { code: "08006".into(), severity: "ERROR".into(), message: String::new() },
                None,
            ),
            // Picked the reader before it left, sent on to the writer.
            read(100.0, 2600.0, Outcome::Ok, writer),
            read(2600.0, 2601.0, Outcome::Ok, writer),
            read(10_500.0, 10_501.0, Outcome::Ok, writer),
            read(12_000.0, 12_001.0, Outcome::Ok, Some(NODE_B)),
        ];
        let f = of_run(&run(ops)).expect("reads");
        assert_eq!((f.reads, f.failed), (6, 1), "the read in flight at the fault failed");
        assert_eq!(f.elsewhere_ms, Some(2600.0));
        assert_eq!(f.last_stalled_ms, 2600.0);
        assert_eq!(f.back_ms, Some(2000.0));
        let never = of_run(&run(vec![read(5.0, 9000.0, Outcome::Timeout, None)])).expect("reads");
        assert_eq!((never.failed, never.elsewhere_ms, never.last_stalled_ms, never.back_ms), (1, None, 9000.0, None));
        let both = worst(&[f, never]).expect("runs");
        assert_eq!((both.reads, both.failed, both.elsewhere_ms, both.last_stalled_ms), (7, 2, None, 9000.0));
        assert!(of_run(&run(Vec::new())).is_none());
    }
}
