#!/usr/bin/env bash
# The Citus stage of .ci/run: stepkey distributed by scope on a 3-node cluster of its own.
# Installs Citus from ../shared/citus (root), brings up a coordinator and two workers on free ports
# in a folder of its own (test/citus/cluster.sh), runs the test files listed in
# vitest.citus.config.ts against the coordinator (each file's database on all three nodes,
# distributed by `stepkey migrate --citus`), at most two files at once, then the spread file that
# asserts rows on both workers; stops the nodes by PID and removes the folder, pass or fail.
# Fails — never skips — when ../shared/citus or root is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The Citus build: STEPKEY_CITUS_SHARED, or shared/citus beside the project (../shared/citus), or
# the machine's /work/shared/citus (a clone of the project elsewhere, as CI's may be).
shared=${STEPKEY_CITUS_SHARED:-}
if [ -z "$shared" ]; then
  for candidate in ../shared/citus /work/shared/citus; do
    if [ -f "$candidate/install.sh" ]; then shared=$candidate; break; fi
  done
fi
if [ -z "$shared" ] || [ ! -f "$shared/install.sh" ]; then
  echo "citus stage: ${shared:-../shared/citus (or /work/shared/citus)}/install.sh is missing (Citus 13.0.5 for PostgreSQL 15): cannot run" >&2; exit 1
fi
if [ "$(id -u)" != 0 ]; then echo "citus stage: needs root (install.sh, the nodes run as postgres)" >&2; exit 1; fi
bash "$shared/install.sh"

free_base() { # three consecutive free ports from 5700 up
  local base
  for base in $(seq 5700 3 5900); do
    if ! node -e "const n=require('net');let left=3;for(const p of [$base,$base+1,$base+2]){const s=n.connect(p,'127.0.0.1');s.on('connect',()=>process.exit(1));s.on('error',()=>{if(--left===0)process.exit(0)})}"; then continue; fi
    echo "$base"; return 0
  done
  return 1
}
port=$(free_base) || { echo "citus stage: no three free ports from 5700" >&2; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/stepkey-citus-XXXXXX")
cleanup() { test/citus/cluster.sh down "$dir" || true; }
trap cleanup EXIT
trap "exit 143" TERM INT
began=$SECONDS
test/citus/cluster.sh up "$dir" "$port"
echo "citus stage: coordinator 127.0.0.1:$port, workers :$((port + 1)) :$((port + 2)) (up in $((SECONDS - began)) s)"

export STEPKEY_CITUS_URL="postgres://postgres@127.0.0.1:$port/postgres"
export STEPKEY_CITUS_WORKERS="127.0.0.1:$((port + 1)),127.0.0.1:$((port + 2))"
export STEPKEY_CITUS_DIR="$dir"
export STEPKEY_TEST_POOL_MAX=${STEPKEY_TEST_POOL_MAX:-16}
unset DATABASE_URL
t=$SECONDS
npx vitest run -c vitest.citus.config.ts
echo "citus stage: listed files in $((SECONDS - t)) s"
t=$SECONDS
STEPKEY_CITUS_LAST=1 npx vitest run -c vitest.citus.config.ts
echo "citus stage: the kill test and rows on both workers asserted in $((SECONDS - t)) s"
