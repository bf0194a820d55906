#!/usr/bin/env bash
# Fuzzes the HTTP API against its own OpenAPI document with Schemathesis: starts the service
# (debug build) on a fresh database with rate limits raised out of the way, runs every check with
# a bounded number of examples per operation, stops the service. Exits non-zero on any failure
# (a server error, a response the document does not describe, data the schemas allow refused or
# data they refuse accepted).
#
# Env: SCHEMATHESIS_MAX_EXAMPLES (default 20), SCHEMATHESIS_PORT (default: a free one), SCHEMATHESIS_SEED
#      (default 1; the identity's signature is good for 5 minutes, which bounds a run),
#      SCHEMATHESIS_ARGS (extra arguments, e.g. `--include-path-regex source_`),
#      SCHEMATHESIS_PHASES (default examples,fuzzing,stateful: the coverage phase draws its cases
#      within a time budget, so a slow moment can make Hypothesis report "inconsistent results"
#      for a case that passed, an error of the tool that failed `make test` once; run it with
#      SCHEMATHESIS_PHASES=examples,coverage,fuzzing,stateful).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/schemathesis-venv
version=4.32.5
# Free ports and a database of this run's own: several runs may share the machine.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=${SCHEMATHESIS_PORT:-$(free_port)}
examples=${SCHEMATHESIS_MAX_EXAMPLES:-20}
say() { echo "schemathesis: $*" >&2; }

# The stamp is written last, so an interrupted install is made again rather than used.
if [ ! -f "$venv/installed-$version" ]; then
  say "installing Schemathesis $version into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version"
  touch "$venv/installed-$version"
fi

database_url="$(scripts/ensure-postgres.sh postgres)"
fuzz_db="vigil_schemathesis_$$"
fuzz_url="${database_url%/*}/$fuzz_db"
drop_database() { psql -q "$database_url" -c "DROP DATABASE IF EXISTS $fuzz_db WITH (FORCE)" >/dev/null; }

cargo build --bin vigil
log=target/schemathesis-service.log
# Its own files, and the in-process cache: nothing shared with a service running beside it.
data_dir=$(mktemp -d)
# Strict mode, so that a forged or missing identity is refused as it would be in production
# (trusted mode honours any X-User-ID, and Schemathesis's auth checks would only see that).
secret=schemathesis-gateway-secret
user=schemathesis
signature=$(python3 -c 'import hmac, hashlib, sys, time
t = int(time.time())
mac = hmac.new(sys.argv[1].encode(), f"{t}.{sys.argv[2]}".encode(), hashlib.sha256).hexdigest()
print(f"t={t},v1={mac}")' "$secret" "$user")
AUTH_MODE=strict GATEWAY_SIGNING_SECRET="$secret" DATABASE_URL="$fuzz_url" HTTP_PORT="$port" WS_PORT="$(free_port)" BIND_ADDRESS=127.0.0.1 \
  BCRYPT_COST=4 RATE_LIMIT_PER_MINUTE=1000000 CHAT_RATE_LIMIT_PER_MINUTE=1000000 \
  ANONYMOUS_RATE_LIMIT_PER_MINUTE=1000000 INGEST_RATE_LIMIT_PER_MINUTE=1000000 \
  DATA_DIR="$data_dir" env -u REDIS_URL target/debug/vigil serve >"$log" 2>&1 &
service=$!
trap 'kill "$service" 2>/dev/null; wait "$service" 2>/dev/null || true; rm -rf "$data_dir"; drop_database' EXIT

for _ in $(seq 120); do
  curl -fsS "http://127.0.0.1:$port/health/liveness" >/dev/null 2>&1 && break
  kill -0 "$service" 2>/dev/null || { cat "$log" >&2; say "the service did not start"; exit 1; }
  sleep 0.5
done

say "fuzzing http://127.0.0.1:$port ($examples examples per operation; service log in $log)"
# Run from target/, where Hypothesis and Schemathesis keep their working directories.
cd target
# shellcheck disable=SC2086 # SCHEMATHESIS_ARGS is a list of arguments
"../$venv/bin/schemathesis" --config-file ../scripts/schemathesis.toml run "http://127.0.0.1:$port/api/openapi.json" \
  --max-examples "$examples" --header "X-User-ID: $user" --header "X-User-Signature: $signature" \
  --workers 2 --seed "${SCHEMATHESIS_SEED:-1}" --generation-database none --no-color \
  --phases "${SCHEMATHESIS_PHASES:-examples,fuzzing,stateful}" \
  ${SCHEMATHESIS_ARGS:-}
