#!/usr/bin/env python3
"""What an idle pooler costs in CPU per second, thread by thread, side by side.

    benches/scripts/idle_cpu.py [--pgmux BIN[,BIN…]] [--seconds 20]

Each pgmux binary given, then PgBouncer, is started against one throwaway PostgreSQL (the set-up of
callgrind_per_tx.py), runs one `select 1` through psql (so that its pool holds one server connection), and
is left alone for `--seconds`. Each thread's run time (the first field of /proc/<pid>/task/<tid>/schedstat,
in nanoseconds) is read before and after: what the pooler's timers and periodic work cost while nothing
happens. Needs root (PostgreSQL runs as the `postgres` user) and PgBouncer.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import callgrind_per_tx as lab  # noqa: E402


def per_thread_ns(pid: int) -> dict[str, int]:
    tasks = Path(f"/proc/{pid}/task")
    runtimes = {}
    for tid in os.listdir(tasks):
        name = (tasks / tid / "comm").read_text().strip()
        runtimes[f"{name}/{tid}"] = int((tasks / tid / "schedstat").read_text().split()[0])
    return runtimes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pgmux", default="target/release/pgmux", help="one binary, or several separated by commas")
    parser.add_argument("--pgbouncer", default="/usr/sbin/pgbouncer")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pgmux-idle-cpu-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    pg = lab.Postgres(root)
    try:
        for binary in args.pgmux.split(",") + ["pgbouncer"]:
            pooler, port = lab.start_plain(binary, args.pgbouncer, pg, root)
            try:
                subprocess.run([str(lab.PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                                "postgres", "-c", "select 1"], check=True, capture_output=True,
                               env=dict(os.environ, PGSSLMODE="disable"))
                time.sleep(2)
                before = per_thread_ns(pooler.pid)
                time.sleep(args.seconds)
                after = per_thread_ns(pooler.pid)
                used = {t: (ns - before.get(t, 0)) / args.seconds / 1000 for t, ns in after.items()}
                threads = ", ".join(f"{t.split('/')[0]} {us:,.0f}" for t, us in used.items())
                print(f"{binary}: {sum(used.values()):,.0f} µs of CPU per second idle ({threads})", flush=True)
            finally:
                lab.stop(pooler, 60)
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
