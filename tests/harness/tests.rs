//! Tests of the harness itself: what integration tests rely on (roles, auth methods, restarts, cleanup).

use std::net::TcpStream;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::psql::psql_as;
use crate::{APP_USER, DATABASE, MD5_USER, PLAIN_USER, PgOptions, PgServer, Role, SUPERUSER, bins};

fn wrong_password(role: &Role) -> Role {
    Role { user: role.user, password: "not-the-password" }
}

#[test]
fn starts_and_answers() {
    let pg = PgServer::start();
    assert_eq!(pg.psql("select 1"), "1");
    assert_eq!(pg.host(), "127.0.0.1");
    assert_eq!(pg.psql("select current_user || ' ' || current_database()"), "postgres pgmux");
    assert!(pg.data_dir().join("PG_VERSION").is_file());
    assert!(pg.log_tail(50).contains("ready to accept connections"), "{}", pg.log_tail(50));
    assert_eq!(pg.url(&APP_USER), format!("postgres://pgmux_app:app-pw-1@127.0.0.1:{}/pgmux", pg.port()));
}

#[test]
fn every_role_logs_in_over_tcp_and_a_wrong_password_fails() {
    let pg = PgServer::start();
    for role in [SUPERUSER, APP_USER, MD5_USER, PLAIN_USER] {
        let who = psql_as(pg.port(), &role, DATABASE, "select current_user").unwrap();
        assert_eq!(who, role.user);
        let err = psql_as(pg.port(), &wrong_password(&role), DATABASE, "select 1").unwrap_err();
        assert!(
            err.contains(&format!("password authentication failed for user \"{}\"", role.user)),
            "{}: {err}",
            role.user
        );
    }
    // Everyone may create tables in the test database.
    for role in [APP_USER, MD5_USER, PLAIN_USER] {
        let sql = format!("create table t_{0} (id int); drop table t_{0}", role.user);
        psql_as(pg.port(), &role, DATABASE, &sql).unwrap();
    }
}

#[test]
fn auth_methods_and_password_storage_are_what_the_roles_claim() {
    let pg = PgServer::start();
    let rules = pg.psql(
        "select type, coalesce(array_to_string(user_name, ','), ''), auth_method, error is null \
         from pg_hba_file_rules order by line_number",
    );
    assert_eq!(
        rules,
        "host|pgmux_md5|md5|t\n\
         host|pgmux_plain|password|t\n\
         host|all|scram-sha-256|t\n\
         host|all|scram-sha-256|t\n\
         local|all|scram-sha-256|t\n\
         host|postgres|scram-sha-256|t"
    );
    let stored = pg.psql(
        "select rolname, split_part(rolpassword, '$', 1), length(rolpassword) from pg_authid \
         where rolname like 'pgmux%' order by 1",
    );
    let lines: Vec<&str> = stored.lines().collect();
    assert_eq!(lines[0].rsplit_once('|').unwrap().0, "pgmux_app|SCRAM-SHA-256", "{stored}");
    assert!(lines[1].starts_with("pgmux_md5|md5") && lines[1].ends_with("|35"), "{stored}");
    assert_eq!(lines[2].rsplit_once('|').unwrap().0, "pgmux_plain|SCRAM-SHA-256", "{stored}");
    assert_eq!(pg.psql("select rolpassword like 'md5%' from pg_authid where rolname = 'pgmux_md5'"), "t");
    assert_eq!(pg.psql("select pg_get_userbyid(datdba) from pg_database where datname = 'pgmux'"), "pgmux_app");
    assert_eq!(pg.psql("select pg_has_role('pgmux_app', 'pg_monitor', 'member')"), "t");
}

#[test]
fn app_user_sees_other_users_queries() {
    let pg = PgServer::start();
    let port = pg.port();
    let sleeper = thread::spawn(move || psql_as(port, &MD5_USER, DATABASE, "select pg_sleep(1.5)"));
    // Without pg_monitor the query column of another user's session reads "<insufficient privilege>".
    let sql = "select query from pg_stat_activity where usename = 'pgmux_md5'";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = psql_as(port, &APP_USER, DATABASE, sql).unwrap();
        if seen == "select pg_sleep(1.5)" {
            break;
        }
        assert!(Instant::now() < deadline, "pgmux_app never saw the other session: {seen:?}");
        thread::sleep(Duration::from_millis(50));
    }
    sleeper.join().unwrap().unwrap();
}

