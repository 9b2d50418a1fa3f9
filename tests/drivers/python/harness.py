"""The runner contract of tests/drivers/README.md for the Python suites: environment, one line per
scenario, a timeout per scenario enforced by running it in a child process group, and the oracle."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import psycopg


def _int(name: str, fallback: int) -> int:
    raw = os.environ.get(name, "")
    if raw == "":
        return fallback
    value = int(raw)
    if value <= 0:
        raise ValueError(f"{name}={raw} is not a positive integer")
    return value


@dataclass(frozen=True)
class Config:
    host: str = os.environ.get("PGHOST", "127.0.0.1")
    port: int = _int("PGPORT", 5432)
    socket_dir: str = os.environ.get("MATRIX_SOCKET_DIR", "/tmp")
    user: str = os.environ.get("PGUSER", "pgmux_app")
    password: str = os.environ.get("PGPASSWORD", "")
    database: str = os.environ.get("PGDATABASE", "pgmux")
    direct_port: int = _int("DIRECT_PGPORT", _int("PGPORT", 5432))
    direct_user: str = os.environ.get("DIRECT_PGUSER", "postgres")
    direct_password: str = os.environ.get("DIRECT_PGPASSWORD", "")
    clients: int = _int("MATRIX_CLIENTS", 50)
    txns: int = _int("MATRIX_TXNS", 100)
    timeout_s: int = _int("MATRIX_TIMEOUT_S", 60)
    pool_max: int = _int("MATRIX_POOL_MAX", 2)

    @property
    def direct(self) -> bool:
        """The suite talks to PostgreSQL itself: there is no pool to stay within."""
        return self.port == self.direct_port


CFG = Config()


class CheckFailed(Exception):
    """A failed check: the scenario prints FAIL with this message."""


def check(cond: Any, message: str) -> None:
    if not cond:
        raise CheckFailed(message)


def eq(actual: Any, expected: Any, what: str) -> None:
    if actual != expected:
        raise CheckFailed(f"{what}: got {actual!r}, want {expected!r}")


def sqlstate(err: BaseException) -> str | None:
    """The SQLSTATE of a psycopg2, psycopg or asyncpg error, if the server sent one."""
    for attr in ("sqlstate", "pgcode"):
        code = getattr(err, attr, None)
        if isinstance(code, str) and len(code) == 5:
            return code
    return None


def describe_error(err: BaseException) -> str:
    if isinstance(err, CheckFailed):
        return str(err)
    text = str(err).strip().splitlines()
    message = text[0] if text else type(err).__name__
    code = sqlstate(err)
    if code:
        return f"ERROR: {message} ({code})"
    return f"{type(err).__name__}: {message} (no SQLSTATE)"


def expect_error(fn: Callable[[], Any], code: str, what: str) -> BaseException:
    """Runs `fn`, which must fail with SQLSTATE `code`; returns the error."""
    try:
        fn()
    except CheckFailed:
        raise
    except Exception as err:  # noqa: BLE001 - any driver's error class
        if sqlstate(err) != code:
            raise CheckFailed(f"{what}: want {code}, got {describe_error(err)}") from err
        return err
    raise CheckFailed(f"{what}: succeeded, want SQLSTATE {code}")


# S16: clients and transactions each, and the query whose answers say which backend served and whether
# its client had an address (a pooler's TCP connection) or not (a Unix-socket client of PostgreSQL itself).
S16_CLIENTS, S16_TXNS = 4, 25
S16_SQL = "SELECT pg_backend_pid(), inet_client_addr() IS NULL"


def judge_socket(seen: list[tuple[int, bool]]) -> str:
    """S16's verdict on every (backend pid, no client address) the transactions saw."""
    total = S16_CLIENTS * S16_TXNS
    eq(len(seen), total, "transactions through the socket")
    unix_clients = sum(1 for _, no_address in seen if no_address)
    pids = {pid for pid, _ in seen}
    if CFG.direct:
        eq(unix_clients, total, "transactions with a Unix client")
        client = "a Unix client"
    else:
        eq(unix_clients, 0, "transactions on a Unix-socket backend")
        check(len(pids) <= CFG.pool_max, f"{len(pids)} backends for MATRIX_POOL_MAX={CFG.pool_max}")
        client = "the pooler's TCP connection"
    return f"{total} txns through {CFG.socket_dir}/.s.PGSQL.{CFG.port}, {len(pids)} backends, each saw {client}"


