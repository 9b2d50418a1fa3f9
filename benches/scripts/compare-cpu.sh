#!/usr/bin/env bash
# W2 / W3 CPU per transaction of two pgmux binaries, side by side: rounds interleaved A B A B ..., each a
# `pgmux-bench --only W2,W3 --rounds 1` run against the same machine state, so that load from anything else
# falls on both alike. Prints each round's figures and the medians (µs of pgmux's own CPU per transaction).
#
#   benches/scripts/compare-cpu.sh BEFORE_BINARY AFTER_BINARY [ROUNDS] [DURATION]
#
# Build first: cargo build --release -p pgmux -p pgmux-bench-lab (and the BEFORE binary from the older commit).
set -euo pipefail
before=$1 after=$2 rounds=${3:-3} duration=${4:-15s}
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp -d "${TMPDIR:-/tmp}/pgmux-compare-cpu.XXXXXX")
for r in $(seq 1 "$rounds"); do
  for which in before after; do
    bin=$before; [ "$which" = after ] && bin=$after
    echo "compare-cpu: round $r $which ($bin)" >&2
    "$root/target/release/pgmux-bench" --only W2,W3 --rounds 1 --duration "$duration" --pgmux "$bin" \
      --json "$out/$which-$r.json" >/dev/null
  done
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def records(v):
    if isinstance(v, dict):
        if {"metric", "target", "outcome"} <= v.keys():
            yield v
        for x in v.values():
            yield from records(x)
    elif isinstance(v, list):
        for x in v:
            yield from records(x)
figures = {}
for which in ("before", "after"):
    for r in range(1, rounds + 1):
        with open(f"{out}/{which}-{r}.json") as f:
            report = json.load(f)
        for rec in records(report):
            if rec["target"] == "Pgmux" and rec["metric"] in ("CpuSimple", "CpuExtended", "SimpleTps", "ExtendedTps"):
                value = rec["outcome"].get("value") if isinstance(rec["outcome"], dict) else None
                figures.setdefault((rec["metric"], which), []).append(value)
print("| figure | before (rounds) | after (rounds) | before median | after median | after - before |")
print("|---|---|---|---|---|---|")
for metric in ("CpuSimple", "CpuExtended", "SimpleTps", "ExtendedTps"):
    b, a = figures.get((metric, "before"), []), figures.get((metric, "after"), [])
    fmt = lambda xs: ", ".join("fails" if x is None else f"{x:.2f}" for x in xs)
    mb = statistics.median([x for x in b if x is not None]) if any(x is not None for x in b) else float("nan")
    ma = statistics.median([x for x in a if x is not None]) if any(x is not None for x in a) else float("nan")
    print(f"| {metric} | {fmt(b)} | {fmt(a)} | {mb:.2f} | {ma:.2f} | {ma - mb:+.2f} |")
print(f"\n(json reports in {out})")
PY
