//! The admin console's control commands against the real binary and a real PostgreSQL: PAUSE / RESUME
//! under load (no client error, no transaction cut, nothing runs while paused), RECONNECT (every server
//! connection replaced), RELOAD of a bad file (pgmux keeps serving and says why), SIGHUP (a new pool_max in
//! force and in SHOW CONFIG), SET by PgBouncer's names and units, and what the console does with what it
//! does not know.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use pgmux_observability_tests::pgmux::Pgmux;
use pgmux_observability_tests::{http, poll, series};
use pgmux_testkit::{APP_USER, DATABASE, PgServer};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// Clients of the workload.
const CLIENTS: usize = 6;
/// Each client's transactions.
const TRANSACTIONS: usize = 60;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime")
}

async fn connect(pgmux: &Pgmux, database: &str) -> Result<Client, tokio_postgres::Error> {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1")
        .port(pgmux.addr.port())
        .user(APP_USER.user)
        .password(APP_USER.password)
        .dbname(database)
        .connect_timeout(Duration::from_secs(10));
    let (client, conn) = cfg.connect(NoTls).await?;
    tokio::spawn(conn);
    Ok(client)
}

/// A console session as `user`, with the password pgmux checks clients against.
async fn login(pgmux: &Pgmux, user: &str) -> Result<Client, tokio_postgres::Error> {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1").port(pgmux.addr.port()).user(user).password(APP_USER.password).dbname("pgbouncer");
    let (client, conn) = cfg.connect(NoTls).await?;
    tokio::spawn(conn);
    Ok(client)
}

/// The rows of a console command, each as its values (NULL as "").
async fn rows(admin: &Client, command: &str) -> Vec<Vec<String>> {
    let messages = admin.simple_query(command).await.unwrap_or_else(|e| panic!("{command}: {e}"));
    messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some((0..r.len()).map(|i| r.get(i).unwrap_or_default().to_owned()).collect()),
            _ => None,
        })
        .collect()
}

/// The value of `key` in SHOW CONFIG.
async fn config_value(admin: &Client, key: &str) -> String {
    rows(admin, "SHOW CONFIG").await.into_iter().find(|r| r[0] == key).map(|r| r[1].clone()).unwrap_or_default()
}

/// STATS_TOTALS' xact_count for the served database.
async fn xact_count(admin: &Client) -> u64 {
    let r = rows(admin, "SHOW STATS_TOTALS").await;
    r.iter().find(|r| r[0] == DATABASE).map_or(0, |r| r[2].parse().unwrap_or(0))
}

/// PIDs of pgmux's pool connections on the server.
fn pool_pids(pg: &PgServer) -> BTreeSet<i64> {
    pg.psql("select pid from pg_stat_activity where usename = 'pgmux_app' and backend_type = 'client backend'")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// One client's work: transactions of two inserts with the same tag, each checked to have committed.
async fn client_work(client: Client, id: usize) -> Result<usize, String> {
    let mut done = 0;
    for n in 0..TRANSACTIONS {
        let tag = format!("c{id}-t{n}");
        let sql = format!(
            "BEGIN; INSERT INTO ledger VALUES ('{tag}', 1); SELECT pg_sleep(0.005); \
             INSERT INTO ledger VALUES ('{tag}', 2); COMMIT"
        );
        client.simple_query(&sql).await.map_err(|e| format!("client {id}, transaction {n}: {e:?}"))?;
        done += 1;
    }
    Ok(done)
}

#[test]
fn pause_holds_new_transactions_and_resume_lets_them_go_without_a_client_error() {
    let pg = PgServer::start();
    pg.psql("create table ledger (tag text, part int); grant all on ledger to pgmux_app");
    let pgmux = Pgmux::start(&pg, false, "");
    runtime().block_on(async {
        let admin = connect(&pgmux, "pgbouncer").await.expect("the console");
        let mut workers = Vec::new();
        for id in 0..CLIENTS {
            let client = connect(&pgmux, DATABASE).await.expect("a client");
            workers.push(tokio::spawn(client_work(client, id)));
        }
        for round in 0..2 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let began = Instant::now();
            admin.simple_query("PAUSE").await.expect("PAUSE");
            eprintln!("round {round}: PAUSE returned after {:?}", began.elapsed());
            let pools = rows(&admin, "SHOW POOLS").await;
            let served = pools.iter().find(|r| r[0] == DATABASE).expect("a pool row");
            assert_eq!(served[6], "0", "sv_active after PAUSE returned: {served:?}");
            assert_eq!(rows(&admin, "SHOW STATE").await[1], vec!["paused", "yes"]);
            let before = xact_count(&admin).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert_eq!(xact_count(&admin).await, before, "round {round}: transactions ran while paused");
            let waiting: i64 = served[3].parse().unwrap_or(0);
            eprintln!("round {round}: {waiting} clients waiting while paused");
            admin.simple_query("RESUME").await.expect("RESUME");
        }
        let err = admin.simple_query("RESUME").await.expect_err("RESUME when not paused");
        assert_eq!(err.code().map(|c| c.code()), Some("55000"), "{err}");
        let mut total = 0;
        for w in workers {
            total += w.await.expect("a worker").unwrap_or_else(|e| panic!("a client saw an error: {e}"));
        }
        assert_eq!(total, CLIENTS * TRANSACTIONS);
    });
    // Every transaction whole: both rows of each tag, and nothing else.
    let counts = pg.psql("select count(*), count(distinct tag), sum(part) from ledger");
    let want = format!("{}|{}|{}", 2 * CLIENTS * TRANSACTIONS, CLIENTS * TRANSACTIONS, 3 * CLIENTS * TRANSACTIONS);
    assert_eq!(counts.trim(), want, "rows, tags, parts\n{}", pgmux.log());
}

