//! pgmux's own statements, shielded from whatever the session on the connection has set.
//!
//! A server connection carries the settings of the client it is lent to, or of the last one that used it:
//! a `statement_timeout` of 1 ms, a `lock_timeout`, a `search_path` that puts a schema of the client's
//! before `pg_catalog`, `default_transaction_isolation = serializable` (which fails every snapshot on a hot
//! standby). pgmux's own statements — applying a client's parameters, reading back what a client set,
//! asking a node's role, the sizing reading — must mean the same whatever those are. So each runs as one
//! simple Query in a transaction of its own ([`guarded`]) that turns them off for itself alone:
//! `BEGIN ISOLATION LEVEL READ COMMITTED`, then `SET LOCAL` of every timeout a session can set and of
//! `search_path`. What the statements read is schema-qualified besides.
//!
//! Only the `BEGIN` and the first `SET LOCAL` still run under the session's timeouts: a few microseconds
//! each. A timeout that fires there anyway (a backend descheduled for longer than the timeout) is an
//! ordinary error: PostgreSQL skips the rest of the Query, pgmux rolls the transaction back, the connection
//! is as it was and usable, and the statement runs again ([`Blame::Passing`]). Nothing pgmux runs on its
//! own account is a reason to close a connection unless the connection itself failed.
//!
//! Reading settings back needs the session's own values of the settings the guard turns off, so a
//! statement of its own reads those before they are turned off ([`read_back`]); whether the session set
//! them is told by comparing them with the value a `RESET` would restore ([`ReadBack`]).

use crate::protocol::params::{self, Param};

/// A server's major version, from its `server_version` (`"15.18 (Debian 15.18-0+deb12u1)"`, `"17beta1"`);
/// 0 when it says nothing readable.
pub(crate) fn major_version(server_version: &str) -> u32 {
    let digits = server_version.trim_start().split(|c: char| !c.is_ascii_digit()).next().unwrap_or("");
    digits.parse().unwrap_or(0)
}

/// The settings a session may set that would change how pgmux's own statements run, and that the guard
/// turns off: the timeouts (`transaction_timeout` since PostgreSQL 17) and the search path.
fn shielded(major: u32) -> &'static [(&'static str, &'static str)] {
    const SINCE_17: &[(&str, &str)] = &[
        ("transaction_timeout", "0"),
        ("statement_timeout", "0"),
        ("lock_timeout", "0"),
        ("search_path", "pg_catalog, pg_temp"),
    ];
    // `transaction_timeout` ends the session when it fires, so it is the first to go.
    if major >= 17 { SINCE_17 } else { &SINCE_17[1..] }
}

fn begin(sql: &mut String) {
    sql.push_str("BEGIN ISOLATION LEVEL READ COMMITTED;");
}

fn shield(sql: &mut String, major: u32) {
    for (name, value) in shielded(major) {
        sql.push_str(" SET LOCAL ");
        sql.push_str(name);
        sql.push_str(" = ");
        sql.push_str(value);
        sql.push(';');
    }
}

/// `body` (one or more statements, each ending in `;`) as one of pgmux's own: in a transaction of its own at
/// READ COMMITTED, with the session's timeouts and search path turned off for it. `major` is the server's
/// major version. The statements of `body` that change session settings (`set_config(…, false)`, `RESET`)
/// keep their effect after the COMMIT; those that change a timeout should come last, since the rest of the
/// transaction runs under what they set.
pub(crate) fn guarded(body: &str, major: u32) -> String {
    let mut sql = String::with_capacity(body.len() + 160);
    begin(&mut sql);
    shield(&mut sql, major);
    sql.push(' ');
    sql.push_str(body);
    sql.push_str(" COMMIT;");
    sql
}

/// Settings that belong to one transaction, never to a session: `BEGIN ISOLATION LEVEL` sets the first
/// with the source `session`, so a read-back must not take them for the client's.
const TRANSACTION_ONLY: &[&str] = &["transaction_isolation", "transaction_read_only", "transaction_deferrable"];

/// A setting a session may change that `pg_settings` does not show: read back on its own. `none` is what
/// it is until the session sets it.
const ROLE: &str = "role";

