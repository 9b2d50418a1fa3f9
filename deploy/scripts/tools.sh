# Sourced by the other scripts here (not run): installs, on demand and at pinned versions, the tools that
# `make layer` and `make deploy-check` need, into target/deploy-tools/ (never system-wide, never committed).
# Debian packages (qemu-user-static, file, unzip, python3-venv, systemd, nodejs) are the exception: apt-get,
# as root only, like tests/prereqs.sh; otherwise the script says what to install and fails. Nothing is skipped.
#
#   TOOLS      target/deploy-tools
#   venv-build ziglang + cargo-zigbuild (PyPI): the C toolchain for both musl targets
#   venv-check cfn-lint, aws-sam-translator (SAM's transform, offline), python-hcl2 (PyPI)
#   wheels     cdktn-provider-aws (PyPI), read as data: the hashicorp/aws schema its code is generated from
#   terraform  taken from PATH when there is one, else built from the Go module proxy into TOOLS/bin

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TOOLS="$REPO/target/deploy-tools"
SCRIPTS="$REPO/deploy/scripts"

# Pinned versions. Bump them here, in one place.
ZIGLANG_VERSION=0.17.1
CARGO_ZIGBUILD_VERSION=0.24.0
CFN_LINT_VERSION=1.58.0
SAM_TRANSLATOR_VERSION=1.115.0
PYTHON_HCL2_VERSION=8.1.4
CDKTN_PROVIDER_AWS_VERSION=25.8.1 # generated from hashicorp/aws 6.69.1
TERRAFORM_VERSION=v1.8.5

say() { echo "deploy: $*" >&2; }
die() { echo "deploy: $*" >&2; exit 1; }

# apt_install PACKAGE...: installs Debian packages as root, or says what to install and fails.
apt_install() {
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing $* (apt-get)"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
    fi
  else
    die "missing $*; install with: sudo apt-get install $*"
  fi
}

need_cmd() { # need_cmd COMMAND DEBIAN_PACKAGE
  command -v "$1" >/dev/null 2>&1 || apt_install "$2"
}

# make_venv DIR REQUIREMENT...: a virtualenv at DIR holding exactly these pinned requirements.
make_venv() {
  local dir="$1"
  shift
  local stamp="$dir/.pinned"
  if [ -x "$dir/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$*" ]; then
    return 0
  fi
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")"
  if ! python3 -m venv "$dir" >/dev/null 2>&1; then
    rm -rf "$dir"
    apt_install python3-venv # Debian's own python3 ships venv without ensurepip
    python3 -m venv "$dir"
  fi
  say "installing $* into ${dir#"$REPO"/}"
  "$dir/bin/pip" install -q --disable-pip-version-check "$@"
  echo "$*" >"$stamp"
}

# The cross toolchain: zig (as a C compiler and linker for both musl targets) and cargo-zigbuild, plus the
# two Rust targets. Puts venv-build/bin first on PATH so that cargo-zigbuild finds `python3 -m ziglang`.
ensure_build_tools() {
  need_cmd python3 python3
  command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust (rustup) first"
  command -v rustup >/dev/null 2>&1 || die "rustup not found: the musl targets are added with rustup"
  make_venv "$TOOLS/venv-build" "ziglang==$ZIGLANG_VERSION" "cargo-zigbuild==$CARGO_ZIGBUILD_VERSION"
  local installed
  installed="$(rustup target list --installed)"
  for t in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
    grep -qx "$t" <<<"$installed" || rustup target add "$t"
  done
  need_cmd file file
  need_cmd zipinfo unzip
  need_cmd qemu-aarch64-static qemu-user-static
  export PATH="$TOOLS/venv-build/bin:$PATH"
}

ensure_check_tools() {
  need_cmd python3 python3
  make_venv "$TOOLS/venv-check" "cfn-lint==$CFN_LINT_VERSION" "aws-sam-translator==$SAM_TRANSLATOR_VERSION" \
    "python-hcl2==$PYTHON_HCL2_VERSION"
  CHECK_PYTHON="$TOOLS/venv-check/bin/python"
  CFN_LINT="$TOOLS/venv-check/bin/cfn-lint"
}

# The wheel of cdktn-provider-aws, downloaded (not installed) for tf_schema_check.py.
ensure_aws_schema_wheel() {
  ensure_check_tools
  AWS_SCHEMA_WHEEL="$TOOLS/wheels/cdktn_provider_aws-$CDKTN_PROVIDER_AWS_VERSION-py3-none-any.whl"
  if [ ! -f "$AWS_SCHEMA_WHEEL" ]; then
    say "downloading cdktn-provider-aws==$CDKTN_PROVIDER_AWS_VERSION (hashicorp/aws schema, 70 MB, once)"
    "$TOOLS/venv-check/bin/pip" download -q --disable-pip-version-check --no-deps -d "$TOOLS/wheels" \
      "cdktn-provider-aws==$CDKTN_PROVIDER_AWS_VERSION"
  fi
}

# Terraform: the one on PATH if there is one (Debian has none; HashiCorp's releases site and apt repository
# are out of reach here), else built with Go from the Go module proxy (PGMUX_BUILD_TERRAFORM=1 forces
# that). v1.8.5 is the newest release `go install github.com/hashicorp/terraform@VERSION` can build: from
# v1.9 on, terraform's go.mod has replace directives, which `go install` refuses. Needs Go >= 1.21 on PATH
# (this machine kind ships Go 1.26; Debian 12's golang-go, 1.19, is too old); with GOTOOLCHAIN=auto it
# fetches the Go toolchain terraform's go.mod asks for from the Go module proxy if it is older. 5 to 15
# minutes on 2 cores, once.
ensure_terraform() {
  if command -v terraform >/dev/null 2>&1 && [ -z "${PGMUX_BUILD_TERRAFORM:-}" ]; then
    TERRAFORM="$(command -v terraform)"
    return 0
  fi
  TERRAFORM="$TOOLS/bin/terraform"
  if [ -x "$TERRAFORM" ] && [ "$("$TERRAFORM" version 2>/dev/null | sed -n 1p)" = "Terraform $TERRAFORM_VERSION" ]; then
    return 0
  fi
  command -v go >/dev/null 2>&1 || die "terraform is not on PATH, and building it needs Go >= 1.21 (https://go.dev/dl)"
  say "building terraform $TERRAFORM_VERSION from the Go module proxy (a few minutes, once)"
  mkdir -p "$TOOLS/bin" "$TOOLS/go"
  GOBIN="$TOOLS/bin" GOPATH="$TOOLS/go" GOMODCACHE="$TOOLS/go/mod" GOCACHE="$TOOLS/go/cache" GOFLAGS=-modcacherw \
    CGO_ENABLED=0 GOTOOLCHAIN=auto \
    go install -ldflags "-X github.com/hashicorp/terraform/version.dev=no" "github.com/hashicorp/terraform@$TERRAFORM_VERSION"
}
