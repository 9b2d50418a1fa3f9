//! Reader routes on the Aurora stand-in, continued: a reader that goes silent (black-holed) with a
//! transaction on it, with nothing on it, and with transactions waiting for one of its connections.

use std::time::Duration;

use crate::common::{self, code};
use pgmux_proxy::{Config, Listener, ListenerHandle};

use crate::readers::{cluster, config_text, connect, readers_in_metrics, settles, spread, try_where_read, where_read};

/// A reader that hangs (its processes stopped: the kernel accepts and acknowledges, nothing answers) leaves
/// the rotation as soon as a probe declares it dead, about `server_probe_timeout` after its last answer
/// (issue 31: "within `server_probe_timeout`"; the time is printed, 0.99 s here, where it took 2.7 s before
/// the probe's rounds quickened and 1.3–1.4 s before the probe asked the topology poll's connection; the
/// assertion allows twice that), not at its next topology poll (a minute away here). The client whose
/// transaction was on it gets 08006; every next transaction goes to the other reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_reader_leaves_the_rotation_once_a_probe_declares_it_dead() {
    let cluster = cluster(2).await;
    let (r1, r2) = (cluster.endpoint("reader-1").port(), cluster.endpoint("reader-2").port());
    let readers = format!("readers = \"{},{}\"", cluster.endpoint("reader-1"), cluster.endpoint("reader-2"));
    let text = config_text(&cluster, "writer", &readers, "server_probe_timeout = \"1s\"")
        .replace("topology_interval = \"100ms\"", "topology_interval = \"60s\"");
    let handle = Listener::start(Config::from_toml_str(&text).expect("valid")).await.expect("start pgmux");
    let (ro, stuck) = (connect(&handle, "app_ro").await, connect(&handle, "app_ro").await);
    settles(&ro, "on readers", |_, reader| reader).await;
    // A transaction in flight on reader-1 when it hangs.
    let mut on_r1 = false;
    for _ in 0..50 {
        stuck.simple_query("begin").await.expect("begin");
        if where_read(&stuck).await.0 == r1 {
            on_r1 = true;
            break;
        }
        stuck.simple_query("commit").await.expect("commit");
    }
    assert!(on_r1, "no transaction landed on reader-1 in 50");
    assert!(cluster.server("reader-1").hang(true) > 0, "reader-1's processes stopped");
    let hung_at = std::time::Instant::now();

    let err = stuck.simple_query("select 1").await.expect_err("the hung reader never answers");
    let out_after = hung_at.elapsed();
    eprintln!("reader-1 declared dead and out of the rotation {out_after:?} after it hung");
    assert_eq!(code(&err), "08006", "{}", common::message(&err));
    assert!(out_after < Duration::from_secs(2), "declared dead {out_after:?} after it hung (server_probe_timeout 1s)");
    let in_rotation = readers_in_metrics(&handle);
    let hung = in_rotation.iter().find(|(name, _)| name.ends_with(&format!(":{r1}"))).expect("reader-1 listed");
    assert!(!hung.1, "reader-1 still in the rotation after a probe declared it dead: {in_rotation:?}");
    let seen = spread(&ro, 40).await;
    assert_eq!(seen.get(&r2).copied(), Some(40), "every next read on reader-2: {seen:?}");
    assert!(where_read(&stuck).await.0 == r2, "the client that was on reader-1 goes on, on reader-2");
    cluster.server("reader-1").hang(false);
    handle.shutdown().await;
}

/// A reader that hangs with nothing in flight on it (so no probe watches it) leaves the rotation at its next
/// topology poll, which gives up on it after a second at the default one-second interval: before any client
/// has to find out, and with no client error. (The time is printed; at the defaults it is about two seconds,
/// `server_probe_timeout`'s default.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_reader_with_nothing_in_flight_leaves_at_its_next_poll_before_a_client_finds_it() {
    let cluster = cluster(2).await;
    let (r1, r2) = (cluster.endpoint("reader-1").port(), cluster.endpoint("reader-2").port());
    let readers = format!("readers = \"{},{}\"", cluster.endpoint("reader-1"), cluster.endpoint("reader-2"));
    let text = config_text(&cluster, "error", &readers, "")
        .replace("topology_interval = \"100ms\"", "topology_interval = \"1s\"");
    let handle = Listener::start(Config::from_toml_str(&text).expect("valid")).await.expect("start pgmux");
    let ro = connect(&handle, "app_ro").await;
    settles(&ro, "on readers", |_, reader| reader).await;
    assert!(cluster.server("reader-1").hang(true) > 0, "reader-1's processes stopped");
    let hung_at = std::time::Instant::now();
    let out = |handle: &ListenerHandle| {
        let in_rotation = readers_in_metrics(handle);
        in_rotation.iter().any(|(name, healthy)| name.ends_with(&format!(":{r1}")) && !healthy)
    };
    let left = common::eventually(Duration::from_secs(15), || async { out(&handle) }).await;
    eprintln!("reader-1, idle, out of the rotation {:?} after it hung", hung_at.elapsed());
    assert!(left, "a hung reader with nothing in flight stayed in the rotation");
    let seen = spread(&ro, 40).await;
    assert_eq!(seen.get(&r2).copied(), Some(40), "every read on reader-2, none failed: {seen:?}");
    cluster.server("reader-1").hang(false);
    handle.shutdown().await;
}

