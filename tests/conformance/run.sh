#!/usr/bin/env bash
# PgBouncer's own test suite (PgBouncer 1.25.2's test/ directory, pytest) run against pgmux: issue 30, item 6.
#
#   tests/conformance/run.sh                 the test files `make conformance` runs (CONFORMANCE_FILES below)
#   tests/conformance/run.sh --all           every test file of the suite (for docs/compatibility.md; slow)
#   tests/conformance/run.sh test_copy.py    the files named (pytest -k / node ids work too, after --)
#
# What it does, and why:
#   * copies the suite into a temporary directory (nothing of it is edited) and adds what the suite reads from
#     PgBouncer's source tree beside test/: config.mak (built with TLS, without LDAP: what pgmux has) and
#     include/bouncer.h (MAX_PASSWORD, the longest password the suite tries);
#   * installs our wrapper (pgbouncer-wrapper.py) at <copy>/pgbouncer, where the suite execs PgBouncer; it runs
#     pgmux's release binary with the suite's test.ini (the wrapper says what it changes and why);
#   * makes a Python venv with the suite's requirements, pinned in requirements.txt here;
#   * runs pytest as the `postgres` user (the suite runs initdb and pg_ctl itself, and PostgreSQL refuses to run
#     as root), with junit XML output, inside a network namespace of its own (see "Network namespace" below):
#     the suite's USE_SUDO tests drop, reject and delay packets on `lo` with iptables and tc, which there touch
#     only the namespace's own loopback, never the machine's. The namespace is deleted on exit, failure or not;
#   * compares each test's outcome with expectations.txt (pass / n/a / gap, with why) and exits non-zero if a test
#     expected to pass did not, or a test is missing from expectations.txt (compare.py). The per-test list is
#     printed and written to $OUT_DIR/conformance-results.txt.
# Nothing is skipped silently: a missing tool is a failure (in CI and everywhere else); a test the suite skips
# itself passes only if expectations.txt says why it does not apply.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
OUT_DIR=${CONFORMANCE_OUT:-$TARGET/conformance}
# Bounded: the whole pytest run may not take longer than this (seconds).
TIMEOUT=${CONFORMANCE_TIMEOUT:-1200}
# The files `make conformance` runs: those issue 30 names (what applies to a transaction pooler). The others are
# run by --all and listed in expectations.txt with why they do not apply.
CONFORMANCE_FILES=(test_prepared.py test_copy.py test_cancel.py test_timeouts.py test_limits.py
  test_no_database.py test_no_user.py test_auth.py test_admin.py)

die() { echo "conformance: $*" >&2; exit 1; }

# --- The suite -------------------------------------------------------------------------------------------------
SUITE=${PGBOUNCER_SUITE:-}
if [ -z "$SUITE" ]; then
  for candidate in "$ROOT/../shared/conformance/pgbouncer-1.25.2" /work/shared/conformance/pgbouncer-1.25.2; do
    if [ -d "$candidate/test" ]; then SUITE=$candidate; break; fi
  done
fi
[ -n "$SUITE" ] && [ -f "$SUITE/test/utils.py" ] ||
  die "PgBouncer 1.25.2's test suite not found (set PGBOUNCER_SUITE to the directory holding test/ and pyproject.toml)"

files=()
extra=()
if [ "${1:-}" = "--all" ]; then
  shift
  while IFS= read -r f; do files+=("$(basename "$f")"); done < <(ls "$SUITE"/test/test_*.py)
fi
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; extra=("$@"); break ;;
    *) files+=("$1"); shift ;;
  esac
