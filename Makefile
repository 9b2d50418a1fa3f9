# The two commands of the README, and their helpers. Each installs what it needs (tests/prereqs.sh).

.PHONY: demo test lint unit prereqs

# pgmux in front of a throwaway PostgreSQL, under the Lambda Managed Instances workload, side by side
# with the same workload straight against PostgreSQL.
demo: prereqs
	cargo build --release -p pgmux -p pgmux-benches
	target/release/pgmux-demo

# Everything CI runs: formatting, lints, unit and integration tests.
test: prereqs lint unit

prereqs:
	tests/prereqs.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

unit:
	cargo test --workspace
