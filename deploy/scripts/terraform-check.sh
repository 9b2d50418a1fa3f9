#!/usr/bin/env bash
# `terraform fmt -check` and `terraform validate` on deploy/lambda/terraform. Part of `make deploy-check`.
#
# validate needs the hashicorp/aws provider plugin, and the configuration needs aws >= 6.25.0 (the first
# with aws_lambda_capacity_provider). The plugin comes from the Terraform registry when that is reachable,
# else from a local filesystem mirror (PGMUX_TF_PLUGIN_DIRS, default: the directories below). When the only
# aws provider to be had is older than 6.25.0, the configuration is validated without
# managed-instances.tf (the Lambda Managed Instances half) against that provider, and every file is checked
# against the aws 6.69.1 schema with tf_schema_check.py; the script says which checks ran.
set -euo pipefail
source "$(dirname "$0")/tools.sh"
cd "$REPO"
ensure_terraform

src=deploy/lambda/terraform
work="$TOOLS/terraform-check"
rm -rf "$work"
mkdir -p "$work"
# Terraform reads ~/.terraformrc or $TF_CLI_CONFIG_FILE: use a file of this script's own, never the user's.
: >"$work/empty.tfrc"
export TF_CLI_CONFIG_FILE="$work/empty.tfrc" CHECKPOINT_DISABLE=1 TF_IN_AUTOMATION=1
say "terraform: $("$TERRAFORM" version | sed -n 1p) ($TERRAFORM)"
"$TERRAFORM" fmt -check -diff -recursive "$src"
say "terraform fmt -check: ok"

mirrors=()
for dir in ${PGMUX_TF_PLUGIN_DIRS:-/opt/tf-plugins /usr/local/share/terraform/plugins /usr/share/terraform/plugins $HOME/.terraform.d/plugins}; do
  [ -d "$dir/registry.terraform.io/hashicorp/aws" ] && mirrors+=("$dir")
done

# cli_config FILE [direct]: a CLI configuration using the mirrors found, and the registry if asked.
cli_config() {
  {
    echo "provider_installation {"
    for dir in "${mirrors[@]}"; do
      printf '  filesystem_mirror {\n    path = "%s"\n  }\n' "$dir"
    done
    [ "${2:-}" = direct ] && echo "  direct {}"
    echo "}"
  } >"$1"
}

# validate_in DIR CLI_CONFIG: init (no backend) and validate a copy of the configuration.
validate_in() {
  (
    cd "$1"
    export TF_CLI_CONFIG_FILE="$2"
    timeout 300 "$TERRAFORM" init -backend=false -input=false -no-color >init.log 2>&1 || return 2
    "$TERRAFORM" validate -no-color
  )
}

provider_version() { # provider_version DIR: the aws provider version init picked
  sed -n 's/.*Installed hashicorp\/aws v\([0-9.]*\).*/\1/p' "$1/init.log" | sed -n 1p
}

# 1. The whole configuration, with the registry and any mirror.
mkdir -p "$work/full"
cp "$src"/*.tf "$work/full/"
cli_config "$work/full.tfrc" direct
status=0
validate_in "$work/full" "$work/full.tfrc" || status=$?
if [ "$status" -eq 0 ]; then
  say "terraform validate: the whole configuration passes against hashicorp/aws $(provider_version "$work/full")"
  exit 0
elif [ "$status" -ne 2 ]; then
  die "terraform validate failed (above)"
fi
say "terraform init found no hashicorp/aws >= 6.25.0 (registry unreachable, and no such version in a local mirror):"
{ grep -E "Error|Could not|no available|locked|mirror|registry" "$work/full/init.log" || true; } | sed -n "1,5s/^/    /p" >&2

# 2. No provider >= 6.25.0 anywhere: validate what an older local one can check.
[ ${#mirrors[@]} -gt 0 ] || die "no hashicorp/aws provider available at all (no registry, no mirror): terraform validate cannot run"
mkdir -p "$work/classic"
for f in "$src"/*.tf; do
  [ "$(basename "$f")" = managed-instances.tf ] || cp "$f" "$work/classic/"
done
cat >"$work/classic/versions_override.tf" <<'EOF'
terraform {
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0"
    }
  }
}
EOF
cli_config "$work/classic.tfrc"
status=0
validate_in "$work/classic" "$work/classic.tfrc" || status=$?
if [ "$status" -ne 0 ]; then
  cat "$work/classic/init.log" >&2
  die "terraform validate failed without managed-instances.tf (above)"
fi
say "terraform validate: PARTIAL. Everything but managed-instances.tf passes against the local hashicorp/aws" \
  "$(provider_version "$work/classic"); managed-instances.tf (aws_lambda_capacity_provider, capacity_provider_config," \
  "publish_to) needs aws >= 6.25.0, which terraform here cannot load"

# 3. Names and required arguments of every block, the Managed Instances ones included, against 6.69.1.
ensure_aws_schema_wheel
say "schema check: $("$CHECK_PYTHON" "$SCRIPTS/tf_schema_check.py" "$AWS_SCHEMA_WHEEL" "$src")"
