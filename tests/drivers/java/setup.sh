#!/usr/bin/env bash
# Fetches pgjdbc and the pinned Maven plugins into the local repository, then builds the pgjdbc suite
# offline into tests/drivers/java/target/matrix.jar. Idempotent and quiet (Maven's output is shown only when
# a step fails: Debian's Maven prints stray terminal escapes even with -q); exits non-zero with a message
# if Maven Central cannot be reached or the build fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

if ! out=$(mvn -q -B dependency:go-offline 2>&1); then
    echo "tests/drivers/java/setup.sh: cannot fetch the pinned Maven artifacts (is Maven Central reachable?)" >&2
    echo "$out" >&2
    exit 1
fi
if ! out=$(mvn -q -B -o package -DskipTests 2>&1); then
    echo "tests/drivers/java/setup.sh: the offline build failed" >&2
    echo "$out" >&2
    exit 1
fi
