#!/usr/bin/env bash
# W6's memory split the way /proc splits it, for each binary given: a throwaway PostgreSQL, then each binary
# (pgmux, or anything that reads PGMUX_LISTEN, such as target/release/examples/idle_floor) with N idle
# clients (default 10,000), 200 logging in at a time. Prints RSS before and after, anonymous and file-backed
# apart (KiB), and the anonymous bytes per client. pgmux-bench's W6 reports VmRSS only.
#
#   benches/scripts/idle-rss.sh BINARY...      (N=10000 by default; needs root, PostgreSQL 15, python3)
set -euo pipefail
pgbin=${PGBIN:-/usr/lib/postgresql/15/bin}
n=${N:-10000}
work=$(mktemp -d "${TMPDIR:-/tmp}/pgmux-idle.XXXXXX")
chown postgres "$work"
pgport=$((20000 + RANDOM % 10000)); port=$((pgport + 1))
su postgres -c "$pgbin/initdb -D $work/pg -A trust -U postgres" >/dev/null
su postgres -c "$pgbin/pg_ctl -D $work/pg -o '-p $pgport -k $work -c max_connections=100' -l $work/pg.log -w start" >/dev/null
trap 'su postgres -c "$pgbin/pg_ctl -D $work/pg -m immediate stop" >/dev/null 2>&1 || true' EXIT
ulimit -n "$(ulimit -Hn)"
for bin in "$@"; do
  PGMUX_LISTEN=127.0.0.1:$port PGMUX_DATABASE_URL="postgres://postgres@127.0.0.1:$pgport/postgres?sslmode=disable" \
    PGMUX_CLIENT_AUTH=trust PGMUX_LOG_LEVEL=warn PGMUX_POOL_MAX=20 PGMUX_MAX_CLIENT_CONN=$((n + 100)) "$bin" &
  pid=$!
  for _ in $(seq 1 300); do "$pgbin/pg_isready" -q -h 127.0.0.1 -p "$port" && break; sleep 0.1; done
  sleep 0.5
  echo "$(basename "$bin"):"
  python3 "$(dirname "$0")/idle_rss_clients.py" 127.0.0.1 "$port" "$n" "$pid"
  kill -TERM "$pid"; wait "$pid" || true
done
