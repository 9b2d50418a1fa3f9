//! What the database and the network do, as clients see it through pgmux: a database that is away, a
//! restart, a backend killed mid-statement, a writer turned read-only, a server that stops answering, and
//! PgBouncer's timeouts. The chaos suite (tests/chaos) measures the same against failovers and network faults;
//! these are the short, exact forms.

use std::time::Duration;

use pgmux_testkit::{PgOptions, PgServer};
use tokio::time::Instant;

use crate::common::{self, scalar};

/// The backends pgmux holds for the application role, by pid: unchanged means no connection was closed.
const APP_BACKENDS: &str = "select string_agg(pid::text, ',' order by pid) from pg_stat_activity \
                            where usename = 'pgmux_app' and backend_type = 'client backend'";

/// A `ledger` table the application role may write.
async fn create_ledger(oracle: &tokio_postgres::Client) {
    oracle.batch_execute("create table ledger (v int); grant all on ledger to pgmux_app").await.unwrap();
}

/// Turns the whole node read-only, or back, with a reload (as a blue/green switch or a demotion might).
async fn node_read_only(oracle: &tokio_postgres::Client, on: bool) {
    let change = if on {
        "alter system set default_transaction_read_only = on"
    } else {
        "alter system reset default_transaction_read_only"
    };
    oracle.batch_execute(change).await.unwrap();
    oracle.batch_execute("select pg_reload_conf()").await.unwrap();
}

