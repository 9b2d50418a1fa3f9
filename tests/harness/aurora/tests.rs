//! Tests of the Aurora stand-in itself: real standbys, one topology on every instance, and each knob doing
//! what it says. Two clusters in all, so that the file runs in well under half a minute on two cores.

use std::net::TcpStream;
use std::time::Duration;

use super::{AuroraStandIn, CLUSTER_DOMAIN, MASTER_SESSION_ID, ReplicaStatus};
use crate::psql::psql_as;
use crate::{APP_USER, DATABASE};

/// The AWS JDBC wrapper's topology query (AuroraPgDialect), as it runs it.
const JDBC_TOPOLOGY_QUERY: &str = "SELECT SERVER_ID, CASE WHEN SESSION_ID = 'MASTER_SESSION_ID' THEN TRUE ELSE FALSE END, \
     CPU, COALESCE(REPLICA_LAG_IN_MSEC, 0), LAST_UPDATE_TIMESTAMP FROM pg_catalog.aurora_replica_status() \
     WHERE EXTRACT(EPOCH FROM (NOW() - LAST_UPDATE_TIMESTAMP)) <= 300 OR SESSION_ID = 'MASTER_SESSION_ID' \
     OR LAST_UPDATE_TIMESTAMP IS NULL";

/// `aurora_replica_status()`'s columns in the order AWS documents them.
const AURORA_COLUMNS: &str = "server_id session_id durable_lsn highest_lsn_rcvd current_read_lsn \
     cur_replay_latency_in_usec active_txns is_current last_transport_error last_error_timestamp \
     last_update_timestamp feedback_xmin feedback_epoch replica_lag_in_msec log_stream_speed_in_kib_per_second \
     log_buffer_sequence_number oldest_read_view_trx_id oldest_read_view_lsn pending_read_ios read_ios iops cpu";

fn ids(rows: &[ReplicaStatus]) -> Vec<&str> {
    rows.iter().map(|r| r.server_id.as_str()).collect()
}

fn writers(rows: &[ReplicaStatus]) -> Vec<&str> {
    rows.iter().filter(|r| r.is_writer()).map(|r| r.server_id.as_str()).collect()
}

fn lag_of(rows: &[ReplicaStatus], server_id: &str) -> Option<f64> {
    rows.iter().find(|r| r.server_id == server_id).and_then(|r| r.replica_lag_in_msec)
}

/// Every instance answers the same rows: the writer first, one `MASTER_SESSION_ID`, the caller's own
/// timestamp NULL and everyone else's set.
fn assert_topology_everywhere(cluster: &AuroraStandIn, expected: &[&str]) {
    let mut everyone = vec![cluster.writer()];
    everyone.extend(cluster.readers());
    for seen_by in everyone {
        let rows = cluster.topology_seen_by(seen_by);
        assert_eq!(ids(&rows), expected, "as seen by {seen_by}");
        assert_eq!(writers(&rows), [expected[0]], "as seen by {seen_by}");
        for row in &rows {
            assert_eq!(row.last_update_timestamp.is_none(), row.server_id == seen_by, "{row:?} seen by {seen_by}");
            if !row.is_writer() {
                assert_eq!(row.session_id.len(), 36, "a reader's session id is a uuid: {row:?}");
            }
        }
    }
}

