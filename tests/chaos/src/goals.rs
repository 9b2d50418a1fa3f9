//! Issue 13's goals ("Goals, measured there"), each judged met or not from pgmux's summaries, and which of
//! them the short form enforces: those pgmux meets that the short form's scenarios measure (a goal it does
//! not measure is judged "not measured", which fails it). Turning a goal on is changing its `enforced` to
//! true in [`GOALS`]; docs/resilience.md says why each goal that is off is off.

use serde::Serialize;

use crate::faults::Scenario;
use crate::report::Summary;
use crate::soak::SoakResult;
use crate::target::TargetKind;
use crate::workload::Role;

#[derive(Debug)]
pub struct Goal {
    pub id: &'static str,
    pub text: &'static str,
    /// Whether the short form (`cargo test -p pgmux-chaos`) fails when this goal is not met.
    pub enforced: bool,
    judge: fn(&[&Summary], Option<&SoakResult>) -> Verdict,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "verdict", content = "why", rename_all = "kebab-case")]
pub enum Verdict {
    Met(String),
    NotMet(String),
    /// None of the scenarios that measure it ran.
    NotMeasured,
}

/// The goals, in issue 13's order.
pub const GOALS: &[Goal] = &[
    Goal {
        id: "idle-restart-connected",
        text: "idle clients: 0 disconnects across pg_ctl restart (fast and immediate)",
        enforced: true,
        judge: |s, _| idle(s, &[Scenario::RestartFast, Scenario::RestartImmediate], false),
    },
    Goal {
        id: "idle-terminate",
        text: "idle clients: 0 errors and 0 disconnects across pg_terminate_backend of idle servers",
        enforced: true,
        judge: |s, _| idle(s, &[Scenario::TerminateIdle], true),
    },
    Goal {
        id: "idle-restart-no-error",
        text: "idle clients: 0 errors across pg_ctl restart (fast and immediate)",
        enforced: true,
        judge: |s, _| idle(s, &[Scenario::RestartFast, Scenario::RestartImmediate], true),
    },
    Goal {
        id: "idle-failover",
        text: "idle clients: 0 errors and 0 disconnects across failovers (failover, demote, read-only, black hole)",
        enforced: true,
        judge: |s, _| {
            let failovers = [Scenario::Failover, Scenario::Demote, Scenario::ReadOnly, Scenario::BlackHoleFailover];
            idle(s, &failovers, true)
        },
    },
    Goal {
        id: "in-flight-one-error",
        text: "in-flight and busy clients: one error per affected transaction, never a disconnect, next transaction works",
        enforced: true,
        judge: |s, _| in_flight(s),
    },
    Goal {
        id: "ledger",
        text: "0 lost and 0 duplicated acknowledged writes, in every scenario",
        enforced: true,
        judge: |s, _| ledger(s),
    },
    Goal {
        id: "first-write-1s",
        text: "every client's first write succeeds within 1 s (p99) of the new writer being reachable",
        enforced: true,
        judge: |s, _| first_write(s),
    },
    Goal {
        id: "demoted-node",
        text: "0 writes reach a demoted node once its role is visible; its connections gone within 2 s of the flip",
        enforced: true,
        judge: |s, _| demoted(s),
    },
    Goal {
        id: "dead-server-5s",
        text: "a black-holed or hung server is detected within 5 s (in-flight transactions ended)",
        enforced: false,
        judge: |s, _| hang(s),
    },
    Goal {
        id: "client-kill-locks-1s",
        text: "a client killed inside a transaction releases its locks within 1 s",
        enforced: true,
        judge: |s, _| client_kill(s),
    },
    Goal {
        id: "no-false-alarm",
        text: "no error and no disconnect under latency, a slow link, or 100 ms delay with 2 % loss",
        enforced: false,
        judge: |s, _| no_false_alarm(s),
    },
    Goal {
        id: "soak-flat-memory",
        text: "connect-per-transaction soak: memory at the end within 10 % of the start",
        enforced: false,
        judge: |_, soak| soak_memory(soak),
    },
];

