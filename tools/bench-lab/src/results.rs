//! The figures of a benchmark run: one outcome per workload figure, target and round, and what the report
//! makes of them (medians, ratios, failures, and whether any figure that should be there is missing).

use std::fmt::Write as _;

use serde::Serialize;

pub use crate::metric::{Metric, World};

/// What a workload runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Target {
    Pgmux,
    PgBouncer,
    Direct,
}

impl Target {
    pub const ALL: [Target; 3] = [Target::Pgmux, Target::PgBouncer, Target::Direct];

    pub fn label(self) -> &'static str {
        match self {
            Target::Pgmux => "pgmux",
            Target::PgBouncer => "PgBouncer",
            Target::Direct => "direct",
        }
    }

    /// The order of the targets in round `round` (0-based): rotated by one each round, so that no target is
    /// always the first to meet a cold cache or always the one after a heavy run.
    pub fn order(round: usize) -> [Target; 3] {
        let mut order = Target::ALL;
        order.rotate_left(round % Target::ALL.len());
        order
    }
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// One measurement.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Value(f64),
    Failed(String),
}

#[derive(Clone, Debug, Serialize)]
pub struct Record {
    pub metric: Metric,
    pub target: Target,
    /// 0-based.
    pub round: usize,
    pub outcome: Outcome,
}

/// A breakdown behind one figure (W9's failures by SQLSTATE), for the report.
#[derive(Clone, Debug, Serialize)]
pub struct Detail {
    pub metric: Metric,
    pub target: Target,
    pub round: usize,
    pub text: String,
}

/// Every figure of a run, in the order measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Results {
    pub records: Vec<Record>,
    pub details: Vec<Detail>,
}

/// What the table shows for one metric and target.
#[derive(Clone, Debug, PartialEq)]
pub enum Summary {
    Median(f64),
    /// Failed in `failed` of `rounds` rounds; `reason` is the first failure's.
    Failed {
        reason: String,
        failed: usize,
        rounds: usize,
    },
    NotApplicable,
    Missing,
}

impl Results {
    pub fn record(&mut self, metric: Metric, target: Target, round: usize, outcome: Outcome) {
        self.records.push(Record { metric, target, round, outcome });
    }

    pub fn detail(&mut self, metric: Metric, target: Target, round: usize, text: String) {
        self.details.push(Detail { metric, target, round, text });
    }

    /// The outcomes of one cell, by round.
    pub fn outcomes(&self, metric: Metric, target: Target) -> Vec<&Outcome> {
        let mut cell: Vec<&Record> = self.records.iter().filter(|r| r.metric == metric && r.target == target).collect();
        cell.sort_by_key(|r| r.round);
        cell.into_iter().map(|r| &r.outcome).collect()
    }

    /// Any failure wins over the figures of the other rounds: a pooler that fails one round in three is
    /// reported as failing.
    pub fn summary(&self, metric: Metric, target: Target) -> Summary {
        if !metric.applies_to(target) {
            return Summary::NotApplicable;
        }
        let outcomes = self.outcomes(metric, target);
        let failures: Vec<&String> =
            outcomes.iter().filter_map(|o| if let Outcome::Failed(why) = o { Some(why) } else { None }).collect();
        if let Some(first) = failures.first() {
            return Summary::Failed { reason: (*first).clone(), failed: failures.len(), rounds: outcomes.len() };
        }
        let values: Vec<f64> =
            outcomes.iter().filter_map(|o| if let Outcome::Value(v) = o { Some(*v) } else { None }).collect();
        median(values).map_or(Summary::Missing, Summary::Median)
    }

    /// Every figure of `metrics` that should be there and is not: a cell with fewer than `rounds` outcomes,
    /// or with a failure that is not an expected one. Empty for a complete run.
    pub fn problems(&self, metrics: &[Metric], rounds: usize) -> Vec<String> {
        let mut problems = Vec::new();
        for &metric in metrics {
            for target in Target::ALL.into_iter().filter(|&t| metric.applies_to(t)) {
                let outcomes = self.outcomes(metric, target);
                let where_ = format!("{} {} / {}", metric.step(), metric.label(), target.label());
                if outcomes.len() < rounds {
                    problems.push(format!("{where_}: {} of {rounds} rounds measured", outcomes.len()));
                }
                for outcome in outcomes {
                    if let Outcome::Failed(why) = outcome
                        && !metric.may_fail(target)
                    {
                        problems.push(format!("{where_}: fails: {why}"));
                    }
                }
            }
        }
        problems
    }
}

