"""Reference values from botocore for the pgmux-aws tests, at a fixed clock.

Reads one JSON request on stdin and writes one JSON answer on stdout:
  {"op": "rds_tokens", "cases": [{"host", "port", "user", "region", "access_key_id", "secret_access_key",
                                  "session_token" (or null), "epoch"}]}
      -> ["token", ...]   (RDSClient.generate_db_auth_token)
  {"op": "sigv4_headers", "method", "url", "headers": {..}, "body", "service", "region", "access_key_id",
   "secret_access_key", "session_token", "epoch"}
      -> {"Authorization": ..., "X-Amz-Date": ..., "X-Amz-Security-Token": ...}   (SigV4Auth.add_auth)
  {"op": "imds_credentials", "endpoint"}
      -> {"access_key", "has_token", "expiry_epoch", "role_name"}   (InstanceMetadataFetcher, IMDSv2)

The clock is fixed by patching botocore.auth.get_current_datetime, the one place botocore's signers read the
time (botocore >= 1.34), rather than freezing datetime process-wide.
"""

import datetime
import json
import sys
from unittest import mock

import botocore.auth
import botocore.awsrequest
import botocore.credentials
import botocore.session
import botocore.utils


def fixed_clock(epoch):
    aware = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)

    def get_current_datetime(remove_tzinfo=True):
        return aware.replace(tzinfo=None) if remove_tzinfo else aware

    return mock.patch.object(botocore.auth, "get_current_datetime", get_current_datetime)


def rds_tokens(cases):
    tokens = []
    for case in cases:
        session = botocore.session.get_session()
        session.set_credentials(case["access_key_id"], case["secret_access_key"], case.get("session_token"))
        client = session.create_client("rds", region_name=case["region"])
        with fixed_clock(case["epoch"]):
            tokens.append(
                client.generate_db_auth_token(
                    DBHostname=case["host"], Port=case["port"], DBUsername=case["user"], Region=case["region"]
                )
            )
    return tokens


def sigv4_headers(req):
    creds = botocore.credentials.Credentials(req["access_key_id"], req["secret_access_key"], req.get("session_token"))
    request = botocore.awsrequest.AWSRequest(
        method=req["method"], url=req["url"], headers=req["headers"], data=req["body"].encode()
    )
    with fixed_clock(req["epoch"]):
        botocore.auth.SigV4Auth(creds, req["service"], req["region"]).add_auth(request)
    names = ("Authorization", "X-Amz-Date", "X-Amz-Security-Token")
    return {name: request.headers[name] for name in names if name in request.headers}


def imds_credentials(req):
    fetcher = botocore.utils.InstanceMetadataFetcher(
        timeout=2, num_attempts=1, config={"ec2_metadata_service_endpoint": req["endpoint"]}
    )
    creds = fetcher.retrieve_iam_role_credentials()
    if not creds:
        raise SystemExit("botocore found no credentials at " + req["endpoint"])
    expiry = datetime.datetime.strptime(creds["expiry_time"], "%Y-%m-%dT%H:%M:%SZ")
    return {
        "access_key": creds["access_key"],
        "has_token": bool(creds["token"]),
        "expiry_epoch": int(expiry.replace(tzinfo=datetime.timezone.utc).timestamp()),
        "role_name": creds["role_name"],
    }


def main():
    req = json.load(sys.stdin)
    if req["op"] == "rds_tokens":
        out = rds_tokens(req["cases"])
    elif req["op"] == "sigv4_headers":
        out = sigv4_headers(req)
    elif req["op"] == "imds_credentials":
        out = imds_credentials(req)
    else:
        raise SystemExit(f"unknown op {req['op']!r}")
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
