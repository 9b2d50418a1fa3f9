#!/usr/bin/env bash
# Installs what the demo and the tests need on Debian 12 besides Rust: the PostgreSQL server binaries
# (initdb, postgres) and psql. As root it uses apt-get; otherwise it says what to install and fails.
set -euo pipefail

need=()
if [ -z "${PGMUX_PG_BIN:-}" ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need+=(postgresql-15)
fi
command -v psql >/dev/null 2>&1 || need+=(postgresql-client-15)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "prereqs: installing ${need[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # Debian starts a cluster of its own on install; pgmux's tests start their own and never use it.
  if command -v pg_ctlcluster >/dev/null 2>&1; then
    pg_ctlcluster --force 15 main stop >/dev/null 2>&1 || true
  fi
else
  echo "pgmux: missing ${need[*]}." >&2
  echo "Install them with: sudo apt-get install ${need[*]}" >&2
  echo "(or point PGMUX_PG_BIN at a directory holding initdb and postgres)" >&2
  exit 1
fi
