#!/usr/bin/env bash
# Installs the pinned tools the observability tests run against, under target/ of this checkout:
#   target/tools/pgbouncer_exporter   prometheus-community/pgbouncer_exporter v0.12.1, built from the Go module
#                                     proxy with the pins in tests/observability/exporter/go.{mod,sum}
#   target/tools/promtool             promtool 2.42 from Debian's `prometheus` package (.deb unpacked, not
#                                     installed: the package would also start a Prometheus server)
#   target/obs-venv/                  a Python virtualenv with tests/observability/requirements.txt
# Idempotent: each tool is checked (version, or a stamp of its pins) and only missing or stale ones are
# fetched, so a second run takes well under a second. Anything it cannot install is an error that says what
# to install; nothing is skipped (CI=true or not).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tools="$root/target/tools"
mkdir -p "$tools"

EXPORTER_VERSION=v0.12.1
EXPORTER_MODULE=github.com/prometheus-community/pgbouncer_exporter
PROMTOOL_VERSION=2.42.0

fail() { echo "tests/observability/setup.sh: $*" >&2; exit 1; }

exporter() {
  local bin="$tools/pgbouncer_exporter"
  if [ -x "$bin" ] && command -v go >/dev/null 2>&1 &&
     go version -m "$bin" 2>/dev/null | grep -Eq "^\s+mod\s+$EXPORTER_MODULE\s+$EXPORTER_VERSION\s"; then
    return 0
  fi
  command -v go >/dev/null 2>&1 || fail "go is missing (apt-get install golang-go, or tests/prereqs.sh as root)"
  # The exporter's go.mod says go 1.25.0; Go 1.21 and later fetch that toolchain themselves (GOTOOLCHAIN=auto,
  # through the module proxy), older ones cannot.
  local minor
  minor=$(go env GOVERSION | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
  [ "${minor:-0}" -ge 21 ] ||
    fail "$(go env GOVERSION) is too old: pgbouncer_exporter $EXPORTER_VERSION needs Go 1.25 (Go 1.21+ fetches it itself)"
  # `go install …@version` asks the proxy for the version list, which is refused here; building a package of
  # a module that a throw-away module requires does not.
  local work="$tools/exporter-build"
  rm -rf "$work" && mkdir -p "$work"
  cp "$here/exporter/go.mod" "$here/exporter/go.sum" "$work/"
  echo "setup: building pgbouncer_exporter $EXPORTER_VERSION (about a minute the first time)" >&2
  if ! (cd "$work" && go build -mod=mod -trimpath -o "$bin.new" "$EXPORTER_MODULE"); then
    fail "cannot build $EXPORTER_MODULE $EXPORTER_VERSION (is the Go module proxy reachable?)"
  fi
  mv "$bin.new" "$bin"
  rm -rf "$work"
}

promtool() {
  local bin="$tools/promtool"
  if [ -x "$bin" ] && "$bin" --version 2>&1 | grep -q "version $PROMTOOL_VERSION"; then
    return 0
  fi
  command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 ||
    fail "promtool is missing and this is not Debian: put promtool $PROMTOOL_VERSION at $bin"
  local work="$tools/promtool-deb"
  rm -rf "$work" && mkdir -p "$work"
  # apt-get download needs the package lists; as root refresh them once if the first try fails.
  if ! (cd "$work" && apt-get download -q prometheus >/dev/null 2>&1); then
    if [ "$(id -u)" -eq 0 ]; then
      apt-get update -qq
      (cd "$work" && apt-get download -q prometheus >/dev/null 2>&1) || fail "apt-get download prometheus failed"
    else
      fail "cannot download Debian's prometheus package: run \`sudo apt-get update\` (or, as root, this script)"
    fi
  fi
  dpkg-deb -x "$work"/prometheus_*.deb "$work/x"
  install -m 0755 "$work/x/usr/bin/promtool" "$bin"
  rm -rf "$work"
  "$bin" --version 2>&1 | grep -q "version $PROMTOOL_VERSION" ||
    fail "Debian's prometheus package no longer holds promtool $PROMTOOL_VERSION: $("$bin" --version 2>&1 | head -1)"
}

venv() {
  local venv="$root/target/obs-venv"
  local stamp="$venv/.requirements.sha256"
  local want
  want=$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)
  if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  command -v python3 >/dev/null 2>&1 || fail "python3 is missing (apt-get install python3-venv)"
  python3 -c 'import venv, ensurepip' 2>/dev/null || fail "python3 cannot make virtualenvs (apt-get install python3-venv)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --retries 2 --timeout 30 \
    -r "$here/requirements.txt" || fail "pip install failed (is PyPI reachable?)"
  echo "$want" > "$stamp"
}

pgbouncer() {
  local bin="${PGMUX_PGBOUNCER:-/usr/sbin/pgbouncer}"
  [ -x "$bin" ] || command -v pgbouncer >/dev/null 2>&1 ||
    fail "PgBouncer is missing (tests/prereqs.sh installs it as root; or apt-get install pgbouncer)"
}

exporter
promtool
venv
pgbouncer
