//! Every setting a client may `SET`, at a hostile value, through pgmux: the setting stays with its client
//! across 20 transactions on a busy pool, no other client ever sees it, and pgmux's own statements (applying
//! a client's parameters, reading back what it set, liveness checks) still succeed under it. What "stays with
//! its client" means is what PostgreSQL itself does with the same `SET` on a direct connection: the same
//! value afterwards, the same refusal, or the same end of the session.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pgmux_metrics::ServerCloseReason;
use pgmux_testkit::{APP_USER, PgOptions};
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::common;

/// Transactions the client that set the value runs afterwards.
const ROUNDS: usize = 20;
/// Other clients on the same two server connections, each asking the same setting all the while.
const BUSY_CLIENTS: usize = 3;
/// How long a client waits after its `SET` before the first transaction: a session timeout that ends an
/// idle session has ended it by then.
const PAUSE: Duration = Duration::from_millis(40);

/// A role the application user may `SET ROLE` to, with no rights on anything.
const NO_RIGHTS: &str = "pgmux_norights";

/// What a `SET` leads to in a session of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    /// Accepted; `SHOW` then says this.
    Shows(String),
    /// Refused with this SQLSTATE.
    Refused(String),
    /// Accepted, and the session ended soon after (a timeout that ends idle sessions).
    Ended,
}

/// One row of `pg_settings` a client may change.
#[derive(Debug)]
struct Setting {
    name: String,
    vartype: String,
    reset: String,
    min: Option<String>,
    max: Option<String>,
    enumvals: Vec<String>,
}

