#!/usr/bin/env python3
"""Each test's outcome in pytest's junit XML against expectations.txt; exits 1 when a test expected to pass did
not, when a test of the files run has no line in expectations.txt, or when an expected test did not run.

expectations.txt: one line per test, `file.py::test_name  status  why`, status one of
  pass  pgmux passes it (a failure or a skip fails the run);
  n/a   it does not apply to pgmux (why: statement mode, another OS, the environment, ...);
  gap   PgBouncer users have something pgmux lacks (why names it). A gap or n/a test that passes is reported
        (so that expectations.txt can be tightened) without failing the run.
A parametrized test is one line for all its parameters (`file.py::test_name`), unless a line names the parameter
(`file.py::test_name[param]`), which then wins.
"""

import argparse
import collections
import sys
import xml.etree.ElementTree as ET

STATUSES = ("pass", "n/a", "gap")


def load_expectations(path):
    exp = {}
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        if len(parts) < 2 or parts[1] not in STATUSES:
            sys.exit(f"{path}:{n}: expected `file.py::test  pass|n/a|gap  why`, got {line!r}")
        if parts[1] != "pass" and len(parts) < 3:
            sys.exit(f"{path}:{n}: {parts[0]} is {parts[1]} without saying why")
        if parts[0] in exp:
            sys.exit(f"{path}:{n}: {parts[0]} listed twice")
        exp[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    return exp


def load_results(path):
    """{`file.py::test[param]`: (outcome, message)}, outcome passed / failed / skipped."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")[-1]
        test_id = f"{module}.py::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message = "failed", (child.get("message") or "").splitlines()[0:1]
                message = message[0] if message else child.tag
                break
            if child.tag == "skipped":
                outcome, message = "skipped", child.get("message") or ""
        # A test can appear twice (an error in teardown after a pass): the worse outcome wins.
        if test_id in out and out[test_id][0] == "failed":
            continue
        out[test_id] = (outcome, message)
    return out


def expectation(exp, test_id):
    if test_id in exp:
        return exp[test_id], test_id
    base = test_id.split("[", 1)[0]
    return exp.get(base), base


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--junit", required=True)
    ap.add_argument("--expect", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--partial", action="store_true", help="a subset of tests was selected (-k): no 'did not run'")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()

    exp = load_expectations(args.expect)
    results = load_results(args.junit)
    if not results:
        sys.exit("conformance: pytest ran no tests")
    lines, problems, notes = [], [], []
    counts = collections.Counter()
    per_file = collections.defaultdict(collections.Counter)
    used = set()
    for test_id in sorted(results):
        outcome, message = results[test_id]
        e, key = expectation(exp, test_id)
        f = test_id.split("::")[0]
        if e is None:
            problems.append(f"{test_id}: not in expectations.txt ({outcome})")
            status, why = "?", ""
        else:
            used.add(key)
            status, why = e
        if status == "pass" and outcome != "passed":
            problems.append(f"{test_id}: expected to pass, {outcome}: {message}")
            verdict = "FAIL"
        elif status == "pass":
            verdict = "pass"
        elif status in ("n/a", "gap") and outcome == "passed":
            notes.append(f"{test_id}: listed as {status} but passed (tighten expectations.txt?)")
            verdict = f"{status}, passed"
        else:
            verdict = status
        counts[verdict] += 1
        per_file[f][verdict] += 1
        detail = why if status in ("n/a", "gap") else ""
        if outcome != "passed" and message:
            detail = f"{detail} [{outcome}: {message[:160]}]".strip()
        lines.append(f"{verdict:<12} {test_id}  {detail}".rstrip())
    if not args.partial:
        for key, (status, _) in sorted(exp.items()):
            f = key.split("::")[0]
            if f in args.files and key not in used:
                problems.append(f"{key}: in expectations.txt ({status}) but did not run")

    summary = [f"{f}: " + ", ".join(f"{v} {c[v]}" for v in sorted(c)) for f, c in sorted(per_file.items())]
    total = ", ".join(f"{v} {counts[v]}" for v in sorted(counts))
    report = "\n".join(
        ["Per test (verdict, test, why or what happened):"]
        + lines
        + ["", "Per file:"]
        + summary
        + ["", f"Total {sum(counts.values())}: {total}"]
        + ([""] + ["Note: " + n for n in notes] if notes else [])
        + ([""] + ["PROBLEM: " + p for p in problems] if problems else [])
    )
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(report + "\n")
    print(report)
    if problems:
        print(f"\nconformance: {len(problems)} problem(s); results in {args.out}", file=sys.stderr)
        sys.exit(1)
    print(f"\nconformance: every test expected to pass passed; results in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
