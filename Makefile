# The two commands of the README. Each sets up what it needs: a PostgreSQL server (the one at
# DATABASE_URL, or a private one started by scripts/ensure-postgres.sh) and the Rust build.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
export CARGO_TERM_COLOR ?= never

# Tests use Redis when it answers here; the service uses it only when REDIS_URL is set.
TEST_REDIS_URL ?= redis://127.0.0.1:6379

.PHONY: run test lint bench build schemathesis

build:
	cargo build --workspace --all-targets

## Start the service: HTTP on 5080, WebSocket on 5006 (migrations run on start).
run:
	DATABASE_URL="$$(scripts/ensure-postgres.sh vigil)" cargo run --bin vigil -- serve

## Run every test against real PostgreSQL (one fresh database per test) and Redis, then fuzz the
## API against its OpenAPI document (`make schemathesis`, under a minute).
test:
	export DATABASE_URL="$$(scripts/ensure-postgres.sh postgres)"; \
	if redis_reachable=$$(timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/6379' 2>/dev/null && echo yes); then \
	  export REDIS_URL="$${REDIS_URL:-$(TEST_REDIS_URL)}"; \
	else echo "Redis not reachable: tests use the in-process cache"; unset REDIS_URL; fi; \
	if cargo nextest --version >/dev/null 2>&1; then \
	  cargo nextest run --workspace --no-fail-fast; \
	else \
	  cargo test --workspace --no-fail-fast; \
	fi; \
	scripts/schemathesis.sh

lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings

## Benchmarks (release build): criterion benches and the HTTP load scripts in benches/.
bench:
	DATABASE_URL="$$(scripts/ensure-postgres.sh postgres)" cargo bench --workspace

## Fuzz the HTTP API against its OpenAPI document: Schemathesis, every check, 20 examples per
## operation, against a service started for it. See scripts/schemathesis.sh.
schemathesis:
	scripts/schemathesis.sh