#[test]
fn reconnect_replaces_every_server_connection_as_it_comes_back() {
    let pg = PgServer::start();
    let pgmux = Pgmux::start(&pg, true, "");
    let metrics = pgmux.metrics.expect("metrics_listen");
    runtime().block_on(async {
        let admin = connect(&pgmux, "pgbouncer").await.expect("the console");
        let (a, b) = (connect(&pgmux, DATABASE).await.unwrap(), connect(&pgmux, DATABASE).await.unwrap());
        // Two server connections: one idle, one held by an open transaction.
        a.simple_query("BEGIN; SELECT 1").await.unwrap();
        b.simple_query("SELECT 1").await.unwrap();
        let old = pool_pids(&pg);
        assert_eq!(old.len(), 2, "{old:?}");
        admin.simple_query("RECONNECT").await.expect("RECONNECT");
        let servers = rows(&admin, "SHOW SERVERS").await;
        assert!(servers.iter().all(|s| s[13] == "1"), "close_needed on every server: {servers:?}");
        // The busy one finishes its transaction undisturbed, then goes.
        a.simple_query("SELECT 2; COMMIT").await.expect("the open transaction commits");
        tokio::time::timeout(Duration::from_secs(10), admin.simple_query("WAIT_CLOSE"))
            .await
            .expect("WAIT_CLOSE returned within 10 s")
            .expect("WAIT_CLOSE");
        for c in [&a, &b] {
            c.simple_query("SELECT 3").await.expect("a query after RECONNECT");
        }
        // A backend pgmux just closed may take a moment to leave pg_stat_activity.
        let fresh = poll(Duration::from_secs(5), || Some(pool_pids(&pg)).filter(|new| new.is_disjoint(&old)));
        assert!(fresh.is_some_and(|new| !new.is_empty()), "old {old:?}, now {:?}", pool_pids(&pg));
    });
    let body = http::get(metrics, "/metrics", None).expect("GET /metrics").body;
    let samples = series::samples(&body).expect("readable /metrics");
    let closed = series::value(&samples, "pgmux_server_connections_closed_total", &[("reason", "reconnect")]);
    assert_eq!(closed, Some(2.0), "{body}");
}

#[test]
fn reload_of_a_bad_file_keeps_serving_and_says_why() {
    let pg = PgServer::start();
    let pgmux = Pgmux::start(&pg, true, "");
    let metrics = pgmux.metrics.expect("metrics_listen");
    runtime().block_on(async {
        let admin = connect(&pgmux, "pgbouncer").await.expect("the console");
        let client = connect(&pgmux, DATABASE).await.expect("a client");
        pgmux.rewrite_config("pool_max = \"lots\"\n");
        let err = admin.simple_query("RELOAD").await.expect_err("RELOAD of a bad file");
        let db = err.as_db_error().expect("an ErrorResponse");
        assert_eq!(db.code().code(), "F0000", "{db:?}");
        assert!(db.message().contains("pool_max"), "{}", db.message());
        client.simple_query("SELECT 1").await.expect("still serving");
        assert_eq!(config_value(&admin, "pool_max").await, "2");
        // The console stays usable after the error, and a good file then loads.
        pgmux.rewrite_config("query_wait_timeout = \"7s\"\n");
        admin.simple_query("RELOAD").await.expect("RELOAD of a good file");
        // PgBouncer's name and unit: bare seconds.
        assert_eq!(config_value(&admin, "query_wait_timeout").await, "7");
    });
    let body = http::get(metrics, "/metrics", None).expect("GET /metrics").body;
    let samples = series::samples(&body).expect("readable /metrics");
    assert_eq!(series::value(&samples, "pgmux_reloads_total", &[("result", "failed")]), Some(1.0), "{body}");
    assert_eq!(series::value(&samples, "pgmux_reloads_total", &[("result", "ok")]), Some(1.0), "{body}");
    assert!(pgmux.log().contains("reload failed"), "the log says why\n{}", pgmux.log());
}

