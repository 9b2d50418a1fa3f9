"""psycopg 3 scenarios. At the default `prepare_threshold=5` a statement runs unnamed five times and is
prepared (`_pg3_<n>`, Parse+Sync, then Bind/Execute+Sync) at its sixth run on a connection;
`prepare_threshold=0` prepares every statement at its first run."""

from __future__ import annotations

import threading
import time
import uuid
from decimal import Decimal
from typing import Any, Callable

import psycopg
from psycopg import pq
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from fixtures import (
    BIG_ID_SUM,
    BIG_ROWS,
    LEAK_PATH,
    S3_VALUES,
    S4_PYFORMAT as S4,
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
    S17,
    S17_ROUNDS,
    Background,
    BackendSampler,
    CheckFailed,
    Oracle,
    check,
    check_audit,
    clear_audit,
    eq,
    expect_error,
    raise_first,
    run_threads,
    table,
    track,
    judge_socket,
    judge_routes,
)

S3_SQL = (
    "SELECT %s::int4, %s::int8, %s::numeric, %s::text, %s::bytea, %s::bool, %s::timestamptz,"
    " %s::uuid, %s::jsonb, %s::int[]"
)


def scenarios(driver: str, threshold: int) -> list[tuple[str, Callable[[], str]]]:
    # Runs of one statement on one connection: past the threshold, and the prepared statement reused.
    past = threshold + 3

    def connect(**extra: Any) -> psycopg.Connection:
        params: dict[str, Any] = dict(
            host=CFG.host,
            port=CFG.port,
            user=CFG.user,
            password=CFG.password,
            dbname=CFG.database,
            application_name=f"matrix-{driver}",
            connect_timeout=10,
            autocommit=True,
            prepare_threshold=threshold,
        )
        params.update(extra)
        return track(psycopg.connect(**params))

    def one(conn: psycopg.Connection, sql: str, params: Any = None) -> Any:
        return conn.execute(sql, params).fetchone()

    def background_txn(conn: psycopg.Connection, tag: str, k: int, n: int) -> None:
        ident = n % 1000 + 1
        with conn.transaction():
            eq(one(conn, S4["read"], (ident,))[0], f"value {ident}", "background read")
            conn.execute(S4["audit"], (f"{driver}-{tag}:{k}", n))

    def start_background(tag: str, workers: int = 4) -> Background:
        conns = [connect() for _ in range(workers)]
        return Background(workers, lambda k, n: background_txn(conns[k], tag, k, n))

    def s1() -> str:
        conn = connect(options="-c lock_timeout=42s")
        version = conn.info.parameter_status("server_version")
        check(conn.info.server_version >= 120000, f"server_version {version} < 12")
        noise = [connect(application_name=f"matrix-noise-{i}") for i in range(4)]

        def noise_txn(k: int, _n: int) -> None:
            with noise[k].transaction():
                eq(one(noise[k], "SHOW application_name")[0], f"matrix-noise-{k}", "noise application_name")
                eq(one(noise[k], "SHOW lock_timeout")[0], "0", "noise lock_timeout")

        bg = Background(len(noise), noise_txn)
        try:
            for n in range(100):
                with conn.transaction():
                    eq(one(conn, "SHOW application_name")[0], f"matrix-{driver}", f"txn {n} application_name")
                    eq(one(conn, "SHOW lock_timeout")[0], "42s", f"txn {n} lock_timeout (options)")
        finally:
            bg.stop()
        bg.check("noise")
        return (
            f"server_version {version}; application_name and lock_timeout (options) kept over 100 txns"
            f" beside 4 other clients ({bg.txns} txns)"
        )

    def s2() -> str:
        conn = connect()
        cur = conn.execute("SELECT 1 AS a; SELECT 2 AS b")
        first = cur.fetchall()
        check(cur.nextset(), "SELECT 1; SELECT 2: no second result")
        eq((first, cur.fetchall()), ([(1,)], [(2,)]), "SELECT 1; SELECT 2")
        cur = conn.execute("")
        eq(cur.pgresult.status, pq.ExecStatus.EMPTY_QUERY, "empty query result")
        eq(one(conn, "SELECT 3")[0], 3, "query after the empty one")
        return "SELECT 1; SELECT 2 gave two results; empty query answered"

    def s3() -> str:
        conn = connect()
        for rnd in range(3):  # 9 runs of one statement: the default threshold is crossed
            for i, values in enumerate(S3_VALUES):
                params = list(values)
                params[8] = None if values[8] is None else Jsonb(values[8])
                check_s3_row(one(conn, S3_SQL, params), values, f"round {rnd} value set {i}")
        cur = conn.cursor(row_factory=dict_row)
        for rnd in range(past):
            for ident in (1, 7, 1000):
                check_t_row(cur.execute("SELECT * FROM t WHERE id = %s", (ident,)).fetchone(), ident, "fixture")
        return f"{len(S3_VALUES)} value sets of 10 types round-trip, 3 rounds (prepared from run {threshold + 1}); fixture rows match"

    def s4() -> str:
        clear_audit(driver)
        conns = [connect() for _ in range(CFG.clients)]
        txns = max(CFG.txns, past)
        sampler = BackendSampler()

        def client(k: int) -> None:
            conn, who, own = conns[k], f"{driver}:{k}", own_sql(k)
            for n in range(txns):
                ident = s4_id(k, n, txns)
                with conn.transaction():
                    before = one(conn, S4["lock"], (ident,))[0]
                    eq(one(conn, S4["bump"], (ident,))[0], before + 1, "updated f")
                    eq(one(conn, S4["read"], (ident,))[0], f"value {ident}", "read v")
                    conn.execute(S4["audit"], (who, n))
                    eq(one(conn, own, (n,))[0], n + k, "own statement")
                eq(one(conn, S4["count"], (who,))[0], n + 1, "audit rows so far")

        try:
            errors = run_threads(CFG.clients, client)
        finally:
            sampler.stop()
        raise_first(errors, CFG.clients)
        return f"{check_audit(driver, CFG.clients * txns)}, {sampler.verdict()}"

    def s5() -> str:
        conn = connect()
        # (a) an error inside a transaction: the block rolls back
        def failing_txn() -> None:
            with conn.transaction():
                one(conn, "SELECT 1 / %s", (0,))

        expect_error(failing_txn, "22012", "(a) 1/0")
        with conn.transaction():
            eq(one(conn, "SELECT %s::int", (1,))[0], 1, "(a) next txn")
        # (b) a named statement whose Parse fails, then the same name with good SQL (libpq PQprepare)
        name = f"matrix_s5b_{driver}".replace("-", "_").encode()
        bad = conn.pgconn.prepare(name, b"SELEC $1::int")
        eq((bad.status, bad.error_field(pq.DiagnosticField.SQLSTATE)), (pq.ExecStatus.FATAL_ERROR, b"42601"), "(b) bad Parse")
        good = conn.pgconn.prepare(name, b"SELECT $1::int + 1")
        eq(good.status, pq.ExecStatus.COMMAND_OK, f"(b) same name, good SQL: {good.get_error_message()}")
        res = conn.pgconn.exec_prepared(name, [b"4"])
        check(res.status == pq.ExecStatus.TUPLES_OK, f"(b) execute: {res.get_error_message()}"
              f" ({res.error_field(pq.DiagnosticField.SQLSTATE)})")
        eq(res.get_value(0, 0), b"5", "(b) result")
        conn.pgconn.exec_(b"DEALLOCATE " + name)
        # (c) an error in the middle of a pipeline: the statements after it are skipped, the pipeline recovers
        first = last = None
        try:
            with conn.pipeline():
                first = conn.execute("SELECT %s::int", (1,))
                conn.execute("SELECT 1 / %s::int", (0,))
                last = conn.execute("SELECT %s::int + 2", (1,))
            raise CheckFailed("(c) pipeline with 1/0 succeeded")
        except psycopg.errors.DivisionByZero:
            pass
        check(first is not None, "(c) the first statement did not go out")
        eq(first.fetchall(), [(1,)], "(c) before the error")
        if last is not None:  # None when the error arrived before the third statement was queued
            try:
                last.fetchall()
                raise CheckFailed("(c) the statement after the error ran")
            except psycopg.ProgrammingError:
                pass  # skipped: no result
        with conn.transaction():
            eq(one(conn, "SELECT %s::int", (7,))[0], 7, "(c) next txn")
        # (d) a cached plan whose result type changes
        tbl = table(driver, "s5d")
        conn.execute(f"DROP TABLE IF EXISTS {tbl}")
        conn.execute(f"CREATE TABLE {tbl} (a int)")
        conn.execute(f"INSERT INTO {tbl} VALUES (1)")
        select = f"SELECT * FROM {tbl} WHERE a = %s"
        for r in range(past):
            eq(conn.execute(select, (1,)).fetchall(), [(1,)], f"(d) before ALTER run {r}")
        conn.execute(f"ALTER TABLE {tbl} ADD COLUMN b int DEFAULT 7")
        outcome = "new shape"
        try:
            eq(conn.execute(select, (1,)).fetchall(), [(1, 7)], "(d) after ALTER")
        except psycopg.errors.FeatureNotSupported:
            outcome = "0A000"
        with conn.transaction():
            eq(conn.execute(select, (1,)).fetchall(), [(1, 7)], "(d) next txn")
        conn.execute(f"DROP TABLE {tbl}")
        return f"recovered from a, b, c, d ({outcome} after ALTER)"

    def s6() -> str:
        conn = connect()
        tbl = table(driver, "s6")
        rows = 100_000
        conn.execute(f"DROP TABLE IF EXISTS {tbl}")
        conn.execute(f"CREATE TABLE {tbl} (id int, v text)")
        cur = conn.cursor()
        with cur.copy(f"COPY {tbl} (id, v) FROM STDIN") as copy:
            for start in range(1, rows + 1, 1000):
                copy.write("".join(f"{i}\trow {i}\n" for i in range(start, start + 1000)))
        eq(cur.rowcount, rows, "COPY FROM rowcount")
        out = bytearray()
        with cur.copy(f"COPY (SELECT id, v FROM {tbl} ORDER BY id) TO STDOUT") as copy:
            for data in copy:
                out += data
        lines = out.decode().splitlines()
        eq((len(lines), lines[-1]), (rows, f"{rows}\trow {rows}"), "COPY TO")

        def bad_row() -> None:
            with cur.copy(f"COPY {tbl} (id, v) FROM STDIN") as copy:
                copy.write("1\tok\nnot-an-int\tbad\n")

        expect_error(bad_row, "22P02", "COPY with a bad row")
        try:
            with cur.copy(f"COPY {tbl} (id, v) FROM STDIN") as copy:
                copy.write("1\tabandoned\n")
                raise RuntimeError("matrix CopyFail")
        except RuntimeError as err:
            eq(str(err), "matrix CopyFail", "CopyFail")
        eq(one(conn, f"SELECT count(*) FROM {tbl}")[0], rows, "rows after the failed COPYs")
        conn.execute(f"DROP TABLE {tbl}")
        return f"{rows} rows in, {len(lines)} out; bad row 22P02 and a CopyFail copied nothing, connection fine after"

    def s7() -> str:
        conn = connect()
        bg = start_background("s7")
        count = total = 0
        try:
            with conn.transaction():
                with conn.cursor(name="matrix_s7") as cur:
                    cur.itersize = 2000
                    cur.execute("SELECT id, v FROM big")
                    for ident, _v in cur:
                        count += 1
                        total += ident
        finally:
            bg.stop()
        eq((count, total), (BIG_ROWS, BIG_ID_SUM), "rows and sum of ids streamed")
        bg.check("S7")
        return (
            f"{count} rows through a ServerCursor (itersize 2000) in a txn; 4 others did {bg.txns} txns"
            f" meanwhile (slowest {bg.max_latency_ms:.0f} ms)"
        )

    def s8() -> str:
        conn = connect()
        bg = start_background("s8")
        try:
            time.sleep(0.1)
            sent_at: list[float] = []

            def cancel_later() -> None:
                time.sleep(0.2)
                sent_at.append(time.monotonic())
                conn.cancel_safe(timeout=5)

            threading.Thread(target=cancel_later, daemon=True).start()
            expect_error(lambda: conn.execute("SELECT pg_sleep(30)"), "57014", "pg_sleep(30) cancelled")
            check(sent_at, "pg_sleep(30) failed before the cancel was sent")
            elapsed = (time.monotonic() - sent_at[0]) * 1000
            check(elapsed < 2000, f"57014 arrived {elapsed:.0f} ms after cancel_safe()")
            oracle = Oracle()
            try:
                eq(oracle.sleeping("SELECT pg_sleep(30)%"), 0, "pg_sleep(30) still running on the server")
            finally:
                oracle.close()
            eq(one(conn, "SELECT %s::int", (8,))[0], 8, "query after cancel")
        finally:
            bg.stop()
        bg.check("S8")
        return f"57014 {elapsed:.0f} ms after cancel_safe(); the connection works; 4 others did {bg.txns} txns, none cancelled"

    def s9() -> str:
        tag = uuid.uuid4().hex[:8]
        conns = [connect(), connect()]
        notices: list[list[str]] = [[], []]
        for i, conn in enumerate(conns):
            conn.add_notice_handler(lambda diag, i=i: notices[i].append(diag.message_primary))

        def notice_loop(i: int) -> None:
            for r in range(past):
                conns[i].execute("SELECT notice(%s)", (f"{tag}-{i}-{r}",))

        raise_first(run_threads(2, notice_loop), 2)
        for i in range(2):
            eq(notices[i], [f"hello {tag}-{i}-{r}" for r in range(past)], f"notices of client {i}")
        channel = table(driver, "s9")
        listener = connect(port=CFG.direct_port, user=CFG.direct_user, password=CFG.direct_password)
        listener.execute(f"LISTEN {channel}")
        payload = f"payload {tag} ✓"
        conns[0].execute("SELECT pg_notify(%s, %s)", (channel, payload))
        heard = [(n.channel, n.payload) for n in listener.notifies(timeout=5, stop_after=1)]
        eq(heard, [(channel, payload)], "notification through the pooler")
        return f"{2 * past} notices each reached their own client; NOTIFY reached a direct LISTEN"

    def s10() -> str:
        conn = connect()

        def timed_out() -> None:
            with conn.transaction():
                conn.execute("SET LOCAL statement_timeout = '100ms'")
                conn.execute("SELECT pg_sleep(%s)", (1,))

        expect_error(timed_out, "57014", "pg_sleep(1) under SET LOCAL")
        with conn.transaction():
            conn.execute("SELECT pg_sleep(%s)", (0.3,))
        a, b = connect(), connect()
        a.execute(f"SET search_path = {LEAK_PATH}")
        show = "SHOW search_path"
        for r in range(20):
            eq(one(a, show)[0], LEAK_PATH, f"round {r}: A's search_path")
            check(one(b, show)[0] != LEAK_PATH, f"round {r}: B sees A's search_path")
            with b.transaction():
                in_b = one(b, show)[0]
                in_a = one(a, show)[0]
            check(in_b != LEAK_PATH, f"round {r}: B (in txn) sees A's search_path")
            eq(in_a, LEAK_PATH, f"round {r}: A's search_path while B is in a txn")
        return "SET LOCAL statement_timeout honoured then gone; session search_path stayed with A over 20 rounds, never seen by B"

    def s11() -> str:
        conn = connect()
        cur = conn.cursor(binary=True)
        sql = "SELECT %b::int4[], %b::text[], %b::bytea, %b::numeric, %b::float8[], %b::int8, %b::text, %b::bool[]"
        sets = [
            ([1, None, -3], ["a", None, "ü ✓", ""], bytes(range(256)), Decimal("-1.500"), [1.5, None, -0.0],
             None, None, [True, None, False]),
            ([], [], b"", Decimal("0"), [], 2**62, "x" * 10000, []),
        ]
        for r in range(past):
            for i, values in enumerate(sets):
                row = cur.execute(sql, values).fetchone()
                eq(cur.pgresult.fformat(0), 1, "result format")
                eq(list(row), list(values), f"run {r} set {i}")
        return f"binary params and results, NULLs inside arrays, {past} runs each"

    def s12() -> str:
        conn = connect()
        sql = "SELECT %s::int + 1, v FROM t WHERE id = %s"

        def run(what: str) -> None:
            for r in range(past):
                eq(one(conn, sql, (r, r + 1)), (r + 1, f"value {r + 1}"), f"{what} run {r}")

        run("before")
        with conn.transaction():
            one(conn, sql, (1, 1))
            raise psycopg.Rollback()  # psycopg queues DEALLOCATE ALL after a ROLLBACK
        run("after ROLLBACK")
        for reset in ("DEALLOCATE ALL", "DISCARD ALL"):
            conn.execute(reset)
            run(f"after {reset}")
        return f"statements re-prepared after ROLLBACK, DEALLOCATE ALL and DISCARD ALL ({past} runs each)"

    def s13() -> str:
        specs = [
            ("SELECT 'first'::text || %s", lambda n: f"first{n}"),
            ("SELECT 'second'::text || %s", lambda n: f"second{n}"),
            ("SELECT %s::int * 10", lambda n: n * 10),
            ("SELECT %s::int * 10", lambda n: n * 10),
        ]
        conns = [connect() for _ in specs]

        def client(i: int) -> None:
            sql, want = specs[i]
            for n in range(20):
                param = str(n) if i < 2 else n
                eq(one(conns[i], sql, (param,))[0], want(n), f"client {i} run {n}")

        raise_first(run_threads(len(specs), client), len(specs))
        return "each connection's first prepared statement is _pg3_0: 2 with different SQL, 2 with the same, own results over 20 runs"

    def s15() -> str:
        conn = connect()
        with conn.pipeline() as pipeline:
            cursors = []
            for i in range(100):
                cursors.append(conn.execute("SELECT %s::int", (i,)))
                pipeline.sync()
        eq([c.fetchone()[0] for c in cursors], list(range(100)), "pipelined results")
        return "100 queries pipelined, one Sync each, answered in order"

    def s16() -> str:
        conns = [connect(host=CFG.socket_dir) for _ in range(S16_CLIENTS)]
        seen = []
        for _ in range(S16_TXNS):
            for conn in conns:
                with conn.transaction():
                    seen.append(one(conn, S16_SQL))
        return judge_socket(seen)

    def s17() -> str:
        # Past the threshold the same text is prepared on each connection, under the same name (`_pg3_0`):
        # each route's pool must keep its own.
        a = connect(port=S17.port, dbname=S17.a_database, user=S17.a_user, password=S17.a_password)
        b = connect(port=S17.port, dbname=S17.b_database, user=S17.b_user, password=S17.b_password)
        sql = "SELECT current_user::text, %s::int + 1"
        seen_a, seen_b = [], []
        for i in range(S17_ROUNDS):
            with a.transaction(), b.transaction():
                seen_a.append(tuple(one(a, sql, (i,))))
                seen_b.append(tuple(one(b, sql, (i,))))
        return judge_routes(seen_a, seen_b)

    every = [("S1", s1), ("S2", s2), ("S3", s3), ("S4", s4), ("S5", s5), ("S6", s6), ("S7", s7), ("S8", s8),
             ("S9", s9), ("S10", s10), ("S11", s11), ("S12", s12), ("S13", s13), ("S15", s15), ("S16", s16),
             ("S17", s17)]
    if threshold == 0:
        # S2 and S6 prepare nothing (no parameters / COPY): the default variant covers them.
        return [(sid, fn) for sid, fn in every if sid not in ("S2", "S6")]
    return every
