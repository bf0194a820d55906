#!/usr/bin/env bash
# Prints the path of a `promtool` (Prometheus's rule and exposition checker), installing Debian's
# `prometheus` package when none is on the PATH. The package would start a Prometheus server where
# services may start; a policy-rc.d keeps it from starting while it installs. All chatter goes to
# stderr; stdout carries only the path. Exits non-zero, saying why, when no promtool can be had.
set -euo pipefail

say() { echo "ensure-promtool: $*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if found=$(command -v promtool); then
  echo "$found"
  exit 0
fi

# Tests run in parallel and may all find promtool missing: one installs, the others wait for it.
exec 9>"${TMPDIR:-/tmp}/vigil-ensure-promtool.lock"
flock 9
if found=$(command -v promtool); then
  echo "$found"
  exit 0
fi

say "promtool not found; installing Debian's prometheus package"
policy=/usr/sbin/policy-rc.d
placed_policy=no
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
  as_root chmod +x "$policy"
  placed_policy=yes
fi
cleanup() { if [ "$placed_policy" = yes ]; then as_root rm -f "$policy"; fi; }
trap cleanup EXIT

as_root apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq -o DPkg::Lock::Timeout=300 \
  --no-install-recommends prometheus >&2

if found=$(command -v promtool); then
  echo "$found"
else
  say "the prometheus package installed no promtool on the PATH"
  exit 1
fi
