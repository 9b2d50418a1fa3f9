#!/usr/bin/env bash
# `make deploy-check`: validates everything under deploy/ with the tools its users run, installing them
# at pinned versions under target/deploy-tools (tools.sh):
#   1. cfn-lint on the SAM template, then SAM's own transform (aws-sam-translator) and cfn-lint again on the
#      CloudFormation it expands to;
#   2. terraform fmt -check and terraform validate on deploy/lambda/terraform (terraform-check.sh);
#   3. the sidecar files: the example config parses (as shipped and with every commented key switched
#      on), and systemd-analyze verify accepts the unit;
#   4. the sample function, run locally against a throwaway PostgreSQL, directly and through pgmux.
# Not part of `make test` (CI time budget).
#
#   PGMUX_BIN  the pgmux binary to check with (default: the x86_64 layer binary if `make layer` built one,
#              else a debug build made here)
set -euo pipefail
source "$(dirname "$0")/tools.sh"
cd "$REPO"
ensure_check_tools
work="$TOOLS/deploy-check"
rm -rf "$work"
mkdir -p "$work"

section() { echo >&2; say "== $* =="; }

section "SAM template: cfn-lint $CFN_LINT_VERSION"
"$CFN_LINT" deploy/lambda/sam/template.yaml
say "cfn-lint deploy/lambda/sam/template.yaml: no findings"
"$CHECK_PYTHON" "$SCRIPTS/sam_translate.py" deploy/lambda/sam/template.yaml "$work/sam-expanded.json"
"$CFN_LINT" "$work/sam-expanded.json"
say "aws-sam-translator $SAM_TRANSLATOR_VERSION expands it; cfn-lint on the expansion: no findings"

section "Terraform"
"$SCRIPTS/terraform-check.sh"

section "Sidecar: config and systemd unit"
PGMUX_BIN="${PGMUX_BIN:-}"
if [ -z "$PGMUX_BIN" ]; then
  PGMUX_BIN=target/x86_64-unknown-linux-musl/release/pgmux
  if [ ! -x "$PGMUX_BIN" ]; then
    cargo build -q -p pgmux
    PGMUX_BIN=target/debug/pgmux
  fi
fi
export PGMUX_BIN
PGMUX_BIN="$(realpath "$PGMUX_BIN")"
say "pgmux: $PGMUX_BIN ($("$PGMUX_BIN" --version))"
PGMUX_DATABASE_URL=postgres://app:secret@db.example.com:5432/app \
  "$PGMUX_BIN" --config deploy/config/pgmux.toml --print-config >/dev/null
sed 's/^# \([a-z_]* = \)/\1/' deploy/config/pgmux.toml >"$work/pgmux-all-keys.toml"
"$PGMUX_BIN" --config "$work/pgmux-all-keys.toml" --print-config >/dev/null
say "deploy/config/pgmux.toml parses, as shipped and with every commented-out key set"

need_cmd systemd-analyze systemd
# verify wants ExecStart's binary to exist: check a copy that points at the one just used.
mkdir -p "$work/unit"
sed -e "s|/usr/local/bin/pgmux|$PGMUX_BIN|" -e "s|/etc/pgmux/pgmux.toml|$REPO/deploy/config/pgmux.toml|" \
  deploy/systemd/pgmux.service >"$work/unit/pgmux.service"
systemd-analyze verify "$work/unit/pgmux.service"
say "systemd-analyze verify deploy/systemd/pgmux.service: ok" \
  "($(systemd-analyze security --offline=yes "$work/unit/pgmux.service" 2>/dev/null | sed -n 's/.*Overall exposure level for [^:]*: //p'))"

section "Sample function"
"$SCRIPTS/sample-function-check.sh"

echo >&2
say "deploy-check: all checks passed"
