#!/usr/bin/env bash
# Instructions pgmux executes per transaction, for each binary given, under W2 (pgbench -S -M simple) and
# W3 (-M extended): pgmux runs under valgrind (cachegrind, no cache simulation) in front of a throwaway
# PostgreSQL, once with a short and once with a long pgbench run; the difference in instructions divided by
# the difference in transactions leaves start-up, warm-up and shutdown out. Unlike CPU time, the count
# does not depend on what else the machine runs, so a few hundred instructions show up. One pgbench client:
# with several, how often one waits for another's server connection changes from run to run (by about
# 1,500 instructions per transaction here), which would hide what is measured.
#
#   benches/scripts/instructions-per-tx.sh BINARY...      (needs valgrind, PostgreSQL 15's initdb, pgbench)
#
# DBHOST=localhost names the database by host name, as most deployments do (the script's default is
# 127.0.0.1): tokio then resolves it on a thread of its blocking pool, and the process is no longer
# single-threaded (which glibc's system-call wrappers notice; docs/benchmarks.md).
set -euo pipefail
pgbin=${PGBIN:-/usr/lib/postgresql/15/bin}
work=$(mktemp -d "${TMPDIR:-/tmp}/pgmux-instr.XXXXXX")
chown postgres "$work"
pgport=$((20000 + RANDOM % 10000)); port=$((pgport + 1))
su postgres -c "$pgbin/initdb -D $work/pg -A trust -U postgres" >/dev/null
su postgres -c "$pgbin/pg_ctl -D $work/pg -o '-p $pgport -k $work -c max_connections=50' -l $work/pg.log -w start" >/dev/null
trap 'su postgres -c "$pgbin/pg_ctl -D $work/pg -m immediate stop" >/dev/null 2>&1 || true' EXIT
"$pgbin/pgbench" -i -s 1 -q -h 127.0.0.1 -p "$pgport" -U postgres postgres >/dev/null 2>&1
cat > "$work/pgmux.toml" <<TOML
listen = "127.0.0.1:$port"
database_url = "postgres://postgres@${DBHOST:-127.0.0.1}:$pgport/postgres?sslmode=disable"
client_auth = "trust"
pool_max = 4
max_connections_percent = 0
log_level = "warn"
TOML
# Instructions of one pgmux process over one pgbench run of $2 transactions per client, mode $1.
run() {
  local bin=$1 mode=$2 tx=$3
  valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null "$bin" --config "$work/pgmux.toml" \
    2>"$work/vg.log" &
  local pid=$!
  for _ in $(seq 1 300); do
    "$pgbin/pg_isready" -q -h 127.0.0.1 -p "$port" && break
    sleep 0.1
  done
  "$pgbin/pgbench" -S -M "$mode" -c 1 -t "$tx" -h 127.0.0.1 -p "$port" -U postgres postgres >/dev/null 2>&1
  kill -TERM "$pid"
  wait "$pid" || true
  grep 'I *refs' "$work/vg.log" | tr -d ',' | awk '{print $NF}'
}
short=1000 long=6000 clients=1
printf '| binary | mode | instructions per transaction |\n|---|---|---|\n'
for bin in "$@"; do
  for mode in ${MODES:-simple extended}; do
    a=$(run "$bin" "$mode" "$short"); b=$(run "$bin" "$mode" "$long")
    echo "| $(basename "$bin") | $mode | $(( (b - a) / ((long - short) * clients) )) |"
  done
done