#[test]
fn trust_loopback_lets_every_role_in_without_a_password_until_a_restart_without_it() {
    let mut pg = PgServer::start_with(&PgOptions { trust_loopback: true, ..PgOptions::default() });
    for role in [SUPERUSER, APP_USER, MD5_USER, PLAIN_USER] {
        let who = psql_as(pg.port(), &wrong_password(&role), DATABASE, "select current_user").unwrap();
        assert_eq!(who, role.user);
    }
    pg.restart_with(&PgOptions::default());
    let err = psql_as(pg.port(), &wrong_password(&APP_USER), DATABASE, "select 1").unwrap_err();
    assert!(err.contains("password authentication failed"), "{err}");
}

#[test]
fn restart_with_changes_settings_and_keeps_port_and_data() {
    let mut pg = PgServer::start();
    assert_eq!(pg.psql("show max_connections"), "100");
    pg.psql("create table kept (v text); insert into kept values ('still here')");
    let (port, data) = (pg.port(), pg.data_dir().to_owned());

    pg.restart_with(&PgOptions {
        max_connections: 37,
        extra_conf: vec![("work_mem".into(), "7MB".into())],
        ..PgOptions::default()
    });
    assert_eq!((pg.port(), pg.data_dir()), (port, data.as_path()));
    assert_eq!(pg.psql("show max_connections"), "37");
    assert_eq!(pg.psql("show work_mem"), "7MB");
    assert_eq!(pg.psql("select v from kept"), "still here");

    pg.stop();
    pg.stop(); // idempotent
    assert!(pg.try_psql("select 1").is_err());
    pg.restart_with(&PgOptions::default());
    assert_eq!(pg.psql("show max_connections"), "100");
}

#[test]
fn drop_stops_the_server_and_removes_its_directory() {
    let pg = PgServer::start_with(&PgOptions {
        max_connections: 20,
        extra_conf: vec![("application_name".into(), "harness test".into())],
        ..PgOptions::default()
    });
    assert_eq!(pg.psql("show max_connections"), "20");
    let port = pg.port();
    let dir = pg.data_dir().parent().unwrap().to_owned();
    assert!(dir.is_dir());
    drop(pg);
    assert!(!dir.exists(), "{} still exists", dir.display());
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err(), "port {port} still accepts connections");
}

#[test]
fn two_servers_at_once_are_independent() {
    let a = PgServer::start();
    let b = PgServer::start_with(&PgOptions { max_connections: 50, ..PgOptions::default() });
    assert_ne!(a.port(), b.port());
    assert_ne!(a.data_dir(), b.data_dir());
    a.psql("create table only_in_a (id int)");
    assert_eq!(a.psql("select count(*) from pg_tables where tablename = 'only_in_a'"), "1");
    assert_eq!(b.psql("select count(*) from pg_tables where tablename = 'only_in_a'"), "0");
    assert_eq!((a.psql("show max_connections"), b.psql("show max_connections")), ("100".into(), "50".into()));
}

#[test]
fn psql_reports_errors() {
    let pg = PgServer::start();
    let err = pg.try_psql("select 1; select * from no_such_table; select 2").unwrap_err();
    assert!(err.contains("relation \"no_such_table\" does not exist"), "{err}");
    // Statements run one by one (CREATE DATABASE cannot run inside a multi-statement transaction).
    assert_eq!(pg.psql("create database other; select 1 + 1"), "2");
}

#[test]
fn missing_binaries_name_what_to_install() {
    let err = bins::find_bin_dir(Some("/nonexistent/pg/bin".into()), Path::new("/usr/lib/postgresql")).unwrap_err();
    assert!(err.contains("PGMUX_PG_BIN=/nonexistent/pg/bin"), "{err}");
    assert!(err.contains("apt-get install postgresql-15"), "{err}");
    assert!(err.contains("(initdb, postgres)"), "{err}");
    let found = bins::find_bin_dir(None, Path::new("/usr/lib/postgresql")).unwrap();
    assert!(found.join("initdb").is_file());
}

#[test]
fn dates() {
    use crate::utc_timestamp;
    assert_eq!(utc_timestamp(0), "1970-01-01 00:00 UTC");
    assert_eq!(utc_timestamp(951_782_400 + 3_660), "2000-02-29 01:01 UTC");
    assert_eq!(utc_timestamp(1_700_000_000), "2023-11-14 22:13 UTC");
}
