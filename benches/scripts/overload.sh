#!/usr/bin/env bash
# The overload benchmark of issue 31 item 4 (not a pass/fail test): a PostgreSQL pinned to 2 CPUs, 500
# pgbench clients each running a CPU-bound statement (a sum over generate_series) in a closed loop, through
# pgmux with max_active_servers, pgmux without it, PgBouncer with a pool of the same size, and directly. Per
# target: the most backends at work at once (pg_stat_activity, state <> 'idle', sampled every 100 ms),
# failed clients, transactions per second, the clients' latency (p50 / p99, from pgbench's per-transaction
# log: it includes the wait in the pooler's queue) and the statement's own time on the server (p50 / p99,
# from log_min_duration_statement = 0: what overload stretches), beside the same statement's server time
# with one client (unloaded).
#
#   benches/scripts/overload.sh PGMUX_BINARY      (needs PostgreSQL 15's initdb, pgbench, pgbouncer; root)
#   CAP=4 CLIENTS=500 SECS=20 CPUS=0,1 benches/scripts/overload.sh target/release/pgmux
#   CLIENTS=100 SECS=3 UNLOADED_SECS=3 benches/scripts/overload.sh target/debug/pgmux   (make bench-quick's form)
#   RATE=40 benches/scripts/overload.sh target/release/pgmux
#
# RATE (transactions per second, all clients together) turns the crowd's closed loop into an open one
# (pgbench -R: each client starts a transaction at random times, Poisson, whether or not others are done):
# a crowd of connections offering work the database can do, rather than more work than it can. The clients'
# latency is then counted from each transaction's scheduled start (pgbench does so under -R), so a wait in a
# queue shows in it; the unloaded row stays one client in a closed loop.
#
# The machine this was written on has 2 CPUs in all: pgbench and the pooler share them with PostgreSQL.
set -euo pipefail
pgmux_bin=$(realpath "$1")
pgbin=${PGBIN:-/usr/lib/postgresql/15/bin}
cap=${CAP:-4} rate=${RATE:-} clients=${CLIENTS:-500} secs=${SECS:-20} cpus=${CPUS:-0,1} unloaded_secs=${UNLOADED_SECS:-10}
work=$(mktemp -d "${TMPDIR:-/tmp}/pgmux-overload.XXXXXX")
chown postgres "$work"
pgport=$((20000 + RANDOM % 10000)); port=$((pgport + 1))
su postgres -c "$pgbin/initdb -D $work/pg -A trust -U postgres" >/dev/null
# max_connections stays PostgreSQL's default (100): what a direct crowd of 500 meets.
printf "log_min_duration_statement = 0\nlog_line_prefix = '%%u|'\n" >> "$work/pg/postgresql.conf"
su postgres -c "taskset -c $cpus $pgbin/pg_ctl -D $work/pg -l $work/pg.log -w start -o '-p $pgport -k $work'" >/dev/null
children=()
cleanup() {
  for pid in "${children[@]}"; do kill "$pid" 2>/dev/null || true; done
  su postgres -c "$pgbin/pg_ctl -D $work/pg -m immediate stop" >/dev/null 2>&1 || true
}
trap cleanup EXIT
psql_pg() { "$pgbin/psql" -X -q -A -t -h 127.0.0.1 -p "$pgport" -U postgres -d postgres "$@"; }
psql_pg -c "create role bench login"
printf 'select sum(i) from generate_series(1, 100000) i;\n' > "$work/tx.sql"

# Most backends of `bench` at work at once, sampled every 100 ms until $work/stop-sampling appears.
sample() {
  local most=0 n
  while [ ! -e "$work/stop-sampling" ]; do
    n=$(psql_pg -c "select count(*) from pg_stat_activity where usename = 'bench' and state <> 'idle'" 2>/dev/null || echo 0)
    [ "${n:-0}" -gt "$most" ] && most=$n
    sleep 0.1
  done
  echo "$most" > "$work/most"
}

# p50 and p99 of the numbers on stdin (one per line), in milliseconds with one decimal.
percentiles() {
  sort -n | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "- | -"; exit }
    p50 = v[int(NR * 0.50) + (NR * 0.50 > int(NR * 0.50))]; p99 = v[int(NR * 0.99) + (NR * 0.99 > int(NR * 0.99))]
    printf "%.1f | %.1f\n", p50, p99 }'
}