/// The statement that reads back what a session has set: the values of the shielded settings and of `role`
/// first (one row, read before the guard turns them off), then every setting whose source is the session,
/// with the value `RESET` would restore. Read with [`ReadBack::parse`]. `end_idle_timeout` takes the
/// session's `idle_session_timeout` off the connection once read.
pub(crate) fn read_back(major: u32, end_idle_timeout: bool) -> String {
    let mut sql = String::with_capacity(512);
    begin(&mut sql);
    sql.push_str(" SELECT ");
    for (name, _) in shielded(major) {
        sql.push_str("pg_catalog.current_setting('");
        sql.push_str(name);
        sql.push_str("'), ");
    }
    sql.push_str("pg_catalog.current_setting('role');");
    shield(&mut sql, major);
    sql.push_str(" SELECT name, setting, reset_val FROM pg_catalog.pg_settings WHERE source = 'session';");
    if end_idle_timeout {
        sql.push_str(" RESET idle_session_timeout;");
    }
    sql.push_str(" COMMIT;");
    sql
}

/// The rows of [`read_back`], turned into the session's own settings.
#[derive(Debug)]
pub(crate) struct ReadBack;

impl ReadBack {
    /// The settings the session has set, each with the value it would be set to elsewhere; `None` if the rows
    /// do not have the shape [`read_back`] asks for.
    pub(crate) fn parse(rows: &[Vec<Option<String>>], major: u32) -> Option<Vec<Param>> {
        let names = shielded(major);
        let (captured, settings) = rows.split_first()?;
        let (role, captured) = captured.split_last()?;
        if captured.len() != names.len() {
            return None;
        }
        let mut out = Vec::with_capacity(settings.len() + 1);
        match role.as_deref() {
            Some("none") => {}
            Some(role) => out.push(Param { name: ROLE.to_owned(), value: role.to_owned() }),
            None => return None,
        }
        for row in settings {
            let [Some(name), Some(setting), reset] = row.as_slice() else { return None };
            if TRANSACTION_ONLY.contains(&name.as_str()) {
                continue;
            }
            match names.iter().position(|(n, _)| n == name) {
                // Shown as the guard set it: the session's own value is the one read before.
                Some(i) => {
                    let own = captured[i].as_ref()?;
                    if !reset.as_deref().is_some_and(|r| same_value(own, r)) {
                        out.push(Param { name: name.clone(), value: own.clone() });
                    }
                }
                None => out.push(Param { name: name.clone(), value: setting.clone() }),
            }
        }
        Some(out)
    }
}

