"""Python suite of the driver matrix (tests/drivers/README.md): psycopg2, psycopg 3 at the default
prepare_threshold=5 and at 0, asyncpg at the default statement cache and with it off.

    tests/drivers/python/.venv/bin/python tests/drivers/python/matrix.py

MATRIX_DRIVERS / MATRIX_SCENARIOS (comma-separated) narrow a run while developing; the runner sets
neither, and a narrowed run says so on stderr."""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import drv_asyncpg  # noqa: E402
import drv_psycopg2  # noqa: E402
import drv_psycopg3  # noqa: E402
from harness import CFG, Oracle, Report, describe_error  # noqa: E402

DRIVERS = [
    ("psycopg2", lambda: drv_psycopg2.SCENARIOS),
    ("psycopg3", lambda: drv_psycopg3.scenarios("psycopg3", 5)),
    ("psycopg3-prepare0", lambda: drv_psycopg3.scenarios("psycopg3-prepare0", 0)),
    ("asyncpg", lambda: drv_asyncpg.scenarios("asyncpg", 100)),
    ("asyncpg-nocache", lambda: drv_asyncpg.scenarios("asyncpg-nocache", 0)),
]


def main() -> int:
    only_drivers = [d for d in os.environ.get("MATRIX_DRIVERS", "").split(",") if d]
    only_scenarios = [s for s in os.environ.get("MATRIX_SCENARIOS", "").split(",") if s]
    if only_drivers or only_scenarios:
        print(f"narrowed run: drivers {only_drivers} scenarios {only_scenarios}", file=sys.stderr)
    report = Report()
    try:
        oracle = Oracle()
    except Exception as err:  # noqa: BLE001
        report.line("python", "oracle", False, f"cannot reach PostgreSQL directly on port {CFG.direct_port}: {describe_error(err)}")
        print(f"{report.passed} passed, {report.failed} failed", flush=True)
        return 0
    plan = [
        (driver, scenario, fn)
        for driver, make in DRIVERS
        if not only_drivers or driver in only_drivers
        for scenario, fn in make()
        if not only_scenarios or scenario in only_scenarios
    ]
    # The contract's bound for the whole suite: a scenario starts only if its own timeout still fits.
    budget = CFG.timeout_s * (len(plan) + 1)
    started = time.monotonic()
    for driver, scenario, fn in plan:
        if time.monotonic() - started + CFG.timeout_s > budget:
            report.line(driver, scenario, False, f"not run: the suite's {budget} s budget is spent")
            continue
        report.run(driver, scenario, oracle, fn)
    oracle.close()
    print(f"python suite: {time.monotonic() - started:.1f} s", file=sys.stderr)
    print(f"{report.passed} passed, {report.failed} failed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