/// Clients whose transactions wait for a reader when a probe declares it dead are sent on to the other
/// reader at once, with no error: the one whose connection is being opened to the silent host does not wait
/// out `server_connect_timeout`, nor the ones in line at the reader's cap `query_wait_timeout` (or, as each
/// is handed the connection given up by the transaction in flight there, `server_connect_timeout` in turn).
/// The transaction in flight on it gets 08006, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_waiting_for_a_black_holed_reader_go_to_another_once_it_is_declared_dead() {
    let cluster = cluster(2).await;
    let ports = [cluster.endpoint("reader-1").port(), cluster.endpoint("reader-2").port()];
    // Two connections per reader instance, so that reads wait; a minute between polls, so that only the
    // probe takes a reader out; timeouts long enough to tell a wait sent on from one waited out.
    let readers =
        format!("readers = \"{},{}\"\npool_max = 2", cluster.endpoint("reader-1"), cluster.endpoint("reader-2"));
    let extra = "server_probe_timeout = \"1s\"\nserver_connect_timeout = \"10s\"\nquery_wait_timeout = \"30s\"";
    let text = config_text(&cluster, "writer", &readers, extra)
        .replace("topology_interval = \"100ms\"", "topology_interval = \"60s\"");
    let handle = Listener::start(Config::from_toml_str(&text).expect("valid")).await.expect("start pgmux");
    // The route's pools start with its first client; no read yet, which would leave a connection idle.
    let mut first = Some(connect(&handle, "app_ro").await);
    let up = common::eventually(Duration::from_secs(10), || async {
        let readers = readers_in_metrics(&handle);
        readers.len() == 2 && readers.iter().all(|(_, up)| *up)
    });
    assert!(up.await, "both readers in the rotation");
    // Three transactions held open, none committed (a committed one would leave an idle connection behind):
    // each goes to the reader with fewer in use, so one reader holds one and the other two (its cap). The
    // one with one is the victim.
    let mut held = Vec::new();
    for _ in 0..3 {
        let c = match first.take() {
            Some(c) => c,
            None => connect(&handle, "app_ro").await,
        };
        c.simple_query("begin").await.expect("begin");
        let (port, reader) = where_read(&c).await;
        assert!(reader, "a transaction on a reader");
        held.push((port, c));
    }
    let victim = if held.iter().filter(|(p, _)| *p == ports[0]).count() == 1 { 0 } else { 1 };
    let (victim_port, other_port) = (ports[victim], ports[1 - victim]);
    let (victim_name, other_name) = (["reader-1", "reader-2"][victim], ["reader-1", "reader-2"][1 - victim]);
    let stuck_at = held.iter().position(|(p, _)| *p == victim_port).expect("one on the victim");
    let (_, stuck) = held.remove(stuck_at);
    assert!(held.iter().all(|(p, _)| *p == other_port), "two on {other_name}");
    let mut waiting = Vec::new();
    for _ in 0..3 {
        waiting.push(connect(&handle, "app_ro").await);
    }

    assert!(cluster.server(victim_name).hang(true) > 0, "{victim_name}'s processes stopped");
    let hung_at = std::time::Instant::now();
    // Each read goes to the victim, which has fewer connections in use: the first opens one to the silent
    // host, the others wait in line at its cap.
    let mut reads = Vec::new();
    for c in waiting {
        reads.push(tokio::spawn(async move {
            let read = try_where_read(&c).await;
            (read, std::time::Instant::now())
        }));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(reads.iter().all(|r| !r.is_finished()), "the reads wait for {victim_name}");
    let err = tokio::time::timeout(Duration::from_secs(30), stuck.simple_query("select 1"))
        .await
        .expect("declared dead within 30 s")
        .expect_err("the hung reader never answers");
    let dead_at = std::time::Instant::now();
    assert_eq!(code(&err), "08006", "the transaction in flight on {victim_name}: {}", common::message(&err));
    eprintln!("{victim_name} declared dead {:?} after it hung", dead_at - hung_at);
    assert!(dead_at - hung_at < Duration::from_secs(2), "declared dead {:?} after it hung", dead_at - hung_at);
    // The other reader comes free: every read that waited runs there, none failed.
    for (_, c) in &held {
        c.simple_query("commit").await.expect("commit");
    }
    let mut last = dead_at;
    for read in reads {
        let (read, done) = tokio::time::timeout(Duration::from_secs(60), read).await.expect("bounded").expect("join");
        let (port, reader) =
            read.unwrap_or_else(|e| panic!("a waiting read failed: {} {}", code(&e), common::message(&e)));
        assert!(reader && port == other_port, "a waiting read ran on {port}, not {other_name}");
        last = last.max(done);
    }
    eprintln!("every waiting read answered {:?} after {victim_name} was declared dead", last - dead_at);
    assert!(
        last - dead_at < Duration::from_secs(2),
        "reads waiting for {victim_name} were answered {:?} after it was declared dead",
        last - dead_at
    );
    cluster.server(victim_name).hang(false);
    handle.shutdown().await;
}
