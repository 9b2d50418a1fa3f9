# The two commands of the README, and their helpers. Each installs what it needs (tests/prereqs.sh).

.PHONY: demo test lint unit prereqs bench bench-quick observability

# pgmux in front of a throwaway PostgreSQL, under the Lambda Managed Instances workload, side by side
# with the same workload straight against PostgreSQL.
demo: prereqs
	cargo build --release -p pgmux -p pgmux-bench-lab
	target/release/pgmux-demo

# Everything CI runs: formatting, lints, unit and integration tests, the observability checks against the real
# tools, the chaos suite's short form, the driver compatibility matrix, the benchmark driver in its quick
# form (every workload once, in seconds, against pgmux, PgBouncer and PostgreSQL; figures not judged), and
# PgBouncer's own test suite through pgmux.
test: prereqs lint unit observability chaos-quick drivers bench-quick conformance

prereqs:
	tests/prereqs.sh

# PgBouncer 1.25.2's own test suite (pytest) with pgmux in PgBouncer's place (tests/conformance/run.sh,
# docs/compatibility.md): the test files issue 30 names, in a copy of the suite, in a pinned venv, as the
# postgres user (run.sh needs root) in a network namespace of its own, where the suite's USE_SUDO tests drop
# packets with iptables on the namespace's loopback only. Fails if a test that tests/conformance/expectations.txt expects to pass does not, or
# a test is not listed there. A few minutes; `tests/conformance/run.sh --all` runs every file of the suite.
.PHONY: conformance
conformance: prereqs
	tests/conformance/run.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

# The chaos suite's short form runs in chaos-quick, after pgmux's binary is built.
unit:
	cargo test --workspace --exclude pgmux-observability-tests --exclude pgmux-chaos

# Issue 12's checks against the real tools (tests/observability/README.md): pgbouncer_exporter against
# PgBouncer's console, promtool and prometheus-client on pgmux's metrics text, EMF lines against the
# specification and aws-embedded-metrics. setup.sh installs the pinned tools (quick when done); pgmux is built
# for the tests that run the binary.
observability: prereqs
	tests/observability/setup.sh
	cargo build -p pgmux
	cargo test -p pgmux-observability-tests

# The chaos suite (tests/chaos, docs/resilience.md): a primary and a streaming standby in a network namespace
# of its own, faults, and a ledger of acknowledged writes, for pgmux and PgBouncer 1.18 under the same faults.
# Needs root. The short form (about two and a half minutes: six scenarios, ten clients) fails when a goal of issue 13
# that pgmux already meets is lost; it builds Toxiproxy from the Go module proxy into target/tools itself.
.PHONY: chaos chaos-quick
chaos-quick: prereqs
	cargo build -p pgmux
	cargo test -p pgmux-chaos -- --nocapture

# The long form (about two hours): every scenario against pgmux, PgBouncer and PgBouncer tuned, three runs each,
# and a 30-minute soak; rewrites the generated section of docs/resilience.md (JSON in target/chaos/).
# The driver is a release build too: a debug build spends a third of a second of CPU on each SCRAM login.
chaos: prereqs
	cargo build --release -p pgmux -p pgmux-chaos
	target/release/pgmux-chaos --pgmux target/release/pgmux --doc docs/resilience.md

# The full benchmark (about 40 minutes): pgmux vs. PgBouncer vs. PostgreSQL directly, three rounds: W1-W7 on
# loopback, W2/W3 over Unix sockets, W2/W3 again with pgmux's pool grown at once (W2g, W3g, W2gu, W3gu: at
# PgBouncer's connection count), and W1-W3 (W2/W3 also over the poolers' Unix sockets), W5, W8, W9 in the
# network lab the driver builds (a network namespace for the application host, Toxiproxy's delay, TLS and
# SCRAM; needs root). Rewrites the generated section of docs/benchmarks.md (and writes every figure to
# target/benchmarks.json).
bench: prereqs
	cargo build --release -p pgmux -p pgmux-bench-lab
	target/release/pgmux-bench --pgmux target/release/pgmux --out docs/benchmarks.md --json target/benchmarks.json

