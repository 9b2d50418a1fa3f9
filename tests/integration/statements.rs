//! Prepared statements and session state under transaction pooling: named statements across transactions
//! and servers, name collisions, the unnamed statement across Sync units, DEALLOCATE and DISCARD, stale
//! plans, eviction, session settings that follow their client, and pinning.

use std::time::Duration;

use pgmux_testkit::APP_USER;
use pgmux_testkit::wire::{cstr, msg};

use crate::common::{self, scalar};
use crate::protocol::RawClient;

fn parse(name: &str, sql: &str) -> Vec<u8> {
    msg(b'P', &[cstr(name), cstr(sql), vec![0, 0]].concat())
}

fn bind_execute_sync(name: &str) -> Vec<u8> {
    let mut v = msg(b'B', &[cstr(""), cstr(name), vec![0, 0, 0, 0, 0, 0]].concat());
    v.extend(msg(b'E', &[cstr(""), vec![0, 0, 0, 0]].concat()));
    v.extend(msg(b'S', &[]));
    v
}

fn sync() -> Vec<u8> {
    msg(b'S', &[])
}

/// The first DataRow's first column, or the SQLSTATE of an error, from a reply up to ReadyForQuery.
fn outcome(reply: &[(u8, Vec<u8>)]) -> String {
    for (tag, body) in reply {
        match tag {
            b'D' => return String::from_utf8_lossy(&body[6..]).into_owned(),
            b'E' => {
                let code = body.split(|&b| b == 0).find(|f| f.first() == Some(&b'C')).unwrap_or(b"C?");
                return format!("error {}", String::from_utf8_lossy(&code[1..]));
            }
            _ => {}
        }
    }
    "no row".into()
}

