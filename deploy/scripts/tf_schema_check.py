"""Checks every resource and data block of a Terraform configuration against the schema of a newer
hashicorp/aws provider than the machine can run, when `terraform validate` cannot (see terraform-check.sh).

The schema is read from cdktn-provider-aws, a PyPI package whose Python modules are generated from the
provider's own schema (`terraform providers schema -json`): one module per resource type, one class per
resource and per nested block, one keyword argument per argument or block, required ones without a default.
The package's code is never imported or run; its source is parsed with `ast`, straight from the wheel.

What it checks: every argument and nested block name exists in that provider version, blocks are used as
blocks, and required arguments are present. What it cannot check: types and allowed values of expressions
(the provider's validators are not in the bindings) -- `terraform validate` does that.

usage: python3 tf_schema_check.py WHEEL DIR
"""

import ast
import re
import sys
import zipfile
from pathlib import Path

import hcl2

PACKAGE = "cdktn_provider_aws"
# Terraform meta-arguments, valid in any resource or data block.
META = {"count", "for_each", "depends_on", "provider", "lifecycle", "provisioner", "connection"}


class Schema:
    def __init__(self, wheel: str):
        self.zip = zipfile.ZipFile(wheel)
        self.modules: dict[str, dict[str, ast.ClassDef]] = {}
        text = self.zip.read(f"{PACKAGE}/provider/__init__.py").decode()
        found = re.search(r"hashicorp/aws/([0-9][0-9.]*)/docs", text)
        self.version = found.group(1) if found else "?"

    def classes(self, module: str) -> dict[str, ast.ClassDef] | None:
        if module not in self.modules:
            try:
                source = self.zip.read(f"{PACKAGE}/{module}/__init__.py").decode()
            except KeyError:
                return None
            tree = ast.parse(source)
            self.modules[module] = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        return self.modules[module]

    @staticmethod
    def arguments(cls: ast.ClassDef) -> dict[str, tuple[bool, set[str]]]:
        """name -> (required, names of classes its annotation mentions), from __init__'s keyword-only args."""
        for node in cls.body:
            if isinstance(node, ast.FunctionDef) and node.name == "__init__":
                args = node.args
                out = {}
                for arg, default in zip(args.kwonlyargs, args.kw_defaults):
                    mentioned = {
                        n.value
                        for n in ast.walk(arg.annotation)
                        if isinstance(n, ast.Constant) and isinstance(n.value, str)
                    }
                    out[arg.arg] = (default is None, mentioned)
                return out
        return {}


def camel(snake: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in snake.split("_"))


def unquote(s: str) -> str:
    return s[1:-1] if len(s) >= 2 and s[0] == s[-1] == '"' else s


def check_body(schema, module, cls, body, where, problems):
    classes = schema.classes(module)
    args = schema.arguments(cls)
    for key, value in body.items():
        if key.startswith("__") or key in META:
            continue
        if key == "dynamic":  # dynamic "NAME" { for_each = ..., content { ... } }: check content as NAME
            for entry in value:
                for name, dyn in entry.items():
                    check_body(schema, module, cls, {unquote(name): dyn.get("content", [])}, where, problems)
            continue
        if key not in args:
            problems.append(f"{where}: {key!r} is not an argument or block of {cls.name}")
            continue
        nested = [classes[n] for n in args[key][1] if n in classes and n != cls.name]
        blocks = value if isinstance(value, list) and value and all(isinstance(v, dict) for v in value) else None
        if blocks and nested:
            for i, block in enumerate(blocks):
                check_body(schema, module, nested[0], block, f"{where}.{key}[{i}]", problems)
    for name, (required, _) in args.items():
        dynamic = any(unquote(n) == name for entry in body.get("dynamic", []) for n in entry)
        if required and name not in body and not dynamic:
            problems.append(f"{where}: required {name!r} is missing")


def main() -> None:
    wheel, directory = sys.argv[1], Path(sys.argv[2])
    schema = Schema(wheel)
    problems: list[str] = []
    checked = 0
    for tf in sorted(directory.glob("*.tf")):
        with tf.open() as f:
            doc = hcl2.load(f)
        for kind in ("resource", "data"):
            for entry in doc.get(kind, []):
                for rtype, named in entry.items():
                    rtype = unquote(rtype)
                    # Modules are named lambda_function for resource aws_lambda_function, and
                    # data_aws_partition for data aws_partition.
                    module = rtype.removeprefix("aws_") if kind == "resource" else "data_" + rtype
                    classes = schema.classes(module)
                    where = f"{tf.name}: {kind} {rtype}"
                    if classes is None:
                        problems.append(f"{where}: no such {kind} type in hashicorp/aws {schema.version}")
                        continue
                    cls = classes.get(camel(module))
                    for name, body in named.items():
                        check_body(schema, module, cls, body, f"{where}.{unquote(name)}", problems)
                        checked += 1
    for p in problems:
        print(f"schema: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"{checked} resource and data blocks match the hashicorp/aws {schema.version} schema")


if __name__ == "__main__":
    main()
