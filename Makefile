# The two commands of the README, and their helpers. Each installs what it needs (tests/prereqs.sh).

.PHONY: demo test lint unit prereqs bench bench-quick

# pgmux in front of a throwaway PostgreSQL, under the Lambda Managed Instances workload, side by side
# with the same workload straight against PostgreSQL.
demo: prereqs
	cargo build --release -p pgmux -p pgmux-benches
	target/release/pgmux-demo

# Everything CI runs: formatting, lints, unit and integration tests, and the benchmark driver in its quick
# form (every workload once, in seconds, against pgmux, PgBouncer and PostgreSQL; figures not judged).
test: prereqs lint unit bench-quick

prereqs:
	tests/prereqs.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

unit:
	cargo test --workspace

# The full benchmark (several minutes): pgmux vs. PgBouncer vs. PostgreSQL directly, W1-W7, three rounds;
# rewrites the generated section of docs/benchmarks.md (and writes every figure to target/benchmarks.json).
bench: prereqs
	cargo build --release -p pgmux -p pgmux-benches
	target/release/pgmux-bench --pgmux target/release/pgmux --out docs/benchmarks.md --json target/benchmarks.json

# The same driver in about half a minute, with debug builds, into a scratch file; fails if a figure is
# missing (a W4 failure through a pooler is an expected, recorded result).
bench-quick: prereqs
	cargo build -p pgmux -p pgmux-benches
	target/debug/pgmux-bench --quick --pgmux target/debug/pgmux --out target/bench-quick.md
