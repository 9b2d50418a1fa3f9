//! Failures on either side: errors inside transactions, servers killed mid-transaction, clients that
//! vanish, an unreachable database, wrong passwords, and cancel requests that must reach the right query.

use std::time::Duration;

use pgmux_testkit::{APP_USER, PgServer, Role};
use tokio_postgres::NoTls;

use crate::common::{self, scalar};
use crate::protocol::RawClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_inside_a_transaction_then_the_next_one_works() {
    let fx = common::start("pool_max = 1").await;
    let c = fx.client().await;
    c.batch_execute("begin").await.unwrap();
    let err = c.simple_query("select 1/0").await.unwrap_err();
    assert_eq!(common::code(&err), "22012");
    let err = c.simple_query("select 1").await.unwrap_err();
    assert_eq!(common::code(&err), "25P02", "the transaction is aborted until it ends");
    c.batch_execute("rollback").await.unwrap();
    assert_eq!(scalar(&c, "select 'next'").await, "next");
    let oracle = common::direct(&fx.pg).await;
    let stuck: i64 = oracle
        .query_one("select count(*) from pg_stat_activity where state like 'idle in transaction%'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stuck, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_transaction_gives_08006_and_the_next_transaction_works() {
    let fx = common::start("pool_max = 2").await;
    let c = fx.client().await;
    let oracle = common::direct(&fx.pg).await;

    // Killed while the client sits idle in its transaction: the next statement reports it.
    c.batch_execute("begin").await.unwrap();
    let pid: i32 = scalar(&c, "select pg_backend_pid()").await.parse().unwrap();
    oracle.execute("select pg_terminate_backend($1)", &[&pid]).await.unwrap();
    let err = c.simple_query("select 1").await.unwrap_err();
    assert_eq!(common::code(&err), "08006", "{err}");
    assert_eq!(scalar(&c, "select 'fresh'").await, "fresh");
    let new_pid: i32 = scalar(&c, "select pg_backend_pid()").await.parse().unwrap();
    assert_ne!(new_pid, pid);

    // Killed while a statement runs: the statement fails with 08006 at once.
    c.batch_execute("begin").await.unwrap();
    let pid: i32 = scalar(&c, "select pg_backend_pid()").await.parse().unwrap();
    let sleeper = tokio::spawn(async move {
        let r = c.simple_query("select pg_sleep(30)").await;
        (r.map(|_| ()), c)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    oracle.execute("select pg_terminate_backend($1)", &[&pid]).await.unwrap();
    let (r, c) = tokio::time::timeout(Duration::from_secs(5), sleeper).await.unwrap().unwrap();
    assert_eq!(common::code(&r.unwrap_err()), "08006");
    assert_eq!(scalar(&c, "select 'again'").await, "again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_that_meets_an_idle_connection_as_it_is_terminated_runs_again_unseen() {
    let fx = common::start("pool_max = 1").await;
    let c = fx.client().await;
    c.batch_execute("create table ledger (v int)").await.unwrap();
    let pid: i32 = scalar(&c, "select pg_backend_pid()").await.parse().unwrap();
    let oracle = common::direct(&fx.pg).await;
    // The pool's one connection is idle. Its backend is stopped and told to terminate; the query comes
    // while it is stopped, so that the backend, let go, ends the session with the query unread: its FATAL
    // is the first reply, and its exit resets the connection.
    // SAFETY: kill(2) on a backend of the test's own server.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let terminated: bool = oracle.query_one("select pg_terminate_backend($1)", &[&pid]).await.unwrap().get(0);
    assert!(terminated);
    let insert = tokio::spawn(async move {
        let r = c.simple_query("insert into ledger values (1)").await.map(|_| ());
        (r, c)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let (r, c) = tokio::time::timeout(Duration::from_secs(10), insert).await.unwrap().unwrap();
    r.expect("run again on a new connection, unseen");
    assert_eq!(scalar(&c, "select count(*) from ledger").await, "1", "once");
    let new_pid: i32 = scalar(&c, "select pg_backend_pid()").await.parse().unwrap();
    assert_ne!(new_pid, pid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_vanishes_mid_transaction_leaves_nothing_dirty() {
    let fx = common::start("pool_max = 1").await;
    let setup = fx.client().await;
    setup.batch_execute("create table ledger (v int)").await.unwrap();
    drop(setup);

    // Idle in a transaction with an uncommitted row, then gone.
    let c = fx.client().await;
    c.batch_execute("begin; insert into ledger values (1)").await.unwrap();
    drop(c);
    let oracle = common::direct(&fx.pg).await;
    let clean = common::eventually(Duration::from_secs(5), || async {
        let n: i64 = oracle
            .query_one(
                "select count(*) from pg_stat_activity where usename = $1 and state like 'idle in transaction%'",
                &[&APP_USER.user],
            )
            .await
            .unwrap()
            .get(0);
        n == 0
    })
    .await;
    assert!(clean, "the abandoned transaction was not rolled back");
    let next = fx.client().await;
    assert_eq!(scalar(&next, "select count(*) from ledger").await, "0");
    assert_eq!(scalar(&next, "select current_setting('transaction_isolation') is not null").await, "t");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_vanishes_mid_statement_has_its_statement_cancelled() {
    let fx = common::start("pool_max = 1\nclient_auth = \"trust\"").await;
    let setup = fx.client().await;
    setup.batch_execute("create table ledger (v int)").await.unwrap();
    let mut raw = RawClient::connect(fx.addr()).await;
    raw.send_query("begin; insert into ledger values (2); select pg_sleep(30)").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(raw);
    let oracle = common::direct(&fx.pg).await;
    let stopped = common::eventually(Duration::from_secs(5), || async {
        let n: i64 = oracle
            .query_one(
                "select count(*) from pg_stat_activity where query like '%pg_sleep(30)%' and pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        n == 0
    })
    .await;
    assert!(stopped, "the abandoned pg_sleep kept running");
    assert_eq!(scalar(&setup, "select count(*) from ledger").await, "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_gives_08001_naming_host_and_cause() {
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    // A port bound and never listened on: connecting to it is refused, and no other test's server can take
    // it while pgmux retries (a port that was merely free once could be).
    let refusing = tokio::net::TcpSocket::new_v4().unwrap();
    refusing.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let closed = refusing.local_addr().unwrap().port();
    let text = format!(
        "listen = \"127.0.0.1:0\"\ndatabase_url = \"postgres://pgmux_app:app-pw-1@127.0.0.1:{closed}/pgmux\"\n\
         client_auth = \"scram-sha-256\"\nserver_connect_timeout = \"2s\"\nquery_wait_timeout = \"3s\""
    );
    drop(pg);
    let proxy = pgmux_proxy::Listener::start(pgmux_proxy::Config::from_toml_str(&text).unwrap()).await.unwrap();
    let err = common::connect(proxy.addr, &APP_USER, |_| {}).await.unwrap_err();
    assert_eq!(common::code(&err), "08001");
    let msg = common::message(&err);
    assert!(msg.contains(&format!("127.0.0.1:{closed}")) && msg.contains("refused"), "{msg}");
    proxy.shutdown().await;
    drop(refusing);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_passwords_get_28p01_with_scram_and_md5() {
    for auth in ["scram-sha-256", "md5"] {
        let fx = common::start(&format!("client_auth = \"{auth}\"")).await;
        let bad = Role { user: APP_USER.user, password: "not-the-password" };
        let err = common::connect(fx.addr(), &bad, |_| {}).await.unwrap_err();
        assert_eq!(common::code(&err), "28P01", "{auth}");
        let stranger = Role { user: "mallory", password: APP_USER.password };
        let err = common::connect(fx.addr(), &stranger, |_| {}).await.unwrap_err();
        assert_eq!(common::code(&err), "28P01", "{auth}: unknown users fail like wrong passwords");
        let ok = common::connect(fx.addr(), &APP_USER, |_| {}).await.unwrap();
        assert_eq!(scalar(&ok, "select 'in'").await, "in", "{auth}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_lets_the_configured_user_in_without_a_password() {
    let fx = common::start("client_auth = \"trust\"").await;
    let nopw = Role { user: APP_USER.user, password: "" };
    let c = common::connect(fx.addr(), &nopw, |_| {}).await.unwrap();
    assert_eq!(scalar(&c, "select current_user").await, APP_USER.user);
    let other = Role { user: "someone_else", password: "" };
    let err = common::connect(fx.addr(), &other, |_| {}).await.unwrap_err();
    assert_eq!(common::code(&err), "28000");
    let err = common::connect(fx.addr(), &APP_USER, |c| {
        c.dbname("otherdb");
    })
    .await
    .unwrap_err();
    assert_eq!(common::code(&err), "3D000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgmux_logs_in_to_servers_with_cleartext_md5_and_scram() {
    for role in [pgmux_testkit::PLAIN_USER, pgmux_testkit::MD5_USER, APP_USER] {
        let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
        let text =
            format!("listen = \"127.0.0.1:0\"\ndatabase_url = {:?}\nclient_auth = \"scram-sha-256\"", pg.url(&role));
        let proxy = pgmux_proxy::Listener::start(pgmux_proxy::Config::from_toml_str(&text).unwrap()).await.unwrap();
        let c = common::connect(proxy.addr, &role, |_| {}).await.unwrap();
        assert_eq!(scalar(&c, "select current_user").await, role.user);
        drop(c);
        proxy.shutdown().await;
    }
}

/// A new server connection that cannot be opened while others are open is not the client's problem: it
/// waits for one of the open ones (within query_wait_timeout) instead of getting 08001.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_open_waits_for_a_busy_connection_instead_of_failing() {
    let fx = common::start("pool_max = 2").await;
    let oracle = common::direct(&fx.pg).await;
    let a = fx.client().await;
    let b = fx.client().await;
    a.batch_execute("begin; select 1").await.unwrap();
    // New server sessions for pgmux's role are refused from now on; the one A holds goes on.
    oracle.batch_execute(&format!("alter role {} nologin", APP_USER.user)).await.unwrap();
    let release = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        a.batch_execute("commit").await.unwrap();
    };
    let (answer, ()) = tokio::join!(b.simple_query("select 'b served'"), release);
    oracle.batch_execute(&format!("alter role {} login", APP_USER.user)).await.unwrap();
    let answer = answer.expect("B waits for A's connection instead of failing");
    let row = answer.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
        _ => None,
    });
    assert_eq!(row.as_deref(), Some("b served"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_server_password_is_reported_as_08001() {
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    let text = format!(
        "listen = \"127.0.0.1:0\"\ndatabase_url = \"postgres://pgmux_app:wrong@127.0.0.1:{}/pgmux\"\n\
         client_auth = \"trust\"",
        pg.port()
    );
    let proxy = pgmux_proxy::Listener::start(pgmux_proxy::Config::from_toml_str(&text).unwrap()).await.unwrap();
    let nopw = Role { user: APP_USER.user, password: "" };
    let err = common::connect(proxy.addr, &nopw, |_| {}).await.unwrap_err();
    assert_eq!(common::code(&err), "08001");
    let msg = common::message(&err);
    assert!(msg.contains("password authentication failed") && !msg.contains("wrong"), "{msg}");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reaches_the_right_query_and_nobody_else() {
    let fx = common::start("pool_max = 2").await;
    let victim = fx.client().await;
    let token = victim.cancel_token();
    let sleeper = tokio::spawn(async move { victim.simple_query("select pg_sleep(30)").await.map(|_| ()) });

    // Others keep working on the second server connection, before, during and after the cancel.
    let mut workers = Vec::new();
    for _ in 0..4 {
        let addr = fx.addr();
        workers.push(tokio::spawn(async move {
            let c = common::connect(addr, &APP_USER, |_| {}).await.unwrap();
            for i in 0..100 {
                let sql = format!("select {i}, pg_sleep(0.005)");
                c.simple_query(&sql).await.expect("a bystander's query failed");
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    token.cancel_query(NoTls).await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), sleeper).await.expect("cancel took effect").unwrap();
    assert_eq!(common::code(&r.unwrap_err()), "57014");
    assert!(started.elapsed() < Duration::from_secs(5));
    for w in workers {
        w.await.expect("no bystander was cancelled");
    }
}

/// A query waiting in line for a server connection has no server to cancel it: pgmux answers it with
/// 57014 itself, so that the cancel is not lost and the query never runs later. Both protocols: a simple
/// Query, and a Parse/Bind/Execute/Sync unit whose remaining messages must be skipped up to the Sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_waiting_for_a_server_connection_answers_the_query_and_it_never_runs() {
    let fx = common::start("pool_max = 1\nquery_wait_timeout = \"20s\"").await;
    let oracle = common::direct(&fx.pg).await;
    let holder = fx.client().await;
    holder.batch_execute("create table cancel_wait(v text)").await.unwrap();
    holder.batch_execute("begin; select 1").await.unwrap();

    let waiter = std::sync::Arc::new(fx.client().await);
    let token = waiter.cancel_token();
    let simple = {
        let waiter = std::sync::Arc::clone(&waiter);
        tokio::spawn(async move { waiter.simple_query("insert into cancel_wait values ('simple')").await.map(|_| ()) })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    token.cancel_query(NoTls).await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), simple).await.expect("the cancel answered the query");
    assert_eq!(common::code(&r.unwrap().unwrap_err()), "57014");

    let extended = {
        let waiter = std::sync::Arc::clone(&waiter);
        tokio::spawn(
            async move { waiter.execute("insert into cancel_wait values ($1)", &[&"extended"]).await.map(|_| ()) },
        )
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    token.cancel_query(NoTls).await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), extended).await.expect("the cancel answered the query");
    assert_eq!(common::code(&r.unwrap().unwrap_err()), "57014");

    holder.batch_execute("commit").await.unwrap();
    // The cancelled client goes on with both protocols, and neither cancelled insert ever ran.
    assert_eq!(scalar(&waiter, "select 'after'").await, "after");
    let n: i64 = waiter.query_one("select count(*) from cancel_wait", &[]).await.unwrap().get(0);
    assert_eq!(n, 0, "a cancelled query ran after all");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n: i64 = oracle.query_one("select count(*) from cancel_wait", &[]).await.unwrap().get(0);
    assert_eq!(n, 0, "a cancelled query ran after all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_for_an_idle_client_does_nothing() {
    let fx = common::start("pool_max = 1").await;
    let idle = fx.client().await;
    let token = idle.cancel_token();
    let busy = fx.client().await;
    let q = tokio::spawn(async move { busy.simple_query("select pg_sleep(0.5)").await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(100)).await;
    token.cancel_query(NoTls).await.unwrap();
    q.await.unwrap().expect("another client's query must not be cancelled");
    assert_eq!(scalar(&idle, "select 1").await, "1");
}
