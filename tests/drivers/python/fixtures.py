"""Values and SQL shared by the Python drivers, so that every driver is held to the same expectations."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from decimal import Decimal
from typing import Any

from harness import CheckFailed

S3_COLUMNS = ["i4", "i8", "num", "txt", "by", "bo", "ts", "u", "j", "arr"]

UTC = dt.timezone.utc

# One Python value per column; the SQL casts each parameter, so every driver's default path can send them.
S3_VALUES: list[list[Any]] = [
    [
        42,
        9007199254740993,
        Decimal("12345678901234567890.123456789"),
        "héllo wörld ✓ 'quoted' \\ back",
        bytes([0, 1, 2, 0x7F, 0x80, 0xFF, 0]),
        True,
        dt.datetime(2026, 3, 4, 5, 6, 7, 891234, tzinfo=UTC),
        uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        {"a": [1, "x", None], "b": {"c": True}, "ünï": 1.5},
        [1, 2, 3],
    ],
    [
        -2147483648,
        -9223372036854775808,
        Decimal("0.000001"),
        "",
        b"",
        False,
        dt.datetime(1970, 1, 1, tzinfo=UTC),
        uuid.UUID(int=0),
        {"e": [], "n": -0.5, "s": ""},
        [None, 5, -7],
    ],
    [None] * 10,
]


def canon(value: Any) -> Any:
    """A comparable form: bytes as hex, datetimes in UTC, UUIDs and Decimals as text, dict keys sorted."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "\\x" + bytes(value).hex()
    if isinstance(value, dt.datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, (uuid.UUID, Decimal)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [canon(v) for v in value]
    if isinstance(value, dict):
        return {k: canon(value[k]) for k in sorted(value)}
    return value


def check_s3_row(row: Any, values: list[Any], what: str, json_as_text: bool = False) -> None:
    """Compares a returned S3 row (sequence in S3_COLUMNS order) with the values sent."""
    for i, col in enumerate(S3_COLUMNS):
        got = row[i]
        if json_as_text and col == "j" and got is not None:
            got = json.loads(got)
        if canon(got) != canon(values[i]):
            raise CheckFailed(f"{what} column {col}: got {canon(got)!r}, want {canon(values[i])!r}")


def expected_t_row(ident: int) -> dict[str, Any]:
    """The fixture row `t` holds for `ident` (setup.sql), in canon() form."""
    md5 = hashlib.md5(str(ident).encode()).hexdigest()
    return {
        "v": f"value {ident}",
        "b": "\\x" + md5,
        "u": str(uuid.UUID(md5)),
        "j": {"n": ident},
        "a": [ident, ident + 1],
        "ts": (dt.datetime(2026, 1, 1, tzinfo=UTC) + dt.timedelta(minutes=ident)).isoformat(),
    }


def check_t_row(row: dict[str, Any], ident: int, what: str, json_as_text: bool = False) -> None:
    for col, want in expected_t_row(ident).items():
        got = row[col]
        if json_as_text and col == "j":
            got = json.loads(got)
        if canon(got) != want:
            raise CheckFailed(f"{what} t.{col} for id {ident}: got {canon(got)!r}, want {want!r}")


# S4: five SQL texts shared by every client plus one per client, in the driver's placeholder style.
S4_PYFORMAT = {
    "lock": "SELECT f FROM t WHERE id = %s FOR UPDATE",
    "bump": "UPDATE t SET f = f + 1 WHERE id = %s RETURNING f",
    "read": "SELECT v FROM t WHERE id = %s",
    "audit": "INSERT INTO audit (client, pid, n) VALUES (%s, pg_backend_pid(), %s)",
    "count": "SELECT count(*)::int FROM audit WHERE client = %s",
}
S4_DOLLAR = {k: v.replace("%s", "$1", 1).replace("%s", "$2", 1) for k, v in S4_PYFORMAT.items()}


def own_sql(k: int, dollar: bool = False) -> str:
    return f"SELECT {'$1' if dollar else '%s'}::int + {k} AS own"


def s4_id(k: int, n: int, txns: int) -> int:
    """Row of `t` that client `k` touches in its transaction `n`."""
    return (k * txns + n) % 1000 + 1


BIG_ROWS = 1_000_000
BIG_ID_SUM = BIG_ROWS * (BIG_ROWS + 1) // 2

# S10: a session search_path for the leak probe. It keeps `public`, so that a pooler that leaks it to other
# clients fails S10 but does not break every later scenario with "relation t does not exist".
LEAK_PATH = "matrix_alt, public"
