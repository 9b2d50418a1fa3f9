"""Parses a Prometheus exposition from stdin with prometheus-client, the second client issue 12 asks for.

    prom_parse.py prometheus    text format 0.0.4 (prometheus_client.parser, lenient like Prometheus)
    prom_parse.py openmetrics   OpenMetrics 1.0 (prometheus_client.openmetrics.parser, strict: # EOF,
                                _total / _created, histogram bucket order, _count == +Inf bucket, ...)

Prints one JSON object: {"families": [{"name", "type", "unit", "help", "samples": [{"name", "labels",
"value"}]}]}. Values that JSON cannot hold (inf, nan) are written as strings. A parse error exits 1 with
the parser's message.
"""
import json
import math
import sys

from prometheus_client import parser as text_parser
from prometheus_client.openmetrics import parser as om_parser


def number(v):
    return v if math.isfinite(v) else str(v)


def main():
    fmt = sys.argv[1]
    text = sys.stdin.read()
    parse = {"prometheus": text_parser, "openmetrics": om_parser}[fmt].text_string_to_metric_families
    try:
        families = [
            {
                "name": f.name,
                "type": f.type,
                "unit": getattr(f, "unit", ""),
                "help": f.documentation,
                "samples": [{"name": s.name, "labels": s.labels, "value": number(s.value)} for s in f.samples],
            }
            for f in parse(text)
        ]
    except Exception as e:  # the parsers raise ValueError and friends; say which and fail
        print(f"{fmt} parse failed: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    json.dump({"families": families}, sys.stdout)


if __name__ == "__main__":
    main()
