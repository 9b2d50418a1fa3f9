//! The columns of every SHOW, in order. PgBouncer's commands use PgBouncer's names, order and units
//! (times in µs; `maxwait` whole seconds plus `maxwait_us`), so pgbouncer_exporter, Datadog's check and
//! dashboards built on them read pgmux unchanged (observability.md §2.3, PgBouncer 1.25). Counts and
//! times are `int8` and labels `text`, types every client of the console reads. pgmux's own commands
//! (SIZING, PINS, PREPARED, LATENCY) are documented column by column here; `doc` says what each holds.
//!
//! PgBouncer's per-pool commands have a row per pool (route and server user), per database clients may
//! name and per user pgmux knows, plus one for the console's own `pgbouncer` database where PgBouncer shows
//! one; with only `database_url` that is one of each, as before routes. Never two rows with the same
//! labels: the exporter rejects a whole scrape for that (§1.4). Traffic (STATS) is counted over all pools
//! together, so STATS has one row for it: the default database's, or `*` when only routes are configured.

use super::table::{ColumnDef, bytea, int4, int8, text};

/// `SHOW VERSION`.
pub const VERSION: &[ColumnDef] = &[text("version", "`pgmux <version>`")];

/// `SHOW POOLS`: one row per (database, user).
pub const POOLS: &[ColumnDef] = &[
    text("database", "database name clients connect to: the route's, or database_url's for the default pool"),
    text("user", "the user pgmux logs in to the server as"),
    int8("cl_active", "clients linked to a server connection, or idle with none needed"),
    int8("cl_waiting", "clients waiting for a server connection"),
    int8("cl_active_cancel_req", "cancel requests forwarded to the server"),
    int8("cl_waiting_cancel_req", "cancel requests not yet forwarded"),
    int8("sv_active", "server connections linked to a client"),
    int8("sv_active_cancel", "server connections sending a cancel"),
    int8("sv_being_canceled", "server connections whose query is being cancelled"),
    int8("sv_idle", "server connections idle and ready"),
    int8("sv_used", "server connections idle past server_check_delay, checked before reuse"),
    int8("sv_tested", "server connections being reset or checked"),
    int8("sv_login", "server connections logging in"),
    int8("maxwait", "age of the oldest waiting client, whole seconds"),
    int8("maxwait_us", "microsecond part of that age"),
    text("pool_mode", "the pool's own: `transaction` or `session` (`statement` for the console)"),
    text("load_balance_hosts", "NULL: pgmux connects to one host"),
];

/// `SHOW STATS_TOTALS`: every counter since start, over all pools (one row, see the module's opening), then
/// the console's database. PgBouncer sends `numeric`;
/// pgmux sends `int8`, which the exporter and psycopg read as plain integers.
pub const STATS_TOTALS: &[ColumnDef] = &[
    text("database", "database name"),
    int8("server_assignment_count", "times a server connection was linked to a client"),
    int8("xact_count", "transactions"),
    int8("query_count", "queries"),
    int8("bytes_received", "bytes received from clients"),
    int8("bytes_sent", "bytes sent to clients"),
    int8("xact_time", "µs spent in transactions, idle in transaction included"),
    int8("query_time", "µs spent running queries"),
    int8("wait_time", "µs clients waited for a server connection"),
    int8("client_parse_count", "Parse messages from clients"),
    int8("server_parse_count", "Parse messages sent to servers"),
    int8("bind_count", "Binds of clients' named statements, added as each transaction ends"),
    int8("client_login_count", "client logins"),
];

/// `SHOW STATS_AVERAGES`: per second (counts, bytes) or per event (µs times) over the last stats
/// period. PgBouncer's names, `avg_` prefix on the last four included.
pub const STATS_AVERAGES: &[ColumnDef] = &[
    text("database", "database name"),
    int8("server_assignment_count", "server assignments per second"),
    int8("xact_count", "transactions per second"),
    int8("query_count", "queries per second"),
    int8("bytes_received", "bytes received from clients per second"),
    int8("bytes_sent", "bytes sent to clients per second"),
    int8("xact_time", "mean transaction time, µs"),
    int8("query_time", "mean query time, µs"),
    int8("wait_time", "mean wait for a server connection, µs"),
    int8("avg_client_parse_count", "client Parses per second"),
    int8("avg_server_parse_count", "server Parses per second"),
    int8("avg_bind_count", "Binds per second"),
    int8("avg_client_login_count", "client logins per second"),
];