# S17: two routes of one pooler, each logged in as another user, used by one driver at once (issue 30):
# where they are, who each logs in as, how many interleaved rounds, and the statement both prepare.
@dataclass(frozen=True)
class Routes:
    port: int = _int("MATRIX_ROUTES_PGPORT", _int("PGPORT", 5432))
    a_database: str = os.environ.get("MATRIX_ROUTE_A", os.environ.get("PGDATABASE", "pgmux"))
    a_user: str = os.environ.get("MATRIX_ROUTE_A_USER", "pgmux_plain")
    a_password: str = os.environ.get("MATRIX_ROUTE_A_PASSWORD", "")
    b_database: str = os.environ.get("MATRIX_ROUTE_B", os.environ.get("PGDATABASE", "pgmux"))
    b_user: str = os.environ.get("MATRIX_ROUTE_B_USER", "pgmux_md5")
    b_password: str = os.environ.get("MATRIX_ROUTE_B_PASSWORD", "")


S17 = Routes()
S17_ROUNDS = 20


def judge_routes(seen_a: list[tuple[str, int]], seen_b: list[tuple[str, int]]) -> str:
    """S17's verdict on every (current_user, $1 + 1) each route's connection saw, round by round."""
    for route, user, seen in (("A", S17.a_user, seen_a), ("B", S17.b_user, seen_b)):
        eq(len(seen), S17_ROUNDS, f"route {route} rounds")
        for i, (who, n) in enumerate(seen):
            eq(who, user, f"route {route} round {i}: current_user")
            eq(n, i + 1, f"route {route} round {i}: $1 + 1")
    return (
        f"{S17_ROUNDS} interleaved txns each: {S17.a_database} as {S17.a_user}, "
        f"{S17.b_database} as {S17.b_user}, one statement text on both"
    )


def table(driver: str, scenario: str) -> str:
    """A driver's own fixture table: `psycopg3-prepare0` → `psycopg3_prepare0_s6`."""
    return "".join(c if c.isalnum() else "_" for c in f"{driver}_{scenario}").lower()


class Oracle:
    """PostgreSQL itself, as the superuser, bypassing the pooler."""

    def __init__(self) -> None:
        self.conn = psycopg.connect(
            host=CFG.host,
            port=CFG.direct_port,
            user=CFG.direct_user,
            password=CFG.direct_password,
            dbname=CFG.database,
            application_name="matrix-oracle",
            autocommit=True,
            connect_timeout=10,
        )

    def rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        return self.conn.execute(sql, params).fetchall()

    def app_backends(self) -> int:
        return self.rows(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = %s"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            " AND application_name IS DISTINCT FROM 'pgmux-probe'",
            (CFG.user,),
        )[0][0]

    def sleeping(self, pattern: str) -> int:
        """Backends of the application still running a query like `pattern`."""
        return self.rows(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND state = 'active'"
            " AND query LIKE %s",
            (CFG.user, pattern),
        )[0][0]

    def idle_in_transaction(self, wait_s: float = 3.0) -> list[tuple]:
        deadline = time.monotonic() + wait_s
        while True:
            stuck = self.rows(
                "SELECT pid, left(query, 60) FROM pg_stat_activity"
                " WHERE usename = %s AND state LIKE 'idle in transaction%%'",
                (CFG.user,),
            )
            if not stuck or time.monotonic() > deadline:
                return stuck
            time.sleep(0.1)

    def close(self) -> None:
        self.conn.close()


class BackendSampler:
    """Samples the application's backend count from a thread until stopped."""

    def __init__(self) -> None:
        self.oracle = Oracle()
        self.max = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.max = max(self.max, self.oracle.app_backends())
            self.samples += 1
            time.sleep(0.02)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.oracle.close()
        return self.max

    def verdict(self) -> str:
        """Checks the pool cap (not directly against PostgreSQL) and says what was seen."""
        if CFG.direct:
            return f"max {self.max} backends (cap not checked: direct) ({self.samples} samples)"
        check(self.max <= CFG.pool_max, f"{self.max} backends of {CFG.user} seen, pool_max {CFG.pool_max}")
        return f"max {self.max} backends ({self.samples} samples)"


def check_audit(driver_prefix: str, want: int) -> str:
    """Every S4 audit row is there and came from at least two backends."""
    oracle = Oracle()
    try:
        n, pids = oracle.rows(
            "SELECT count(*), count(DISTINCT pid) FROM audit WHERE client LIKE %s", (f"{driver_prefix}:%",)
        )[0]
    finally:
        oracle.close()
    eq(n, want, "audit rows")
    check(pids >= 2, f"only {pids} distinct backend pid(s) in audit")
    return f"{n} txns, {pids} backend pids"