# Runs pgbench with $2 clients for $3 s against port $1; prints one table row labelled $4.
run() {
  local target_port=$1 n=$2 t=$3 label=$4
  rm -f "$work/stop-sampling" "$work/most" "$work"/pgbench_log.*
  local mark; mark=$(wc -l < "$work/pg.log")
  sample & local sampler=$!
  local out rc=0 throttle=()
  [ -n "$rate" ] && [ "$n" -gt 1 ] && throttle=(-R "$rate")
  out=$(cd "$work" && "$pgbin/pgbench" -n -f tx.sql -c "$n" -j 2 -T "$t" -l "${throttle[@]}" \
    -h 127.0.0.1 -p "$target_port" -U bench postgres 2>&1) || rc=$?
  touch "$work/stop-sampling"; wait "$sampler"
  local tps failed e2e server
  tps=$(echo "$out" | awk '/^tps = / { printf "%.0f", $3; exit }')
  failed=$(echo "$out" | grep -c -E 'too many|connection to server .* failed|FATAL|ERROR' || true)
  # pgbench's log: client, tx, latency µs, ...
  e2e=$({ cat "$work"/pgbench_log.* 2>/dev/null || true; } | awk '{ print $3 / 1000 }' | percentiles)
  server=$(tail -n +"$((mark + 1))" "$work/pg.log" | { grep '^bench|' || true; } | { grep -o 'duration: [0-9.]* ms' || true; } |
    awk '{ print $2 }' | percentiles)
  echo "| $label | $n | $(cat "$work/most") | ${failed} (pgbench exit $rc) | ${tps:--} | $e2e | $server |"
  [ "$rc" = 0 ] || echo "$out" | grep -E 'too many|FATAL|ERROR|aborted' | sort | uniq -c | head -3 | sed 's/^/<!-- /; s/$/ -->/'
}

start_pgmux() {
  PGMUX_LISTEN=127.0.0.1:$port PGMUX_DATABASE_URL="postgres://bench@127.0.0.1:$pgport/postgres?sslmode=disable" \
    PGMUX_CLIENT_AUTH=trust PGMUX_MAX_CONNECTIONS_PERCENT=0 PGMUX_POOL_MAX=90 PGMUX_MAX_CLIENT_CONN=1000 \
    PGMUX_MAX_ACTIVE_SERVERS=$1 PGMUX_QUERY_WAIT_TIMEOUT=120s PGMUX_LOG_LEVEL=warn "$pgmux_bin" &
  children+=($!)
  for _ in $(seq 1 100); do "$pgbin/pg_isready" -q -h 127.0.0.1 -p "$port" && return; sleep 0.1; done
  echo "pgmux did not start" >&2; exit 1
}

start_pgbouncer() {
  printf '"bench" ""\n' > "$work/users.txt"
  cat > "$work/pgbouncer.ini" <<INI
[databases]
postgres = host=127.0.0.1 port=$pgport dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $work/users.txt
pool_mode = transaction
default_pool_size = $cap
reserve_pool_size = 0
max_client_conn = 1000
query_wait_timeout = 120
listen_backlog = 1024
logfile = $work/pgbouncer.log
INI
  chown postgres "$work/pgbouncer.ini" "$work/users.txt"
  # setpriv execs PgBouncer itself (it refuses to run as root): the pid kept is PgBouncer's.
  setpriv --reuid=postgres --regid=postgres --init-groups pgbouncer -q "$work/pgbouncer.ini" &
  children+=($!)
  for _ in $(seq 1 100); do "$pgbin/pg_isready" -q -h 127.0.0.1 -p "$port" && return; sleep 0.1; done
  echo "PgBouncer did not start" >&2; exit 1
}

stop_last() {
  local pid=${children[-1]}
  kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  sleep 1
}

[ -n "$rate" ] && echo "Open loop: the crowd offers $rate transactions per second in all (pgbench -R $rate)."
echo "| target | clients | most backends at work | failed clients | tps | client p50 (ms) | client p99 (ms) | server p50 (ms) | server p99 (ms) |"
echo "|---|---|---|---|---|---|---|---|---|"
# TARGETS picks some of them (a rerun of one).
for target in ${TARGETS:-unloaded cap nocap pgbouncer direct}; do
  case $target in
    unloaded) run "$pgport" 1 "$unloaded_secs" "direct, 1 client (unloaded)" ;;
    cap) start_pgmux "$cap"; run "$port" "$clients" "$secs" "pgmux, max_active_servers = $cap"; stop_last ;;
    nocap) start_pgmux 0; run "$port" "$clients" "$secs" "pgmux, no cap (pool_max 90)"; stop_last ;;
    pgbouncer)
      start_pgbouncer
      run "$port" "$clients" "$secs" "PgBouncer $(pgbouncer --version | awk 'NR==1 { print $2 }'), default_pool_size = $cap"
      stop_last ;;
    direct) run "$pgport" "$clients" "$secs" "direct (max_connections 100)" ;;
  esac
done