# The same driver in about a minute and a half, with debug builds, into a scratch file, every workload
# included; fails if a figure is missing (a W4 failure through a pooler is an expected, recorded result).
# Then the overload benchmark (issue 31, max_active_servers) in a short form: 100 clients for 3 s per
# target, about 25 s, into target/overload-quick.md (figures not judged; docs/benchmarks.md has the full run).
bench-quick: prereqs
	cargo build -p pgmux -p pgmux-bench-lab
	target/debug/pgmux-bench --quick --pgmux target/debug/pgmux --out target/bench-quick.md
	CLIENTS=100 SECS=3 UNLOADED_SECS=3 benches/scripts/overload.sh target/debug/pgmux > target/overload-quick.md

# The driver compatibility matrix (tests/drivers/README.md): real drivers at their defaults against pgmux
# (transaction mode, pool_max = 2), one suite at a time; prints every scenario line and the driver x scenario
# matrix, writes it to target/driver-matrix.md, and fails unless every scenario passes (a missing suite or
# runtime is a failure too). MATRIX_ONLY=go,rust runs a subset.
.PHONY: drivers drivers-setup drivers-negative drivers-direct drivers-pgbouncer

DRIVER_SUITES = node python go java rust

# Each suite's pinned dependencies and build (tests/drivers/<suite>/setup.sh: npm, a Python virtualenv, Go
# modules, Maven, cargo). Quick when nothing changed; runs every suite's setup, then fails naming those that
# failed.
drivers-setup: prereqs
	@failed=""; \
	for suite in $(DRIVER_SUITES); do \
	  script=tests/drivers/$$suite/setup.sh; \
	  if [ ! -x $$script ]; then echo "drivers-setup: $$script is missing" >&2; failed="$$failed $$suite"; continue; fi; \
	  echo "drivers-setup: $$script"; \
	  $$script || failed="$$failed $$suite"; \
	done; \
	if [ -n "$$failed" ]; then echo "drivers-setup: failed for:$$failed" >&2; exit 1; fi

drivers: drivers-setup
	cargo test -p pgmux-testkit --test drivers -- --ignored --nocapture

# Negative control: the same run with pgmux's prepared-statement tracking off; the drivers that prepare by
# default should fail S4/S13 (drivers.md section 7.3). Reports without asserting, to
# target/driver-matrix-negative.md.
drivers-negative: drivers-setup
	MATRIX_PGMUX_EXTRA='max_prepared_statements = 0' MATRIX_EXPECT_FAILURES=1 \
	  MATRIX_REPORT=target/driver-matrix-negative.md \
	  cargo test -p pgmux-testkit --test drivers -- --ignored --nocapture

# Baseline: every suite straight against PostgreSQL, no pgmux (PGPORT = DIRECT_PGPORT), to
# target/driver-matrix-direct.md; a scenario that fails here is the suite's problem, not pgmux's.
drivers-direct: drivers-setup
	MATRIX_DIRECT=1 cargo test -p pgmux-testkit --test drivers -- --ignored --nocapture

# Reference: every suite against PgBouncer (Debian's /usr/sbin/pgbouncer, or PGMUX_PGBOUNCER) in transaction
# mode in place of pgmux, with the same pool size; reports without asserting, to
# target/driver-matrix-pgbouncer.md. MATRIX_PGBOUNCER_EXTRA adds ini lines to its [pgbouncer] section.
drivers-pgbouncer: drivers-setup
	MATRIX_PGBOUNCER=1 cargo test -p pgmux-testkit --test drivers -- --ignored --nocapture

# Packaging and deployment: deploy/lambda/README.md, deploy/sidecar/README.md. Each installs what it needs
# (pinned, under target/deploy-tools; Debian packages with apt-get as root).
.PHONY: layer lambda-sample deploy-check

# The Lambda extension layers dist/pgmux-layer-x86_64.zip and dist/pgmux-layer-arm64.zip: static musl
# builds of pgmux, cross-compiled with zig, checked (static, architecture, runs), zipped deterministically.
layer:
	deploy/scripts/build-layer.sh

# dist/pgmux-sample-function.zip: the sample function with node-postgres, for Terraform or the aws CLI.
lambda-sample:
	deploy/scripts/package-function.sh

# Validates deploy/: cfn-lint on the SAM template, terraform validate, the sidecar config and systemd unit,
# and the sample function against a throwaway PostgreSQL, directly and through pgmux. Not in `make test`.
deploy-check:
	deploy/scripts/deploy-check.sh
