#!/usr/bin/env bash
# Runs the sample function (deploy/lambda/sample-function) locally, as Lambda would call it, three times:
#   1. straight against a throwaway PostgreSQL;
#   2. through pgmux as a sidecar with trusted clients;
#   3. through the layer itself, as Lambda runs it: the binary unzipped from dist/pgmux-layer-<arch>.zip
#      (or PGMUX_BIN if there is no zip) started with AWS_LAMBDA_RUNTIME_API pointing at a stand-in for the
#      Extensions API (fake_extensions_api.py), 16 invocations at once as on Lambda Managed Instances, no
#      password anywhere; then SHUTDOWN, after which pgmux must exit 0 before the 2 s deadline.
# Part of `make deploy-check`.
#
#   PGMUX_BIN   the pgmux binary for 2 (default: the x86_64 layer binary if `make layer` built one, else a
#               debug build made here)
set -euo pipefail
source "$(dirname "$0")/tools.sh"
cd "$REPO"
if [ -z "${PGMUX_PG_BIN:-}" ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  apt_install postgresql-15
  # Debian starts a cluster of its own on install; this check starts its own and needs none.
  pg_ctlcluster --force 15 main stop >/dev/null 2>&1 || true
fi
command -v npm >/dev/null 2>&1 || apt_install nodejs npm
need_cmd unzip unzip

pg_bin="${PGMUX_PG_BIN:-$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -1)")}"
pgmux="${PGMUX_BIN:-}"
if [ -z "$pgmux" ]; then
  pgmux=target/x86_64-unknown-linux-musl/release/pgmux
  if [ ! -x "$pgmux" ]; then
    cargo build -q -p pgmux
    pgmux=target/debug/pgmux
  fi
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

work="$(mktemp -d "${TMPDIR:-/tmp}/pgmux-sample.XXXXXX")"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# A throwaway cluster. PostgreSQL refuses to run as root: as root, run it as the postgres user.
as_pg=()
if [ "$(id -u)" -eq 0 ]; then
  as_pg=(runuser -u postgres --)
  chown postgres "$work"
fi
pg_port="$(free_port)"
"${as_pg[@]}" "$pg_bin/initdb" -D "$work/data" -U postgres -A trust >/dev/null
"${as_pg[@]}" "$pg_bin/postgres" -D "$work/data" -p "$pg_port" -k "$work" -c listen_addresses=127.0.0.1 \
  >"$work/postgres.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" && break
  sleep 0.1
done

# The function with its pinned dependencies, outside the source tree.
mkdir -p "$work/fn"
cp deploy/lambda/sample-function/{index.mjs,package.json,package-lock.json} "$work/fn/"
(cd "$work/fn" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)

invoke() { # invoke PORT [N]: runs the handler N times at once (default 1) and checks the timestamps
  (cd "$work/fn" && PGPORT="$1" PGUSER=postgres PGDATABASE=postgres SLEEP_MS=300 N="${2:-1}" node -e '
    import("./index.mjs").then(async (m) => {
      const results = await Promise.all(Array.from({ length: Number(process.env.N) }, () => m.handler()));
      for (const r of results) {
        const gap = Date.parse(r.second) - Date.parse(r.first);
        if (!(gap >= 250)) throw new Error(`timestamps ${r.first} -> ${r.second} are not ~300 ms apart`);
      }
      console.log(results.length === 1 ? JSON.stringify(results[0]) : `${results.length} invocations ok`);
    }).catch((e) => { console.error(e); process.exit(1); });')
}

say "sample function straight against PostgreSQL (port $pg_port): $(invoke "$pg_port")"

# pgmux as the Lambda extension would run it: trusted loopback clients, no password anywhere.
mux_port="$(free_port)"
PGMUX_DATABASE_URL="postgres://postgres@127.0.0.1:$pg_port/postgres?sslmode=disable" \
  PGMUX_LISTEN="127.0.0.1:$mux_port" PGMUX_CLIENT_AUTH=trust PGMUX_POOL_MAX=2 PGMUX_LOG_LEVEL=warn \
  "$pgmux" >"$work/pgmux.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$mux_port" && break
  sleep 0.1
done
say "sample function through pgmux ($pgmux, port $mux_port): $(invoke "$mux_port")" || {
  cat "$work/pgmux.log" >&2
  exit 1
}

# 3. The layer as Lambda runs it.
case "$(uname -m)" in
  x86_64) layer_zip=dist/pgmux-layer-x86_64.zip ;;
  aarch64) layer_zip=dist/pgmux-layer-arm64.zip ;;
  *) layer_zip=none ;;
esac
if [ -f "$layer_zip" ]; then
  mkdir -p "$work/opt"
  (cd "$work/opt" && unzip -q "$REPO/$layer_zip")
  extension="$work/opt/extensions/pgmux"
  what="$layer_zip"
else
  extension="$pgmux"
  what="$pgmux (no $layer_zip: run make layer to check the layer itself)"
fi
python3 "$SCRIPTS/fake_extensions_api.py" >"$work/api.port" &
pids+=($!)
for _ in $(seq 50); do [ -s "$work/api.port" ] && break; sleep 0.1; done
api="127.0.0.1:$(cat "$work/api.port")"
# Lambda mode listens on 127.0.0.1:5432; use another port only if this machine's 5432 is taken.
lambda_port=5432
listen=()
if ! python3 -c 'import socket; socket.socket().bind(("127.0.0.1", 5432))' 2>/dev/null; then
  lambda_port="$(free_port)"
  listen=(PGMUX_LISTEN="127.0.0.1:$lambda_port")
fi
env -u PGMUX_CLIENT_AUTH AWS_LAMBDA_RUNTIME_API="$api" AWS_LAMBDA_INITIALIZATION_TYPE=lambda-managed-instances \
  PGMUX_DATABASE_URL="postgres://postgres@127.0.0.1:$pg_port/postgres" PGMUX_SSLMODE=disable PGMUX_POOL_MAX=2 \
  "${listen[@]}" "$extension" >"$work/lambda.log" 2>&1 &
ext_pid=$!
pids+=("$ext_pid")
for _ in $(seq 100); do
  "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$lambda_port" && break
  sleep 0.1
done
result="$(invoke "$lambda_port" 16)" || {
  cat "$work/lambda.log" >&2
  exit 1
}
curl_state() { python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' "http://$api/test/state"; }
python3 -c 'import sys, urllib.request; urllib.request.urlopen(urllib.request.Request(sys.argv[1], b"", method="POST"))' \
  "http://$api/test/shutdown"
status=0
timeout 3 tail --pid="$ext_pid" -f /dev/null || die "pgmux did not exit within 3 s of SHUTDOWN (deadline 2 s)"
wait "$ext_pid" || status=$?
state="$(curl_state)"
[ "$status" -eq 0 ] || { cat "$work/lambda.log" >&2; die "pgmux exited $status after SHUTDOWN"; }
python3 - "$state" <<'PY' || { cat "$work/lambda.log" >&2; die "unexpected Extensions API traffic: $state"; }
import json, sys
s = json.loads(sys.argv[1])
assert [r["events"] for r in s["registered"]] == [["SHUTDOWN"]], s
assert s["next_calls"] >= 1 and s["shutdown_sent"] and not s["errors"], s
PY
say "the layer as Lambda runs it ($what, 127.0.0.1:$lambda_port): registered for SHUTDOWN only; $result" \
  "through a pool of 2, no password; exited 0 on SHUTDOWN"