impl Summary {
    pub fn show(&self, metric: Metric) -> String {
        match self {
            Summary::Median(v) => metric.format(*v),
            Summary::Failed { reason, failed, rounds } if failed < rounds => {
                format!("fails: {reason} ({failed} of {rounds} rounds)")
            }
            Summary::Failed { reason, .. } => format!("fails: {reason}"),
            Summary::NotApplicable => "—".to_owned(),
            Summary::Missing => "missing".to_owned(),
        }
    }

    fn value(&self) -> Option<f64> {
        if let Summary::Median(v) = self { Some(*v) } else { None }
    }
}

/// `a / b` as `1.23×`, or `—` without two figures.
pub fn ratio(a: &Summary, b: &Summary) -> String {
    match (a.value(), b.value()) {
        (Some(a), Some(b)) if b != 0.0 => {
            let mut out = String::new();
            let _ = write!(out, "{:.2}×", a / b);
            out
        }
        _ => "—".to_owned(),
    }
}

/// The median (mean of the middle two for an even count); `None` without values.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_failures_and_ratios() {
        let mut r = Results::default();
        for (round, tps) in [3000.0, 1000.0, 2000.0].into_iter().enumerate() {
            r.record(Metric::SimpleTps, Target::Pgmux, round, Outcome::Value(tps));
            r.record(Metric::SimpleTps, Target::PgBouncer, round, Outcome::Value(tps * 2.0));
        }
        let (pgmux, bouncer) =
            (r.summary(Metric::SimpleTps, Target::Pgmux), r.summary(Metric::SimpleTps, Target::PgBouncer));
        assert_eq!(pgmux, Summary::Median(2000.0));
        assert_eq!(ratio(&pgmux, &bouncer), "0.50×");
        assert_eq!(pgmux.show(Metric::SimpleTps), "2,000");
        r.record(Metric::PreparedTps, Target::Pgmux, 0, Outcome::Value(5.0));
        r.record(
            Metric::PreparedTps,
            Target::Pgmux,
            1,
            Outcome::Failed("prepared statement \"P_0\" does not exist".into()),
        );
        let failed = r.summary(Metric::PreparedTps, Target::Pgmux);
        assert_eq!(
            failed.show(Metric::PreparedTps),
            "fails: prepared statement \"P_0\" does not exist (1 of 2 rounds)"
        );
        assert_eq!(ratio(&failed, &pgmux), "—");
        assert_eq!(r.summary(Metric::StartupMs, Target::Direct).show(Metric::StartupMs), "—");
        assert_eq!(r.summary(Metric::StartupMs, Target::Pgmux), Summary::Missing);
    }

    #[test]
    fn problems_name_missing_and_unexpected_failures_only() {
        let mut r = Results::default();
        for &metric in Metric::ALL {
            for target in Target::ALL.into_iter().filter(|&t| metric.applies_to(t)) {
                r.record(metric, target, 0, Outcome::Value(1.0));
            }
        }
        assert_eq!(r.problems(Metric::ALL, 1), Vec::<String>::new());
        r.records.retain(|rec| !(rec.metric == Metric::PreparedTps && rec.target != Target::Direct));
        r.record(Metric::PreparedTps, Target::Pgmux, 0, Outcome::Failed("expected".into()));
        r.record(Metric::PreparedTps, Target::PgBouncer, 0, Outcome::Failed("expected".into()));
        assert_eq!(r.problems(Metric::ALL, 1), Vec::<String>::new());
        r.records.retain(|rec| rec.metric != Metric::StartupMs || rec.target != Target::Pgmux);
        r.record(Metric::SimpleTps, Target::Direct, 1, Outcome::Failed("server closed the connection".into()));
        let problems = r.problems(Metric::ALL, 1);
        assert_eq!(problems.len(), 2, "{problems:#?}");
        assert_eq!(r.problems(&[Metric::SimpleTps], 1).len(), 1);
        assert!(problems[0].starts_with("W2 W2 select-only, `-M simple` (tps) / direct: fails: server closed"));
        assert!(problems[1].contains("W7") && problems[1].contains("0 of 1 rounds measured"));
    }

    #[test]
    fn rotation_and_numbers() {
        assert_eq!(Target::order(0), [Target::Pgmux, Target::PgBouncer, Target::Direct]);
        assert_eq!(Target::order(1), [Target::PgBouncer, Target::Direct, Target::Pgmux]);
        assert_eq!(Target::order(3), Target::order(0));
        assert_eq!(
            (thousands(0), thousands(999), thousands(1000), thousands(1234567)),
            ("0".into(), "999".into(), "1,000".into(), "1,234,567".into())
        );
        assert_eq!(median(vec![3.0, 1.0, 2.0, 10.0]), Some(2.5));
        assert_eq!(median(Vec::new()), None);
    }
}
