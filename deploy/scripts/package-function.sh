#!/usr/bin/env bash
# `make lambda-sample`: dist/pgmux-sample-function.zip, the sample function with its production
# dependencies (node-postgres, as pinned by package-lock.json), for Terraform or `aws lambda
# create-function`. (SAM builds the same from deploy/lambda/sample-function itself with `sam build`.)
set -euo pipefail
source "$(dirname "$0")/tools.sh"
cd "$REPO"
command -v npm >/dev/null 2>&1 || apt_install nodejs npm

work="$TOOLS/sample-function"
rm -rf "$work"
mkdir -p "$work" dist
cp deploy/lambda/sample-function/{index.mjs,package.json,package-lock.json} "$work/"
(cd "$work" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error)
python3 "$SCRIPTS/detzip.py" dist/pgmux-sample-function.zip "=$work"
say "dist/pgmux-sample-function.zip: $(zipinfo -1 dist/pgmux-sample-function.zip | wc -l) files, $(stat -c %s dist/pgmux-sample-function.zip) bytes"
