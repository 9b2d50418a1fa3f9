"""asyncpg scenarios. Every query is Parse/Describe/Flush then Bind/Execute/Sync; with the default
`statement_cache_size=100` the statement is named `__asyncpg_stmt_<n>__` from a process-global counter and
reused by Bind alone; with `statement_cache_size=0` it is the unnamed statement."""

from __future__ import annotations

import asyncio
import gc
import io
import json
import multiprocessing
import os
import time
import uuid
from decimal import Decimal
from typing import Any, Awaitable, Callable

import asyncpg

from fixtures import (
    BIG_ID_SUM,
    BIG_ROWS,
    LEAK_PATH,
    S3_VALUES,
    S4_DOLLAR as S4,
    check_s3_row,
    check_t_row,
    own_sql,
    s4_id,
)
from harness import (
    CFG,
    S16_CLIENTS,
    S16_SQL,
    S16_TXNS,
    BackendSampler,
    CheckFailed,
    Oracle,
    check,
    check_audit,
    clear_audit,
    describe_error,
    eq,
    raise_first,
    sqlstate,
    table,
    judge_socket,
)

S3_SQL = (
    "SELECT $1::int4, $2::int8, $3::numeric, $4::text, $5::bytea, $6::bool, $7::timestamptz,"
    " $8::uuid, $9::jsonb, $10::int[]"
)
STARTUP_PATH = "public, matrix_alt"


async def expect_error(awaitable: Awaitable[Any], code: str, what: str) -> BaseException:
    try:
        await awaitable
    except CheckFailed:
        raise
    except Exception as err:  # noqa: BLE001
        if sqlstate(err) != code:
            raise CheckFailed(f"{what}: want {code}, got {describe_error(err)}") from err
        return err
    raise CheckFailed(f"{what}: succeeded, want SQLSTATE {code}")


class Background:
    """`workers` tasks each looping `step(k, n)` until stopped; the first error ends a worker."""

    def __init__(self, workers: int, step: Callable[[int, int], Awaitable[None]]) -> None:
        self.per_worker = [0] * workers
        self.errors: list[BaseException] = []
        self.max_latency_ms = 0.0
        self.running = True
        self.tasks = [asyncio.ensure_future(self._loop(k, step)) for k in range(workers)]

    async def _loop(self, k: int, step: Callable[[int, int], Awaitable[None]]) -> None:
        n = 0
        while self.running:
            t0 = time.monotonic()
            try:
                await step(k, n)
            except Exception as err:  # noqa: BLE001
                self.errors.append(err)
                return
            self.max_latency_ms = max(self.max_latency_ms, (time.monotonic() - t0) * 1000)
            self.per_worker[k] += 1
            n += 1

    @property
    def txns(self) -> int:
        return sum(self.per_worker)

    async def stop(self) -> None:
        self.running = False
        await asyncio.gather(*self.tasks)

    def check(self, what: str) -> None:
        if self.errors:
            raise CheckFailed(f"{what}: other client failed: {describe_error(self.errors[0])}")
        check(all(self.per_worker), f"{what}: other clients stalled ({self.per_worker} txns)")


