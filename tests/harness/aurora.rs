//! A local stand-in for an Aurora PostgreSQL cluster, so that reader routing, lag guards, failover from the
//! topology and a sleeping database can be tested without Aurora (issue 31).
//!
//! What it is: a real PostgreSQL 15 primary (the kit's [`PgServer`]: a copy of the template cluster, SCRAM,
//! run as `postgres` when root) and N real streaming standbys made from it with `pg_basebackup -R` (hot
//! standby, no replication slot, `wal_keep_size` instead), each on 127.0.0.1 with a port of its own. Every
//! node has an instance name, Aurora's `server_id`: `writer-1`, `reader-1`, `reader-2`, … (a name stays with
//! its node when it is promoted, as on Aurora).
//!
//! The topology is what the test says it is. A table `pgmux_standin.topology` on the primary holds one row per
//! instance; `pg_catalog.aurora_replica_status()` returns it with Aurora's 22 columns in Aurora's order, and
//! `pg_catalog.aurora_db_instance_identifier()` names the instance a session is on. Both are created on the
//! primary, so they replicate: every instance answers the same rows, as any Aurora instance can — a standby
//! once it has replayed the write ([`AuroraStandIn::wait_replayed`]). The rows follow the real cluster
//! where the stand-in changes it ([`AuroraStandIn::add_reader`], [`AuroraStandIn::promote`],
//! [`AuroraStandIn::remove`]); the test changes the rest ([`AuroraStandIn::set_lag`],
//! [`AuroraStandIn::set_writer`], [`AuroraStandIn::set_update_age`]).
//!
//! ```no_run
//! use pgmux_testkit::aurora::AuroraStandIn;
//!
//! let mut cluster = AuroraStandIn::start(2);
//! cluster.set_lag("reader-1", 5000.0);
//! cluster.wait_replayed();
//! let rows = cluster.topology_seen_by("reader-2");
//! assert_eq!(rows.iter().filter(|r| r.is_writer()).count(), 1);
//! cluster.promote("reader-1");
//! assert_eq!(cluster.writer(), "reader-1");
//! ```
//!
//! What it mimics and what it does not:
//! - `session_id` is `MASTER_SESSION_ID` for the writer and a uuid for each reader; the row of the instance a
//!   query runs on has a NULL `last_update_timestamp` (Aurora 13.9 and later), the others `now()` unless the
//!   test made them stale. `server_id`, `session_id`, `replica_lag_in_msec`, `last_update_timestamp`, `cpu`,
//!   `last_transport_error` and `last_error_timestamp` come from the table; the LSN and feedback columns are
//!   NULL and the I/O counters 0. AWS documents names, not types: ours are a guess (see `topology.rs`).
//! - Replication is PostgreSQL's WAL streaming, not Aurora's shared storage: a standby is a full copy, takes
//!   a second or so to make, and may really fall behind. `replica_lag_in_msec` is what the test reports, not
//!   measured; real lag is made by pausing replay ([`AuroraStandIn::pause_replay`]).
//! - Instance endpoints are `<server_id>.`[`CLUSTER_DOMAIN`], resolved by [`AuroraStandIn::endpoint_of`] or
//!   by the lines of [`AuroraStandIn::hosts_file`] in a network namespace; every instance is on 127.0.0.1
//!   with a port of its own, where Aurora's instances share one port on addresses of their own, so a pooler
//!   under test needs the port per instance too. There is no cluster or reader endpoint (DNS), no
//!   `aurora_global_db_*`, no `aurora_list_builtins()`.
//! - [`AuroraStandIn::promote`] is a clean failover: the old writer is stopped (fast shutdown, so nothing
//!   acknowledged is lost) and leaves the cluster, the chosen reader is promoted with `pg_promote()`, the
//!   other readers follow it on the new timeline, and the rows are rewritten on it. The old writer does not
//!   come back as a reader.
//! - Servers die with the test process (`PR_SET_PDEATHSIG`) and their directories go on drop, as for every
//!   [`PgServer`].

mod instance;
mod topology;