def clear_audit(driver_prefix: str) -> None:
    oracle = Oracle()
    try:
        oracle.conn.execute("DELETE FROM audit WHERE client LIKE %s", (f"{driver_prefix}:%",))
    finally:
        oracle.close()


class Background:
    """`workers` threads each looping `step(k, n)` until stopped; the first error ends a worker."""

    def __init__(self, workers: int, step: Callable[[int, int], None]) -> None:
        self.per_worker = [0] * workers
        self.errors: list[BaseException] = []
        self.max_latency_ms = 0.0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, args=(k, step), daemon=True) for k in range(workers)]
        for t in self._threads:
            t.start()

    def _loop(self, k: int, step: Callable[[int, int], None]) -> None:
        n = 0
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                step(k, n)
            except BaseException as err:  # noqa: BLE001 - reported by check()
                self.errors.append(err)
                return
            self.max_latency_ms = max(self.max_latency_ms, (time.monotonic() - t0) * 1000)
            self.per_worker[k] += 1
            n += 1

    @property
    def txns(self) -> int:
        return sum(self.per_worker)

    def stop(self) -> "Background":
        self._stop.set()
        for t in self._threads:
            t.join()
        return self

    def check(self, what: str) -> None:
        if self.errors:
            raise CheckFailed(f"{what}: other client failed: {describe_error(self.errors[0])}")
        check(all(self.per_worker), f"{what}: other clients stalled ({self.per_worker} txns)")


def run_threads(count: int, fn: Callable[[int], None]) -> list[BaseException]:
    """Runs fn(0..count-1) on threads; returns the errors."""
    errors: list[BaseException] = []

    def body(k: int) -> None:
        try:
            fn(k)
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def raise_first(errors: list[BaseException], total: int) -> None:
    if errors:
        raise CheckFailed(f"{len(errors)}/{total} clients failed, first: {describe_error(errors[0])}")


# ---------------------------------------------------------------------------------------------------
# Running scenarios: each in a forked child that leads its own process group, so a timeout kills it and
# everything it started (threads, sockets, grandchildren); the server sees the sockets close.


# Connections a scenario opened (sync drivers); closed with a Terminate when the scenario ends.
OPEN: list[Any] = []


def track(conn: Any) -> Any:
    OPEN.append(conn)
    return conn


def _child(send: Any, fn: Callable[[], str]) -> None:
    os.setpgid(0, 0)
    try:
        result = ("PASS", fn())
    except BaseException as err:  # noqa: BLE001 - every failure is reported
        result = ("FAIL", describe_error(err))
    for conn in reversed(OPEN):
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - a dead connection is closed already
            pass
    try:
        send.send(result)
    finally:
        # No interpreter teardown: inherited connections must not send Terminate on the parent's behalf.
        os._exit(0)


class Report:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0
        self.ctx = multiprocessing.get_context("fork")

    def line(self, driver: str, scenario: str, ok: bool, detail: str) -> None:
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        text = " ".join(str(detail).split())
        sys.stdout.write(f"{driver} {scenario} {'PASS' if ok else 'FAIL'} {text}\n")
        sys.stdout.flush()

    def run(self, driver: str, scenario: str, oracle: Oracle, fn: Callable[[], str]) -> None:
        started = time.monotonic()
        recv, send = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=_child, args=(send, fn))
        proc.start()
        send.close()
        ok, detail = False, f"timeout after {CFG.timeout_s} s"
        if recv.poll(CFG.timeout_s):
            try:
                verdict, detail = recv.recv()
                ok = verdict == "PASS"
            except EOFError:
                detail = "scenario process died without a verdict"
        _kill_group(proc)
        recv.close()
        try:
            stuck = oracle.idle_in_transaction()
            if stuck and ok:
                ok, detail = False, "backends left idle in transaction: " + "; ".join(f"{p} {q}" for p, q in stuck)
        except Exception as err:  # noqa: BLE001
            if ok:
                ok, detail = False, f"oracle: {describe_error(err)}"
        self.line(driver, scenario, ok, f"{detail} [{time.monotonic() - started:.1f} s]")


def _kill_group(proc: Any) -> None:
    """Ends the scenario's process group: politely, then for good after 5 s."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.join(wait)
        if not proc.is_alive():
            # Grandchildren may outlive their parent; the group id is still theirs.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
