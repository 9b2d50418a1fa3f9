"""psycopg2 scenarios at the driver's defaults: simple Query only, parameters interpolated on the client,
an implicit BEGIN before the first statement of each transaction, never a prepared statement."""

from __future__ import annotations

import io
import select
import threading
import time
import uuid
from typing import Any, Callable

import psycopg2
import psycopg2.extensions
import psycopg2.extras
from psycopg2.extras import Json

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
)

DRIVER = "psycopg2"
# Parenthesised: psycopg2 writes -9223372036854775808 as a literal, and `-9223372036854775808::int8`
# casts before negating (22003), directly against PostgreSQL too.
S3_SQL = (
    "SELECT (%s)::int4, (%s)::int8, (%s)::numeric, (%s)::text, (%s)::bytea, (%s)::bool, (%s)::timestamptz,"
    " (%s)::uuid, (%s)::jsonb, (%s)::int[]"
)


def connect(**extra: Any) -> Any:
    params = dict(
        host=CFG.host,
        port=CFG.port,
        user=CFG.user,
        password=CFG.password,
        dbname=CFG.database,
        application_name=f"matrix-{DRIVER}",
        connect_timeout=10,
    )
    params.update(extra)
    conn = track(psycopg2.connect(**params))
    psycopg2.extras.register_uuid(conn_or_curs=conn)
    return conn


def one(conn: Any, sql: str, params: Any = None) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone()


def rolling_back(conn: Any, fn: Callable[[], None]) -> None:
    """Runs a transaction; on error rolls it back, so that a failed client does not keep its server."""
    try:
        fn()
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


def background_txn(conn: Any, tag: str, k: int, n: int) -> None:
    ident = n % 1000 + 1

    def txn() -> None:
        eq(one(conn, S4["read"], (ident,))[0], f"value {ident}", "background read")
        with conn.cursor() as cur:
            cur.execute(S4["audit"], (f"{DRIVER}-{tag}:{k}", n))

    rolling_back(conn, txn)


def start_background(tag: str, workers: int = 4) -> tuple[Background, list[Any]]:
    conns = [connect() for _ in range(workers)]
    return Background(workers, lambda k, n: background_txn(conns[k], tag, k, n)), conns


def s1() -> str:
    conn = connect(options="-c lock_timeout=42s")
    version = conn.get_parameter_status("server_version")
    check(conn.server_version >= 120000, f"server_version {version} < 12")
    datestyle = conn.get_parameter_status("DateStyle")
    check(datestyle.startswith("ISO"), f"DateStyle {datestyle}")
    noise = [connect(application_name=f"matrix-noise-{i}") for i in range(4)]

    def noise_txn(k: int, _n: int) -> None:
        def txn() -> None:
            eq(one(noise[k], "SHOW application_name")[0], f"matrix-noise-{k}", "noise application_name")
            eq(one(noise[k], "SHOW lock_timeout")[0], "0", "noise lock_timeout")

        rolling_back(noise[k], txn)

    bg = Background(len(noise), noise_txn)
    try:
        for n in range(100):
            eq(one(conn, "SHOW application_name")[0], f"matrix-{DRIVER}", f"txn {n} application_name")
            eq(one(conn, "SHOW lock_timeout")[0], "42s", f"txn {n} lock_timeout (options)")
            conn.commit()
    finally:
        bg.stop()
    bg.check("noise")
    return (
        f"server_version {version}, DateStyle {datestyle}; application_name and lock_timeout (options)"
        f" kept over 100 txns beside 4 other clients ({bg.txns} txns)"
    )


def s2() -> str:
    conn = connect()
    with conn.cursor() as cur:
        cur.execute("SELECT 1 AS a; SELECT 2 AS b")
        eq(cur.fetchall(), [(2,)], "SELECT 1; SELECT 2 (the driver keeps the last result)")
        cur.execute("SELECT set_config('matrix.s2', 'ran', true); SELECT current_setting('matrix.s2')")
        eq(cur.fetchall(), [("ran",)], "both statements of one Query ran")
        try:
            cur.execute("-- nothing but a comment")
            raise CheckFailed("empty query: no error from the driver")
        except psycopg2.ProgrammingError as err:
            check("empty query" in str(err), f"empty query: {err}")
    conn.rollback()
    eq(one(conn, "SELECT 3")[0], 3, "query after the empty one")
    conn.commit()
    return "SELECT 1; SELECT 2 ran both statements; empty query answered"


def s3() -> str:
    conn = connect()
    for i, values in enumerate(S3_VALUES):
        params = list(values)
        params[8] = None if values[8] is None else Json(values[8])
        check_s3_row(one(conn, S3_SQL, params), values, f"value set {i}")
    with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
        for ident in (1, 7, 1000):
            cur.execute("SELECT * FROM t WHERE id = %s", (ident,))
            check_t_row(cur.fetchone(), ident, "fixture")
    conn.commit()
    return f"{len(S3_VALUES)} value sets of 10 types round-trip; 3 fixture rows match"