/// `SHOW STATS`: `total_*` (since start, as STATS_TOTALS) then `avg_*` (as STATS_AVERAGES).
pub const STATS: &[ColumnDef] = &[
    text("database", "database name"),
    int8("total_server_assignment_count", "see STATS_TOTALS"),
    int8("total_xact_count", "see STATS_TOTALS"),
    int8("total_query_count", "see STATS_TOTALS"),
    int8("total_received", "see STATS_TOTALS bytes_received"),
    int8("total_sent", "see STATS_TOTALS bytes_sent"),
    int8("total_xact_time", "see STATS_TOTALS, µs"),
    int8("total_query_time", "see STATS_TOTALS, µs"),
    int8("total_wait_time", "see STATS_TOTALS, µs"),
    int8("total_client_parse_count", "see STATS_TOTALS"),
    int8("total_server_parse_count", "see STATS_TOTALS"),
    int8("total_bind_count", "see STATS_TOTALS"),
    int8("total_client_login_count", "see STATS_TOTALS"),
    int8("avg_server_assignment_count", "see STATS_AVERAGES"),
    int8("avg_xact_count", "see STATS_AVERAGES"),
    int8("avg_query_count", "see STATS_AVERAGES"),
    int8("avg_recv", "see STATS_AVERAGES bytes_received"),
    int8("avg_sent", "see STATS_AVERAGES bytes_sent"),
    int8("avg_xact_time", "see STATS_AVERAGES, µs"),
    int8("avg_query_time", "see STATS_AVERAGES, µs"),
    int8("avg_wait_time", "see STATS_AVERAGES, µs"),
    int8("avg_client_parse_count", "see STATS_AVERAGES"),
    int8("avg_server_parse_count", "see STATS_AVERAGES"),
    int8("avg_bind_count", "see STATS_AVERAGES"),
    int8("avg_client_login_count", "see STATS_AVERAGES"),
];

/// `SHOW TOTALS`: STATS over every database, one row per figure (`total_xact_count`, `avg_query_time`, ...).
pub const TOTALS: &[ColumnDef] = &[text("name", "figure, as in SHOW STATS"), int8("value", "its value")];

/// `SHOW CLIENTS` and `SHOW SERVERS`: one row per connection.
pub const CONNECTIONS: &[ColumnDef] = &[
    text("type", "`C` client, `S` server"),
    text("user", "clients: the user logged in; servers: the pool's server user"),
    text("database", "the pool's route (console sessions: `pgbouncer`)"),
    text("replication", "`none`"),
    text(
        "state",
        "clients: idle, active (in a transaction), waiting, active_cancel_req, waiting_cancel_req; servers: active, idle, used, tested, new, active_cancel, being_canceled",
    ),
    text("addr", "peer address"),
    int8("port", "peer port"),
    text("local_addr", "clients: the address pgmux accepted them on; servers: the local end of the socket"),
    int8("local_port", "the port of that local end (servers: the client_port pg_stat_activity shows)"),
    text("connect_time", "when it connected, YYYY-MM-DD HH:MM:SS UTC"),
    text("request_time", "its last request, same form"),
    int8("wait", "seconds this client has waited (0 for servers)"),
    int8("wait_us", "microsecond part of the wait"),
    int8("close_needed", "1 when the server connection will be closed as it comes back (RECONNECT, RELOAD)"),
    text("ptr", "pgmux's id of this connection, in hex"),
    text("link", "ptr of the connection it is linked to, or NULL"),
    int8("remote_pid", "servers: backend PID; clients: 0"),
    text("tls", "TLS version and cipher, or empty"),
    text("application_name", "the client's application_name"),
    int8("prepared_statements", "servers: statements prepared on it; clients: 0 (see SHOW PREPARED)"),
    int8("id", "the number KILL_CLIENT takes"),
];

