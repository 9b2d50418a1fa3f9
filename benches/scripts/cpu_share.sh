#!/usr/bin/env bash
# How much of the machine a pooler's share of a pgbench run is, and therefore how far any pooler could
# lift that run: if the pooler cost nothing, the same CPU would serve tps × busy / (busy − pooler).
#
#   benches/scripts/cpu_share.sh PID PORT [pgbench args...]
#
# PID is the pooler's process, PORT where it listens on 127.0.0.1. The default pgbench arguments are W2's
# (-S -M simple -c 50 -j 2 -T 10); PGUSER and PGDATABASE as for pgbench. Reads /proc/stat (user, nice,
# system, irq, softirq: not idle, I/O wait or stolen time) and /proc/PID/stat before and after; prints
# tps, the whole machine's busy CPU per transaction, the pooler's, and the ceiling. Run it side by side
# (pgmux, then PgBouncer, then pgmux...) on an otherwise idle machine. `make bench` reports the same two
# CPU figures for W2 and W3.
set -euo pipefail
if [ $# -lt 2 ]; then
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
pid=$1; port=$2; shift 2
[ $# -gt 0 ] || set -- -S -M simple -c 50 -j 2 -T 10
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
pooler() { awk '{print $14+$15}' "/proc/$pid/stat"; }
b0=$(busy); p0=$(pooler)
out=$(pgbench -h 127.0.0.1 -p "$port" -n "$@" 2>&1) || { echo "$out" >&2; exit 1; }
b1=$(busy); p1=$(pooler)
tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out")
hz=$(getconf CLK_TCK)
python3 - "$tx" "$tps" "$((b1 - b0))" "$((p1 - p0))" "$hz" <<'PY'
import sys
tx, tps, busy, pooler, hz = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
us = 1e6 / hz
machine, own = busy * us / tx, pooler * us / tx
print(f"tps {tps:,.0f}   machine {machine:.1f} µs/tx   pooler {own:.1f} µs/tx   "
      f"zero-cost ceiling {tps * machine / (machine - own):,.0f} tps = {machine / (machine - own):.2f}×")
PY
