#!/usr/bin/env bash
# Prints the URL of a reachable PostgreSQL server, database name $1 (default: vigil).
#
# Uses $DATABASE_URL (default postgres://postgres@127.0.0.1:5432/<name>) when it answers.
# Otherwise starts a private cluster (initdb + pg_ctl) in $VIGIL_PG_DIR on a free port,
# installing Debian's postgresql package first if its binaries are missing, and prints its URL.
# All chatter goes to stderr; stdout carries only the URL.
set -euo pipefail

db_name=${1:-vigil}
wanted=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/$db_name}
say() { echo "ensure-postgres: $*" >&2; }

pg_bin_dir() {
  local dir
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$dir/pg_ctl" ] && [ -x "$dir/initdb" ] && [ -x "$dir/pg_isready" ] && { echo "$dir"; return 0; }
  done
  command -v pg_ctl >/dev/null && command -v initdb >/dev/null && command -v pg_isready >/dev/null &&
    { dirname "$(command -v pg_ctl)"; return 0; }
  return 1
}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! bin=$(pg_bin_dir); then
  say "PostgreSQL binaries not found; installing Debian's postgresql package"
  as_root apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq postgresql >&2
  bin=$(pg_bin_dir)
fi

if "$bin/pg_isready" -q -t 3 -d "$wanted" 2>/dev/null; then
  echo "$wanted"
  exit 0
fi
say "no PostgreSQL answers at the configured DATABASE_URL; using a private cluster"

# initdb and postgres refuse to run as root: run them as the postgres system user then.
if [ "$(id -u)" = 0 ]; then
  data_dir=${VIGIL_PG_DIR:-/var/lib/vigil/postgres}
  id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
  mkdir -p "$data_dir"
  chown postgres: "$data_dir"
  chmod 700 "$data_dir"
  run_pg() { runuser -u postgres -- "$@"; }
else
  data_dir=${VIGIL_PG_DIR:-$(pwd)/.data/postgres}
  mkdir -p "$data_dir"
  chmod 700 "$data_dir"
  run_pg() { "$@"; }
fi

port_file="$data_dir/vigil_port"
if [ ! -f "$data_dir/PG_VERSION" ]; then
  say "initialising a cluster in $data_dir"
  run_pg "$bin/initdb" -D "$data_dir" -U postgres -A trust --no-sync -E UTF8 >&2
fi

if ! run_pg "$bin/pg_ctl" -D "$data_dir" status >/dev/null 2>&1; then
  port=55432
  # Another cluster starting at the same moment may take the port found free: try the next.
  for attempt in 1 2 3 4 5; do
    while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
    echo "$port" | run_pg tee "$port_file" >/dev/null
    say "starting the private cluster on port $port"
    if run_pg "$bin/pg_ctl" -D "$data_dir" -l "$data_dir/server.log" -w -t 60 \
      -o "-p $port -c listen_addresses=127.0.0.1 -k $data_dir -c max_connections=300" start >&2; then
      break
    fi
    [ "$attempt" -lt 5 ] || { say "the private cluster did not start"; exit 1; }
    port=$((port + 1 + RANDOM % 50))
  done
fi

port=$(cat "$port_file")
url="postgres://postgres@127.0.0.1:$port/$db_name"
"$bin/pg_isready" -q -t 10 -h 127.0.0.1 -p "$port" || { say "private cluster did not come up"; exit 1; }
echo "$url"