/// `SHOW SOCKETS` and `SHOW ACTIVE_SOCKETS`: the columns of CLIENTS and SERVERS, then PgBouncer's seven
/// buffer positions, in PgBouncer's types (`int4`; `id` is `int8`: pgmux's ids are 64-bit and an `int4`
/// would wrap on a long-lived sidecar). pgmux does not show its buffers, so those seven are NULL.
pub const SOCKETS: &[ColumnDef] = &[
    text("type", "`C` client, `S` server"),
    text("user", "user name"),
    text("database", "database name"),
    text("replication", "`none`"),
    text("state", "cl_active, cl_waiting (clients); sv_active, sv_idle (server connections)"),
    text("addr", "peer address"),
    int4("port", "peer port"),
    text("local_addr", "clients: the address pgmux accepted them on; servers: the local end of the socket"),
    int4("local_port", "the port of that local end"),
    text("connect_time", "when it connected, YYYY-MM-DD HH:MM:SS UTC"),
    text("request_time", "its last request, same form"),
    int4("wait", "seconds this client has waited (0 for servers)"),
    int4("wait_us", "microsecond part of the wait"),
    int4("close_needed", "1 when the server connection will be closed as it comes back"),
    text("ptr", "pgmux's id of this connection, in hex"),
    text("link", "ptr of the connection it is linked to, or NULL"),
    int4("remote_pid", "servers: backend PID; clients: 0"),
    text("tls", "`TLS` or empty"),
    text("application_name", "the client's application_name"),
    int4("prepared_statements", "servers: statements prepared on it; clients: 0"),
    int8("id", "the number KILL_CLIENT takes"),
    int4("recv_pos", "NULL: pgmux does not show its buffers"),
    int4("pkt_pos", "NULL"),
    int4("pkt_remain", "NULL"),
    int4("send_pos", "NULL"),
    int4("send_remain", "NULL"),
    int4("pkt_avail", "NULL"),
    int4("send_avail", "NULL"),
];

/// `SHOW FDS` (admin only): PgBouncer's sockets to hand over in an online restart, with cancel keys and
/// passwords. pgmux hands over nothing, so no rows, ever.
pub const FDS: &[ColumnDef] = &[
    int4("fd", "file descriptor"),
    text("task", "`pooler`, `client` or `server`"),
    text("user", "user name"),
    text("database", "database name"),
    text("addr", "peer address"),
    int4("port", "peer port"),
    int8("cancel", "cancel key"),
    int4("link", "fd of the linked connection"),
    text("client_encoding", "the connection's client_encoding"),
    text("std_strings", "its standard_conforming_strings"),
    text("datestyle", "its DateStyle"),
    text("timezone", "its TimeZone"),
    text("password", "the password PgBouncer learnt through auth_query"),
    bytea("scram_client_key", "SCRAM ClientKey"),
    bytea("scram_server_key", "SCRAM ServerKey"),
];

/// `SHOW MEM`: PgBouncer lists its slab caches; pgmux lists what it keeps per connection.
pub const MEM: &[ColumnDef] = &[
    text("name", "client_entry, server_entry (SHOW CLIENTS' and SERVERS' entries), message_buffers"),
    int4("size", "bytes of one item (an entry itself, not what it points to; 1 for message_buffers)"),
    int4("used", "items in use (message_buffers: bytes lent to clients' large messages)"),
    int4("free", "0: pgmux keeps no free items"),
    int4("memtotal", "size x used, bytes (at most 2147483647)"),
];

/// `SHOW DNS_HOSTS`: PgBouncer's DNS cache. pgmux resolves the host anew for every server connection and
/// caches nothing: no rows.
pub const DNS_HOSTS: &[ColumnDef] =
    &[text("hostname", "host name"), int8("ttl", "seconds left"), text("addrs", "addresses, comma-separated")];

/// `SHOW DNS_ZONES`: PgBouncer's watched DNS zones (c-ares). pgmux watches none: no rows.
pub const DNS_ZONES: &[ColumnDef] =
    &[text("zonename", "zone"), int8("serial", "its SOA serial"), int4("count", "host names in it")];