/// The values to try for a setting: the smallest timeout, the other boolean, the first other choice, the
/// lowest number, or a value chosen by hand for the strings. An empty list means no rule covers the setting,
/// which fails the test (a new PostgreSQL setting needs a value chosen here).
fn hostile(s: &Setting) -> Vec<String> {
    let by_hand: &[(&str, &[&str])] = &[
        ("DateStyle", &["SQL, DMY"]),
        ("TimeZone", &["Pacific/Chatham"]),
        ("application_name", &["hostile 'app'"]),
        ("client_encoding", &["LATIN1"]),
        ("default_table_access_method", &["pgmux_missing_am"]),
        ("default_tablespace", &["pgmux_missing_tablespace"]),
        ("default_text_search_config", &["pg_catalog.simple"]),
        ("lc_monetary", &["C"]),
        ("lc_numeric", &["C"]),
        ("lc_time", &["C"]),
        ("local_preload_libraries", &["pgmux_missing_library"]),
        ("restrict_nonsystem_relation_kind", &["view, foreign-table"]),
        ("search_path", &["pgmux_missing_schema", ""]),
        ("temp_tablespaces", &["pgmux_missing_tablespace"]),
        ("timezone_abbreviations", &["India"]),
        ("role", &[NO_RIGHTS]),
    ];
    if let Some((_, values)) = by_hand.iter().find(|(n, _)| *n == s.name) {
        return values.iter().map(|v| v.to_string()).collect();
    }
    match s.vartype.as_str() {
        "bool" => vec![if s.reset == "on" { "off" } else { "on" }.to_owned()],
        "enum" => s.enumvals.iter().find(|v| **v != s.reset).cloned().into_iter().collect(),
        "integer" => match s.min.as_deref() {
            // The smallest value that does something: a timeout of 1 ms rather than 0 (off).
            Some(min) if min == s.reset => vec![(min.parse::<i64>().unwrap_or(0) + 1).to_string()],
            Some(min) => vec![min.to_owned()],
            None => Vec::new(),
        },
        "real" => match (s.min.as_deref(), s.max.as_deref()) {
            (Some(min), Some(max)) if min == s.reset => vec![max.to_owned()],
            (Some(min), _) => vec![min.to_owned()],
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

fn literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

fn set_statement(name: &str, value: &str) -> String {
    format!("SET {name} TO {}", literal(value))
}

/// The single value of a `SHOW`.
async fn show(client: &Client, name: &str) -> Result<String, tokio_postgres::Error> {
    for message in client.simple_query(&format!("SHOW {name}")).await? {
        if let SimpleQueryMessage::Row(row) = message {
            return Ok(row.get(0).unwrap_or_default().to_owned());
        }
    }
    Ok(String::new())
}

/// A `SHOW`, asked again while the session's own `statement_timeout` cancels it (57014: PostgreSQL does that
/// to the client's own statements too). `Err` carries what ended it otherwise.
async fn show_own(client: &Client, name: &str) -> Result<String, tokio_postgres::Error> {
    let mut tries = 0;
    loop {
        match show(client, name).await {
            Err(e) if e.code().is_some_and(|c| c.code() == "57014") && tries < 20 => tries += 1,
            other => return other,
        }
    }
}

/// Whether an error is pgmux's word that the server connection went before it read back the settings the
/// client's last transaction changed.
fn lost_settings(err: &tokio_postgres::Error) -> bool {
    err.as_db_error().is_some_and(|e| {
        e.code().code() == "08006" && e.message().contains("before pgmux could read back the settings")
    })
}

/// Whether an error ended the session (the server said so, or the connection is gone).
fn ended(client: &Client, err: &tokio_postgres::Error) -> bool {
    client.is_closed() || err.code().is_some_and(|c| c.code().starts_with("57P"))
}

/// `SET name = value` in a fresh session of its own, then, after [`PAUSE`], `rounds` transactions that
/// each ask the value: the outcome, or what went wrong (a value that changed, an error no direct session
/// gives).
async fn set_then_show(client: Client, name: &str, value: &str, rounds: usize) -> Result<Outcome, String> {
    if let Err(e) = client.simple_query(&set_statement(name, value)).await {
        return Ok(Outcome::Refused(e.code().map_or_else(|| format!("{e}"), |c| c.code().to_owned())));
    }
    tokio::time::sleep(PAUSE).await;
    let first = match show_own(&client, name).await {
        Ok(v) => v,
        Err(e) if ended(&client, &e) => return Ok(Outcome::Ended),
        // A 1 ms idle_session_timeout can end the server's session before pgmux has read the setting back
        // (on a loaded host pgmux is more than a millisecond late): the client is told its settings are gone
        // (08006, "SET them again"), not left with a setting silently lost; directly, the session ends.
        Err(e) if name == "idle_session_timeout" && lost_settings(&e) => return Ok(Outcome::Ended),
        Err(e) => return Err(format!("first SHOW failed: {e:?}")),
    };
    for round in 1..rounds {
        match show_own(&client, name).await {
            Ok(v) if v == first => {}
            Ok(v) => return Err(format!("transaction {round} shows {v:?}, the first showed {first:?}")),
            Err(e) => return Err(format!("transaction {round} failed: {e:?}")),
        }
    }
    Ok(Outcome::Shows(first))
}

/// What one setting at one value did through pgmux, when it was not what PostgreSQL does.
async fn check_one(fx: &common::Fixture, direct_addr: std::net::SocketAddr, name: &str, value: &str) -> Option<String> {
    let direct = common::connect(direct_addr, &APP_USER, |_| {}).await.expect("connect directly");
    let expected = match set_then_show(direct, name, value, 1).await {
        Ok(outcome) => outcome,
        Err(e) => return Some(format!("directly: {e}")),
    };
    // Busy clients ask the same setting on the same two server connections all the while: each must keep
    // seeing what it saw before.
    let stop = Arc::new(AtomicBool::new(false));
    let mut busy = Vec::new();
    for _ in 0..BUSY_CLIENTS {
        let client = fx.client().await;
        let own = show(&client, name).await.expect("a busy client's own value");
        let (stop, name) = (Arc::clone(&stop), name.to_owned());
        busy.push(tokio::spawn(async move {
            let mut asked = 0;
            while !stop.load(Ordering::Relaxed) || asked < 3 {
                match show(&client, &name).await {
                    Ok(v) if v == own => asked += 1,
                    Ok(v) => return Err(format!("another client saw {v:?} (its own is {own:?})")),
                    Err(e) => return Err(format!("another client got an error: {e:?}")),
                }
            }
            Ok(asked)
        }));
    }
    let through = set_then_show(fx.client().await, name, value, ROUNDS).await;
    stop.store(true, Ordering::Relaxed);
    let mut problems = Vec::new();
    match through {
        Ok(got) if got == expected => {}
        Ok(got) => problems.push(format!("through pgmux {got:?}, directly {expected:?}")),
        Err(e) => problems.push(format!("through pgmux: {e} (directly {expected:?})")),
    }
    for task in busy {
        if let Err(e) = task.await.expect("a busy client's task") {
            problems.push(e);
        }
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// Server connections pgmux closed because something failed (not for age, idleness or a limit).
fn failed_connections(fx: &common::Fixture) -> u64 {
    failed_closes(fx.proxy.as_ref().expect("proxy running").admin())
}

fn failed_closes(admin: &pgmux_proxy::Admin) -> u64 {
    let closed = admin.metrics().server_closed;
    [ServerCloseReason::Broken, ServerCloseReason::ResetFailed]
        .iter()
        .map(|reason| pgmux_metrics::value_of(&closed, *reason))
        .sum()
}

async fn user_settings(oracle: &Client) -> Vec<Setting> {
    let rows = oracle
        .query(
            "select name, vartype, reset_val, min_val, max_val, coalesce(enumvals, '{}') \
             from pg_settings where context = 'user' order by name",
            &[],
        )
        .await
        .expect("pg_settings");
    let mut settings: Vec<Setting> = rows
        .iter()
        .map(|r| Setting {
            name: r.get(0),
            vartype: r.get(1),
            reset: r.get(2),
            min: r.get(3),
            max: r.get(4),
            enumvals: r.get(5),
        })
        .collect();
    // `role` is a session setting PostgreSQL keeps out of pg_settings.
    settings.push(Setting {
        name: "role".into(),
        vartype: "string".into(),
        reset: "none".into(),
        min: None,
        max: None,
        enumvals: Vec::new(),
    });
    settings
}

/// The sweep. Clients log in without a password (trust, on both sides), so that the ~140 settings take
/// seconds rather than a debug build's SCRAM time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_setting_a_client_may_set_stays_with_it_at_a_hostile_value() {
    let opts = PgOptions { trust_loopback: true, ..PgOptions::default() };
    // Every idle connection is checked with a round trip before it is lent, under whatever it carries.
    let fx = common::start_with(opts, "pool_max = 2\nclient_auth = \"trust\"\nserver_check_delay = \"1ms\"").await;
    let oracle = common::direct(&fx.pg).await;
    oracle
        .batch_execute(&format!(
            "create role {NO_RIGHTS} nologin; grant {NO_RIGHTS} to {}; \
             revoke all on schema public from {NO_RIGHTS}",
            APP_USER.user
        ))
        .await
        .expect("a role without rights");
    let direct_addr = format!("127.0.0.1:{}", fx.pg.port()).parse().expect("address");
    let settings = user_settings(&oracle).await;
    assert!(settings.len() > 100, "only {} settings a client may SET?", settings.len());

    let mut problems = BTreeMap::new();
    let mut tried = 0;
    let mut failed = 0;
    for setting in &settings {
        let values = hostile(setting);
        if values.is_empty() {
            problems.insert(setting.name.clone(), "no hostile value is chosen for it in this test".to_owned());
        }
        for value in values {
            tried += 1;
            let before = failed_connections(&fx);
            let problem = check_one(&fx, direct_addr, &setting.name, &value).await;
            // A 1 ms idle_session_timeout may end the client's server connection in the moment between its
            // ReadyForQuery and pgmux taking the setting off: the server closing its own session, as the
            // client asked, not a statement of pgmux's failing. Its client is ended as a direct one would be
            // (checked above); every other setting must cost no connection.
            if setting.name != "idle_session_timeout" {
                failed += failed_connections(&fx) - before;
            }
            if let Some(problem) = problem {
                problems.insert(format!("{} = {value:?}", setting.name), problem);
            }
        }
    }
    // pgmux's own statements never cost a connection.
    let report: Vec<String> = problems.iter().map(|(k, v)| format!("  {k}: {v}")).collect();
    assert!(
        report.is_empty() && failed == 0,
        "{} of {tried} settings misbehaved through pgmux, and pgmux closed {failed} server connections after a \
         failure:\n{}",
        report.len(),
        report.join("\n")
    );
}

/// The case found from outside: `SET statement_timeout = '1ms'` on a fresh pgmux, where the first read of
/// `pg_settings` on a new server connection takes longer than a millisecond (its catalog entries are not
/// cached yet). pgmux read the setting back under the client's own timeout, was cancelled, and dropped the
/// connection and the setting: `SHOW` said 0. Each round uses a pool that has never read settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_millisecond_statement_timeout_outlives_pgmux_reading_it_back() {
    let opts = PgOptions { trust_loopback: true, ..PgOptions::default() };
    let mut fx = common::start_with(opts, "pool_max = 1\nclient_auth = \"trust\"").await;
    for round in 0..5 {
        if round > 0 {
            // A pool of new server connections, cold.
            fx.proxy.take().expect("proxy running").shutdown().await;
            fx.proxy = Some(
                pgmux_proxy::Listener::start(common::config(&fx.pg, "pool_max = 1\nclient_auth = \"trust\""))
                    .await
                    .expect("restart pgmux"),
            );
        }
        let client = fx.client().await;
        client.batch_execute("SET statement_timeout = '1ms'").await.expect("SET");
        for _ in 0..3 {
            assert_eq!(show_own(&client, "statement_timeout").await.expect("SHOW"), "1ms", "round {round}");
        }
        assert_eq!(failed_connections(&fx), 0, "round {round}: pgmux closed a connection after its own statement");
    }
}

/// pgmux's read-back waits for a lock on `pg_settings` instead of failing at once under the client's
/// `lock_timeout`; the client keeps its settings and its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_timeout_does_not_cut_short_pgmux_reading_settings_back() {
    let fx = common::start("pool_max = 1").await;
    let oracle = common::direct(&fx.pg).await;
    let client = fx.client().await;
    client.batch_execute("SET lock_timeout = '1ms'").await.expect("SET");
    oracle.batch_execute("begin; lock table pg_catalog.pg_settings in access exclusive mode").await.expect("lock");
    let changed = tokio::spawn(async move {
        // The read-back after this transaction meets the lock.
        client.batch_execute("SET work_mem = '64kB'").await.expect("SET work_mem");
        client
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    oracle.batch_execute("rollback").await.expect("unlock");
    let client = changed.await.expect("the client's task");
    assert_eq!(show(&client, "work_mem").await.expect("SHOW"), "64kB");
    assert_eq!(show(&client, "lock_timeout").await.expect("SHOW"), "1ms");
    assert_eq!(failed_connections(&fx), 0, "pgmux closed a connection after its own statement");
}

/// Settings the database or the role carries (`ALTER ROLE … SET`) apply to pgmux's own connections too:
/// a 1 ms `statement_timeout`, a `search_path` without `pg_catalog`, `serializable` by default. The control
/// connection still reads the budget, and clients still get parameters applied and read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_of_the_role_do_not_cut_pgmux_s_own_statements_short() {
    let opts = PgOptions { trust_loopback: true, ..PgOptions::default() };
    let pg = tokio::task::spawn_blocking(move || pgmux_testkit::PgServer::start_with(&opts)).await.expect("start");
    let oracle = common::direct(&pg).await;
    oracle
        .batch_execute(&format!(
            "create schema shadow; alter role {user} set statement_timeout = '1ms'; \
             alter role {user} set search_path = shadow; \
             alter role {user} set default_transaction_isolation = 'serializable'",
            user = APP_USER.user
        ))
        .await
        .expect("role settings");
    let config = common::config(
        &pg,
        "pool_max = 3\nmax_connections_percent = 50\npool_sizing_interval = \"200ms\"\nclient_auth = \"trust\"",
    );
    let proxy = pgmux_proxy::Listener::start(config).await.expect("start pgmux");
    let admin = proxy.admin().clone();
    let read = common::eventually(Duration::from_secs(10), || {
        let admin = admin.clone();
        async move { admin.metrics().pool_budget > 0 }
    })
    .await;
    assert!(read, "the control connection never read a budget under the role's settings");
    let client = common::connect(proxy.addr, &APP_USER, |c| {
        c.options("-c work_mem=64kB");
    })
    .await
    .expect("connect");
    client.batch_execute("SET lock_timeout = '2s'").await.expect("SET");
    for _ in 0..5 {
        assert_eq!(show_own(&client, "work_mem").await.expect("SHOW"), "64kB");
        assert_eq!(show_own(&client, "lock_timeout").await.expect("SHOW"), "2s");
    }
    assert_eq!(failed_closes(&admin), 0, "pgmux closed connections after its own statements failed");
    proxy.shutdown().await;
}
