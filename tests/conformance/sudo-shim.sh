#!/bin/sh
# `sudo` for PgBouncer's suite, installed by run.sh as <copy>/bin/sudo, first on pytest's PATH.
#
# The suite's utils.py sudo() runs iptables and tc as they are when it runs as root, and prefixed with `sudo`
# otherwise. pytest runs as postgres (PostgreSQL refuses root) in run.sh's network namespace, with CAP_NET_ADMIN
# and CAP_NET_RAW as ambient capabilities, which the programs it starts inherit: what sudo would give is already
# there, so this runs the command as it is (and needs no sudo installed, nor a password).
#
# One exception, set by run.sh where the kernel has no prio / netem qdiscs (PGMUX_CONFORMANCE_NO_NETEM):
# conftest.py's session-wide `tc qdisc add|del dev lo ...` would fail every test's setup, so they do nothing
# and say so; the only test that uses that qdisc (through `tc filter add ... flowid 1:2`) then fails.
if [ -n "${PGMUX_CONFORMANCE_NO_NETEM:-}" ] && [ "$1" = tc ] && [ "$2" = qdisc ] && [ "$4" = dev ] &&
  [ "$5" = lo ]; then
  echo "sudo shim: the kernel has no sch_prio / sch_netem; not run: $*" >&2
  exit 0
fi
exec "$@"
