//! The stand-in's `aurora_replica_status()`: the table the test writes (on the primary, so that it replicates to
//! every standby), the functions that read it the way Aurora's do, and the rows as a test sees them.
//!
//! AWS documents the function's columns by name and meaning, not by type; the types here are our reading
//! (LSNs and counters as `bigint`, as monitoring tools do arithmetic on them; lag and CPU as `double
//! precision`). A consumer that casts (`replica_lag_in_msec::float8`) does not depend on the guess.

/// `session_id` of the writer's row, as on Aurora.
pub const MASTER_SESSION_ID: &str = "MASTER_SESSION_ID";

/// The schema holding the rows the test controls.
pub const SCHEMA: &str = "pgmux_standin";

/// The custom setting each instance is started with that names it (`aurora_db_instance_identifier()`).
pub(super) const SERVER_ID_SETTING: &str = "pgmux_standin.server_id";

/// Created once on the first primary, in the test database. The functions go into `pg_catalog`, as on
/// Aurora, so that both `aurora_replica_status()` and `pg_catalog.aurora_replica_status()` (what the AWS JDBC
/// wrapper runs) resolve.
pub(super) fn install_sql() -> String {
    format!(
        "set synchronous_commit = on;
         create schema {SCHEMA};
         create table {SCHEMA}.topology (
             server_id text primary key,
             session_id text not null,
             replica_lag_in_msec double precision default 0,
             -- NULL: \"just now\" at every read, as for a healthy instance; set, it ages like a stale one.
             last_update_timestamp timestamptz,
             cpu double precision not null default 0,
             last_transport_error integer not null default 0,
             last_error_timestamp timestamptz
         );
         grant usage on schema {SCHEMA} to public;
         grant select on {SCHEMA}.topology to public;

         create function pg_catalog.aurora_db_instance_identifier() returns text
         language sql stable as $$ select current_setting('{SERVER_ID_SETTING}', true) $$;

         create function pg_catalog.aurora_replica_status(
             out server_id text, out session_id text,
             out durable_lsn bigint, out highest_lsn_rcvd bigint, out current_read_lsn bigint,
             out cur_replay_latency_in_usec bigint, out active_txns bigint, out is_current boolean,
             out last_transport_error integer, out last_error_timestamp timestamptz,
             out last_update_timestamp timestamptz, out feedback_xmin bigint, out feedback_epoch bigint,
             out replica_lag_in_msec double precision, out log_stream_speed_in_kib_per_second double precision,
             out log_buffer_sequence_number bigint, out oldest_read_view_trx_id bigint,
             out oldest_read_view_lsn bigint, out pending_read_ios bigint, out read_ios bigint,
             out iops bigint, out cpu double precision)
         returns setof record language sql stable as $$
             select t.server_id, t.session_id,
                    null::bigint, null::bigint, null::bigint,
                    0::bigint, 0::bigint, null::boolean,
                    t.last_transport_error, t.last_error_timestamp,
                    -- Aurora 13.9 and later: NULL for the instance the query runs on.
                    case when t.server_id = pg_catalog.aurora_db_instance_identifier() then null
                         else coalesce(t.last_update_timestamp, now()) end,
                    null::bigint, null::bigint,
                    t.replica_lag_in_msec, 0::double precision,
                    null::bigint, null::bigint,
                    null::bigint, 0::bigint, 0::bigint,
                    0::bigint, t.cpu
             from {SCHEMA}.topology t
             order by t.session_id <> '{MASTER_SESSION_ID}', t.server_id
         $$;"
    )
}

/// SQL text for a string literal.
pub(super) fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Statements as one topology write: one transaction with a local flush, so that it is on its way to the
/// standbys when the call returns (the harness runs PostgreSQL with `synchronous_commit = off`).
pub(super) fn write(statements: &[String]) -> String {
    format!("set synchronous_commit = on; begin; {} commit;", statements.concat())
}

/// The row of a new instance: the writer's session id, or a fresh uuid for a reader.
pub(super) fn insert_row(server_id: &str, writer: bool) -> String {
    let session = if writer { literal(MASTER_SESSION_ID) } else { "gen_random_uuid()::text".to_owned() };
    format!("insert into {SCHEMA}.topology (server_id, session_id) values ({}, {session});", literal(server_id))
}

/// `server_id` becomes the writer (lag 0) and whoever was the writer gets a reader's uuid; answers `updated`
/// if the row exists.
pub(super) fn set_writer(server_id: &str) -> String {
    let id = literal(server_id);
    format!(
        "update {SCHEMA}.topology set session_id = gen_random_uuid()::text
             where session_id = '{MASTER_SESSION_ID}' and server_id <> {id};
         update {SCHEMA}.topology set session_id = '{MASTER_SESSION_ID}', replica_lag_in_msec = 0
             where server_id = {id} returning 'updated';"
    )
}

/// Set columns of one row; answers `updated` if the row exists.
pub(super) fn update(server_id: &str, assignment: &str) -> String {
    format!("update {SCHEMA}.topology set {assignment} where server_id = {} returning 'updated';", literal(server_id))
}

/// Drop a row; answers `deleted` if it existed.
pub(super) fn delete(server_id: &str) -> String {
    format!("delete from {SCHEMA}.topology where server_id = {} returning 'deleted';", literal(server_id))
}

/// What a topology read selects; [`ReplicaStatus::parse`] reads it back.
pub(super) const READ: &str = "select server_id, session_id, coalesce(replica_lag_in_msec::text, ''), \
     coalesce(last_update_timestamp::text, '') from aurora_replica_status()";

/// One row of `aurora_replica_status()` as seen from one instance: the columns a pooler reads.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaStatus {
    pub server_id: String,
    /// [`MASTER_SESSION_ID`] for the writer, a uuid for a reader.
    pub session_id: String,
    /// `None` when the test set it to NULL (Aurora's readers report a number; the AWS JDBC wrapper coalesces).
    pub replica_lag_in_msec: Option<f64>,
    /// As text (`2026-01-02 03:04:05.678+00`); `None` for the instance the query ran on.
    pub last_update_timestamp: Option<String>,
}

impl ReplicaStatus {
    pub fn is_writer(&self) -> bool {
        self.session_id == MASTER_SESSION_ID
    }

    /// Rows from psql's unaligned output of [`READ`].
    pub(super) fn parse(output: &str) -> Vec<ReplicaStatus> {
        output
            .lines()
            .filter(|line| !line.is_empty())
            .map(|line| {
                let fields: Vec<&str> = line.split('|').collect();
                let [server_id, session_id, lag, updated] = fields[..] else {
                    panic!("pgmux-testkit: unexpected aurora_replica_status() row {line:?}");
                };
                ReplicaStatus {
                    server_id: server_id.to_owned(),
                    session_id: session_id.to_owned(),
                    replica_lag_in_msec: (!lag.is_empty()).then(|| {
                        lag.parse().unwrap_or_else(|e| panic!("pgmux-testkit: lag {lag:?} is not a number: {e}"))
                    }),
                    last_update_timestamp: (!updated.is_empty()).then(|| updated.to_owned()),
                }
            })
            .collect()
    }
}