def s4() -> str:
    clear_audit(DRIVER)
    conns = [connect() for _ in range(CFG.clients)]
    sampler = BackendSampler()

    def client(k: int) -> None:
        conn, who, own = conns[k], f"{DRIVER}:{k}", own_sql(k)
        try:
            for n in range(CFG.txns):
                ident = s4_id(k, n, CFG.txns)
                with conn.cursor() as cur:
                    cur.execute(S4["lock"], (ident,))
                    before = cur.fetchone()[0]
                    cur.execute(S4["bump"], (ident,))
                    eq(cur.fetchone()[0], before + 1, "updated f")
                    cur.execute(S4["read"], (ident,))
                    eq(cur.fetchone()[0], f"value {ident}", "read v")
                    cur.execute(S4["audit"], (who, n))
                    cur.execute(own, (n,))
                    eq(cur.fetchone()[0], n + k, "own statement")
                conn.commit()
                eq(one(conn, S4["count"], (who,))[0], n + 1, "audit rows so far")
                conn.commit()
        except BaseException:
            conn.rollback()
            raise

    try:
        errors = run_threads(CFG.clients, client)
    finally:
        sampler.stop()
    raise_first(errors, CFG.clients)
    return f"{check_audit(DRIVER, CFG.clients * CFG.txns)}, {sampler.verdict()}"


def s5() -> str:
    conn = connect()
    # (a) an error inside a transaction, then ROLLBACK
    expect_error(lambda: one(conn, "SELECT 1 / %s", (0,)), "22012", "(a) 1/0")
    expect_error(lambda: one(conn, "SELECT 1"), "25P02", "(a) statement in aborted txn")
    conn.rollback()
    eq(one(conn, "SELECT %s", (1,))[0], 1, "(a) next txn")
    conn.commit()
    # (c) an error in the middle of a multi-statement Query: nothing of it stays
    tbl = table(DRIVER, "s5")
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {tbl}; CREATE TABLE {tbl} (a int)")
    conn.commit()
    expect_error(
        lambda: one(conn, f"INSERT INTO {tbl} VALUES (1); SELECT 1 / 0; INSERT INTO {tbl} VALUES (2)"),
        "22012",
        "(c) 1/0 mid-batch",
    )
    conn.rollback()
    eq(one(conn, f"SELECT count(*) FROM {tbl}")[0], 0, "(c) rows of the failed batch")
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE {tbl}")
    conn.commit()
    return "recovered from a, c"


def s6() -> str:
    conn = connect()
    tbl = table(DRIVER, "s6")
    rows = 100_000
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {tbl}; CREATE TABLE {tbl} (id int, v text)")
        data = io.StringIO("".join(f"{i}\trow {i}\n" for i in range(1, rows + 1)))
        cur.copy_expert(f"COPY {tbl} (id, v) FROM STDIN", data)
        eq(cur.rowcount, rows, "COPY FROM rowcount")
        conn.commit()
        out = io.StringIO()
        cur.copy_expert(f"COPY (SELECT id, v FROM {tbl} ORDER BY id) TO STDOUT", out)
        lines = out.getvalue().splitlines()
        eq((len(lines), lines[-1]), (rows, f"{rows}\trow {rows}"), "COPY TO")
        conn.commit()
        expect_error(
            lambda: cur.copy_expert(f"COPY {tbl} (id, v) FROM STDIN", io.StringIO("1\tok\nnot-an-int\tbad\n")),
            "22P02",
            "COPY with a bad row",
        )
        conn.rollback()

        class Failing(io.StringIO):
            def read(self, *_: Any) -> str:
                raise RuntimeError("matrix CopyFail")

        expect_error(lambda: cur.copy_expert(f"COPY {tbl} (id, v) FROM STDIN", Failing()), "57014", "CopyFail")
        conn.rollback()
        eq(one(conn, f"SELECT count(*) FROM {tbl}")[0], rows, "rows after the failed COPYs")
        cur.execute(f"DROP TABLE {tbl}")
        conn.commit()
    return f"{rows} rows in, {len(lines)} out; bad row 22P02 and CopyFail 57014, connection fine after"


def s7() -> str:
    conn = connect()
    bg, _ = start_background("s7")
    count = total = 0
    try:
        with conn.cursor(name="matrix_s7") as cur:
            cur.itersize = 2000
            cur.execute("SELECT id, v FROM big")
            for ident, _v in cur:
                count += 1
                total += ident
        conn.commit()
    finally:
        bg.stop()
    eq((count, total), (BIG_ROWS, BIG_ID_SUM), "rows and sum of ids streamed")
    bg.check("S7")
    return (
        f"{count} rows through a named cursor (itersize 2000) in a txn; 4 others did {bg.txns} txns"
        f" meanwhile (slowest {bg.max_latency_ms:.0f} ms)"
    )