#[test]
fn readers_stream_and_answer_the_topology_the_test_sets() {
    let mut cluster = AuroraStandIn::start(2);
    assert_eq!((cluster.writer(), cluster.readers()), ("writer-1", vec!["reader-1", "reader-2"]));
    assert_topology_everywhere(&cluster, &["writer-1", "reader-1", "reader-2"]);
    for reader in ["reader-1", "reader-2"] {
        assert_eq!(cluster.server(reader).psql("select pg_is_in_recovery()"), "t");
        assert_eq!(cluster.server(reader).psql("select aurora_db_instance_identifier()"), reader);
    }
    assert_eq!(cluster.server("writer-1").psql("select pg_is_in_recovery()"), "f");
    let streaming = "select string_agg(application_name, ',' order by application_name) from pg_stat_replication \
                     where state = 'streaming'";
    assert_eq!(cluster.server("writer-1").psql(streaming), "reader-1,reader-2");

    // What the AWS JDBC wrapper runs, as the application role; Aurora's 22 columns.
    let port = cluster.server("reader-1").port();
    let jdbc = psql_as(port, &APP_USER, DATABASE, JDBC_TOPOLOGY_QUERY).unwrap();
    assert_eq!(jdbc.lines().count(), 3, "{jdbc}");
    assert!(jdbc.starts_with("writer-1|t|0|0|"), "{jdbc}");
    let columns = "select array_to_string(proargnames, ' ') from pg_proc where proname = 'aurora_replica_status'";
    assert_eq!(cluster.server("reader-2").psql(columns), AURORA_COLUMNS);
    assert_eq!(cluster.server("writer-1").psql("show rds.extensions"), "aurora_stat_utils");

    // Reported lag and staleness reach the readers once replayed.
    cluster.set_lag("reader-1", 5000.0);
    cluster.set_update_age("reader-2", Some(Duration::from_secs(600)));
    cluster.wait_replayed();
    let rows = cluster.topology_seen_by("reader-2");
    assert_eq!(lag_of(&rows, "reader-1"), Some(5000.0));
    let jdbc = psql_as(port, &APP_USER, DATABASE, JDBC_TOPOLOGY_QUERY).unwrap();
    let listed: Vec<&str> = jdbc.lines().map(|l| l.split('|').next().unwrap()).collect();
    assert_eq!(listed, ["writer-1", "reader-1"], "a reader stale for 10 min is filtered out");
    cluster.set_update_age("reader-2", None);

    // The rows may name a writer that is not one (a failover in progress), and back.
    cluster.set_writer("reader-2");
    cluster.wait_replayed();
    assert_eq!(writers(&cluster.topology_seen_by("reader-1")), ["reader-2"]);
    assert_eq!(cluster.server("reader-2").psql("select pg_is_in_recovery()"), "t");
    cluster.set_writer("writer-1");
    cluster.wait_replayed();
    assert_topology_everywhere(&cluster, &["writer-1", "reader-1", "reader-2"]);

    // Real lag: a paused reader keeps answering the old rows until it resumes.
    cluster.pause_replay("reader-1");
    cluster.set_lag("reader-2", 7.5);
    cluster.wait_replayed(); // skips the paused reader
    assert_eq!(lag_of(&cluster.topology_seen_by("reader-2"), "reader-2"), Some(7.5));
    assert_eq!(lag_of(&cluster.topology_seen_by("reader-1"), "reader-2"), Some(0.0));
    cluster.resume_replay("reader-1");
    cluster.wait_replayed();
    assert_eq!(lag_of(&cluster.topology_seen_by("reader-1"), "reader-2"), Some(7.5));

    // Instance endpoints.
    let host = AuroraStandIn::instance_host("reader-2");
    assert_eq!(host, format!("reader-2.{CLUSTER_DOMAIN}"));
    assert_eq!(cluster.endpoint_of(&host), Some(cluster.endpoint("reader-2")));
    assert_eq!(cluster.endpoint_of(&format!("reader-9.{CLUSTER_DOMAIN}")), None);
    assert_eq!(cluster.endpoint_of("reader-2.elsewhere.test"), None);
    assert_eq!(
        cluster.hosts_file(),
        format!(
            "127.0.0.1 writer-1.{CLUSTER_DOMAIN}\n127.0.0.1 reader-1.{CLUSTER_DOMAIN}\n127.0.0.1 reader-2.{CLUSTER_DOMAIN}\n"
        )
    );

    // A reader sleeps and resumes, and catches up with what was written meanwhile.
    cluster.stop("reader-2");
    assert!(TcpStream::connect(cluster.endpoint("reader-2")).is_err());
    cluster.set_lag("reader-1", 12.0);
    cluster.wait_replayed(); // skips the stopped reader
    cluster.restart("reader-2");
    cluster.wait_replayed();
    assert_eq!(lag_of(&cluster.topology_seen_by("reader-2"), "reader-1"), Some(12.0));

    // The writer sleeps: readers still answer; it resumes on its port and they stream from it again.
    let writer_port = cluster.server("writer-1").port();
    cluster.stop("writer-1");
    assert_eq!(ids(&cluster.topology_seen_by("reader-1")), ["writer-1", "reader-1", "reader-2"]);
    cluster.restart("writer-1");
    assert_eq!(cluster.server("writer-1").port(), writer_port);
    cluster.set_lag("reader-1", 0.0);
    cluster.wait_replayed();
    assert_eq!(lag_of(&cluster.topology_seen_by("reader-2"), "reader-1"), Some(0.0));

    // A reader crashes and comes back.
    cluster.crash("reader-1");
    assert!(TcpStream::connect(cluster.endpoint("reader-1")).is_err());
    cluster.restart("reader-1");
    assert_eq!(cluster.server("reader-1").psql("select pg_is_in_recovery()"), "t");
}

#[test]
fn a_reader_joins_one_is_promoted_and_one_leaves() {
    let mut cluster = AuroraStandIn::start(2);

    let joined = cluster.add_reader();
    assert_eq!(joined, "reader-3");
    cluster.wait_replayed();
    assert_topology_everywhere(&cluster, &["writer-1", "reader-1", "reader-2", "reader-3"]);
    assert_eq!(cluster.server("reader-3").psql("select pg_is_in_recovery()"), "t");

    let old_writer = cluster.endpoint("writer-1");
    cluster.promote("reader-1");
    assert_eq!((cluster.writer(), cluster.readers()), ("reader-1", vec!["reader-2", "reader-3"]));
    assert_eq!(cluster.server("reader-1").psql("select pg_is_in_recovery()"), "f");
    assert!(TcpStream::connect(old_writer).is_err(), "the old writer is stopped");
    assert_topology_everywhere(&cluster, &["reader-1", "reader-2", "reader-3"]);
    let rows = cluster.topology_seen_by("reader-3");
    assert_eq!(rows[0].session_id, MASTER_SESSION_ID);

    // The other readers follow the new writer: they stream from it and see what is written there.
    let streaming = "select string_agg(application_name, ',' order by application_name) from pg_stat_replication";
    assert_eq!(cluster.server("reader-1").psql(streaming), "reader-2,reader-3");
    cluster.server("reader-1").psql("create table after_failover (v text); insert into after_failover values ('new')");
    cluster.wait_replayed();
    assert_eq!(cluster.server("reader-3").psql("select v from after_failover"), "new");
    assert_eq!(cluster.server("reader-2").psql("select pg_is_in_recovery()"), "t");

    let gone = cluster.endpoint("reader-2");
    cluster.remove("reader-2");
    assert!(TcpStream::connect(gone).is_err());
    cluster.wait_replayed();
    assert_topology_everywhere(&cluster, &["reader-1", "reader-3"]);

    // A writer that is already down (asleep, or stopped by the test) is replaced the same way.
    cluster.stop("reader-1");
    cluster.promote("reader-3");
    assert_eq!((cluster.writer(), cluster.readers()), ("reader-3", vec![]));
    assert_eq!(cluster.server("reader-3").psql("select pg_is_in_recovery()"), "f");
    assert_topology_everywhere(&cluster, &["reader-3"]);
    assert_eq!(cluster.server("reader-3").psql("select v from after_failover"), "new");
}
