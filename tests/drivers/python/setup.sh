#!/usr/bin/env bash
# Installs the Python suite's pinned drivers (requirements.txt) into .venv/. Idempotent: does nothing when
# .venv was installed from this very requirements file. Fails loudly when pip cannot install.
set -euo pipefail
cd "$(dirname "$0")"

command -v python3 >/dev/null || { echo "python/setup.sh: python3 not found" >&2; exit 1; }
stamp=.venv/.matrix-requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
python3 -m venv .venv
if ! .venv/bin/pip install --quiet --disable-pip-version-check --only-binary=:all: \
    --retries 2 --timeout 30 -r requirements.txt; then
  echo "python/setup.sh: pip install failed (is PyPI reachable?)" >&2
  exit 1
fi
echo "$want" > "$stamp"
