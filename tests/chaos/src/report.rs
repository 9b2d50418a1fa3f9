//! From what the runs recorded to the figures issue 13 asks for, per scenario and target: errors by SQLSTATE
//! for idle / busy / in-flight clients, disconnects, time to the first successful write, writes that
//! reached a read-only node, lost and duplicated acknowledged writes, how long a demoted node kept
//! connections, how long a hung server went unnoticed; and their markdown table.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::faults::Scenario;
use crate::runner::ScenarioRun;
use crate::target::TargetKind;
use crate::workload::{Op, OpKind, Outcome, Role};

/// The figures of one scenario against one target, over all its runs (counts summed, times: the worst run).
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub scenario: Scenario,
    pub target: TargetKind,
    /// The route (database name) its clients used, when the runs spread clients over more than one;
    /// then each route has a summary of its own, judged on its own.
    pub route: Option<String>,
    pub runs: u32,
    pub failed_runs: Vec<String>,
    pub ops: u64,
    pub errors: BTreeMap<Role, BTreeMap<String, u64>>,
    pub disconnects: BTreeMap<Role, u64>,
    /// From the fault to the first acknowledged write that started after it.
    pub first_write_after_fault_ms: Option<f64>,
    /// Per client, from when a writer was reachable (or its own attempt, if later) to its first success
    /// after the fault; the 99th percentile. None if some client never succeeded after the fault.
    pub p99_client_wait_after_reachable_ms: Option<f64>,
    pub clients_without_success: u64,
    /// Writes that reached a read-only node (refused with SQLSTATE 25006, or served by a node in recovery).
    pub writes_to_read_only: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub unacked_present: u64,
    /// From the flip until no app connection was left on the demoted node; None: never within the run.
    pub demoted_drained_ms: Option<f64>,
    /// Hangs: from the fault until the last in-flight transaction ended with an error; None if one was not
    /// ended by the target before the hang was lifted (or the run ended).
    pub hang_detected_ms: Option<f64>,
    /// Client kill: from the kill until another session could lock the row.
    pub lock_released_ms: Option<f64>,
    pub lock_held_before_kill: bool,
    /// The reader scenario: what the reads went through (see the `reads` module).
    pub reads: Option<crate::reads::ReadFigures>,
    pub target_crashed: bool,
    pub notes: Vec<String>,
}

impl Summary {
    /// A summary with nothing counted yet.
    pub fn empty(scenario: Scenario, target: TargetKind, runs: u32) -> Summary {
        Summary {
            scenario,
            target,
            route: None,
            runs,
            failed_runs: Vec::new(),
            ops: 0,
            errors: BTreeMap::new(),
            disconnects: BTreeMap::new(),
            first_write_after_fault_ms: None,
            p99_client_wait_after_reachable_ms: None,
            clients_without_success: 0,
            writes_to_read_only: 0,
            lost: 0,
            duplicated: 0,
            unacked_present: 0,
            demoted_drained_ms: None,
            hang_detected_ms: None,
            lock_released_ms: None,
            lock_held_before_kill: true,
            reads: None,
            target_crashed: false,
            notes: Vec::new(),
        }
    }

    /// The scenario's name, and the route's when there are several: `failover` or `failover (pgmux_b)`.
    pub fn name(&self) -> String {
        match &self.route {
            Some(route) => format!("{} ({route})", self.scenario.name()),
            None => self.scenario.name(),
        }
    }
}

/// Summaries of `runs`, one per (scenario, target), in the order first seen; one per (scenario, target,
/// route) when the runs spread their clients over several routes.
pub fn summarize(runs: &[ScenarioRun]) -> Vec<Summary> {
    let mut keys: Vec<(Scenario, TargetKind)> = Vec::new();
    for run in runs {
        if !keys.contains(&(run.scenario, run.target)) {
            keys.push((run.scenario, run.target));
        }
    }
    keys.into_iter()
        .flat_map(|(scenario, target)| {
            let mine: Vec<&ScenarioRun> =
                runs.iter().filter(|r| r.scenario == scenario && r.target == target).collect();
            let mut routes: Vec<String> = Vec::new();
            for route in mine.iter().flat_map(|r| r.record.routes()) {
                if !routes.contains(&route) {
                    routes.push(route);
                }
            }
            if routes.len() < 2 {
                return vec![summarize_one(scenario, target, &mine)];
            }
            routes
                .into_iter()
                .map(|route| {
                    let split: Vec<ScenarioRun> = mine.iter().map(|r| of_route(r, &route)).collect();
                    let mut s = summarize_one(scenario, target, &split.iter().collect::<Vec<_>>());
                    s.route = Some(route);
                    s
                })
                .collect()
        })
        .collect()
}