/// Whether a value as `SHOW` prints it (`"1ms"`, `"2min"`, `"0"`, a search path) is the same as one in
/// `pg_settings`' base units (`"1"`, `"120000"`, `"0"`).
fn same_value(shown: &str, base: &str) -> bool {
    if shown == base {
        return true;
    }
    match (params::millis(shown), base.parse::<u64>()) {
        (Some(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Why one of pgmux's own statements got an error reply (the connection is fine either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blame {
    /// A cancel or a timeout that fired before the guard took hold, a lock not granted, a serialization
    /// failure: nothing to do with what the statement asked. The same statement may well work at once.
    Passing,
    /// The server refused what the statement asked: a value a client gave.
    Refused,
}

impl Blame {
    pub(crate) fn of(sqlstate: &str) -> Blame {
        match sqlstate {
            // query_canceled, lock_not_available, serialization_failure, deadlock_detected
            "57014" | "55P03" | "40001" | "40P01" => Blame::Passing,
            _ => Blame::Refused,
        }
    }
}

/// How many times pgmux runs one of its own statements that failed for a passing reason.
pub(crate) const ATTEMPTS: u32 = 4;

#[cfg(test)]
mod tests {
    use super::*;

    fn row(values: &[Option<&str>]) -> Vec<Option<String>> {
        values.iter().map(|v| v.map(str::to_owned)).collect()
    }

    #[test]
    fn major_versions_are_read_from_what_servers_report() {
        assert_eq!(major_version("15.18 (Debian 15.18-0+deb12u1)"), 15);
        assert_eq!(major_version("17beta1"), 17);
        assert_eq!(major_version("16.4"), 16);
        assert_eq!(major_version(""), 0);
        assert_eq!(major_version("devel"), 0);
    }

    #[test]
    fn a_guarded_statement_turns_off_the_session_s_timeouts_and_search_path_first() {
        let sql = guarded("RESET \"work_mem\";", 15);
        assert_eq!(
            sql,
            "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0; \
             SET LOCAL search_path = pg_catalog, pg_temp; RESET \"work_mem\"; COMMIT;"
        );
        let sql = guarded("SELECT 1;", 17);
        assert!(sql.starts_with("BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL transaction_timeout = 0;"), "{sql}");
    }

    #[test]
    fn a_read_back_reads_the_shielded_values_before_it_shields_itself() {
        let sql = read_back(15, false);
        let captured = sql.find("pg_catalog.current_setting('statement_timeout')").unwrap();
        let shield = sql.find("SET LOCAL statement_timeout").unwrap();
        let settings = sql.find("pg_catalog.pg_settings").unwrap();
        assert!(captured < shield && shield < settings, "{sql}");
        assert!(!sql.contains("transaction_timeout"), "PostgreSQL 15 has no transaction_timeout: {sql}");
        assert!(!sql.contains("RESET"), "{sql}");
        assert!(read_back(17, false).contains("current_setting('transaction_timeout')"));
        let ending = read_back(15, true);
        let reset = ending.find("RESET idle_session_timeout").unwrap();
        assert!(settings < reset && ending.ends_with("COMMIT;"), "read first, then taken off: {ending}");
    }

    #[test]
    fn shielded_settings_are_the_session_s_only_when_they_differ_from_the_reset_value() {
        let rows = vec![
            row(&[Some("1ms"), Some("0"), Some("\"$user\", public"), Some("none")]),
            row(&[Some("statement_timeout"), Some("0"), Some("0")]),
            row(&[Some("lock_timeout"), Some("0"), Some("0")]),
            row(&[Some("search_path"), Some("pg_catalog, pg_temp"), Some("\"$user\", public")]),
            row(&[Some("work_mem"), Some("64"), Some("4096")]),
            row(&[Some("transaction_isolation"), Some("read committed"), Some("read committed")]),
        ];
        let got = ReadBack::parse(&rows, 15).unwrap();
        let got: Vec<(&str, &str)> = got.iter().map(|p| (p.name.as_str(), p.value.as_str())).collect();
        assert_eq!(got, [("statement_timeout", "1ms"), ("work_mem", "64")]);
    }

    #[test]
    fn a_shielded_setting_set_to_a_value_other_than_its_reset_value_is_kept_as_shown() {
        let rows = vec![
            row(&[Some("30s"), Some("2min"), Some("alpha"), Some("reporting")]),
            row(&[Some("statement_timeout"), Some("0"), Some("30000")]),
            row(&[Some("lock_timeout"), Some("0"), Some("0")]),
            row(&[Some("search_path"), Some("pg_catalog, pg_temp"), Some("\"$user\", public")]),
        ];
        let got = ReadBack::parse(&rows, 15).unwrap();
        let got: Vec<(&str, &str)> = got.iter().map(|p| (p.name.as_str(), p.value.as_str())).collect();
        // 30s is the role's default (reset_val 30000 ms): not the session's. `role` is not in pg_settings.
        assert_eq!(got, [("role", "reporting"), ("lock_timeout", "2min"), ("search_path", "alpha")]);
    }

    #[test]
    fn rows_of_another_shape_are_refused() {
        assert!(ReadBack::parse(&[], 15).is_none());
        assert!(ReadBack::parse(&[row(&[Some("0"), Some("none")])], 15).is_none());
        let bad = vec![row(&[Some("0"), Some("0"), Some("x"), Some("none")]), row(&[Some("work_mem")])];
        assert!(ReadBack::parse(&bad, 15).is_none());
    }

    #[test]
    fn durations_as_shown_compare_with_base_units() {
        assert!(same_value("0", "0"));
        assert!(same_value("1ms", "1"));
        assert!(same_value("2min", "120000"));
        assert!(same_value("1d", "86400000"));
        assert!(!same_value("1s", "1"));
        assert!(!same_value("alpha", "beta"));
        assert!(!same_value("1fortnight", "1"));
    }

    #[test]
    fn only_cancels_timeouts_and_conflicts_are_passing() {
        assert_eq!(Blame::of("57014"), Blame::Passing);
        assert_eq!(Blame::of("55P03"), Blame::Passing);
        assert_eq!(Blame::of("40001"), Blame::Passing);
        assert_eq!(Blame::of("22023"), Blame::Refused);
        assert_eq!(Blame::of("42704"), Blame::Refused);
    }
}