#[test]
fn sighup_puts_a_new_pool_max_in_force_and_show_config_shows_it() {
    let pg = PgServer::start();
    let mut pgmux = Pgmux::start(&pg, false, "");
    let rt = runtime();
    let admin = rt.block_on(connect(&pgmux, "pgbouncer")).expect("the console");
    assert_eq!(rt.block_on(config_value(&admin, "pool_max")), "2");
    pgmux.rewrite_config("pool_max = 5\nlog_level = \"debug\"\nlisten = \"127.0.0.1:1\"\n");
    pgmux.signal("HUP");
    let seen =
        poll(Duration::from_secs(10), || Some(()).filter(|_| rt.block_on(config_value(&admin, "pool_max")) == "5"));
    assert!(seen.is_some(), "pool_max still {}\n{}", rt.block_on(config_value(&admin, "pool_max")), pgmux.log());
    let databases = rt.block_on(rows(&admin, "SHOW DATABASES"));
    assert_eq!(databases[0][5], "5", "pool_size is the limit in force: {databases:?}");
    assert_eq!(rt.block_on(config_value(&admin, "listen")), pgmux.addr.to_string(), "listen needs a restart");
    assert!(pgmux.running(), "SIGHUP must not stop pgmux");
    assert!(pgmux.log().contains("needs a restart"), "{}", pgmux.log());
}

#[test]
fn set_by_pgbouncer_s_names_and_units_reads_back_the_same_in_show_config() {
    let pg = PgServer::start();
    let pgmux = Pgmux::start(&pg, false, "");
    runtime().block_on(async {
        let admin = connect(&pgmux, "pgbouncer").await.expect("the console");
        for (set, key, shown) in [
            ("SET tcp_user_timeout = 2500", "tcp_user_timeout", "2500"),
            ("SET query_wait_timeout = 7", "query_wait_timeout", "7"),
            ("SET server_check_delay = '2.5'", "server_check_delay", "2.5"),
            ("SET default_pool_size = 3", "default_pool_size", "3"),
            ("SET query_wait_timeout = 9s", "query_wait_timeout", "9"),
        ] {
            admin.simple_query(set).await.unwrap_or_else(|e| panic!("{set}: {e}"));
            assert_eq!(config_value(&admin, key).await, shown, "{set}");
        }
        assert_eq!(config_value(&admin, "tcp_user_timeout").await, "2500", "milliseconds, as PgBouncer's");
        // pool_mode is a setting of pgmux's now (named databases' pools); statement mode is refused.
        admin.simple_query("SET pool_mode = session").await.expect("pool_mode may change");
        assert_eq!(config_value(&admin, "pool_mode").await, "session");
        let err = admin.simple_query("SET pool_mode = statement").await.expect_err("statement mode");
        assert_eq!(err.code().map(|c| c.code()), Some("22023"), "{err}");
        // What no pgmux setting changes is still refused, with 55P02.
        let err = admin.simple_query("SET stats_period = 30").await.expect_err("stats_period is fixed");
        assert_eq!(err.code().map(|c| c.code()), Some("55P02"), "{err}");
    });
}