async fn trust(extra: &str) -> common::Fixture {
    common::start(&format!("client_auth = \"trust\"\n{extra}")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_statements_work_across_transactions_and_servers() {
    // tokio-postgres `query` prepares a named statement per call, in its own Sync unit, outside any
    // transaction: Parse+Describe+Sync, Bind+Execute+Sync, Close+Sync, each may land on another server.
    let fx = common::start("pool_max = 2").await;
    let mut tasks = Vec::new();
    for client in 0..8i32 {
        let addr = fx.addr();
        tasks.push(tokio::spawn(async move {
            let c = common::connect(addr, &pgmux_testkit::APP_USER, |_| {}).await.unwrap();
            for i in 0..40i32 {
                let sql = if i % 2 == 0 { "select $1::int4 + 1000" } else { "select $1::int4 * 2" };
                let v: i32 = c.query_one(sql, &[&(client * 100 + i)]).await.unwrap().get(0);
                let expected = if i % 2 == 0 { client * 100 + i + 1000 } else { (client * 100 + i) * 2 };
                assert_eq!(v, expected);
            }
            // The same statement reused many times.
            let stmt = c.prepare("select $1::text || '!'").await.unwrap();
            for i in 0..40 {
                let v: String = c.query_one(&stmt, &[&i.to_string()]).await.unwrap().get(0);
                assert_eq!(v, format!("{i}!"));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_name_from_two_clients_means_each_its_own_sql() {
    let fx = trust("pool_max = 1").await;
    let mut a = RawClient::connect(fx.addr()).await;
    let mut b = RawClient::connect(fx.addr()).await;
    a.send(&[parse("s1", "select 'from a'"), sync()].concat()).await;
    a.until_ready().await;
    b.send(&[parse("s1", "select 'from b'"), sync()].concat()).await;
    b.until_ready().await;
    for _ in 0..5 {
        a.send(&bind_execute_sync("s1")).await;
        assert_eq!(outcome(&a.until_ready().await), "from a");
        b.send(&bind_execute_sync("s1")).await;
        assert_eq!(outcome(&b.until_ready().await), "from b");
    }
    // The same name and the same SQL from unrelated clients (pgx's stmtcache_<sha>) share one statement.
    let mut c = RawClient::connect(fx.addr()).await;
    c.send(&[parse("s1", "select 'from a'"), sync()].concat()).await;
    assert_eq!(c.until_ready().await.first().map(|m| m.0), Some(b'1'));
    c.send(&bind_execute_sync("s1")).await;
    assert_eq!(outcome(&c.until_ready().await), "from a");
    let oracle = common::direct(&fx.pg).await;
    let prepared = scalar(
        &oracle,
        "select count(*) from pg_stat_activity where usename = 'pgmux_app' and backend_type = 'client backend'",
    )
    .await;
    assert_eq!(prepared, "1", "all of it on one server connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_name_parsed_again_gets_42p05_and_the_session_goes_on() {
    let fx = trust("").await;
    let mut a = RawClient::connect(fx.addr()).await;
    a.send(&[parse("dup", "select 1"), sync()].concat()).await;
    a.until_ready().await;
    // Inside a unit with a server linked: the error comes in order, the rest of the unit is skipped.
    a.send(&[parse("dup", "select 2"), bind_execute_sync("dup")].concat()).await;
    let reply = a.until_ready().await;
    assert_eq!(outcome(&reply), "error 42P05");
    assert!(!reply.iter().any(|m| m.0 == b'D'), "the Bind after the failed Parse must not run: {reply:?}");
    a.send(&bind_execute_sync("dup")).await;
    assert_eq!(outcome(&a.until_ready().await), "1", "the first statement is still there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_parse_leaves_no_name_behind() {
    let fx = trust("").await;
    let mut a = RawClient::connect(fx.addr()).await;
    a.send(&[parse("bad", "selec 1"), sync()].concat()).await;
    assert_eq!(outcome(&a.until_ready().await), "error 42601");
    a.send(&[parse("bad", "select 'fixed'"), bind_execute_sync("bad")].concat()).await;
    assert_eq!(outcome(&a.until_ready().await), "fixed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unnamed_statement_survives_across_sync_units() {
    // sqlx persistent(false) / pgx describe_exec: Parse('') + Describe + Sync, then Bind('') + Execute + Sync.
    let fx = trust("pool_max = 1").await;
    let addr = fx.addr();
    let noise = tokio::spawn(async move {
        let mut n = RawClient::connect(addr).await;
        for i in 0..200 {
            n.send(&[parse("", &format!("select {i}")), bind_execute_sync("")].concat()).await;
            n.until_ready().await;
        }
    });
    let mut a = RawClient::connect(fx.addr()).await;
    for round in 0..30 {
        let describe = msg(b'D', &[vec![b'S'], cstr("")].concat());
        a.send(&[parse("", &format!("select 'mine {round}'")), describe, sync()].concat()).await;
        a.until_ready().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
        a.send(&bind_execute_sync("")).await;
        assert_eq!(outcome(&a.until_ready().await), format!("mine {round}"));
    }
    noise.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_deallocate_and_discard_drop_only_the_clients_names() {
    let fx = trust("pool_max = 1").await;
    let mut a = RawClient::connect(fx.addr()).await;
    let mut b = RawClient::connect(fx.addr()).await;
    for c in [&mut a, &mut b] {
        c.send(&[parse("s", "select 'shared'"), sync()].concat()).await;
        c.until_ready().await;
    }
    // A closes its name (answered CloseComplete in order); B's statement keeps working.
    let close = msg(b'C', &[vec![b'S'], cstr("s")].concat());
    a.send(&[close, sync()].concat()).await;
    let reply: String = a.until_ready().await.iter().map(|m| m.0 as char).collect();
    assert_eq!(reply, "3Z");
    b.send(&bind_execute_sync("s")).await;
    assert_eq!(outcome(&b.until_ready().await), "shared");
    a.send(&bind_execute_sync("s")).await;
    assert_eq!(outcome(&a.until_ready().await), "error 26000", "A's name is gone, as in PostgreSQL");
    // A reuses the name for other SQL.
    a.send(&[parse("s", "select 'new'"), bind_execute_sync("s")].concat()).await;
    assert_eq!(outcome(&a.until_ready().await), "new");
    // DEALLOCATE ALL and DISCARD ALL from B clear B's names; A is unaffected.
    b.send_query("DEALLOCATE ALL").await;
    b.until_ready().await;
    b.send(&bind_execute_sync("s")).await;
    assert_eq!(outcome(&b.until_ready().await), "error 26000");
    a.send(&bind_execute_sync("s")).await;
    assert_eq!(outcome(&a.until_ready().await), "new", "re-prepared on the server for A");
    a.send_query("DISCARD ALL").await;
    a.until_ready().await;
    a.send(&bind_execute_sync("s")).await;
    assert_eq!(outcome(&a.until_ready().await), "error 26000");
    // SQL DEALLOCATE of a protocol-level name (psycopg 3 with an older libpq) is answered here.
    b.send(&[parse("_pg3_0", "select 'x'"), sync()].concat()).await;
    b.until_ready().await;
    b.send_query("DEALLOCATE _pg3_0").await;
    let reply = b.until_ready().await;
    assert_eq!(reply.first().map(|m| m.0), Some(b'C'), "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_plan_after_ddl_is_re_prepared() {
    let fx = trust("pool_max = 1").await;
    let setup = fx.client().await;
    setup.batch_execute("create table shape (a int); insert into shape values (1)").await.unwrap();
    let mut a = RawClient::connect(fx.addr()).await;
    a.send(&[parse("q", "select * from shape"), bind_execute_sync("q")].concat()).await;
    assert_eq!(outcome(&a.until_ready().await), "1");
    setup.batch_execute("alter table shape add column b int default 2").await.unwrap();
    a.send(&bind_execute_sync("q")).await;
    assert_eq!(outcome(&a.until_ready().await), "error 0A000", "PostgreSQL's own error, once");
    a.send(&bind_execute_sync("q")).await;
    let reply = a.until_ready().await;
    let row = reply.iter().find(|m| m.0 == b'D').expect("a row after re-preparing");
    assert_eq!(row.1[..2], [0, 2], "the new plan has both columns");
}

/// tokio-postgres's answer to using a prepared statement: its column count, or the SQLSTATE and message.
async fn run(c: &tokio_postgres::Client, stmt: &tokio_postgres::Statement) -> Result<usize, (String, String)> {
    match c.query_one(stmt, &[]).await {
        Ok(row) => Ok(row.len()),
        Err(e) => Err((common::code(&e), common::message(&e))),
    }
}

fn stale() -> Result<usize, (String, String)> {
    Err(("0A000".into(), "cached plan must not change result type".into()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_alter_table_each_client_gets_0a000_on_whichever_server_and_its_driver_recovers() {
    // What PostgreSQL says to a client on its own connection after ALTER TABLE changes a prepared SELECT *:
    // 0A000 on each use, until the client prepares it again. Through pgmux, on a server that had the
    // statement (PostgreSQL says it), and on one that had not (pgmux prepares it there anew and must say it).
    let fx = common::start("pool_max = 2").await;
    let oracle = common::direct(&fx.pg).await;
    oracle
        .batch_execute("create table shape (a int); insert into shape values (1); alter table shape owner to pgmux_app")
        .await
        .unwrap();
    let (a, b) = (fx.client().await, fx.client().await);
    let sql = "select * from shape";
    let sa = a.prepare(sql).await.unwrap();
    assert_eq!(run(&a, &sa).await, Ok(1));
    let sb = b.prepare(sql).await.unwrap();
    assert_eq!(run(&b, &sb).await, Ok(1));
    assert_eq!(common::pgmux_backends(&oracle).await, 1, "one server connection had it all");
    let had = scalar(&a, "select pg_backend_pid()").await;

    oracle.batch_execute("alter table shape add column b int default 2").await.unwrap();
    // A, on the server that had the statement: PostgreSQL's own error.
    assert_eq!(run(&a, &sa).await, stale());
    // B, on a server that never had it (A holds the first in a transaction): pgmux prepares it there, sees
    // that it now returns two columns, and answers as PostgreSQL would have.
    a.batch_execute("begin").await.unwrap();
    assert_eq!(scalar(&a, "select pg_backend_pid()").await, had);
    assert_eq!(run(&b, &sb).await, stale());
    assert_ne!(scalar(&b, "select pg_backend_pid()").await, had, "B was on the other server");
    // Each use fails until the client prepares again; inside A's transaction, the transaction fails with it.
    assert_eq!(run(&b, &sb).await, stale());
    assert_eq!(run(&a, &sa).await, stale());
    let aborted = a.simple_query("select 1").await.unwrap_err();
    assert_eq!(common::code(&aborted), "25P02", "the transaction failed, as in PostgreSQL");
    a.batch_execute("rollback").await.unwrap();
    // The drivers prepare again and see the new column, on either server.
    for c in [&a, &b] {
        let again = c.prepare(sql).await.unwrap();
        assert_eq!(again.columns().len(), 2);
        for _ in 0..3 {
            let row = c.query_one(&again, &[]).await.unwrap();
            assert_eq!((row.get::<_, i32>(0), row.get::<_, i32>(1)), (1, 2));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_prepared_anew_after_ddl_is_refused_before_it_runs() {
    let fx = common::start("pool_max = 2").await;
    let oracle = common::direct(&fx.pg).await;
    oracle.batch_execute("create table ledger (id int); alter table ledger owner to pgmux_app").await.unwrap();
    let (a, b) = (fx.client().await, fx.client().await);
    let insert = "insert into ledger (id) values ($1) returning *";
    let ia = a.prepare(insert).await.unwrap();
    a.query_one(&ia, &[&1i32]).await.unwrap();
    let ib = b.prepare(insert).await.unwrap();
    b.query_one(&ib, &[&2i32]).await.unwrap();
    assert_eq!(common::pgmux_backends(&oracle).await, 1);

    oracle.batch_execute("alter table ledger add column note text default 'x'").await.unwrap();
    // B lands on a server that never had the statement: it must be refused without the row being written.
    a.batch_execute("begin").await.unwrap();
    let err = b.query_one(&ib, &[&3i32]).await.unwrap_err();
    assert_eq!((common::code(&err), common::message(&err)), (stale().unwrap_err()));
    a.batch_execute("commit").await.unwrap();
    let ids: Vec<i32> =
        oracle.query("select id from ledger order by id", &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(ids, [1, 2], "the refused insert did not run");
    // Prepared again, it writes and returns the new column.
    let again = b.prepare(insert).await.unwrap();
    let row = b.query_one(&again, &[&3i32]).await.unwrap();
    assert_eq!(row.get::<_, String>(1), "x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_text_over_each_sessions_own_temporary_table_is_never_refused() {
    // Two pinned clients, each with a temporary table of another shape under one name: one text, two
    // shapes, both right. pgmux must not take one for the other's stale plan.
    let fx = common::start("pool_max = 2").await;
    let (a, b) = (fx.client().await, fx.client().await);
    a.batch_execute("create temp table scratch (x int); insert into scratch values (1)").await.unwrap();
    b.batch_execute("create temp table scratch (x int, y int); insert into scratch values (1, 2)").await.unwrap();
    let sa = a.prepare("select * from scratch").await.unwrap();
    let sb = b.prepare("select * from scratch").await.unwrap();
    for _ in 0..3 {
        assert_eq!(run(&a, &sa).await, Ok(1));
        assert_eq!(run(&b, &sb).await, Ok(2));
    }
    let again = a.prepare("select * from scratch").await.unwrap();
    assert_eq!((run(&a, &again).await, run(&b, &sb).await, run(&a, &sa).await), (Ok(1), Ok(2), Ok(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_keep_at_most_max_prepared_statements() {
    let fx = trust("pool_max = 1\nmax_prepared_statements = 3").await;
    let mut a = RawClient::connect(fx.addr()).await;
    for i in 0..8 {
        a.send(&[parse(&format!("s{i}"), &format!("select {i}")), sync()].concat()).await;
        a.until_ready().await;
    }
    for round in 0..3 {
        for i in (0..8).rev() {
            a.send(&bind_execute_sync(&format!("s{i}"))).await;
            assert_eq!(outcome(&a.until_ready().await), i.to_string(), "round {round}");
        }
    }
    a.send_query("select count(*) from pg_prepared_statements where name like 'pgmux_%'").await;
    assert_eq!(outcome(&a.until_ready().await), "3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_prepared_statements_set_on_the_console_applies_to_open_server_connections() {
    let fx = trust("pool_max = 1\nmax_prepared_statements = 1").await;
    let console = common::connect(fx.addr(), &APP_USER, |c| {
        c.dbname("pgbouncer");
    })
    .await
    .expect("the console");
    let mut a = RawClient::connect(fx.addr()).await;
    let mut prepared = 0;
    let mut on_server = async |a: &mut RawClient, n: usize| {
        for _ in 0..n {
            a.send(&[parse(&format!("s{prepared}"), &format!("select {prepared}")), sync()].concat()).await;
            a.until_ready().await;
            prepared += 1;
        }
        a.send_query("select count(*) from pg_prepared_statements where name like 'pgmux_%'").await;
        outcome(&a.until_ready().await)
    };
    assert_eq!(on_server(&mut a, 5).await, "1");
    // Raised: the one server connection, open all along, keeps more from its next statement on.
    console.simple_query("SET max_prepared_statements = 5").await.expect("SET");
    assert_eq!(on_server(&mut a, 5).await, "5");
    // Lowered: nothing is closed until the next statement is prepared, then it is down to the new count.
    console.simple_query("SET max_prepared_statements = 2").await.expect("SET");
    assert_eq!(on_server(&mut a, 0).await, "5");
    assert_eq!(on_server(&mut a, 1).await, "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tracking_named_statements_break_across_servers() {
    // The negative control: max_prepared_statements = 0 passes names through as PgBouncer 1.18 does.
    let fx = trust("pool_max = 1\nmax_prepared_statements = 0").await;
    let mut a = RawClient::connect(fx.addr()).await;
    let mut b = RawClient::connect(fx.addr()).await;
    a.send(&[parse("s1", "select 'a'"), sync()].concat()).await;
    a.until_ready().await;
    b.send(&[parse("s1", "select 'b'"), sync()].concat()).await;
    assert_eq!(outcome(&b.until_ready().await), "error 42P05");
    b.send(&bind_execute_sync("s1")).await;
    assert_eq!(outcome(&b.until_ready().await), "a", "B runs A's statement: the bug tracking prevents");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_settings_follow_their_client_and_never_leak() {
    let fx = common::start("pool_max = 2").await;
    let a = fx.client().await;
    let b = fx.client().await;
    a.batch_execute("set statement_timeout = '1234ms'; set search_path = pg_catalog, public").await.unwrap();
    a.batch_execute("select set_config('work_mem', '7MB', false)").await.unwrap();
    for _ in 0..20 {
        assert_eq!(scalar(&a, "show statement_timeout").await, "1234ms");
        assert_eq!(scalar(&a, "show work_mem").await, "7MB");
        assert_eq!(scalar(&b, "show statement_timeout").await, "0");
        assert_eq!(scalar(&b, "show work_mem").await, "4MB");
        assert_eq!(scalar(&b, "show search_path").await, "\"$user\", public");
    }
    // SET LOCAL lasts for its transaction only.
    a.batch_execute("begin; set local statement_timeout = '50ms'").await.unwrap();
    assert_eq!(common::code(&a.simple_query("select pg_sleep(0.3)").await.unwrap_err()), "57014");
    a.batch_execute("rollback").await.unwrap();
    assert_eq!(scalar(&a, "show statement_timeout").await, "1234ms");
    // RESET ALL takes them all back.
    a.batch_execute("reset all").await.unwrap();
    assert_eq!(scalar(&a, "show statement_timeout").await, "0");
    assert_eq!(scalar(&a, "show work_mem").await, "4MB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_state_pins_the_client_to_its_server() {
    let fx = common::start("pool_max = 2").await;
    let oracle = common::direct(&fx.pg).await;
    let pinned = fx.client().await;
    let other = fx.client().await;
    // A session advisory lock, a temporary table and an SQL prepared statement outlive the transaction.
    pinned.batch_execute("select pg_advisory_lock(4242)").await.unwrap();
    let pid = scalar(&pinned, "select pg_backend_pid()").await;
    pinned.batch_execute("create temp table scratch (v int); insert into scratch values (7)").await.unwrap();
    pinned.batch_execute("prepare mine as select 'still here'").await.unwrap();
    for _ in 0..10 {
        // The other client keeps working on the other server connection meanwhile.
        assert_ne!(scalar(&other, "select pg_backend_pid()").await, pid);
        assert_eq!(scalar(&pinned, "select pg_backend_pid()").await, pid);
    }
    assert_eq!(scalar(&pinned, "select v from scratch").await, "7");
    assert_eq!(scalar(&pinned, "execute mine").await, "still here");
    // Advisory locks stay with the pinned session, so another session cannot take it.
    assert_eq!(scalar(&other, "select pg_try_advisory_lock(4242)").await, "f");
    // Gone with the client: its server connection is closed, never lent with that state.
    drop(pinned);
    let closed = common::eventually(Duration::from_secs(5), || async {
        let n = scalar(&oracle, &format!("select count(*) from pg_stat_activity where pid = {pid}")).await;
        n == "0"
    })
    .await;
    assert!(closed, "the pinned server connection was not closed");
    assert_eq!(scalar(&other, "select pg_try_advisory_lock(4242)").await, "t");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_through_pgmux_receives_later_notifications() {
    let fx = trust("pool_max = 2").await;
    let mut listener = RawClient::connect(fx.addr()).await;
    listener.send_query("listen jobs").await;
    listener.until_ready().await;
    let notifier = fx.client().await;
    notifier.batch_execute("notify jobs, 'one'").await.unwrap();
    let got = listener.next().await.expect("a notification");
    assert_eq!(got.0, b'A');
    assert!(String::from_utf8_lossy(&got.1).contains("one"));
}