/// Restarts PostgreSQL (after `stop`, or with a fast shutdown) on the same port.
fn start_again(pg: &mut PgServer) {
    tokio::task::block_in_place(|| pg.restart_with(&PgOptions::default()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_that_starts_while_the_database_is_down_waits_and_runs_once_it_is_back() {
    let mut fx = common::start("query_wait_timeout = \"20s\"").await;
    let client = fx.client().await;
    assert_eq!(scalar(&client, "select 1").await, "1");
    fx.pg.stop();
    let waiting = tokio::spawn(async move {
        let started = Instant::now();
        let answer = client.simple_query("select 'after the outage'").await.map(|_| ());
        (answer, started.elapsed(), client)
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    if waiting.is_finished() {
        // What it got says which way it went wrong (it failed once in a loaded run, and never alone).
        let (answer, waited, _) = waiting.await.unwrap();
        panic!("the transaction must wait for the database, not fail: it ended after {waited:?} with {answer:?}");
    }
    start_again(&mut fx.pg);
    let (answer, waited, client) = waiting.await.unwrap();
    answer.expect("no error: the transaction ran once the database was back");
    assert!(waited >= Duration::from_millis(1500), "waited {waited:?}");
    assert_eq!(scalar(&client, "select 'next'").await, "next");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_clients_see_nothing_across_a_restart() {
    let mut fx = common::start("pool_max = 3").await;
    let mut clients = Vec::new();
    for _ in 0..5 {
        let c = fx.client().await;
        assert_eq!(scalar(&c, "select 1").await, "1");
        clients.push(c);
    }
    // A fast shutdown (every backend is told FATAL 57P01) and a start on the same port.
    start_again(&mut fx.pg);
    for (i, c) in clients.iter().enumerate() {
        let answer = c.simple_query("select 2").await;
        assert!(answer.is_ok(), "idle client {i} got an error after the restart: {:?}", answer.err());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_killed_mid_statement_gives_one_error_saying_whether_a_commit_may_have_happened() {
    let fx = common::start("pool_max = 2").await;
    let oracle = common::direct(&fx.pg).await;
    create_ledger(&oracle).await;
    let kill = |what: &'static str| {
        let oracle = &oracle;
        async move {
            let sql = format!(
                "select count(*) from (select pg_terminate_backend(pid) from pg_stat_activity \
                 where query like '{what}%' and state = 'active' and pid <> pg_backend_pid()) killed"
            );
            assert!(common::eventually(Duration::from_secs(5), || async { scalar(oracle, &sql).await == "1" }).await);
        }
    };
    let c = fx.client().await;
    // A read: nothing can have happened, 08006.
    let (answer, ()) = tokio::join!(c.simple_query("select pg_sleep(5)"), kill("select pg_sleep"));
    assert_eq!(common::code(&answer.unwrap_err()), "08006");
    // An autocommit write: it may have committed before the server went, 08007.
    let (answer, ()) =
        tokio::join!(c.simple_query("insert into ledger select 1 from pg_sleep(5)"), kill("insert into ledger"));
    let err = answer.unwrap_err();
    assert_eq!(common::code(&err), "08007", "{}", common::message(&err));
    // Inside a transaction before COMMIT: rolled back, 08006.
    c.batch_execute("begin").await.unwrap();
    let (answer, ()) =
        tokio::join!(c.simple_query("insert into ledger select 2 from pg_sleep(5)"), kill("insert into ledger"));
    assert_eq!(common::code(&answer.unwrap_err()), "08006");
    // The client connection stays usable, and its next transaction works.
    assert_eq!(scalar(&c, "select count(*) from ledger where v = 2").await, "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_turned_read_only_gets_no_more_writes_and_the_write_waits_for_a_writer() {
    let fx = common::start("pool_max = 2\nquery_wait_timeout = \"20s\"").await;
    let oracle = common::direct(&fx.pg).await;
    create_ledger(&oracle).await;
    let c = fx.client().await;
    c.batch_execute("insert into ledger values (1)").await.expect("a warm connection to the writer");
    // A blue/green-like switch: the node stays up but refuses writes; later it takes them again.
    node_read_only(&oracle, true).await;
    // pg_reload_conf only asks the postmaster: once a new backend starts read-only, the postmaster has
    // signalled the existing ones too, and pgmux's server connection applies it before its next command.
    let reloaded = common::eventually(Duration::from_secs(5), || async {
        scalar(&common::direct(&fx.pg).await, "show default_transaction_read_only").await == "on"
    });
    assert!(reloaded.await, "the server never turned read-only");
    let writer = tokio::spawn(async move {
        let answer = c.batch_execute("insert into ledger values (2)").await;
        (answer, c)
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!writer.is_finished(), "the write must wait for a node that takes writes");
    node_read_only(&oracle, false).await;
    let (answer, c) = writer.await.unwrap();
    answer.expect("no 25006 reaches the client: the write ran once a writer was there");
    assert_eq!(scalar(&oracle, "select string_agg(v::text, ',' order by v) from ledger").await, "1,2");
    assert_eq!(scalar(&c, "select 'next'").await, "next");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_makes_its_own_session_read_only_keeps_it_and_the_writer_keeps_its_writes() {
    let fx = common::start("pool_max = 2").await;
    let oracle = common::direct(&fx.pg).await;
    create_ledger(&oracle).await;
    let (reader, writer) = (fx.client().await, fx.client().await);
    // Both of pgmux's server connections open (and the control connection): none may be closed as read-only.
    let sleep = "select pg_sleep(0.2)";
    let (a, b) = tokio::join!(reader.batch_execute(sleep), writer.batch_execute(sleep));
    a.and(b).unwrap();
    let before = scalar(&oracle, APP_BACKENDS).await;
    reader.batch_execute("set default_transaction_read_only = on").await.unwrap();
    for round in 0..4 {
        // The writer takes a server in turn, so that the reader lands on either of the two.
        let insert = format!("insert into ledger values ({round})");
        let (mine, theirs) =
            tokio::join!(scalar(&reader, "show default_transaction_read_only"), writer.batch_execute(&insert));
        assert_eq!(mine, "on", "round {round}: the reader's own setting follows it to every server");
        theirs.unwrap_or_else(|e| panic!("round {round}: another client's write refused: {}", common::message(&e)));
    }
    // The reader's own write is refused as PostgreSQL would refuse it, at once: it says nothing of the node.
    let refused = reader.batch_execute("insert into ledger values (-1)").await.unwrap_err();
    assert_eq!(common::code(&refused), "25006", "{}", common::message(&refused));
    writer.batch_execute("insert into ledger values (4)").await.expect("the writer was not taken for read-only");
    reader.batch_execute("reset default_transaction_read_only").await.unwrap();
    reader.batch_execute("insert into ledger values (5)").await.expect("after RESET the reader writes again");
    assert_eq!(scalar(&oracle, "select string_agg(v::text, ',' order by v) from ledger").await, "0,1,2,3,4,5");
    assert_eq!(scalar(&oracle, APP_BACKENDS).await, before, "the writer's connections were kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_to_read_only_seen_inside_a_transaction_does_not_follow_the_client_to_the_next_writer() {
    let fx = common::start("pool_max = 2\nquery_wait_timeout = \"20s\"").await;
    let oracle = common::direct(&fx.pg).await;
    create_ledger(&oracle).await;
    let c = fx.client().await;
    c.batch_execute("begin").await.unwrap();
    assert_eq!(scalar(&c, "show default_transaction_read_only").await, "off");
    node_read_only(&oracle, true).await;
    // The linked backend applies the reload before its next command and reports the new value then.
    let reported = common::eventually(Duration::from_secs(5), || async {
        scalar(&c, "show default_transaction_read_only").await == "on"
    });
    assert!(reported.await, "the linked server never reported the reload");
    c.batch_execute("commit").await.unwrap();
    node_read_only(&oracle, false).await;
    // The node takes writes again: the node's read-only spell was not the client's setting.
    c.batch_execute("insert into ledger values (1)").await.expect("the client's next write reaches a writer");
    assert_eq!(scalar(&c, "show default_transaction_read_only").await, "off");
    assert_eq!(scalar(&oracle, "select count(*) from ledger").await, "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_own_read_only_transaction_is_asked_about_not_taken_for_a_demoted_node() {
    let fx = common::start("pool_max = 2").await;
    let oracle = common::direct(&fx.pg).await;
    create_ledger(&oracle).await;
    let c = fx.client().await;
    c.batch_execute("insert into ledger values (1)").await.unwrap();
    let before = scalar(&oracle, APP_BACKENDS).await;
    c.batch_execute("begin read only").await.unwrap();
    let refused = c.batch_execute("insert into ledger values (2)").await.unwrap_err();
    assert_eq!(common::code(&refused), "25006");
    c.batch_execute("rollback").await.unwrap();
    // pgmux asked the server for its role after that 25006: a writer, so nothing was closed.
    c.batch_execute("insert into ledger values (3)").await.expect("the writer still takes writes");
    assert_eq!(scalar(&oracle, APP_BACKENDS).await, before, "the writer's connections were kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_client_whose_node_turns_read_only_is_told_and_disconnected() {
    let fx = common::start("pool_max = 2").await;
    let oracle = common::direct(&fx.pg).await;
    let pinned = fx.client().await;
    pinned.batch_execute("listen news").await.unwrap();
    assert_eq!(scalar(&pinned, "select 'pinned'").await, "pinned");
    node_read_only(&oracle, true).await;
    // Its backend reports the reload with its next command; the transaction itself still completes.
    let told = common::eventually(Duration::from_secs(5), || async {
        match pinned.simple_query("select 1").await {
            Ok(_) => false,
            Err(e) => {
                let db = e.as_db_error().map(|d| (d.code().code().to_owned(), d.message().to_owned()));
                assert!(
                    db.as_ref().is_none_or(|(code, message)| code == "08006" && message.contains("pinned")),
                    "{db:?}"
                );
                true
            }
        }
    });
    assert!(told.await, "the pinned client kept its read-only node");
    assert!(pinned.is_closed() || pinned.simple_query("select 1").await.is_err(), "and was disconnected");
    node_read_only(&oracle, false).await;
}

/// Stops (or resumes) a PostgreSQL server and every backend of it, as `kill -STOP` would a hung host.
fn signal_server(pg: &PgServer, signal: &str) {
    let pid_file = std::fs::read_to_string(pg.data_dir().join("postmaster.pid")).expect("postmaster.pid");
    let postmaster = pid_file.lines().next().expect("a pid").trim().to_owned();
    let mut pids = vec![postmaster.clone()];
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // pid (comm) state ppid ...
        let ppid = stat.rsplit_once(") ").and_then(|(_, rest)| rest.split_whitespace().nth(1));
        if ppid == Some(postmaster.as_str()) {
            pids.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    for (i, pid) in pids.iter().enumerate() {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("kill");
        // A backend may have exited since the listing; the postmaster may not.
        assert!(status.success() || i > 0, "kill -{signal} {pid} (the postmaster)");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stops_answering_is_found_out_in_seconds_and_its_clients_told() {
    let fx = common::start("pool_max = 3\nmin_pool_size = 2\nserver_probe_timeout = \"2s\"").await;
    let c = fx.client().await;
    assert_eq!(scalar(&c, "select 1").await, "1");
    // Two warm connections: one for the client, one idle for pgmux's probe.
    let oracle = common::direct(&fx.pg).await;
    assert!(common::eventually(Duration::from_secs(5), || async { common::pgmux_backends(&oracle).await == 2 }).await);
    drop(oracle);
    signal_server(&fx.pg, "STOP");
    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(30), c.simple_query("select 'hung'")).await;
    let waited = started.elapsed();
    signal_server(&fx.pg, "CONT");
    let err = answer.expect("pgmux must not wait for a hung server as long as it hangs").unwrap_err();
    assert_eq!(common::code(&err), "08006", "{}", common::message(&err));
    assert!(waited < Duration::from_secs(15), "found out after {waited:?}");
    assert_eq!(scalar(&c, "select 'resumed'").await, "resumed", "the next transaction works");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stops_answering_while_every_connection_is_lent_is_found_out_too() {
    // No control connection, no idle one: both server connections run the clients' long queries, and the
    // pool has room for the probe's own connection (pool_max = 3). At its limit the pool would open none: a
    // stopped server is then left to query_timeout, as behind PgBouncer (pools/probe.rs).
    let fx = common::start("pool_max = 3\nmax_connections_percent = 0\nserver_probe_timeout = \"2s\"").await;
    let (a, b) = (fx.client().await, fx.client().await);
    let started = Instant::now();
    let (long_a, long_b) = (a.simple_query("select pg_sleep(60)"), b.simple_query("select pg_sleep(60)"));
    let stop_soon = async {
        // Long enough for pgmux to see a quiet pool and ask the server apart (it answers: alive).
        tokio::time::sleep(Duration::from_millis(2500)).await;
        signal_server(&fx.pg, "STOP");
    };
    let (answer_a, answer_b, ()) =
        tokio::time::timeout(Duration::from_secs(40), async { tokio::join!(long_a, long_b, stop_soon) })
            .await
            .expect("pgmux must not wait for a hung server as long as it hangs");
    let waited = started.elapsed();
    signal_server(&fx.pg, "CONT");
    for answer in [answer_a, answer_b] {
        let err = answer.unwrap_err();
        assert_eq!(common::code(&err), "08006", "{}", common::message(&err));
    }
    assert!(waited < Duration::from_secs(20), "found out after {waited:?}");
    assert_eq!(scalar(&a, "select 'resumed'").await, "resumed", "the next transaction works");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sizing_on_the_control_connection_asks_a_full_pool_s_node_and_pool_max_holds() {
    // Sizing on, pool_max = 3: two pool connections and the control connection. Both pool connections run
    // long queries, so the pool goes quiet; the control connection asks the node, and no probe connection
    // opens (checked: with the pool's probe not deferring to it, the peak is 4).
    let fx = common::start("pool_max = 3\nmax_connections_percent = 90\nserver_probe_timeout = \"2s\"").await;
    let oracle = common::direct(&fx.pg).await;
    let (a, b) = (fx.client().await, fx.client().await);
    let started = Instant::now();
    let (long_a, long_b) = (a.simple_query("select pg_sleep(60)"), b.simple_query("select pg_sleep(60)"));
    let watch_then_stop = async {
        // Three quiet seconds, every connection of pgmux's role counted, the probe's too.
        let mut peak = 0;
        while started.elapsed() < Duration::from_millis(3500) {
            peak = peak.max(common::try_pgmux_connections(&oracle).await.expect("count connections"));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        signal_server(&fx.pg, "STOP");
        peak
    };
    let (answer_a, answer_b, peak) =
        tokio::time::timeout(Duration::from_secs(40), async { tokio::join!(long_a, long_b, watch_then_stop) })
            .await
            .expect("pgmux must not wait for a hung server as long as it hangs");
    let waited = started.elapsed();
    signal_server(&fx.pg, "CONT");
    assert_eq!(peak, 3, "pool_max = 3 caps every connection pgmux opens, and the two pool connections were lent");
    for answer in [answer_a, answer_b] {
        let err = answer.unwrap_err();
        assert_eq!(common::code(&err), "08006", "{}", common::message(&err));
    }
    assert!(waited < Duration::from_secs(20), "found out after {waited:?}");
    assert_eq!(scalar(&a, "select 'resumed'").await, "resumed", "the next transaction works");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_timeout_cancels_the_query_and_names_the_setting() {
    let fx = common::start("query_timeout = \"1s\"").await;
    let c = fx.client().await;
    let err = c.simple_query("select pg_sleep(10)").await.unwrap_err();
    assert_eq!(common::code(&err), "57014");
    assert!(common::message(&err).contains("query_timeout"), "{}", common::message(&err));
    assert_eq!(scalar(&c, "select 'still here'").await, "still here");
    let oracle = common::direct(&fx.pg).await;
    let cancelled = common::eventually(Duration::from_secs(5), || async {
        scalar(
            &oracle,
            "select count(*) from pg_stat_activity where query = 'select pg_sleep(10)' and state = 'active'",
        )
        .await
            == "0"
    })
    .await;
    assert!(cancelled, "the query still runs on the server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_transaction_timeout_and_client_idle_timeout_close_idle_clients_naming_the_setting() {
    let fx = common::start("idle_transaction_timeout = \"1s\"\nclient_idle_timeout = \"2s\"").await;
    let oracle = common::direct(&fx.pg).await;
    create_ledger(&oracle).await;
    let c = fx.client().await;
    c.batch_execute("begin; insert into ledger values (1)").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1800)).await;
    let err = c.simple_query("commit").await.unwrap_err();
    assert!(err.to_string().contains("idle_transaction_timeout") || c.is_closed(), "{err}");
    assert_eq!(scalar(&oracle, "select count(*) from ledger").await, "0", "rolled back");
    let stuck = "select count(*) from pg_stat_activity where state like 'idle in transaction%'";
    assert!(common::eventually(Duration::from_secs(5), || async { scalar(&oracle, stuck).await == "0" }).await);

    let idle = fx.client().await;
    tokio::time::sleep(Duration::from_millis(2800)).await;
    assert!(idle.simple_query("select 1").await.is_err(), "client_idle_timeout closed it");
    let busy = fx.client().await;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(scalar(&busy, "select 1").await, "1", "a client that keeps talking is not idle");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_max_client_message_gets_54000() {
    let fx = common::start("max_client_message = 100000").await;
    let c = fx.client().await;
    let small = format!("select length('{}')", "x".repeat(50_000));
    assert_eq!(scalar(&c, &small).await, "50000");
    let big = format!("select length('{}')", "x".repeat(150_000));
    let err = c.simple_query(&big).await.unwrap_err();
    assert_eq!(common::code(&err), "54000", "{err}");
    assert!(common::message(&err).contains("100000"), "{}", common::message(&err));
}

/// A raw client logged in through pgmux (trust), ready for queries.
async fn raw_login(addr: std::net::SocketAddr) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect to pgmux");
    let mut body = 196_608u32.to_be_bytes().to_vec();
    for word in ["user", pgmux_testkit::APP_USER.user, "database", pgmux_testkit::DATABASE] {
        body.extend_from_slice(word.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut packet = (body.len() as u32 + 4).to_be_bytes().to_vec();
    packet.extend_from_slice(&body);
    stream.write_all(&packet).await.unwrap();
    // Up to ReadyForQuery.
    loop {
        let tag = stream.read_u8().await.expect("a login reply");
        let len = stream.read_u32().await.unwrap() as usize;
        let mut rest = vec![0u8; len - 4];
        stream.read_exact(&mut rest).await.unwrap();
        assert_ne!(tag, b'E', "login refused: {}", String::from_utf8_lossy(&rest));
        if tag == b'Z' {
            return stream;
        }
    }
}

/// What the server says next: the SQLSTATE of an ErrorResponse, or "closed" if the connection ended.
async fn next_error(stream: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let Ok(tag) = stream.read_u8().await else { return "closed".into() };
    let len = stream.read_u32().await.unwrap_or(4) as usize;
    let mut body = vec![0u8; len.saturating_sub(4)];
    if stream.read_exact(&mut body).await.is_err() {
        return "closed".into();
    }
    if tag != b'E' {
        return format!("message {:?}", tag as char);
    }
    let code = body.split(|b| *b == 0).find_map(|field| field.strip_prefix(b"C")).unwrap_or_default();
    String::from_utf8_lossy(code).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_sending_large_messages_share_max_client_buffers_and_the_one_over_it_is_told() {
    use tokio::io::AsyncWriteExt;
    let fx = common::start("client_auth = \"trust\"\nmax_client_message = 1048576\nmax_client_buffers = 2097152").await;
    // Four clients each start a 900 KiB query and send 640 KiB of it, then wait: together more than the
    // 2 MiB pgmux lends to messages it must hold whole.
    let mut senders = Vec::new();
    for _ in 0..4 {
        let mut stream = raw_login(fx.addr()).await;
        let mut head = vec![b'Q'];
        head.extend_from_slice(&(900u32 * 1024 + 4).to_be_bytes());
        stream.write_all(&head).await.unwrap();
        stream.write_all(&vec![b' '; 640 * 1024]).await.unwrap();
        senders.push(stream);
    }
    let mut told = 0;
    for stream in &mut senders {
        if let Ok(code) = tokio::time::timeout(Duration::from_secs(2), next_error(stream)).await {
            assert_eq!(code, "53200", "an over-budget client is told why");
            told += 1;
        }
    }
    assert!((1..4).contains(&told), "{told} of 4 clients told: the budget holds two or three such messages");
    // Everyone else is served meanwhile; once the senders are gone, their memory is free for a whole message.
    let c = fx.client().await;
    assert_eq!(scalar(&c, "select 'small'").await, "small");
    drop(senders);
    let big = format!("select length('{}')", "x".repeat(900 * 1024));
    let served = common::eventually(Duration::from_secs(5), || async { c.simple_query(&big).await.is_ok() });
    assert!(served.await, "the memory came back when the senders left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_bind_streams_through_to_servers_with_and_without_the_statement() {
    let fx = common::start("pool_max = 2").await;
    let (a, b) = (fx.client().await, fx.client().await);
    let big: String = "y".repeat(3 << 20);
    // Two clients holding transactions open, so that each statement lands on both server connections.
    a.batch_execute("begin").await.unwrap();
    b.batch_execute("begin").await.unwrap();
    for client in [&a, &b, &a] {
        let stmt = client.prepare("select length($1::text)").await.unwrap();
        let n: i32 = client.query_one(&stmt, &[&big]).await.unwrap().get(0);
        assert_eq!(n, 3 << 20);
    }
    a.batch_execute("commit").await.unwrap();
    b.batch_execute("commit").await.unwrap();
    let n: i32 = a.query_one("select length($1::text)", &[&big]).await.unwrap().get(0);
    assert_eq!(n, 3 << 20, "the unnamed statement too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_whose_name_now_points_at_a_writer_elsewhere_is_given_up_before_its_timeout() {
    // A is the writer the clients are on; B another writer. The "name" moves to B by a reload (on Aurora,
    // the cluster endpoint's DNS flips to the new writer), then A stops answering: a black-holed old writer.
    // server_probe_timeout is long (10 s), so that only the new writer's login can explain a quick verdict.
    let extra = "pool_max = 2\nmax_connections_percent = 0\nserver_probe_timeout = \"10s\"";
    let fx = common::start(extra).await;
    let b = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    let source = std::sync::Arc::new(common::NextConfig::default());
    let listener = pgmux_proxy::Listener::bind(common::config(&fx.pg, extra)).await.unwrap();
    listener.set_config_source(source.clone());
    let (admin, addr) = (listener.admin(), listener.local_addr().unwrap());
    let running = tokio::spawn(listener.run());
    let c = common::connect(addr, &pgmux_testkit::APP_USER, |_| {}).await.unwrap();
    assert_eq!(scalar(&c, "select 1").await, "1");
    // The client's long query runs on A; then the name moves, then A stops answering.
    let started = Instant::now();
    let hung = tokio::spawn(async move {
        let answer = c.simple_query("select pg_sleep(30)").await;
        (c, answer)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut next = common::config(&b, extra);
    next.listen = addr;
    source.set(next);
    admin.reload().expect("the name moves to B");
    signal_server(&fx.pg, "STOP");
    let (c, answer) = tokio::time::timeout(Duration::from_secs(40), hung).await.expect("given up").unwrap();
    let waited = started.elapsed();
    signal_server(&fx.pg, "CONT");
    let err = answer.expect_err("its node was given up");
    assert_eq!(common::code(&err), "08006", "{}", common::message(&err));
    // A quiet second, a quarter of the timeout, a login to B: well inside the 10 s the timeout alone takes.
    assert!(waited < Duration::from_secs(8), "given up after {waited:?}");
    assert_eq!(scalar(&c, "select inet_server_port()::text").await, b.port().to_string(), "the next runs on B");
    running.abort();
}
