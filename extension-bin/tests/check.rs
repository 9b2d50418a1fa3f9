//! `pgmux check`: what it prints for a usable configuration, and the clear failures for each problem.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::{Command, Output};

use pgmux_testkit::{APP_USER, MD5_USER, PgOptions, PgServer, free_port};

fn check(database_url: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pgmux"));
    for (k, _) in std::env::vars() {
        if k.starts_with("PGMUX_") || k.starts_with("AWS_") {
            cmd.env_remove(k);
        }
    }
    cmd.arg("check").env("PGMUX_DATABASE_URL", database_url).env("PGMUX_SSLMODE", "disable");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The value printed after `label`.
fn field(stdout: &str, label: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(label))
        .unwrap_or_else(|| panic!("no {label:?} in {stdout}"))
        .trim()
        .to_owned()
}

#[test]
fn check_prints_the_inputs_the_budget_and_the_limit() {
    let pg = PgServer::start_with(&PgOptions { max_connections: 40, ..Default::default() });
    let out = check(&pg.url(&APP_USER), &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(field(&stdout, "max_connections "), "40");
    assert_eq!(field(&stdout, "superuser_reserved_connections "), "3");
    assert_eq!(field(&stdout, "usable "), "37");
    assert_eq!(field(&stdout, "budget "), "33");
    assert_eq!(field(&stdout, "sees every backend (pg_read_all_stats) "), "yes");
    // The check's own connection stands for this instance's control connection: 33 - 1 = 32.
    assert_eq!(field(&stdout, "pool limit "), "32");
    assert!(stdout.trim_end().ends_with("ok"), "{stdout}");
    assert!(!stdout.contains(APP_USER.password) && !stderr.contains(APP_USER.password), "password shown");

    // pool_max caps every connection pgmux opens, the control connection among them: 5 - 1.
    let capped = check(&pg.url(&APP_USER), &[("PGMUX_POOL_MAX", "5")]);
    assert_eq!(field(&text(&capped).0, "pool limit "), "4");
}

#[test]
fn check_fails_without_the_privilege_to_see_every_backend() {
    let pg = PgServer::start();
    let out = check(&pg.url(&MD5_USER), &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert_eq!(field(&stdout, "sees every backend (pg_read_all_stats) "), "no");
    assert!(stderr.contains("GRANT pg_read_all_stats"), "{stderr}");
}

#[test]
fn check_fails_on_a_budget_of_zero() {
    let pg = PgServer::start_with(&PgOptions { max_connections: 40, ..Default::default() });
    // 1 % of 37 usable connections is none.
    let out = check(&pg.url(&APP_USER), &[("PGMUX_MAX_CONNECTIONS_PERCENT", "1")]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert_eq!(field(&stdout, "budget "), "0");
    assert!(stderr.contains("the budget is zero") && stderr.contains("max_connections_percent"), "{stderr}");
}

#[test]
fn check_fails_when_it_cannot_connect() {
    let url = format!("postgres://someone:pw@127.0.0.1:{}/db", free_port());
    let out = check(&url, &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("cannot connect to the database") && stderr.contains("127.0.0.1"), "{stderr}");
    assert!(!stderr.contains(":pw@"), "password shown: {stderr}");
}