/// A run as seen by the clients of one route: their operations, disconnects and ledger. What is not per
/// client (the fault's events, the demoted node's connections, the lock holder) is the run's.
fn of_route(run: &ScenarioRun, route: &str) -> ScenarioRun {
    let mut out = run.clone();
    out.record = run.record.of_route(route);
    if let Some((_, ledger)) = run.ledger_by_route.iter().find(|(r, _)| r == route) {
        out.ledger = ledger.clone();
    }
    out
}

fn summarize_one(scenario: Scenario, target: TargetKind, runs: &[&ScenarioRun]) -> Summary {
    let mut s = Summary::empty(scenario, target, runs.len() as u32);
    let mut first_writes = Vec::new();
    let mut waits = Vec::new();
    let mut drained = Vec::new();
    let mut detected = Vec::new();
    let mut released = Vec::new();
    let mut reads = Vec::new();
    for run in runs {
        if let Some(e) = &run.error {
            s.failed_runs.push(e.clone());
            continue;
        }
        if let Some(e) = &run.events.error {
            s.notes.push(format!("fault injection: {e}"));
        }
        if let Some(e) = &run.ledger.error {
            s.notes.push(e.clone());
        }
        s.target_crashed |= run.target_exit.is_some();
        count_ops(&mut s, &run.record.ops);
        for d in &run.record.disconnects {
            *s.disconnects.entry(d.role).or_default() += 1;
        }
        s.lost += run.ledger.lost;
        s.duplicated += run.ledger.duplicated;
        s.unacked_present += run.ledger.unacked_present;
        first_writes.push(first_write_after_fault(run));
        let (wait, never) = client_waits(run);
        waits.extend(wait);
        s.clients_without_success += never;
        if scenario.demotes_a() {
            drained.push(demoted_drained(run));
        }
        if scenario.hangs() {
            detected.push(hang_detected(run));
        }
        reads.extend(crate::reads::of_run(run));
        if let Some(lock) = &run.lock {
            s.lock_held_before_kill &= lock.held_before_kill;
            released.push(lock.released_after_ms);
        }
    }
    s.first_write_after_fault_ms = worst(&first_writes);
    s.p99_client_wait_after_reachable_ms =
        if s.clients_without_success > 0 || waits.is_empty() { None } else { Some(percentile(&mut waits, 0.99)) };
    s.demoted_drained_ms = worst(&drained);
    s.hang_detected_ms = worst(&detected);
    s.lock_released_ms = worst(&released);
    s.reads = crate::reads::worst(&reads);
    if released.is_empty() {
        s.lock_held_before_kill = false;
    }
    s
}

fn count_ops(s: &mut Summary, ops: &[Op]) {
    for op in ops {
        s.ops += 1;
        if let Some(key) = op.outcome.key() {
            *s.errors.entry(op.role).or_default().entry(key).or_default() += 1;
        }
        let refused_read_only = matches!(&op.outcome, Outcome::Sql { code, .. } if code == "25006");
        // A reader client's read on a standby is what it asked for.
        if op.kind.writes() && (refused_read_only || op.in_recovery == Some(true)) {
            s.writes_to_read_only += 1;
        }
    }
}

