#!/usr/bin/env bash
# Builds the Rust suite (tests/drivers/rust) where the runner looks for it: target/debug/pgmux-driver-rust.
# Cargo makes this quick when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/../../.."
cargo build -p pgmux-driver-rust
