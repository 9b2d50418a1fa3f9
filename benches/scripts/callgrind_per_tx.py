#!/usr/bin/env python3
"""Instructions per transaction of pgmux and PgBouncer, and where they go, measured with callgrind.

    benches/scripts/callgrind_per_tx.py [--pgmux target/profiling/pgmux] [--short 100] [--long 300]

For each pooler (pgmux, PgBouncer), transport (TCP on 127.0.0.1, the pooler's Unix socket) and protocol
(`-M simple`, W2; `-M extended`, W3) the pooler runs twice under `valgrind --tool=callgrind`, each time
freshly started, while `pgbench -S -c 50 -j 2 -t N` runs N = --short and then N = --long transactions per
client through it. Everything but the transactions (start-up, 50 logins, the pool's connections, exit) is
the same in both runs, so the difference divided by the 50 × (long − short) extra transactions is what one
transaction costs the pooler, in instructions of its own process (user space: the kernel's share is not
seen by callgrind; `perf` sees it, see docs/benchmarks.md). The same difference per function gives the
ranked list printed after each total. With --reconnect, pgbench runs with `-C` (W1): every transaction
on a new client connection, so the figures are per connection with its one transaction.

With --perf, each pooler instead runs natively under `perf record -e cpu-clock -g` while pgbench runs for
--seconds: its CPU time per transaction (utime + stime from /proc), the kernel's share of its samples and
its top symbols, which callgrind cannot see (this machine's virtual CPUs have no hardware counters).

Instruction counts do not depend on the machine's load, so this is the repeatable figure; the time per
transaction (`make bench`, W2/W3 and W2u/W3u) is not. Starts its own PostgreSQL (initdb, trust on
127.0.0.1 and its socket) in a temporary directory; needs valgrind, PostgreSQL 15's binaries, pgbench and
PgBouncer (`/usr/sbin/pgbouncer`). As root, PostgreSQL and PgBouncer run as `postgres`. pgmux should be a
build with symbols: `cargo build --profile profiling -p pgmux`.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

PG_BIN = Path("/usr/lib/postgresql/15/bin")
# pgbench clients; CLIENTS=1 is the load of `instructions-per-tx.sh` (no client waits for another).
CLIENTS = int(os.environ.get("CLIENTS", "50"))
# DBHOST=localhost: pgmux names the database by host name, as most deployments do (see instructions-per-tx.sh).
DBHOST = os.environ.get("DBHOST", "127.0.0.1")
TOP = int(os.environ.get("TOP", "12"))
# The system calls a pooler's data path makes, counted per transaction with --perf.
SYSCALLS = ["recvfrom", "sendto", "read", "write", "readv", "writev", "recvmsg", "sendmsg", "epoll_wait",
            "epoll_pwait", "epoll_ctl"]


def run_as_postgres(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"] + cmd
    return cmd


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, limit: float = 60.0) -> None:
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if proc.poll() is not None:
            raise RuntimeError(f"the pooler exited before listening ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listened on {port} within {limit} s")


class Postgres:
    """A throwaway cluster with the pgbench tables, trusting 127.0.0.1 and its socket."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "pg"
        self.dir.mkdir()
        if os.geteuid() == 0:
            shutil.chown(root, "postgres")
            shutil.chown(self.dir, "postgres")
        self.port = free_port()
        data = self.dir / "data"
        subprocess.run(run_as_postgres([str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                                        "--locale=C", "-E", "UTF8"]), check=True, capture_output=True)
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                f"-c synchronous_commit=off -c max_connections=200 -c shared_buffers=256MB")
        subprocess.run(run_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", opts, "-w", "-l",
                                        str(self.dir / "log"), "start"]), check=True, capture_output=True)
        self.data = data
        subprocess.run([str(PG_BIN / "pgbench"), "-i", "-s", "10", "-q", "-h", "127.0.0.1", "-p", str(self.port),
                        "-U", "postgres", "postgres"], check=True, capture_output=True)

    def stop(self) -> None:
        subprocess.run(run_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop"]),
                       capture_output=True)