use std::net::{Ipv4Addr, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

use crate::PgServer;

use instance::Instance;
pub use topology::{MASTER_SESSION_ID, ReplicaStatus, SCHEMA};

#[cfg(test)]
mod tests;

/// The domain of the stand-in's instance endpoints: `reader-1.aurora-standin.test` (Aurora's are
/// `<server_id>.<cluster id>.<region>.rds.amazonaws.com`).
pub const CLUSTER_DOMAIN: &str = "aurora-standin.test";

/// How long every standby may take to replay what the writer has written.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(20);

/// A writer and its streaming readers with a topology the test controls. Dropping it stops every instance and
/// removes their directories.
#[derive(Debug)]
pub struct AuroraStandIn {
    /// The writer first, then the readers in the order they joined.
    instances: Vec<Instance>,
    /// How many readers were ever made, for the next one's name.
    readers_made: usize,
}

impl AuroraStandIn {
    /// `writer-1` and `readers` streaming standbys `reader-1` … `reader-N`, each in the topology; returns
    /// once every reader streams and has replayed the topology.
    pub fn start(readers: usize) -> AuroraStandIn {
        let writer = Instance::primary("writer-1");
        writer.server.psql(&topology::install_sql());
        writer.server.psql(&topology::write(&[topology::insert_row(&writer.name, true)]));
        let mut cluster = AuroraStandIn { instances: vec![writer], readers_made: 0 };
        for _ in 0..readers {
            cluster.add_reader();
        }
        cluster.wait_replayed();
        cluster
    }

    /// The real primary: `writer-1`, or the reader promoted last. [`AuroraStandIn::set_writer`] changes the
    /// rows only, not this.
    pub fn writer(&self) -> &str {
        &self.instances[0].name
    }

    /// The standbys, in the order they joined, running or not.
    pub fn readers(&self) -> Vec<&str> {
        self.instances[1..].iter().map(|i| i.name.as_str()).collect()
    }

    /// The server of an instance (its port, URLs, psql, log).
    pub fn server(&self, server_id: &str) -> &PgServer {
        &self.instance(server_id).server
    }

    /// Where an instance listens: 127.0.0.1 and its own port.
    pub fn endpoint(&self, server_id: &str) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.server(server_id).port()))
    }

    /// Aurora's instance endpoint for a `server_id`: `<server_id>.`[`CLUSTER_DOMAIN`].
    pub fn instance_host(server_id: &str) -> String {
        format!("{server_id}.{CLUSTER_DOMAIN}")
    }

    /// The address of an instance endpoint host name ([`AuroraStandIn::instance_host`]), if it names one of
    /// this cluster's instances.
    pub fn endpoint_of(&self, host: &str) -> Option<SocketAddr> {
        let server_id = host.strip_suffix(CLUSTER_DOMAIN)?.strip_suffix('.')?;
        self.instances.iter().any(|i| i.name == server_id).then(|| self.endpoint(server_id))
    }

    /// `/etc/hosts` lines for a network namespace, one per instance: `127.0.0.1 <instance host>`. The port
    /// is still per instance ([`AuroraStandIn::endpoint`]).
    pub fn hosts_file(&self) -> String {
        self.instances.iter().map(|i| format!("127.0.0.1 {}\n", AuroraStandIn::instance_host(&i.name))).collect()
    }

    /// `aurora_replica_status()` as `server_id` answers it (the columns a pooler reads), writer first.
    pub fn topology_seen_by(&self, server_id: &str) -> Vec<ReplicaStatus> {
        ReplicaStatus::parse(&self.server(server_id).psql(topology::READ))
    }

    /// Report `ms` of lag for `server_id` (`replica_lag_in_msec`). Written on the writer: a standby sees it
    /// after [`AuroraStandIn::wait_replayed`].
    pub fn set_lag(&self, server_id: &str, ms: f64) {
        self.write_row(server_id, &format!("replica_lag_in_msec = {ms}"));
    }

    /// Name `server_id` as the writer in the rows (`MASTER_SESSION_ID`) and the previous one as a reader,
    /// without promoting anything: the topology as a cluster in the middle of a failover reports it. For a
    /// real promotion, [`AuroraStandIn::promote`].
    pub fn set_writer(&self, server_id: &str) {
        self.write(&[topology::set_writer(server_id)], "updated", server_id);
    }

    /// Make `server_id`'s `last_update_timestamp` what it was `age` ago (it keeps ageing), or, with `None`,
    /// "just now" at every read again. The AWS JDBC wrapper ignores readers not updated for 300 s.
    pub fn set_update_age(&self, server_id: &str, age: Option<Duration>) {
        let value = age.map_or("null".to_owned(), |age| format!("now() - interval '{} ms'", age.as_millis()));
        self.write_row(server_id, &format!("last_update_timestamp = {value}"));
    }

    /// Drop `server_id`'s row, leaving its server as it is (an instance the topology no longer lists).
    pub fn remove_row(&self, server_id: &str) {
        self.write(&[topology::delete(server_id)], "deleted", server_id);
    }

    /// A new reader (`reader-<n>`): a base backup of the writer, started, streaming, and in the topology.
    /// Returns its name; the other standbys list it after [`AuroraStandIn::wait_replayed`].
    pub fn add_reader(&mut self) -> String {
        self.readers_made += 1;
        let name = format!("reader-{}", self.readers_made);
        let reader = Instance::standby_of(&self.instances[0], &name);
        self.instances.push(reader);
        self.write(&[topology::insert_row(&name, false)], "", &name);
        name
    }

    /// Take a reader out of the cluster: its row goes, its server stops and its directory is removed.
    pub fn remove(&mut self, server_id: &str) {
        assert_ne!(server_id, self.writer(), "pgmux-testkit: the writer cannot be removed; promote a reader first");
        self.remove_row(server_id);
        let index = self.index(server_id);
        drop(self.instances.remove(index));
    }

    /// Stop an instance with a fast shutdown (the database sleeps; its row stays). A stopped writer takes no
    /// topology writes until it is started again.
    pub fn stop(&mut self, server_id: &str) {
        self.instance_mut(server_id).server.stop_fast();
    }

    /// Kill an instance at once (SIGQUIT: no checkpoint, sessions cut), as a crash would.
    pub fn crash(&mut self, server_id: &str) {
        self.instance_mut(server_id).server.stop();
    }

    /// Start a stopped instance again on its port (the database resumes); returns once it answers and, for a
    /// standby, streams from the writer, or for the writer, once every running standby streams from it again.
    pub fn restart(&mut self, server_id: &str) {
        let index = self.index(server_id);
        self.instances[index].start();
        let (writer, readers) = self.instances.split_at(1);
        if !writer[0].server.is_running() {
            return;
        }
        for reader in readers.iter().filter(|r| r.server.is_running() && (index == 0 || r.name == server_id)) {
            reader.wait_streaming(&writer[0]);
        }
    }

    /// Fail over to the reader `server_id`: the writer stops (fast shutdown) and leaves the cluster, the reader
    /// is promoted with `pg_promote()`, the other readers follow it, and the rows say it is the writer (the old
    /// writer's row is gone). Returns once the running readers stream from it and have replayed the rows.
    pub fn promote(&mut self, server_id: &str) {
        let index = self.index(server_id);
        assert_ne!(index, 0, "pgmux-testkit: {server_id} is the writer already");
        self.resume_replay(server_id);
        if self.instances[0].server.is_running() {
            self.wait_replayed();
        }
        let mut old = self.instances.remove(0);
        old.server.stop_fast();
        let new_writer = self.instances.remove(index - 1);
        let promoted = new_writer.server.psql("select pg_promote(true, 30)");
        assert_eq!(promoted, "t", "pgmux-testkit: {server_id} was not promoted within 30 s");
        assert!(!new_writer.in_recovery(), "pgmux-testkit: {server_id} is still in recovery after pg_promote()");
        self.instances.insert(0, new_writer);
        for reader in &self.instances[1..] {
            reader.follow(&self.instances[0]);
        }
        let rows = [topology::delete(&old.name), topology::set_writer(server_id)];
        self.write(&rows, "deleted\nupdated", server_id);
        drop(old);
        for reader in self.instances[1..].iter().filter(|r| r.server.is_running() && !r.replay_paused) {
            reader.wait_streaming(&self.instances[0]);
        }
        self.wait_replayed();
    }

    /// Pause WAL replay on a reader (`pg_wal_replay_pause()`): it keeps answering queries but falls really
    /// behind, topology included, until [`AuroraStandIn::resume_replay`].
    pub fn pause_replay(&mut self, server_id: &str) {
        let reader = self.reader_mut(server_id);
        reader.server.psql("select pg_wal_replay_pause()");
        reader.replay_paused = true;
    }

    /// Resume WAL replay on a reader; nothing if it was not paused.
    pub fn resume_replay(&mut self, server_id: &str) {
        let reader = self.reader_mut(server_id);
        if reader.replay_paused {
            reader.server.psql("select pg_wal_replay_resume()");
            reader.replay_paused = false;
        }
    }

    /// Wait until every running reader whose replay is not paused has replayed everything the writer has
    /// written so far; panics after 15 s naming the reader that lags.
    pub fn wait_replayed(&self) {
        // The insert position, not the write position: with synchronous_commit = off a commit may still be
        // in the WAL buffers, and the WAL writer sends it on within wal_writer_delay.
        let target = self.writer_psql("select pg_current_wal_insert_lsn()");
        let caught_up = format!("select pg_last_wal_replay_lsn() >= '{target}'::pg_lsn");
        let started = Instant::now();
        for reader in self.instances[1..].iter().filter(|r| r.server.is_running() && !r.replay_paused) {
            loop {
                let seen = reader.server.try_psql(&caught_up);
                if seen.as_deref() == Ok("t") {
                    break;
                }
                assert!(
                    started.elapsed() < REPLAY_TIMEOUT,
                    "pgmux-testkit: {} has not replayed up to {target} after {REPLAY_TIMEOUT:?} ({seen:?})\n\
                     --- {} log ---\n{}",
                    reader.name,
                    reader.name,
                    reader.server.log_tail(20)
                );
                thread::sleep(POLL);
            }
        }
    }

    fn write_row(&self, server_id: &str, assignment: &str) {
        self.write(&[topology::update(server_id, assignment)], "updated", server_id);
    }

    /// One topology transaction on the writer; `expected` is what its `returning` clauses print when every
    /// row it names exists.
    fn write(&self, statements: &[String], expected: &str, server_id: &str) {
        let out = self.writer_psql(&topology::write(statements));
        assert_eq!(out, expected, "pgmux-testkit: the topology has no row {server_id:?} (or has it twice)");
    }

    /// SQL on the writer, which must be running: topology writes go there, as on a real cluster.
    fn writer_psql(&self, sql: &str) -> String {
        let writer = &self.instances[0];
        assert!(
            writer.server.is_running(),
            "pgmux-testkit: the writer {} is stopped; the topology is written on the writer",
            writer.name
        );
        writer.server.psql(sql)
    }

    fn index(&self, server_id: &str) -> usize {
        self.instances.iter().position(|i| i.name == server_id).unwrap_or_else(|| {
            panic!("pgmux-testkit: no instance {server_id:?} in the stand-in (has {:?})", self.names())
        })
    }

    fn instance(&self, server_id: &str) -> &Instance {
        &self.instances[self.index(server_id)]
    }

    fn instance_mut(&mut self, server_id: &str) -> &mut Instance {
        let index = self.index(server_id);
        &mut self.instances[index]
    }

    fn reader_mut(&mut self, server_id: &str) -> &mut Instance {
        let index = self.index(server_id);
        assert_ne!(index, 0, "pgmux-testkit: {server_id} is the writer, not a reader");
        &mut self.instances[index]
    }

    fn names(&self) -> Vec<&str> {
        self.instances.iter().map(|i| i.name.as_str()).collect()
    }
}