/// Every goal's verdict from pgmux's summaries (other targets' are ignored).
pub fn judge(summaries: &[Summary], soak: Option<&SoakResult>) -> Vec<(&'static Goal, Verdict)> {
    let pgmux: Vec<&Summary> = summaries.iter().filter(|s| s.target == TargetKind::Pgmux).collect();
    GOALS.iter().map(|goal| (goal, (goal.judge)(&pgmux, soak))).collect()
}

fn pick<'a>(summaries: &[&'a Summary], scenarios: &[Scenario]) -> Vec<&'a Summary> {
    summaries.iter().copied().filter(|s| scenarios.contains(&s.scenario)).collect()
}

/// The verdict of checks over `rows`: NotMeasured without rows, NotMet naming every failing row.
fn verdict(rows: &[&Summary], check: impl Fn(&Summary) -> Option<String>) -> Verdict {
    if rows.is_empty() {
        return Verdict::NotMeasured;
    }
    let failures: Vec<String> = rows
        .iter()
        .filter_map(|s| {
            if !s.failed_runs.is_empty() {
                return Some(format!("{}: run failed: {}", s.name(), s.failed_runs.join("; ")));
            }
            check(s).map(|why| format!("{}: {why}", s.name()))
        })
        .collect();
    let names: Vec<String> = rows.iter().map(|s| s.name()).collect();
    if failures.is_empty() {
        Verdict::Met(format!("in {}", names.join(", ")))
    } else {
        Verdict::NotMet(failures.join("; "))
    }
}

fn role_errors(s: &Summary, role: Role) -> u64 {
    s.errors.get(&role).map_or(0, |m| m.values().sum())
}

fn idle(summaries: &[&Summary], scenarios: &[Scenario], errors_too: bool) -> Verdict {
    verdict(&pick(summaries, scenarios), |s| {
        let disconnects = s.disconnects.get(&Role::Idle).copied().unwrap_or(0);
        let errors = role_errors(s, Role::Idle);
        let bad = disconnects > 0 || (errors_too && errors > 0);
        bad.then(|| format!("{errors} idle-client errors, {disconnects} disconnects"))
    })
}

fn in_flight(summaries: &[&Summary]) -> Verdict {
    let scenarios = [
        Scenario::TerminateActive,
        Scenario::RestartFast,
        Scenario::RestartImmediate,
        Scenario::Failover,
        Scenario::Reset,
    ];
    verdict(&pick(summaries, &scenarios), |s| {
        let disconnects: u64 = [Role::Busy, Role::InFlight].iter().filter_map(|r| s.disconnects.get(r)).sum();
        (disconnects > 0 || s.clients_without_success > 0).then(|| {
            format!("{disconnects} busy/in-flight disconnects, {} clients never wrote again", s.clients_without_success)
        })
    })
}

fn ledger(summaries: &[&Summary]) -> Verdict {
    verdict(summaries, |s| {
        (s.lost > 0 || s.duplicated > 0).then(|| format!("{} lost, {} duplicated", s.lost, s.duplicated))
    })
}

fn first_write(summaries: &[&Summary]) -> Verdict {
    let scenarios = [
        Scenario::RestartFast,
        Scenario::RestartImmediate,
        Scenario::Failover,
        Scenario::Demote,
        Scenario::ReadOnly,
        Scenario::BlackHoleFailover,
    ];
    verdict(&pick(summaries, &scenarios), |s| match s.p99_client_wait_after_reachable_ms {
        Some(ms) if ms <= 1000.0 => None,
        Some(ms) => Some(format!("p99 {:.2} s", ms / 1000.0)),
        None => Some(format!("{} clients never wrote after the fault", s.clients_without_success)),
    })
}

fn demoted(summaries: &[&Summary]) -> Verdict {
    verdict(&pick(summaries, &[Scenario::Demote, Scenario::ReadOnly]), |s| {
        let drained = s.demoted_drained_ms.is_some_and(|ms| ms <= 2000.0);
        (s.writes_to_read_only > 0 || !drained).then(|| {
            let drain = s.demoted_drained_ms.map_or("never".to_owned(), |ms| format!("{:.2} s", ms / 1000.0));
            format!("{} writes reached it, drained: {drain}", s.writes_to_read_only)
        })
    })
}