def start_pooler(kind: str, args, pg: Postgres, work: Path, out: Path, port: int) -> subprocess.Popen:
    sockets = work / f"{kind}-socket"
    sockets.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(sockets, "postgres")
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no"] if out else []
    if kind == "pgmux":
        env = dict(os.environ, PGMUX_LISTEN=f"127.0.0.1:{port}",
                   PGMUX_DATABASE_URL=f"postgres://postgres@{DBHOST}:{pg.port}/postgres",
                   PGMUX_CLIENT_AUTH="scram-sha-256" if args.scram else "trust",
                   PGMUX_CLIENT_PASSWORD=SCRAM_PASSWORD if args.scram else "",
                   PGMUX_POOL_MAX="20", PGMUX_MAX_CONNECTIONS_PERCENT="0",
                   PGMUX_LOG_LEVEL="warn", PGMUX_UNIX_SOCKET_DIR=str(sockets))
        env.pop("AWS_LAMBDA_RUNTIME_API", None)
        return subprocess.Popen(valgrind + [args.pgmux], env=env, stdout=subprocess.DEVNULL,
                                stderr=open(work / "pgmux.err", "ab"))
    ini = work / "pgbouncer.ini"
    (work / "userlist.txt").write_text(f'"postgres" "{scram_verifier(SCRAM_PASSWORD) if args.scram else ""}"\n')
    auth_type = "scram-sha-256" if args.scram else "trust"
    ini.write_text(
        f"[databases]\npostgres = host=127.0.0.1 port={pg.port} dbname=postgres\n\n[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir = {sockets}\nauth_type = {auth_type}\n"
        f"auth_file = {work / 'userlist.txt'}\npool_mode = transaction\ndefault_pool_size = {args.bouncer_pool}\n"
        f"max_client_conn = 1000\nignore_startup_parameters = extra_float_digits\nlogfile = {work / 'pgbouncer.log'}\n"
        f"log_connections = 0\nlog_disconnections = 0\nlisten_backlog = 1024\n")
    for f in (ini, work / "userlist.txt"):
        if os.geteuid() == 0:
            shutil.chown(f, "postgres")
    if out:
        out.touch()
        if os.geteuid() == 0:
            shutil.chown(out, "postgres")
    return subprocess.Popen(run_as_postgres(valgrind + [args.pgbouncer, "-q", str(ini)]), cwd=work,
                            stdout=subprocess.DEVNULL, stderr=open(work / "pgbouncer.err", "ab"))


# The clients' password with --scram (a throwaway PostgreSQL, never a real secret).
SCRAM_PASSWORD = "bench-only-password"


def start_plain(binary: str, pgbouncer: str, pg: Postgres, root: Path) -> tuple[subprocess.Popen, int]:
    """`binary` ("pgbouncer" for PgBouncer) started as start_pooler starts it, with trust and no valgrind, in a
    work directory of its own under `root`, listening; the process and its port."""
    kind = "pgbouncer" if binary == "pgbouncer" else "pgmux"
    work = Path(tempfile.mkdtemp(dir=root))
    if os.geteuid() == 0:
        shutil.chown(work, "postgres")
    opts = argparse.Namespace(pgmux=binary, pgbouncer=pgbouncer, bouncer_pool=20, scram=False)
    port = free_port()
    pooler = start_pooler(kind, opts, pg, work, None, port)
    try:
        wait_port(port, pooler)
    except BaseException:
        stop(pooler, 60)
        raise
    return pooler, port


def scram_verifier(password: str) -> str:
    """PostgreSQL's stored form of a SCRAM-SHA-256 password. Given the plain password instead, PgBouncer derives
    the keys (4,096 rounds of PBKDF2) on every login, which would dwarf everything else counted."""
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return f"SCRAM-SHA-256$4096:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