/// `SHOW PEERS`: PgBouncer processes that forward cancel requests to each other. pgmux has no peers: no rows.
pub const PEERS: &[ColumnDef] = &[
    int4("peer_id", "peer_id"),
    text("host", "host"),
    int4("port", "port"),
    int4("pool_size", "cancel requests in flight to it at most"),
];

/// `SHOW PEER_POOLS`: the pools of those peers. No rows.
pub const PEER_POOLS: &[ColumnDef] = &[
    int4("peer_id", "peer_id"),
    int4("cl_active_cancel_req", "cancel requests forwarded"),
    int4("cl_waiting_cancel_req", "cancel requests waiting"),
    int4("sv_active_cancel", "connections forwarding one"),
    int4("sv_login", "connections logging in"),
];

/// `SHOW DATABASES`: one row per database clients may name: `database_url`'s when it is set, each
/// `[[databases]]` route (a `*` route through the names clients gave), then the console's own.
pub const DATABASES: &[ColumnDef] = &[
    text("name", "database name clients use"),
    text("host", "database host"),
    int8("port", "database port"),
    text("database", "database name on the server"),
    text("force_user", "the user every client of it logs in to the server as, or NULL: each client's own"),
    int8("pool_size", "the limit of one pool: database_url's in force, a route's pool_size, else the budget"),
    int8("min_pool_size", "connections kept open per pool"),
    int8(
        "reserve_pool_size",
        "its pools' reserve_pool_size (one column only: the exporter maps this and reserve_pool to one metric)",
    ),
    int8("server_lifetime", "server_lifetime, seconds"),
    text("pool_mode", "`transaction` or `session`"),
    text("load_balance_hosts", "NULL"),
    int8("max_connections", "database_url's: the pool limit in force; a route's: max_db_connections (0 = none)"),
    int8("current_connections", "server connections open, over its pools"),
    int8("max_client_connections", "max_db_client_connections in force (0: no limit)"),
    int8("current_client_connections", "clients logged in to it now"),
    int8("paused", "1 while PAUSEd"),
    int8("disabled", "1 while DISABLEd: new clients refused"),
];

/// `SHOW USERS`: one row per user pgmux knows (`[[users]]`, the auth file, database_url's, and every user
/// a pool logs in as). PgBouncer sends pool_size and reserve_pool_size as text. No password, ever.
pub const USERS: &[ColumnDef] = &[
    text("name", "user name"),
    text("pool_size", "the user's own pool_size, or empty"),
    text("reserve_pool_size", "the user's own reserve_pool_size, or empty"),
    text("pool_mode", "the user's own pool_mode, or NULL: the database's"),
    int8("max_user_connections", "server connections of all its pools at most (0: no limit)"),
    int8("current_connections", "server connections logged in as this user"),
    int8("max_user_client_connections", "max_user_client_connections in force (0: no limit)"),
    int8("current_client_connections", "clients logged in as this user now, console sessions included"),
];

/// `SHOW LISTS`: one row per list, PgBouncer's rows in its order ([`LISTS_ROWS`]).
pub const LISTS: &[ColumnDef] = &[text("list", "what is counted"), int8("items", "how many")];

/// The rows of SHOW LISTS. The exporter maps most to gauges and needs every value numeric.
pub const LISTS_ROWS: [&str; 14] = [
    "databases",
    "users",
    "peers",
    "pools",
    "peer_pools",
    "free_clients",
    "used_clients",
    "login_clients",
    "free_servers",
    "used_servers",
    "dns_names",
    "dns_zones",
    "dns_queries",
    "dns_pending",
];

/// `SHOW CONFIG`: one row per setting, PgBouncer's settings first under PgBouncer's names and units, then
/// pgmux's own (`settings`). The exporter reads `max_client_conn` and `max_user_connections` as numbers,
/// so both rows must be there (the second is `0`: no per-user limit).
pub const CONFIG: &[ColumnDef] = &[
    text("key", "setting name"),
    text("value", "value in force (passwords hidden)"),
    text("default", "default value"),
    text("changeable", "`yes` if SET or RELOAD changes it live, `no` if it needs a restart"),
];