fn hang(summaries: &[&Summary]) -> Verdict {
    verdict(&pick(summaries, &[Scenario::Sigstop, Scenario::BlackHole, Scenario::BlackHoleFailover]), |s| {
        match s.hang_detected_ms {
            Some(ms) if ms <= 5000.0 => None,
            Some(ms) => Some(format!("detected after {:.2} s", ms / 1000.0)),
            None => Some("not detected while it lasted".to_owned()),
        }
    })
}

fn client_kill(summaries: &[&Summary]) -> Verdict {
    verdict(&pick(summaries, &[Scenario::ClientKill]), |s| {
        if !s.lock_held_before_kill {
            return Some("the lock was not held before the kill: the scenario proved nothing".to_owned());
        }
        match s.lock_released_ms {
            Some(ms) if ms <= 1000.0 => None,
            Some(ms) => Some(format!("released after {:.2} s", ms / 1000.0)),
            None => Some("never released within the run".to_owned()),
        }
    })
}

fn no_false_alarm(summaries: &[&Summary]) -> Verdict {
    verdict(&pick(summaries, &[Scenario::Latency, Scenario::SlowLink, Scenario::Lossy]), |s| {
        let errors: u64 = s.errors.values().flat_map(|m| m.values()).sum();
        let disconnects: u64 = s.disconnects.values().sum();
        (errors > 0 || disconnects > 0).then(|| format!("{errors} errors, {disconnects} disconnects"))
    })
}

fn soak_memory(soak: Option<&SoakResult>) -> Verdict {
    let Some(soak) = soak else {
        return Verdict::NotMeasured;
    };
    match (soak.rss_start_kib, soak.rss_end_kib) {
        (Some(start), Some(end)) if end as f64 <= start as f64 * 1.10 => {
            Verdict::Met(format!("{start} KiB → {end} KiB over {} s", soak.seconds))
        }
        (Some(start), Some(end)) => Verdict::NotMet(format!("{start} KiB → {end} KiB over {} s", soak.seconds)),
        _ => Verdict::NotMet("memory could not be read from /proc".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pgmux(scenario: Scenario) -> Summary {
        Summary::empty(scenario, TargetKind::Pgmux, 1)
    }

    fn verdict_of(id: &str, summaries: &[Summary]) -> Verdict {
        let judged = judge(summaries, None);
        judged.into_iter().find(|(g, _)| g.id == id).map(|(_, v)| v).expect("a goal with this id")
    }

    #[test]
    fn goals_are_judged_from_pgmux_rows_only() {
        let mut bouncer = Summary::empty(Scenario::TerminateIdle, TargetKind::Pgbouncer, 1);
        bouncer.disconnects.insert(Role::Idle, 3);
        let clean = pgmux(Scenario::TerminateIdle);
        assert!(matches!(verdict_of("idle-terminate", &[bouncer.clone(), clean]), Verdict::Met(_)));
        assert_eq!(verdict_of("idle-terminate", &[bouncer]), Verdict::NotMeasured);
    }

    #[test]
    fn a_failing_row_or_a_failed_run_is_not_met() {
        let mut errors = pgmux(Scenario::TerminateIdle);
        errors.errors.entry(Role::Idle).or_default().insert("08006".into(), 1);
        assert!(matches!(verdict_of("idle-terminate", &[errors]), Verdict::NotMet(_)));
        let mut failed = pgmux(Scenario::RestartFast);
        failed.failed_runs.push("setup failed".into());
        assert!(matches!(verdict_of("idle-restart-connected", &[failed]), Verdict::NotMet(_)));
    }

    #[test]
    fn client_kill_needs_the_lock_held_first() {
        let mut kill = pgmux(Scenario::ClientKill);
        kill.lock_released_ms = Some(30.0);
        assert!(matches!(verdict_of("client-kill-locks-1s", &[kill.clone()]), Verdict::Met(_)));
        kill.lock_held_before_kill = false;
        assert!(matches!(verdict_of("client-kill-locks-1s", &[kill]), Verdict::NotMet(_)));
    }

    #[test]
    fn goal_ids_are_unique() {
        let mut ids: Vec<&str> = GOALS.iter().map(|g| g.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), GOALS.len());
    }
}