/// The worst of the runs' values; None if any run has none (never happened) or there are no runs.
fn worst(values: &[Option<f64>]) -> Option<f64> {
    if values.is_empty() || values.iter().any(Option::is_none) {
        return None;
    }
    values.iter().flatten().copied().reduce(f64::max)
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let rank = ((values.len() as f64 * p).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

fn is_write_after(op: &Op, fault: f64) -> bool {
    op.kind.writes() && op.kind != OpKind::Warmup && op.start_ms >= fault
}

fn first_write_after_fault(run: &ScenarioRun) -> Option<f64> {
    let fault = run.events.fault_ms;
    run.record
        .ops
        .iter()
        .filter(|op| is_write_after(op, fault) && op.outcome == Outcome::Ok)
        .map(|op| op.end_ms - fault)
        .reduce(f64::min)
}

/// Per client that tried to write after the fault: from max(writer reachable, its first attempt) to its
/// first success; and how many clients never succeeded.
fn client_waits(run: &ScenarioRun) -> (Vec<f64>, u64) {
    let fault = run.events.fault_ms;
    let reachable = run.events.writer_reachable_ms.unwrap_or(f64::INFINITY);
    let mut per_client: BTreeMap<u32, (f64, Option<f64>)> = BTreeMap::new();
    for op in run.record.ops.iter().filter(|op| is_write_after(op, fault) || op.kind == OpKind::Connect) {
        if op.start_ms < fault || op.role == Role::Holder || op.role == Role::Reader {
            continue;
        }
        let entry = per_client.entry(op.client).or_insert((op.start_ms, None));
        entry.0 = entry.0.min(op.start_ms);
        if op.outcome == Outcome::Ok && op.kind.writes() && entry.1.is_none() {
            entry.1 = Some(op.end_ms);
        }
    }
    let mut waits = Vec::new();
    let mut never = 0;
    for (first_try, success) in per_client.into_values() {
        match success {
            Some(end) => waits.push((end - reachable.max(first_try)).max(0.0)),
            None => never += 1,
        }
    }
    (waits, never)
}

fn demoted_drained(run: &ScenarioRun) -> Option<f64> {
    let flip = run.events.flip_ms?;
    run.demoted_samples.iter().find(|(at, count)| *at >= flip && *count == Some(0)).map(|(at, _)| at - flip)
}

/// The time the last in-flight long transaction was ended with an error by the target during the hang.
fn hang_detected(run: &ScenarioRun) -> Option<f64> {
    let fault = run.events.fault_ms;
    let healed = run.events.healed_ms.unwrap_or(f64::INFINITY);
    let long: Vec<&Op> = run.record.ops.iter().filter(|op| op.kind == OpKind::LongTxn).collect();
    if long.is_empty() {
        return None;
    }
    let mut last: f64 = 0.0;
    for op in long {
        let ended_by_target = op.outcome != Outcome::Ok && op.outcome != Outcome::Timeout && op.end_ms < healed;
        if !ended_by_target {
            return None;
        }
        last = last.max(op.end_ms - fault);
    }
    Some(last)
}

/// The markdown table of `summaries`, one row per scenario and target.
pub fn markdown_table(summaries: &[Summary]) -> String {
    let mut out = String::from(
        "| scenario | target | runs | errors: idle | errors: busy | errors: in-flight | disconnects idle / busy / in-flight \
         | first write after fault | p99 client wait after writer reachable | writes to read-only node \
         | lost / duplicated acked | demoted node drained | hang detected | lock released |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for s in summaries {
        let errors = |role| s.errors.get(&role).map_or("0".to_owned(), render_counts);
        let disc = |role| s.disconnects.get(&role).copied().unwrap_or(0);
        let wait = match (s.p99_client_wait_after_reachable_ms, s.clients_without_success) {
            (Some(ms), _) => secs(ms),
            (None, 0) => "–".to_owned(),
            (None, n) => format!("{n} clients never wrote"),
        };
        let mut target = s.target.name().to_owned();
        if s.target_crashed {
            target.push_str(" (exited!)");
        }
        let runs = if s.failed_runs.is_empty() {
            s.runs.to_string()
        } else {
            format!("{} ({} failed)", s.runs, s.failed_runs.len())
        };
        out.push_str(&format!(
            "| {} | {target} | {runs} | {} | {} | {} | {} / {} / {} | {} | {wait} | {} | {} / {} | {} | {} | {} |\n",
            s.name(),
            errors(Role::Idle),
            errors(Role::Busy),
            errors(Role::InFlight),
            disc(Role::Idle),
            disc(Role::Busy),
            disc(Role::InFlight),
            s.first_write_after_fault_ms.map_or("none".to_owned(), secs),
            s.writes_to_read_only,
            s.lost,
            s.duplicated,
            if s.scenario.demotes_a() {
                s.demoted_drained_ms.map_or("not within the run".to_owned(), secs)
            } else {
                "–".into()
            },
            if s.scenario.hangs() { s.hang_detected_ms.map_or("no".to_owned(), secs) } else { "–".into() },
            match (s.scenario == Scenario::ClientKill, s.lock_held_before_kill) {
                (false, _) => "–".to_owned(),
                (true, false) => "not held (invalid)".to_owned(),
                (true, true) => s.lock_released_ms.map_or("not within the run".to_owned(), secs),
            },
        ));
    }
    out
}

fn render_counts(counts: &BTreeMap<String, u64>) -> String {
    if counts.is_empty() {
        return "0".to_owned();
    }
    let mut items: Vec<(&String, &u64)> = counts.iter().collect();
    items.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    items.iter().map(|(key, n)| format!("{key}×{n}")).collect::<Vec<_>>().join(" ")
}

fn secs(ms: f64) -> String {
    format!("{:.2} s", ms / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::LedgerCheck;
    use crate::workload::Record;

    #[test]
    fn worst_needs_every_run() {
        assert_eq!(worst(&[Some(1.0), Some(3.0)]), Some(3.0));
        assert_eq!(worst(&[Some(1.0), None]), None);
        assert_eq!(worst(&[]), None);
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let mut values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&mut values, 0.99), 99.0);
        assert_eq!(percentile(&mut [5.0], 0.99), 5.0);
    }

    fn op(client: u32, route: &str, outcome: Outcome) -> Op {
        Op {
            client,
            route: route.into(),
            role: Role::Busy,
            seq: 1,
            kind: OpKind::Write,
            start_ms: 10.0,
            end_ms: 20.0,
            outcome,
            closed: false,
            node: None,
            in_recovery: None,
        }
    }

    #[test]
    fn each_route_is_summarised_on_its_own_with_its_own_ledger() {
        let timeout = Outcome::Timeout;
        let record = Record {
            ops: vec![op(1, "pgmux", Outcome::Ok), op(2, "pgmux_b", timeout), op(3, "pgmux", Outcome::Ok)],
            disconnects: Vec::new(),
            acked: vec![(1, 1), (3, 1)],
        };
        let lost_on_b = LedgerCheck { lost: 1, ..LedgerCheck::default() };
        let run = ScenarioRun {
            scenario: Scenario::TerminateIdle,
            target: TargetKind::Pgmux,
            run: 1,
            events: crate::faults::FaultEvents::default(),
            record,
            lock: None,
            demoted_samples: Vec::new(),
            ledger: LedgerCheck { lost: 1, ..LedgerCheck::default() },
            ledger_by_route: vec![("pgmux".into(), LedgerCheck::default()), ("pgmux_b".into(), lost_on_b)],
            target_exit: None,
            error: None,
        };
        let summaries = summarize(&[run]);
        let names: Vec<String> = summaries.iter().map(Summary::name).collect();
        assert_eq!(names, ["terminate-idle (pgmux)", "terminate-idle (pgmux_b)"]);
        assert_eq!((summaries[0].ops, summaries[0].lost, summaries[0].errors.len()), (2, 0, 0));
        assert_eq!((summaries[1].ops, summaries[1].lost), (1, 1));
        assert_eq!(summaries[1].errors[&Role::Busy]["timeout"], 1);
    }

    #[test]
    fn counts_render_most_frequent_first() {
        let counts: BTreeMap<String, u64> = [("08001".to_owned(), 2), ("57P01".to_owned(), 5)].into();
        assert_eq!(render_counts(&counts), "57P01×5 08001×2");
        assert_eq!(render_counts(&BTreeMap::new()), "0");
    }
}