def pgbench(mode: str, args) -> list[str]:
    """pgbench's select-only load in `mode`, with `-C` (a new connection per transaction) for --reconnect."""
    reconnect = ["-C"] if args.reconnect else []
    return [str(PG_BIN / "pgbench"), "-n", "-S", *reconnect, "-M", mode, "-c", str(CLIENTS), "-j", str(min(2, CLIENTS))]


def one_run(kind: str, transport: str, mode: str, per_client: int, args, pg: Postgres, work: Path) -> Path:
    """Start the pooler under callgrind, run pgbench through it, stop it; the callgrind file."""
    out = work / f"{kind}-{transport}-{mode}-{per_client}.callgrind"
    port = free_port()
    pooler = start_pooler(kind, args, pg, work, out, port)
    try:
        wait_port(port, pooler)
        host = str(work / f"{kind}-socket") if transport == "unix" else "127.0.0.1"
        bench = subprocess.run([*pgbench(mode, args), "-t", str(per_client), "-h", host, "-p", str(port),
                                "-U", "postgres", "postgres"],
                               capture_output=True, text=True,
                               env=dict(os.environ, PGSSLMODE="disable", PGPASSWORD=SCRAM_PASSWORD))
        if bench.returncode != 0 or "number of failed transactions: 0" not in bench.stdout:
            raise RuntimeError(f"pgbench failed through {kind}:\n{bench.stdout}\n{bench.stderr}")
    finally:
        stop(pooler, 120)
    return out


def stop(pooler: subprocess.Popen, patience: float) -> None:
    """SIGTERM, then SIGKILL if the pooler has not exited within `patience` seconds."""
    pooler.send_signal(signal.SIGTERM)
    try:
        pooler.wait(patience)
    except subprocess.TimeoutExpired:
        pooler.kill()
        pooler.wait()


def costs(callgrind: Path) -> tuple[int, dict[str, int]]:
    """Total instructions and the self cost of every (source file, function), from callgrind_annotate."""
    text = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=no", "--auto=no", str(callgrind)],
                          capture_output=True, text=True, check=True).stdout
    total = 0
    per_fn: dict[str, int] = defaultdict(int)
    for line in text.splitlines():
        m = re.match(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S.*)$", line)
        if not m:
            continue
        cost = int(m.group(1).replace(",", ""))
        if m.group(2).strip() == "PROGRAM TOTALS":
            total = cost
        else:
            per_fn[location(m.group(2))] += cost
    return total, per_fn