def scenarios(driver: str, cache: int) -> list[tuple[str, Callable[[], str]]]:
    opened: list[asyncpg.Connection] = []

    def settings(**extra: str) -> dict[str, str]:
        return {"application_name": f"matrix-{driver}", **extra}

    async def connect(**extra: Any) -> asyncpg.Connection:
        params: dict[str, Any] = dict(
            host=CFG.host,
            port=CFG.port,
            user=CFG.user,
            password=CFG.password,
            database=CFG.database,
            timeout=10,
            statement_cache_size=cache,
            server_settings=settings(),
        )
        params.update(extra)
        conn = await asyncpg.connect(**params)
        opened.append(conn)
        return conn

    async def closing(coro_fn: Callable[[], Awaitable[str]]) -> str:
        try:
            return await coro_fn()
        finally:
            for conn in reversed(opened):
                try:
                    await asyncio.wait_for(conn.close(), 2)
                except Exception:  # noqa: BLE001 - a dead or busy connection is dropped instead
                    conn.terminate()

    def sync(coro_fn: Callable[[], Awaitable[str]]) -> Callable[[], str]:
        return lambda: asyncio.run(closing(coro_fn))

    async def start_background(tag: str, workers: int = 4) -> Background:
        conns = [await connect() for _ in range(workers)]

        async def step(k: int, n: int) -> None:
            ident = n % 1000 + 1
            async with conns[k].transaction():
                eq(await conns[k].fetchval(S4["read"], ident), f"value {ident}", "background read")
                await conns[k].execute(S4["audit"], f"{driver}-{tag}:{k}", n)

        return Background(workers, step)

    async def s1() -> str:
        conn = await connect(server_settings=settings(search_path=STARTUP_PATH))
        version = conn.get_settings().server_version
        check(conn.get_server_version().major >= 12, f"server_version {version} < 12")
        noise = [await connect(server_settings={"application_name": f"matrix-noise-{i}"}) for i in range(4)]

        async def noise_txn(k: int, _n: int) -> None:
            async with noise[k].transaction():
                eq(await noise[k].fetchval("SHOW application_name"), f"matrix-noise-{k}", "noise application_name")
                path = await noise[k].fetchval("SHOW search_path")
                check(path != STARTUP_PATH, "noise client sees the startup search_path of another")

        bg = Background(len(noise), noise_txn)
        try:
            for n in range(100):
                async with conn.transaction():
                    eq(await conn.fetchval("SHOW application_name"), f"matrix-{driver}", f"txn {n} application_name")
                    eq(await conn.fetchval("SHOW search_path"), STARTUP_PATH, f"txn {n} search_path")
        finally:
            await bg.stop()
        bg.check("noise")
        return (
            f"server_version {version}; application_name and search_path (server_settings) kept over 100 txns"
            f" beside 4 other clients ({bg.txns} txns)"
        )

    async def s2() -> str:
        conn = await connect()
        eq(await conn.execute("SELECT 1 AS a; SELECT 2 AS b"), "SELECT 1", "SELECT 1; SELECT 2 status")
        async with conn.transaction():
            await conn.execute("SELECT set_config('matrix.s2', 'ran', true); SELECT 2")
            eq(await conn.fetchval("SELECT current_setting('matrix.s2')"), "ran", "both statements of one Query ran")
        eq(await conn.fetchval("SELECT 3"), 3, "query after")
        return "SELECT 1; SELECT 2 ran both statements (empty query: not expressible, driver bug)"

    async def s3() -> str:
        conn = await connect()
        for rnd in range(3):
            for i, values in enumerate(S3_VALUES):
                params = list(values)
                params[8] = None if values[8] is None else json.dumps(values[8])
                check_s3_row(await conn.fetchrow(S3_SQL, *params), values, f"round {rnd} value set {i}", json_as_text=True)
        for ident in (1, 7, 1000):
            check_t_row(dict(await conn.fetchrow("SELECT * FROM t WHERE id = $1", ident)), ident, "fixture", json_as_text=True)
        return f"{len(S3_VALUES)} value sets of 10 types round-trip, 3 rounds; 3 fixture rows match"

    async def s4() -> str:
        clear_audit(driver)
        pool = await asyncpg.create_pool(
            host=CFG.host, port=CFG.port, user=CFG.user, password=CFG.password, database=CFG.database,
            min_size=CFG.clients, max_size=CFG.clients, statement_cache_size=cache, server_settings=settings(),
        )
        sampler = BackendSampler()

        slowest = [0.0]

        async def client(k: int) -> None:
            who, own = f"{driver}:{k}", own_sql(k, dollar=True)
            # One pool connection per client for its whole run, acquired again for the last transaction so
            # that the pool's release reset (CLOSE ALL; UNLISTEN *; RESET ALL) runs too, at a bounded cost.
            for first, last in ((0, CFG.txns - 1), (CFG.txns - 1, CFG.txns)):
                async with pool.acquire() as conn:
                    for n in range(first, last):
                        ident = s4_id(k, n, CFG.txns)
                        began = time.monotonic()
                        async with conn.transaction():
                            before = await conn.fetchval(S4["lock"], ident)
                            eq(await conn.fetchval(S4["bump"], ident), before + 1, "updated f")
                            eq(await conn.fetchval(S4["read"], ident), f"value {ident}", "read v")
                            await conn.execute(S4["audit"], who, n)
                            eq(await conn.fetchval(own, n), n + k, "own statement")
                        eq(await conn.fetchval(S4["count"], who), n + 1, "audit rows so far")
                        slowest[0] = max(slowest[0], time.monotonic() - began)

        try:
            results = await asyncio.gather(*(client(k) for k in range(CFG.clients)), return_exceptions=True)
        finally:
            sampler.stop()
            await pool.close()
        raise_first([r for r in results if isinstance(r, BaseException)], CFG.clients)
        return f"{check_audit(driver, CFG.clients * CFG.txns)}, {sampler.verdict()}, slowest transaction {slowest[0] * 1000:.0f} ms (create_pool, a connection per client, released once)"

    async def s5() -> str:
        conn = await connect()

        async def failing_txn() -> None:
            async with conn.transaction():
                await conn.fetchval("SELECT 1 / $1::int", 0)

        await expect_error(failing_txn(), "22012", "(a) 1/0")
        async with conn.transaction():
            eq(await conn.fetchval("SELECT $1::int", 1), 1, "(a) next txn")
        # (b) a prepared statement whose Parse fails, then good SQL; the driver picks the names
        await expect_error(conn.prepare("SELEC $1::int"), "42601", "(b) bad Parse")
        stmt = await conn.prepare("SELECT $1::int + 1")
        eq(await stmt.fetchval(4), 5, "(b) good SQL")
        # (c) an error in the middle of a batch: executemany is one pipeline, all or nothing
        tbl = table(driver, "s5")
        await conn.execute(f"DROP TABLE IF EXISTS {tbl}; CREATE TABLE {tbl} (a int, b int)")
        await expect_error(
            conn.executemany(f"INSERT INTO {tbl} VALUES ($1, 10 / $2)", [(1, 1), (2, 0), (3, 1)]), "22012", "(c) 1/0 mid-batch"
        )
        eq(await conn.fetchval(f"SELECT count(*) FROM {tbl}"), 0, "(c) rows of the failed batch")
        # (d) a cached plan whose result type changes: asyncpg re-prepares outside a transaction
        await conn.execute(f"TRUNCATE {tbl}; INSERT INTO {tbl} VALUES (1, 2)")
        select = f"SELECT * FROM {tbl} WHERE a = $1"
        for r in range(2):
            eq([tuple(x) for x in await conn.fetch(select, 1)], [(1, 2)], f"(d) before ALTER run {r}")
        await conn.execute(f"ALTER TABLE {tbl} ADD COLUMN c int DEFAULT 7")
        outcome = "new shape"
        try:
            eq([tuple(x) for x in await conn.fetch(select, 1)], [(1, 2, 7)], "(d) after ALTER")
        except asyncpg.exceptions.InvalidCachedStatementError:
            outcome = "0A000"
        eq([tuple(x) for x in await conn.fetch(select, 1)], [(1, 2, 7)], "(d) after ALTER, again")
        await conn.execute(f"DROP TABLE {tbl}")
        return f"recovered from a, b, c, d ({outcome} after ALTER)"

    async def s6() -> str:
        conn = await connect()
        tbl = table(driver, "s6")
        rows = 100_000
        await conn.execute(f"DROP TABLE IF EXISTS {tbl}; CREATE TABLE {tbl} (id int, v text)")
        status = await conn.copy_records_to_table(tbl, records=((i, f"row {i}") for i in range(1, rows + 1)), columns=["id", "v"])
        eq(status, f"COPY {rows}", "COPY FROM status")
        out = io.BytesIO()
        await conn.copy_from_query(f"SELECT id, v FROM {tbl} ORDER BY id", output=out)
        lines = out.getvalue().decode().splitlines()
        eq((len(lines), lines[-1]), (rows, f"{rows}\trow {rows}"), "COPY TO")
        await expect_error(
            conn.copy_to_table(tbl, source=io.BytesIO(b"1\tok\nnot-an-int\tbad\n"), columns=["id", "v"]), "22P02", "COPY with a bad row"
        )

        async def failing_source() -> Any:
            yield b"1\tabandoned\n"
            raise RuntimeError("matrix CopyFail")

        try:
            await conn.copy_to_table(tbl, source=failing_source(), columns=["id", "v"])
            raise CheckFailed("CopyFail: the COPY succeeded")
        except RuntimeError as err:
            eq(str(err), "matrix CopyFail", "CopyFail")
        eq(await conn.fetchval(f"SELECT count(*) FROM {tbl}"), rows, "rows after the failed COPYs")
        await conn.execute(f"DROP TABLE {tbl}")
        return f"{rows} rows in, {len(lines)} out; bad row 22P02 and a CopyFail copied nothing, connection fine after"

    async def s7() -> str:
        conn = await connect()
        bg = await start_background("s7")
        count = total = 0
        try:
            async with conn.transaction():
                async for record in conn.cursor("SELECT id, v FROM big", prefetch=2000):
                    count += 1
                    total += record[0]
        finally:
            await bg.stop()
        eq((count, total), (BIG_ROWS, BIG_ID_SUM), "rows and sum of ids streamed")
        bg.check("S7")
        return (
            f"{count} rows through conn.cursor(prefetch=2000) in a txn; 4 others did {bg.txns} txns"
            f" meanwhile (slowest {bg.max_latency_ms:.0f} ms)"
        )

    async def s8() -> str:
        conn = await connect()
        bg = await start_background("s8")
        oracle = Oracle()
        try:
            await asyncio.sleep(0.1)
            t0 = time.monotonic()
            try:
                await conn.fetch("SELECT pg_sleep(30)", timeout=0.2)
                raise CheckFailed("pg_sleep(30) finished instead of being cancelled")
            except asyncio.TimeoutError:
                pass
            elapsed = (time.monotonic() - t0 - 0.2) * 1000
            check(elapsed < 2000, f"timeout took {elapsed:.0f} ms past 200 ms")
            # asyncpg sends the CancelRequest and swallows the 57014; the server is the witness.
            deadline = time.monotonic() + 2
            while oracle.sleeping("SELECT pg_sleep(30)%") and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            eq(oracle.sleeping("SELECT pg_sleep(30)%"), 0, "pg_sleep(30) still running 2 s after the cancel")
            eq(await conn.fetchval("SELECT $1::int", 8), 8, "query after cancel")
        finally:
            oracle.close()
            await bg.stop()
        bg.check("S8")
        return (
            f"timeout=0.2 cancelled pg_sleep(30) on the server within {elapsed:.0f} ms (the driver swallows 57014);"
            f" the connection works; 4 others did {bg.txns} txns, none cancelled"
        )

    async def s9() -> str:
        tag = uuid.uuid4().hex[:8]
        conns = [await connect(), await connect()]
        notices: list[list[str]] = [[], []]
        for i, conn in enumerate(conns):
            conn.add_log_listener(lambda _c, msg, i=i: notices[i].append(msg.message))

        async def notice_loop(i: int) -> None:
            for r in range(5):
                await conns[i].execute("SELECT notice($1)", f"{tag}-{i}-{r}")

        await asyncio.gather(notice_loop(0), notice_loop(1))
        for i in range(2):
            eq(notices[i], [f"hello {tag}-{i}-{r}" for r in range(5)], f"notices of client {i}")
        channel = table(driver, "s9")
        listener = await connect(port=CFG.direct_port, user=CFG.direct_user, password=CFG.direct_password)
        heard: asyncio.Queue = asyncio.Queue()
        await listener.add_listener(channel, lambda _c, _pid, ch, payload: heard.put_nowait((ch, payload)))
        payload = f"payload {tag} ✓"
        await conns[0].execute("SELECT pg_notify($1, $2)", channel, payload)
        try:
            got = await asyncio.wait_for(heard.get(), 5)
        except asyncio.TimeoutError:
            raise CheckFailed("NOTIFY through the pooler: nothing heard within 5 s") from None
        eq(got, (channel, payload), "notification")
        return "10 notices each reached their own client; NOTIFY reached a direct LISTEN"

    async def s10() -> str:
        conn = await connect()

        async def timed_out() -> None:
            async with conn.transaction():
                await conn.execute("SET LOCAL statement_timeout = '100ms'")
                await conn.fetch("SELECT pg_sleep($1)", 1)

        await expect_error(timed_out(), "57014", "pg_sleep(1) under SET LOCAL")
        async with conn.transaction():
            await conn.fetch("SELECT pg_sleep($1)", 0.3)
        a, b = await connect(), await connect()
        await a.execute(f"SET search_path = {LEAK_PATH}")
        for r in range(20):
            eq(await a.fetchval("SHOW search_path"), LEAK_PATH, f"round {r}: A's search_path")
            check(await b.fetchval("SHOW search_path") != LEAK_PATH, f"round {r}: B sees A's search_path")
            async with b.transaction():
                in_b = await b.fetchval("SHOW search_path")
                in_a = await a.fetchval("SHOW search_path")
            check(in_b != LEAK_PATH, f"round {r}: B (in txn) sees A's search_path")
            eq(in_a, LEAK_PATH, f"round {r}: A's search_path while B is in a txn")
        return "SET LOCAL statement_timeout honoured then gone; session search_path stayed with A over 20 rounds, never seen by B"

    async def s11() -> str:
        conn = await connect()
        sql = "SELECT $1::int4[], $2::text[], $3::bytea, $4::numeric, $5::float8[], $6::int8, $7::text, $8::bool[]"
        sets = [
            ([1, None, -3], ["a", None, "ü ✓", ""], bytes(range(256)), Decimal("-1.500"), [1.5, None, -0.0],
             None, None, [True, None, False]),
            ([], [], b"", Decimal("0"), [], 2**62, "x" * 10000, []),
        ]
        for r in range(3):
            for i, values in enumerate(sets):
                eq(list(await conn.fetchrow(sql, *values)), list(values), f"run {r} set {i}")
        # A type asyncpg does not know makes it introspect, wrapped in session set_config('jit', ...) calls.
        oracle = Oracle()
        try:
            jit_default = oracle.rows("SELECT reset_val FROM pg_settings WHERE name = 'jit'")[0][0]
        finally:
            oracle.close()
        kinds = []
        for i in range(3):
            kind = f"{table(driver, 's11')}_{i}"
            await conn.execute(f"DROP TYPE IF EXISTS {kind}; CREATE TYPE {kind} AS ENUM ('sad', 'ok', 'happy')")
            kinds.append(kind)
        for kind in kinds:
            probe = await connect(statement_cache_size=cache)
            eq(await probe.fetchval(f"SELECT $1::{kind}", "ok"), "ok", f"enum {kind} round trip")
            await probe.close()
        others = [await connect(), await connect()]
        for o in others:
            await o.execute("BEGIN")
        seen = [await o.fetchval("SHOW jit") for o in others]
        for o in others:
            await o.execute("COMMIT")
        for kind in kinds:
            await conn.execute(f"DROP TYPE {kind}")
        eq(seen, [jit_default, jit_default], "jit seen by other clients after asyncpg's introspection")
        return "binary params and results with NULLs in arrays; 3 enum introspections left jit alone"

    async def s12() -> str:
        conn = await connect()
        first = "SELECT $1::int + 1000 AS x"
        eq(await conn.fetchval(first, 1), 1001, "first statement")
        explicit = await conn.prepare(first)
        eq(await explicit.fetchval(2), 1002, "explicit prepare() of the same SQL")
        del explicit
        gc.collect()  # asyncpg closes the statement (protocol Close) on the next call
        eq(await conn.fetchval(first, 3), 1003, "cached statement after the other was closed")
        for i in range(120):  # past the cache of 100: evicted statements are closed
            eq(await conn.fetchval(f"SELECT $1::int + {i} AS x", 1), 1 + i, f"statement {i}")
        for i in range(10):
            eq(await conn.fetchval(f"SELECT $1::int + {i} AS x", 2), 2 + i, f"statement {i} after eviction")
        eq(await conn.fetchval(first, 4), 1004, "first statement after eviction")
        return "statements closed by GC and by LRU eviction (120 > 100) prepared again and used"

    def s13() -> str:
        specs = [
            ("SELECT 'first'::text || $1::text", lambda n: f"first{n}"),
            ("SELECT 'second'::text || $1::text", lambda n: f"second{n}"),
            ("SELECT $1::int * 10", lambda n: n * 10),
            ("SELECT $1::int * 10", lambda n: n * 10),
        ]

        async def worker(i: int) -> str:
            sql, want = specs[i]
            conn = await connect()
            try:
                for n in range(20):
                    param = str(n) if i < 2 else n
                    eq(await conn.fetchval(sql, param), want(n), f"process {i} run {n}")
            finally:
                await conn.close()
            return "ok"

        def child(i: int, send: Any) -> None:
            try:
                result = asyncio.run(worker(i))
            except BaseException as err:  # noqa: BLE001
                result = describe_error(err)
            send.send(result)
            os._exit(0)

        ctx = multiprocessing.get_context("fork")
        pipes, procs = [], []
        for i in range(len(specs)):
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=child, args=(i, send))
            proc.start()
            pipes.append(recv)
            procs.append(proc)
        results = []
        for recv in pipes:
            results.append(recv.recv() if recv.poll(CFG.timeout_s) else "no answer")
        for proc in procs:
            proc.join(5)
        failures = [f"process {i}: {r}" for i, r in enumerate(results) if r != "ok"]
        if failures:
            raise CheckFailed(f"{len(failures)}/{len(specs)} processes failed, first: {failures[0]}")
        return "4 processes, same statement names (process-global counter): 2 with different SQL, 2 with the same, own results over 20 runs"

    async def s14() -> str:
        conns = [await connect() for _ in range(10)]

        async def client(k: int) -> None:
            for n in range(50):
                row = await conns[k].fetchrow("SELECT $1::int + $2::int AS s, $3::text AS who", n, k, f"c{k}")
                eq((row["s"], row["who"]), (n + k, f"c{k}"), f"client {k} run {n}")
                eq(await conns[k].fetchval(f"SELECT $1::int * {k + 1}", n), n * (k + 1), f"client {k} own run {n}")

        results = await asyncio.gather(*(client(k) for k in range(10)), return_exceptions=True)
        raise_first([r for r in results if isinstance(r, BaseException)], 10)
        return "10 clients x 100 unnamed Parse/Describe/Flush + Bind/Execute/Sync queries outside transactions"

    async def s16() -> str:
        conns = [await connect(host=CFG.socket_dir) for _ in range(S16_CLIENTS)]

        async def client(conn: asyncpg.Connection) -> list[tuple[int, bool]]:
            seen = []
            for _ in range(S16_TXNS):
                async with conn.transaction():
                    row = await conn.fetchrow(S16_SQL)
                    seen.append((row[0], row[1]))
            return seen

        results = await asyncio.gather(*(client(c) for c in conns))
        return judge_socket([pair for seen in results for pair in seen])

    if cache == 0:
        return [("S4", sync(s4)), ("S14", sync(s14))]
    return [
        ("S1", sync(s1)), ("S2", sync(s2)), ("S3", sync(s3)), ("S4", sync(s4)), ("S5", sync(s5)), ("S6", sync(s6)),
        ("S7", sync(s7)), ("S8", sync(s8)), ("S9", sync(s9)), ("S10", sync(s10)), ("S11", sync(s11)),
        ("S12", sync(s12)), ("S13", s13), ("S16", sync(s16)),
    ]
