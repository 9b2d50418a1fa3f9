#!/usr/bin/env bash
# Fetches the Go modules pinned in go.mod/go.sum and builds the pgx suite, tests/drivers/go/matrix.
# Idempotent and quiet; exits non-zero with a message if a module cannot be fetched or the build fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

if ! out=$(go mod download 2>&1); then
    echo "tests/drivers/go/setup.sh: cannot fetch the pinned Go modules (is the Go module proxy reachable?)" >&2
    echo "$out" >&2
    exit 1
fi
go build -trimpath -o matrix .
