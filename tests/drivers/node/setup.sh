#!/usr/bin/env bash
# Installs the Node suite's pinned dependencies (package-lock.json) into node_modules/. Idempotent: does
# nothing when node_modules was installed from this very lock file. Fails loudly when npm cannot install.
set -euo pipefail
cd "$(dirname "$0")"

command -v npm >/dev/null || { echo "node/setup.sh: npm not found (Node 20 or newer is needed)" >&2; exit 1; }
stamp=node_modules/.matrix-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
if ! npm ci --no-audit --no-fund --loglevel=error --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=10000 >/dev/null; then
  echo "node/setup.sh: npm ci failed (is the npm registry reachable?)" >&2
  exit 1
fi
echo "$want" > "$stamp"
