"""Writes secrets into a Secrets Manager endpoint with boto3, as an operator (or a rotation) would.

Usage: secrets_admin.py ENDPOINT_URL REGION (create|put) NAME SECRET_STRING
Credentials come from the environment (the tests pass dummy ones). Prints the secret's ARN.
"""

import sys

import boto3


def main():
    endpoint, region, op, name, value = sys.argv[1:6]
    client = boto3.client("secretsmanager", endpoint_url=endpoint, region_name=region)
    if op == "create":
        out = client.create_secret(Name=name, SecretString=value)
    elif op == "put":
        out = client.put_secret_value(SecretId=name, SecretString=value)
    else:
        raise SystemExit(f"unknown op {op!r}")
    print(out["ARN"])


if __name__ == "__main__":
    main()