/// `SHOW STATE`: rows `active`, `paused`, `suspended` (`yes`/`no`).
pub const STATE: &[ColumnDef] = &[text("key", "state"), text("value", "`yes` or `no`")];

/// `SHOW SIZING` (pgmux): one row, how the pool limit was worked out (README "How big the pool is").
pub const SIZING: &[ColumnDef] = &[
    text("sizing", "`database` when the limit comes from max_connections, `off` when max_connections_percent = 0"),
    int8("max_connections", "the server's max_connections (NULL before the first reading)"),
    int8(
        "reserved",
        "reserved slots: superuser_reserved_connections + reserved_connections + rds.rds_superuser_reserved_connections",
    ),
    int8("usable", "max_connections - reserved"),
    int8("max_connections_percent", "the share of usable the fleet may take"),
    int8("budget", "usable x max_connections_percent / 100: what the fleet and everyone else may hold"),
    int8("in_use", "client backends on the server at the last reading, every database and role"),
    int8("outsiders", "of those, not pgmux's"),
    int8("fleet_instances", "pgmux instances sharing the database, this one included"),
    int8("share", "this instance's equal share of what the others leave"),
    int8("pool_max", "pool_max, or NULL when unset"),
    int8("planned_limit", "the share capped by pool_max, at least 1"),
    int8("limit", "the limit in force: planned_limit, or lower after the server refused connections (53300)"),
    int8("open", "server connections open now (control connection excluded)"),
    text("sees_all_backends", "`yes` if the role reads every row of pg_stat_activity (pg_read_all_stats)"),
    text("last_reading", "when the control connection last read the server, YYYY-MM-DD HH:MM:SS UTC"),
    text("last_error", "why the last reading failed, or NULL"),
];

/// `SHOW PINS` (pgmux): one row per client pinned to its server connection.
pub const PINS: &[ColumnDef] = &[
    int8("client_id", "the client's id, as in SHOW CLIENTS"),
    text("user", "user name"),
    text("database", "database name"),
    text("application_name", "the client's application_name"),
    text("addr", "client address"),
    int8("port", "client port"),
    text(
        "reason",
        "listen, advisory_lock, temp_object, hold_cursor, sql_prepare or load (the pgmux_pins_total labels)",
    ),
    text("detail", "what pinned it: the statement's command tag or function, at most 64 characters"),
    text("pinned_since", "when, YYYY-MM-DD HH:MM:SS UTC"),
    int8("server_id", "the server connection it holds, as id in SHOW SERVERS"),
    int8("server_pid", "that connection's backend PID, for pg_stat_activity"),
];

/// `SHOW PREPARED` (pgmux): one row per server connection, its prepared statements.
pub const PREPARED: &[ColumnDef] = &[
    int8("server_id", "the server connection, as id in SHOW SERVERS"),
    int8("server_pid", "its backend PID"),
    int8("statements", "statements prepared on it now"),
    int8("max_statements", "max_prepared_statements: the most it keeps"),
    int8("hits", "Binds and Describes that found their statement already prepared"),
    int8("parses", "Parses pgmux sent to it (first use, or after eviction)"),
    int8("evictions", "statements closed on it to stay within max_statements"),
];

/// `SHOW LATENCY` (pgmux): one row per latency and window, percentiles in µs (NULL when nothing was
/// measured). Estimates from histogram buckets: within 12.5 % of the exact value, exact below 16 µs.
pub const LATENCY: &[ColumnDef] = &[
    text("latency", "server_wait (for a server connection), transaction, query, server_connect (TCP + TLS + login)"),
    text("window", "`last_minute` or `since_start`"),
    int8("window_s", "seconds the window covers (60 to 65 once pgmux has run a minute)"),
    int8("count", "events measured in the window"),
    int8("mean_us", "mean, µs"),
    int8("p50_us", "median, µs"),
    int8("p90_us", "90th percentile, µs"),
    int8("p99_us", "99th percentile, µs"),
    int8("p999_us", "99.9th percentile, µs"),
];
