//! The driver × scenario matrix: every suite's lines and problems folded into one table, printed and
//! written as Markdown.

use std::collections::BTreeSet;
use std::fmt::Write;
use std::time::Duration;

use crate::suites::{Line, Run};

/// Everything the runner collected.
#[derive(Debug)]
pub struct Matrix {
    pub runs: Vec<Run>,
}

impl Matrix {
    pub fn passed(&self) -> usize {
        self.lines().filter(|l| l.pass).count()
    }

    /// Failed scenarios plus suite problems (a suite that is missing, killed or breaks the contract).
    pub fn failed(&self) -> usize {
        self.lines().filter(|l| !l.pass).count() + self.runs.iter().map(|r| r.problems.len()).sum::<usize>()
    }

    fn lines(&self) -> impl Iterator<Item = &Line> {
        self.runs.iter().flat_map(|r| r.lines.iter())
    }

    /// Drivers in the order they first appear.
    fn drivers(&self) -> Vec<&str> {
        let mut drivers: Vec<&str> = Vec::new();
        for line in self.lines() {
            if !drivers.contains(&line.driver.as_str()) {
                drivers.push(&line.driver);
            }
        }
        drivers
    }

    /// Scenario IDs in catalogue order (S1, S2, …, S5a, S5b, …, S15).
    fn scenarios(&self) -> Vec<String> {
        let ids: BTreeSet<(u32, String)> = self
            .lines()
            .map(|l| {
                let digits: String = l.scenario[1..].chars().take_while(char::is_ascii_digit).collect();
                (digits.parse().unwrap_or(u32::MAX), l.scenario.clone())
            })
            .collect();
        ids.into_iter().map(|(_, id)| id).collect()
    }

    /// The table: one row per driver, one column per scenario; `PASS`, `FAIL`, or `·` where the driver
    /// cannot express the scenario (its suite's README says why).
    pub fn table(&self) -> String {
        let scenarios = self.scenarios();
        if scenarios.is_empty() {
            return "(no suite printed a scenario line)\n".to_owned();
        }
        let mut out = format!("| driver (suite) | {} |\n", scenarios.join(" | "));
        let _ = writeln!(out, "|---|{}", "---|".repeat(scenarios.len()));
        for driver in self.drivers() {
            let suite = self.lines().find(|l| l.driver == driver).map(|l| l.suite).unwrap_or("?");
            let cells: Vec<&str> = scenarios
                .iter()
                .map(|s| {
                    let mut verdicts = self.lines().filter(|l| l.driver == driver && &l.scenario == s);
                    match (verdicts.next(), verdicts.next()) {
                        (None, _) => "·",
                        (Some(l), None) if l.pass => "PASS",
                        _ => "FAIL",
                    }
                })
                .collect();
            let _ = writeln!(out, "| {driver} ({suite}) | {} |", cells.join(" | "));
        }
        out
    }

    /// One row per suite: how it went and how long it took.
    pub fn suites(&self) -> String {
        let mut out =
            "| suite | scenarios | passed | failed | problems | seconds |\n|---|---|---|---|---|---|\n".to_owned();
        for run in &self.runs {
            let passed = run.lines.iter().filter(|l| l.pass).count();
            let problems = if run.problems.is_empty() { "none".to_owned() } else { run.problems.join("; ") };
            let _ = writeln!(
                out,
                "| {} | {} | {passed} | {} | {problems} | {:.1} |",
                run.suite,
                run.lines.len(),
                run.lines.len() - passed,
                run.elapsed.as_secs_f64()
            );
        }
        out
    }

    /// Every line, as the suites printed them, then each suite problem as `<suite> suite FAIL <why>`.
    pub fn all_lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self.lines().map(Line::text).collect();
        for run in &self.runs {
            out.extend(run.problems.iter().map(|p| format!("{} suite FAIL {p}", run.suite)));
        }
        out
    }

    /// The failed scenario lines, then the suite problems.
    pub fn failures(&self) -> Vec<String> {
        self.lines()
            .filter(|l| !l.pass)
            .map(Line::text)
            .chain(self.runs.iter().flat_map(|r| r.problems.iter().map(|p| format!("{} suite FAIL {p}", r.suite))))
            .collect()
    }

    /// The Markdown report.
    pub fn markdown(&self, setting: &str, elapsed: Duration) -> String {
        let mut out = format!("# Driver compatibility matrix\n\n{setting}\n\n");
        out.push_str(&self.table());
        let _ = write!(
            out,
            "\n`·`: not expressible with that driver (see the suite's README).\n\n**{} passed, {} failed** \
             in {:.0} s.\n\n## Suites\n\n{}\n## Failures\n\n",
            self.passed(),
            self.failed(),
            elapsed.as_secs_f64(),
            self.suites()
        );
        let failures = self.failures();
        if failures.is_empty() {
            out.push_str("None.\n");
        }
        for line in failures {
            let _ = writeln!(out, "- `{}`", line.replace('`', "'"));
        }
        out.push_str("\n## Every line\n\n```\n");
        for line in self.all_lines() {
            let _ = writeln!(out, "{line}");
        }
        out.push_str("```\n");
        out
    }
}
