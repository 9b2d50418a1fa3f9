#!/usr/bin/env bash
# `make layer`: the Lambda extension layers dist/pgmux-layer-x86_64.zip and dist/pgmux-layer-arm64.zip, each
# holding exactly extensions/pgmux (mode 0755): a static musl build of the pgmux package for that
# architecture. C code in the build (jemalloc, ring) is compiled and everything is linked by zig, from PyPI,
# driven by cargo-zigbuild (deploy/scripts/tools.sh installs both under target/deploy-tools).
#
# Checks every binary before zipping it: `file` must say static and the right architecture, and each must
# run `--version` and `--help` (the arm64 one under qemu-user-static). The zips are deterministic: one
# entry, fixed timestamp, fixed permissions, so the same binary always gives the same zip.
set -euo pipefail
source "$(dirname "$0")/tools.sh"
cd "$REPO"
ensure_build_tools

# Paths in panic messages and debug data point into this checkout and cargo's registry: map them to fixed
# names so that the binary does not depend on where it was built.
CARGO_HOME_DIR="${CARGO_HOME:-$HOME/.cargo}"
RUSTFLAGS="${RUSTFLAGS:-} --remap-path-prefix=$REPO=/pgmux --remap-path-prefix=$CARGO_HOME_DIR=/cargo"
export RUSTFLAGS

mkdir -p dist
declare -A TRIPLE=([x86_64]=x86_64-unknown-linux-musl [arm64]=aarch64-unknown-linux-musl)
declare -A FILE_ARCH=([x86_64]="x86-64" [arm64]="ARM aarch64")

for arch in x86_64 arm64; do
  triple="${TRIPLE[$arch]}"
  say "building pgmux for $triple"
  cargo zigbuild --locked --release -p pgmux --target "$triple"
  bin="target/$triple/release/pgmux"

  desc="$(file -b "$bin")"
  case "$desc" in
    *"${FILE_ARCH[$arch]}"*) ;;
    *) die "$bin is not ${FILE_ARCH[$arch]}: $desc" ;;
  esac
  case "$desc" in
    *"statically linked"* | *"static-pie linked"*) ;;
    *) die "$bin is not statically linked: $desc" ;;
  esac

  run=("$bin")
  [ "$arch" = arm64 ] && run=(qemu-aarch64-static "$bin")
  version="$("${run[@]}" --version)" || die "$bin --version failed"
  "${run[@]}" --help >/dev/null || die "$bin --help failed"

  zip="dist/pgmux-layer-$arch.zip"
  python3 "$SCRIPTS/detzip.py" "$zip" "extensions/pgmux=$bin"
  listing="$(zipinfo "$zip")"
  grep -q -- '^-rwxr-xr-x .* extensions/pgmux$' <<<"$listing" || die "$zip: extensions/pgmux is not mode 0755"
  [ "$(zipinfo -1 "$zip")" = "extensions/pgmux" ] || die "$zip holds more than extensions/pgmux"

  say "$arch: $version, $(stat -c %s "$bin") bytes; $zip $(stat -c %s "$zip") bytes, sha256 $(sha256sum "$zip" | cut -c1-16)…"
  say "$arch: $desc"
done