#[test]
fn unknown_commands_get_an_error_and_the_console_stays_open() {
    let pg = PgServer::start();
    let pgmux = Pgmux::start(&pg, false, "stats_users = \"watcher\"\n");
    runtime().block_on(async {
        let admin = connect(&pgmux, "pgbouncer").await.expect("the console");
        let err = admin.simple_query("SHOW NONSENSE").await.expect_err("an unknown SHOW");
        assert_eq!(err.code().map(|c| c.code()), Some("42601"), "{err}");
        let err = admin.simple_query("select * from pg_class").await.expect_err("SQL is not a command");
        assert_eq!(err.code().map(|c| c.code()), Some("42601"), "{err}");
        let err = admin.query("SHOW POOLS", &[]).await.expect_err("the extended protocol");
        assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "{err}");
        let version = rows(&admin, "show version;").await;
        assert!(version[0][0].starts_with("pgmux "), "{version:?}");
        let help = admin.simple_query("SHOW HELP").await.expect("SHOW HELP");
        assert!(matches!(help.last(), Some(SimpleQueryMessage::CommandComplete(0))));
        // A stats user (the same password pgmux checks every client against) may SHOW, not act.
        let watcher = login(&pgmux, "watcher").await.expect("a stats_users user gets in");
        assert!(!rows(&watcher, "SHOW POOLS").await.is_empty());
        let err = watcher.simple_query("PAUSE").await.expect_err("PAUSE needs admin_users");
        assert_eq!(err.code().map(|c| c.code()), Some("42501"), "{err}");
        // Anyone else fails like a wrong password.
        let err = login(&pgmux, "stranger").await.expect_err("a user on neither list");
        assert_eq!(err.code().map(|c| c.code()), Some("28P01"), "{err}");
    });
}

#[test]
fn the_console_answers_while_pgmux_drains_and_other_clients_are_turned_away() {
    let pg = PgServer::start();
    let mut pgmux = Pgmux::start(&pg, true, "shutdown_timeout = \"20s\"\n");
    let metrics = pgmux.metrics.expect("metrics_listen");
    let rt = runtime();
    let client = rt.block_on(connect(&pgmux, DATABASE)).expect("a client");
    // An open transaction keeps the graceful shutdown waiting.
    rt.block_on(client.simple_query("BEGIN; SELECT 1")).expect("BEGIN");
    pgmux.signal("TERM");
    std::thread::sleep(Duration::from_millis(300));
    assert!(pgmux.running(), "draining, not gone");
    rt.block_on(async {
        let admin = connect(&pgmux, "pgbouncer").await.expect("the console during the drain");
        let pools = rows(&admin, "SHOW POOLS").await;
        assert_eq!(pools[0][6], "1", "the open transaction's server connection: {pools:?}");
        let err = connect(&pgmux, DATABASE).await.expect_err("a new client during the drain");
        assert_eq!(err.code().map(|c| c.code()), Some("57P01"), "{err}");
    });
    assert_eq!(http::get(metrics, "/healthz", None).expect("GET /healthz").status, 503);
    assert_eq!(http::get(metrics, "/metrics", None).expect("GET /metrics").status, 200);
    rt.block_on(client.simple_query("COMMIT")).expect("the transaction finishes");
    let gone = poll(Duration::from_secs(10), || Some(()).filter(|_| !pgmux.running()));
    assert!(gone.is_some(), "pgmux exits once the transaction is done\n{}", pgmux.log());
}

#[test]
fn kill_client_ends_a_client_waiting_in_line_for_a_server_connection() {
    let pg = PgServer::start();
    let pgmux = Pgmux::start(&pg, false, "query_wait_timeout = \"60s\"\n");
    runtime().block_on(async {
        // The pool's two connections held by open transactions: a third client's query waits in line.
        let mut holders = Vec::new();
        for _ in 0..2 {
            let client = connect(&pgmux, DATABASE).await.expect("a client");
            client.simple_query("BEGIN; SELECT 1").await.expect("BEGIN");
            holders.push(client);
        }
        let waiting = connect(&pgmux, DATABASE).await.expect("a third client");
        let query = tokio::spawn(async move { waiting.simple_query("SELECT 1").await });
        let admin = connect(&pgmux, "pgbouncer").await.expect("the console");
        let mut id = None;
        for _ in 0..100 {
            let messages = admin.simple_query("SHOW CLIENTS").await.expect("SHOW CLIENTS");
            id = messages.iter().find_map(|m| match m {
                SimpleQueryMessage::Row(r) if r.get("state") == Some("waiting") => r.get("id").map(str::to_owned),
                _ => None,
            });
            if id.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let id = id.expect("a client in state waiting in SHOW CLIENTS");
        admin.simple_query(&format!("KILL_CLIENT {id}")).await.expect("KILL_CLIENT");
        let answer = tokio::time::timeout(Duration::from_secs(10), query)
            .await
            .expect("the killed client is answered at once, not when a connection comes free")
            .expect("the query task");
        let err = answer.expect_err("the killed client's query fails");
        assert_eq!(err.code().map(|c| c.code()), Some("57P01"), "{err}");
        // The others are untouched.
        for client in &holders {
            client.simple_query("COMMIT").await.expect("COMMIT");
        }
    });
}
