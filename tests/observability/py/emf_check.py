"""Checks pgmux's EMF lines against the specification and against aws-embedded-metrics.

    emf_check.py SCHEMA < request.json
    emf_check.py SCHEMA --each < [request, ...]   one verdict per request: [{"ok": bool, "error": str}]

request.json: {"lines": [str], "namespace": str, "dimensions": {key: value}, "timestamp_ms": int,
               "metrics": [{"name": str, "unit": str, "values": [number]}]}

1. Every line is one JSON object on one line, under 256 KB, valid against SCHEMA (jsonschema), and passes
   what a schema cannot say: every metric name and dimension key is a root member (a finite number or an
   array of 1 to 100 finite numbers; a non-empty string), the timestamp is within -14 days / +2 hours of now.
2. The same metrics go through aws-embedded-metrics' MetricsContext and LogSerializer; its documents pass
   the same checks (so the schema is not stricter than AWS's own library), and pgmux's documents must have
   the same _aws and directive keys, namespace, dimensions and timestamp, the same metric names with the same
   units, and the same multiset of values per metric (documents may split differently).

Prints a JSON summary; exits 1 naming the first difference. With --each, prints the verdicts and exits 0.
"""
import json
import math
import sys
import time
from collections import Counter, defaultdict
from datetime import datetime, timezone

import jsonschema
from aws_embedded_metrics.logger.metrics_context import MetricsContext
from aws_embedded_metrics.serializers.log_serializer import LogSerializer

MAX_VALUES = 100
MAX_BYTES = 256 * 1024


class CheckError(Exception):
    pass


def fail(msg):
    raise CheckError(msg)


def check_line(validator, line, who):
    if "\n" in line or len(line.encode()) >= MAX_BYTES:
        fail(f"{who}: not one line under 256 KB ({len(line)} bytes)")
    doc = json.loads(line)
    if not isinstance(doc, dict):
        fail(f"{who}: not a JSON object")
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        fail(f"{who}: schema: {errors[0].message} at {list(errors[0].path)}")
    aws = doc["_aws"]
    now_ms = time.time() * 1000
    if not (now_ms - 14 * 86400e3 <= aws["Timestamp"] <= now_ms + 2 * 3600e3):
        fail(f"{who}: Timestamp {aws['Timestamp']} outside -14 d / +2 h")
    for directive in aws["CloudWatchMetrics"]:
        for dimension_set in directive["Dimensions"]:
            for key in dimension_set:
                if not isinstance(doc.get(key), str) or not doc[key]:
                    fail(f"{who}: dimension {key} is not a non-empty string member")
        for metric in directive["Metrics"]:
            value = doc.get(metric["Name"])
            values = value if isinstance(value, list) else [value]
            if not 1 <= len(values) <= MAX_VALUES:
                fail(f"{who}: {metric['Name']} has {len(values)} values")
            for v in values:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    fail(f"{who}: {metric['Name']} holds {v!r}, not a finite number")
    return doc


def summary(docs):
    """Names with units, values per name, and the keys of _aws and the directive, over all documents."""
    units, values = {}, defaultdict(list)
    aws_keys, directive_keys, heads = set(), set(), set()
    for doc in docs:
        aws = doc["_aws"]
        aws_keys.add(tuple(sorted(aws)))
        for d in aws["CloudWatchMetrics"]:
            directive_keys.add(tuple(sorted(d)))
            heads.add((d["Namespace"], json.dumps(d["Dimensions"]), aws["Timestamp"]))
            for m in d["Metrics"]:
                if units.setdefault(m["Name"], m.get("Unit")) != m.get("Unit"):
                    fail(f"{m['Name']} has two units")
                v = doc[m["Name"]]
                values[m["Name"]].extend(v if isinstance(v, list) else [v])
    return {
        "units": units,
        "values": {k: Counter(float(x) for x in v) for k, v in values.items()},
        "aws_keys": aws_keys,
        "directive_keys": directive_keys,
        "heads": heads,
        "max_metrics": max(len(d["_aws"]["CloudWatchMetrics"][0]["Metrics"]) for d in docs),
    }


def library_documents(req):
    ctx = MetricsContext.empty()
    ctx.namespace = req["namespace"]
    ctx.set_dimensions([req["dimensions"]])
    ctx.set_timestamp(datetime.fromtimestamp(req["timestamp_ms"] / 1000, tz=timezone.utc))
    for m in req["metrics"]:
        for v in m["values"]:
            ctx.put_metric(m["name"], v, m["unit"])
    return LogSerializer.serialize(ctx)


def check(validator, req):
    ours = [check_line(validator, line, f"pgmux line {i}") for i, line in enumerate(req["lines"])]
    if not ours:
        fail("no lines to check")
    theirs_lines = library_documents(req)
    theirs = [check_line(validator, line, f"aws-embedded-metrics line {i}") for i, line in enumerate(theirs_lines)]
    a, b = summary(ours), summary(theirs)
    for key in ["aws_keys", "directive_keys", "heads", "units"]:
        if a[key] != b[key]:
            fail(f"{key} differ: pgmux {a[key]} vs aws-embedded-metrics {b[key]}")
    for name in b["values"]:
        if a["values"].get(name) != b["values"][name]:
            fail(f"values of {name} differ: pgmux {sorted(a['values'].get(name, {}).elements())[:10]}... "
                 f"vs aws-embedded-metrics {sorted(b['values'][name].elements())[:10]}...")
    if set(a["values"]) != set(b["values"]):
        fail(f"metric names differ: {set(a['values']) ^ set(b['values'])}")
    return {"pgmux_documents": len(ours), "library_documents": len(theirs), "metrics": len(a["units"]),
            "values": sum(sum(c.values()) for c in a["values"].values()),
            "max_metrics_per_document": a["max_metrics"]}


def verdict(validator, req):
    try:
        return {"ok": True, "summary": check(validator, req)}
    except (CheckError, ValueError, KeyError, TypeError) as e:
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def main():
    with open(sys.argv[1]) as f:
        validator = jsonschema.Draft202012Validator(json.load(f))
    req = json.load(sys.stdin)
    if sys.argv[2:] == ["--each"]:
        json.dump([verdict(validator, r) for r in req], sys.stdout)
        return
    result = verdict(validator, req)
    if not result["ok"]:
        print(result["error"], file=sys.stderr)
        sys.exit(1)
    json.dump(result["summary"], sys.stdout)


if __name__ == "__main__":
    main()