def parking(callgrind: Path) -> int:
    """pgmux only: the inclusive cost of tokio's park (epoll_wait and the timer wheel, when the run queue is
    empty). How often the runtime finds nothing to do depends on timing, which valgrind distorts: from run
    to run it moves pgmux's total by up to ~1,800 instructions per transaction while its tasks' own work
    stays within ~1 %, so both are printed."""
    text = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=yes", "--auto=no", str(callgrind)],
                          capture_output=True, text=True, check=True).stdout
    for line in text.splitlines():
        m = re.match(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+\S*:tokio::runtime::scheduler::current_thread::Context::park \[", line)
        if m:
            return int(m.group(1).replace(",", ""))
    return 0


def location(text: str) -> str:
    """`file:function [object]` → `function <- file`, generic parameters and hashes shortened; PgBouncer's
    stripped binary has only addresses, kept with their object."""
    text = text.strip()
    obj = ""
    m = re.search(r"\[(.*)\]$", text)
    if m:
        obj = Path(m.group(1)).name
        text = text[: m.start()].strip()
    file, _, function = text.partition(":") if ":" in text and not text.startswith("0x") else ("", "", text)
    function = re.sub(r"<[^<>]*>", "<…>", function)
    function = re.sub(r"::h[0-9a-f]{16}$", "", function)
    if function.startswith("0x"):
        return f"{function} [{obj}]"
    return f"{function} <- {file}" if file else function


def category(key: str) -> str:
    """Where a cost's instructions come from: the crate or library of its source file."""
    if key.endswith("]"):
        return key[key.rindex("[") + 1 : -1]
    file = key.split(" <- ", 1)[1] if " <- " in key else ""
    for prefix, name in (("crates/proxy/", "pgmux-proxy"), ("crates/proto/", "pgmux-proto"),
                         ("crates/pool/", "pgmux-pool"), ("extension-bin/", "pgmux")):
        if file.startswith(prefix):
            return name
    if "jemalloc" in file:
        return "jemalloc"
    if file.startswith("/rustc/"):
        return "Rust core/std"
    if file.startswith("./") or "sysdeps" in file or "glibc" in file:
        return "glibc"
    m = re.search(r"index\.crates\.io-[0-9a-f]+/([A-Za-z0-9_\-]+?)-\d", file)
    if m:
        return m.group(1)
    return "libraries without line tables" if file in ("", "???") else file


def perf_run(kind: str, transport: str, mode: str, args, pg: Postgres, work: Path) -> str:
    """The pooler natively, `perf record -e cpu-clock` on its pid while pgbench runs for `--seconds`: its CPU
    time per transaction (from /proc), the kernel's share of its samples, and its top symbols."""
    port = free_port()
    pooler = start_pooler(kind, args, pg, work, None, port)
    data = work / f"{kind}-{transport}-{mode}.perf"
    try:
        wait_port(port, pooler)
        pid = pooler.pid  # setpriv and valgrind exec what they run: the pid is the pooler's own
        host = str(work / f"{kind}-socket") if transport == "unix" else "127.0.0.1"
        ticks = lambda: sum(int(x) for x in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11:13])
        before = ticks()
        perf = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-g", "-p", str(pid), "-o", str(data)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        counts = work / f"{kind}-{transport}-{mode}.stat"
        events = ",".join(["raw_syscalls:sys_enter", "context-switches"] + [f"syscalls:sys_enter_{c}" for c in SYSCALLS])
        stat = subprocess.Popen(["perf", "stat", "-x", ",", "-e", events, "-p", str(pid), "-o", str(counts)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        bench = subprocess.run([*pgbench(mode, args), "-T", str(args.seconds), "-h", host, "-p", str(port),
                                "-U", "postgres", "postgres"],
                               capture_output=True, text=True,
                               env=dict(os.environ, PGSSLMODE="disable", PGPASSWORD=SCRAM_PASSWORD))
        for watcher in (perf, stat):
            watcher.send_signal(signal.SIGINT)
            watcher.wait(60)
        used = (ticks() - before) / os.sysconf("SC_CLK_TCK")
        servers = server_connections(pid, pg.port)
        tx = int(re.search(r"actually processed: (\d+)", bench.stdout).group(1))
    finally:
        pooler.send_signal(signal.SIGTERM)
        pooler.wait(60)
    report = lambda sort, limit: subprocess.run(
        ["perf", "report", "-i", str(data), "--no-children", "--sort", sort, "--stdio", "-g", "none",
         "--percent-limit", limit], capture_output=True, text=True).stdout
    by_dso = {m.group(2): float(m.group(1)) for m in re.finditer(r"^\s+([\d.]+)%\s+(\S+)", report("dso", "0"), re.M)}
    kernel = by_dso.get("[kernel.kallsyms]", 0.0)
    lines = [l.strip() for l in report("dso,sym", "1.5").splitlines() if re.match(r"^\s+[\d.]+%", l)]
    calls = {}
    for line in counts.read_text().splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[0].strip().isdigit():
            calls[fields[2].split(":")[-1].replace("sys_enter_", "")] = int(fields[0]) / tx
    named = ", ".join(f"{name} {calls[name]:.2f}" for name in SYSCALLS if calls.get(name, 0) >= 0.01)
    return (f"\n== {kind}-{transport}-{mode} (perf, native): {used * 1e6 / tx:.1f} µs CPU per transaction, "
            f"{tx / args.seconds:,.0f} tps; kernel {kernel:.0f} % of its samples; per transaction "
            f"{calls.get('sys_enter', 0):.2f} system calls ({named}), {calls.get('context-switches', 0):.2f} "
            f"context switches; {servers} server connections at the end\n"
            + "\n".join("   " + l for l in lines[:TOP]))


def server_connections(pid: int, port: int) -> int:
    """The pooler's established TCP connections to `port`: its socket inodes, looked up in the table."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pgmux", default="target/profiling/pgmux")
    parser.add_argument("--pgbouncer", default="/usr/sbin/pgbouncer")
    parser.add_argument("--short", type=int, default=100, help="transactions per client in the short run")
    parser.add_argument("--long", type=int, default=300, help="transactions per client in the long run")
    parser.add_argument("--only", default="", help="e.g. pgmux-tcp-simple,pgbouncer-unix-extended")
    parser.add_argument("--reconnect", action="store_true",
                        help="pgbench -C: every transaction on a new client connection (W1), so the figures are per "
                             "connection and its transaction")
    parser.add_argument("--scram", action="store_true",
                        help="clients log in to both poolers with SCRAM-SHA-256 (PostgreSQL behind them stays on trust)")
    parser.add_argument("--keep", action="store_true", help="keep the callgrind files (the directory is printed)")
    parser.add_argument("--perf", action="store_true",
                        help="instead of callgrind: the poolers natively under `perf record -e cpu-clock`")
    parser.add_argument("--seconds", type=int, default=10, help="length of each pgbench run with --perf")
    parser.add_argument("--bouncer-pool", type=int, default=20,
                        help="PgBouncer's default_pool_size (pgmux's pool_max stays 20)")
    args = parser.parse_args()
    if not Path(args.pgmux).is_file():
        print(f"{args.pgmux} not found: cargo build --profile profiling -p pgmux", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="pgmux-callgrind-"))
    pg = Postgres(root)
    extra = CLIENTS * (args.long - args.short)
    try:
        for kind in ("pgmux", "pgbouncer"):
            for transport in ("tcp", "unix"):
                for mode in ("simple", "extended"):
                    name = f"{kind}-{transport}-{mode}"
                    if args.only and name not in args.only.split(","):
                        continue
                    work = root / name
                    work.mkdir()
                    if os.geteuid() == 0:
                        shutil.chown(work, "postgres")
                    if args.perf:
                        print(perf_run(kind, transport, mode, args, pg, work), flush=True)
                        continue
                    short_run = one_run(kind, transport, mode, args.short, args, pg, work)
                    long_run = one_run(kind, transport, mode, args.long, args, pg, work)
                    short_total, short_fns = costs(short_run)
                    long_total, long_fns = costs(long_run)
                    per_tx = (long_total - short_total) / extra
                    print(f"\n== {name}: {per_tx:,.0f} instructions per transaction "
                          f"({long_total:,} − {short_total:,} over {extra:,} transactions)")
                    if kind == "pgmux":
                        parked = (parking(long_run) - parking(short_run)) / extra
                        print(f"   of which tokio's park (epoll, timers; varies with timing) {parked:,.0f}, "
                              f"everything else {per_tx - parked:,.0f}")
                    diffs = {f: (long_fns.get(f, 0) - short_fns.get(f, 0)) / extra for f in set(long_fns) | set(short_fns)}
                    groups: dict[str, float] = defaultdict(float)
                    for key, cost in diffs.items():
                        groups[category(key)] += cost
                    shares = ", ".join(f"{group} {100 * cost / per_tx:.0f} %"
                                       for group, cost in sorted(groups.items(), key=lambda kv: -kv[1]) if cost > 0.01 * per_tx)
                    print(f"   by source: {shares}")
                    for function, cost in sorted(diffs.items(), key=lambda kv: -kv[1])[:TOP]:
                        print(f"   {cost:9,.0f}  {100 * cost / per_tx:5.1f} %  {function}")
                    sys.stdout.flush()
    finally:
        pg.stop()
        if args.keep:
            print(f"\ncallgrind files kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
