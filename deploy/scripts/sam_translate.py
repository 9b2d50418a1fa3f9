"""Expands a SAM template into the CloudFormation that AWS's SAM transform would deploy, offline.

cfn-lint checks AWS::Serverless::* resources against its own SAM schema; this runs the real transform
(aws-sam-translator, the library behind `sam validate` and CloudFormation's Transform) so that what SAM
would generate, such as AWS::Lambda::Function with CapacityProviderConfig, is linted too.

usage: python3 sam_translate.py TEMPLATE.yaml OUT.json
"""

import json
import os
import sys

# The transform asks boto3 for a region (to fill AWS::Region); no AWS call is made.
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from samtranslator.model.exceptions import InvalidDocumentException
from samtranslator.parser.parser import Parser
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse


class NoManagedPolicies:
    """The template names managed policies by ARN only, so no IAM lookup is needed (or possible)."""

    def load(self):
        return {}


def main() -> None:
    src, out = sys.argv[1], sys.argv[2]
    with open(src) as f:
        template = yaml_parse(f.read())
    # Local paths (CodeUri, ContentUri) are what `sam package` replaces with S3 locations.
    for resource in template.get("Resources", {}).values():
        props = resource.get("Properties", {})
        for key in ("CodeUri", "ContentUri"):
            if isinstance(props.get(key), str):
                props[key] = "s3://example-bucket/" + props[key].strip("./").replace("/", "-")
    globals_fn = template.get("Globals", {}).get("Function", {})
    if isinstance(globals_fn.get("CodeUri"), str):
        globals_fn["CodeUri"] = "s3://example-bucket/sample-function.zip"
    params = {"AWS::Region": "us-east-1", "AWS::AccountId": "123456789012", "AWS::Partition": "aws"}
    try:
        cfn = transform(template, params, NoManagedPolicies(), Parser())
    except InvalidDocumentException as e:
        for cause in e.causes:
            print(f"sam: {cause.message}", file=sys.stderr)
        sys.exit(1)
    with open(out, "w") as f:
        json.dump(cfn, f, indent=1, default=str)


if __name__ == "__main__":
    main()
