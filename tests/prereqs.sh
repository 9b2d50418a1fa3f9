#!/usr/bin/env bash
# Installs what the demo, the tests and the benchmark need on Debian 12 besides Rust: the PostgreSQL server
# binaries (initdb, postgres, pgbench), psql, and PgBouncer (the benchmark's reference pooler, which
# `make test` runs too, in its quick form). As root it uses apt-get; otherwise it says what to install and
# fails. Nothing is ever skipped: in CI (CI=true) a missing tool is a failure like anywhere else.
set -euo pipefail

pg_bin_has() { # pg_bin_has PROGRAM: is PROGRAM in $PGMUX_PG_BIN, or else in some /usr/lib/postgresql/*/bin?
  if [ -n "${PGMUX_PG_BIN:-}" ]; then
    [ -x "$PGMUX_PG_BIN/$1" ]
  else
    ls /usr/lib/postgresql/*/bin/"$1" >/dev/null 2>&1
  fi
}

need=()
if ! pg_bin_has initdb; then
  need+=(postgresql-15)
elif ! pg_bin_has pgbench && ! command -v pgbench >/dev/null 2>&1; then
  # Debian ships pgbench with the server package, in /usr/lib/postgresql/15/bin (not always on PATH).
  need+=(postgresql-15)
fi
command -v psql >/dev/null 2>&1 || need+=(postgresql-client-15)
# Debian puts pgbouncer in /usr/sbin, which is not on a normal user's PATH.
if [ -z "${PGMUX_PGBOUNCER:-}" ] && [ ! -x /usr/sbin/pgbouncer ] && ! command -v pgbouncer >/dev/null 2>&1; then
  need+=(pgbouncer)
fi

# The driver compatibility matrix (make drivers, part of make test) runs suites in Node, Python, Go and Java;
# tests/drivers/<lang>/setup.sh then installs each suite's pinned dependencies with npm, pip, go and mvn.
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
# Debian's python3 has no venv (ensurepip) without python3-venv.
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  need+=(python3-venv)
fi
# PgBouncer's own test suite (make conformance, tests/conformance/run.sh) makes its test certificates with openssl
# and runs as the postgres user through setpriv (util-linux).
command -v openssl >/dev/null 2>&1 || need+=(openssl)
# Its test_misc.py (run by `tests/conformance/run.sh --all`) puts socat between the pooler and PostgreSQL.
command -v socat >/dev/null 2>&1 || need+=(socat)
# Its USE_SUDO tests drop and reject packets with iptables (and delay them with tc, iproute2), inside the network
# namespace run.sh makes. Debian puts both in /usr/sbin, which is not on a normal user's PATH.
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || need+=(iptables)
command -v tc >/dev/null 2>&1 || [ -x /usr/sbin/tc ] || need+=(iproute2)
# Go also builds Toxiproxy for the chaos suite (tests/harness/toxiproxy.rs); the suite's network namespace
# needs `ip` (iproute2), in /usr/sbin, which is not on a normal user's PATH.
command -v go >/dev/null 2>&1 || need+=(golang-go)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || need+=(iproute2)
command -v java >/dev/null 2>&1 || need+=(default-jdk-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
# The benchmark's network lab (make bench, make bench-quick) puts the application host in a network
# namespace of its own with `ip netns`, and starts PgBouncer there as postgres with setpriv (util-linux).
command -v ip >/dev/null 2>&1 || need+=(iproute2)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "prereqs: installing ${need[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # Debian starts a cluster and a pgbouncer of its own on install (where services may start); pgmux's tests
  # and benchmark start their own and never use them, and Debian's pgbouncer would hold port 6432.
  if command -v pg_ctlcluster >/dev/null 2>&1; then
    pg_ctlcluster --force 15 main stop >/dev/null 2>&1 || true
  fi
  if [[ " ${need[*]} " == *" pgbouncer "* ]] && command -v invoke-rc.d >/dev/null 2>&1; then
    invoke-rc.d pgbouncer stop >/dev/null 2>&1 || true
  fi
else
  echo "pgmux: missing ${need[*]}." >&2
  echo "Install them with: sudo apt-get install ${need[*]}" >&2
  echo "(or point PGMUX_PG_BIN at a directory holding initdb, postgres and pgbench," >&2
  echo " and PGMUX_PGBOUNCER at a pgbouncer binary)" >&2
  exit 1
fi