def s8() -> str:
    conn = connect()
    bg, _ = start_background("s8")
    try:
        time.sleep(0.1)
        sent_at: list[float] = []

        def cancel_later() -> None:
            time.sleep(0.2)
            # Recorded before the call: the 57014 can reach the main thread before conn.cancel() returns.
            sent_at.append(time.monotonic())
            conn.cancel()

        threading.Thread(target=cancel_later, daemon=True).start()
        expect_error(lambda: one(conn, "SELECT pg_sleep(30)"), "57014", "pg_sleep(30) cancelled")
        check(bool(sent_at), "pg_sleep(30) failed before the cancel was sent")
        elapsed = (time.monotonic() - sent_at[0]) * 1000
        check(elapsed < 2000, f"57014 arrived {elapsed:.0f} ms after conn.cancel()")
        conn.rollback()
        oracle = Oracle()
        try:
            eq(oracle.sleeping("SELECT pg_sleep(30)%"), 0, "pg_sleep(30) still running on the server")
        finally:
            oracle.close()
        eq(one(conn, "SELECT %s", (8,))[0], 8, "query after cancel")
        conn.commit()
    finally:
        bg.stop()
    bg.check("S8")
    return f"57014 {elapsed:.0f} ms after conn.cancel(); the connection works; 4 others did {bg.txns} txns, none cancelled"


def s9() -> str:
    tag = uuid.uuid4().hex[:8]
    conns = [connect(), connect()]

    def notices(i: int) -> None:
        for r in range(5):
            one(conns[i], "SELECT notice(%s)", (f"{tag}-{i}-{r}",))
            conns[i].commit()

    raise_first(run_threads(2, notices), 2)
    for i, conn in enumerate(conns):
        want = [f"NOTICE:  hello {tag}-{i}-{r}\n" for r in range(5)]
        eq(list(conn.notices), want, f"notices of client {i}")
    channel = table(DRIVER, "s9")
    listener = connect(port=CFG.direct_port, user=CFG.direct_user, password=CFG.direct_password)
    listener.set_isolation_level(psycopg2.extensions.ISOLATION_LEVEL_AUTOCOMMIT)
    with listener.cursor() as cur:
        cur.execute(f"LISTEN {channel}")
    payload = f"payload {tag} ✓"
    one(conns[0], "SELECT pg_notify(%s, %s)", (channel, payload))
    conns[0].commit()
    deadline = time.monotonic() + 5
    while not listener.notifies and time.monotonic() < deadline:
        select.select([listener], [], [], 0.2)
        listener.poll()
    check(listener.notifies, "NOTIFY through the pooler: nothing heard within 5 s")
    eq((listener.notifies[0].channel, listener.notifies[0].payload), (channel, payload), "notification")
    return "10 notices each reached their own client; NOTIFY reached a direct LISTEN"


def leak_probe(a: Any, b: Any, show: str, a_value: str, what: str) -> None:
    """A set `show` to `a_value` for its session: A keeps it, B never sees it (20 rounds)."""

    def shown(conn: Any) -> str:
        value = one(conn, f"SHOW {show}")[0]
        conn.commit()
        return value

    for r in range(20):
        eq(shown(a), a_value, f"{what} round {r}: A's {show}")
        check(shown(b) != a_value, f"{what} round {r}: B sees A's {show}")
        # B holds a server in a transaction while A asks: A must be on another one
        b_value = one(b, f"SHOW {show}")[0]
        a_now = shown(a)
        b.commit()
        check(b_value != a_value, f"{what} round {r}: B (in txn) sees A's {show}")
        eq(a_now, a_value, f"{what} round {r}: A's {show} while B is in a txn")


def s10() -> str:
    conn = connect()
    with conn.cursor() as cur:
        cur.execute("SET LOCAL statement_timeout = '100ms'")
    expect_error(lambda: one(conn, "SELECT pg_sleep(%s)", (1,)), "57014", "pg_sleep(1) under SET LOCAL")
    conn.rollback()
    one(conn, "SELECT pg_sleep(%s)", (0.3,))
    conn.commit()
    a, b = connect(), connect()
    with a.cursor() as cur:
        cur.execute(f"SET search_path = {LEAK_PATH}")
    a.commit()
    leak_probe(a, b, "search_path", LEAK_PATH, "SET")
    # set_session() in autocommit sends a session SET default_transaction_read_only (§3.3)
    c, d = connect(), connect()
    c.autocommit = True
    c.set_session(readonly=True)
    leak_probe(c, d, "default_transaction_read_only", "on", "set_session")
    with d.cursor() as cur:
        cur.execute("INSERT INTO audit (client, pid, n) VALUES (%s, pg_backend_pid(), 0)", (f"{DRIVER}-s10",))
    d.commit()
    return (
        "SET LOCAL statement_timeout honoured then gone; session search_path and set_session(readonly)"
        " stayed with their client over 20 rounds each, never seen by another"
    )


def s16() -> str:
    conns = [connect(host=CFG.socket_dir) for _ in range(S16_CLIENTS)]
    seen = []
    for _ in range(S16_TXNS):
        for conn in conns:
            seen.append(one(conn, S16_SQL))
            conn.commit()
    return judge_socket(seen)


SCENARIOS: list[tuple[str, Callable[[], str]]] = [
    ("S1", s1),
    ("S2", s2),
    ("S3", s3),
    ("S4", s4),
    ("S5", s5),
    ("S6", s6),
    ("S7", s7),
    ("S8", s8),
    ("S9", s9),
    ("S10", s10),
    ("S16", s16),
]