done
[ ${#files[@]} -gt 0 ] || files=("${CONFORMANCE_FILES[@]}")

# --- Tools -----------------------------------------------------------------------------------------------------
# PostgreSQL's server programs: PGMUX_PG_BIN, or the newest /usr/lib/postgresql/*/bin (Debian), or PATH.
PG_BIN=${PGMUX_PG_BIN:-}
if [ -z "$PG_BIN" ]; then
  PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
fi
if [ -z "$PG_BIN" ] && command -v initdb >/dev/null 2>&1; then PG_BIN=$(dirname "$(command -v initdb)"); fi
missing=()
for p in initdb pg_ctl postgres; do [ -n "$PG_BIN" ] && [ -x "$PG_BIN/$p" ] || missing+=("$p (postgresql-15)"); done
command -v psql >/dev/null 2>&1 || missing+=("psql (postgresql-client-15)")
command -v openssl >/dev/null 2>&1 || missing+=("openssl (the suite makes its test certificates)")
# The venv's interpreter must be one the postgres user can run (not a pyenv under /root): the system's as root.
PYTHON=${CONFORMANCE_PYTHON:-$(if [ "$(id -u)" -eq 0 ] && [ -x /usr/bin/python3 ]; then echo /usr/bin/python3; else command -v python3 || true; fi)}
[ -n "$PYTHON" ] && "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || missing+=("python3-venv")
for f in "${files[@]}"; do
  # test_misc.py's server_check_query tests put socat between PgBouncer and PostgreSQL.
  if [ "$f" = test_misc.py ] && ! command -v socat >/dev/null 2>&1; then missing+=("socat (test_misc.py)"); fi
done
# Root: to make the network namespace, and to hand CAP_NET_ADMIN to the postgres user in it.
[ "$(id -u)" -eq 0 ] || die "run as root: the suite runs in a network namespace this script makes (ip netns)"
id postgres >/dev/null 2>&1 || missing+=("the postgres user (PostgreSQL refuses to run as root)")
command -v setpriv >/dev/null 2>&1 || missing+=("setpriv (util-linux)")
# The namespace (ip), the USE_SUDO tests' packet drops (iptables) and delay (tc).
for p in ip tc; do command -v $p >/dev/null 2>&1 || missing+=("$p (iproute2)"); done
command -v iptables >/dev/null 2>&1 || missing+=("iptables")
[ ${#missing[@]} -eq 0 ] || die "missing: ${missing[*]} (tests/prereqs.sh installs them as root)"

# --- pgmux -----------------------------------------------------------------------------------------------------
if [ -z "${PGMUX_BIN:-}" ]; then
  (cd "$ROOT" && cargo build --release -p pgmux)
  PGMUX_BIN=$TARGET/release/pgmux
fi
[ -x "$PGMUX_BIN" ] || die "no pgmux binary at $PGMUX_BIN"

# --- The venv: the suite's requirements, pinned ---------------------------------------------------------------
VENV=$TARGET/conformance-venv
stamp=$( (cat "$HERE/requirements.txt"; echo "$PYTHON") | sha256sum | cut -c1-16)
if [ "$(cat "$VENV/.stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$HERE/requirements.txt"
  echo "$stamp" >"$VENV/.stamp"
fi

# --- The copy --------------------------------------------------------------------------------------------------
WORK=$(mktemp -d /tmp/pgmux-conformance.XXXXXX)
NS=""
cleanup() {
  if [ -n "$NS" ]; then
    # Whatever the run left in the namespace (a PostgreSQL or pgmux after a timeout): ended by pid, then the
    # namespace itself is deleted (its lo, qdiscs and iptables rules go with it).
    for pid in $(ip netns pids "$NS" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns delete "$NS" 2>/dev/null || echo "conformance: could not delete network namespace $NS" >&2
  fi
  if [ -n "${CONFORMANCE_KEEP:-}" ]; then echo "conformance: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
# So that an interrupted or killed run still runs cleanup (bash runs the EXIT trap on exit, not on a signal).
trap 'exit 130' INT
trap 'exit 143' TERM
cp -r "$SUITE/test" "$WORK/test"
cp "$SUITE/pyproject.toml" "$SUITE/COPYRIGHT" "$WORK/"
chmod -R u+w "$WORK"
# What utils.py reads from PgBouncer's source tree (../config.mak, ../include/bouncer.h), as pgmux is built:
# TLS to clients and servers yes; LDAP no (a gap, docs/compatibility.md).
cat >"$WORK/config.mak" <<'EOF'
# Stand-in for PgBouncer's config.mak (tests/conformance/run.sh): what the pooler under test is built with.
tls_support = yes
ldap_support = no
EOF
mkdir -p "$WORK/include"
cat >"$WORK/include/bouncer.h" <<'EOF'
/* Stand-in for PgBouncer's include/bouncer.h (tests/conformance/run.sh): utils.py reads only MAX_PASSWORD, the
 * password length the suite tries (LONG_PASSWORD is one shorter; the suite wants at least 996). */
#define MAX_PASSWORD 2048
EOF
cp "$HERE/pgbouncer-wrapper.py" "$WORK/pgbouncer"
mkdir -p "$WORK/bin"
cp "$HERE/sudo-shim.sh" "$WORK/bin/sudo"
chmod 755 "$WORK/bin/sudo"
# The binary is copied so that a rebuild during the run changes nothing.
cp "$PGMUX_BIN" "$WORK/pgmux"
chmod 755 "$WORK/pgbouncer" "$WORK/pgmux"

# --- Network namespace -----------------------------------------------------------------------------------------
# The suite's USE_SUDO tests (test_timeouts.py's drop / reject tests, test_prepared.py's pipeline latency test)
# run `iptables --append OUTPUT ... -j DROP` and `tc filter add dev lo ...`, and conftest.py puts a prio qdisc
# with a netem band on `lo` for the whole session. All of pytest runs in a namespace of ours, with its own `lo`:
# those rules never reach the machine's network, and the other tests see the same loopback as before (the Unix
# sockets are files, shared). One namespace for both xdist workers: conftest.py adds the qdisc once under a
# file lock shared by the workers, and each worker's iptables rules name its own PostgreSQL's port.
NS=pgmux-conf-$$
ip netns add "$NS" || { NS=""; die "could not make network namespace pgmux-conf-$$"; }
ip -n "$NS" link set lo up
# iptables must work in a namespace (Debian 12's default is the nf_tables backend; where the kernel lacks
# nf_tables, `update-alternatives --set iptables /usr/sbin/iptables-legacy` is the way).
probe=(--protocol tcp --destination 127.0.0.1 --destination-port 9 --jump DROP)
ip netns exec "$NS" iptables --append OUTPUT "${probe[@]}" && ip netns exec "$NS" iptables --delete OUTPUT "${probe[@]}" ||
  die "iptables does not work in a network namespace here (try the legacy backend: update-alternatives --set iptables /usr/sbin/iptables-legacy)"
# conftest.py's qdisc needs the kernel's prio and netem qdiscs. Where the kernel has neither (this project's
# machine: a VM kernel built without sch_prio and sch_netem, no modules), our sudo shim lets conftest.py's two
# `tc qdisc ... dev lo` commands do nothing instead of failing every test's setup; the one test that delays
# packets then fails at its `tc filter add` (there is no qdisc 1: to attach to), and expectations.txt says why.
NO_NETEM=""
if ip netns exec "$NS" tc qdisc add dev lo root handle 1: prio bands 2 priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 \
  2>/dev/null && ip netns exec "$NS" tc qdisc add dev lo parent 1:2 handle 20: netem delay 1000ms 2>/dev/null; then
  :
else
  NO_NETEM=1
  echo "conformance: this kernel has no sch_prio / sch_netem: test_prepared_statement_pipeline_latency cannot delay packets" >&2
fi
ip netns exec "$NS" tc qdisc del dev lo root 2>/dev/null || true

# --- Run -------------------------------------------------------------------------------------------------------
mkdir -p "$OUT_DIR"
JUNIT=$WORK/junit.xml
chown -R postgres: "$WORK"
# As postgres, with CAP_NET_ADMIN and CAP_NET_RAW (iptables asks for both) as ambient capabilities: every program
# pytest starts keeps them, so the suite's `sudo iptables ...` / `sudo tc ...` work through our sudo shim.
# They are capabilities over the namespace's network only.
as_postgres=(setpriv --reuid=postgres --regid=postgres --init-groups
  --inh-caps +net_admin,+net_raw --ambient-caps +net_admin,+net_raw)
test_paths=()
# Absolute: utils.py chdirs into test/ on import, and xdist's workers would find no test/test_*.py from there.
for f in "${files[@]}"; do test_paths+=("$WORK/test/$f"); done
# Two workers: each starts a PostgreSQL of its own; the machine has two cores. --tb=native: with pytest's own
# traceback style (which parses the test's source), Debian 12's CPython 3.11.2 was seen to raise "AST constructor
# recursion depth mismatch" while reporting a timed-out test, which took a whole xdist worker and its tests down.
WORKERS=${CONFORMANCE_WORKERS:-2}
echo "conformance: ${#files[@]} file(s) of $SUITE against $PGMUX_BIN, $WORKERS workers, in $WORK" >&2
set +e
# USE_SUDO=1: the suite runs its tests that drop and delay packets (see "Network namespace" above).
(cd "$WORK" && ip netns exec "$NS" env -i \
  PATH="$WORK/bin:$VENV/bin:$PG_BIN:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin" HOME="$WORK" \
  LANG=C.UTF-8 PGMUX_BIN="$WORK/pgmux" USE_SUDO=1 ${NO_NETEM:+PGMUX_CONFORMANCE_NO_NETEM=1} \
  ${CI:+CI="$CI"} \
  timeout --kill-after=30 "$TIMEOUT" "${as_postgres[@]}" "$VENV/bin/python" -m pytest -n "$WORKERS" \
  -p no:cacheprovider -o console_output_style=classic -q -rA --tb=native --junitxml="$JUNIT" \
  "${test_paths[@]}" "${extra[@]}" >"$OUT_DIR/pytest.log" 2>&1)
rc=$?
set -e
echo "conformance: pytest exited $rc (log: $OUT_DIR/pytest.log)" >&2
[ $rc -ne 124 ] && [ $rc -ne 137 ] || die "pytest did not finish within ${TIMEOUT}s"
[ -s "$JUNIT" ] || { tail -50 "$OUT_DIR/pytest.log" >&2; die "pytest wrote no results"; }
cp "$JUNIT" "$OUT_DIR/junit.xml"
python3 "$HERE/compare.py" --junit "$JUNIT" --expect "$HERE/expectations.txt" --out "$OUT_DIR/conformance-results.txt" \
  ${extra:+--partial} "${files[@]}"
