#!/usr/bin/env python3
"""What a new client connection with one transaction costs each pooler in CPU, side by side.

    benches/scripts/connect_cost.py [--pgmux BIN[,BIN…]] [--transactions 16000] [--clients 8] [--rounds 4]

`pgbench -S -C` (W1: a new connection for every transaction, as classic Lambda makes one per invocation)
runs through each pgmux binary given and through PgBouncer in turn, round after round, each pooler freshly
started against one throwaway PostgreSQL (the same set-up as callgrind_per_tx.py). For each run it prints
the pooler's CPU time per connection from /proc (all threads' run time, and user and system time apart),
its context switches and the throughput, then the medians. Two builds of pgmux given together are measured
in the same rounds, so a change is seen beside the machine's drift. Needs root (PostgreSQL runs as the
`postgres` user) and PgBouncer.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import callgrind_per_tx as lab  # noqa: E402


def cpu_ns(pid: int) -> int:
    """Run time of every thread, in nanoseconds (schedstat's first field)."""
    tasks = Path(f"/proc/{pid}/task")
    return sum(int((tasks / t / "schedstat").read_text().split()[0]) for t in os.listdir(tasks))


def user_sys_ticks(pid: int) -> tuple[int, int]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def switches(pid: int) -> int:
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        for line in Path(f"/proc/{pid}/task/{t}/status").read_text().splitlines():
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                total += int(line.split()[1])
    return total


def one_run(binary: str, args, pg, root: Path) -> dict:
    pooler, port = lab.start_plain(binary, args.pgbouncer, pg, root)
    try:
        def bench(per_client: int) -> None:
            run = subprocess.run([str(lab.PG_BIN / "pgbench"), "-n", "-S", "-C", "-c", str(args.clients), "-j", "2",
                                  "-t", str(per_client), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                                  "postgres"], capture_output=True, text=True, env=dict(os.environ, PGSSLMODE="disable"))
            if run.returncode != 0 or "number of failed transactions: 0" not in run.stdout:
                raise RuntimeError(f"pgbench failed through {binary}:\n{run.stdout}\n{run.stderr}")

        bench(100 // args.clients + 1)  # the pool's connections and the first logins, not measured
        per_client = args.transactions // args.clients
        n = per_client * args.clients
        cpu0, (u0, s0), sw0, t0 = cpu_ns(pooler.pid), user_sys_ticks(pooler.pid), switches(pooler.pid), time.time()
        bench(per_client)
        cpu1, (u1, s1), sw1, t1 = cpu_ns(pooler.pid), user_sys_ticks(pooler.pid), switches(pooler.pid), time.time()
        tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
        return {"cpu": (cpu1 - cpu0) / 1000 / n, "user": (u1 - u0) * tick_us / n, "sys": (s1 - s0) * tick_us / n,
                "switches": (sw1 - sw0) / n, "tps": n / (t1 - t0)}
    finally:
        lab.stop(pooler, 60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pgmux", default="target/release/pgmux", help="one binary, or several separated by commas")
    parser.add_argument("--pgbouncer", default="/usr/sbin/pgbouncer")
    parser.add_argument("--transactions", type=int, default=16000, help="connections (one transaction each) per run")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    binaries = args.pgmux.split(",") + ["pgbouncer"]
    root = Path(tempfile.mkdtemp(prefix="pgmux-connect-cost-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    pg = lab.Postgres(root)
    runs: dict[str, list[dict]] = {b: [] for b in binaries}
    try:
        for rnd in range(1, args.rounds + 1):
            for binary in binaries:
                r = one_run(binary, args, pg, root)
                runs[binary].append(r)
                print(f"round {rnd} {binary}: {r['cpu']:.1f} µs CPU per connection and transaction (user {r['user']:.1f}, "
                      f"system {r['sys']:.1f}), {r['switches']:.2f} context switches, {r['tps']:,.0f} tps", flush=True)
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)
    print()
    for binary, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("cpu", "user", "sys")}
        rounds = " · ".join(f"{r['cpu']:.1f}" for r in rs)
        print(f"{binary}: median {med['cpu']:.1f} µs (rounds {rounds}); user {med['user']:.1f}, system {med['sys']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
